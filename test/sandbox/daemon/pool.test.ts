// The node daemon's warm pool, on a real daemon process: sandboxes started
// ahead of the creates, handed out only to creates that ask for nothing a
// started sandbox cannot get, refilled in the background, replaced when the
// tag moves or one dies, removed by reclaim, stop and restart, and bad
// pool configs refused.
import test from 'ava'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { importPath } from '../../../sandbox/image/oci/import.js'
import type { NodeInfo } from '../../../sandbox/daemon/index.js'
import { busyboxRootfs } from '../../helpers/busybox-rootfs.js'
import { CLI, until } from '../../helpers/procs.js'
import { layerMounts, nodeTraces, startDaemon, useDaemonCluster } from './helpers.js'

const env = useDaemonCluster(test)

const RES = { cpu: 0.5, memoryMiB: 64, pids: 64 }

/** Resolves once every pool of the node holds `ready` started sandboxes and builds none. */
async function poolsFull(node: () => Promise<NodeInfo>, ready: number[]): Promise<NodeInfo> {
  return until(async () => {
    const n = await node()
    return n.pool.every((p, i) => p.ready === ready[i] && p.building === 0) ? n : undefined
  }, 60_000, `pools at ${ready.join(', ')}`)
}

test.serial('a matching create takes a started sandbox; others start their own; the pool refills and nothing leaks', async (t) => {
  const d = await startDaemon(t, env, { warmPool: [{ image: 'bb:1', count: 2, resources: RES }] })
  const s = d.sdk
  const node = await poolsFull(() => s.node(), [2])
  t.like(node.pool[0], { image: 'bb:1', target: 2, ready: 2, claims: 0, network: 'none', resources: RES })
  t.regex(node.pool[0]!.digest ?? '', /^sha256:[0-9a-f]{64}$/)
  t.is((await s.sandboxes.list()).length, 0, 'pool sandboxes are not listed')
  t.is(node.sandboxes.running, 0)

  const a = await s.sandboxes.create({ image: 'bb:1', resources: RES, labels: { job: 'p' }, lifetime: { idleTtlSec: 600 } })
  t.true(a.info.pooled)
  t.is(a.info.state, 'running')
  t.deepEqual(a.info.labels, { job: 'p' })
  t.deepEqual(a.info.lifetime, { idleTtlSec: 600 })
  t.is(a.info.image?.ref, 'bb:1')
  t.is(a.info.hostname, a.id)
  t.is((await a.exec('hostname; echo hi > /tmp/x; cat /tmp/x')).stdout, `${a.id}\nhi\n`)
  t.deepEqual((await s.sandboxes.list({ labels: { job: 'p' } })).map((x) => x.id), [a.id])
  t.true((await s.sandboxes.get(a.id)).info.pooled)

  // asks for what a started sandbox cannot get: started for the request
  const own = [
    await s.sandboxes.create({ image: 'bb:1', resources: RES, mounts: [{ source: '/datasets/t', target: '/data' }] }),
    await s.sandboxes.create({ image: 'bb:1', resources: RES, env: { X: '1' } }),
    await s.sandboxes.create({ image: 'bb:1', resources: { ...RES, memoryMiB: 96 } }),
    await s.sandboxes.create({ image: 'bb:1', resources: RES, workdir: '/tmp' }),
  ]
  for (const x of own) t.falsy(x.info.pooled, JSON.stringify(x.info.resources))
  t.is((await own[0]!.files.read('/data/small.txt')).toString(), 'hello dataset\n')
  t.is((await own[1]!.exec('echo $X')).stdout, '1\n')

  // idempotency: a retry is the same pooled sandbox
  const k1 = await s.sandboxes.create({ image: 'bb:1', resources: RES, idempotencyKey: 'pool-k' })
  const k2 = await s.sandboxes.create({ image: 'bb:1', resources: RES, idempotencyKey: 'pool-k' })
  t.is(k1.id, k2.id)

  // the pool refills to its count; claims are counted
  const after = await poolsFull(() => s.node(), [2])
  t.is(after.pool[0]!.claims, 2)
  // more matching creates than the pool holds: the rest start their own, all work
  const burst = await Promise.all(Array.from({ length: 4 }, () => s.sandboxes.create({ image: 'bb:1', resources: RES })))
  t.true(burst.filter((x) => x.info.pooled).length >= 1)
  for (const x of burst) t.is((await x.exec(['true'])).exitCode, 0)

  for (const x of [a, ...own, k1, ...burst]) await x.delete()
  await poolsFull(() => s.node(), [2])
  // what is left on the node is exactly the pool: two sandbox dirs, nothing listed
  t.is(nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs.length, 2)
  t.is((await s.sandboxes.list()).length, 0)

  // reclaim empties the pool and stops refilling it
  const r = await fetch(`http://${d.address}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` } })
  t.is(r.status, 200)
  const n2 = await s.node()
  t.like(n2.pool[0], { ready: 0, building: 0 })
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
  const plain = await s.sandboxes.create({ image: 'bb:1', resources: RES })
  t.falsy(plain.info.pooled)
  await plain.delete()
  // SIGTERM with no sandbox left: no lingering layer mount, no cgroup parent
  t.is(await d.stop(), 0)
  t.deepEqual(layerMounts(d.config.stateDir), [])
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
  t.false(fs.existsSync(`/sys/fs/cgroup/memory/strata/${d.config.nodeId}`), 'the cgroup parent went with the last sandbox')
})

test.serial('a dead pool sandbox is replaced; a moved tag replaces the pool; stop and restart leave no pool sandbox behind', async (t) => {
  // a second image under its own tag, so that moving it does not disturb the other tests
  const root = busyboxRootfs(t)
  await importPath(env.store, root, { name: 'poolimg', tag: '1' })
  const d = await startDaemon(t, env, { warmPool: [{ image: 'poolimg:1', count: 1 }] })
  const s = d.sdk
  const n0 = await poolsFull(() => s.node(), [1])
  const firstDigest = n0.pool[0]!.digest

  // kill the started sandbox's init from outside: the pool notices and starts another
  const dirs = nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs
  t.is(dirs.length, 1)
  const pid = Number(fs.readFileSync(path.join(d.config.stateDir, 'sb', dirs[0]!, 'rt', 'init.pid'), 'utf8'))
  process.kill(pid, 'SIGKILL')
  await until(async () => {
    const now = nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs
    return now.length === 1 && now[0] !== dirs[0] && (await s.node()).pool[0]!.ready === 1
  }, 60_000, 'a replacement pool sandbox')
  const sb = await s.sandboxes.create({ image: 'poolimg:1' })
  t.true(sb.info.pooled)
  t.is((await sb.exec(['true'])).exitCode, 0)
  await sb.delete()

  // move the tag: the pool's sandboxes of the old digest go, new ones come
  fs.writeFileSync(path.join(root, 'new-file'), 'v2\n')
  await importPath(env.store, root, { name: 'poolimg', tag: '1' })
  const n1 = await until(async () => {
    const n = await s.node()
    return n.pool[0]!.ready === 1 && n.pool[0]!.digest !== firstDigest ? n : undefined
  }, 60_000, 'the pool on the new digest')
  const sb2 = await s.sandboxes.create({ image: 'poolimg:1' })
  t.true(sb2.info.pooled)
  t.is(sb2.info.image?.digest, n1.pool[0]!.digest ?? undefined)
  t.is((await sb2.exec(['cat', '/new-file'])).stdout, 'v2\n')

  // SIGTERM: the handed-out sandbox stays for the next daemon, the pool's go
  await poolsFull(() => s.node(), [1])
  t.is(await d.stop(), 0)
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs, [sb2.id])
  const again = await startDaemon(t, env, { stateDir: d.config.stateDir, listen: d.address, nodeId: d.config.nodeId, warmPool: [{ image: 'poolimg:1', count: 1 }] })
  t.is((await again.sdk.sandboxes.get(sb2.id)).info.state, 'running')
  await poolsFull(() => again.sdk.node(), [1])
  // SIGKILL: the pool's sandbox is found at restart and removed (a new one is started)
  await again.kill()
  const pooledDir = nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs.find((x) => x !== sb2.id)
  t.truthy(pooledDir)
  const third = await startDaemon(t, env, { stateDir: d.config.stateDir, listen: d.address, nodeId: d.config.nodeId, warmPool: [{ image: 'poolimg:1', count: 1 }] })
  t.false(nodeTraces(d.config.stateDir, d.config.nodeId).sandboxDirs.includes(pooledDir!), 'the unclaimed sandbox of the killed daemon is gone')
  t.deepEqual((await third.sdk.sandboxes.list()).map((x) => x.id), [sb2.id])
  await poolsFull(() => third.sdk.node(), [1])
  await (await third.sdk.sandboxes.get(sb2.id)).delete()
  const r = await fetch(`http://${third.address}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${third.token}` } })
  t.is(r.status, 200)
  t.deepEqual(nodeTraces(d.config.stateDir, d.config.nodeId), { mounts: [], sandboxDirs: [], cgroups: [] })
})

test.serial('a pool of a missing image reports why and retries; bad pool configs are BAD_CONFIG', async (t) => {
  const d = await startDaemon(t, env, { warmPool: [{ image: 'nosuch:1', count: 1 }] })
  const n = await until(async () => {
    const x = await d.sdk.node()
    return x.pool[0]!.lastError ? x : undefined
  }, 30_000, 'a refill error')
  t.regex(n.pool[0]!.lastError!, /^IMAGE_NOT_FOUND: /)
  t.is(n.pool[0]!.ready, 0)
  // the daemon serves other creates meanwhile
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  await sb.delete()

  const bad: Array<[unknown, RegExp]> = [
    [{ image: 'bb:1' }, /warmPool\[0\]: count must be an integer/],
    [{ image: 'bb:1', count: 0 }, /count must be an integer in \[1, 1024\]/],
    [{ image: '', count: 1 }, /warmPool\[0\]: image must be/],
    // a reference the image store cannot parse is refused at start, not retried forever
    [{ image: 'BAD::x', count: 2 }, /warmPool\[0\]: image: invalid image name/],
    [{ image: 'bb:1@sha256:nothex', count: 1 }, /warmPool\[0\]: image: /],
    [{ image: 'bb:1', count: 1, resources: { memoryMiB: 1 } }, /resources\.memoryMiB/],
    [{ image: 'bb:1', count: 1, network: 'bridge' }, /network must be/],
    [{ image: 'bb:1', count: 1, mounts: [] }, /unknown field \\?"mounts/],
    ['bb:1=2', /warmPool must be an array/],
  ]
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbd-bad-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const [i, [entry, re]] of bad.entries()) {
    const file = path.join(dir, `c${i}.json`)
    fs.writeFileSync(file, JSON.stringify({
      nodeId: `bad-${process.pid}`, listen: '127.0.0.1:0', mgmtdAddresses: [env.m.c.mgmtdAddress], fuseMnt: env.fuse.mnt,
      stateDir: path.join(dir, `s${i}`), tokenFile: path.join(dir, 'token'), warmPool: Array.isArray(entry) || typeof entry === 'string' ? entry : [entry],
    }))
    const r = spawnSync(process.execPath, [CLI, 'daemon', 'sandbox', '--config', file, '--name', 'sandbox'], { encoding: 'utf8', timeout: 60_000 })
    t.not(r.status, 0, JSON.stringify(entry))
    t.regex(r.stdout + r.stderr, /BAD_CONFIG/, JSON.stringify(entry))
    t.regex(r.stdout + r.stderr, re, JSON.stringify(entry))
  }
  // the CLI flag's own check
  const r = spawnSync(process.execPath, [CLI, 'serve', '--warm-pool', 'bb:1'], { encoding: 'utf8' })
  t.is(r.status, 2)
  t.regex(r.stderr, /^strata: usage: --warm-pool wants IMAGE=COUNT/m)
  // and a bad reference is a usage error up front, for serve and for cluster up alike
  for (const args of [['serve', '--warm-pool', 'BAD::x=2'], ['cluster', 'up', '--dir', path.join(dir, 'never'), '--warm-pool', 'BAD::x=2']]) {
    const u = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 60_000 })
    t.is(u.status, 2, `${args.join(' ')}: ${u.stderr}`)
    t.regex(u.stderr, /--warm-pool "BAD::x=2": invalid image name/)
  }
  t.false(fs.existsSync(path.join(dir, 'never')), 'cluster up made nothing')
})
