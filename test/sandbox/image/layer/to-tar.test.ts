import test, { type ExecutionContext } from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { Writable } from 'node:stream'
import { execFileSync } from 'node:child_process'
import { MNT, native } from '../../../../fs/common/native.js'
import tarStream from 'tar-stream'
import { EROFS_SUPERBLOCK_BYTES, EROFS_SUPERBLOCK_OFFSET, buildErofs, erofsIsPlain, layerToTar, readTar, tarToErofs, unpackLayer } from '../../../../sandbox/image/layer/index.js'
import { run } from '../../../helpers/oci-fixtures.js'
import { diffTrees, snapshotTree } from '../../../helpers/tree-compare.js'
import { dir, file, fixtureLayerTars, hardlink, mountsUnder, packTar, sha256, streamOf, symlink, tmpDir, type PackEntry } from './helpers.js'

const plainTars = fixtureLayerTars(test)

class Collect extends Writable {
  chunks: Buffer[] = []
  override _write(c: Buffer, _e: BufferEncoding, cb: () => void): void {
    this.chunks.push(c)
    cb()
  }
  get bytes(): Buffer {
    return Buffer.concat(this.chunks)
  }
}

async function toErofs(t: ExecutionContext, tar: Buffer, work: string, name: string): Promise<{ file: string; digest: string }> {
  const tree = path.join(work, name)
  fs.mkdirSync(tree)
  await unpackLayer(streamOf(tar), tree, { mode: 'layer' })
  const file = path.join(work, `${name}.erofs`)
  const { digest } = await buildErofs(tree, file)
  t.truthy(digest)
  return { file, digest }
}

async function tarOf(erofs: string, tmp: string): Promise<{ bytes: Buffer; diffId: string; size: number }> {
  const out = new Collect()
  const r = await layerToTar(erofs, out, { tmpDir: tmp })
  return { bytes: out.bytes, ...r }
}

async function names(tar: Buffer): Promise<string[]> {
  const out: string[] = []
  for await (const { header } of readTar(streamOf(tar))) out.push(`${header.type} ${header.name}${header.linkname ? ' -> ' + header.linkname : ''}`)
  return out
}

test('round trip of every fixture layer: tar → EROFS → tar2 → EROFS gives the same EROFS bytes; tar2 is the same every time', async (t) => {
  const work = tmpDir(t)
  for (const [i, tar] of plainTars.entries()) {
    const first = await toErofs(t, tar, work, `a${i}`)
    const tar2 = await tarOf(first.file, work)
    t.is(tar2.diffId, sha256(tar2.bytes))
    t.is(tar2.size, tar2.bytes.length)
    const again = await tarOf(first.file, work)
    t.true(again.bytes.equals(tar2.bytes), `layer ${i}: same tar bytes twice`)
    const second = await toErofs(t, tar2.bytes, work, `b${i}`)
    t.is(second.digest, first.digest, `layer ${i}`)
    const tar3 = await tarOf(second.file, work)
    t.is(tar3.diffId, tar2.diffId)
  }
  t.deepEqual(mountsUnder(work), [])
  t.deepEqual(fs.readdirSync(work).filter((f) => f.startsWith('strata-erofs-')), [], 'mount points removed')
})

test('tar2 unpacked by GNU tar equals the original layer unpacked by GNU tar', async (t) => {
  const work = tmpDir(t)
  for (const [i, tar] of plainTars.entries()) {
    const { file } = await toErofs(t, tar, work, `l${i}`)
    const tar2 = await tarOf(file, work)
    const trees: string[] = []
    for (const [which, bytes] of [['orig', tar], ['back', tar2.bytes]] as const) {
      const tarFile = path.join(work, `${which}${i}.tar`)
      fs.writeFileSync(tarFile, bytes)
      const d = path.join(work, `${which}${i}`)
      fs.mkdirSync(d)
      await run('tar', ['--xattrs', "--xattrs-include=*", '--numeric-owner', '--same-owner', '-p', '-C', d, '-xf', tarFile])
      trees.push(d)
    }
    // Whiteout files: only their presence means something. The root: the original may have no entry for it.
    const opts = { typeOnly: (rel: string) => path.basename(rel).startsWith('.wh.'), skipRoot: true }
    t.deepEqual(diffTrees(await snapshotTree(trees[1]!, opts), await snapshotTree(trees[0]!, opts)), [], `layer ${i}`)
  }
})

test('layerToTar output: sorted, whiteouts and opaque markers back as .wh. files, hard links to the first path, PAX only where needed', async (t) => {
  const work = tmpDir(t)
  const long = 'l/' + 'x'.repeat(120) + '/f'
  const entries: PackEntry[] = [
    dir('./', { mode: 0o711, pax: { 'SCHILY.xattr.user.root': 'r' } }),
    file('z', 'zz'),
    hardlink('a-link', 'z'),
    file('b/.wh.gone'),
    file('b/.wh..wh..opq'),
    file('b/kept', 'k', { gid: 7, pax: { uid: '3000000', mtime: '1600000000.5' } }),
    symlink('s', '/abs/target'),
    hardlink('s2', 's'),
    file('ünï', 'u'),
    file(long, 'long'),
    { header: { name: 'dev/c', type: 'character-device', devmajor: 4, devminor: 64, mode: 0o620 } },
    { header: { name: 'dev/p', type: 'fifo', mode: 0o644 } },
  ]
  const tar = await packTar(entries)
  const { file: img, digest } = await toErofs(t, tar, work, 'x')
  const tar2 = await tarOf(img, work)
  t.deepEqual(await names(tar2.bytes), [
    'directory ./',
    'file a-link',
    'directory b/',
    'file b/.wh..wh..opq',
    'file b/.wh.gone',
    'file b/kept',
    'directory dev/',
    'character-device dev/c',
    'fifo dev/p',
    'directory l/',
    `directory l/${'x'.repeat(120)}/`,
    `file ${long}`,
    'symlink s -> /abs/target',
    'link s2 -> s',
    'link z -> a-link',
    'file ünï',
  ])
  const ex = tarStream.extract()
  const headers: Record<string, tarStream.Header & { pax?: Record<string, string> | null }> = {}
  type H = (typeof headers)[string]
  ex.on('entry', (h, s, next) => {
    headers[h.name] = h as H
    s.on('end', next)
    s.resume()
  })
  await new Promise((resolve, reject) => {
    ex.on('finish', () => resolve(undefined))
    ex.on('error', reject)
    ex.end(tar2.bytes)
  })
  t.is(headers['./']!.mode, 0o711)
  t.is(headers['./']!.pax?.['SCHILY.xattr.user.root'], 'r')
  t.is(headers['b/kept']!.pax?.uid, '3000000')
  t.is(headers['b/kept']!.pax?.mtime, '1600000000.5')
  t.is(headers['b/kept']!.gid, 7)
  t.is(headers['a-link']!.pax, null, 'no PAX record where ustar suffices')
  t.is(headers['b/.wh..wh..opq']!.mode, 0)
  for (const h of Object.values(headers)) {
    t.is(h.uname, '')
    t.is(h.gname, '')
    t.false(Object.keys(h.pax ?? {}).some((k) => k === 'atime' || k === 'ctime' || k.startsWith('SCHILY.xattr.trusted.overlay')))
  }
  t.is((await toErofs(t, tar2.bytes, work, 'y')).digest, digest)
})

test('layerToTar: a file that is not EROFS → IMAGE_BAD_LAYER; a missing one NOT_FOUND; nothing stays mounted', async (t) => {
  const work = tmpDir(t)
  const junk = path.join(work, 'junk.erofs')
  fs.writeFileSync(junk, Buffer.alloc(8192, 7))
  await t.throwsAsync(layerToTar(junk, new Collect(), { tmpDir: work }), { code: 'IMAGE_BAD_LAYER' })
  await t.throwsAsync(layerToTar(path.join(work, 'missing'), new Collect(), { tmpDir: work }), { code: 'NOT_FOUND' })
  t.deepEqual(fs.readdirSync(work), ['junk.erofs'])
  t.deepEqual(mountsUnder(work), [])
})

test('layerToTar: a failing output stream fails the call, and the layer is unmounted anyway', async (t) => {
  const work = tmpDir(t)
  const { file: img } = await toErofs(t, plainTars[0]!, work, 'x')
  let n = 0
  const failing = new Writable({
    highWaterMark: 1024,
    write(c: Buffer, _e, cb) {
      n += c.length
      cb(n > 100_000 ? Object.assign(new Error('disk on fire'), { code: 'EIO' }) : null)
    },
  })
  const tmp = path.join(work, 'mnt')
  fs.mkdirSync(tmp)
  await t.throwsAsync(layerToTar(img, failing, { tmpDir: tmp }), { message: /disk on fire/ })
  t.deepEqual(mountsUnder(tmp), [])
  t.deepEqual(fs.readdirSync(tmp), [])
})

/** An EROFS layer holding one file, built in a fresh temp dir. */
async function oneFileLayer(t: ExecutionContext, name: string, content: string): Promise<{ work: string; file: string }> {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, name), content)
  const file = path.join(work, 'layer.erofs')
  await buildErofs(tree, file)
  return { work, file }
}

test('layerToTar refuses a layer with a name a tar would read as a whiteout', async (t) => {
  const { work, file: img } = await oneFileLayer(t, '.wh.sneaky', '')
  await t.throwsAsync(layerToTar(img, new Collect(), { tmpDir: work }), { code: 'IMAGE_BAD_LAYER' })
  t.deepEqual(mountsUnder(work), [])
})

test('layerToTar: an output destroyed by its reader (cancellation) fails the call and unmounts', async (t) => {
  const work = tmpDir(t)
  const { file: img } = await toErofs(t, plainTars[0]!, work, 'x')
  const out = new Collect({ highWaterMark: 1024 })
  out.on('error', () => {})
  let n = 0
  out.on('pipe', () => {})
  const orig = out._write.bind(out)
  out._write = (c: Buffer, e: BufferEncoding, cb: () => void) => {
    n += c.length
    if (n > 50_000) setImmediate(() => out.destroy())
    orig(c, e, cb)
  }
  const tmp = path.join(work, 'mnt')
  fs.mkdirSync(tmp)
  await t.throwsAsync(layerToTar(img, out, { tmpDir: tmp }))
  t.deepEqual(mountsUnder(tmp), [])
  t.deepEqual(fs.readdirSync(tmp), [])
})

test('layerToTar stops at its signal (Ctrl-C of an export or docker push): the signal\'s reason, little more written, unmounted', async (t) => {
  // an 8 MiB file: the writer's batches are 256 KiB, so the tar is many batches long
  const { work, file: img } = await oneFileLayer(t, 'big', 'x'.repeat(8 << 20))
  const ac = new AbortController()
  let written = 0
  const out = new Writable({
    write(c: Buffer, _e, cb) {
      written += c.length
      // the first batch: as if Ctrl-C came while the tar was being made
      if (!ac.signal.aborted) ac.abort(Object.assign(new Error('stop here'), { code: 'CANCELLED' }))
      cb()
    },
  })
  const tmp = path.join(work, 'mnt')
  fs.mkdirSync(tmp)
  await t.throwsAsync(layerToTar(img, out, { tmpDir: tmp, signal: ac.signal }), { message: 'stop here' })
  // the old code ignored the signal and wrote the whole tar (8 MiB and its headers)
  t.true(written < 4 << 20, `${written} bytes written after the abort`)
  t.deepEqual(mountsUnder(tmp), [])
  t.deepEqual(fs.readdirSync(tmp), [])
})

const canLoop = process.getuid?.() === 0 && fs.existsSync('/dev/loop-control')

;(canLoop ? test : test.skip)('a layer file and mount point on tmpfs (a --work-dir or /tmp that is tmpfs): mounted through a loop device, the same tar; the device goes with the unmount', async (t) => {
  const { work, file: onDisk } = await oneFileLayer(t, 'greeting', 'hello from tmpfs\n')
  const expected = await tarOf(onDisk, work)
  const shm = path.join(work, 'shm')
  fs.mkdirSync(shm)
  native().mount('tmpfs', shm, 'tmpfs', 0, 'size=16m')
  t.teardown(() => {
    if (mountsUnder(shm).length > 0) native().umount2(shm, MNT.DETACH)
  })
  const file = path.join(shm, 'layer.erofs')
  fs.copyFileSync(onDisk, file)
  // the old code: IMAGE_BAD_LAYER 'mounting … as EROFS: mount: Block device required' (the kernel reads a file-backed EROFS through read_folio, which tmpfs has not)
  const got = await tarOf(file, shm)
  t.true(got.bytes.equals(expected.bytes))
  t.is(got.diffId, expected.diffId)
  t.deepEqual(mountsUnder(shm), [shm])
  t.deepEqual(fs.readdirSync(shm), ['layer.erofs'])
  const loops = execFileSync('losetup', ['-j', file], { encoding: 'utf8' }).trim()
  t.is(loops, '', 'no loop device left on the file')
})

test('the EROFS mounts of a process killed with SIGKILL are removed by the next layerToTar', async (t) => {
  const { work, file } = await oneFileLayer(t, 'a', 'a')
  // a real layerToTar in a child process, SIGKILLed while its layer is mounted
  const script = `
    import { layerToTar } from ${JSON.stringify(new URL('../../../../sandbox/image/layer/index.js', import.meta.url).href)}
    import { Writable } from 'node:stream'
    const stuck = new Writable({ write() { process.stdout.write('mounted\\n') } })
    await layerToTar(${JSON.stringify(file)}, stuck, { tmpDir: ${JSON.stringify(work)} })
  `
  const child = (await import('node:child_process')).spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve())
    child.once('exit', (c) => reject(new Error(`child exited ${c} before mounting`)))
  })
  const left = () => mountsUnder(work).filter((m) => path.basename(m).startsWith(`strata-erofs-${child.pid}-`))
  t.is(left().length, 1)
  child.kill('SIGKILL')
  await new Promise((r) => child.once('exit', r))
  // SIGKILL runs no cleanup; the mount stays until a mount of any layer sweeps it (in a full
  // run another test file's import may be that one, so its presence is not asserted here)
  const r = await tarOf(file, work)
  t.true(r.size > 0)
  t.deepEqual(left(), [])
  t.deepEqual(fs.readdirSync(work).filter((n) => n.startsWith('strata-erofs-')), [])
})

test('times before 1970 (kept by tarToErofs) come back out to the nanosecond, as GNU tar reads them', async (t) => {
  const work = tmpDir(t)
  const tar = await packTar([file('old', 'o', { pax: { mtime: '-304775999.5' } }), file('just-before', 'j', { pax: { mtime: '-0.75' } }), file('whole', 'w', { pax: { mtime: '-86400' } })])
  const erofs = path.join(work, 'layer.erofs')
  await tarToErofs(streamOf(tar), erofs)
  const out = await tarOf(erofs, work)
  const times: string[] = []
  for await (const { header } of readTar(streamOf(out.bytes))) if (header.type === 'file') times.push(`${header.name} ${header.mtime.sec} ${header.mtime.nsec}`)
  t.deepEqual(times, ['just-before -1 250000000', 'old -304776000 500000000', 'whole -86400 0'])
  fs.writeFileSync(path.join(work, 'out.tar'), out.bytes)
  const x = path.join(work, 'x')
  fs.mkdirSync(x)
  await run('tar', ['-xf', path.join(work, 'out.tar'), '-C', x])
  t.is(fs.statSync(path.join(x, 'old'), { bigint: true }).mtimeNs, -304_775_999_500_000_000n)
  t.is(fs.statSync(path.join(x, 'just-before'), { bigint: true }).mtimeNs, -750_000_000n)
})

test('paths longer than PATH_MAX (valid in a tar) come back out of layerToTar (they failed with a raw ENAMETOOLONG)', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'long.tar')
  // Python's tarfile writes the 6 KiB path as a PAX record, with a hard link and a symlink beside it
  const script = `
import sys, tarfile, io
long = '/'.join(['x' * 200] * 30)
with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as tf:
    ti = tarfile.TarInfo(long + '/f'); data = b'deep data\\n'; ti.size = len(data); tf.addfile(ti, io.BytesIO(data))
    ln = tarfile.TarInfo(long + '/y' * 10); ln.type = tarfile.SYMTYPE; ln.linkname = 'f'; tf.addfile(ln)
`
  await run('python3', ['-c', script, src])
  const long = Array(30).fill('x'.repeat(200)).join('/')
  const erofs = path.join(work, 'layer.erofs')
  await tarToErofs(fs.createReadStream(src), erofs)
  const out = await tarOf(erofs, work)
  const got: string[] = []
  for await (const { header, body } of readTar(streamOf(out.bytes))) {
    const parts: Buffer[] = []
    for await (const c of body) parts.push(c)
    if (header.type !== 'directory') got.push(`${header.type} ${header.name} ${header.linkname} ${Buffer.concat(parts).toString()}`)
  }
  t.deepEqual(got, [`file ${long}/f  deep data\n`, `symlink ${long}${'/y'.repeat(10)} f `])
  t.deepEqual(await mountsUnder(work), [])
})

test('a sparse file: tarToErofs stores no chunk that is all hole, and layerToTar writes it back as a GNU sparse member that GNU tar and umoci (Go archive/tar) read whole', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  const sparse = path.join(tree, 'sparse')
  fs.writeFileSync(sparse, '')
  fs.truncateSync(sparse, 64 << 20)
  const fd = fs.openSync(sparse, 'r+')
  for (const [text, pos] of [['head', 0], ['mid', (40 << 20) + 123], ['tail', (64 << 20) - 4]] as const) fs.writeSync(fd, text, pos)
  fs.closeSync(fd)
  fs.writeFileSync(path.join(tree, 'plain'), Buffer.alloc(10_000, 7))
  const inTar = path.join(work, 'in.tar')
  await run('tar', ['--format=pax', '-S', '--numeric-owner', '-cf', inTar, '-C', tree, '.'])
  const layer = path.join(work, 'sparse.erofs')
  await tarToErofs(fs.createReadStream(inTar), layer)
  // three chunks of data and a block map, not 64 MiB of zeros
  t.true(fs.statSync(layer).size < 1 << 20, `a layer of ${fs.statSync(layer).size} bytes`)
  await run('fsck.erofs', [layer])
  // still an uncompressed layer (an s3 pull records its diffId for such layers only)
  t.true(erofsIsPlain(fs.readFileSync(layer).subarray(EROFS_SUPERBLOCK_OFFSET, EROFS_SUPERBLOCK_OFFSET + EROFS_SUPERBLOCK_BYTES)))
  const back = await tarOf(layer, work)
  t.true(back.size < 1 << 20, `a tar of ${back.size} bytes`)
  t.deepEqual((await names(back.bytes)).sort(), ['directory ./', 'file plain', 'file sparse'])
  const outTar = path.join(work, 'out.tar')
  fs.writeFileSync(outTar, back.bytes)
  const byGnu = path.join(work, 'gnu')
  fs.mkdirSync(byGnu)
  await run('tar', ['-xf', outTar, '-C', byGnu])
  await run('cmp', [sparse, path.join(byGnu, 'sparse')])
  // GNU tar writes the file sparse again: the holes stayed holes all the way
  t.true(fs.statSync(path.join(byGnu, 'sparse')).blocks * 512 < 4 << 20)
  const layout = path.join(work, 'oci')
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:t`])
  await run('umoci', ['raw', 'add-layer', '--image', `${layout}:t`, outTar])
  await run('umoci', ['unpack', '--image', `${layout}:t`, path.join(work, 'bundle')])
  await run('cmp', [sparse, path.join(work, 'bundle', 'rootfs', 'sparse')])
  t.deepEqual(fs.readFileSync(path.join(work, 'bundle', 'rootfs', 'plain')), Buffer.alloc(10_000, 7))
})
