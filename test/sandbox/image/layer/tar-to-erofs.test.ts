// tarToErofs against the path it replaces: every tar here is also unpacked
// (unpackLayer, layer mode) and built with mkfs.erofs; both images are
// mounted by the kernel and must hold the same tree, attribute for
// attribute (directories, link counts and nanosecond times included). Bad
// tars fail with the same code on both paths.
import test, { type ExecutionContext } from 'ava'
import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { native } from '../../../../fs/common/native.js'
import { buildErofs, tarToErofs, unpackLayer } from '../../../../sandbox/image/layer/index.js'
import { diffTrees, snapshotTree } from '../../../helpers/tree-compare.js'
import { badCases } from './bad-tars.js'
import { dir, file, fixtureLayerTars, hardlink, mount, packTar, streamOf, symlink, tmpDir, type PackEntry } from './helpers.js'

const T = 1_600_000_000
const fixtureTars = fixtureLayerTars(test)

/** Attributes the tree snapshot leaves out: directories' times, every link count and size. */
function attrDiffs(a: string, b: string): string[] {
  const out: string[] = []
  const walk = (rel: string): void => {
    const sa = fs.lstatSync(path.join(a, rel), { bigint: true })
    const sb = fs.lstatSync(path.join(b, rel), { bigint: true })
    for (const k of ['mode', 'uid', 'gid', 'nlink', 'mtimeNs', 'rdev'] as const) {
      if (sa[k] !== sb[k]) out.push(`${rel || '.'}: ${k} ${sa[k]} vs ${sb[k]}`)
    }
    if (!sa.isDirectory() && sa.size !== sb.size) out.push(`${rel}: size ${sa.size} vs ${sb.size}`)
    if (sa.isDirectory()) {
      const na = fs.readdirSync(path.join(a, rel)).sort()
      const nb = fs.readdirSync(path.join(b, rel)).sort()
      if (na.join('\0') !== nb.join('\0')) out.push(`${rel || '.'}: entries differ`)
      else for (const n of na) walk(rel ? `${rel}/${n}` : n)
    }
  }
  walk('')
  return out
}

/** Builds `tar` both ways, mounts both and compares them. */
async function sameAsMkfs(t: ExecutionContext, tar: Buffer, opts: { inlineTailBudget?: number } = {}): Promise<{ file: string; size: number }> {
  const work = tmpDir(t)
  const unpacked = path.join(work, 'unpacked')
  fs.mkdirSync(unpacked)
  const uStats = await unpackLayer(streamOf(tar), unpacked, { mode: 'layer' })
  await buildErofs(unpacked, path.join(work, 'mkfs.erofs'))
  const built = await tarToErofs(streamOf(tar), path.join(work, 'stream.erofs'), opts)
  t.deepEqual(built.stats, uStats)
  t.is(built.size, fs.statSync(path.join(work, 'stream.erofs')).size)
  t.is(built.size % 4096, 0)
  mount(t, path.join(work, 'mkfs.erofs'), path.join(work, 'a'), 'erofs', null)
  mount(t, path.join(work, 'stream.erofs'), path.join(work, 'b'), 'erofs', null)
  t.deepEqual(diffTrees(await snapshotTree(path.join(work, 'b')), await snapshotTree(path.join(work, 'a'))), [])
  t.deepEqual(attrDiffs(path.join(work, 'a'), path.join(work, 'b')), [])
  return { file: path.join(work, 'stream.erofs'), size: built.size }
}

test('the OCI fixture layers (umoci + skopeo: whiteouts, opaque directories, hard links, symlinks, xattrs) build the same tree as unpack + mkfs.erofs', async (t) => {
  t.true(fixtureTars.length >= 2)
  for (const tar of fixtureTars) await sameAsMkfs(t, tar)
})

test('owners, modes, nanosecond times, xattrs, whiteouts, opaque markers, implied directories, devices, links', async (t) => {
  const entries: PackEntry[] = [
    dir('./', { mode: 0o750, uid: 7, gid: 8, mtime: new Date((T + 1) * 1000), pax: { 'SCHILY.xattr.user.root': 'r' } }),
    dir('d', { mode: 0o2750, uid: 1234, gid: 99, mtime: new Date(T * 1000) }),
    file('d/suid', 'x', { mode: 0o4755, uid: 1234, gid: 5678, pax: { mtime: `${T}.123456789`, 'SCHILY.xattr.user.k': 'v', 'SCHILY.xattr.trusted.t': 'w' } }),
    dir('tmp', { mode: 0o1777 }),
    file('big-ids', 'y', { pax: { uid: '3000000', gid: '4000000' } }),
    file('a/.wh..wh..opq'),
    dir('a', { mode: 0o700, pax: { 'SCHILY.xattr.user.d': '1' } }),
    dir('b'),
    file('b/.wh..wh..opq'),
    file('b/.wh.gone', '', { mode: 0o600, uid: 3, gid: 4, mtime: new Date(0) }),
    file('.wh.top'),
    file('c/d/.wh.x'),
    file('.wh..wh.plnk/123', 'aufs bookkeeping'),
    file('x/y/z', 'q', { mtime: new Date((T + 50) * 1000) }),
    dir('h', { mode: 0o700 }),
    file('h/f', 'data'),
    hardlink('h/g', 'h/f'),
    hardlink('hl', './h/f'),
    symlink('s', '/etc/passwd'),
    symlink('h/rel', '../hl'),
    { header: { name: 'null', type: 'character-device', devmajor: 1, devminor: 3, mode: 0o666 } },
    { header: { name: 'loop', type: 'block-device', devmajor: 7, devminor: 300, mode: 0o660 } },
    { header: { name: 'pipe', type: 'fifo', mode: 0o600 } },
    dir('h', { mode: 0o751, uid: 5 }),
    file('trusted-overlay', 'o', { pax: { 'SCHILY.xattr.trusted.overlay.opaque': 'y' } }),
  ]
  await sameAsMkfs(t, await packTar(entries))
})

test('sizes around block and inline limits, big xattrs, long names and big directories', async (t) => {
  const rnd = (n: number, seed: number) => crypto.createHash('sha256').update(String(seed)).digest().toString('hex').repeat(Math.ceil(n / 64)).slice(0, n)
  const entries: PackEntry[] = []
  for (const [i, n] of [0, 1, 4095, 4096, 4097, 8191, 8192, 12345, 1 << 20, (1 << 20) + 4000].entries()) entries.push(file(`sizes/f${n}`, rnd(n, i)))
  // a tail that does not fit next to its inode once the xattrs are large
  const bigX = { 'SCHILY.xattr.user.big': 'x'.repeat(3000), 'SCHILY.xattr.trusted.small': 'c' }
  entries.push(file('xattrs/tail-too-big', rnd(4096 + 2000, 99), { pax: bigX }))
  entries.push(file('xattrs/no-tail', rnd(8192, 98), { pax: bigX }))
  entries.push(dir('xattrs/dir', { pax: bigX }))
  entries.push(symlink('xattrs/long-link', 'l/'.repeat(1500)))
  // names that sort before '.' and '..', and enough of them for several directory blocks
  for (const n of ['-a', '+b', '!c', ' d', '#e', '$f', '..x', '.y', 'Z', 'a']) entries.push(file(`sorted/${n}`, n))
  for (let i = 0; i < 600; i++) entries.push(file(`many/${String(i).padStart(4, '0')}-${'n'.repeat(i % 200)}`, String(i)))
  entries.push(file('unicode/ünï-çødé/名前', 'u'))
  await sameAsMkfs(t, await packTar(entries))
})

test('a 255-byte name (the longest; mkfs.erofs 1.5 cannot build it, so only this side is checked)', async (t) => {
  const work = tmpDir(t)
  const name = 'L'.repeat(255)
  await tarToErofs(streamOf(await packTar([file(`long/${name}`, 'long name'), file('long/short', 's')])), path.join(work, 'l.erofs'))
  mount(t, path.join(work, 'l.erofs'), path.join(work, 'm'), 'erofs', null)
  t.deepEqual(fs.readdirSync(path.join(work, 'm/long')).sort(), [name, 'short'])
  t.is(fs.readFileSync(path.join(work, 'm/long', name), 'utf8'), 'long name')
  await t.throwsAsync(tarToErofs(streamOf(await packTar([file(`long/${name}x`, '')])), path.join(work, 'm2.erofs')), { code: 'IMAGE_BAD_ARCHIVE' })
})

test('past the inline-tail budget, tails are stored as blocks of their own: the same tree, a larger image', async (t) => {
  const entries: PackEntry[] = []
  for (let i = 0; i < 200; i++) entries.push(file(`small/${i}`, `file ${i} `.repeat(1 + (i % 50))))
  const tar = await packTar(entries)
  const inline = await sameAsMkfs(t, tar)
  const capped = await sameAsMkfs(t, tar, { inlineTailBudget: 4096 })
  t.true(capped.size > inline.size)
})

test('a whiteout and an entry of the same name in one layer: the entry stays, a directory becomes opaque', async (t) => {
  const built = await sameAsMkfs(
    t,
    await packTar([
      file('.wh.a'), dir('a', { mode: 0o700 }), file('a/n', 'n'),
      dir('b'), file('b/n', 'n'), file('.wh.b'),
      file('.wh.c'), file('c', 'file'),
      file('d', 'file'), file('.wh.d'),
      file('.wh.e'), file('e/n', 'n'),
      file('.wh.f'), file('f/.wh..wh..opq'), file('f/n', 'n'),
    ]),
  )
  const mnt = path.join(path.dirname(built.file), 'check')
  mount(t, built.file, mnt, 'erofs', null)
  for (const d of ['a', 'b', 'e', 'f']) {
    t.is(native().lgetxattr(path.join(mnt, d), 'trusted.overlay.opaque').toString(), 'y', d)
  }
  t.true(fs.lstatSync(path.join(mnt, 'c')).isFile())
  t.true(fs.lstatSync(path.join(mnt, 'd')).isFile())
})

test('a layer of nothing but a root entry, and an empty tar', async (t) => {
  await sameAsMkfs(t, await packTar([dir('./', { mode: 0o700 })]))
  await sameAsMkfs(t, await packTar([]))
})

test('the same tar gives the same bytes', async (t) => {
  const tar = await packTar([dir('d'), file('d/a', 'x'.repeat(10000)), hardlink('b', 'd/a'), symlink('c', 'd'), file('.wh.e')])
  const work = tmpDir(t)
  await tarToErofs(streamOf(tar, 777), path.join(work, '1'))
  await tarToErofs(streamOf(tar, 5000), path.join(work, '2'))
  t.true(fs.readFileSync(path.join(work, '1')).equals(fs.readFileSync(path.join(work, '2'))))
})

test('bad input fails with the code unpack gives, and leaves no file behind', async (t) => {
  const work = tmpDir(t)
  const outside = path.join(work, 'outside')
  fs.mkdirSync(outside)
  let n = 0
  for (const c of badCases) {
    if ((c.mode ?? 'layer') !== 'layer') continue
    n++
    const out = path.join(work, 'out', `case-${n}`)
    fs.mkdirSync(out, { recursive: true })
    await t.throwsAsync(tarToErofs(streamOf(await c.tar(outside)), path.join(out, 'layer.erofs')), { code: c.code as never, ...(c.message ? { message: c.message } : {}) }, c.name)
    t.deepEqual(fs.readdirSync(out), [], c.name)
  }
  t.true(n >= 20)
})

test('a full disk while the image is written: NO_SPACE, and no file left behind', async (t) => {
  // the image's data goes to the file on the thread pool; the failure must still surface, once, with its code
  const work = tmpDir(t)
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', work])
  t.teardown(() => execFileSync('umount', ['-l', work]))
  const tar = await packTar([file('big', crypto.randomBytes(6 * 1024 * 1024)), file('after', 'y')])
  await t.throwsAsync(tarToErofs(streamOf(tar, 256 * 1024), path.join(work, 'x.erofs')), { code: 'NO_SPACE' })
  t.deepEqual(fs.readdirSync(work), [])
})

test('an error of the input stream is passed on; the output directory must exist', async (t) => {
  const work = tmpDir(t)
  const tar = await packTar([file('a', 'x'.repeat(100000))])
  const s = streamOf(tar)
  const boom = new Error('source broke')
  let sent = 0
  s.on('data', () => {
    if (++sent === 3) s.destroy(boom)
  })
  const e = await t.throwsAsync(tarToErofs(s, path.join(work, 'x.erofs')))
  t.truthy(e)
  t.deepEqual(fs.readdirSync(work), [])
  await t.throwsAsync(tarToErofs(streamOf(tar), path.join(work, 'missing', 'x.erofs')), { code: 'IMAGE_BUILD_FAILED' })
})
