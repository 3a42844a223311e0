// The tar reader parses input buffers in place: the same archive must read
// the same whatever the chunking, and quirks of the tar-stream parser it
// replaced are kept (an empty long name is ignored, a directory carries no
// data whatever its size field says), minus tar-stream's hang on such a
// directory.
import test from 'ava'
import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { readTar, TarReader } from '../../../../sandbox/image/layer/tar-reader.js'

function tmp(t: { teardown(f: () => void): void }): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-tar-reader-'))
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }))
  return d
}

function chunked(buf: Buffer, size: number): Readable {
  const parts: Buffer[] = []
  for (let i = 0; i < buf.length; i += size) parts.push(buf.subarray(i, i + size))
  return Readable.from(parts)
}

async function listing(input: Readable): Promise<string[]> {
  const out: string[] = []
  for await (const { header, body } of readTar(input)) {
    const h = crypto.createHash('sha256')
    let n = 0
    for await (const c of body) {
      h.update(c)
      n += c.length
    }
    const x = [...header.xattrs].map(([k, v]) => `${k}=${v.toString('hex')}`).join(',')
    out.push(`${header.type} ${header.name} ${header.linkname} ${header.mode.toString(8)} ${header.uid}:${header.gid} ${header.mtime.sec}.${header.mtime.nsec} ${header.size} ${n} ${h.digest('hex').slice(0, 12)} [${x}]`)
  }
  return out
}

function header(name: string, typeflag: string, size: number, extra: (b: Buffer) => void = () => {}): Buffer {
  const b = Buffer.alloc(512)
  b.write(name, 0, 'utf8')
  b.write('0000644\0', 100, 'latin1')
  b.write('0000000\0', 108, 'latin1')
  b.write('0000000\0', 116, 'latin1')
  b.write(size.toString(8).padStart(11, '0') + '\0', 124, 'latin1')
  b.write('14000000000\0', 136, 'latin1')
  b.write(typeflag, 156, 'latin1')
  b.write('ustar\u000000', 257, 'latin1')
  extra(b)
  b.fill(0x20, 148, 156)
  let sum = 0
  for (const x of b) sum += x
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1')
  return b
}

function padded(data: Buffer): Buffer {
  return Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)])
}

test('an archive reads the same whatever the input chunking (GNU and POSIX formats, long names, xattrs, hard links)', async (t) => {
  const dir = tmp(t)
  const src = path.join(dir, 'src')
  const deep = path.join(src, 'd', 'x'.repeat(120))
  fs.mkdirSync(deep, { recursive: true })
  fs.writeFileSync(path.join(src, 'd', 'f'), 'hello')
  fs.writeFileSync(path.join(deep, 'y'.repeat(110)), crypto.randomBytes(70_000))
  fs.writeFileSync(path.join(src, 'big'), crypto.randomBytes(200_017))
  fs.writeFileSync(path.join(src, 'ünï'), 'u')
  fs.symlinkSync('../' + 'z'.repeat(150), path.join(src, 'd', 'lnk'))
  fs.linkSync(path.join(src, 'd', 'f'), path.join(src, 'd', 'hl'))
  for (const format of ['gnu', 'posix']) {
    const tar = execFileSync('tar', [`--format=${format}`, '--sort=name', '-C', src, '-cf', '-', '.'], { maxBuffer: 64 << 20 })
    const whole = await listing(chunked(tar, tar.length))
    t.is(whole.length, 9, format)
    t.true(whole.some((l) => l.startsWith(`file ./d/${'x'.repeat(120)}/${'y'.repeat(110)} `)), format)
    t.true(whole.some((l) => l.startsWith(`symlink ./d/lnk ../${'z'.repeat(150)} `)), format)
    for (const size of [1, 7, 511, 512, 513, 65536]) t.deepEqual(await listing(chunked(tar, size)), whole, `${format}, ${size}-byte chunks`)
  }
})

test('readAll and buffered return the data as slices, and unread data is skipped by next()', async (t) => {
  const a = crypto.randomBytes(1500)
  const b = crypto.randomBytes(700)
  const tar = Buffer.concat([header('a', '0', a.length), padded(a), header('b', '0', b.length), padded(b), header('c', '0', 0), Buffer.alloc(1024)])
  for (const size of [1, 100, 512, 4096]) {
    const r = new TarReader(chunked(tar, size))
    t.is((await r.next())?.name, 'a')
    t.true(Buffer.concat(await r.readAll()).equals(a))
    t.is(r.remaining, 0)
    t.is((await r.next())?.name, 'b')
    t.is(r.remaining, b.length)
    t.is((await r.next())?.name, 'c', 'the unread data of b was skipped')
    t.is(await r.next(), null)
    r.close()
  }
})

test('quirks kept from tar-stream: a directory carries no data whatever its size; an empty GNU long name is ignored; zero blocks are skipped', async (t) => {
  // a directory header with a size field: the bytes after it are the next header (tar-stream hung here)
  const tar = Buffer.concat([
    header('d/', '5', 1024),
    header('d/f', '0', 2),
    padded(Buffer.from('hi')),
    Buffer.alloc(512),
    header('././@LongLink', 'L', 0),
    header('named', '0', 0),
    Buffer.alloc(1024),
  ])
  t.deepEqual(
    (await listing(chunked(tar, 300))).map((l) => l.split(' ').slice(0, 2).join(' ')),
    ['directory d/', 'file d/f', 'file named'],
  )
})

test('bad input: checksum, unknown format, truncation and oversized records are IMAGE_BAD_ARCHIVE with a cause', async (t) => {
  const good = Buffer.concat([header('f', '0', 3), padded(Buffer.from('abc')), Buffer.alloc(1024)])
  const cases: Array<[string, Buffer]> = [
    ['checksum', Buffer.concat([Buffer.from(good.subarray(0, 512)).fill(0x41, 0, 1), good.subarray(512)])],
    ['v7 header', Buffer.concat([header('f', '0', 0, (b) => b.fill(0, 257, 265)), Buffer.alloc(1024)])],
    ['cut inside the data', good.subarray(0, 514)],
    ['cut inside a header', good.subarray(0, 100)],
    ['oversized PAX record', Buffer.concat([header('PaxHeaders/f', 'x', 5 * 1024 * 1024), Buffer.alloc(1024)])],
  ]
  for (const [what, tar] of cases) {
    const e = await t.throwsAsync(listing(chunked(tar, 256)), { code: 'IMAGE_BAD_ARCHIVE' as never }, what)
    t.truthy((e as Error).cause, what)
  }
  // cut at an entry boundary: no end-of-archive block
  await t.throwsAsync(listing(chunked(good.subarray(0, 1024), 256)), { code: 'IMAGE_BAD_ARCHIVE' as never })
})

test('times before 1970 read as GNU tar wrote them: base-256 (gnu format, two\'s complement) and PAX (sub-second)', async (t) => {
  const dir = tmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'a'), 'a')
  fs.writeFileSync(path.join(tree, 'b'), 'b')
  // (fs.utimes takes a negative time for "now")
  execFileSync('touch', ['-d', '@-304776000', path.join(tree, 'a')])
  execFileSync('touch', ['-d', '@-1', path.join(tree, 'b')])
  for (const format of ['gnu', 'pax']) {
    const tar = path.join(dir, `${format}.tar`)
    execFileSync('tar', [`--format=${format}`, '-C', tree, '-cf', tar, 'a', 'b'])
    const times: string[] = []
    for await (const { header, body } of readTar(fs.createReadStream(tar))) {
      for await (const _ of body) void _
      times.push(`${header.name} ${header.mtime.sec}.${header.mtime.nsec}`)
    }
    t.deepEqual(times, ['a -304776000.0', 'b -1.0'], format)
  }
})

test('sparse files (GNU tar -S, every format) read at their full size, holes as zeros, whatever the chunking', async (t) => {
  const dir = tmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  const f = path.join(tree, 'holes')
  fs.writeFileSync(f, '')
  fs.truncateSync(f, 3 << 20)
  const fd = fs.openSync(f, 'r+')
  for (let i = 1; i <= 40; i++) fs.writeSync(fd, `data ${i}`, i * 70_000)
  fs.closeSync(fd)
  fs.appendFileSync(f, 'end')
  const want = crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex').slice(0, 12)
  for (const flags of [['--format=gnu'], ['--format=pax', '--sparse-version=0.0'], ['--format=pax', '--sparse-version=0.1'], ['--format=pax', '--sparse-version=1.0']]) {
    const tar = path.join(dir, 'sparse.tar')
    execFileSync('tar', [...flags, '-S', '--numeric-owner', '-cf', tar, '-C', tree, 'holes'])
    const buf = fs.readFileSync(tar)
    for (const size of [buf.length, 512, 37]) {
      const [line] = await listing(chunked(buf, size))
      t.regex(line!, new RegExp(`^file holes .* ${(3 << 20) + 3} ${(3 << 20) + 3} ${want} `), `${flags.join(' ')} in chunks of ${size}`)
    }
  }
})

test('malformed sparse maps (beyond the size, overlapping, unsorted, longer or shorter than the data) are IMAGE_BAD_ARCHIVE', async (t) => {
  const dir = tmp(t)
  // PAX 0.1 and 1.0 records written by Python's tarfile (it reads sparse files but never writes them: the records are ours)
  const script = `
import sys, tarfile, io
def add(tf, name, pax, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.pax_headers = pax
    tf.addfile(ti, io.BytesIO(data))
cases = {
  'beyond-size': ({'GNU.sparse.size': '200', 'GNU.sparse.map': '0,10,300,10'}, b'x' * 20),
  'overlapping': ({'GNU.sparse.size': '100', 'GNU.sparse.map': '0,10,5,10'}, b'x' * 20),
  'unsorted': ({'GNU.sparse.size': '100', 'GNU.sparse.map': '50,10,0,10'}, b'x' * 20),
  'map-past-data': ({'GNU.sparse.size': '200', 'GNU.sparse.map': '0,10,50,100'}, b'x' * 20),
  'data-past-map': ({'GNU.sparse.size': '200', 'GNU.sparse.map': '0,10'}, b'x' * 20),
  'odd-map': ({'GNU.sparse.size': '200', 'GNU.sparse.map': '0,10,5'}, b'x' * 10),
  'not-a-number': ({'GNU.sparse.size': '200', 'GNU.sparse.map': '0,1e3'}, b'x' * 10),
  'huge-count-1.0': ({'GNU.sparse.major': '1', 'GNU.sparse.minor': '0', 'GNU.sparse.realsize': '100'}, b'999999999999999\\n0\\n10\\n'.ljust(512, b'\\0') + b'x' * 10),
  'garbage-map-1.0': ({'GNU.sparse.major': '1', 'GNU.sparse.minor': '0', 'GNU.sparse.realsize': '100'}, b'1\\nzero\\n10\\n'.ljust(512, b'\\0') + b'x' * 10),
  'version-2.0': ({'GNU.sparse.major': '2', 'GNU.sparse.minor': '0', 'GNU.sparse.realsize': '100'}, b'x' * 10),
}
for name, (pax, data) in cases.items():
    with tarfile.open(sys.argv[1] + '/' + name + '.tar', 'w', format=tarfile.PAX_FORMAT) as tf:
        add(tf, 'f', pax, data)
`
  execFileSync('python3', ['-c', script, dir])
  // old GNU S headers from GNU tar, with the real size (byte 483) cut below the data's offsets, or an extension block promised and missing
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'holes'), '')
  fs.truncateSync(path.join(tree, 'holes'), 1 << 20)
  fs.appendFileSync(path.join(tree, 'holes'), 'end')
  execFileSync('tar', ['--format=gnu', '-S', '-cf', path.join(dir, 'gnu.tar'), '-C', tree, 'holes'])
  const gnu = fs.readFileSync(path.join(dir, 'gnu.tar'))
  t.is(String.fromCharCode(gnu[156]!), 'S')
  const patched = (edit: (h: Buffer) => void): Buffer => {
    const b = Buffer.from(gnu)
    edit(b)
    b.fill(0x20, 148, 156)
    let sum = 0
    for (let i = 0; i < 512; i++) sum += b[i]!
    b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1')
    return b
  }
  const cases: Array<[string, Buffer]> = fs
    .readdirSync(dir)
    .filter((n) => n.endsWith('.tar') && n !== 'gnu.tar')
    .map((n) => [n, fs.readFileSync(path.join(dir, n))])
  t.is(cases.length, 10)
  cases.push(['gnu-realsize-too-small', patched((h) => h.write('00000001000\0', 483, 'latin1'))])
  cases.push(['gnu-extension-missing', patched((h) => (h[482] = 1)).subarray(0, 512)])
  for (const [what, tar] of cases) {
    const e = await t.throwsAsync(listing(chunked(tar, 100)), { code: 'IMAGE_BAD_ARCHIVE' as never }, what)
    t.notRegex(e!.message, /GNUSparseFile/, what)
    if (what !== 'gnu-extension-missing') t.regex(e!.message, /^IMAGE_BAD_ARCHIVE: "(f|holes)": sparse file: /, what)
  }
  // the unpatched archive reads (the cases fail for what was changed)
  t.regex((await listing(chunked(gnu, 100)))[0]!, new RegExp(`^file holes .* ${(1 << 20) + 3} ${(1 << 20) + 3} `))
})

test('the holes of a tar\'s sparse files are capped (1 GiB by default, summed over the archive): past it IMAGE_BAD_ARCHIVE from the map, before any zeros', async (t) => {
  const dir = tmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  // each file: 1 MiB of holes (and 'end' stored); the default-cap file: 1 GiB + 1 MiB of holes
  for (const n of ['a', 'b']) {
    fs.writeFileSync(path.join(tree, n), '')
    fs.truncateSync(path.join(tree, n), 1 << 20)
    fs.appendFileSync(path.join(tree, n), 'end')
  }
  fs.writeFileSync(path.join(tree, 'big'), '')
  fs.truncateSync(path.join(tree, 'big'), (1 << 30) + (1 << 20))
  fs.appendFileSync(path.join(tree, 'big'), 'end')
  for (const flags of [['--format=gnu'], ['--format=pax', '--sparse-version=0.0'], ['--format=pax', '--sparse-version=0.1'], ['--format=pax', '--sparse-version=1.0']]) {
    const what = flags.join(' ')
    const two = path.join(dir, 'two.tar')
    execFileSync('tar', [...flags, '-S', '--numeric-owner', '-cf', two, '-C', tree, 'a', 'b'])
    // a cap of 1.5 MiB takes 'a' and refuses 'b' (the sum), with no byte of b's holes handed out
    const r = new TarReader(chunked(fs.readFileSync(two), 512), { holeCap: 3 << 19 })
    try {
      t.is((await r.next())!.name, 'a', what)
      const e = await t.throwsAsync(r.next(), { code: 'IMAGE_BAD_ARCHIVE' as never }, what)
      t.regex(e!.message, /^IMAGE_BAD_ARCHIVE: "b": sparse file: its holes \(1048576 bytes \(with 1048576 hole bytes of sparse files before it\)\) exceed the cap of 1572864 hole bytes per layer/, what)
    } finally {
      r.close()
    }
    // a cap of 2 MiB takes both
    const ok = new TarReader(chunked(fs.readFileSync(two), 512), { holeCap: 2 << 20 })
    try {
      t.is((await ok.next())!.name, 'a', what)
      t.is((await ok.next())!.size, (1 << 20) + 3, what)
    } finally {
      ok.close()
    }
    // the default cap, through readTar (what sdk extract reads with)
    const big = path.join(dir, 'big.tar')
    execFileSync('tar', [...flags, '-S', '--numeric-owner', '-cf', big, '-C', tree, 'big'])
    t.true(fs.statSync(big).size < 1 << 20, what)
    const e = await t.throwsAsync(listing(chunked(fs.readFileSync(big), 4096)), { code: 'IMAGE_BAD_ARCHIVE' as never }, what)
    t.regex(e!.message, /^IMAGE_BAD_ARCHIVE: "big": sparse file: its holes \(1074790400 bytes\) exceed the cap of 1073741824 hole bytes per layer \(1 GiB\)/, what)
  }
})
