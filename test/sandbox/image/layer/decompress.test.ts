import test from 'ava'
import { spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import { Readable } from 'node:stream'
import zlib from 'node:zlib'
import { StrataError } from '../../../../fs/common/errors.js'
import { compressionOfMediaType, decompressStream, sniffCompression } from '../../../../sandbox/image/layer/index.js'
import { file, packTar, readAll, streamOf } from './helpers.js'

const OCI = 'application/vnd.oci.image.layer.v1.tar'

function zstd(buf: Buffer): Buffer {
  const r = spawnSync('zstd', ['-q', '-c', '-3'], { input: buf, maxBuffer: 64 << 20 })
  if (r.status !== 0) throw new Error(r.stderr.toString())
  return r.stdout
}

let tar: Buffer
test.before(async () => {
  tar = await packTar([file('a', crypto.randomBytes(200_000)), file('b', 'bee')])
})

test('gzip, zstd and plain tars come out as the same bytes, by media type or by sniffing', async (t) => {
  const forms: [Buffer, string][] = [
    [tar, OCI],
    [zlib.gzipSync(tar), OCI + '+gzip'],
    [zstd(tar), OCI + '+zstd'],
    [zlib.gzipSync(tar), 'application/vnd.docker.image.rootfs.diff.tar.gzip'],
  ]
  for (const [bytes, mediaType] of forms) {
    t.true((await readAll(await decompressStream(streamOf(bytes), mediaType))).equals(tar), mediaType)
    t.true((await readAll(await decompressStream(streamOf(bytes)))).equals(tar), `${mediaType} sniffed`)
  }
  // The bytes win over a media type that says "uncompressed" (docker save of some stores does this).
  t.true((await readAll(await decompressStream(streamOf(zlib.gzipSync(tar)), OCI))).equals(tar))
  // Multi-member gzip and tiny inputs.
  const two = Buffer.concat([zlib.gzipSync(tar.subarray(0, 1000)), zlib.gzipSync(tar.subarray(1000))])
  t.true((await readAll(await decompressStream(streamOf(two, 100)))).equals(tar))
  t.deepEqual(await readAll(await decompressStream(streamOf(zlib.gzipSync(Buffer.alloc(0))))), Buffer.alloc(0))
})

test('sniffing and media types', (t) => {
  t.is(sniffCompression(Buffer.from([0x1f, 0x8b, 8])), 'gzip')
  t.is(sniffCompression(Buffer.from([0x28, 0xb5, 0x2f, 0xfd])), 'zstd')
  t.is(sniffCompression(Buffer.from([0x50, 0x2a, 0x4d, 0x18])), 'zstd', 'skippable frame')
  t.is(sniffCompression(tar.subarray(0, 512)), 'none')
  t.is(sniffCompression(Buffer.alloc(512)), 'none')
  t.is(sniffCompression(Buffer.from('hello')), null)
  t.throws(() => sniffCompression(Buffer.from('BZh91AY&SY')), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
  t.is(compressionOfMediaType(OCI + '+zstd'), 'zstd')
  t.throws(() => compressionOfMediaType(OCI + '+bzip2'), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
  t.throws(() => compressionOfMediaType('application/vnd.example.whatever'), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
})

test('unknown or unsupported input → IMAGE_UNSUPPORTED_MEDIA_TYPE before any output', async (t) => {
  await t.throwsAsync(decompressStream(streamOf(tar), OCI + '+bzip2'), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
  await t.throwsAsync(decompressStream(streamOf(crypto.randomBytes(4096))), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' })
  await t.throwsAsync(decompressStream(streamOf(Buffer.concat([Buffer.from('BZh9'), crypto.randomBytes(1000)]))), {
    code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE',
  })
})

test('corrupt or truncated gzip and zstd → IMAGE_BAD_ARCHIVE on the stream (with the cause)', async (t) => {
  const gz = zlib.gzipSync(tar)
  const zs = zstd(tar)
  const cases: Buffer[] = [
    gz.subarray(0, gz.length >> 1),
    Buffer.concat([gz.subarray(0, 20), crypto.randomBytes(5000)]),
    zs.subarray(0, zs.length >> 1),
    Buffer.concat([zs.subarray(0, 8), crypto.randomBytes(5000)]),
  ]
  for (const bytes of cases) {
    const e = await t.throwsAsync(async () => readAll(await decompressStream(streamOf(bytes))), { code: 'IMAGE_BAD_ARCHIVE' })
    t.truthy(e!.message)
  }
  const e = await t.throwsAsync(async () => readAll(await decompressStream(streamOf(gz.subarray(0, 100)))), { code: 'IMAGE_BAD_ARCHIVE' })
  t.truthy((e as Error).cause)
})

test('an error of the input passes through unchanged; destroying the output early stops zstd', async (t) => {
  const mismatch = new StrataError('IMAGE_DIGEST_MISMATCH', 'blob does not match')
  for (const bytes of [zlib.gzipSync(tar), zstd(tar), tar]) {
    const input = new Readable({
      read() {
        this.push(bytes.subarray(0, 4096))
        this.destroy(mismatch)
      },
    })
    const out = await decompressStream(input)
    const e = await t.throwsAsync(readAll(out))
    t.is(e, mismatch)
  }
  const raw = crypto.randomBytes(4 << 20)
  for (const big of [zstd(raw), zlib.gzipSync(raw, { level: 1 })]) {
    const input = streamOf(big, 65536)
    const out = await decompressStream(input)
    for await (const _ of out) break
    t.true(out.destroyed)
    await new Promise((resolve) => setTimeout(resolve, 50))
    t.true(input.destroyed)
  }
})
