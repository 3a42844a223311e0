import test, { type ExecutionContext } from 'ava'
import { spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { native } from '../../../../fs/common/native.js'
import { decompressStream, unpackLayer, type UnpackMode } from '../../../../sandbox/image/layer/index.js'
import { run } from '../../../helpers/oci-fixtures.js'
import { diffTrees, snapshotTree } from '../../../helpers/tree-compare.js'
import { badCases } from './bad-tars.js'
import { dir, file, hardlink, packTar, streamOf, symlink, tmpDir, type PackEntry } from './helpers.js'

const T = 1_600_000_000

function lst(p: string): fs.BigIntStats {
  return fs.lstatSync(p, { bigint: true })
}

function modeOf(p: string): number {
  return Number(lst(p).mode) & 0o7777
}

function mtimeNs(p: string): bigint {
  return lst(p).mtimeNs
}

function xattr(p: string, name: string): string | null {
  try {
    return native().lgetxattr(p, name).toString()
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENODATA') return null
    throw e
  }
}

async function unpack(t: ExecutionContext, entries: PackEntry[], mode: UnpackMode = 'layer', into?: string) {
  const dest = into ?? path.join(tmpDir(t), 'dest')
  fs.mkdirSync(dest, { recursive: true })
  const stats = await unpackLayer(streamOf(await packTar(entries)), dest, { mode })
  return { dest, stats }
}

// --- layer mode

test('layer mode keeps owners, modes (setuid after chown, sticky), nanosecond mtimes, xattrs; directory times are set last', async (t) => {
  const { dest, stats } = await unpack(t, [
    dir('./', { mode: 0o750, uid: 7, gid: 8, mtime: new Date((T + 1) * 1000) }),
    dir('d', { mode: 0o2750, uid: 1234, gid: 99, mtime: new Date(T * 1000) }),
    file('d/suid', 'x', { mode: 0o4755, uid: 1234, gid: 5678, pax: { mtime: `${T}.123456789`, 'SCHILY.xattr.user.k': 'v' } }),
    dir('tmp', { mode: 0o1777 }),
    file('big-ids', 'y', { pax: { uid: '3000000', gid: '4000000' } }),
    file('d/later', 'z'),
  ])
  t.deepEqual(stats, { entries: 6, files: 3, bytes: 3, whiteouts: 0, maxMtime: T + 1 })
  t.is(modeOf(dest), 0o750)
  t.is(Number(lst(dest).uid), 7)
  t.is(mtimeNs(dest), BigInt(T + 1) * 1_000_000_000n)
  t.is(modeOf(path.join(dest, 'd')), 0o2750)
  t.is(Number(lst(path.join(dest, 'd')).uid), 1234)
  t.is(mtimeNs(path.join(dest, 'd')), BigInt(T) * 1_000_000_000n, 'set after d/later was written')
  const suid = lst(path.join(dest, 'd/suid'))
  t.is(Number(suid.mode) & 0o7777, 0o4755)
  t.is(Number(suid.uid), 1234)
  t.is(Number(suid.gid), 5678)
  t.is(suid.mtimeNs, BigInt(T) * 1_000_000_000n + 123456789n)
  t.is(xattr(path.join(dest, 'd/suid'), 'user.k'), 'v')
  t.is(modeOf(path.join(dest, 'tmp')), 0o1777)
  t.is(Number(lst(path.join(dest, 'big-ids')).uid), 3000000)
  t.is(Number(lst(path.join(dest, 'big-ids')).gid), 4000000)
})

test('layer mode: whiteouts become char 0/0, opaque markers (before or after their directory) the opaque xattr', async (t) => {
  const { dest, stats } = await unpack(t, [
    file('a/.wh..wh..opq'),
    dir('a', { mode: 0o700, pax: { 'SCHILY.xattr.user.d': '1' } }),
    dir('b'),
    file('b/.wh..wh..opq'),
    file('b/.wh.gone', '', { mode: 0o600, uid: 3, gid: 4, mtime: new Date(0) }),
    file('.wh.top'),
    file('c/d/.wh.x'),
    file('.wh..wh.plnk/123', 'aufs bookkeeping'),
  ])
  t.is(stats.whiteouts, 5)
  for (const w of ['b/gone', 'top', 'c/d/x']) {
    const st = lst(path.join(dest, w))
    t.true(st.isCharacterDevice(), w)
    t.is(st.rdev, 0n, w)
  }
  t.is(Number(lst(path.join(dest, 'b/gone')).uid), 3)
  t.is(modeOf(path.join(dest, 'b/gone')), 0o600)
  t.is(mtimeNs(path.join(dest, 'b/gone')), 0n)
  t.is(xattr(path.join(dest, 'a'), 'trusted.overlay.opaque'), 'y')
  t.is(xattr(path.join(dest, 'a'), 'user.d'), '1')
  t.is(modeOf(path.join(dest, 'a')), 0o700)
  t.is(xattr(path.join(dest, 'b'), 'trusted.overlay.opaque'), 'y')
  t.is(xattr(path.join(dest, 'c'), 'trusted.overlay.opaque'), null)
  t.false(fs.existsSync(path.join(dest, '.wh..wh.plnk')))
  t.deepEqual(fs.readdirSync(dest).sort(), ['a', 'b', 'c', 'top'])
})

test('layer mode: implied directories and a missing root entry get 0755 root:root and the newest mtime of the layer', async (t) => {
  const { dest } = await unpack(t, [file('x/y/z', 'q', { mtime: new Date((T + 50) * 1000) }), file('w', '', { mtime: new Date(T * 1000) })])
  for (const d of [dest, path.join(dest, 'x'), path.join(dest, 'x/y')]) {
    t.is(modeOf(d), 0o755)
    t.is(Number(lst(d).uid), 0)
    t.is(mtimeNs(d), BigInt(T + 50) * 1_000_000_000n)
  }
})

test('layer mode: hard links, symlinks, devices and fifos; a repeated directory takes the later attributes', async (t) => {
  const { dest, stats } = await unpack(t, [
    dir('d', { mode: 0o700 }),
    file('d/f', 'data'),
    hardlink('d/g', 'd/f'),
    hardlink('h', './d/f'),
    symlink('s', '/etc/passwd'),
    symlink('d/rel', '../h'),
    { header: { name: 'null', type: 'character-device', devmajor: 1, devminor: 3, mode: 0o666 } },
    { header: { name: 'loop', type: 'block-device', devmajor: 7, devminor: 300, mode: 0o660 } },
    { header: { name: 'pipe', type: 'fifo', mode: 0o600 } },
    dir('d', { mode: 0o751, uid: 5 }),
  ])
  t.is(stats.files, 1)
  const ino = lst(path.join(dest, 'd/f')).ino
  t.is(lst(path.join(dest, 'd/g')).ino, ino)
  t.is(lst(path.join(dest, 'h')).ino, ino)
  t.is(lst(path.join(dest, 'h')).nlink, 3n)
  t.is(fs.readlinkSync(path.join(dest, 's')), '/etc/passwd')
  t.is(fs.readlinkSync(path.join(dest, 'd/rel')), '../h')
  t.true(lst(path.join(dest, 'null')).isCharacterDevice())
  t.is(lst(path.join(dest, 'null')).rdev, BigInt((1 << 8) | 3))
  t.is(modeOf(path.join(dest, 'null')), 0o666)
  t.true(lst(path.join(dest, 'loop')).isBlockDevice())
  t.is(lst(path.join(dest, 'loop')).rdev, BigInt((300 & 0xff) | (7 << 8) | ((300 & ~0xff) << 12)))
  t.true(lst(path.join(dest, 'pipe')).isFIFO())
  t.is(modeOf(path.join(dest, 'd')), 0o751)
  t.is(Number(lst(path.join(dest, 'd')).uid), 5)
})

test('layer mode refuses a destination that is not empty', async (t) => {
  const dest = tmpDir(t)
  fs.writeFileSync(path.join(dest, 'x'), '')
  await t.throwsAsync(unpackLayer(streamOf(await packTar([file('a')])), dest, { mode: 'layer' }), { code: 'INVALID_ARGUMENT' })
})

test('tars GNU tar writes (gnu and posix formats: long names and link targets, unicode) unpack as GNU tar extracts them', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  const deep = path.join(src, 'a'.repeat(90), 'b'.repeat(90), 'c'.repeat(90))
  fs.mkdirSync(deep, { recursive: true })
  fs.writeFileSync(path.join(deep, 'f'.repeat(120)), 'long')
  fs.linkSync(path.join(deep, 'f'.repeat(120)), path.join(src, 'h'.repeat(110)))
  fs.symlinkSync('t'.repeat(200), path.join(src, 'longlink'))
  fs.writeFileSync(path.join(src, 'ünï ☃'), 'u')
  fs.chownSync(path.join(src, 'ünï ☃'), 4321, 8765)
  fs.chmodSync(path.join(src, 'ünï ☃'), 0o4711)
  for (const format of ['gnu', 'posix']) {
    const tarFile = path.join(work, `${format}.tar`)
    await run('tar', [`--format=${format}`, '--numeric-owner', '-C', src, '-cf', tarFile, '.'])
    const ours = path.join(work, `ours-${format}`)
    const theirs = path.join(work, `theirs-${format}`)
    fs.mkdirSync(ours)
    fs.mkdirSync(theirs)
    await unpackLayer(fs.createReadStream(tarFile), ours, { mode: 'layer' })
    await run('tar', ['--numeric-owner', '--same-owner', '-p', '-C', theirs, '-xf', tarFile])
    t.deepEqual(diffTrees(await snapshotTree(ours, { skipRoot: true }), await snapshotTree(theirs, { skipRoot: true })), [], format)
  }
})

test('sparse files (GNU tar -S, every format) unpack with their holes as holes: the same bytes, no blocks for the holes, in either mode; holeCap', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  fs.mkdirSync(src)
  // a hole first, records spread over 64 MiB, a hole at the end (the size is set, not written)
  const f = path.join(src, 'lastlog')
  fs.writeFileSync(f, '')
  fs.truncateSync(f, 64 << 20)
  const fd = fs.openSync(f, 'r+')
  for (let i = 1; i <= 20; i++) fs.writeSync(fd, `record ${i}`, i * 3_000_000)
  fs.closeSync(fd)
  const want = crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex')
  for (const flags of [['--format=gnu'], ['--format=pax', '--sparse-version=0.0'], ['--format=pax', '--sparse-version=0.1'], ['--format=pax', '--sparse-version=1.0']]) {
    const tarFile = path.join(work, 'sparse.tar')
    await run('tar', [...flags, '-S', '--numeric-owner', '-C', src, '-cf', tarFile, 'lastlog'])
    for (const mode of ['layer', 'apply'] as const) {
      const what = `${flags.join(' ')} ${mode}`
      const dest = path.join(work, `dest-${mode}`)
      fs.mkdirSync(dest)
      // small pieces: holes and data meet inside what has arrived
      await unpackLayer(streamOf(fs.readFileSync(tarFile), 1000), dest, { mode, ...(mode === 'apply' ? { holeCap: Infinity } : {}) })
      const out = path.join(dest, 'lastlog')
      const st = fs.statSync(out)
      t.is(st.size, 64 << 20, what)
      t.is(crypto.createHash('sha256').update(fs.readFileSync(out)).digest('hex'), want, what)
      // 20 records of a block each (it was 64 MiB of blocks: the holes written as zeros)
      t.true(st.blocks * 512 <= 20 * 64 * 1024, `${what}: ${st.blocks * 512} bytes allocated`)
      fs.rmSync(dest, { recursive: true })
    }
  }
  // the cap on holes is the tar reader's: 1 GiB by default, none with holeCap: Infinity (dirToErofs bounds what they cost)
  fs.truncateSync(f, 3 * 1024 ** 3)
  const tarFile = path.join(work, 'big.tar')
  await run('tar', ['--format=pax', '-S', '--numeric-owner', '-C', src, '-cf', tarFile, 'lastlog'])
  const capped = path.join(work, 'capped')
  fs.mkdirSync(capped)
  await t.throwsAsync(unpackLayer(fs.createReadStream(tarFile), capped, { mode: 'layer' }), { code: 'IMAGE_BAD_ARCHIVE', message: /exceed the cap of 1073741824 hole bytes/ })
  const uncapped = path.join(work, 'uncapped')
  fs.mkdirSync(uncapped)
  await unpackLayer(fs.createReadStream(tarFile), uncapped, { mode: 'apply', holeCap: Infinity })
  const st = fs.statSync(path.join(uncapped, 'lastlog'))
  t.is(st.size, 3 * 1024 ** 3)
  t.true(st.blocks * 512 <= 20 * 64 * 1024, `${st.blocks * 512} bytes allocated`)
})

test('a sparse file whose data is spread thinly (a byte every MiB) fills whole blocks: what that costs beyond the data is capped before the file is written', async (t) => {
  const work = tmpDir(t)
  // a PAX 0.1 map written by Python's tarfile (the records are ours; GNU tar stores whole 4 KiB blocks of data)
  const tarFile = path.join(work, 'thin.tar')
  const script = `
import io, sys, tarfile
ti = tarfile.TarInfo('thin'); ti.size = 300
ti.pax_headers = {'GNU.sparse.size': str(300 << 20), 'GNU.sparse.map': ','.join('%d,1' % (i << 20) for i in range(300))}
with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as tf:
    tf.addfile(ti, io.BytesIO(b'x' * 300))
`
  await run('python3', ['-c', script, tarFile])
  const capped = path.join(work, 'capped')
  fs.mkdirSync(capped)
  // 300 blocks of 4 KiB for 300 bytes
  await t.throwsAsync(unpackLayer(fs.createReadStream(tarFile), capped, { mode: 'apply', holeCap: Infinity, slackCap: 1 << 20 }), {
    code: 'IMAGE_BAD_ARCHIVE',
    message: /"thin": sparse file: unpacking it takes 1228500 bytes of zeros in the 4 KiB blocks its data touches, over the cap of 1048576 bytes per layer \(1 MiB\)/,
  })
  t.false(fs.existsSync(path.join(capped, 'thin')))
  const dest = path.join(work, 'dest')
  fs.mkdirSync(dest)
  await unpackLayer(fs.createReadStream(tarFile), dest, { mode: 'apply', holeCap: Infinity })
  const out = fs.readFileSync(path.join(dest, 'thin'))
  t.is(out.length, 300 << 20)
  t.is(out.subarray(299 << 20, (299 << 20) + 2).toString('latin1'), 'x\0')
})

test('a sparse file larger than the destination\'s file system holds (2^50 bytes: ext4 stops at 16 TiB) is IO_ERROR saying so and what to do; where it fits, it unpacks as holes', async (t) => {
  const work = tmpDir(t)
  // a PAX 0.1 sparse member written by Python's tarfile (the records are ours): 10 bytes at the start and at the end
  const tarFile = path.join(work, 'huge.tar')
  const size = 2 ** 50
  const script = `
import io, sys, tarfile
ti = tarfile.TarInfo('huge'); ti.size = 20; ti.pax_headers = {'GNU.sparse.size': '${size}', 'GNU.sparse.map': '0,10,${size - 10},10'}
with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as tf:
    tf.addfile(ti, io.BytesIO(b'x' * 20))
`
  await run('python3', ['-c', script, tarFile])
  const dest = path.join(work, 'dest')
  fs.mkdirSync(dest)
  const probe = path.join(work, 'probe')
  fs.writeFileSync(probe, '')
  let fits = true
  try {
    fs.truncateSync(probe, size)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EFBIG') throw e
    fits = false
  }
  fs.rmSync(probe)
  const p = unpackLayer(fs.createReadStream(tarFile), dest, { mode: 'apply', holeCap: Infinity })
  if (!fits) {
    await t.throwsAsync(p, { code: 'IO_ERROR', message: /^IO_ERROR: writing "huge": EFBIG: [^(]*\(a file of 1125899906842624 bytes, the size the layer gives it, is more than the file system of the work directory holds: import without --squash and --compress/ })
    return
  }
  await p
  t.is(fs.statSync(path.join(dest, 'huge')).size, size)
  t.true(fs.statSync(path.join(dest, 'huge')).blocks < 1024)
})

// --- apply mode

async function lowerTree(t: ExecutionContext): Promise<string> {
  const { dest } = await unpack(
    t,
    [
      dir('a', { mode: 0o700, pax: { 'SCHILY.xattr.user.old': '1' } }),
      file('a/f', 'f'),
      dir('a/sub'),
      file('a/sub/g', 'g'),
      dir('a/sub2'),
      file('a/sub2/q', 'q'),
      dir('b'),
      file('b/h', 'h'),
      dir('b/deep'),
      file('b/deep/old', 'old'),
      dir('c'),
      file('c/old'),
      dir('d', { mtime: new Date((T - 1000) * 1000) }),
      file('d/x'),
      file('d/y'),
      file('keep', 'k'),
    ],
    'apply',
  )
  return dest
}

test('apply mode: whiteouts delete lower files and directories; lower directories keep their times', async (t) => {
  const dest = await lowerTree(t)
  const stats = (await unpack(t, [file('.wh.keep'), file('a/.wh.sub'), file('d/.wh.x'), file('.wh.nothing-there'), file('zz/.wh.nope')], 'apply', dest)).stats
  t.is(stats.whiteouts, 5)
  t.false(fs.existsSync(path.join(dest, 'keep')))
  t.false(fs.existsSync(path.join(dest, 'a/sub')))
  t.true(fs.existsSync(path.join(dest, 'a/f')))
  t.deepEqual(fs.readdirSync(path.join(dest, 'd')), ['y'])
  t.is(mtimeNs(path.join(dest, 'd')), BigInt(T - 1000) * 1_000_000_000n)
  t.false(fs.existsSync(path.join(dest, 'zz')), 'a whiteout creates nothing')
})

test('apply mode: an opaque marker removes lower entries only, wherever it sits in the layer', async (t) => {
  const dest = await lowerTree(t)
  await unpack(t, [file('b/new', 'n'), file('b/deep/x', 'x'), file('b/.wh..wh..opq'), file('c/.wh..wh..opq'), file('c/mine', 'm')], 'apply', dest)
  t.deepEqual(fs.readdirSync(path.join(dest, 'b')).sort(), ['deep', 'new'])
  t.deepEqual(fs.readdirSync(path.join(dest, 'b/deep')), ['x'])
  t.is(modeOf(path.join(dest, 'b/deep')), 0o755)
  t.deepEqual(fs.readdirSync(path.join(dest, 'c')), ['mine'])
  t.is(xattr(path.join(dest, 'b'), 'trusted.overlay.opaque'), null, 'apply mode writes no overlay xattrs')
})

test('apply mode: entries replace lower ones (dir over dir merges and takes the new attributes); hard links may point at lower files', async (t) => {
  const dest = await lowerTree(t)
  await unpack(t, [dir('a', { mode: 0o755, uid: 9 }), file('a/sub2', 'now a file'), hardlink('hl', 'a/f'), symlink('c', 'a'), file('b/h', 'new h')], 'apply', dest)
  t.is(modeOf(path.join(dest, 'a')), 0o755)
  t.is(Number(lst(path.join(dest, 'a')).uid), 9)
  t.is(xattr(path.join(dest, 'a'), 'user.old'), null, 'a directory entry replaces the xattrs too')
  t.true(fs.existsSync(path.join(dest, 'a/sub/g')), 'merged, not replaced')
  t.is(fs.readFileSync(path.join(dest, 'a/sub2'), 'utf8'), 'now a file')
  t.is(lst(path.join(dest, 'hl')).ino, lst(path.join(dest, 'a/f')).ino)
  t.is(fs.readlinkSync(path.join(dest, 'c')), 'a')
  t.is(fs.readFileSync(path.join(dest, 'b/h'), 'utf8'), 'new h')
})

test('apply mode: a whiteout and an entry of the same name in one layer: the whiteout removes the lower path only, in either order', async (t) => {
  const dest = await lowerTree(t)
  await unpack(
    t,
    [
      file('.wh.a'), dir('a', { mode: 0o750 }), file('a/n', 'n'), // whiteout first, the directory again
      file('b/new', 'new'), file('.wh.b'), // b written into (a lower directory), then whited out: only this layer's entries stay
      file('.wh.c'), file('c/mine', 'm'), // an implied directory under a whiteout
      file('keep', 'new keep'), file('.wh.keep'), // a file, then its whiteout
    ],
    'apply',
    dest,
  )
  t.deepEqual(fs.readdirSync(path.join(dest, 'a')), ['n'])
  t.is(modeOf(path.join(dest, 'a')), 0o750)
  t.is(xattr(path.join(dest, 'a'), 'user.old'), null)
  t.deepEqual(fs.readdirSync(path.join(dest, 'b')), ['new'])
  t.is(modeOf(path.join(dest, 'b')), 0o755, 'a lower directory the layer whited out is the layer\'s implied directory')
  t.deepEqual(fs.readdirSync(path.join(dest, 'c')), ['mine'])
  t.is(fs.readFileSync(path.join(dest, 'keep'), 'utf8'), 'new keep')
})

// --- bad input: each gives its code and leaves nothing outside destDir

const etcPasswd = crypto.createHash('sha256').update(fs.readFileSync('/etc/passwd')).digest('hex')

for (const c of badCases) {
  test(`bad input: ${c.name} → ${c.code}`, async (t) => {
    const base = tmpDir(t)
    const dest = path.join(base, 'dest')
    const outside = path.join(base, 'outside')
    fs.mkdirSync(dest)
    fs.mkdirSync(outside)
    fs.writeFileSync(path.join(outside, 'keep'), 'keep')
    if (c.lower) await unpackLayer(streamOf(await packTar(c.lower(outside))), dest, { mode: 'apply' })
    const tar = await c.tar(outside)
    const e = await t.throwsAsync(unpackLayer(streamOf(tar), dest, { mode: c.mode ?? 'layer' }), { code: c.code as never, ...(c.message ? { message: c.message } : {}) })
    if (c.name.startsWith('garbage') || c.name.startsWith('oversized')) t.truthy((e as Error).cause, 'tar-stream error kept as cause')
    t.deepEqual(fs.readdirSync(base).sort(), ['dest', 'outside'])
    t.deepEqual(fs.readdirSync(outside), ['keep'])
    t.is(fs.readFileSync(path.join(outside, 'keep'), 'utf8'), 'keep')
    t.false(fs.existsSync(path.join(os.tmpdir(), 'x')) && fs.readFileSync(path.join(os.tmpdir(), 'x'), 'utf8') === 'escaped')
    t.is(crypto.createHash('sha256').update(fs.readFileSync('/etc/passwd')).digest('hex'), etcPasswd)
  })
}

test('apply mode: an opaque marker on a lower symlink replaces the link, not what it points at', async (t) => {
  const base = tmpDir(t)
  const dest = path.join(base, 'dest')
  const outside = path.join(base, 'outside')
  fs.mkdirSync(dest)
  fs.mkdirSync(outside)
  fs.writeFileSync(path.join(outside, 'keep'), 'keep')
  await unpackLayer(streamOf(await packTar([symlink('lib', outside)])), dest, { mode: 'apply' })
  await unpackLayer(streamOf(await packTar([file('lib/.wh..wh..opq'), file('lib/new')])), dest, { mode: 'apply' })
  t.true(lst(path.join(dest, 'lib')).isDirectory())
  t.deepEqual(fs.readdirSync(path.join(dest, 'lib')), ['new'])
  t.deepEqual(fs.readdirSync(outside), ['keep'])
})

test('gzip garbage → IMAGE_BAD_ARCHIVE; an unknown compression → IMAGE_UNSUPPORTED_MEDIA_TYPE', async (t) => {
  const dest = tmpDir(t)
  const garbage = Buffer.concat([Buffer.from([0x1f, 0x8b, 0x08, 0x00]), crypto.randomBytes(2000)])
  await t.throwsAsync(
    (async () => unpackLayer(await decompressStream(streamOf(garbage)), dest, { mode: 'layer' }))(),
    { code: 'IMAGE_BAD_ARCHIVE' },
  )
  const xz = Buffer.concat([Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]), crypto.randomBytes(600)])
  await t.throwsAsync(decompressStream(streamOf(xz)), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
  t.deepEqual(fs.readdirSync(dest), [])
})

test('an error of the input stream is passed on', async (t) => {
  const dest = tmpDir(t)
  const good = await packTar([file('a', 'x'.repeat(20000))])
  const { Readable } = await import('node:stream')
  const failing = new Readable({
    read() {
      this.push(good.subarray(0, 4096))
      this.destroy(Object.assign(new Error('connection reset'), { code: 'ECONNRESET' }))
    },
  })
  const e = await t.throwsAsync(unpackLayer(failing, dest, { mode: 'layer' }))
  t.is((e as { code?: string }).code, 'IO_ERROR')
  t.regex(e!.message, /connection reset/)
})

test('non-root → IMAGE_NEEDS_ROOT', (t) => {
  const dest = tmpDir(t)
  fs.chmodSync(dest, 0o777)
  const mod = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../sandbox/image/layer/index.js')
  const script = `
    import { Readable } from 'node:stream'
    const { unpackLayer } = await import(${JSON.stringify(mod)})
    try { await unpackLayer(Readable.from([Buffer.alloc(1024)]), ${JSON.stringify(dest)}, { mode: 'layer' }); console.log('no error') }
    catch (e) { console.log(e.code) }`
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { uid: 65534, gid: 65534, encoding: 'utf8' })
  t.is(r.stdout.trim(), 'IMAGE_NEEDS_ROOT', r.stderr)
})
