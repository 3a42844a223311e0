// What a sandbox download writes on this machine: runs of zeros become holes
// again (writeSparse, used by extractTarSafely and by `sandbox cp` of a single
// file), with the same bytes and size, on real files in a temporary directory.
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import test, { type ExecutionContext } from 'ava'
import { extractTarSafely, writeSparse } from '../../../sandbox/sdk/extract.js'

const MiB = 1024 * 1024

function tmp(t: ExecutionContext): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-sparse-'))
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }))
  return d
}

const md5 = (b: Buffer) => crypto.createHash('md5').update(b).digest('hex')

/** `buf` in chunks of `size` (the way a stream delivers it: boundaries anywhere). */
async function* chunked(buf: Buffer, size: number): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size)
}

test('writeSparse: zeros over whole aligned blocks become holes; bytes and size as given, whatever the chunking', async (t) => {
  const d = tmp(t)
  const data = Buffer.alloc(24 * MiB + 123)
  data.write('head', 0)
  data.write('middle', 7 * MiB + 4095) // across a block boundary
  data[24 * MiB + 122] = 7
  for (const chunk of [1000, 4096, 65536, 3 * MiB + 1]) {
    const p = path.join(d, `f-${chunk}`)
    const fh = await fsp.open(p, 'wx')
    t.is(await writeSparse(fh, chunked(data, chunk)), data.length)
    await fh.close()
    const st = fs.statSync(p)
    t.is(st.size, data.length)
    t.true(st.blocks * 512 <= 256 * 1024, `chunks of ${chunk}: ${st.blocks * 512} bytes allocated`)
    t.is(md5(fs.readFileSync(p)), md5(data), `chunks of ${chunk}`)
  }
  // ending in zeros: the size is still the whole
  const p = path.join(d, 'tail-zeros')
  const fh = await fsp.open(p, 'wx')
  await writeSparse(fh, chunked(Buffer.concat([Buffer.from('x'), Buffer.alloc(5 * MiB)]), 65536))
  await fh.close()
  t.is(fs.statSync(p).size, 5 * MiB + 1)
  // nothing at all: an empty file
  const e = path.join(d, 'empty')
  const fe = await fsp.open(e, 'wx')
  t.is(await writeSparse(fe, chunked(Buffer.alloc(0), 1)), 0)
  await fe.close()
  t.is(fs.statSync(e).size, 0)
})

test('extractTarSafely: a sparse file in a GNU tar stream without --sparse (its zeros in the stream) is sparse again', async (t) => {
  const d = tmp(t)
  const src = path.join(d, 'src')
  fs.mkdirSync(src)
  const fd = fs.openSync(path.join(src, 'disk.img'), 'w')
  fs.writeSync(fd, Buffer.from('boot'), 0, 4, 0)
  fs.writeSync(fd, Buffer.from('end'), 0, 3, 64 * MiB - 3)
  fs.closeSync(fd)
  fs.writeFileSync(path.join(src, 'dense'), crypto.randomBytes(MiB))
  const tar = spawn('tar', ['-C', src, '-cf', '-', '.'], { stdio: ['ignore', 'pipe', 'inherit'] })
  const dst = path.join(d, 'dst')
  fs.mkdirSync(dst)
  await extractTarSafely(tar.stdout as Readable, dst)
  const img = fs.statSync(path.join(dst, 'disk.img'))
  t.is(img.size, 64 * MiB)
  t.true(img.blocks * 512 <= MiB, `${img.blocks * 512} bytes allocated for a 64 MiB image of 7 bytes`)
  t.is(md5(fs.readFileSync(path.join(dst, 'disk.img'))), md5(fs.readFileSync(path.join(src, 'disk.img'))))
  t.true(fs.readFileSync(path.join(dst, 'dense')).equals(fs.readFileSync(path.join(src, 'dense'))))
})
