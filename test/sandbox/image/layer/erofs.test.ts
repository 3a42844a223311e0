import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildErofs, readTar, unpackLayer, type TarEntryHeader } from '../../../../sandbox/image/layer/index.js'
import { TarWriter } from '../../../../sandbox/image/layer/tar-writer.js'
import { dir, file, fixtureLayerTars, mount, packTar, sha256, streamOf, tmpDir } from './helpers.js'

const plainTars = fixtureLayerTars(test)

/**
 * The same layer with its entries in reverse order (hard links moved after
 * their targets), so that unpacking creates every inode in a different order.
 * Rewritten with readTar/TarWriter, which keep binary xattr values.
 */
async function reversed(tar: Buffer): Promise<Buffer> {
  const entries: { h: TarEntryHeader; data: Buffer }[] = []
  for await (const { header, body } of readTar(streamOf(tar))) {
    const chunks: Buffer[] = []
    for await (const c of body) chunks.push(c)
    entries.push({ h: header, data: Buffer.concat(chunks) })
  }
  const order = [...entries.filter((e) => e.h.type !== 'link').reverse(), ...entries.filter((e) => e.h.type === 'link')]
  const out: Buffer[] = []
  const sink = new (await import('node:stream')).Writable({
    write(c: Buffer, _e, cb) {
      out.push(c)
      cb()
    },
  })
  const w = new TarWriter(sink)
  for (const { h, data } of order) {
    const name = h.type === 'directory' && !h.name.endsWith('/') ? h.name + '/' : h.name
    await w.entry({ ...h, name }, (async function* () {
      yield data
    })())
  }
  await w.finish(true)
  return Buffer.concat(out)
}

async function entryNames(tar: Buffer): Promise<string[]> {
  const names: string[] = []
  for await (const { header, body } of readTar(streamOf(tar))) {
    for await (const _ of body) void _
    names.push(header.name)
  }
  return names
}

test('the same tar unpacked in a different creation order builds byte-identical EROFS files (plain, lz4, lz4hc)', async (t) => {
  const work = tmpDir(t)
  for (const [i, tar] of plainTars.entries()) {
    const fwd = path.join(work, `fwd${i}`)
    const rev = path.join(work, `rev${i}`)
    fs.mkdirSync(fwd)
    fs.mkdirSync(rev)
    const rtar = await reversed(tar)
    // The creation order is the tar order; inode numbers are not a reliable
    // witness of it (ext4 spreads directories over block groups).
    t.notDeepEqual(await entryNames(tar), await entryNames(rtar), 'the two trees are created in different orders')
    await unpackLayer(streamOf(tar), fwd, { mode: 'layer' })
    await unpackLayer(streamOf(rtar), rev, { mode: 'layer' })
    // Compression on the big layer only, to keep the suite quick.
    for (const compress of i === 0 ? ([undefined, 'lz4', 'lz4hc'] as const) : ([undefined] as const)) {
      const opts = compress ? { compress } : {}
      const a = await buildErofs(fwd, path.join(work, `fwd${i}-${compress}.erofs`), opts)
      const b = await buildErofs(rev, path.join(work, `rev${i}-${compress}.erofs`), opts)
      t.is(a.digest, b.digest, `layer ${i} ${compress ?? 'uncompressed'}`)
      t.is(a.size, b.size)
      t.is(a.digest, sha256(fs.readFileSync(path.join(work, `fwd${i}-${compress}.erofs`))))
    }
  }
  t.deepEqual(fs.readdirSync(work).filter((f) => f.endsWith('.tmp')), [], 'no temporary files left')
})

test('building the same tree in a later second gives the same bytes', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  await unpackLayer(streamOf(plainTars[0]!), tree, { mode: 'layer' })
  const a = await buildErofs(tree, path.join(work, 'a.erofs'))
  const s = Math.floor(Date.now() / 1000)
  while (Math.floor(Date.now() / 1000) === s) await sleep(20)
  const b = await buildErofs(tree, path.join(work, 'b.erofs'))
  t.is(a.digest, b.digest)
})

test('every mtime is kept to the nanosecond, the newest one included', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  const T = 1_650_000_000
  await unpackLayer(
    streamOf(
      await packTar([
        dir('./', { mtime: new Date(T * 1000) }),
        dir('d', { pax: { mtime: `${T + 50}.5` } }),
        file('d/a', 'a', { pax: { mtime: `${T}.000000005` } }),
        file('newest', 'n', { pax: { mtime: `${T + 100}.999999999` } }),
        file('also-newest-second', 'n', { pax: { mtime: `${T + 100}.25` } }),
      ]),
    ),
    tree,
    { mode: 'layer' },
  )
  const img = path.join(work, 'x.erofs')
  await buildErofs(tree, img)
  const mp = path.join(work, 'm')
  mount(t, img, mp, 'erofs', null)
  const ns = (p: string): bigint => fs.lstatSync(path.join(mp, p), { bigint: true }).mtimeNs
  t.is(ns('.'), BigInt(T) * 1_000_000_000n)
  t.is(ns('d'), BigInt(T + 50) * 1_000_000_000n + 500_000_000n)
  t.is(ns('d/a'), BigInt(T) * 1_000_000_000n + 5n)
  t.is(ns('newest'), BigInt(T + 100) * 1_000_000_000n + 999_999_999n)
  t.is(ns('also-newest-second'), BigInt(T + 100) * 1_000_000_000n + 250_000_000n)
})

test('names mkfs.erofs 1.5 would silently drop: an empty lost+found is dropped, anything else fails the build', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(path.join(tree, 'lost+found'), { recursive: true })
  fs.writeFileSync(path.join(tree, 'kept'), 'k')
  const img = path.join(work, 'ok.erofs')
  await buildErofs(tree, img)
  const mp = path.join(work, 'm')
  mount(t, img, mp, 'erofs', null)
  t.deepEqual(fs.readdirSync(mp), ['kept'])
  fs.writeFileSync(path.join(tree, 'lost+found.txt'), 'data')
  const e = await t.throwsAsync(buildErofs(tree, path.join(work, 'bad.erofs')), { code: 'IMAGE_BUILD_FAILED' })
  t.regex(e!.message, /lost\+found/)
})

test('mkfs.erofs failure → IMAGE_BUILD_FAILED with its stderr; a missing source too', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  const e = await t.throwsAsync(buildErofs(tree, path.join(work, 'no/such/dir/x.erofs')), { code: 'IMAGE_BUILD_FAILED' })
  const stderr = (e as unknown as { detail: { stderr: string } }).detail.stderr
  t.true(stderr.length > 0)
  t.true(e!.message.includes(stderr.trim().split('\n')[0]!))
  await t.throwsAsync(buildErofs(path.join(work, 'missing'), path.join(work, 'y.erofs')), { code: 'IMAGE_BUILD_FAILED' })
  fs.writeFileSync(path.join(work, 'plain'), '')
  await t.throwsAsync(buildErofs(path.join(work, 'plain'), path.join(work, 'z.erofs')), { code: 'IMAGE_BUILD_FAILED' })
  t.deepEqual(fs.readdirSync(work).sort(), ['plain', 'tree'])
})
