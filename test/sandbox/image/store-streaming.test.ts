// ImageStore's streaming paths against a real cluster: putBlob with several
// DFS writes in flight (a failing write stops the copy and leaves nothing
// behind), and partial blobs (pulls): a partial written whole by this process
// is verified with the hash taken as it was appended, without reading it back;
// a resumed partial, or one an append failed on, is re-read and re-hashed.
import test from 'ava'
import crypto from 'node:crypto'
import { Readable } from 'node:stream'
import { useImageStores } from '../../helpers/image-cluster.js'
import { sha256Digest } from '../../../sandbox/image/types.js'
import type { ImageStore } from '../../../sandbox/image/store.js'
import type { FileHandle } from '../../../fs/client/index.js'

const stores = useImageStores(test, '/img-stream')
const fresh = stores.fresh

async function tmpNames(s: ImageStore): Promise<string[]> {
  return (await s.fs.readdirAll(`${s.root}/tmp`)).entries.map((e) => e.name)
}

/** Counts the store's DFS reads (of any file). */
function countReads(s: ImageStore): { reads: number } {
  const c = { reads: 0 }
  const orig = s.fs.read.bind(s.fs)
  s.fs.read = ((...args: Parameters<typeof orig>) => {
    c.reads++
    return orig(...args)
  }) as typeof s.fs.read
  return c
}

/** Makes the store's `which`-th DFS write (counting from 1) fail. */
function failWrite(s: ImageStore, which: number): void {
  const orig = s.fs.write.bind(s.fs)
  let k = 0
  s.fs.write = ((fh: FileHandle, data: Uint8Array, at: number) => {
    if (++k === which) return Promise.reject(Object.assign(new Error('injected write failure'), { code: 'EIO' }))
    return orig(fh, data, at)
  }) as typeof s.fs.write
}

/** Appends like s3/pull.ts: the first append alone, then up to `window` in flight. */
async function appendAll(s: ImageStore, digest: string, data: Buffer, step: number, window = 3, from = 0): Promise<void> {
  const writes: Array<Promise<void>> = []
  for (let at = 0; at < data.length; at += step) {
    while (writes.length >= window) await writes.shift()
    const w = s.writePartialBlob(digest, from + at, data.subarray(at, at + step))
    writes.push(w)
    if (at === 0) await w
  }
  await Promise.all(writes)
}

test.serial('putBlob keeps several writes in flight and stores the bytes in order', async (t) => {
  const s = await fresh()
  // 8 MiB pieces: 45 MiB + 3 bytes is six pieces, the last a short one
  const data = crypto.randomBytes(45 * 1024 * 1024 + 3)
  const digest = sha256Digest(data)
  const chunks = Array.from({ length: 46 }, (_, i) => data.subarray(i * 1024 * 1024, (i + 1) * 1024 * 1024))
  let progress = 0
  const r = await s.putBlob(Readable.from(chunks), { digest, size: data.length }, { onProgress: (b) => (progress += b) })
  t.deepEqual(r, { digest, size: data.length, existed: false })
  t.is(progress, data.length)
  const back: Buffer[] = []
  for await (const c of s.readBlob(digest)) back.push(c as Buffer)
  t.true(Buffer.concat(back).equals(data))
  t.deepEqual(await tmpNames(s), [])
})

test.serial('putBlob: a failing DFS write fails the copy, nothing is published and the staging file is removed', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(40 * 1024 * 1024)
  const digest = sha256Digest(data)
  failWrite(s, 2)
  const chunks = Array.from({ length: 40 }, (_, i) => data.subarray(i * 1024 * 1024, (i + 1) * 1024 * 1024))
  await t.throwsAsync(s.putBlob(Readable.from(chunks), { digest, size: data.length }), { message: /injected write failure/ })
  t.false(await s.hasBlob(digest))
  t.deepEqual(await tmpNames(s), [])
})

test.serial('a partial blob appended whole by this process is verified without reading it back', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(13 * 1024 * 1024 + 11)
  const digest = sha256Digest(data)
  await appendAll(s, digest, data, 4 * 1024 * 1024)
  const c = countReads(s)
  t.deepEqual(await s.finishPartialBlob(digest, data.length), { digest, size: data.length })
  t.is(c.reads, 0, 'the running hash was used')
  t.true(await s.hasBlob(digest))
  const back: Buffer[] = []
  for await (const x of s.readBlob(digest)) back.push(x as Buffer)
  t.true(Buffer.concat(back).equals(data))

  // the running hash still catches bytes that are not the blob
  const other = sha256Digest('not these bytes')
  await appendAll(s, other, crypto.randomBytes(5 * 1024 * 1024), 1024 * 1024)
  await t.throwsAsync(s.finishPartialBlob(other), { code: 'IMAGE_DIGEST_MISMATCH' })
  t.is(await s.partialBlobLength(other), 0, 'the bad partial is deleted')
  // and a wrong expected size
  const short = crypto.randomBytes(100_000)
  const shortDigest = sha256Digest(short)
  await appendAll(s, shortDigest, short, 30_000)
  await t.throwsAsync(s.finishPartialBlob(shortDigest, short.length + 1), { code: 'IMAGE_SIZE_MISMATCH' })
  t.is(await s.partialBlobLength(shortDigest), 0)
  t.deepEqual(await tmpNames(s), [])
})

test.serial('a resumed partial blob is re-read and re-hashed whole', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(9 * 1024 * 1024 + 1)
  const digest = sha256Digest(data)
  await appendAll(s, digest, data.subarray(0, 5 * 1024 * 1024), 1024 * 1024)
  await s.close()
  const s2 = await stores.cluster().store(s.root)
  t.is(await s2.partialBlobLength(digest), 5 * 1024 * 1024)
  const rest = data.subarray(5 * 1024 * 1024)
  for (let at = 0; at < rest.length; at += 1024 * 1024) await s2.writePartialBlob(digest, 5 * 1024 * 1024 + at, rest.subarray(at, at + 1024 * 1024))
  const c = countReads(s2)
  t.deepEqual(await s2.finishPartialBlob(digest, data.length), { digest, size: data.length })
  t.true(c.reads > 0, 'the file was read back')

  // a resumed partial whose first part is wrong is caught
  const s3 = await fresh()
  const bad = Buffer.from(data)
  bad[100] ^= 1
  await appendAll(s3, digest, bad.subarray(0, 2 * 1024 * 1024), 1024 * 1024)
  await s3.close()
  const s4 = await stores.cluster().store(s3.root)
  await appendAll(s4, digest, data.subarray(2 * 1024 * 1024), 1024 * 1024, 3, 2 * 1024 * 1024)
  await t.throwsAsync(s4.finishPartialBlob(digest, data.length), { code: 'IMAGE_DIGEST_MISMATCH' })
  t.is(await s4.partialBlobLength(digest), 0)
})

test.serial('a partial blob that an append failed on is re-read when it is finished', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(6 * 1024 * 1024)
  const digest = sha256Digest(data)
  const step = 1024 * 1024
  await s.writePartialBlob(digest, 0, data.subarray(0, step))
  failWrite(s, 2)
  await s.writePartialBlob(digest, step, data.subarray(step, 2 * step))
  await t.throwsAsync(s.writePartialBlob(digest, 2 * step, data.subarray(2 * step, 3 * step)), { message: /injected write failure/ })
  // the puller starts again from what the store reports
  const from = await s.partialBlobLength(digest)
  t.is(from, 2 * step)
  for (let at = from; at < data.length; at += step) await s.writePartialBlob(digest, at, data.subarray(at, at + step))
  const c = countReads(s)
  t.deepEqual(await s.finishPartialBlob(digest, data.length), { digest, size: data.length })
  t.true(c.reads > 0, 'the file was read back')
  t.true(await s.hasBlob(digest))
})
