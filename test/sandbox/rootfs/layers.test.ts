// LayerMounts on a real cluster: one mount per layer per node however many
// acquire it at once, unmounted by the last release, and a restarted daemon's
// view: re-adopting what sandboxes still use, sweeping what nobody claims.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { readMounts } from '../../../fs/fuse/mounts.js'
import { LayerMounts, Rootfs, RootfsBuilder } from '../../../sandbox/rootfs/index.js'
import { mountsUnder } from '../../../sandbox/rootfs/mounts.js'
import { diffTrees, snapshotTree } from '../../helpers/tree-compare.js'
import { mountFuse } from '../../fs/fuse/helpers.js'
import { mountCount, node, storeLayer, useRootfsCluster } from './helpers.js'

const env = useRootfsCluster(test)

function digests(): string[] {
  return env.manifest.layers.map((l) => l.digest)
}

test.serial('concurrent acquires of one layer share one mount; the last release unmounts', async (t) => {
  const n = node(t, env)
  const d = digests()[0]!
  const hs = await Promise.all(Array.from({ length: 8 }, (_, i) => n.layers.acquire(d, `u${i % 3}`)))
  t.is(new Set(hs.map((h) => h.dir)).size, 1)
  t.is(mountCount(hs[0]!.dir), 1)
  t.deepEqual(n.layers.list()[0]!.users, { u0: 3, u1: 3, u2: 2 })
  const m = readMounts().find((x) => x.mountpoint === hs[0]!.dir)!
  t.is(m.fstype, 'erofs')
  t.true(m.options.split(',').includes('ro'))
  t.true(fs.existsSync(path.join(hs[0]!.dir, 'etc')))
  // releases racing a new acquire: the mount stays for the late one
  const late = n.layers.acquire(d, 'late')
  await Promise.all(hs.map((h) => h.release()))
  const l = await late
  t.is(mountCount(l.dir), 1)
  await hs[0]!.release() // a second release of one hold is a no-op
  t.deepEqual(n.layers.list()[0]!.users, { late: 1 })
  // release and re-acquire interleaved many times never double-mounts
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      const h = await n.layers.acquire(d)
      t.is(mountCount(h.dir), 1)
      await h.release()
    }),
  )
  await l.release()
  t.is(mountCount(l.dir), 0)
  t.false(fs.existsSync(l.dir))
  t.deepEqual(n.layers.list(), [])
  t.deepEqual((await env.store.listLeases()).filter((x) => x.holder === n.nodeId), [])
})

test.serial('the layer list shows a layer until its unmount is over, never empty while it is mounted', async (t) => {
  const n = node(t, env)
  const d = digests()[0]!
  // look at every turn of the event loop while the last release unmounts: a listing without the
  // layer (what a node's status reports, and what a caller waits on) must mean it is unmounted.
  // The unmount runs on the mount thread, so how long the window is depends on the machine: 20 rounds.
  let looks = 0
  let dir = ''
  for (let round = 0; round < 20; round++) {
    const h = await n.layers.acquire(d, 'u')
    dir = h.dir
    const released = h.release()
    let done = false
    void released.finally(() => (done = true))
    while (!done) {
      looks++
      if (n.layers.list().length === 0 && mountCount(h.dir) > 0) t.fail(`round ${round}: the list is empty but ${h.dir} is still mounted`)
      await new Promise((r) => setImmediate(r))
    }
    await released
  }
  t.log(`${looks} looks`)
  t.deepEqual(n.layers.list(), [])
  t.is(mountCount(dir), 0)
})

test.serial('a layer that is not stored fails with IMAGE_BLOB_MISSING and leaves nothing', async (t) => {
  const n = node(t, env)
  const missing = 'sha256:' + '0'.repeat(64)
  const e = await t.throwsAsync(n.layers.acquire(missing), { instanceOf: StrataError })
  t.is(e?.code, 'IMAGE_BLOB_MISSING')
  t.false(fs.existsSync(n.layers.mountpoint(missing)))
  // a stored blob that is not EROFS fails to mount, typed, and leaves nothing either
  const bogus = await env.store.putBlob(Readable.from([Buffer.from('not an erofs image '.repeat(1000))]))
  const e2 = await t.throwsAsync(n.layers.acquire(bogus.digest), { instanceOf: StrataError })
  t.is(e2?.code, 'ROOTFS_MOUNT_FAILED')
  t.truthy(e2?.detail?.errno)
  t.is(mountCount(n.layers.mountpoint(bogus.digest)), 0)
  t.false(fs.existsSync(n.layers.mountpoint(bogus.digest)))
  t.deepEqual((await env.store.listLeases()).filter((x) => x.holder === n.nodeId), [])
})

test.serial('after a crash: a new instance re-adopts the sandboxes still alive and sweeps the rest', async (t) => {
  const n = node(t, env)
  const extra = await storeLayer(env, t, async (root) => {
    await fs.promises.mkdir(path.join(root, 'tools'))
    await fs.promises.writeFile(path.join(root, 'tools/hello'), 'hello\n')
  })
  const specA = { sandboxId: 'alive', layers: digests(), stateDir: path.join(n.dir, 'sandboxes/alive') }
  const specB = { sandboxId: 'dead', layers: [...digests(), extra.digest], stateDir: path.join(n.dir, 'sandboxes/dead') }
  await n.builder.create(specA)
  await n.builder.create(specB)
  const all = [...digests(), extra.digest]
  for (const d of all) t.is(mountCount(n.layers.mountpoint(d)), 1)

  // "crash": the in-memory state is dropped; the mounts stay
  const layers2 = new LayerMounts({ fuseMnt: env.fuse.mnt, stateDir: n.dir, store: env.store, nodeId: n.nodeId })
  const builder2 = new RootfsBuilder({ layers: layers2 })
  t.deepEqual(layers2.scan().map((s) => s.digest).sort(), [...all].sort())
  t.deepEqual(layers2.list(), [])

  // the daemon finds sandbox "alive" still running: adopt it
  const a = await builder2.adopt(specA)
  for (const d of digests()) t.deepEqual(layers2.list().find((l) => l.digest === d)?.users, { alive: 1 })
  // "dead" is gone: its rootfs is destroyed from its state dir alone
  await new Rootfs(specB.sandboxId, specB.stateDir).destroy()
  t.false(fs.existsSync(specB.stateDir))
  // the layer only "dead" used is unclaimed; sweep removes it and only it
  t.deepEqual(await layers2.sweep(), [extra.digest])
  t.is(mountCount(layers2.mountpoint(extra.digest)), 0)
  t.false(fs.existsSync(layers2.mountpoint(extra.digest)))
  for (const d of digests()) t.is(mountCount(layers2.mountpoint(d)), 1)
  t.deepEqual(diffTrees(await snapshotTree(a.dir), env.reference), [])
  // adopting a layer that is not mounted is a typed error
  const e = await t.throwsAsync(layers2.adopt(extra.digest, ['x']), { instanceOf: StrataError })
  t.is(e?.code, 'ROOTFS_NOT_MOUNTED')
  const e2 = await t.throwsAsync(builder2.adopt(specB), { instanceOf: StrataError })
  t.is(e2?.code, 'ROOTFS_NOT_MOUNTED')

  await a.destroy()
  for (const d of all) t.is(mountCount(layers2.mountpoint(d)), 0)
  t.deepEqual(mountsUnder(n.dir), [])
  t.deepEqual((await env.store.listLeases()).filter((x) => x.holder === n.nodeId), [])
})

test.serial('sweep with nothing claimed unmounts every leftover, even under a live overlay', async (t) => {
  const n = node(t, env)
  const spec = { sandboxId: 'orphan', layers: digests(), stateDir: path.join(n.dir, 'sandboxes/orphan') }
  await n.builder.create(spec)
  const fresh = new LayerMounts({ fuseMnt: env.fuse.mnt, stateDir: n.dir, store: env.store, nodeId: n.nodeId })
  // a lease left without a mount (a reboot wiped the state dir) goes too
  const stale = 'sha256:' + 'e'.repeat(64)
  await env.store.addLease(n.nodeId, stale)
  t.deepEqual((await fresh.sweep()).sort(), [...digests(), stale].sort())
  for (const d of digests()) {
    t.is(mountCount(fresh.mountpoint(d)), 0)
    t.false(fs.existsSync(fresh.mountpoint(d)))
  }
  t.deepEqual(fresh.scan(), [])
  t.deepEqual((await env.store.listLeases()).filter((x) => x.holder === n.nodeId), [])
  // the orphan overlay (its lowers detached) is still removable
  await new Rootfs(spec.sandboxId, spec.stateDir).destroy()
  t.deepEqual(mountsUnder(n.dir), [])
  t.false(fs.existsSync(spec.stateDir))
})

test.serial('concurrent creates and destroys of sandboxes on one image share one mount per layer', async (t) => {
  const n = node(t, env)
  const specs = Array.from({ length: 6 }, (_, i) => ({ sandboxId: `c${i}`, layers: digests(), stateDir: path.join(n.dir, `sandboxes/c${i}`) }))
  const rs = await Promise.all(specs.map((s) => n.builder.create(s)))
  for (const d of digests()) {
    t.is(mountCount(n.layers.mountpoint(d)), 1)
    t.is(Object.keys(n.layers.list().find((l) => l.digest === d)!.users).length, 6)
  }
  t.true(rs.every((r) => fs.existsSync(path.join(r.dir, 'etc/passwd'))))
  // destroys racing creates of new sandboxes
  const more = specs.map((s) => ({ ...s, sandboxId: `${s.sandboxId}-2`, stateDir: `${s.stateDir}-2` }))
  const [, rs2] = await Promise.all([Promise.all(rs.map((r) => r.destroy())), Promise.all(more.map((s) => n.builder.create(s)))])
  for (const d of digests()) t.is(mountCount(n.layers.mountpoint(d)), 1)
  await Promise.all(rs2.map((r) => r.destroy()))
  for (const d of digests()) t.is(mountCount(n.layers.mountpoint(d)), 0)
  t.deepEqual(mountsUnder(n.dir), [])
})

test.serial('the FUSE daemon dies under a live rootfs with a dataset: destroy still removes every mount', async (t) => {
  const fuse = await mountFuse(t, env.m, { name: `mnt-dies-${process.pid}` })
  const n = node(t, env)
  const layers = new LayerMounts({ fuseMnt: fuse.mnt, stateDir: path.join(n.dir, 'node2'), store: env.store, nodeId: `${n.nodeId}-2` })
  const builder = new RootfsBuilder({ layers })
  const src = `/datasets/dies-${process.pid}`
  await env.fs.mkdir(src, { recursive: true })
  await env.fs.writeFile(`${src}/f`, 'f')
  t.teardown(() => env.fs.rm(src, { recursive: true }).catch(() => undefined))
  const r = await builder.create({ sandboxId: 'dies', layers: digests(), stateDir: path.join(n.dir, 'sandboxes/dies'), datasets: [{ source: src, target: '/data' }] })
  t.is(await fs.promises.readFile(path.join(r.dir, 'data/f'), 'utf8'), 'f')
  fuse.child.kill('SIGKILL')
  await fuse.exited
  await t.throwsAsync(fs.promises.readdir(path.join(r.dir, 'data')))
  await r.destroy()
  t.deepEqual(mountsUnder(n.dir), [])
  t.false(fs.existsSync(r.stateDir))
  t.deepEqual(layers.scan(), [])
  t.deepEqual((await env.store.listLeases()).filter((x) => x.holder === `${n.nodeId}-2`), [])
})
