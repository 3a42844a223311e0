// The agent's control channel from the workload's side: attacks run inside
// the sandbox as ordinary execs (root with Docker's default capabilities, and
// an unprivileged user) and must all fail; garbage on the channel must not
// crash the agent; only signals from outside the sandbox stop it.
import fs from 'node:fs'
import net from 'node:net'
import crypto from 'node:crypto'
import test from 'ava'
import { hasRunc, parseProbe, probeBinary, startAgentContainer, type AgentContainer } from '../../../helpers/agent-container.js'
import { busyboxRootfs, hasBusybox } from '../../../helpers/busybox-rootfs.js'
import { until } from '../../../helpers/procs.js'
import { F, K, R, encodeFields } from '../../../../sandbox/backends/agent/protocol.js'

const ok = hasRunc && hasBusybox
const rt = ok ? test : test.skip
const title = (s: string): string => (ok ? s : `${s} (needs root, runc and busybox-static)`)

const DENIED = ['EACCES', 'EPERM']

function socketInode(pid: number, fd: number): string {
  return fs.readlinkSync(`/proc/${pid}/fd/${fd}`)
}

/** Every host process holding an fd on `target` (e.g. "socket:[123]"). */
function holders(target: string): number[] {
  const out: number[] = []
  for (const p of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue
    let fds: string[] = []
    try { fds = fs.readdirSync(`/proc/${p}/fd`) } catch { continue }
    for (const fd of fds) {
      try { if (fs.readlinkSync(`/proc/${p}/fd/${fd}`) === target) { out.push(Number(p)); break } } catch {}
    }
  }
  return out
}

async function agentAlive(c: AgentContainer): Promise<void> {
  const pong = await c.client.ping()
  if (pong.pid !== 1) throw new Error(`agent pid ${pong.pid}`)
  if (JSON.parse(c.runc('state', c.id)).status !== 'running') throw new Error('container not running')
  if (!fs.existsSync(`/proc/${c.hostPid}`)) throw new Error('agent process gone')
}

for (const user of ['root', 'alice']) {
  rt(title(`attacks from inside as ${user}: the control channel cannot be reached, signalled, traced or read`), async (t) => {
    const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t), binds: [{ source: probeBinary(), destination: '/probe' }] })
    // Host side: the agent is the only holder of the listening socket (fd 3).
    const sock = socketInode(c.hostPid, 3)
    t.regex(sock, /^socket:\[\d+\]$/)
    t.deepEqual(holders(sock), [c.hostPid])

    const r = await c.client.exec(['/probe', 'attacks'], { user })
    t.is(r.exitCode, 0, r.stderr.toString())
    const p = parseProbe(r.stdout.toString())
    t.log(r.stdout.toString().trim().replace(/\n/g, '; '))
    // (a) the socket through /proc, and the agent's mount namespace
    for (const k of ['open_proc1_fd3', 'readlink_proc1_fd3', 'opendir_proc1_root', 'open_proc1_ns_mnt']) {
      t.true(DENIED.includes(p[k]!), `${k}: ${p[k]}`)
    }
    // root (CAP_DAC_OVERRIDE) may list the fd numbers, never open or resolve one
    t.is(p.opendir_proc1_fd, user === 'root' ? 'ok' : 'EACCES')
    t.is(p.pidfd_getfd_3, 'EPERM')
    // (c) tracing, (d) memory and environment
    for (const k of ['open_proc1_environ', 'open_proc1_mem']) t.true(DENIED.includes(p[k]!), `${k}: ${p[k]}`)
    t.is(p.process_vm_readv, 'EPERM')
    t.is(p.ptrace_attach, 'EPERM')
    t.is(p.ptrace_seize, 'EPERM')
    t.is(p.ptrace_own_child, 'ok') // control: ptrace itself works in this sandbox
    // workloads never hold CAP_SYS_PTRACE, not even in the bounding set
    t.is(p.CapEff_sys_ptrace, '0')
    t.is(p.CapPrm_sys_ptrace, '0')
    t.is(p.CapBnd_sys_ptrace, '0')
    // (e) no unix socket reachable inside answers like the agent
    t.false(r.stdout.toString().includes('answered'))
    t.not(p.socketpair_peer_pid, '0')
    // (b) signals are "delivered" (kill returns 0) and change nothing
    for (const k of ['kill_KILL_1', 'kill_STOP_1', 'kill_TERM_1', 'kill_INT_1', 'kill_HUP_1']) t.is(p[k], user === 'root' ? 'ok' : 'EPERM', k)
    t.is(p.sigqueue_SI_USER_1, 'EPERM') // the kernel refuses forged si_code >= 0
    if (user === 'root') t.is(p.sigqueue_forged_TERM_1, 'ok') // accepted by the kernel, ignored by the agent
    await agentAlive(c)
    if (user === 'root') {
      await until(() => /ignored signal 15 from pid \d+ inside the sandbox \(code -1\)/.test(c.log()), 5000, 'forged SI_QUEUE logged as ignored')
      t.regex(c.log(), /ignored signal 15 from pid \d+ inside the sandbox \(code 0\)/)
    }
    t.notRegex(c.log(), /shutting down/)

    // the same from a shell: kill -9 1 and friends
    const sh = await c.client.exec('kill -9 1; kill -TERM 1; kill -INT 1; kill -HUP 1; kill -STOP 1; readlink /proc/1/fd/3; cat /proc/1/environ; find / -xdev -type s 2>/dev/null; echo end', { user })
    t.regex(sh.stderr.toString(), /Permission denied/)
    t.true(sh.stdout.toString().endsWith('end\n'))
    t.is(sh.stdout.toString(), 'end\n') // no socket anywhere in the sandbox's tree
    await agentAlive(c)
    t.is((await c.client.exec(['echo', 'still serving'])).stdout.toString(), 'still serving\n')

    // Workloads do not inherit the control socket (nor anything else of the agent's).
    const s = c.client.spawn(['sleep', '30'], { user })
    const pid = await s.pid
    const sleeper = c.procs().find((x) => x.comm === 'sleep')!
    t.truthy(sleeper, `sleep (pid ${pid} inside)`)
    const fds = fs.readdirSync(`/proc/${sleeper.hostPid}/fd`).map(Number).sort((a, b) => a - b)
    t.deepEqual(fds, [0, 1, 2])
    s.kill('SIGKILL')
    await s.wait()
  })
}

rt(title('a connection from inside the sandbox is refused even when the socket leaks into it (SO_PEERCRED)'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t), leakSocketTo: '/leaked.sock', binds: [{ source: probeBinary(), destination: '/probe' }] })
  const r = await c.client.exec(['/probe', 'leaked', '/leaked.sock'])
  t.regex(r.stdout.toString(), /^leaked refused-(eof|ECONNRESET)\n$/)
  t.is((await c.client.exec('test -e /tmp/pwned')).exitCode, 1, 'the forged exec must not have run')
  t.regex(c.log(), /refused a connection from pid \d+ inside the sandbox/)
  await agentAlive(c)

  // Control: with the check disabled the same probe gets in, so the check is what refused it.
  const open = await startAgentContainer(t, { rootfs: busyboxRootfs(t), leakSocketTo: '/leaked.sock', agentArgs: ['--no-peer-check'], binds: [{ source: probeBinary(), destination: '/probe' }] })
  const r2 = await open.client.exec(['/probe', 'leaked', '/leaked.sock'])
  t.regex(r2.stdout.toString(), /^leaked answered/)
  await until(async () => (await open.client.exec('test -e /tmp/pwned')).exitCode === 0, 5000, 'forged exec ran without the check')
})

/** Sends raw bytes on a fresh connection; returns whatever comes back before close (or timeout). */
async function raw(path: string, bytes: Buffer | Buffer[], waitMs = 2000): Promise<Buffer> {
  const s = net.createConnection({ path })
  await new Promise<void>((res, rej) => { s.once('connect', res); s.once('error', rej) })
  const chunks: Buffer[] = []
  s.on('data', (c: Buffer) => chunks.push(c))
  s.on('error', () => {})
  for (const b of Array.isArray(bytes) ? bytes : [bytes]) { s.write(b); if (Array.isArray(bytes)) await new Promise((r) => setTimeout(r, 2)) }
  await new Promise<void>((res) => { const tm = setTimeout(() => { s.destroy(); res() }, waitMs); s.on('close', () => { clearTimeout(tm); res() }) })
  return Buffer.concat(chunks)
}

function frame(type: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(5)
  h.writeUInt32BE(payload.length + 1)
  h[4] = type
  return Buffer.concat([h, payload])
}

function errnameOf(reply: Buffer): string | undefined {
  if (reply.length < 5 || reply[4] !== R.ERROR) return undefined
  const body = reply.subarray(5, 4 + reply.readUInt32BE(0))
  for (let i = 0; i + 5 <= body.length;) {
    const k = body[i]!
    const l = body.readUInt32BE(i + 1)
    if (k === K.ERRNAME) return body.subarray(i + 5, i + 5 + l).toString()
    i += 5 + l
  }
  return undefined
}

rt(title('malformed and random frames get errors or a closed connection, never a crash'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const sp = c.socketPath
  const u32 = (n: number): Buffer => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b }
  const cases: Array<[string, Buffer | Buffer[], string | null]> = [
    ['zero length', Buffer.from([0, 0, 0, 0, 1]), 'EPROTO'],
    ['huge length', Buffer.concat([u32(0xffffffff), Buffer.from([F.PING])]), 'EPROTO'],
    ['just over the limit', Buffer.concat([u32((1 << 20) + 2), Buffer.from([F.EXEC])]), 'EPROTO'],
    ['unknown type', frame(0x7f, Buffer.alloc(0)), 'EPROTO'],
    ['data first', frame(F.DATA, Buffer.from('hello')), 'EPROTO'],
    ['field overrun', frame(F.PING, Buffer.from([K.PATH, 0, 0, 0, 100, 1, 2, 3])), 'EPROTO'],
    ['exec without argv', frame(F.EXEC, encodeFields([[K.CWD, '/']])), 'EINVAL'],
    ['exec with argv and shell', frame(F.EXEC, encodeFields([[K.ARG, 'true'], [K.SHELL, 'true']])), 'EINVAL'],
    ['4-byte integer', frame(F.EXEC, Buffer.concat([encodeFields([[K.ARG, 'true']]), Buffer.from([K.TIMEOUT_MS, 0, 0, 0, 4, 0, 0, 0, 1])])), 'EINVAL'],
    ['cap too large', frame(F.EXEC, encodeFields([[K.ARG, 'true'], [K.MAX_OUTPUT, 2 ** 40]])), 'EINVAL'],
    ['NUL in argv', frame(F.EXEC, Buffer.concat([Buffer.from([K.ARG, 0, 0, 0, 3]), Buffer.from('a\0b')])), 'EINVAL'],
    ['read without path', frame(F.FREAD, Buffer.alloc(0)), 'EINVAL'],
    ['NUL in path', frame(F.FSTAT, Buffer.concat([Buffer.from([K.PATH, 0, 0, 0, 3]), Buffer.from('/\0x')])), 'EINVAL'],
    ['write then garbage instead of data', Buffer.concat([frame(F.FWRITE, encodeFields([[K.PATH, '/tmp/w']])), frame(F.PING, Buffer.alloc(0))]), 'EPROTO'],
    ['ping byte by byte', [...frame(F.PING, Buffer.alloc(0))].map((b) => Buffer.from([b])), null],
  ]
  for (const [name, bytes, errname] of cases) {
    const reply = await raw(sp, bytes)
    if (errname) t.is(errnameOf(reply), errname, name)
    else t.is(reply[4], R.PONG, name)
  }
  // a signal number out of range mid-exec is ignored; the exec completes
  const mid = await raw(sp, [frame(F.EXEC, encodeFields([[K.ARG, 'echo'], [K.ARG, 'x']])), frame(F.SIGNAL, encodeFields([[K.SIGNO, 999]]))])
  t.true(mid.includes(Buffer.from([R.EXIT])))
  // a client that ignores its stdin credit is cut off and its exec killed
  const over = await raw(sp, [frame(F.EXEC, encodeFields([[K.ARG, 'sleep'], [K.ARG, '30'], [K.FLAGS, 1]])),
    ...Array.from({ length: 24 }, () => frame(F.DATA, Buffer.alloc(64 * 1024)))], 5000)
  t.is(errnameOf(over.subarray(over.indexOf(Buffer.from([R.ERROR])) - 4)), 'EPROTO')
  await until(() => !c.procs().some((x) => x.comm === 'sleep'), 5000, 'overrunning exec killed')

  // Random frames: random bytes, random lengths, valid headers with random
  // TLV payloads of every request type except SHUTDOWN (a legitimate request).
  const rnd = (n: number): number => crypto.randomInt(n)
  const baseFds = fs.readdirSync(`/proc/${c.hostPid}/fd`).length
  const frames = (): Buffer[] => {
    const out: Buffer[] = []
    for (let i = 0; i < 1 + rnd(4); i++) {
      const kind = rnd(4)
      let type = [F.PING, F.EXEC, F.DATA, F.EOF, F.SIGNAL, F.FREAD, F.FWRITE, F.FLIST, F.FSTAT, F.FMKDIR, F.FREMOVE, F.FRENAME, F.TAR_PUT, F.TAR_GET, rnd(256)][rnd(15)]!
      if (type === F.SHUTDOWN) type = F.PING
      if (kind === 0) { const b = crypto.randomBytes(1 + rnd(600)); if (b.length >= 5 && b[4] === F.SHUTDOWN) b[4] = 0; out.push(b) }
      else if (kind === 1) out.push(Buffer.concat([u32(rnd(2 ** 32)), Buffer.from([type]), crypto.randomBytes(rnd(64))]))
      else {
        const fields: Buffer[] = []
        for (let j = 0; j < rnd(6); j++) {
          const key = [K.PATH, K.ARG, K.SHELL, K.ENV, K.FLAGS, K.MODE, K.TIMEOUT_MS, K.MAX_OUTPUT, K.USER, K.UID, K.SIGNO, rnd(256)][rnd(12)]!
          const v = rnd(3) === 0 ? crypto.randomBytes(8) : crypto.randomBytes(rnd(40))
          const len = rnd(10) === 0 ? rnd(2 ** 32) : v.length // sometimes a lying length
          fields.push(Buffer.concat([Buffer.from([key]), u32(len), v]))
        }
        out.push(frame(type, Buffer.concat(fields)))
      }
    }
    return out
  }
  let conns = 0
  for (let round = 0; round < 10; round++) {
    await Promise.all(Array.from({ length: 40 }, async () => { conns++; await raw(sp, frames(), 300).catch(() => {}) }))
    await agentAlive(c)
  }
  t.log(`${conns} connections of random frames`)
  await agentAlive(c)
  t.is((await c.client.exec(['echo', 'fine'])).stdout.toString(), 'fine\n')
  await until(() => fs.readdirSync(`/proc/${c.hostPid}/fd`).length <= baseFds, 10000, 'connections and pipes released')
  await until(() => c.procs().length === 1, 10000, 'no exec or worker left')
  t.true(c.rss().hwmKb < 16 * 1024, `agent peak RSS ${c.rss().hwmKb} kB`)
})

rt(title('SIGTERM from outside: forwarded to workloads, results delivered, then the agent exits'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t), agentArgs: ['--grace-ms', '4000'] })
  const polite = c.client.spawn(['sh', '-c', 'trap "echo got TERM; exit 7" TERM; echo ready; while :; do sleep 0.1; done'])
  const stubborn = c.client.spawn(['sh', '-c', 'trap "" TERM; echo ready; while :; do sleep 0.1; done'])
  let out = ''
  const rd = (async () => { for await (const ch of polite.stdout) out += ch.toString() })()
  let out2 = ''
  const rd2 = (async () => { for await (const ch of stubborn.stdout) out2 += ch.toString() })()
  await until(() => out.includes('ready') && out2.includes('ready'), 5000, 'workloads ready')
  c.runc('kill', c.id, 'TERM')
  const e1 = await polite.wait()
  await rd
  t.is(e1.exitCode, 7)
  t.is(out, 'ready\ngot TERM\n')
  // new work is refused while shutting down
  await t.throwsAsync(c.client.exec(['true']), { code: 'SANDBOX_GONE' })
  t.true((await c.client.ping()).shuttingDown)
  const e2 = await stubborn.wait() // killed with SIGKILL after the grace period
  await rd2
  t.is(e2.signal, 'SIGKILL')
  await until(() => JSON.parse(c.runc('state', c.id)).status === 'stopped', 10000, 'container stopped')
  t.regex(c.log(), /shutting down on signal 15/)
  t.regex(c.log(), /exiting/)
  await t.throwsAsync(c.client.ping(), { code: 'SANDBOX_GONE' })
})

rt(title('shutdown() over the channel does the same without a signal'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const p = c.client.spawn(['sleep', '30'])
  await p.pid
  await c.client.shutdown(2000)
  t.is((await p.wait()).signal, 'SIGTERM')
  await until(() => JSON.parse(c.runc('state', c.id)).status === 'stopped', 10000, 'container stopped')
  await t.throwsAsync(c.client.exec(['true']), { code: 'SANDBOX_GONE' })
})
