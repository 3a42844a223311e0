// Rootfs of real sandboxes on a real cluster: the fixture image's layers are
// mounted through the node's FUSE mount (file-backed EROFS) and stacked with
// overlayfs; datasets are read-only binds of DFS paths.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { StrataError, type ErrorCode } from '../../../fs/common/errors.js'
import { readMounts } from '../../../fs/fuse/mounts.js'
import type { RootfsSpec } from '../../../sandbox/rootfs/index.js'
import { mountsUnder } from '../../../sandbox/rootfs/mounts.js'
import { diffTrees, snapshotTree } from '../../helpers/tree-compare.js'
import { mountCount, node, storeLayer, useRootfsCluster } from './helpers.js'

const env = useRootfsCluster(test)

function digests(): string[] {
  return env.manifest.layers.map((l) => l.digest)
}

test.serial('two sandboxes from one image: trees equal umoci unpack, writes stay apart, each layer mounted once, unmounted after the last destroy', async (t) => {
  const n = node(t, env)
  t.is(env.manifest.layers.length, 3)
  const a = await n.builder.create({ sandboxId: 'sb-a', layers: digests(), stateDir: path.join(n.dir, 'sandboxes/sb-a') })
  const b = await n.builder.create({ sandboxId: 'sb-b', layers: digests(), stateDir: path.join(n.dir, 'sandboxes/sb-b') })
  t.is(a.dir, path.join(n.dir, 'sandboxes/sb-a/rootfs'))

  // every layer is mounted exactly once on the node, as EROFS read through the FUSE mount
  const mounts = readMounts()
  for (const d of digests()) {
    const mp = n.layers.mountpoint(d)
    const ms = mounts.filter((m) => m.mountpoint === mp)
    t.is(ms.length, 1, `layer ${d} mounted once`)
    t.is(ms[0]!.fstype, 'erofs')
    t.deepEqual(n.layers.list().find((l) => l.digest === d)?.users, { 'sb-a': 1, 'sb-b': 1 })
  }
  t.is(mounts.filter((m) => m.fstype === 'erofs' && m.mountpoint.startsWith(n.layers.dir + '/')).length, 3)
  // and leased by the node
  t.deepEqual((await env.store.listLeases()).filter((l) => l.holder === n.nodeId).map((l) => l.digest).sort(), [...digests()].sort())

  // the merged trees are the image
  t.deepEqual(diffTrees(await snapshotTree(a.dir), env.reference), [])
  t.deepEqual(diffTrees(await snapshotTree(b.dir), env.reference), [])

  // a write in one is not visible in the other
  await fs.promises.writeFile(path.join(a.dir, 'etc/only-in-a'), 'a\n')
  await fs.promises.appendFile(path.join(a.dir, 'etc/passwd'), 'mallory:x:1:1::/:/bin/sh\n')
  await fs.promises.rm(path.join(a.dir, 'opq/new'))
  t.false(fs.existsSync(path.join(b.dir, 'etc/only-in-a')))
  t.true(fs.existsSync(path.join(b.dir, 'opq/new')))
  t.false((await fs.promises.readFile(path.join(b.dir, 'etc/passwd'), 'utf8')).includes('mallory'))
  t.deepEqual(diffTrees(await snapshotTree(b.dir), env.reference), [])
  // the write went to a's upper dir on local disk
  t.is(await fs.promises.readFile(path.join(a.upperDir, 'etc/only-in-a'), 'utf8'), 'a\n')

  await a.destroy()
  await a.destroy() // idempotent
  t.false(fs.existsSync(path.join(n.dir, 'sandboxes/sb-a')))
  for (const d of digests()) t.is(mountCount(n.layers.mountpoint(d)), 1, 'still mounted for b')
  t.deepEqual(diffTrees(await snapshotTree(b.dir), env.reference), [])

  await b.destroy()
  for (const d of digests()) {
    t.is(mountCount(n.layers.mountpoint(d)), 0)
    t.false(fs.existsSync(n.layers.mountpoint(d)))
  }
  t.deepEqual(mountsUnder(n.dir), [])
  t.deepEqual(n.layers.list(), [])
  t.deepEqual((await env.store.listLeases()).filter((l) => l.holder === n.nodeId), [])
})

test.serial('creating a rootfs reads only what the mounts touch, not the layer', async (t) => {
  const n = node(t, env)
  const big = await storeLayer(env, t, async (root) => {
    await fs.promises.mkdir(path.join(root, 'opt'))
    const buf = Buffer.alloc(32 << 20)
    for (let i = 0; i < buf.length; i += 4096) buf.writeUInt32LE(i * 2654435761 >>> 0, i)
    await fs.promises.writeFile(path.join(root, 'opt/blob.bin'), buf)
    await fs.promises.writeFile(path.join(root, 'opt/small.txt'), 'small\n')
  })
  const before = await env.fuseBytesRead()
  t.false(Number.isNaN(before), 'the FUSE daemon reports bytesRead')
  const r = await n.builder.create({ sandboxId: 'sb-lazy', layers: [...digests(), big.digest], stateDir: path.join(n.dir, 'sandboxes/sb-lazy') })
  t.teardown(() => r.destroy())
  t.is(await fs.promises.readFile(path.join(r.dir, 'opt/small.txt'), 'utf8'), 'small\n')
  const afterCreate = await env.fuseBytesRead()
  const imageBytes = env.manifest.layers.reduce((s, l) => s + l.size, 0) + big.size
  t.log(`create read ${afterCreate - before} bytes of a ${imageBytes}-byte image`)
  t.true(afterCreate - before < 0.1 * imageBytes, `${afterCreate - before} bytes read for create, image is ${imageBytes}`)
  // nothing copied locally either: the upper dir is empty
  t.deepEqual(await fs.promises.readdir(r.upperDir), [])
  // the counter does count: reading the big file fetches it
  const h = await fs.promises.readFile(path.join(r.dir, 'opt/blob.bin'))
  t.is(h.length, 32 << 20)
  t.true((await env.fuseBytesRead()) - afterCreate >= 32 << 20)
})

test.serial('a dataset is a read-only bind of the DFS: bytes equal, writes fail with EROFS', async (t) => {
  const n = node(t, env)
  const src = `/datasets/ds-${process.pid}`
  await env.fs.mkdir(`${src}/sub`, { recursive: true })
  const files: Record<string, Buffer> = {
    'a.txt': Buffer.from('alpha\n'),
    'sub/b.bin': Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 7) & 0xff)),
  }
  for (const [p, data] of Object.entries(files)) await env.fs.writeFile(`${src}/${p}`, data)
  await env.fs.writeFile(`/datasets/one-${process.pid}.txt`, 'single file\n')
  t.teardown(() => env.fs.rm(src, { recursive: true }).catch(() => undefined))

  const r = await n.builder.create({
    sandboxId: 'sb-ds',
    layers: digests(),
    stateDir: path.join(n.dir, 'sandboxes/sb-ds'),
    datasets: [
      { source: src, target: '/data' },
      { source: `/datasets/one-${process.pid}.txt`, target: '/etc/one.txt' },
      { source: src, target: '/new/deep/dir' },
    ],
  })
  t.teardown(() => r.destroy())
  for (const [p, data] of Object.entries(files)) t.deepEqual(await fs.promises.readFile(path.join(r.dir, 'data', p)), data)
  t.is(await fs.promises.readFile(path.join(r.dir, 'etc/one.txt'), 'utf8'), 'single file\n')
  t.deepEqual(await fs.promises.readFile(path.join(r.dir, 'new/deep/dir/a.txt')), files['a.txt'])
  t.deepEqual(
    r.datasets.map((d) => [d.target, d.type]),
    [
      ['/data', 'dir'],
      ['/etc/one.txt', 'file'],
      ['/new/deep/dir', 'dir'],
    ],
  )
  const m = readMounts().find((x) => x.mountpoint === path.join(r.dir, 'data'))!
  t.truthy(m)
  for (const o of ['ro', 'nosuid', 'nodev']) t.true(m.options.split(',').includes(o), `${o} in ${m.options}`)

  await t.throwsAsync(fs.promises.writeFile(path.join(r.dir, 'data/a.txt'), 'x'), { code: 'EROFS' })
  await t.throwsAsync(fs.promises.writeFile(path.join(r.dir, 'data/new.txt'), 'x'), { code: 'EROFS' })
  await t.throwsAsync(fs.promises.mkdir(path.join(r.dir, 'data/d')), { code: 'EROFS' })
  await t.throwsAsync(fs.promises.unlink(path.join(r.dir, 'data/sub/b.bin')), { code: 'EROFS' })
  await t.throwsAsync(fs.promises.appendFile(path.join(r.dir, 'etc/one.txt'), 'x'), { code: 'EROFS' })
  // the rest of the rootfs stays writable
  await fs.promises.writeFile(path.join(r.dir, 'etc/ok'), 'ok')

  await r.destroy()
  t.deepEqual(mountsUnder(n.dir), [])
  // destroy removed the mountpoints, not the data
  t.deepEqual(Buffer.from(await env.fs.readFile(`${src}/sub/b.bin`)), files['sub/b.bin'])
  t.false(fs.existsSync(r.stateDir))
})

test.serial('bad dataset targets and sources are refused with typed errors and leave nothing behind', async (t) => {
  const n = node(t, env)
  const outside = path.join(n.dir, 'outside')
  const trap = await storeLayer(env, t, async (root) => {
    await fs.promises.mkdir(path.join(root, 'etc'))
    await fs.promises.mkdir(path.join(root, 'home'))
    await fs.promises.symlink('/etc', path.join(root, 'abs'))
    await fs.promises.symlink('../../../../../../../../../../..' + outside, path.join(root, 'up'))
    await fs.promises.symlink('home/../../x', path.join(root, 'sneaky'))
    await fs.promises.symlink('loop', path.join(root, 'loop'))
    await fs.promises.writeFile(path.join(root, 'file'), 'f')
  })
  const src = `/datasets/t-${process.pid}`
  await env.fs.mkdir(src, { recursive: true })
  await env.fs.writeFile(`${src}/x`, 'x')
  t.teardown(() => env.fs.rm(src, { recursive: true }).catch(() => undefined))
  await env.fs.symlink('/etc', `/datasets/link-${process.pid}`)
  t.teardown(() => env.fs.rm(`/datasets/link-${process.pid}`).catch(() => undefined))

  let k = 0
  const attempt = async (datasets: RootfsSpec['datasets'], code: ErrorCode) => {
    const stateDir = path.join(n.dir, 'sandboxes', `bad-${++k}`)
    const e = await t.throwsAsync(n.builder.create({ sandboxId: `bad-${k}`, layers: [trap.digest], stateDir, datasets }), { instanceOf: StrataError })
    t.is(e?.code, code, JSON.stringify(datasets))
    t.deepEqual(mountsUnder(n.dir), [], 'no mounts left')
    t.false(fs.existsSync(stateDir), 'no dirs left')
    t.deepEqual(n.layers.list(), [], 'no layer held')
  }
  for (const target of ['data', '/', '/../data', '/a/../../data', '/up/x', '/up', '/sneaky', '/loop/x', '/file/x', '/file', '/etc/\0x']) {
    await attempt([{ source: src, target }], 'ROOTFS_BAD_MOUNT_TARGET')
  }
  t.false(fs.existsSync(outside), 'nothing created outside the rootfs')
  // a target inside an earlier (read-only) dataset cannot be created there
  await attempt([{ source: src, target: '/data' }, { source: src, target: '/data/inner' }], 'ROOTFS_BAD_MOUNT_TARGET')
  await attempt([{ source: `/datasets/missing-${process.pid}`, target: '/data' }], 'ROOTFS_DATASET_NOT_FOUND')
  await attempt([{ source: 'datasets', target: '/data' }], 'ROOTFS_BAD_DATASET')
  await attempt([{ source: '/datasets/../etc', target: '/data' }], 'ROOTFS_BAD_DATASET')
  // a DFS symlink to /etc resolves inside the DFS (there is no /etc there), never on the host
  await attempt([{ source: `/datasets/link-${process.pid}`, target: '/data' }], 'ROOTFS_DATASET_NOT_FOUND')

  // an absolute symlink in the image resolves inside the rootfs, not on the host
  const r = await n.builder.create({ sandboxId: 'ok', layers: [trap.digest], stateDir: path.join(n.dir, 'sandboxes/ok'), datasets: [{ source: src, target: '/abs/ds' }] })
  t.teardown(() => r.destroy())
  t.is(r.datasets[0]!.hostPath, path.join(r.dir, 'etc/ds'))
  t.false(fs.existsSync('/etc/ds'))
  t.is(await fs.promises.readFile(path.join(r.dir, 'etc/ds/x'), 'utf8'), 'x')
  await r.destroy()
  t.deepEqual(mountsUnder(n.dir), [])
})

test.serial('create failing midway undoes everything: after the overlay and a dataset, and after a layer', async (t) => {
  const n = node(t, env)
  const src = `/datasets/m-${process.pid}`
  await env.fs.mkdir(src, { recursive: true })
  t.teardown(() => env.fs.rm(src, { recursive: true }).catch(() => undefined))
  const stateDir = path.join(n.dir, 'sandboxes/mid')
  // the second dataset's target is found bad after the overlay and the first bind are mounted
  const e1 = await t.throwsAsync(
    n.builder.create({ sandboxId: 'mid', layers: digests(), stateDir, datasets: [{ source: src, target: '/data' }, { source: src, target: '/etc/passwd' }] }),
    { instanceOf: StrataError },
  )
  t.is(e1?.code, 'ROOTFS_BAD_MOUNT_TARGET')
  t.deepEqual(mountsUnder(n.dir), [])
  t.false(fs.existsSync(stateDir))
  t.deepEqual(n.layers.list(), [])
  t.deepEqual(await fs.promises.readdir(n.layers.dir).catch(() => []), [])
  // a layer that is not stored, after two that are
  const missing = 'sha256:' + 'f'.repeat(64)
  const e2 = await t.throwsAsync(n.builder.create({ sandboxId: 'mid', layers: [...digests().slice(0, 2), missing], stateDir }), { instanceOf: StrataError })
  t.is(e2?.code, 'IMAGE_BLOB_MISSING')
  t.deepEqual(mountsUnder(n.dir), [])
  t.false(fs.existsSync(stateDir))
  t.deepEqual(n.layers.list(), [])
  t.deepEqual((await env.store.listLeases()).filter((l) => l.holder === n.nodeId), [])
})
