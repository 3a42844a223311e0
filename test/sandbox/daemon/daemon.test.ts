// The node daemon through the SDK, as a real process on a real cluster:
// create → exec → files → processes → kill/delete, datasets, auth,
// idempotency, batch creates, lifetimes, crashes reported with their reason,
// admission control, restart re-adoption, and typed errors for bad input.
import test from 'ava'
import fs from 'node:fs'
import { StrataError } from '../../../fs/common/errors.js'
import { Strata, type Sandbox } from '../../../sandbox/sdk/index.js'
import { codeOf as code } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'
import { busyboxRootfs } from '../../helpers/busybox-rootfs.js'
import { importPath } from '../../../sandbox/image/oci/import.js'
import path from 'node:path'
import { layerMounts, nodeTraces, startDaemon, useDaemonCluster } from './helpers.js'

const env = useDaemonCluster(test)


test.serial('create, exec, files, dataset, labels, kill and delete through the SDK', async (t) => {
  const d = await startDaemon(t, env)
  const s = d.sdk
  const sb = await s.sandboxes.create({
    image: 'bb:1', labels: { job: 'j1' }, env: { FOO: 'bar' }, workdir: '/work',
    mounts: [{ source: '/datasets/t', target: '/data' }], resources: { cpu: 0.5, memoryMiB: 128, pids: 64 },
  })
  t.regex(sb.id, /^sb-[a-z0-9]{12}$/)
  t.is(sb.info.state, 'running')
  t.is(sb.info.image?.ref, 'bb:1')
  t.true((sb.info.createMs ?? 0) > 0)

  const r = await sb.exec('echo $FOO; pwd; echo oops >&2; exit 3')
  t.is(r.exitCode, 3)
  t.is(r.stdout, 'bar\n/work\n')
  t.is(r.stderr, 'oops\n')
  t.false(r.truncated)
  t.is((await sb.exec(['cat'], { stdin: 'piped' })).stdout, 'piped')
  const timed = await sb.exec(['sleep', '30'], { timeoutMs: 300 })
  t.true(timed.timedOut)
  t.is(timed.signal, 'SIGKILL')

  // output cap: head and tail kept, the rest counted
  const big = await sb.exec('yes | head -c 200000', { maxOutputBytes: 1000 })
  t.true(big.truncated)
  t.is(big.stdoutBytes.length, 1000)
  t.is(big.droppedStdout, 199000)

  // the dataset: bytes equal the DFS, writes fail read-only
  for (const [name, data] of env.dataset) t.true((await sb.files.read(`/data/${name}`)).equals(data), name)
  t.is((await sb.exec(['sh', '-c', 'echo x > /data/new'])).exitCode, 1)
  t.is(await code(sb.files.write('/data/new', 'x')), 'SANDBOX_READ_ONLY')

  // files
  await sb.files.write('/work/a/b.txt', 'hello', { mkdirs: true, mode: 0o600 })
  t.is((await sb.files.read('/work/a/b.txt')).toString(), 'hello')
  const st = await sb.files.stat('/work/a/b.txt')
  t.is(st.size, 5)
  t.is(st.mode & 0o777, 0o600)
  t.deepEqual((await sb.files.list('/work/a')).map((e) => e.name), ['b.txt'])
  await sb.exec(['ln', '-s', 'b.txt', '/work/a/link'])
  t.is((await sb.files.stat('/work/a/link')).type, 'file', 'stat follows symlinks by default')
  t.is((await sb.files.stat('/work/a/link', { followSymlinks: false })).type, 'symlink')
  await sb.files.remove('/work/a/link')
  const chunks2: Buffer[] = []
  for await (const c of await sb.files.readStream('/work/a/b.txt')) chunks2.push(c as Buffer)
  t.is(Buffer.concat(chunks2).toString(), 'hello')
  await sb.files.rename('/work/a/b.txt', '/work/a/c.txt')
  await sb.files.mkdir('/work/d/e', { parents: true })
  await sb.files.remove('/work/d', { recursive: true })
  t.is(await code(sb.files.stat('/work/d')), 'NOT_FOUND')
  t.is(await code(sb.files.read('/nope')), 'NOT_FOUND')

  // a process: streamed stdin and stdout, then a signal
  const p = await sb.spawn(['cat'])
  const chunks: Buffer[] = []
  p.stdout.on('data', (c: Buffer) => chunks.push(c))
  p.stderr.resume()
  p.stdin.write('one ')
  p.stdin.end('two')
  const exit = await p.wait()
  t.is(exit.exitCode, 0)
  t.is(Buffer.concat(chunks).toString(), 'one two')
  const sleeper = await sb.spawn(['sleep', '60'])
  sleeper.stdout.resume()
  sleeper.stderr.resume()
  await sleeper.kill('SIGTERM')
  t.is((await sleeper.wait()).signal, 'SIGTERM')

  // list by labels
  const other = await s.sandboxes.create({ image: 'bb:1', labels: { job: 'j2' } })
  t.deepEqual((await s.sandboxes.list({ labels: { job: 'j1' } })).map((x) => x.id), [sb.id])
  t.is((await s.sandboxes.list()).length, 2)

  // kill keeps the record; exec on it is SANDBOX_GONE; delete forgets it
  const killed = await sb.kill()
  t.is(killed.state, 'stopped')
  t.is(killed.stop?.reason, 'killed')
  t.is(await code(sb.exec('true')), 'SANDBOX_GONE')
  t.is((await s.sandboxes.get(sb.id)).info.state, 'stopped')
  await sb.delete()
  t.is(await code(s.sandboxes.get(sb.id)), 'SANDBOX_NOT_FOUND')
  t.is(await code(sb.delete()), 'SANDBOX_NOT_FOUND')
  await other.delete()
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
})

test.serial('two sandboxes never see each other\'s writes; the image stays unchanged', async (t) => {
  const d = await startDaemon(t, env)
  const [a, b] = await Promise.all([d.sdk.sandboxes.create({ image: 'bb:1' }), d.sdk.sandboxes.create({ image: 'bb:1' })])
  await a!.files.write('/tmp/mine', 'a')
  await a!.files.write('/etc/passwd', 'changed')
  t.is(await code(b!.files.stat('/tmp/mine')), 'NOT_FOUND')
  t.regex((await b!.files.read('/etc/passwd')).toString(), /^root:x:0:0/)
  await a!.delete()
  await b!.delete()
})

test.serial('a create right after a tag moves runs the new image; right after the tag is removed it fails', async (t) => {
  const d = await startDaemon(t, env)
  const root = busyboxRootfs(t)
  const first = await importPath(env.store, root, { name: 'retag', tag: '1' })
  const a = await d.sdk.sandboxes.create({ image: 'retag:1' })
  t.is(a.info.image?.digest, first.digest)
  fs.writeFileSync(path.join(root, 'version'), 'two\n')
  const second = await importPath(env.store, root, { name: 'retag', tag: '1' })
  t.not(second.digest, first.digest)
  // no wait: the very next create sees the moved tag
  const b = await d.sdk.sandboxes.create({ image: 'retag:1' })
  t.is(b.info.image?.digest, second.digest)
  t.is((await b.exec(['cat', '/version'])).stdout, 'two\n')
  await env.store.removeTag('retag', '1')
  t.is(await code(d.sdk.sandboxes.create({ image: 'retag:1' })), 'IMAGE_NOT_FOUND')
  // by digest it stays reachable
  const c = await d.sdk.sandboxes.create({ image: `retag@${second.digest}` })
  t.is(c.info.image?.digest, second.digest)
  for (const sb of [a, b, c]) await sb.delete()
})

test.serial('bearer token: missing or wrong is UNAUTHENTICATED; the token file is 0600; /v1/health needs none', async (t) => {
  const d = await startDaemon(t, env)
  t.is(fs.statSync(d.config.tokenFile).mode & 0o777, 0o600)
  const wrong = new Strata({ endpoint: `http://${d.address}`, token: 'x'.repeat(64) })
  t.teardown(() => wrong.close())
  t.is(await code(wrong.sandboxes.list()), 'UNAUTHENTICATED')
  const r = await fetch(`http://${d.address}/v1/sandboxes`)
  t.is(r.status, 401)
  t.is(((await r.json()) as { code: string }).code, 'UNAUTHENTICATED')
  t.is((await fetch(`http://${d.address}/v1/health`)).status, 200)
})

test.serial('idempotency keys: a retry returns the same sandbox, concurrent retries make one, a different request is IDEMPOTENCY_MISMATCH', async (t) => {
  const d = await startDaemon(t, env)
  const spec = { image: 'bb:1', labels: { k: 'v' }, idempotencyKey: 'job-1/task-7' }
  const [x, y, z] = await Promise.all([d.sdk.sandboxes.create(spec), d.sdk.sandboxes.create(spec), d.sdk.sandboxes.create(spec)])
  t.is(x!.id, y!.id)
  t.is(x!.id, z!.id)
  t.is((await d.sdk.sandboxes.create(spec)).id, x!.id)
  t.is((await d.sdk.sandboxes.list()).length, 1)
  t.is(await code(d.sdk.sandboxes.create({ ...spec, labels: { k: 'other' } })), 'IDEMPOTENCY_MISMATCH')
  await x!.delete()
  t.is(await code(d.sdk.sandboxes.create(spec)), 'SANDBOX_GONE')
})

test.serial('createMany: per-item results with partial success; QUOTA_EXCEEDED past maxSandboxes', async (t) => {
  const d = await startDaemon(t, env, { limits: { maxSandboxes: 3 } })
  const r = await d.sdk.sandboxes.createMany({ image: 'bb:1', labels: { batch: '1' } }, { count: 5 })
  t.is(r.length, 5)
  const ok = r.filter((x) => x.ok)
  t.is(ok.length, 3)
  for (const x of r) if (!x.ok) t.is(x.error.code, 'QUOTA_EXCEEDED')
  for (const x of ok) if (x.ok) t.is((await x.sandbox.exec('echo $HOSTNAME')).exitCode, 0)
  t.is(await code(d.sdk.sandboxes.create({ image: 'bb:1' })), 'QUOTA_EXCEEDED')
  for (const x of ok) if (x.ok) await x.sandbox.delete()
  t.is((await d.sdk.sandboxes.create({ image: 'bb:1' })).info.state, 'running')
})

test.serial('admission control: a node without memory, disk or pids to spare refuses with CAPACITY_UNAVAILABLE; asking beyond a per-sandbox ceiling is QUOTA_EXCEEDED', async (t) => {
  const memTotal = Number(/MemTotal:\s+(\d+)/.exec(fs.readFileSync('/proc/meminfo', 'utf8'))![1]) / 1024
  const mem = await startDaemon(t, env, { limits: { reserveMemoryMiB: Math.ceil(memTotal) } })
  const e = await mem.sdk.sandboxes.create({ image: 'bb:1' }).catch((x: StrataError) => x)
  t.is((e as StrataError).code, 'CAPACITY_UNAVAILABLE')
  t.is((e as StrataError).detail?.resource, 'memory')
  t.true((e as StrataError).retryable)
  const disk = await startDaemon(t, env, { limits: { reserveDiskMiB: 1024 * 1024 * 1024 } })
  t.is(((await disk.sdk.sandboxes.create({ image: 'bb:1' }).catch((x: StrataError) => x)) as StrataError).detail?.resource, 'disk')
  const pids = await startDaemon(t, env, { limits: { reservePids: 1 << 30 } })
  t.is(((await pids.sdk.sandboxes.create({ image: 'bb:1' }).catch((x: StrataError) => x)) as StrataError).detail?.resource, 'pids')
  const ceil = await startDaemon(t, env, { limits: { maxMemoryMiB: 256 } })
  t.is(await code(ceil.sdk.sandboxes.create({ image: 'bb:1', resources: { memoryMiB: 512 } })), 'QUOTA_EXCEEDED')
  for (const x of [mem, disk, pids, ceil]) t.deepEqual(nodeTraces(x.config.stateDir, x.config.nodeId).sandboxDirs, [])
})

test.serial('reclaim (cluster down) while creates are building: they finish and are reclaimed too, nothing is left running; creates work again after', async (t) => {
  const d = await startDaemon(t, env)
  const s = d.sdk
  // creates in flight (not awaited), then reclaim as soon as the daemon counts them
  const creates = Array.from({ length: 3 }, () => s.sandboxes.create({ image: 'bb:1' }).then((sb) => sb.id, (e: unknown) => e as StrataError))
  await until(async () => (await s.node()).sandboxes.creating > 0, 30_000, 'a create building')
  const r = await fetch(`http://${d.address}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` } })
  t.is(r.status, 200, await r.clone().text())
  const outcomes = await Promise.all(creates)
  for (const o of outcomes) if (typeof o !== 'string') t.is(o.code, 'CLOSED', String(o))
  t.deepEqual(await s.sandboxes.list(), [], 'every sandbox was reclaimed, those created meanwhile included')
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
  const again = await s.sandboxes.create({ image: 'bb:1' })
  t.is(again.info.state, 'running')
  await again.delete()
})

test.serial('lifetimes: an idle sandbox is reclaimed after its TTL (activity keeps it), every sandbox after its maximum lifetime', async (t) => {
  const d = await startDaemon(t, env)
  const idle = await d.sdk.sandboxes.create({ image: 'bb:1', lifetime: { idleTtlSec: 2 } })
  const busy = await d.sdk.sandboxes.create({ image: 'bb:1', lifetime: { idleTtlSec: 2 } })
  const capped = await d.sdk.sandboxes.create({ image: 'bb:1', lifetime: { maxLifetimeSec: 3 } })
  // a command running longer than the TTL is activity the whole time
  const long = busy.exec(['sleep', '3'])
  await until(async () => (await idle.refresh()).state === 'stopped', 15_000, 'idle sandbox reclaimed')
  t.is(idle.info.stop?.reason, 'idle_ttl')
  t.is((await long).exitCode, 0)
  t.is((await busy.refresh()).state, 'running')
  for (let i = 0; i < 4; i++) {
    await capped.keepalive().catch(() => undefined)
    await new Promise((r) => setTimeout(r, 500))
  }
  await until(async () => (await capped.refresh()).state === 'stopped', 15_000, 'capped sandbox reclaimed')
  t.is(capped.info.stop?.reason, 'max_lifetime')
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId).mounts.filter((m) => m.includes(idle.id) || m.includes(capped.id)), [])
})

test.serial('a crashed sandbox is reported with its reason: the init killed is "exited", a memory hog is OOM-killed and counted', async (t) => {
  const d = await startDaemon(t, env)
  const a = await d.sdk.sandboxes.create({ image: 'bb:1' })
  process.kill(a.info.pid!, 'SIGKILL')
  await until(async () => (await a.refresh()).state === 'stopped', 15_000, 'dead init noticed')
  t.is(a.info.stop?.reason, 'exited')
  t.is(await code(a.exec('true')), 'SANDBOX_GONE')
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId).mounts.filter((m) => m.includes(a.id)), [])

  const b = await d.sdk.sandboxes.create({ image: 'bb:1', resources: { memoryMiB: 32 } })
  // a tmpfs-free hog: a shell variable doubling until the cgroup limit
  const hog = await b.exec('x=aaaaaaaaaaaaaaaa; while true; do x="$x$x"; done', { timeoutMs: 60_000 })
  t.is(hog.signal, 'SIGKILL')
  t.false(hog.timedOut)
  const info = await b.refresh()
  t.true(info.oomKills >= 1)
  t.is(info.state, 'running')
  t.is((await b.exec('echo alive')).stdout, 'alive\n')
})

test.serial('a restarted daemon re-adopts running sandboxes and reports the ones that died while it was away', async (t) => {
  const first = await startDaemon(t, env)
  const keep = await first.sdk.sandboxes.create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target: '/data' }], labels: { r: '1' } })
  const dies = await first.sdk.sandboxes.create({ image: 'bb:1', labels: { r: '1' } })
  await keep.files.write('/tmp/state', 'kept')
  // streams open when the daemon dies fail typed: RPC_CONNECTION_CLOSED, not a bare 'aborted'
  t.is((await dies.exec('head -c 67108864 /dev/zero > /tmp/big')).exitCode, 0)
  const big = await dies.files.readStream('/tmp/big')
  const tar = await dies.files.downloadTar('/tmp')
  const firstChunk = (r: NodeJS.ReadableStream) => new Promise((resolve, reject) => { r.once('data', resolve); r.once('error', reject) })
  await Promise.all([firstChunk(big), firstChunk(tar)])
  big.pause()
  tar.pause()
  // (its outcome is taken at once: it fails while the kill is awaited, and a rejection nobody
  // handles by then counts as an unhandled one)
  const output = code(dies.exec('echo started; sleep 60'))
  await first.kill()
  const drain = async (r: AsyncIterable<unknown>) => { for await (const _ of r) { /* consume */ } }
  t.is(await code(drain(big)), 'RPC_CONNECTION_CLOSED')
  t.is(await code(drain(tar)), 'RPC_CONNECTION_CLOSED')
  t.is(await output, 'RPC_CONNECTION_CLOSED')
  process.kill(dies.info.pid!, 'SIGKILL')
  const second = await startDaemon(t, env, { stateDir: first.config.stateDir, listen: first.address, nodeId: first.config.nodeId, tokenFile: first.config.tokenFile })
  const list = await second.sdk.sandboxes.list({ labels: { r: '1' } })
  t.deepEqual(list.map((x) => x.id).sort(), [keep.id, dies.id].sort())
  const k = await second.sdk.sandboxes.get(keep.id)
  t.is(k.info.state, 'running')
  t.is((await k.files.read('/tmp/state')).toString(), 'kept')
  t.true((await k.files.read('/data/small.txt')).equals(env.dataset.get('small.txt')!))
  const gone = await second.sdk.sandboxes.get(dies.id)
  t.is(gone.info.state, 'stopped')
  t.true(['exited', 'lost'].includes(gone.info.stop!.reason))
  await k.delete()
  await gone.delete()
  t.deepEqual(nodeTraces(second.config.stateDir, second.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
  // SIGTERM leaves sandboxes running too
  const third = await second.sdk.sandboxes.create({ image: 'bb:1' })
  t.is(await second.stop(), 0)
  const again = await startDaemon(t, env, { stateDir: first.config.stateDir, listen: first.address, nodeId: first.config.nodeId, tokenFile: first.config.tokenFile })
  t.is((await (await again.sdk.sandboxes.get(third.id)).exec('echo back')).stdout, 'back\n')
  await (await again.sdk.sandboxes.get(third.id)).delete()
})

test.serial('a re-adopted sandbox in use before the restart is not reclaimed as idle: its idle TTL counts from re-adoption', async (t) => {
  const first = await startDaemon(t, env)
  const sb = await first.sdk.sandboxes.create({ image: 'bb:1', lifetime: { idleTtlSec: 2 } })
  // in use for longer than its TTL (the record on disk still says it was last active when it started)
  let last = ''
  for (let i = 0; i < 5; i++) {
    last = (await sb.keepalive()).lastActivityAt
    await new Promise((r) => setTimeout(r, 600))
  }
  t.is(await first.stop(), 0)
  const second = await startDaemon(t, env, { stateDir: first.config.stateDir, listen: first.address, nodeId: first.config.nodeId, tokenFile: first.config.tokenFile })
  const back = await second.sdk.sandboxes.get(sb.id)
  t.is(back.info.state, 'running', JSON.stringify(back.info.stop))
  t.true(Date.parse(back.info.lastActivityAt) >= Date.parse(last), `lastActivityAt ${back.info.lastActivityAt} is before the last keepalive ${last}`)
  t.is((await back.exec('echo still here')).stdout, 'still here\n')
  await back.delete()
})

test.serial('bad input on every SDK call is a typed error, and nothing is left behind', async (t) => {
  const d = await startDaemon(t, env)
  const s = d.sdk
  const bad = async (p: Promise<unknown>, want = 'INVALID_ARGUMENT') => t.is(await code(p), want)
  const create = (x: unknown) => s.sandboxes.create(x as Parameters<typeof s.sandboxes.create>[0])
  await bad(create({}))
  await bad(create({ image: 'bb:1', base: 'bb:1' }))
  await bad(create({ image: 'bb:1', toolkits: ['x'] }))
  await bad(create({ image: 'bb:1', imag: 'typo' }))
  await bad(create({ image: 'bb:1', resources: { memoryMiB: 1 } }))
  await bad(create({ image: 'bb:1', resources: { cpu: -1 } }))
  await bad(create({ image: 'bb:1', lifetime: { idleTtlSec: 0 } }))
  await bad(create({ image: 'bb:1', mounts: [{ source: 'relative', target: '/x' }] }))
  await bad(create({ image: 'bb:1', labels: { 'bad key!': 'v' } }))
  await bad(create({ image: 'bb:1', env: { A: 1 } }))
  await bad(create({ image: 'bb:1', network: 'bridge' }))
  await bad(create({ image: 'bb:1', backend: 'vm' }), 'NOT_IMPLEMENTED')
  await bad(create({ image: 'no/such:image' }), 'IMAGE_NOT_FOUND')
  await bad(create({ image: 'Bad Ref' }), 'IMAGE_INVALID_REFERENCE')
  await bad(create({ image: 'bb:1', mounts: [{ source: '/datasets/none', target: '/x' }] }), 'ROOTFS_DATASET_NOT_FOUND')
  await bad(create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target: '/../x' }] }), 'ROOTFS_BAD_MOUNT_TARGET')
  await bad(s.sandboxes.createMany({ image: 'bb:1' }, { count: 0 }))
  await bad(s.sandboxes.get('nope'), 'SANDBOX_NOT_FOUND')
  await bad(s.sandboxes.get('sb-000000000000'), 'SANDBOX_NOT_FOUND')
  await bad(s.sandboxes.list({ state: 'zombie' as 'running' }))
  const sb: Sandbox = await s.sandboxes.create({ image: 'bb:1' })
  await bad(sb.exec([]))
  await bad(sb.exec('true', { timeoutMs: -1 }))
  await bad(sb.exec('true', { cwd: 'relative' }))
  await bad(sb.exec(['no-such-binary']), 'NOT_FOUND')
  await bad(sb.files.read('relative'))
  await bad(sb.files.write('/x', 'y', { mode: 0o17777 }))
  await bad(sb.files.list('/etc/passwd'), 'SANDBOX_NOT_A_DIRECTORY')
  // the raw API: malformed JSON, unknown routes, wrong methods, oversized bodies
  const h = { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' }
  const raw = async (method: string, p: string, body?: string) => {
    const r = await fetch(`http://${d.address}${p}`, { method, headers: h, ...(body !== undefined ? { body } : {}) })
    return { status: r.status, code: ((await r.json()) as { code: string }).code }
  }
  t.deepEqual(await raw('POST', '/v1/sandboxes', '{not json'), { status: 400, code: 'INVALID_ARGUMENT' })
  t.deepEqual(await raw('POST', '/v1/sandboxes', 'x'.repeat(5 * 1024 * 1024)), { status: 413, code: 'INVALID_ARGUMENT' })
  t.deepEqual(await raw('GET', '/v1/nothing'), { status: 404, code: 'NOT_FOUND' })
  t.deepEqual(await raw('PATCH', '/v1/sandboxes'), { status: 405, code: 'INVALID_ARGUMENT' })
  t.deepEqual(await raw('GET', `/v1/sandboxes/${sb.id}/files?path=/etc/passwd&bogus=1`), { status: 400, code: 'INVALID_ARGUMENT' })
  t.deepEqual(await raw('GET', `/v1/sandboxes/${sb.id}/processes/12345/output`), { status: 404, code: 'NOT_FOUND' })
  await sb.delete()
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
  t.is((await s.sandboxes.list()).length, 0)
})

test.serial('a sandbox that goes mid-call: exec and process streams end with SANDBOX_GONE, process routes refuse, stdin after EOF is CLOSED', async (t) => {
  const d = await startDaemon(t, env)
  const s = d.sdk
  const sb = await s.sandboxes.create({ image: 'bb:1' })
  // stdin after EOF answers at once
  const cat = await sb.spawn(['cat'])
  cat.stdout.resume()
  cat.stderr.resume()
  cat.stdin.end('x')
  t.is((await cat.wait()).exitCode, 0)
  const sleeper = await sb.spawn(['sleep', '60'])
  sleeper.stdout.resume()
  sleeper.stderr.resume()
  const h = { authorization: `Bearer ${d.token}` }
  const eofTwice = async () => {
    const a = await fetch(`http://${d.address}/v1/sandboxes/${sb.id}/processes/${sleeper.pid}/stdin?eof=1`, { method: 'PUT', headers: h, body: '' })
    const b = await fetch(`http://${d.address}/v1/sandboxes/${sb.id}/processes/${sleeper.pid}/stdin`, { method: 'PUT', headers: h, body: 'late', signal: AbortSignal.timeout(10_000) })
    return [a.status, b.status, ((await b.json()) as { code: string }).code]
  }
  t.deepEqual(await eofTwice(), [200, 503, 'CLOSED'])
  // the caller's AbortSignal firing while the output streams: CANCELLED, and the command is killed
  const ac = new AbortController()
  const aborted = sb.exec(['sh', '-c', 'echo started; exec sleep 61'], { signal: ac.signal, onStdout: () => ac.abort() })
  t.is(await code(aborted), 'CANCELLED')
  await until(async () => !(await sb.exec(['ps', '-o', 'args'])).stdout.includes('sleep 61'), 10_000, 'the aborted exec killed')
  // kill under a running exec and a running process
  const running = sb.exec(['sleep', '60'])
  await new Promise((r) => setTimeout(r, 300))
  await sb.kill()
  t.is(await code(running), 'SANDBOX_GONE')
  t.is(await code(sleeper.wait()), 'SANDBOX_GONE')
  const out = await fetch(`http://${d.address}/v1/sandboxes/${sb.id}/processes/${sleeper.pid}/output`, { headers: h })
  t.is(((await out.json()) as { code: string }).code, 'SANDBOX_GONE')
  await sb.delete()
  const after = await fetch(`http://${d.address}/v1/sandboxes/${sb.id}/processes/${sleeper.pid}/output`, { headers: h })
  t.is(((await after.json()) as { code: string }).code, 'SANDBOX_NOT_FOUND')
  const bad = await fetch(`http://${d.address}/v1/sandboxes/%E0`, { headers: h })
  t.is(bad.status, 400)
  // batch items derive their keys from a key at the length limit
  const r = await s.sandboxes.createMany({ image: 'bb:1', idempotencyKey: 'k'.repeat(256) }, { count: 2 })
  t.true(r.every((x) => x.ok))
  for (const x of r) if (x.ok) await x.sandbox.delete()
})

test.serial('500 create/delete cycles leave nothing behind: processes, mounts, cgroups, directories, registry records, layer mounts', async (t) => {
  const cycles = Number(process.env.STRATA_LEAK_CYCLES ?? 500)
  const d = await startDaemon(t, env, { layerLingerMs: 1000 })
  const before = nodeTraces(d.config.stateDir, d.config.nodeId)
  const agentsBefore = countProcs('strata-agent')
  let done = 0
  const worker = async () => {
    while (done < cycles) {
      done++
      const sb = await d.sdk.sandboxes.create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target: '/data' }] })
      if (done % 50 === 0) t.is((await sb.exec('cat /data/small.txt')).stdout, 'hello dataset\n')
      // every other one returns once the processes are killed and releases the rest in the background
      await sb.delete({ wait: done % 2 === 0 })
    }
  }
  await Promise.all(Array.from({ length: 4 }, worker))
  t.log(`${cycles} cycles`)
  await until(async () => (await d.sdk.node()).sandboxes.deleting === 0, 60_000, 'background deletions done')
  t.is((await d.sdk.sandboxes.list()).length, 0)
  t.true((await d.sdk.node()).layers.every((l) => l.users === 0), 'layers may linger, unused')
  t.is(countProcs('strata-agent'), agentsBefore)
  // the lingering layer mount goes after layerLingerMs
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), before)
  await until(async () => (await d.sdk.node()).layers.length === 0, 15_000, 'idle layers unmounted')
  t.deepEqual(layerMounts(d.config.stateDir), [])
  t.is(countProcs('strata-agent'), agentsBefore)
})

function countProcs(comm: string): number {
  let n = 0
  for (const p of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue
    try {
      if (fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim() === comm) n++
    } catch { /* gone */ }
  }
  return n
}

test.serial('dataset mounts onto reserved or unclean targets are ROOTFS_BAD_MOUNT_TARGET, from the SDK and the raw API alike, and leave nothing behind', async (t) => {
  const d = await startDaemon(t, env)
  const h = { authorization: `Bearer ${d.token}`, 'content-type': 'application/json' }
  const raw = async (target: string, image = 'bb:1') => {
    const r = await fetch(`http://${d.address}/v1/sandboxes`, { method: 'POST', headers: h, body: JSON.stringify({ image, mounts: [{ source: '/datasets/t', target }] }) })
    return { status: r.status, ...((await r.json()) as { code: string; message: string }) }
  }
  const refused = ['/', '/proc', '/proc/x', '/dev', '/dev/shm/x', '/sys', '/sys/fs/cgroup', '/.strata', '/.strata/agent', '/.strata/x/y',
    '/a//b', '/data/', '/a/./b', '/a/../b', '.', 'data', '/..']
  for (const target of refused) {
    t.is(await code(d.sdk.sandboxes.create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target }] })), 'ROOTFS_BAD_MOUNT_TARGET', `SDK ${target}`)
    const r = await raw(target)
    t.is(r.code, 'ROOTFS_BAD_MOUNT_TARGET', `API ${target}: ${r.message}`)
    t.is(r.status, 400)
    t.false(r.message.includes(d.config.stateDir), `no host path in ${r.message}`)
  }
  // a symlink in the image leading onto a reserved path is refused too (checked where it resolves)
  const root = busyboxRootfs(t)
  fs.symlinkSync('/proc', path.join(root, 'toproc'))
  fs.symlinkSync('.strata', path.join(root, 'toagent'))
  await importPath(env.store, root, { name: 'links', tag: '1' })
  for (const target of ['/toproc', '/toproc/x', '/toagent/x']) {
    const r = await raw(target, 'links:1')
    t.is(r.code, 'ROOTFS_BAD_MOUNT_TARGET', `${target}: ${r.message}`)
    t.regex(r.message, /reserved/)
  }
  // clean targets elsewhere still work
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target: '/data/t' }, { source: '/datasets/t/small.txt', target: '/etc/small.txt' }] })
  t.is((await sb.exec('cat /data/t/small.txt /etc/small.txt')).stdout, 'hello dataset\nhello dataset\n')
  await sb.delete()
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
})

test.serial('files.read stops at maxBytes (default 256 MiB) with OUTPUT_LIMIT; the daemon streams an endless file without buffering it', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const e = await sb.files.read('/dev/zero', { maxBytes: 1 << 20 }).catch((x: StrataError) => x)
  t.is((e as StrataError).code, 'OUTPUT_LIMIT')
  t.is((e as StrataError).detail?.maxBytes, 1 << 20)
  t.is(await code(sb.files.read('/dev/zero')), 'OUTPUT_LIMIT')
  // a range within the cap is read whole
  t.is((await sb.files.read('/dev/zero', { length: 4096, maxBytes: 4096 })).length, 4096)
  // a reader that stops reading: backpressure reaches the agent, the daemon holds a bounded amount
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${d.child.pid}/status`, 'utf8'))![1]) / 1024
  const before = rss()
  const s = await sb.files.readStream('/dev/zero')
  await new Promise((r) => s.once('data', r))
  s.pause()
  await new Promise((r) => setTimeout(r, 1500))
  t.true(rss() - before < 64, `the daemon grew by ${Math.round(rss() - before)} MiB`)
  s.destroy()
  t.is((await sb.exec('echo alive')).stdout, 'alive\n')
  await sb.delete()
})

test.serial('an exec or process the OOM killer killed says oomKilled; others do not', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1', resources: { memoryMiB: 32 } })
  const hog = 'x=aaaaaaaaaaaaaaaa; while true; do x="$x$x"; done'
  const r = await sb.exec(hog, { timeoutMs: 60_000 })
  t.is(r.signal, 'SIGKILL')
  t.true(r.oomKilled)
  const p = await sb.spawn(hog)
  p.stdout.resume()
  p.stderr.resume()
  t.like(await p.wait(), { signal: 'SIGKILL', oomKilled: true })
  // under a shell that waits for it, the OOM-killed child makes the shell exit 137: reported all the same
  const shell = await sb.exec(`sh -c '${hog}'; exit $?`, { timeoutMs: 60_000 })
  t.like(shell, { exitCode: 137, signal: null, oomKilled: true })
  t.like(await sb.exec('exit 137'), { exitCode: 137, oomKilled: false })
  t.like(await sb.exec('echo ok'), { exitCode: 0, oomKilled: false })
  t.like(await sb.exec('kill -9 $$'), { signal: 'SIGKILL', oomKilled: false })
  t.like(await sb.exec(['sleep', '10'], { timeoutMs: 200 }), { timedOut: true, oomKilled: false })
  // the raw exit event carries it too
  const res = await fetch(`http://${d.address}/v1/sandboxes/${sb.id}/exec`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` }, body: JSON.stringify({ cmd: hog, timeoutMs: 60_000 }) })
  const last = JSON.parse((await res.text()).trim().split('\n').at(-1)!) as { type: string; oomKilled: boolean }
  t.like(last, { type: 'exit', oomKilled: true })
  await sb.delete()
})

test.serial('calls cut off by a dying init say the sandbox stopped and why, never that it is running', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const p = await sb.spawn(['sleep', '60'])
  p.stdout.resume()
  p.stderr.resume()
  const running = sb.exec(['sleep', '60']).catch((e: StrataError) => e)
  const waited = p.wait().catch((e: StrataError) => e)
  await new Promise((r) => setTimeout(r, 300))
  process.kill(sb.info.pid!, 'SIGKILL')
  for (const e of [await running, await waited] as StrataError[]) {
    t.is(e.code, 'SANDBOX_GONE')
    t.notRegex(e.message, /is running/)
    t.regex(e.message, /stopped \(exited: the sandbox's init exited\)/)
  }
  await until(async () => (await sb.refresh()).state === 'stopped', 15_000, 'the stop recorded')
  t.is(sb.info.stop?.reason, 'exited')
  await sb.delete()
})

test.serial('keepalive returns the sandbox; QUOTA_EXCEEDED names the limit, its maximum and what was asked; list names its known parameters', async (t) => {
  const d = await startDaemon(t, env, { limits: { maxSandboxes: 1, maxMemoryMiB: 256 } })
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const before = sb.info.lastActivityAt
  await new Promise((r) => setTimeout(r, 20))
  const info = await sb.keepalive()
  t.is(info.id, sb.id)
  t.is(info.state, 'running')
  t.true(info.lastActivityAt > before)
  t.is(sb.info, info)
  const count = await d.sdk.sandboxes.create({ image: 'bb:1' }).catch((e: StrataError) => e)
  t.like(count, { code: 'QUOTA_EXCEEDED', detail: { limit: 'maxSandboxes', max: 1, requested: 2 } })
  await sb.delete()
  const mem = await d.sdk.sandboxes.create({ image: 'bb:1', resources: { memoryMiB: 512 } }).catch((e: StrataError) => e)
  t.like(mem, { code: 'QUOTA_EXCEEDED', detail: { limit: 'resources.memoryMiB', max: 256, requested: 512 } })
  const r = await fetch(`http://${d.address}/v1/sandboxes?foo=1`, { headers: { authorization: `Bearer ${d.token}` } })
  t.is(r.status, 400)
  t.regex(((await r.json()) as { message: string }).message, /"foo".*known: label, state/)
  const bad = await fetch(`http://${d.address}/v1/sandboxes?label=${encodeURIComponent('bad key!=x')}`, { headers: { authorization: `Bearer ${d.token}` } })
  t.is(((await bad.json()) as { code: string }).code, 'INVALID_ARGUMENT')
})

test.serial('every sandbox has its own /etc/hosts and /etc/hostname; a read-only dataset at /etc is left as it is and still starts', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1', hostname: 'h1' })
  t.is((await sb.files.read('/etc/hostname')).toString(), 'h1\n')
  t.regex((await sb.files.read('/etc/hosts')).toString(), /^127\.0\.0\.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n[^]*^127\.0\.1\.1\th1$/m)
  t.like(await sb.exec('hostname; echo | nc -w 1 localhost 1; echo rc=$?'), { stdout: 'h1\nrc=1\n' })
  t.notRegex((await sb.exec('nc -w 1 localhost 1 </dev/null')).stderr, /bad address/)
  const ro = await d.sdk.sandboxes.create({ image: 'bb:1', mounts: [{ source: '/datasets/t', target: '/etc' }] })
  t.deepEqual((await ro.files.list('/etc')).map((e) => e.name).sort(), ['big.bin', 'small.txt'])
  await sb.delete()
  await ro.delete()
})

test.serial('a sandbox composed from base and toolkits says which images it was made of (composedOf), in create, get and list', async (t) => {
  const d = await startDaemon(t, env)
  const dir = fs.mkdtempSync(path.join(fs.realpathSync('/tmp'), 'strata-tk-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.mkdirSync(path.join(dir, 'opt', 'tk'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'opt', 'tk', 'version'), 'tk 1\n')
  const tk = await importPath(env.store, dir, { name: 'tk', tag: '1', kind: 'toolkit' })
  const bb = await env.store.resolve('bb:1')
  const sb = await d.sdk.sandboxes.create({ base: 'bb:1', toolkits: ['tk:1'], labels: { composed: 'yes' } })
  const want = [{ kind: 'base', ref: 'bb:1', digest: bb.digest }, { kind: 'toolkit', ref: 'tk:1', digest: tk.digest }]
  t.deepEqual(sb.info.composedOf, want)
  t.is(sb.info.image, undefined)
  t.is((await sb.exec(['cat', '/opt/tk/version'])).stdout, 'tk 1\n')
  t.deepEqual((await d.sdk.sandboxes.get(sb.id)).info.composedOf, want)
  const listed = await d.sdk.sandboxes.list({ labels: { composed: 'yes' } })
  t.deepEqual(listed.map((x) => x.info.composedOf), [want])
  await sb.delete()
})
