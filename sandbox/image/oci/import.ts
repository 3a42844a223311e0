// The import pipeline: an OCI image (from an archive, a layout, a registry,
// S3) or a rootfs (tarball or directory) → EROFS layers in the store → a
// manifest → the tag.
//
// Per OCI layer: the raw blob is streamed once, hashed against its digest
// and size, decompressed, hashed against its diff_id and written into an
// EROFS file by tarToErofs (sandbox/image/layer: whiteouts become overlay
// whiteouts; nothing is unpacked); with --compress it is unpacked into a
// work directory and mkfs.erofs builds the layer. The layer is stored
// (staged in tmp/, verified, renamed) and its diffId recorded. A diffId the
// store already has a layer for is not read at all. Layers are built two at
// a time.
//
// An uncompressed layer goes into the store while it is built (a staging
// blob fed by tarToErofs; the local image is hashed at the end). A layer
// built by mkfs.erofs is hashed on a worker thread while it is uploaded
// (the upload hashes what it sends, the two must agree; a blob the store
// already has stops the upload). Hashing runs beside the work it checks: a
// rootfs tarball is hashed on a worker while its layer is built (a layer
// stored for that diffId stops the build and is reused).
//
// Nothing is half-published: the manifest is stored only after every layer,
// the tag only after the manifest. Everything the import stores is leased
// (a transient lease) until the tag is written, so a concurrent gc keeps
// it; on failure the layers and manifest this import created (and that no
// one else leased meanwhile) are removed again, with their diffId records.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable, Transform, Writable, finished, pipeline, type TransformCallback } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { makeDirs } from '../../../fs/common/local-dirs.js'
import { buildErofsFile, dirToErofs, layerToTar, sha256File, tarToErofs, unpackLayer, type TarToErofsOptions } from '../layer/index.js'
import { decompressStream } from '../layer/decompress.js'
import { NO_PROGRESS, formatBytes, type ProgressSink, type ProgressTask } from '../progress.js'
import { TRANSIENT_LEASE_PREFIX, type ImageStore } from '../store.js'
import {
  MANIFEST_MEDIA_TYPE,
  emptyConfig,
  encodeManifest,
  isDigest,
  parseImageRef,
  sha256Digest,
  type ImageConfig,
  type ImageManifest,
  type ImageSource,
  type LayerKind,
  type LayerRef,
} from '../types.js'
import { STDIN_INPUT, openImportInput } from './source.js'
import { refMatches, type ReadImageOptions } from './layout.js'
import { parsePlatform } from './platform.js'
import type { OciImageConfig, OciImageSource, OciLayerSource } from './types.js'

export type { OciImageConfig, OciImageSource, OciLayerSource } from './types.js'

export interface ImportOptions {
  /** tag the image as name:tag (default tag `latest`); without a name the manifest is stored untagged */
  name?: string
  tag?: string
  /** more NAME:TAGs to point at the image once `name:tag` is written (an archive's other RepoTags) */
  alsoTag?: Array<{ name: string; tag: string }>
  /** kind of every layer (default base) */
  kind?: LayerKind
  /** squash all layers into one */
  squash?: boolean
  /** where layers are unpacked and built (default os.tmpdir()); a private directory is made inside and removed */
  workDir?: string
  /** mkfs.erofs compression of file data (default none) */
  compress?: 'lz4' | 'lz4hc'
  onProgress?: ProgressSink
  /** layers built at the same time (default 2) */
  concurrency?: number
  /** cancels the import (CANCELLED, or the signal's StrataError reason); what it stored is removed as after any failure */
  signal?: AbortSignal
}

export interface ImportResult {
  digest: string
  manifest: ImageManifest
  /** layersBuilt + layersReused = manifest.layers.length (a layer the image repeats counts as reused after its first occurrence) */
  layersBuilt: number
  layersReused: number
}

const noop = (): void => undefined

function cancelled(signal: AbortSignal): StrataError {
  const r: unknown = signal.reason
  return r instanceof StrataError ? r : new StrataError('CANCELLED', 'import cancelled', r === undefined ? undefined : { cause: r })
}

function checkSignal(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw cancelled(signal)
}

/** Hashes bytes passing through and checks them at the end (and the size as they pass). */
class DigestCheck extends Transform {
  readonly #hash = crypto.createHash('sha256')
  #bytes = 0
  #digest = ''

  constructor(
    readonly expect: { digest?: string; size?: number },
    readonly what: string,
    readonly onBytes?: (n: number) => void,
    readonly signal?: AbortSignal,
    /** false: count and check the size only (the digest is computed elsewhere) */
    readonly hashing = true,
  ) {
    super()
  }

  get digest(): string {
    return this.#digest
  }

  get bytes(): number {
    return this.#bytes
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    if (this.signal?.aborted) {
      cb(cancelled(this.signal))
      return
    }
    this.#bytes += chunk.length
    if (this.expect.size !== undefined && this.#bytes > this.expect.size) {
      cb(new StrataError('IMAGE_SIZE_MISMATCH', `${this.what} is larger than the declared ${this.expect.size} bytes`))
      return
    }
    if (this.hashing) this.#hash.update(chunk)
    this.onBytes?.(chunk.length)
    cb(null, chunk)
  }

  override _flush(cb: TransformCallback): void {
    this.#digest = 'sha256:' + this.#hash.digest('hex')
    if (this.expect.size !== undefined && this.#bytes !== this.expect.size) {
      cb(new StrataError('IMAGE_SIZE_MISMATCH', `${this.what} has ${this.#bytes} bytes, declared ${this.expect.size}`))
      return
    }
    if (this.expect.digest !== undefined && this.#digest !== this.expect.digest) {
      cb(new StrataError('IMAGE_DIGEST_MISMATCH', `${this.what} hashes to ${this.#digest}, declared ${this.expect.digest}`, { detail: { expected: this.expect.digest, actual: this.#digest } }))
      return
    }
    cb()
  }
}

/** Reads a stream to its end (after a consumer stopped early) and waits for its checks. */
async function drain(s: Readable): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    finished(s, (err) => (err ? reject(err) : resolve()))
    s.resume()
  })
}

/** A Writable that only counts (layerToTar's output when only the diffId is wanted). */
function nullSink(): Writable {
  return new Writable({
    highWaterMark: 1024 * 1024,
    write(_c, _e, cb) {
      cb()
    },
  })
}

/** `a=b` strings → key order kept, later values win. */
function mergeEnv(...lists: string[][]): string[] {
  const m = new Map<string, string>()
  for (const l of lists) {
    for (const kv of l) {
      const eq = kv.indexOf('=')
      m.set(eq < 0 ? kv : kv.slice(0, eq), kv)
    }
  }
  return [...m.values()]
}

/** An OCI / Docker image config's Env, Entrypoint, Cmd, WorkingDir, User and Labels as an ImageConfig. */
export function imageConfigOf(c: OciImageConfig): ImageConfig {
  const cfg = emptyConfig()
  const x = c.config
  if (!x) return cfg
  const strings = (v: unknown, what: string): string[] => {
    if (v === undefined || v === null) return []
    if (!Array.isArray(v) || !v.every((s) => typeof s === 'string')) throw new StrataError('IMAGE_BAD_MANIFEST', `image config ${what} is not an array of strings`)
    return v as string[]
  }
  const str = (v: unknown, what: string): string => {
    if (v === undefined || v === null) return ''
    if (typeof v !== 'string') throw new StrataError('IMAGE_BAD_MANIFEST', `image config ${what} is not a string`)
    return v
  }
  cfg.env = mergeEnv(strings(x.Env, 'Env'))
  cfg.entrypoint = strings(x.Entrypoint, 'Entrypoint')
  cfg.cmd = strings(x.Cmd, 'Cmd')
  cfg.workdir = str(x.WorkingDir, 'WorkingDir')
  cfg.user = str(x.User, 'User')
  if (x.Labels !== undefined && x.Labels !== null) {
    if (typeof x.Labels !== 'object' || Array.isArray(x.Labels)) throw new StrataError('IMAGE_BAD_MANIFEST', 'image config Labels is not an object')
    for (const [k, v] of Object.entries(x.Labels)) if (typeof v === 'string') cfg.labels[k] = v
  }
  return cfg
}

function createdOf(c: OciImageConfig | null): string {
  const t = c?.created ? Date.parse(c.created) : NaN
  return Number.isFinite(t) ? new Date(t).toISOString() : new Date().toISOString()
}

function shortDigest(d: string): string {
  return d.slice('sha256:'.length, 'sha256:'.length + 12)
}

/**
 * One import run: its work directory, the leases it holds and what it
 * created, so that a failure can take back exactly that.
 */
class ImportRun {
  readonly holder = `${TRANSIENT_LEASE_PREFIX}import-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
  readonly leased = new Set<string>()
  readonly createdBlobs = new Set<string>()
  readonly recorded = new Map<string, string>()
  createdManifest: string | null = null
  workDir = ''
  layersBuilt = 0
  layersReused = 0
  readonly progress: ProgressSink

  constructor(
    readonly store: ImageStore,
    readonly opts: ImportOptions,
  ) {
    this.progress = opts.onProgress ?? NO_PROGRESS
  }

  #stopFresh: () => void = noop

  async begin(): Promise<void> {
    // an import may outlast gc's hour for a dead command's leases (a slow download, a huge layer)
    this.#stopFresh = this.store.keepFresh(this.store.leaseHolderPath(this.holder))
    const base = this.opts.workDir ?? os.tmpdir()
    await makeDirs(base)
    this.workDir = await fs.promises.mkdtemp(path.join(base, 'strata-import-'))
  }

  async lease(digest: string): Promise<void> {
    if (this.leased.has(digest)) return
    await this.store.addLease(this.holder, digest)
    this.leased.add(digest)
  }

  /**
   * Stores an EROFS file mkfs.erofs just built and records the diffId it
   * stands for. The file's digest is computed on a worker thread while the
   * file is uploaded (putBlob hashes what it uploads, and the two must
   * agree); the digest is leased as soon as it is known, before the blob is
   * renamed into place, and when the store already has that blob the upload
   * stops. The diffId may still be being computed (from the same file):
   * everything is awaited before anything is recorded.
   */
  async storeBuilt(file: string, size: number, diffIdOf: string | Promise<string>, task: ProgressTask): Promise<{ digest: string; size: number; diffId: string }> {
    const diffIdP = Promise.resolve(diffIdOf)
    diffIdP.catch(noop)
    checkSignal(this.opts.signal)
    const stop = new AbortController()
    const leased = sha256File(file).then(async (h) => {
      await this.lease(h.digest)
      return h
    })
    leased.catch(() => stop.abort())
    // the import's cancellation stops the upload too
    const outer = this.opts.signal
    const onCancel = (): void => stop.abort(outer?.reason)
    outer?.addEventListener('abort', onCancel, { once: true })
    const upload = this.store.putBlob(fs.createReadStream(file, { highWaterMark: 1024 * 1024 }), { size }, {
      signal: stop.signal,
      beforePublish: async (b) => {
        const h = await leased
        if (h.digest !== b.digest || h.size !== b.size) throw new StrataError('IMAGE_DIGEST_MISMATCH', `layer file ${file} changed while it was stored`)
      },
    })
    // the blob may be stored already (the same tree built before): then the upload is not needed
    const existing = leased.then(async (h) => {
      const st = await this.store.statBlob(h.digest)
      if (st?.size !== size) return null
      stop.abort(new StrataError('CANCELLED', 'blob already stored'))
      return h.digest
    })
    const [put, found, did] = await Promise.allSettled([upload, existing, diffIdP])
    outer?.removeEventListener('abort', onCancel)
    if (found.status === 'rejected') {
      stop.abort()
      throw found.reason
    }
    let digest: string
    let existed: boolean
    if (put.status === 'fulfilled') {
      // (stored by this upload, or found at its end)
      digest = put.value.digest
      existed = put.value.existed
      // recorded before anything below can fail, so that a failed import removes it again
      if (!existed) this.createdBlobs.add(digest)
    } else if (found.value !== null) {
      digest = found.value
      existed = true
    } else {
      throw put.reason
    }
    if (did.status === 'rejected') throw did.reason
    return this.#stored(file, { digest, size, existed }, did.value, task)
  }

  /** After a built layer is in the store: drops the local file, records its diffId, reports. */
  async #stored(file: string, b: { digest: string; size: number; existed: boolean }, diffId: string, task: ProgressTask): Promise<{ digest: string; size: number; diffId: string }> {
    if (!b.existed) this.createdBlobs.add(b.digest)
    await fs.promises.rm(file, { force: true })
    if ((await this.store.lookupDiffId(diffId, this.opts.compress)) !== b.digest) {
      await this.store.recordDiffId(diffId, b.digest, this.opts.compress)
      this.recorded.set(diffId, b.digest)
    }
    task.done(b.existed ? `layer ${shortDigest(b.digest)} already stored` : `built ${formatBytes(b.size)} layer ${shortDigest(b.digest)}`)
    return { digest: b.digest, size: b.size, diffId }
  }

  /**
   * Builds a layer straight from a tar while it is copied into the store:
   * `build` gets the options that tee tarToErofs's output into a staging blob
   * (the DFS write runs beside the build, its queue slowing the build down
   * when it falls behind). Then the local image is hashed (page cache, on a
   * worker thread) while the last pieces are written, the digest is leased
   * and the staging file renamed to the blob, and the diffId recorded (asked
   * for once the build is done: it may be computed from the built file
   * meanwhile). With `build` returning false (the layer was found by its
   * diffId meanwhile) nothing is stored.
   */
  async buildStreamed(
    file: string,
    build: (opts: TarToErofsOptions) => Promise<boolean>,
    diffIdOf: () => string | Promise<string>,
    task: ProgressTask,
  ): Promise<{ digest: string; size: number; diffId: string } | null> {
    const stage = await this.store.stageBlob()
    let diffId: Promise<string> | null = null
    try {
      if (!(await build({ onWrite: (bufs, at) => stage.push(bufs, at), ready: () => stage.ready() }))) {
        await stage.abort()
        return null
      }
      checkSignal(this.opts.signal)
      diffId = Promise.resolve(diffIdOf())
      diffId.catch(noop)
      const hashed = sha256File(file)
      hashed.catch(noop)
      await stage.drain()
      const h = await hashed
      const did = await diffId
      const existed = await stage.publish(h.digest, h.size, () => this.lease(h.digest))
      return await this.#stored(file, { ...h, existed }, did, task)
    } catch (e) {
      await stage.abort()
      // a diffId read from the built file (a mount of it) is done before the work dir goes
      await diffId?.catch(noop)
      throw e
    }
  }

  /** A stored layer for `diffId`, leased, if the store has one. */
  async reuse(diffId: string): Promise<{ digest: string; size: number } | null> {
    const d = await this.store.lookupDiffId(diffId, this.opts.compress)
    if (!d) return null
    await this.lease(d)
    const st = await this.store.statBlob(d)
    return st
  }

  async publish(layers: LayerRef[], config: ImageConfig, source: ImageSource, created: string): Promise<ImportResult> {
    checkSignal(this.opts.signal)
    const manifest: ImageManifest = { schemaVersion: 1, mediaType: MANIFEST_MEDIA_TYPE, layers, config, source, created }
    const digest = sha256Digest(encodeManifest(manifest))
    await this.lease(digest)
    const existed = await this.store.hasManifest(digest)
    await this.store.putManifest(manifest)
    if (!existed) this.createdManifest = digest
    if (this.opts.name) await this.store.setTag(this.opts.name, this.opts.tag ?? 'latest', digest)
    // tagged: what it stored is the image's now, whatever happens to the other tags
    this.createdManifest = null
    this.createdBlobs.clear()
    this.recorded.clear()
    if (this.opts.name) for (const t of this.opts.alsoTag ?? []) await this.store.setTag(t.name, t.tag, digest)
    return { digest, manifest, layersBuilt: this.layersBuilt, layersReused: this.layersReused }
  }

  /** Ends the run: leases dropped, work dir removed; after a failure, what it created is removed too. */
  async end(failed: boolean): Promise<void> {
    this.#stopFresh()
    for (const d of this.leased) await this.store.removeLease(this.holder, d).catch(noop)
    if (failed) {
      // what another command reaches by now (it found a layer stored, or tagged the manifest) stays:
      // discard decides on the tags and leases read after it took the objects aside
      const gone = await this.store.discard({ manifests: this.createdManifest ? [this.createdManifest] : [], blobs: [...this.createdBlobs] }).catch(() => ({ manifests: [], blobs: [] }))
      const goneBlobs = new Set(gone.blobs)
      for (const [diffId, d] of this.recorded) if (goneBlobs.has(d)) await this.store.fs.unlink(this.store.diffIdPath(diffId, this.opts.compress)).catch(noop)
    }
    if (this.workDir) await fs.promises.rm(this.workDir, { recursive: true, force: true }).catch(noop)
  }
}

/**
 * The uncompressed tar of an OCI layer as a stream that fails with
 * IMAGE_SIZE_MISMATCH / IMAGE_DIGEST_MISMATCH when the blob or the tar does
 * not match the digest, size and diff_id declared for it.
 */
async function verifiedLayerTar(layer: OciLayerSource, diffId: string, label: string, onBytes?: (n: number) => void, signal?: AbortSignal): Promise<Readable> {
  checkSignal(signal)
  const raw = await layer.open()
  const rawCheck = new DigestCheck({ digest: layer.digest, size: layer.size }, `${label} blob`, onBytes, signal)
  const rawV = pipeline(raw, rawCheck, noop) as unknown as Readable
  const plain = await decompressStream(rawV, layer.mediaType)
  return pipeline(plain, new DigestCheck({ digest: diffId }, `${label} (uncompressed, diff_id)`), noop) as unknown as Readable
}

/**
 * After unpacking failed, tells whether the blob itself was bad: a tampered or
 * truncated blob usually breaks decompression or the tar before its digest is
 * known, and the digest is the better reason to report.
 */
async function blobMismatch(layer: OciLayerSource, label: string): Promise<StrataError | null> {
  try {
    const check = new DigestCheck({ digest: layer.digest, size: layer.size }, `${label} blob`)
    await drain(pipeline(await layer.open(), check, noop) as unknown as Readable)
    return null
  } catch (e) {
    return e instanceof StrataError && (e.code === 'IMAGE_DIGEST_MISMATCH' || e.code === 'IMAGE_SIZE_MISMATCH') ? e : null
  }
}

/**
 * Unpacks one verified OCI layer into `dir`. `forMkfs`: mkfs.erofs builds the
 * tree, so times before 1970 become 1970 and sparse files' holes stay under
 * the hole cap (mkfs.erofs 1.5 reads them as zeros; its chunk-based files,
 * which would keep them, are never compressed). Otherwise dirToErofs builds
 * it, which keeps holes and bounds what they cost.
 */
async function unpackVerified(layer: OciLayerSource, diffId: string, dir: string, mode: 'layer' | 'apply', forMkfs: boolean, label: string, task: ProgressTask, signal?: AbortSignal): Promise<void> {
  const opts = forMkfs ? { mode } : { mode, keepTimesBefore1970: true, holeCap: Infinity }
  await consumeVerified(layer, diffId, (tar) => unpackLayer(tar, dir, opts), label, task, signal)
}

/** Hands the verified tar of one OCI layer to `consume` (an unpack or an EROFS build). */
async function consumeVerified(
  layer: OciLayerSource,
  diffId: string,
  consume: (tar: Readable) => Promise<unknown>,
  label: string,
  task: ProgressTask,
  signal?: AbortSignal,
): Promise<void> {
  let tar: Readable | null = null
  try {
    tar = await verifiedLayerTar(layer, diffId, label, (n) => task.tick(n), signal)
    await consume(tar)
    await drain(tar)
  } catch (e) {
    tar?.destroy()
    if (e instanceof StrataError && (e.code === 'IMAGE_DIGEST_MISMATCH' || e.code === 'IMAGE_SIZE_MISMATCH' || e.code === 'CANCELLED')) throw e
    checkSignal(signal)
    throw (await blobMismatch(layer, label)) ?? inLayer(e, label)
  }
}

/**
 * A malformed layer tar whose blob matches its digest (the image was made
 * broken, e.g. a tar cut short before its end blocks): the tar reader's
 * message names no layer ("tar: Unexpected end of data"), so it gets the
 * layer's label, as other import errors name their file.
 */
function inLayer(e: unknown, label: string): unknown {
  if (!(e instanceof StrataError) || e.code !== 'IMAGE_BAD_ARCHIVE' || e.reason.includes(label)) return e
  return new StrataError(e.code, `${label}: ${e.reason}`, { cause: e })
}

/** Runs `fn` over `items` with at most `limit` at a time, keeping result order. */
async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length)
  let next = 0
  let failed: unknown = null
  const worker = async () => {
    while (failed === null && next < items.length) {
      const i = next++
      try {
        out[i] = await fn(items[i]!, i)
      } catch (e) {
        failed ??= e
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker))
  if (failed !== null) throw failed
  return out
}

/**
 * Imports an OCI image (see the file comment). Returns the manifest digest
 * and how many layers were built and reused. With `name` the tag is set last.
 */
export async function importOciImage(store: ImageStore, src: OciImageSource, opts: ImportOptions = {}): Promise<ImportResult> {
  const run = new ImportRun(store, opts)
  let failed = true
  try {
    await run.begin()
    const result = await importInto(run, src)
    failed = false
    return result
  } finally {
    await run.end(failed)
  }
}

async function importInto(run: ImportRun, src: OciImageSource): Promise<ImportResult> {
  const { store, opts } = run
  const kind = opts.kind ?? 'base'
  const diffIds = src.config.rootfs?.diff_ids ?? []
  if (src.layers.length === 0) throw new StrataError('IMAGE_BAD_MANIFEST', 'the image has no layers')
  const layerDiffId = (l: OciLayerSource, i: number): string => {
    const d = l.diffId ?? diffIds[i]
    if (!d) throw new StrataError('IMAGE_BAD_MANIFEST', `layer ${i + 1} has no diff_id in the image config`)
    if (l.diffId && diffIds[i] && l.diffId !== diffIds[i]) throw new StrataError('IMAGE_BAD_MANIFEST', `layer ${i + 1}: diff_id ${l.diffId} differs from the config's ${diffIds[i]}`)
    return d
  }
  const n = src.layers.length
  const config = imageConfigOf(src.config)
  const created = createdOf(src.config)
  await store.open()

  if (opts.squash) {
    const dir = path.join(run.workDir, 'squash')
    await fs.promises.mkdir(dir)
    for (const [i, l] of src.layers.entries()) {
      const label = `layer ${i + 1}/${n} ${shortDigest(l.digest)}`
      const task = run.progress.start(`apply ${label}`, l.size)
      try {
        // (uncompressed, the squashed tree is built by dirToErofs, which keeps times before 1970)
        await unpackVerified(l, layerDiffId(l, i), dir, 'apply', Boolean(opts.compress), label, task, opts.signal)
      } finally {
        task.done()
      }
    }
    const ref = await buildFromDir(run, dir, 'squashed layer', true)
    return run.publish([{ ...ref, kind }], config, src.source, created)
  }

  // one build per distinct diffId (images may repeat a layer, e.g. empty ones)
  const builds = new Map<string, Promise<{ digest: string; size: number }>>()
  const refs = await mapLimit(src.layers, opts.concurrency ?? 2, async (l, i) => {
    const diffId = layerDiffId(l, i)
    let p = builds.get(diffId)
    if (!p) {
      p = buildOciLayer(run, l, diffId, `layer ${i + 1}/${n} ${shortDigest(l.digest)}`, i)
      builds.set(diffId, p)
    } else run.layersReused++ // a repeat reuses its first occurrence's layer: built + reused = layers
    const built = await p
    return { digest: built.digest, size: built.size, kind, diffId } satisfies LayerRef
  })
  return run.publish(refs, config, src.source, created)
}

/**
 * Runs `work` (storing a built layer: network and DFS) while the tree it was
 * built from is removed (local disk metadata), instead of one after the
 * other. A tree that cannot be removed goes with the import's work directory.
 */
async function whileRemoving<T>(dir: string, work: () => Promise<T>): Promise<T> {
  const removed = fs.promises.rm(dir, { recursive: true, force: true }).catch(noop)
  try {
    return await work()
  } finally {
    await removed
  }
}

async function buildOciLayer(run: ImportRun, l: OciLayerSource, diffId: string, label: string, i: number): Promise<{ digest: string; size: number }> {
  const reused = await run.reuse(diffId)
  if (reused) {
    run.layersReused++
    const t = run.progress.start(label)
    t.done(`reused ${shortDigest(reused.digest)}`)
    return reused
  }
  const task = run.progress.start(label, l.size)
  try {
    const dir = path.join(run.workDir, `layer-${i}`)
    const file = `${dir}.erofs`
    if (!run.opts.compress) {
      // uncompressed: the EROFS file is written straight from the tar, and into the store as it is built
      const stored = await run.buildStreamed(
        file,
        async (o) => {
          await consumeVerified(l, diffId, (tar) => tarToErofs(tar, file, o), label, task, run.opts.signal)
          return true
        },
        () => diffId,
        task,
      )
      run.layersBuilt++
      return { digest: stored!.digest, size: stored!.size }
    }
    await fs.promises.mkdir(dir)
    await unpackVerified(l, diffId, dir, 'layer', true, label, task, run.opts.signal)
    const { size } = await buildErofsFile(dir, file, { compress: run.opts.compress })
    checkSignal(run.opts.signal)
    const stored = await whileRemoving(dir, () => run.storeBuilt(file, size, diffId, task))
    run.layersBuilt++
    return { digest: stored.digest, size }
  } finally {
    task.done()
  }
}

/**
 * Builds a layer straight from a directory tree; its diffId is the digest of
 * the tar layerToTar makes of the built layer. `own`: the directory is ours
 * and is removed after the build. Uncompressed, the tree is walked into the
 * one-pass builder a layer tar goes through (dirToErofs), and the layer goes
 * into the store as it is built; with --compress mkfs.erofs builds it.
 */
async function buildFromDir(run: ImportRun, dir: string, label: string, own: boolean): Promise<{ digest: string; size: number; diffId: string }> {
  const task = run.progress.start(`build ${label}`)
  try {
    const file = path.join(run.workDir, `${path.basename(dir)}-${crypto.randomBytes(4).toString('hex')}.erofs`)
    if (!run.opts.compress) {
      let removed: Promise<void> = Promise.resolve()
      const stored = await run.buildStreamed(
        file,
        async (o) => {
          // (a tree that holds the work dir, e.g. /tmp, must not take in the layer being written there)
          await dirToErofs(dir, file, { ...o, ...(run.opts.signal ? { signal: run.opts.signal } : {}), onBytes: (n) => task.tick(n), skip: [run.workDir] })
          if (own) removed = fs.promises.rm(dir, { recursive: true, force: true }).catch(noop)
          return true
        },
        () => layerToTar(file, nullSink(), { tmpDir: run.workDir }).then((r) => r.diffId),
        task,
      )
      await removed
      run.layersBuilt++
      return stored!
    }
    const { size } = await buildErofsFile(dir, file, run.opts.compress ? { compress: run.opts.compress } : {})
    // the diffId (layerToTar of the built file) is computed while the file is hashed and uploaded
    const store = () => {
      checkSignal(run.opts.signal)
      return run.storeBuilt(file, size, layerToTar(file, nullSink(), { tmpDir: run.workDir, signal: run.opts.signal }).then((r) => r.diffId), task)
    }
    const stored = own ? await whileRemoving(dir, store) : await store()
    run.layersBuilt++
    return stored
  } finally {
    task.done()
  }
}

/**
 * Hands a rootfs tarball to `consume` (an EROFS build or an unpack) while its
 * sha256 (the layer's diffId) is computed on a worker thread. As soon as the
 * digest is known, a layer the store already has for it is leased and the
 * stream is stopped (`reused`). Otherwise the file must be unchanged (same
 * inode, size, mtime and ctime before and after both reads):
 * IMAGE_DIGEST_MISMATCH if not.
 */
async function consumeWhileHashing(
  run: ImportRun,
  file: string,
  size: number,
  consume: (tar: Readable) => Promise<unknown>,
  task: ProgressTask,
): Promise<{ diffId: string; reused: { digest: string; size: number } | null }> {
  // the digest comes from the worker's pass alone; that both passes read the same bytes is checked
  // by the file's identity and change times (a second sha256 on this thread cost a core-second per 350 MB)
  const before = await fs.promises.stat(file, { bigint: true })
  const check = new DigestCheck({ size }, 'rootfs tarball', (b) => task.tick(b), run.opts.signal, false)
  const tar = pipeline(fs.createReadStream(file, { highWaterMark: 1024 * 1024 }), check, noop) as unknown as Readable
  let reused: { digest: string; size: number } | null = null
  const lookup = sha256File(file).then(async (h) => {
    reused = await run.reuse(h.digest)
    if (reused) tar.destroy()
    return h
  })
  lookup.catch(noop)
  let failure: { e: unknown } | null = null
  try {
    await consume(tar)
    await drain(tar)
  } catch (e) {
    tar.destroy()
    failure = { e }
  }
  // settle the lookup (it may lease a layer) before anything is reported
  let h: { digest: string; size: number }
  try {
    h = await lookup
  } catch (e) {
    throw failure ? failure.e : e
  }
  if (reused) return { diffId: h.digest, reused }
  if (failure) throw failure.e
  const after = await fs.promises.stat(file, { bigint: true })
  const same = (k: 'dev' | 'ino' | 'size' | 'mtimeNs' | 'ctimeNs') => before[k] === after[k]
  if (check.bytes !== h.size || !same('dev') || !same('ino') || !same('size') || !same('mtimeNs') || !same('ctimeNs')) {
    throw new StrataError('IMAGE_DIGEST_MISMATCH', `${file} changed while it was imported (${check.bytes} bytes read, ${h.size} hashed)`)
  }
  return { diffId: h.digest, reused: null }
}

/**
 * Imports a rootfs tarball (an uncompressed tar file; `importPath`
 * decompresses others first) as one layer. Its diffId is the tar's sha256,
 * so importing the same tarball again reuses the layer: the unpack that
 * starts while the tarball is hashed is stopped once the digest is known.
 */
export async function importRootfsTar(
  store: ImageStore,
  file: string,
  source: ImageSource,
  opts: ImportOptions = {},
  /** awaited before the manifest is published; a throw fails the import, which removes what it stored */
  beforePublish?: () => Promise<void>,
): Promise<ImportResult> {
  const run = new ImportRun(store, opts)
  let failed = true
  try {
    await run.begin()
    await store.open()
    const kind = opts.kind ?? 'base'
    const { size } = await fs.promises.stat(file)
    const task = run.progress.start('rootfs', size)
    let ref: { digest: string; size: number }
    let diffId: string
    try {
      const dir = path.join(run.workDir, 'rootfs')
      const out = `${dir}.erofs`
      // uncompressed layers are built straight from the tar; mkfs.erofs (from an unpacked tree) compresses
      const direct = !opts.compress
      let r: { diffId: string; reused: { digest: string; size: number } | null } | null = null
      let built: { digest: string; size: number } | null = null
      if (direct) {
        // built and stored in one pass; stopped when the tarball's digest names a stored layer
        built = await run.buildStreamed(
          out,
          async (o) => {
            r = await consumeWhileHashing(run, file, size, (tar) => tarToErofs(tar, out, o), task)
            return r.reused === null
          },
          () => r!.diffId,
          task,
        )
      } else {
        await fs.promises.mkdir(dir)
        r = await consumeWhileHashing(run, file, size, (tar) => unpackLayer(tar, dir, { mode: 'layer' }), task)
      }
      const res = r!
      diffId = res.diffId
      if (res.reused) {
        run.layersReused++
        task.done(`reused ${shortDigest(res.reused.digest)}`)
        ref = res.reused
        await fs.promises.rm(direct ? out : dir, { recursive: true, force: true })
      } else if (built) {
        ref = built
        run.layersBuilt++
      } else {
        const built = await buildErofsFile(dir, out, { compress: opts.compress! })
        checkSignal(opts.signal)
        ref = await whileRemoving(dir, () => run.storeBuilt(out, built.size, diffId, task))
        run.layersBuilt++
      }
    } finally {
      task.done()
    }
    await beforePublish?.()
    const result = await run.publish([{ digest: ref.digest, size: ref.size, kind, diffId }], emptyConfig(), source, new Date().toISOString())
    failed = false
    return result
  } finally {
    await run.end(failed)
  }
}

/** Imports a rootfs directory as one layer, built by mkfs.erofs from the directory itself (no copy). */
export async function importRootfsDir(store: ImageStore, dir: string, source: ImageSource, opts: ImportOptions = {}): Promise<ImportResult> {
  const run = new ImportRun(store, opts)
  let failed = true
  try {
    await run.begin()
    await store.open()
    const ref = await buildFromDir(run, dir, 'rootfs', false)
    const result = await run.publish([{ ...ref, kind: opts.kind ?? 'base' }], emptyConfig(), source, new Date().toISOString())
    failed = false
    return result
  } finally {
    await run.end(failed)
  }
}

export interface ImportPathOptions extends ImportOptions {
  /** platform os/arch[/variant] to pick from an index (default linux/amd64) */
  platform?: string
  /** which image of a multi-image archive */
  ref?: string
  /** fail (IMAGE_INVALID_REFERENCE) before importing anything when there is no name to tag the image with */
  requireName?: boolean
  /** what an `input` of `-` reads (default process.stdin); it is spooled into the work dir first */
  stdin?: Readable
}

export interface ImportPathResult extends ImportResult {
  name?: string
  tag?: string
  /** every NAME:TAG written (`name:tag` first; more when the archive gives the image several names) */
  tags?: string[]
  sourceType: ImageSource['type']
}

/**
 * Imports whatever `input` is (see oci/source.ts): a `docker save` tarball,
 * an OCI archive or layout, a rootfs tarball or directory, or any of the
 * tar forms on standard input for `-` (read into the scratch directory in
 * the work dir first, removed at the end whatever happens). Without
 * `opts.name` an image archive's own name (RepoTags, ref.name) is used.
 * `opts.ref` and `opts.platform` with a rootfs input are INVALID_ARGUMENT
 * (detail.usage: a mistake in the call), before anything is stored.
 */
export async function importPath(store: ImageStore, input: string, opts: ImportPathOptions = {}): Promise<ImportPathResult> {
  const shown = input === STDIN_INPUT ? 'standard input' : input
  const base = opts.workDir ?? os.tmpdir()
  await makeDirs(base)
  const scratch = await fs.promises.mkdtemp(path.join(base, 'strata-input-'))
  try {
    const readOpts: ReadImageOptions = {}
    if (opts.platform) readOpts.platform = parsePlatform(opts.platform)
    if (opts.ref) readOpts.ref = opts.ref
    // with a name to tag it by, a tar that does not begin like an image archive is imported as a
    // rootfs tarball while its headers are indexed (without one, an archive's own name may be needed;
    // with --ref or --platform, whether they apply must be known before anything is stored)
    const speculate = Boolean(opts.name) && !opts.ref && !opts.platform
    const inp = await openImportInput(input, scratch, {
      ...readOpts,
      speculate,
      ...(opts.signal ? { signal: opts.signal } : {}),
      ...(opts.stdin ? { stdin: opts.stdin } : {}),
      ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
    })
    checkSignal(opts.signal)
    if (inp.kind !== 'image' && (opts.ref || opts.platform)) {
      const given = [...(opts.ref ? ['--ref'] : []), ...(opts.platform ? ['--platform'] : [])]
      throw new StrataError(
        'INVALID_ARGUMENT',
        `${given.join(' and ')} choose${given.length === 1 ? 's' : ''} an image in a docker-save or OCI archive or an OCI layout; ${shown} is a rootfs ${inp.kind === 'rootfs-dir' ? 'directory' : 'tarball'}, which holds one tree and no platform`,
        { detail: { usage: true, options: given } },
      )
    }
    let name = opts.name
    let tag = opts.tag
    let alsoTag: Array<{ name: string; tag: string }> = []
    if (!name && inp.kind === 'image') {
      // the archive's names for the image: every one (as podman load applies every RepoTag), or the
      // one --ref NAME chose; a --ref that matched only a bare tag leaves all of them to choose from
      const refs = inp.image.refNames ?? []
      const chosen = opts.ref && !isDigest(opts.ref) ? usableNames(refs.filter((r) => refMatches(r, opts.ref!))).slice(0, 1) : []
      const names = chosen.length ? chosen : usableNames(refs)
      if (names.length) {
        name = names[0]!.name
        tag = names[0]!.tag
        alsoTag = names.slice(1)
      }
    }
    if (!name && opts.requireName) {
      throw new StrataError('IMAGE_INVALID_REFERENCE', `${shown} gives the image no name: use --name NAME[:TAG]`)
    }
    const o: ImportOptions = { ...opts, ...(name ? { name } : {}), ...(tag ? { tag } : {}), ...(alsoTag.length ? { alsoTag } : {}) }
    let r: ImportResult
    if (inp.kind === 'image') r = await importOciImage(store, inp.image, o)
    else if (inp.kind === 'rootfs-tar' && inp.archive) r = await importTarSpeculatively(store, inp.file, inp.ref, inp.archive, o)
    else if (inp.kind === 'rootfs-tar') r = await importRootfsTar(store, inp.file, { type: 'rootfs', ref: inp.ref }, o)
    else r = await importRootfsDir(store, inp.dir, { type: 'rootfs', ref: inp.ref }, o)
    const tags = name ? [`${name}:${tag ?? 'latest'}`, ...alsoTag.map((x) => `${x.name}:${x.tag}`)] : []
    return { ...r, ...(name ? { name, tag: tag ?? 'latest', tags } : {}), sourceType: r.manifest.source.type }
  } finally {
    await fs.promises.rm(scratch, { recursive: true, force: true }).catch(noop)
  }
}

/**
 * The NAME:TAGs among an archive's names for an image (RepoTags, ref.name), in
 * order and once each; `docker.io/library/` and `docker.io/` are dropped, and
 * bare tags (an OCI layout's ref.name often is one) and invalid names skipped.
 */
function usableNames(refs: string[]): Array<{ name: string; tag: string }> {
  const out: Array<{ name: string; tag: string }> = []
  for (const r of refs) {
    if (r.lastIndexOf(':') <= r.lastIndexOf('/')) continue
    try {
      const p = parseImageRef(r.replace(/^docker\.io\/library\//, '').replace(/^docker\.io\//, ''))
      if (p.tag && !p.digest && !out.some((x) => x.name === p.name && x.tag === p.tag)) out.push({ name: p.name, tag: p.tag })
    } catch {
      // not a usable name: try the next
    }
  }
  return out
}

/** The reason a speculative rootfs import is stopped with: the tar is an image archive. */
const IS_ARCHIVE = new StrataError('CANCELLED', 'the tar is an image archive')

/**
 * Imports `file` as a rootfs tarball while `archive` (its index, built on a
 * worker) decides what it is, with the outcome of the index-first order:
 * the index's own failure wins over the import's, and an image archive is
 * imported as one (the rootfs import is stopped, and what it stored removed,
 * as soon as the index shows it), never published as a rootfs.
 */
async function importTarSpeculatively(
  store: ImageStore,
  file: string,
  ref: string,
  archive: Promise<{ kind: 'image'; image: OciImageSource } | null>,
  opts: ImportOptions,
): Promise<ImportResult> {
  const stop = new AbortController()
  const outer = opts.signal
  const onOuter = () => stop.abort(outer!.reason)
  if (outer?.aborted) onOuter()
  outer?.addEventListener('abort', onOuter, { once: true })
  archive.then(
    (img) => img && stop.abort(IS_ARCHIVE),
    (e: unknown) => stop.abort(e),
  )
  try {
    return await importRootfsTar(store, file, { type: 'rootfs', ref }, { ...opts, signal: stop.signal }, async () => {
      if (await archive) throw IS_ARCHIVE
    })
  } catch (e) {
    if (outer?.aborted) throw e
    const img = await archive
    if (!img) throw e
    return importOciImage(store, img.image, opts)
  } finally {
    outer?.removeEventListener('abort', onOuter)
  }
}
