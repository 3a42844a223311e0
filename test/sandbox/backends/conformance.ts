// Backend-independent checks every sandbox backend must pass. A backend's
// test file calls runConformance(test, makeBackend) with a factory for its
// backend; each check creates its own sandbox on a busybox rootfs and deletes
// it (and checks nothing is left) even when the check fails.
import fs from 'node:fs'
import path from 'node:path'
import type { ExecutionContext, TestFn } from 'ava'
import type { SandboxBackend, SandboxHandle, SandboxSpec } from '../../../sandbox/backends/types.js'
import { busyboxRootfs } from '../../helpers/busybox-rootfs.js'
import { tmpDir, until } from '../../helpers/procs.js'

export interface ConformanceOptions {
  /** Prefix of the sandbox ids (unique per run). */
  prefix?: string
  /** Skip everything (e.g. no runtime on this machine), with this reason. */
  skip?: string
}

/** Docker's default capabilities as the CapEff mask. */
export const DOCKER_CAP_EFF = 0x00000000a80425fbn

let seq = 0

export async function sandbox(t: ExecutionContext, backend: SandboxBackend, extra: Partial<SandboxSpec> = {}, prefix = 'conf'): Promise<SandboxHandle> {
  const rootfs = extra.rootfsDir ?? busyboxRootfs(t)
  const stateDir = path.join(tmpDir(t, 'strata-sb-'), 's')
  const id = `${prefix}-${process.pid}-${++seq}-${Math.random().toString(36).slice(2, 8)}`
  let h: SandboxHandle | undefined
  t.teardown(async () => {
    if (h) await h.delete()
  })
  h = await backend.create({ id, rootfsDir: rootfs, stateDir, env: {}, ...extra })
  return h
}

export function runConformance(test: TestFn, makeBackend: () => SandboxBackend, opts: ConformanceOptions = {}): void {
  const serial = opts.skip ? test.serial.skip : test.serial
  const prefix = opts.prefix ?? 'conf'
  const sb = (t: ExecutionContext, extra: Partial<SandboxSpec> = {}): Promise<SandboxHandle> => sandbox(t, makeBackend(), extra, prefix)

  serial('conformance: exec echo hi through the agent; env, workdir, hostname', async (t) => {
    const h = await sb(t, { env: { FOO: 'bar' }, workdir: '/work', hostname: 'box1' })
    t.true(h.pid > 0)
    const r = await h.agent.exec(['echo', 'hi'])
    t.is(r.exitCode, 0)
    t.is(r.stdout.toString(), 'hi\n')
    const r2 = await h.agent.exec('echo $FOO; pwd; hostname')
    t.is(r2.stdout.toString(), 'bar\n/work\nbox1\n')
    const st = await h.status()
    t.is(st.state, 'running')
    t.false(st.oomKilled)
  })

  serial('conformance: no network by default (loopback only, and it is up)', async (t) => {
    const h = await sb(t)
    const dev = (await h.agent.exec(['cat', '/proc/net/dev'])).stdout.toString()
    const ifaces = dev.split('\n').slice(2).map((l) => l.split(':')[0]!.trim()).filter(Boolean)
    t.deepEqual(ifaces, ['lo'])
    const link = await h.agent.exec(['ip', 'link'])
    t.regex(link.stdout.toString(), /lo: <LOOPBACK,UP/)
    t.notRegex(link.stdout.toString(), /eth|ens|veth/)
    const out = await h.agent.exec('wget -T 2 -q -O- http://1.1.1.1/ 2>&1; echo rc=$?')
    t.regex(out.stdout.toString(), /rc=[1-9]/)
  })

  serial('conformance: capabilities are Docker\'s default set; NoNewPrivs; seccomp mode 2', async (t) => {
    const h = await sb(t)
    const s = (await h.agent.exec(['cat', '/proc/self/status'])).stdout.toString()
    const field = (n: string): string => new RegExp(`^${n}:\\s+(\\S+)`, 'm').exec(s)?.[1] ?? ''
    t.is(BigInt(`0x${field('CapEff')}`), DOCKER_CAP_EFF)
    t.is(BigInt(`0x${field('CapBnd')}`), DOCKER_CAP_EFF)
    t.is(field('NoNewPrivs'), '1')
    t.is(field('Seccomp'), '2')
    // not root-equivalent: as alice the effective set is empty
    const a = (await h.agent.exec(['cat', '/proc/self/status'], { user: 'alice' })).stdout.toString()
    t.regex(a, /^CapEff:\s+0+$/m)
  })

  serial('conformance: /proc/kcore and friends are masked, /proc/sys is read-only, /sys is read-only', async (t) => {
    const h = await sb(t)
    // masked: absent (a kernel without it) or empty; at least one of them exists on any kernel
    const masked = await h.agent.exec('for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug /proc/latency_stats; do [ -e $f ] && echo "$f $(cat $f | wc -c)"; done; true')
    const lines = masked.stdout.toString().trim().split('\n').filter(Boolean)
    t.log(lines.join('; '))
    t.true(lines.length >= 1)
    for (const l of lines) t.regex(l, / 0$/)
    // on the host the same files have content
    if (fs.existsSync('/proc/timer_list')) t.true(fs.readFileSync('/proc/timer_list').length > 0)
    const mi = (await h.agent.exec(['cat', '/proc/self/mountinfo'])).stdout.toString().split('\n')
    const procSys = mi.find((l) => l.split(' ')[4] === '/proc/sys')
    t.truthy(procSys)
    t.true(procSys!.split(' ')[5]!.split(',').includes('ro'))
    const sys = await h.agent.exec('echo 1 > /proc/sys/vm/overcommit_memory')
    t.not(sys.exitCode, 0)
    const sysfs = await h.agent.exec('touch /sys/x')
    t.not(sysfs.exitCode, 0)
  })

  serial('conformance: seccomp denies unshare, mount and the keyring with EPERM', async (t) => {
    const h = await sb(t)
    const u = await h.agent.exec('unshare -n true')
    t.not(u.exitCode, 0)
    t.regex(u.stderr.toString(), /Operation not permitted/)
    const m = await h.agent.exec('mkdir -p /mnt/x && mount -t tmpfs none /mnt/x')
    t.not(m.exitCode, 0)
    t.regex(m.stderr.toString(), /Operation not permitted|permission denied/i)
    // nothing was mounted
    const mi = (await h.agent.exec(['cat', '/proc/self/mountinfo'])).stdout.toString()
    t.notRegex(mi, /\/mnt\/x/)
  })

  serial('conformance: the pids limit stops a fork bomb; the sandbox and the host survive', async (t) => {
    const h = await sb(t, { resources: { pids: 64 } })
    // 300 background sleeps from a subshell (a shell that cannot fork may exit); then count the
    // processes with shell builtins only (no fork needed)
    const r = await h.agent.exec('(i=0; while [ $i -lt 300 ]; do sleep 5 & i=$((i+1)); done) 2>/dev/null; set -- /proc/[0-9]*; echo $#', { timeoutMs: 20000 })
    t.false(r.timedOut)
    const n = Number(r.stdout.toString().trim())
    t.log(`processes inside at the limit: ${n}`)
    t.true(n <= 64 && n >= 40, `processes at the limit: ${n}`)
    await until(async () => { await h.agent.exec('kill -9 -1'); return true }, 10000, 'kill the sleeps')
    const bomb = await h.agent.exec('bomb() { bomb | bomb & }; bomb; sleep 2; echo done', { timeoutMs: 15000 }).catch((e: Error) => e)
    t.log(bomb instanceof Error ? `bomb: ${bomb.message}` : `bomb exit ${bomb.exitCode} signal ${bomb.signal}`)
    await until(async () => {
      await h.agent.exec('kill -9 -1').catch(() => {})
      const c = await h.agent.exec(['echo', 'alive'])
      return c.stdout.toString() === 'alive\n'
    }, 20000, 'sandbox usable after the fork bomb')
    t.is((await h.status()).state, 'running')
  })

  serial('conformance: a memory hog is OOM-killed and the status reports it', async (t) => {
    const h = await sb(t, { resources: { memoryMiB: 64 } })
    t.false((await h.status()).oomKilled)
    t.is(h.oomKills(), 0)
    // 256 MiB in a shell variable: well past the limit
    const r = await h.agent.exec('x=$(head -c 268435456 /dev/zero | tr "\\0" a); echo ${#x}', { timeoutMs: 60000 })
    t.not(r.exitCode, 0)
    const st = await until(async () => { const s = await h.status(); return s.oomKilled ? s : null }, 10000, 'oomKilled')
    t.true(st.oomKills >= 1)
    // the cheap read (no runtime call) agrees
    t.is(h.oomKills(), st.oomKills)
    t.is(st.state, 'running') // the hog died, the sandbox did not
    t.is((await h.agent.exec(['echo', 'ok'])).stdout.toString(), 'ok\n')
  })

  serial('conformance: kill stops the sandbox; delete removes everything', async (t) => {
    const h = await sb(t)
    const pid = h.pid
    await h.kill()
    await until(async () => (await h.status()).state === 'stopped', 10000, 'stopped')
    await t.throwsAsync(h.agent.exec(['true']), { code: 'SANDBOX_GONE' } as never)
    await h.delete()
    t.false(fs.existsSync(h.stateDir))
    t.false(fs.existsSync(`/proc/${pid}/cmdline`) && fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('/.strata/agent'))
    await h.delete() // idempotent
  })

  serial('conformance: adopt re-attaches to a running sandbox', async (t) => {
    const backend = makeBackend()
    const h = await sandbox(t, backend, {}, prefix)
    await h.agent.exec('echo persisted > /tmp/mark')
    const again = await makeBackend().adopt(h.id, h.stateDir)
    t.is(again.pid, h.pid)
    t.is((await again.agent.exec(['cat', '/tmp/mark'])).stdout.toString(), 'persisted\n')
    await again.delete()
    await t.throwsAsync(makeBackend().adopt(h.id, h.stateDir), { code: 'SANDBOX_GONE' } as never)
  })

  serial('conformance: bad specs are typed errors', async (t) => {
    const backend = makeBackend()
    const dir = tmpDir(t, 'strata-bad-')
    const base = { id: 'bad-spec', rootfsDir: dir, stateDir: path.join(dir, 's') }
    for (const spec of [
      { ...base, id: '../x' },
      { ...base, rootfsDir: 'relative' },
      { ...base, rootfsDir: path.join(dir, 'missing') },
      { ...base, resources: { memoryMiB: -1 } },
      { ...base, resources: { pids: 1.5 } },
      { ...base, network: 'bridge' },
      { ...base, env: { 'A=B': 'x' } },
    ]) {
      await t.throwsAsync(backend.create(spec as SandboxSpec), { code: 'INVALID_ARGUMENT' } as never, JSON.stringify(spec))
    }
  })
}
