// Exec through the agent running as PID 1 of a runc container with a busybox
// rootfs: argv and shell, env, cwd, users, stdin streaming, exit codes and
// signals, timeouts, output caps, zombie reaping, clients that go away.
import os from 'node:os'
import test from 'ava'
import { hasRunc, startAgentContainer } from '../../../helpers/agent-container.js'
import { busyboxRootfs, hasBusybox } from '../../../helpers/busybox-rootfs.js'
import { until } from '../../../helpers/procs.js'

const ok = hasRunc && hasBusybox
const rt = ok ? test : test.skip
const title = (s: string): string => (ok ? s : `${s} (needs root, runc and busybox-static)`)

rt(title('argv and shell commands, env, cwd, exit codes are data'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t), env: ['SANDBOX_VAR=from-config'] })
  const r1 = await client.exec(['echo', 'hello', 'world'])
  t.is(r1.exitCode, 0)
  t.is(r1.signal, null)
  t.is(r1.stdout.toString(), 'hello world\n')
  t.false(r1.truncated)
  t.true(r1.pid > 1)

  const r2 = await client.exec('echo "$SANDBOX_VAR $FOO" >&2; exit 42', { env: { FOO: 'bar' } })
  t.is(r2.exitCode, 42)
  t.is(r2.stderr.toString(), 'from-config bar\n')
  t.is(r2.stdout.length, 0)

  const r3 = await client.exec(['sh', '-c', 'echo "[$SANDBOX_VAR]"; env | grep -c .'], { env: { SANDBOX_VAR: undefined } })
  t.true(r3.stdout.toString().startsWith('[]\n'))
  const r4 = await client.exec(['env'], { clearEnv: true, env: { ONLY: '1' } })
  t.deepEqual(r4.stdout.toString().trim().split('\n').sort(), ['HOME=/root', 'ONLY=1', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'])

  t.is((await client.exec('pwd', { cwd: '/tmp' })).stdout.toString(), '/tmp\n')
  t.is((await client.exec(['pwd'])).stdout.toString(), '/\n')
  // argv is not shell-interpreted
  t.is((await client.exec(['echo', '$HOME', '*', '; ls'])).stdout.toString(), '$HOME * ; ls\n')
  // PATH lookup uses the exec's PATH, not the agent's
  const r5 = await client.exec(['busybox', 'true'], { env: { PATH: '/nowhere' } }).catch((e: { code: string }) => e)
  t.is((r5 as { code: string }).code, 'NOT_FOUND')
})

rt(title('users: name via /etc/passwd, numeric uid/gid, supplementary groups, HOME'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const alice = await client.exec('id -u; id -g; id -G; echo $HOME $USER; pwd', { user: 'alice', cwd: '/home/alice' })
  t.is(alice.stdout.toString(), '1000\n1000\n1000 50\n/home/alice alice\n/home/alice\n')
  const num = await client.exec('id -u; id -g', { uid: 4242, gid: 4343 })
  t.is(num.stdout.toString(), '4242\n4343\n')
  const numUser = await client.exec('id -u; id -g; echo $HOME', { user: 1000 })
  t.is(numUser.stdout.toString(), '1000\n1000\n/home/alice\n')
  const denied = await client.exec(['cat', '/root/secret'], { user: 'alice' })
  t.is(denied.exitCode, 1)
  t.regex(denied.stderr.toString(), /Permission denied/)
  t.is((await client.exec(['cat', '/root/secret'])).stdout.toString(), 'for root only\n')
  const e = await t.throwsAsync(client.exec('true', { user: 'mallory' }), { code: 'NOT_FOUND' })
  t.regex(e!.message, /mallory/)
  // cwd is entered as the user: a directory the user may not enter fails the start
  await t.throwsAsync(client.exec('true', { user: 'alice', cwd: '/root' }), { code: 'SANDBOX_PERMISSION_DENIED' })
  await t.throwsAsync(client.exec('true', { cwd: '/does/not/exist' }), { code: 'NOT_FOUND' })
  await t.throwsAsync(client.exec(['/no/such/binary']), { code: 'NOT_FOUND' })
  const notExec = await t.throwsAsync(client.exec(['/etc/passwd']), { code: 'SANDBOX_PERMISSION_DENIED' })
  t.is((notExec as unknown as { detail: { errno: string } }).detail.errno, 'EACCES')
})

rt(title('stdin: buffers, streams, interactive spawn, 8 MiB through cat with backpressure'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  t.is((await client.exec('cat', { stdin: 'one line\n' })).stdout.toString(), 'one line\n')
  t.is((await client.exec('wc -c', { stdin: new Uint8Array(0) })).stdout.toString().trim(), '0')
  async function* gen(): AsyncIterable<Uint8Array> {
    for (let i = 0; i < 3; i++) { yield Buffer.from(`chunk ${i}\n`); await new Promise((r) => setTimeout(r, 20)) }
  }
  t.is((await client.exec('cat', { stdin: gen() })).stdout.toString(), 'chunk 0\nchunk 1\nchunk 2\n')
  // no stdin option: /dev/null, so a reader ends at once
  t.is((await client.exec('cat')).stdout.length, 0)

  const p = client.spawn(['sh', '-c', 'while read l; do echo "got $l"; done; echo bye'])
  const lines: string[] = []
  const reader = (async () => { for await (const c of p.stdout) lines.push(c.toString()) })()
  p.stdin.write('a\n')
  await until(() => lines.join('').includes('got a'), 5000, 'echo of a')
  p.stdin.write('b\n')
  await until(() => lines.join('').includes('got b'), 5000, 'echo of b')
  p.stdin.end()
  const exit = await p.wait()
  await reader
  t.is(exit.exitCode, 0)
  t.is(lines.join(''), 'got a\ngot b\nbye\n')
  t.true((await p.pid) > 1)

  // 8 MiB in and out at once: the stdin window and the stdout backpressure
  // must not deadlock each other.
  const big = Buffer.alloc(8 * 1024 * 1024)
  for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 13)) & 0xff
  const cat = client.spawn(['cat'])
  const chunks: Buffer[] = []
  const done = (async () => { for await (const c of cat.stdout) chunks.push(c as Buffer) })()
  for (let off = 0; off < big.length; off += 100_000) {
    if (!cat.stdin.write(big.subarray(off, off + 100_000))) await new Promise((r) => cat.stdin.once('drain', r))
  }
  cat.stdin.end()
  await done
  t.is((await cat.wait()).exitCode, 0)
  t.true(Buffer.concat(chunks).equals(big))
})

rt(title('signals: killed by a signal, kill() from the client, the process group'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const seg = await c.client.exec('kill -SEGV $$')
  t.is(seg.exitCode, null)
  t.is(seg.signal, 'SIGSEGV')

  const p = c.client.spawn('sleep 30 & sleep 30 & echo up; wait')
  let out = ''
  const rd = (async () => { for await (const ch of p.stdout) out += ch.toString() })()
  await until(() => out.includes('up'), 5000, 'spawned')
  await until(() => c.procs().filter((x) => x.comm === 'sleep').length === 2, 5000, 'two sleeps')
  p.kill('SIGTERM')
  const exit = await p.wait()
  await rd
  t.is(exit.signal, 'SIGTERM')
  await until(() => c.procs().every((x) => x.comm !== 'sleep'), 5000, 'the whole group got SIGTERM')

  // kill({ group: false }) signals only the main process
  const q = c.client.spawn('trap "echo trapped; exit 5" USR1; sleep 0.1; while true; do sleep 0.05; done')
  let qout = ''
  const qrd = (async () => { for await (const ch of q.stdout) qout += ch.toString() })()
  await q.pid
  await new Promise((r) => setTimeout(r, 200))
  q.kill('SIGUSR1', { group: false })
  const qe = await q.wait()
  await qrd
  t.is(qe.exitCode, 5)
  t.is(qout, 'trapped\n')
})

rt(title('timeout kills the whole process group with SIGKILL and reports timedOut'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const t0 = Date.now()
  const r = await c.client.exec('sleep 600 & sleep 600 & (sleep 600; echo never) & echo started; wait', { timeoutMs: 500 })
  // a hang guard, not timing: without the timeout the exec waits 10 min for the sleeps
  t.log(`timed out after ${Date.now() - t0} ms`)
  t.true(Date.now() - t0 < 60_000)
  t.true(r.timedOut)
  t.is(r.signal, 'SIGKILL')
  t.is(r.exitCode, null)
  t.is(r.stdout.toString(), 'started\n')
  // the timeout's 500 ms, not the sleeps' 10 min
  t.true(r.durationMs >= 500 && r.durationMs < 60_000, `durationMs ${r.durationMs}`)
  await until(() => c.procs().every((x) => x.comm !== 'sleep'), 5000, 'no sleep left')
  const fast = await c.client.exec('echo quick', { timeoutMs: 5000 })
  t.false(fast.timedOut)
})

rt(title('output cap keeps head and tail, counts the dropped bytes; yes does not grow the agent'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  let expected = ''
  for (let i = 1; i <= 200000; i++) expected += `${i}\n`
  const r = await c.client.exec('seq 1 200000; echo err >&2', { maxOutputBytes: 1001 })
  t.true(r.truncated)
  t.is(r.stdout.length, 1001)
  t.is(r.totalStdout, expected.length)
  t.is(r.droppedStdout, expected.length - 1001)
  t.is(r.stdout.subarray(0, 501).toString(), expected.slice(0, 501))
  t.is(r.stdout.subarray(501).toString(), expected.slice(-500))
  t.is(r.stderr.toString(), 'err\n')
  t.is(r.droppedStderr, 0)
  // under the cap nothing is dropped
  const small = await c.client.exec('seq 1 100', { maxOutputBytes: 1000 })
  t.false(small.truncated)
  t.is(small.stdout.toString(), expected.slice(0, small.totalStdout))

  const before = c.rss()
  const y = await c.client.exec('yes', { timeoutMs: 3000, maxOutputBytes: 1 << 20 })
  const after = c.rss()
  t.true(y.timedOut)
  t.is(y.stdout.length, 1 << 20)
  t.true(y.droppedStdout > 8 * (1 << 20), `only ${y.droppedStdout} bytes went through`)
  t.true(y.stdout.subarray(0, 8).equals(Buffer.from('y\ny\ny\ny\n')))
  t.true(y.stdout.subarray(-8).equals(Buffer.from('y\ny\ny\ny\n')))
  t.log(`yes: ${(y.totalStdout / 1048576).toFixed(0)} MiB in 3 s; agent VmHWM ${before.hwmKb} -> ${after.hwmKb} kB`)
  t.true(after.hwmKb < 12 * 1024, `agent peak RSS ${after.hwmKb} kB`)

  // streaming with spawn and no cap: backpressure instead of buffering
  const s = c.client.spawn('yes')
  await s.pid
  await new Promise((r) => setTimeout(r, 1000)) // nobody reads stdout meanwhile
  t.true(c.rss().hwmKb < 12 * 1024)
  s.kill('SIGKILL')
  s.stdout.resume()
  t.is((await s.wait()).signal, 'SIGKILL')
})

rt(title('zombies are reaped, including orphans re-parented to PID 1'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  // Each subshell forks a sleep and exits, so the sleeps are orphans of PID 1.
  const r = await c.client.exec('for i in 1 2 3 4 5; do (sleep 3 &); done; echo spawned')
  t.is(r.stdout.toString(), 'spawned\n')
  const agent = c.hostPid
  await until(() => c.procs().filter((p) => p.comm === 'sleep' && p.ppid === agent).length === 5, 2500, 'orphans under PID 1')
  await until(() => !c.procs().some((p) => p.comm === 'sleep'), 15000, 'orphans gone')
  t.deepEqual(c.procs().filter((p) => p.state === 'Z'), [])
  // and a burst of short execs leaves nothing behind either
  await Promise.all(Array.from({ length: 30 }, (_, i) => c.client.exec(['sh', '-c', `exit ${i % 3}`])))
  await until(() => c.procs().length === 1, 5000, 'only the agent left')
  t.deepEqual(c.procs().map((p) => p.hostPid), [agent])
})

rt(title('a client that goes away kills its exec; a background writer does not hang the exec'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const ac = new AbortController()
  const p = c.client.exec('sleep 60; echo done', { signal: ac.signal })
  await until(() => c.procs().some((x) => x.comm === 'sleep'), 5000, 'sleep running')
  ac.abort()
  await t.throwsAsync(p, { code: 'CANCELLED' })
  await until(() => !c.procs().some((x) => x.comm === 'sleep'), 5000, 'sleep killed with its client')

  // `cmd &` keeps the stdout pipe open; the exec still returns shortly after the main process.
  const t0 = Date.now()
  const r = await c.client.exec('sleep 600 & echo main done')
  t.log(`returned after ${Date.now() - t0} ms`)
  // it did not wait for the background writer's end: that is still running
  t.true(c.procs().some((x) => x.comm === 'sleep'), 'the background sleep outlived the exec')
  t.is(r.stdout.toString(), 'main done\n')
  t.is(r.exitCode, 0)

  // many execs at once on one agent
  const rs = await Promise.all(Array.from({ length: 100 }, (_, i) => c.client.exec(['sh', '-c', `echo ${i}`])))
  t.deepEqual(rs.map((x) => x.stdout.toString()), Array.from({ length: 100 }, (_, i) => `${i}\n`))
})

rt(title('a fork bomb hits the pids limit; the agent keeps answering and the timeout cleans it up'), async (t) => {
  const c = await startAgentContainer(t, { rootfs: busyboxRootfs(t) }) // pids limit 512
  // the bomb is started from a subshell (the main shell's one fork comes before any bomb process,
  // so it cannot be refused: a shell whose own fork is refused exits 2); the main shell then spins
  // on builtins until the timeout kills the group (the timeout leaves the bomb time to reach the
  // limit on a loaded machine; the cgroup's own counters are read, not a scan of /proc, which
  // itself slows down with 500 processes)
  const bomb = c.client.exec('(f() { f | f & }; f); while :; do :; done', { timeoutMs: 8000 })
  // (awaited below; a failed assertion before that must not leave its rejection unhandled when teardown closes the client)
  bomb.catch(() => undefined)
  // the limit refused forks; the count stays at it (it also drops at once: a bomb process whose
  // fork was refused exits, so a sample can be far below the limit). The kernel charges a fork
  // first and reverts it when over the limit, so a sample taken in that window reads one above
  // the limit per fork in flight: at most one per CPU.
  await until(() => c.pids().refused > 0, 7500, 'the bomb hitting the pids limit')
  const sample = c.pids().current
  t.true(sample <= 512 + os.cpus().length, `pids.current ${sample} with pids.max 512`)
  t.is((await c.client.ping()).pid, 1) // ping needs no fork
  const during = await c.client.exec(['true']).then(() => 'ran', (e: { code: string }) => e.code)
  t.true(['ran', 'SANDBOX_RESOURCE_EXHAUSTED'].includes(during), during)
  const r = await bomb
  t.true(r.timedOut, `the bomb's shell ended before its timeout: ${JSON.stringify({ exitCode: r.exitCode, signal: r.signal, stderr: r.stderr.toString().slice(-300) })}`)
  await until(() => c.procs().length === 1, 10000, 'every bomb process killed with its group and reaped')
  t.is((await c.client.exec(['echo', 'after'])).stdout.toString(), 'after\n')
})
