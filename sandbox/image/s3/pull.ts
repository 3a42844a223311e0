// `strata image pull s3://BUCKET/PREFIX/NAME:TAG`: the tag object names the
// manifest, the manifest is checked against that digest, each missing blob is
// streamed into the store's resumable partial file (Range GET from where an
// earlier run stopped) and verified when complete; then the manifest is
// stored, the diffIds it gives recorded, and the local tag set, last.
import { GetObjectCommand, HeadObjectCommand, type GetObjectCommandOutput, type S3Client } from '@aws-sdk/client-s3'
import crypto from 'node:crypto'
import type { Readable } from 'node:stream'
import { BufferPool } from '../../../fs/common/buffer-pool.js'
import { StrataError, isStrataError } from '../../../fs/common/errors.js'
import { TRANSIENT_LEASE_PREFIX } from '../store.js'
import { DEFAULT_TAG, isDigest, parseImageRef, sha256Digest, validateManifest, type LayerRef } from '../types.js'
import { EROFS_SUPERBLOCK_BYTES, EROFS_SUPERBLOCK_OFFSET, erofsIsPlain } from '../layer/erofs.js'
import { atEndpoint, createS3Client, isNotFound, isTimeout, s3Error } from './client.js'
import { Limiter, allOrAbort, cancelled, linkedSignal, shortDigest, type PullResult, type TransferTask, type S3TransferOptions, type TransferStore } from './common.js'
import { blobKey, formatS3, manifestKey, parseS3ImageUrl, tagKey, withPrefix } from './url.js'

/** Largest manifest or tag object accepted. */
const MAX_MANIFEST_BYTES = 4 * 1024 * 1024
/** Bytes handed to the store per write. */
const APPEND_STEP = 4 * 1024 * 1024
/** Writes of one blob in flight at once. */
const APPEND_WINDOW = 8
/** Write buffers, reused across writes and blobs (APPEND_WINDOW in flight plus the one being gathered). */
const appendPieces = new BufferPool(((APPEND_WINDOW + 2) * APPEND_STEP * 5) / 4)
/** Times one blob's body is re-requested after the connection broke mid-stream. */
const BODY_ATTEMPTS = 3

interface PullCtx {
  client: S3Client
  store: TransferStore
  bucket: string
  prefix: string
  opts: S3TransferOptions
  limiter: Limiter
  stats: { bytesReceived: number; bytesResumed: number }
}

/**
 * Pulls `s3://BUCKET[/PREFIX]/NAME[:TAG|@DIGEST]` into the store and tags it
 * `opts.name` (NAME[:TAG]; without a tag the remote one) or the remote
 * NAME:TAG. Errors: IMAGE_INVALID_REFERENCE (URL, or a PREFIX/NAME split that
 * matches two images), IMAGE_NOT_FOUND (no such tag or manifest),
 * IMAGE_DIGEST_MISMATCH / IMAGE_SIZE_MISMATCH (an object does not match its
 * digest: nothing is tagged), IMAGE_BAD_MANIFEST, IMAGE_AUTH_FAILED,
 * IMAGE_REMOTE_ERROR, CANCELLED. Running it again resumes partial blobs.
 */
export async function pullS3(store: TransferStore, url: string, opts: S3TransferOptions & { name?: string; prefix?: string } = {}): Promise<PullResult> {
  const parsed = opts.prefix !== undefined ? withPrefix(parseS3ImageUrl(url), url, opts.prefix) : parseS3ImageUrl(url)
  let local: { name: string; tag?: string } | undefined
  if (opts.name !== undefined) {
    const r = parseImageRef(opts.name)
    if (r.digest) throw new StrataError('IMAGE_INVALID_REFERENCE', `--name ${JSON.stringify(opts.name)}: a local name takes a tag, not a digest`)
    const hasTag = opts.name.lastIndexOf(':') > opts.name.lastIndexOf('/')
    local = hasTag ? { name: r.name, tag: r.tag ?? DEFAULT_TAG } : { name: r.name }
  }
  const client = opts.client ?? (await createS3Client(opts))
  const what = `pull ${url}`
  const link = linkedSignal(opts.signal)
  const signal = link.signal
  try {
    // which PREFIX/NAME split names an image in the bucket
    const found: Array<{ prefix: string; name: string; tag?: string; digest: string }> = []
    for (const c of parsed.candidates) {
      if (c.ref.digest) {
        if ((await headSize(client, parsed.bucket, manifestKey(c.prefix, c.ref.digest), signal)) !== null) {
          found.push({ prefix: c.prefix, name: c.ref.name, ...(c.ref.tag ? { tag: c.ref.tag } : {}), digest: c.ref.digest })
        }
        continue
      }
      const key = tagKey(c.prefix, c.ref.name, c.ref.tag ?? DEFAULT_TAG)
      const body = await getSmall(client, parsed.bucket, key, signal)
      if (body === null) continue
      const digest = body.toString('utf8').trim()
      if (!isDigest(digest)) throw new StrataError('IMAGE_BAD_MANIFEST', `${formatS3(parsed.bucket, key)} does not hold a manifest digest`)
      found.push({ prefix: c.prefix, name: c.ref.name, tag: c.ref.tag ?? DEFAULT_TAG, digest })
    }
    if (found.length === 0) {
      // every PREFIX/NAME split tried, each where it was looked for
      const tried = parsed.candidates.map((c) =>
        c.ref.digest ? `manifest ${c.ref.digest} of ${c.ref.name} under ${formatS3(parsed.bucket, c.prefix)}` : `tag ${c.ref.name}:${c.ref.tag ?? DEFAULT_TAG} under ${formatS3(parsed.bucket, c.prefix)}`,
      )
      throw new StrataError('IMAGE_NOT_FOUND', `${url}: no image: looked for ${tried.join('; ')}`)
    }
    // splits that all name the same manifest are one image (the longest prefix, listed first, is
    // taken); splits that name different ones need --prefix
    if (new Set(found.map((f) => f.digest)).size > 1) {
      throw new StrataError(
        'IMAGE_INVALID_REFERENCE',
        `${url} is ambiguous: ${found.map((f) => `prefix ${JSON.stringify(f.prefix)} name ${f.name} (${shortDigest(f.digest)})`).join(' and ')} both exist; choose one with --prefix ${found.map((f) => JSON.stringify(f.prefix)).join(' or --prefix ')}`,
      )
    }
    const src = found[0]!
    const mKey = manifestKey(src.prefix, src.digest)
    const bytes = await getSmall(client, parsed.bucket, mKey, signal)
    if (bytes === null) throw new StrataError('IMAGE_NOT_FOUND', `${formatS3(parsed.bucket, mKey)}: the tag names manifest ${src.digest}, which the bucket does not have`)
    const got = sha256Digest(bytes)
    if (got !== src.digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `${formatS3(parsed.bucket, mKey)} has digest ${got}, expected ${src.digest}`)
    let parsedJson: unknown
    try {
      parsedJson = JSON.parse(bytes.toString('utf8'))
    } catch (e) {
      throw new StrataError('IMAGE_BAD_MANIFEST', `${formatS3(parsed.bucket, mKey)} is not JSON`, { cause: e })
    }
    const manifest = validateManifest(parsedJson)

    const ctx: PullCtx = {
      client,
      store,
      bucket: parsed.bucket,
      prefix: src.prefix,
      opts,
      limiter: new Limiter(opts.concurrency ?? 4),
      stats: { bytesReceived: 0, bytesResumed: 0 },
    }
    const layers = new Map<string, LayerRef>()
    for (const l of manifest.layers) layers.set(l.digest, l)
    const name = local?.name ?? src.name
    const tag = local?.tag ?? src.tag ?? ''
    // leased before each blob is looked for, until the tag is written: a gc running meanwhile
    // keeps a blob this pull found stored or stored itself (it references nothing yet)
    const holder = `${TRANSIENT_LEASE_PREFIX}pull-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
    const leased: string[] = []
    let fetched: boolean[]
    const stopFresh = store.keepFresh(store.leaseHolderPath(holder))
    try {
      for (const d of [src.digest, ...layers.keys()]) {
        await store.addLease(holder, d)
        leased.push(d)
      }
      fetched = await allOrAbort(
        signal,
        [...layers.values()].map((l) => (signal: AbortSignal) => ctx.limiter.run(() => pullBlob(ctx, l, signal))),
      )
      signal.throwIfAborted()
      const put = await store.putManifest(bytes)
      if (put.digest !== src.digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `the store addressed the manifest as ${put.digest}, expected ${src.digest}`)
      await recordDiffIds(store, manifest.layers)
      if (tag) await store.setTag(name, tag, src.digest)
    } finally {
      stopFresh()
      for (const d of leased) await store.removeLease(holder, d).catch(() => undefined)
    }
    return {
      url,
      name,
      tag,
      digest: src.digest,
      blobsFetched: fetched.filter((f) => f).length,
      blobsSkipped: fetched.filter((f) => !f).length,
      bytesResumed: ctx.stats.bytesResumed,
      bytesReceived: ctx.stats.bytesReceived,
    }
  } catch (e) {
    if (opts.signal?.aborted) throw cancelled(what, opts.signal)
    throw atEndpoint(s3Error(e, what), opts.endpoint)
  } finally {
    link.dispose()
    if (!opts.client) client.destroy()
  }
}

/**
 * Records the diffIds the manifest gives its layers in the store's diffId
 * cache, as the import that built them recorded them where they came from:
 * without that, an import or docker:// pull of an image with these layers
 * would download and build them again instead of finding them by diff_id.
 * Only a layer built without compression is recorded (its superblock tells),
 * since the cache keeps one record per build variant and an lz4 layer cannot
 * be told from an lz4hc one; a diffId the store already has a layer for is
 * left as it is. A cache, so a failure to record is no failure of the pull.
 */
async function recordDiffIds(store: TransferStore, layers: LayerRef[]): Promise<void> {
  const seen = new Set<string>()
  for (const l of layers) {
    if (!l.diffId || seen.has(l.diffId) || l.size < EROFS_SUPERBLOCK_OFFSET + EROFS_SUPERBLOCK_BYTES) continue
    seen.add(l.diffId)
    try {
      if ((await store.lookupDiffId(l.diffId)) !== null) continue
      const sb = Buffer.alloc(EROFS_SUPERBLOCK_BYTES)
      await store.readBlobInto(l.digest, EROFS_SUPERBLOCK_OFFSET, sb)
      if (erofsIsPlain(sb)) await store.recordDiffId(l.diffId, l.digest)
    } catch {
      // the next import builds the layer (and finds the blob stored) instead
    }
  }
}

async function headSize(client: S3Client, bucket: string, key: string, signal?: AbortSignal): Promise<number | null> {
  try {
    const r = await client.send(new HeadObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: signal })
    return r.ContentLength ?? null
  } catch (e) {
    if (isNotFound(e)) return null
    throw s3Error(e, `HEAD ${formatS3(bucket, key)}`)
  }
}

/** A small object's bytes (tag or manifest), null when it does not exist. */
async function getSmall(client: S3Client, bucket: string, key: string, signal?: AbortSignal): Promise<Buffer | null> {
  let r: GetObjectCommandOutput
  try {
    r = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }), { abortSignal: signal })
  } catch (e) {
    if (isNotFound(e)) return null
    throw s3Error(e, `GET ${formatS3(bucket, key)}`)
  }
  if ((r.ContentLength ?? 0) > MAX_MANIFEST_BYTES) {
    ;(r.Body as Readable | undefined)?.destroy()
    throw new StrataError('IMAGE_BAD_MANIFEST', `${formatS3(bucket, key)} is ${r.ContentLength} bytes, more than a manifest may be`)
  }
  const chunks: Buffer[] = []
  let n = 0
  try {
    for await (const c of r.Body as AsyncIterable<Uint8Array>) {
      n += c.length
      if (n > MAX_MANIFEST_BYTES) {
        ;(r.Body as Readable).destroy()
        throw new StrataError('IMAGE_BAD_MANIFEST', `${formatS3(bucket, key)} is more than ${MAX_MANIFEST_BYTES} bytes`)
      }
      chunks.push(Buffer.from(c.buffer, c.byteOffset, c.length))
    }
  } catch (e) {
    throw s3Error(e, `GET ${formatS3(bucket, key)}`)
  }
  return Buffer.concat(chunks)
}

/** Total object size from `Content-Range: bytes a-b/total`. */
function rangeTotal(cr: string | undefined): number | undefined {
  const m = /\/(\d+)\s*$/.exec(cr ?? '')
  return m ? Number(m[1]) : undefined
}

/** Stores one blob unless the store has it; true when bytes were fetched. */
async function pullBlob(ctx: PullCtx, layer: LayerRef, signal: AbortSignal): Promise<boolean> {
  const task = ctx.opts.progress?.start(`pull ${shortDigest(layer.digest)}`, layer.size)
  try {
    return await fetchBlob(ctx, layer, signal, task)
  } catch (e) {
    // cut short by Ctrl-C: ended with no note, so that the sink shows it interrupted where it stopped
    // (a failure leaves it as it is: the error line says what failed)
    if (ctx.opts.signal?.aborted) task?.done()
    throw e
  }
}

async function fetchBlob(ctx: PullCtx, layer: LayerRef, signal: AbortSignal, task: TransferTask | undefined): Promise<boolean> {
  const { store, bucket } = ctx
  const have = await store.statBlob(layer.digest)
  if (have && have.size === layer.size) {
    task?.tick(layer.size)
    task?.done('exists')
    return false
  }
  const key = blobKey(ctx.prefix, layer.digest)
  for (let round = 1; ; round++) {
    let offset = await store.partialBlobLength(layer.digest)
    if (offset > layer.size) {
      // longer than the blob can be: let the store verify (and drop) it
      await store.finishPartialBlob(layer.digest, layer.size).catch(() => undefined)
      offset = await store.partialBlobLength(layer.digest)
    }
    const resumed = offset
    if (resumed > 0) {
      ctx.stats.bytesResumed += resumed
      task?.tick(resumed)
    }
    // every byte goes to its own offset, from this one look at the file on: the file's
    // length may move meanwhile (meta closing a killed run's session sets it)
    const reach = { at: offset }
    for (let attempt = 1; reach.at < layer.size; attempt++) {
      try {
        await fetchRange(ctx, key, layer, reach, signal, (n) => task?.tick(n))
      } catch (e) {
        const err = s3Error(e, `GET ${formatS3(bucket, key)}`)
        // a body cut off mid-stream is retried from the bytes that reached the
        // store in one run; one that stalled for the whole timeout is not (the
        // server is gone)
        if (signal.aborted || err.code !== 'IMAGE_REMOTE_ERROR' || isTimeout(err) || attempt >= BODY_ATTEMPTS) throw err
      }
    }
    signal.throwIfAborted()
    try {
      await store.finishPartialBlob(layer.digest, layer.size)
      break
    } catch (e) {
      // what an earlier, killed run left can be torn (its writes in flight
      // landed out of order, a later one and not an earlier one, and the
      // length meta gave the file covers both): the store dropped
      // the partial file, so fetch the whole blob once more before blaming
      // the bucket
      if (!isStrataError(e, ['IMAGE_DIGEST_MISMATCH', 'IMAGE_SIZE_MISMATCH'])) throw e
      // the store's message names only the blob: say which object it came from
      if (round > 1 || resumed === 0) throw new StrataError(e.code, `${formatS3(bucket, key)}${ctx.opts.endpoint ? ` at ${ctx.opts.endpoint}` : ''}: ${e.reason}`, { cause: e })
      ctx.stats.bytesResumed -= resumed
    }
  }
  task?.done()
  return true
}

/**
 * GETs `key` from `reach.at` to the end into the partial blob, each piece
 * written at its own offset; `reach.at` follows the end of the bytes that
 * landed in one run from where it started (writes in flight may land out of
 * order), also when the body or a write fails.
 */
async function fetchRange(ctx: PullCtx, key: string, layer: LayerRef, reach: { at: number }, signal: AbortSignal, tick: (n: number) => void): Promise<void> {
  const offset = reach.at
  let r: GetObjectCommandOutput
  try {
    r = await ctx.client.send(new GetObjectCommand({ Bucket: ctx.bucket, Key: key, ...(offset > 0 ? { Range: `bytes=${offset}-` } : {}) }), { abortSignal: signal })
  } catch (e) {
    if (isNotFound(e)) throw new StrataError('IMAGE_BLOB_MISSING', `${formatS3(ctx.bucket, key)}: the manifest references blob ${layer.digest}, which the bucket does not have`)
    if ((e as { name?: string })?.name === 'InvalidRange') throw new StrataError('IMAGE_SIZE_MISMATCH', `${formatS3(ctx.bucket, key)} is shorter than the ${layer.size} bytes the manifest says`, { cause: e })
    throw e
  }
  const body = r.Body as Readable
  // a server that ignored the Range header sends the whole object again
  let skip = offset > 0 && !r.ContentRange ? offset : 0
  const objectSize = r.ContentRange ? rangeTotal(r.ContentRange) : r.ContentLength
  if (objectSize !== undefined && objectSize !== layer.size) {
    body.destroy()
    throw new StrataError('IMAGE_SIZE_MISMATCH', `${formatS3(ctx.bucket, key)} is ${objectSize} bytes, the manifest says ${layer.size} for ${layer.digest}`)
  }
  let pending: Buffer[] = []
  let pendingBytes = 0
  // writes in flight, oldest first (the first one alone: it opens the partial file)
  const writes: Array<Promise<void>> = []
  let opened = false
  let failed: unknown = null
  // where the next write goes, and the writes that landed beyond reach.at (start → end)
  let at = offset
  const landed = new Map<number, number>()
  // Writes of exactly APPEND_STEP bytes (but the last) land on the DFS's chunk
  // boundaries when the step is a multiple of the chunk size, so that every
  // chunk is written whole, once, instead of in two writes split by
  // node:http's pieces.
  const flush = async (max = Infinity) => {
    const n = Math.min(pendingBytes, max)
    if (n === 0) return
    // gathered into a reused buffer: a fresh 4 MiB allocation per write cost more (page faults, GC) than the copy
    let pooled = false
    let chunk: Buffer
    if (pending.length === 1 && pending[0]!.length === n) {
      chunk = pending[0]!
      pending = []
    } else {
      chunk = appendPieces.take(n)
      pooled = true
      let off = 0
      while (off < n) {
        const b = pending[0]!
        const k = b.copy(chunk, off, 0, Math.min(b.length, n - off))
        off += k
        if (k === b.length) pending.shift()
        else pending[0] = b.subarray(k)
      }
    }
    pendingBytes -= n
    while (writes.length >= (opened ? APPEND_WINDOW : 1)) await writes.shift()
    if (failed) throw failed
    signal.throwIfAborted()
    const start = at
    at += chunk.length
    const w = ctx.store.writePartialBlob(layer.digest, start, chunk).finally(() => {
      if (pooled) appendPieces.release(chunk)
    }).then(
      () => {
        landed.set(start, start + chunk.length)
        for (let end = landed.get(reach.at); end !== undefined; end = landed.get(reach.at)) {
          landed.delete(reach.at)
          reach.at = end
        }
        ctx.stats.bytesReceived += chunk.length
        tick(chunk.length)
        ctx.opts.onReceive?.({ digest: layer.digest, bytes: chunk.length })
      },
      (e: unknown) => {
        failed ??= e
      },
    )
    writes.push(w)
    if (!opened) {
      await w
      opened = true
      if (failed) throw failed
    }
  }
  let seen = offset
  try {
    for await (const raw of body as AsyncIterable<Uint8Array>) {
      let c = Buffer.from(raw.buffer, raw.byteOffset, raw.length)
      if (skip > 0) {
        const k = Math.min(skip, c.length)
        skip -= k
        c = c.subarray(k)
        if (c.length === 0) continue
      }
      seen += c.length
      if (seen > layer.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `${formatS3(ctx.bucket, key)} has more than the ${layer.size} bytes the manifest says`)
      // each chunk is its own allocation (node:http), kept without a copy
      pending.push(c)
      pendingBytes += c.length
      while (pendingBytes >= APPEND_STEP) await flush(APPEND_STEP)
      signal.throwIfAborted()
    }
    await flush()
  } finally {
    // whatever was written stays for the next attempt
    await Promise.all(writes)
    if (!body.destroyed) body.destroy()
  }
  if (failed) throw failed
}
