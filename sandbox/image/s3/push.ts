// `strata image push NAME[:TAG] s3://BUCKET/PREFIX`: layer blobs first
// (skipped when the bucket has them; multipart and resumable when large),
// then the manifest, then the tag object. A reader that finds the tag finds
// everything it references.
import crypto from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListPartsCommand,
  PutObjectCommand,
  UploadPartCommand,
  type PutObjectCommandOutput,
  type S3Client,
} from '@aws-sdk/client-s3'
import { Transform, pipeline, type Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { formatImageRef, type LayerRef } from '../types.js'
import { S3_MAX_ATTEMPTS, atEndpoint, createS3Client, errorName, isNotFound, isNotImplemented, isTimeout, s3Error, s3RetryDelayMs, statusOf } from './client.js'
import {
  DEFAULT_PART_SIZE,
  Limiter,
  MAX_PARTS,
  MAX_PART_SIZE,
  MIN_PART_SIZE,
  allOrAbort,
  linkedSignal,
  cancelled,
  isAbort,
  shortDigest,
  type PushResult,
  type TransferTask,
  type S3TransferOptions,
  type TransferStore,
} from './common.js'
import { UploadJournal, type JournalPart } from './journal.js'
import { blobKey, formatS3, manifestKey, parseS3Location, tagKey } from './url.js'

interface PushCtx {
  client: S3Client
  store: TransferStore
  bucket: string
  endpoint: string
  partSize: number
  limiter: Limiter
  journal: UploadJournal | null
  opts: S3TransferOptions
  stats: { bytesSent: number; partsResumed: number }
  /** the server lists multipart uploads (null: not asked yet) */
  canList: boolean | null
  /**
   * Part buffers not in use, reused across parts and blobs: fresh memory is
   * page-faulted in on first touch, which costs more than the read itself on
   * some VMs. At most `concurrency` are out at once.
   */
  spare: Buffer[]
}

function partRange(size: number, partSize: number, n: number): { start: number; end: number } {
  const start = (n - 1) * partSize
  return { start, end: Math.min(size, start + partSize) }
}

function md5Hex(b: Uint8Array): string {
  return crypto.createHash('md5').update(b).digest('hex')
}

/**
 * Runs `fn` on the blob's bytes [start, end), read into a reused buffer that
 * `fn` must not keep: it goes back to the spares once `fn` settles.
 */
async function withRange<T>(ctx: PushCtx, digest: string, start: number, end: number, fn: (bytes: Buffer) => Promise<T>): Promise<T> {
  const n = end - start
  let buf = ctx.spare.pop()
  // parts are partSize bytes but the last (a resumed upload's may be larger: its own part size)
  if (!buf || buf.length < n) buf = Buffer.allocUnsafeSlow(Math.max(n, ctx.partSize))
  try {
    const bytes = buf.subarray(0, n)
    await ctx.store.readBlobInto(digest, start, bytes)
    return await fn(bytes)
  } finally {
    ctx.spare.push(buf)
  }
}

/** A transport failure or a 5xx/429: worth sending the request again (a timeout is not: it already waited the whole --timeout). */
function isTransient(e: unknown): boolean {
  if (isAbort(e) || isTimeout(e)) return false
  const status = statusOf(e)
  return status === undefined || status >= 500 || status === 429
}

const unquote = (etag: string | undefined) => (etag ?? '').replace(/"/g, '')

/**
 * Pushes the stored image `ref` (NAME[:TAG] or NAME@DIGEST) to
 * `s3://BUCKET[/PREFIX]`. Blobs the bucket already has with the right size are
 * skipped; blobs larger than the part size go up in parts, several at once,
 * and an upload interrupted earlier is found again (server listing, else the
 * local journal) and continued. The tag object is written after the manifest
 * and every blob. Errors: IMAGE_INVALID_REFERENCE, IMAGE_NOT_FOUND (local
 * image), IMAGE_AUTH_FAILED, IMAGE_REMOTE_ERROR (the store failed, nothing is
 * tagged), CANCELLED (opts.signal).
 */
export async function pushS3(store: TransferStore, ref: string, url: string, opts: S3TransferOptions = {}): Promise<PushResult> {
  const loc = parseS3Location(url)
  const partSize = opts.partSize ?? DEFAULT_PART_SIZE
  if (!Number.isSafeInteger(partSize) || partSize < MIN_PART_SIZE || partSize > MAX_PART_SIZE) {
    throw new StrataError('INVALID_ARGUMENT', `part size ${partSize} is outside S3's limits of ${MIN_PART_SIZE} to ${MAX_PART_SIZE} bytes`)
  }
  const img = await store.resolve(ref)
  const client = opts.client ?? (await createS3Client(opts))
  const ctx: PushCtx = {
    client,
    store,
    bucket: loc.bucket,
    endpoint: opts.endpoint ?? '',
    partSize,
    limiter: new Limiter(opts.concurrency ?? 4),
    journal: opts.stateDir ? new UploadJournal(opts.stateDir) : null,
    opts,
    stats: { bytesSent: 0, partsResumed: 0 },
    canList: null,
    spare: [],
  }
  const what = `push ${formatImageRef(img.ref)} to ${formatS3(loc.bucket, loc.prefix)}`
  const link = linkedSignal(opts.signal)
  const signal = link.signal
  try {
    const layers = new Map<string, LayerRef>()
    for (const l of img.manifest.layers) layers.set(l.digest, l)
    const pushed = await allOrAbort(
      signal,
      [...layers.values()].map((l) => (signal: AbortSignal) => pushBlob(ctx, blobKey(loc.prefix, l.digest), l, signal)),
    )
    // the manifest once every blob is there, the tag last
    signal.throwIfAborted()
    const mKey = manifestKey(loc.prefix, img.digest)
    const mHead = await head(ctx, mKey, signal)
    if (mHead !== img.bytes.length) await put(ctx, mKey, img.bytes, 'application/vnd.strata.image.manifest.v1+json', signal)
    let tag: string | undefined
    if (img.ref.tag !== undefined && !img.ref.digest) {
      await put(ctx, tagKey(loc.prefix, img.ref.name, img.ref.tag), Buffer.from(`${img.digest}\n`), 'text/plain', signal)
      tag = img.ref.tag
    }
    return {
      ref: formatImageRef(img.ref),
      url: formatS3(loc.bucket, loc.prefix),
      digest: img.digest,
      ...(tag ? { tag } : {}),
      blobsPushed: pushed.filter((p) => p).length,
      blobsSkipped: pushed.filter((p) => !p).length,
      partsResumed: ctx.stats.partsResumed,
      bytesSent: ctx.stats.bytesSent,
    }
  } catch (e) {
    if (opts.signal?.aborted) throw cancelled(what, opts.signal)
    throw atEndpoint(s3Error(e, what), opts.endpoint)
  } finally {
    link.dispose()
    if (!opts.client) client.destroy()
  }
}

/** HeadObject: the object's size, or null when there is none. */
async function head(ctx: PushCtx, key: string, signal?: AbortSignal): Promise<number | null> {
  try {
    const r = await ctx.limiter.run(() => ctx.client.send(new HeadObjectCommand({ Bucket: ctx.bucket, Key: key }), { abortSignal: signal }))
    return r.ContentLength ?? null
  } catch (e) {
    if (isNotFound(e)) return null
    throw s3Error(e, `HEAD ${formatS3(ctx.bucket, key)}`)
  }
}

async function put(ctx: PushCtx, key: string, body: Buffer, contentType: string, signal?: AbortSignal): Promise<void> {
  try {
    await ctx.limiter.run(() =>
      ctx.client.send(
        new PutObjectCommand({ Bucket: ctx.bucket, Key: key, Body: body, ContentLength: body.length, ContentType: contentType, ContentMD5: crypto.createHash('md5').update(body).digest('base64') }),
        { abortSignal: signal },
      ),
    )
    ctx.stats.bytesSent += body.length
  } catch (e) {
    throw s3Error(e, `PUT ${formatS3(ctx.bucket, key)}`)
  }
}

/** Uploads one blob unless the bucket has it; true when bytes were sent. */
async function pushBlob(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal): Promise<boolean> {
  const task = ctx.opts.progress?.start(`push ${shortDigest(layer.digest)}`, layer.size)
  try {
    return await uploadBlob(ctx, key, layer, signal, task)
  } catch (e) {
    // cut short by Ctrl-C: ended with no note, so that the sink shows it interrupted where it stopped
    // (a failure leaves it as it is: the error line says what failed)
    if (ctx.opts.signal?.aborted) task?.done()
    throw e
  }
}

async function uploadBlob(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal, task: TransferTask | undefined): Promise<boolean> {
  const existing = await head(ctx, key, signal)
  if (existing === layer.size) {
    task?.tick(layer.size)
    task?.done('exists')
    if (ctx.journal) await ctx.journal.remove(ctx.endpoint, ctx.bucket, key)
    return false
  }
  if (layer.size <= ctx.partSize) {
    await putStreamed(ctx, key, layer, signal)
    ctx.opts.onUpload?.({ digest: layer.digest, partNumber: 0, bytes: layer.size })
    task?.tick(layer.size)
  } else {
    await multipart(ctx, key, layer, signal, (n) => task?.tick(n))
  }
  // what the bucket holds now must be what was meant
  const now = await head(ctx, key, signal)
  if (now !== layer.size) throw new StrataError('IMAGE_REMOTE_ERROR', `${formatS3(ctx.bucket, key)} holds ${now ?? 'no'} bytes after upload, expected ${layer.size}`)
  task?.done()
  return true
}

/**
 * One PutObject of a whole blob, its body streamed from the DFS instead of
 * held in memory (a blob may be up to 5 GiB), in one pass over the blob.
 * S3 takes Content-MD5 only up front, which would mean reading the blob
 * twice. The request carries the blob's SHA-256 instead (its digest, known
 * without reading; S3 refuses a body that does not match it), and the MD5
 * of the bytes sent is computed on the way and compared with the ETag of
 * the answer (for a single PUT, the MD5 of what the server stored: what
 * s3rver and servers that ignore the checksum give). A server that confirms
 * neither gets its object deleted and the blob sent again the strict way
 * (putWithMd5), so unverified bytes never stay under the blob's content
 * address, where a later push would take them as present.
 */
async function putStreamed(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal): Promise<void> {
  const sha256 = Buffer.from(layer.digest.slice('sha256:'.length), 'hex').toString('base64')
  let md5 = crypto.createHash('md5')
  let sent = 0
  const r = await putBody(ctx, key, layer, signal, { ChecksumSHA256: sha256 }, (src) => {
    // a fresh count per attempt: each sends the blob from its start
    md5 = crypto.createHash('md5')
    sent = 0
    const body = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        md5.update(chunk)
        sent += chunk.length
        cb(null, chunk)
      },
    })
    pipeline(src, body, () => undefined)
    return body
  })
  if (sent !== layer.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `blob ${layer.digest} holds ${sent} bytes, the manifest says ${layer.size}`)
  if (r.ChecksumSHA256 === sha256 || unquote(r.ETag) === md5.digest('hex')) {
    ctx.stats.bytesSent += layer.size
    return
  }
  // nothing the server said confirms the bytes it stored
  await ctx.client.send(new DeleteObjectCommand({ Bucket: ctx.bucket, Key: key }), { abortSignal: signal }).catch((e: unknown) => {
    throw s3Error(e, `DELETE ${formatS3(ctx.bucket, key)} (stored unverified)`)
  })
  return putWithMd5(ctx, key, layer, signal)
}

/**
 * One PutObject of the blob streamed from the DFS, sent again on a transient
 * failure up to S3_MAX_ATTEMPTS times in all, with the SDK's backoff (it cannot resend a stream);
 * `body` makes each attempt's body from a fresh read of the blob.
 */
async function putBody(
  ctx: PushCtx,
  key: string,
  layer: LayerRef,
  signal: AbortSignal,
  check: { ChecksumSHA256: string } | { ContentMD5: string },
  body: (src: Readable) => Readable,
): Promise<PutObjectCommandOutput> {
  for (let attempt = 1; ; attempt++) {
    const src = ctx.store.readBlob(layer.digest)
    const b = body(src)
    try {
      return await ctx.limiter.run(() =>
        ctx.client.send(
          new PutObjectCommand({ Bucket: ctx.bucket, Key: key, Body: b, ContentLength: layer.size, ContentType: 'application/octet-stream', ...check }),
          { abortSignal: signal },
        ),
      )
    } catch (e) {
      if (signal.aborted || attempt >= S3_MAX_ATTEMPTS || !isTransient(e)) throw s3Error(e, `PUT ${formatS3(ctx.bucket, key)}`)
    } finally {
      src.destroy()
      b.destroy()
    }
    await sleep(s3RetryDelayMs(attempt), undefined, { signal }).catch(() => undefined)
  }
}

/**
 * The strict one-PUT of a blob: a first pass computes the Content-MD5 that
 * S3 takes only up front, then the blob is streamed; a body that arrives
 * different from those bytes is refused by the server.
 */
async function putWithMd5(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal): Promise<void> {
  const md5 = crypto.createHash('md5')
  let n = 0
  for await (const c of ctx.store.readBlob(layer.digest) as AsyncIterable<Buffer>) {
    md5.update(c)
    n += c.length
    signal.throwIfAborted()
  }
  if (n !== layer.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `blob ${layer.digest} holds ${n} bytes, the manifest says ${layer.size}`)
  await putBody(ctx, key, layer, signal, { ContentMD5: md5.digest('base64') }, (src) => src)
  ctx.stats.bytesSent += layer.size
}

interface Resumed {
  uploadId: string
  partSize: number
  parts: Map<number, JournalPart>
  from: 'server' | 'journal'
}

/** Finds an unfinished upload of `key` and the parts of it that still match the blob. */
async function findUpload(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal): Promise<Resumed | null> {
  if (ctx.canList !== false) {
    try {
      const uploads: Array<{ id: string; at: number }> = []
      let keyMarker: string | undefined
      let idMarker: string | undefined
      for (;;) {
        const r = await ctx.limiter.run(() =>
          ctx.client.send(new ListMultipartUploadsCommand({ Bucket: ctx.bucket, Prefix: key, KeyMarker: keyMarker, UploadIdMarker: idMarker }), { abortSignal: signal }),
        )
        for (const u of r.Uploads ?? []) if (u.Key === key && u.UploadId) uploads.push({ id: u.UploadId, at: u.Initiated?.getTime() ?? 0 })
        if (!r.IsTruncated) break
        keyMarker = r.NextKeyMarker
        idMarker = r.NextUploadIdMarker
      }
      ctx.canList = true
      uploads.sort((a, b) => b.at - a.at)
      const newest = uploads[0]
      if (!newest) return null
      const listed = new Map<number, { size: number; etag: string }>()
      let partMarker: string | undefined
      for (;;) {
        const r = await ctx.limiter.run(() =>
          ctx.client.send(new ListPartsCommand({ Bucket: ctx.bucket, Key: key, UploadId: newest.id, PartNumberMarker: partMarker }), { abortSignal: signal }),
        )
        for (const p of r.Parts ?? []) if (p.PartNumber && p.Size !== undefined) listed.set(p.PartNumber, { size: p.Size, etag: unquote(p.ETag) })
        if (!r.IsTruncated) break
        partMarker = r.NextPartNumberMarker
      }
      // a part counts only if its size is what this blob's part needs and
      // its ETag is the MD5 of those bytes (S3's ETag of an unencrypted or
      // SSE-S3 part); anything else is uploaded again under the same number
      const parts = new Map<number, JournalPart>()
      const total = Math.ceil(layer.size / ctx.partSize)
      for (const [n, p] of listed) {
        if (n > total) continue
        const { start, end } = partRange(layer.size, ctx.partSize, n)
        if (p.size !== end - start) continue
        if (await withRange(ctx, layer.digest, start, end, async (bytes) => md5Hex(bytes) === p.etag)) parts.set(n, { size: p.size, etag: p.etag })
      }
      return { uploadId: newest.id, partSize: ctx.partSize, parts, from: 'server' }
    } catch (e) {
      if (!isNotImplemented(e)) throw s3Error(e, `list uploads of ${formatS3(ctx.bucket, key)}`)
      ctx.canList = false
    }
  }
  const j = await ctx.journal?.load(ctx.endpoint, ctx.bucket, key)
  if (!j || j.size !== layer.size || j.partSize < MIN_PART_SIZE) return null
  const parts = new Map<number, JournalPart>()
  for (const [n, p] of Object.entries(j.parts)) {
    const { start, end } = partRange(layer.size, j.partSize, Number(n))
    if (p.size === end - start && end > start) parts.set(Number(n), p)
  }
  return { uploadId: j.uploadId, partSize: j.partSize, parts, from: 'journal' }
}

async function multipart(ctx: PushCtx, key: string, layer: LayerRef, signal: AbortSignal, tick: (n: number) => void): Promise<void> {
  let resumed = await findUpload(ctx, key, layer, signal)
  for (let attempt = 0; ; attempt++) {
    let uploadId: string
    let partSize = ctx.partSize
    const done = new Map<number, JournalPart>()
    if (resumed) {
      uploadId = resumed.uploadId
      partSize = resumed.partSize
      for (const [n, p] of resumed.parts) done.set(n, p)
    } else {
      try {
        const r = await ctx.limiter.run(() =>
          ctx.client.send(new CreateMultipartUploadCommand({ Bucket: ctx.bucket, Key: key, ContentType: 'application/octet-stream' }), { abortSignal: signal }),
        )
        if (!r.UploadId) throw new StrataError('IMAGE_REMOTE_ERROR', `${formatS3(ctx.bucket, key)}: CreateMultipartUpload returned no upload id`)
        uploadId = r.UploadId
      } catch (e) {
        throw s3Error(e, `start upload of ${formatS3(ctx.bucket, key)}`)
      }
    }
    const total = Math.ceil(layer.size / partSize)
    if (total > MAX_PARTS) throw new StrataError('INVALID_ARGUMENT', `blob ${layer.digest} needs ${total} parts of ${partSize} bytes; S3 allows ${MAX_PARTS}: use a larger part size`)
    const record = () =>
      ctx.journal?.save({
        version: 1,
        endpoint: ctx.endpoint,
        bucket: ctx.bucket,
        key,
        uploadId,
        size: layer.size,
        partSize,
        parts: Object.fromEntries([...done].map(([n, p]) => [String(n), p])),
      })
    await record()
    let resumedBytes = 0
    for (const p of done.values()) resumedBytes += p.size
    ctx.stats.partsResumed += done.size
    if (resumedBytes) tick(resumedBytes)

    const missing = [...Array(total).keys()].map((i) => i + 1).filter((n) => !done.has(n))
    await allOrAbort(
      signal,
      missing.map((n) => async (s: AbortSignal) => {
        await ctx.limiter.run(async () => {
          const { start, end } = partRange(layer.size, partSize, n)
          const etag = await withRange(ctx, layer.digest, start, end, async (body) => {
            const md5b64 = crypto.createHash('md5').update(body).digest('base64')
            try {
              const r = await ctx.client.send(
                new UploadPartCommand({ Bucket: ctx.bucket, Key: key, UploadId: uploadId, PartNumber: n, Body: body, ContentLength: body.length, ContentMD5: md5b64 }),
                { abortSignal: s },
              )
              return unquote(r.ETag)
            } catch (e) {
              throw s3Error(e, `upload part ${n} of ${formatS3(ctx.bucket, key)}`)
            }
          })
          done.set(n, { size: end - start, etag })
          ctx.stats.bytesSent += end - start
          tick(end - start)
          await record()
          ctx.opts.onUpload?.({ digest: layer.digest, partNumber: n, bytes: end - start })
        })
      }),
    )
    try {
      const parts = [...done].sort((a, b) => a[0] - b[0]).map(([n, p]) => ({ PartNumber: n, ETag: `"${p.etag}"` }))
      await ctx.limiter.run(() =>
        ctx.client.send(new CompleteMultipartUploadCommand({ Bucket: ctx.bucket, Key: key, UploadId: uploadId, MultipartUpload: { Parts: parts } }), { abortSignal: signal }),
      )
    } catch (e) {
      // a resumed upload that the server no longer has (completed, aborted,
      // expired) or whose parts it rejects: start this blob over, once
      const stale = resumed && attempt === 0 && !isAbort(e) && statusOf(e) !== undefined && (statusOf(e)! < 500 || errorName(e) === 'InternalError')
      if (!stale) throw s3Error(e, `complete upload of ${formatS3(ctx.bucket, key)}`)
      await ctx.client.send(new AbortMultipartUploadCommand({ Bucket: ctx.bucket, Key: key, UploadId: uploadId })).catch(() => undefined)
      ctx.stats.partsResumed -= resumed!.parts.size
      resumed = null
      continue
    }
    await ctx.journal?.remove(ctx.endpoint, ctx.bucket, key)
    return
  }
}
