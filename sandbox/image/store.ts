// The content-addressed image store in the DFS (docs/images.md, "Where it
// lives in the DFS"). Every object is written to tmp/ under a random name,
// hashed while it is written, verified, and only then renamed into place, so
// a name under blobs/, manifests/, diffids/ or tags/ always holds complete,
// verified bytes. Publishing order is data first, pointer last: layers, then
// the manifest (refused while a layer is missing), then the tag.
//
// gc: a manifest no tag references is collected (like `podman image prune`:
// `image rm` untags, `image gc` frees), then every layer no remaining
// manifest references, except layers and manifests named by a lease. An
// import leases what it stores until its tag is written, so a concurrent gc
// does not collect it half-way.
//
// Removal is reversible until it is decided on the state after it: what gc
// (or a failed command's clean-up, discard) means to remove is first renamed
// into a directory of its own, tmp/gc-<id>/, then tags and leases are read
// again and whatever they now reach is linked back; only the rest is
// unlinked. Whoever makes something reachable does the opposite: lease (or
// tag) first, then check that what it references is present, and a check
// that misses links it back from any tmp/gc-* directory. Either the remover
// sees the lease, or the checker sees the object gone.
import crypto from 'node:crypto'
import fs from 'node:fs'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { BufferPool } from '../../fs/common/buffer-pool.js'
import { StrataError } from '../../fs/common/errors.js'
import type { FileHandle, FileSystem } from '../../fs/client/index.js'
import { sha256File } from './layer/hash.js'
import {
  IMAGE_ROOT,
  assertDigest,
  digestHex,
  encodeManifest,
  isDigest,
  isValidName,
  isValidTag,
  parseImageRef,
  sha256Digest,
  validateManifest,
  type ImageManifest,
  type ImageRef,
} from './types.js'

/** Bytes per DFS write or read call when streaming blobs. */
const IO_STEP = 8 * 1024 * 1024
/** Reads kept in flight by readBlob. */
const READ_AHEAD = 3
/** Writes kept in flight by putBlob (each IO_STEP bytes). */
const WRITE_WINDOW = 4
/** gc removes staging files older than this (partial pulls: PARTIAL_MAX_AGE_MS). */
const TMP_MAX_AGE_MS = 60 * 60 * 1000
const PARTIAL_MAX_AGE_MS = 24 * 60 * 60 * 1000
/** Leases whose holder starts with this prefix belong to one command (an import); gc drops them after TMP_MAX_AGE_MS. */
export const TRANSIENT_LEASE_PREFIX = 'transient-'

const HOLDER_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/
const HEX_RE = /^[0-9a-f]{64}$/

export interface ImageStoreInit {
  /** DFS directory of the store (default IMAGE_ROOT, /strata/images) */
  root?: string
  /** how often a running command marks its transient leases and staging files as in use (default REFRESH_MS; tests shorten it) */
  refreshMs?: number
}

/**
 * gc takes a transient lease holder or a staging file untouched for
 * TMP_MAX_AGE_MS as a dead command's; a running command touches them this
 * often (a DFS file's mtime does not move while a client writes it, only
 * when it syncs, and a holder's directory only when a lease is added).
 */
export const REFRESH_MS = 10 * 60 * 1000

export interface BlobExpectation {
  digest?: string
  size?: number
}

export interface PutBlobOptions {
  /** called with the bytes of each piece as it is stored */
  onProgress?: (bytes: number) => void
  /** stops the copy (the staging file is removed) with the signal's reason, or CANCELLED */
  signal?: AbortSignal
  /**
   * called with the verified digest and size just before the staging file is
   * renamed to the blob (e.g. to lease it first); an error stops the put and
   * removes the staging file
   */
  beforePublish?: (blob: StoredBlob) => Promise<void>
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return
  const r: unknown = signal.reason
  throw r instanceof StrataError ? r : new StrataError('CANCELLED', 'cancelled', r === undefined ? undefined : { cause: r })
}

export interface StoredBlob {
  digest: string
  size: number
}

/** An open partial blob file. */
interface PartialBlob {
  fh: FileHandle
  /** the file's length when it was opened, or the end of the furthest write if that is further */
  length: number
  /**
   * Running sha256 of the bytes written, while this process wrote the file
   * in order from its first byte (each write where the last one ended) with
   * every write going through; null otherwise (finishPartialBlob then
   * re-reads the file).
   */
  hash: crypto.Hash | null
  /** where the last write ended: the next one keeps `hash` only if it starts here */
  next: number
}

export interface GcOptions {
  /** report what would be removed, remove nothing */
  dryRun?: boolean
  /** manifests to keep even when no tag references them */
  keep?: string[]
  /**
   * Tests only: awaited at 'listed' (blobs and manifests listed, tags and
   * leases not yet read), 'decided' (what to remove is known, nothing moved
   * yet) and 'aside' (it is in tmp/gc-<id>/, not yet checked again).
   */
  pause?: (at: 'listed' | 'decided' | 'aside') => Promise<void>
}

export interface GcResult {
  removedBlobs: string[]
  removedManifests: string[]
  /** unreferenced layers kept because a lease names them */
  keptLeased: string[]
  freedBytes: number
}

export interface TagRecord {
  name: string
  tag: string
  digest: string
}

/** Times setTag (addLease) makes a name's tags/ (a holder's leases/) directory again when a concurrent removeTag (removeLease) dropped it. */
const TAG_DIR_ATTEMPTS = 10
/** Directories under tmp/ holding what a gc or discard is about to remove (tmp/gc-<id>/blob-<hex>, manifest-<hex>). */
const ASIDE_PREFIX = 'gc-'
type Removable = 'blob' | 'manifest'

/** The longest file name the DFS takes (its NAME_MAX), in bytes. */
const DFS_NAME_MAX = 255
/** Prefix of a tag directory named by the sha256 of its image name ('@' never appears in a name). */
const HASHED_TAG_DIR_PREFIX = '@'

/**
 * The directory under tags/ that holds an image name's tags: one directory
 * level per name, `a/b` → `a%2Fb`. A name whose encoding is longer than a
 * DFS file name may be (a valid name has up to 255 characters, each `/`
 * becoming three) is `@<sha256 hex of the name>` instead, and its tag files
 * then also hold the name (see tagFileBody), as the directory name cannot be
 * turned back into it. Every name that fitted before keeps the directory it
 * always had, so stores written before hashed directories existed read the same.
 */
export function encodeTagDir(name: string): string {
  const plain = name.replaceAll('/', '%2F')
  if (Buffer.byteLength(plain, 'utf8') <= DFS_NAME_MAX) return plain
  return HASHED_TAG_DIR_PREFIX + crypto.createHash('sha256').update(name).digest('hex')
}

/** The name a plain tag directory stands for, or null for a hashed one (its tag files name it). */
export function decodeTagDir(dir: string): string | null {
  if (dir.startsWith(HASHED_TAG_DIR_PREFIX)) return null
  return dir.replaceAll('%2F', '/')
}

function isHashedTagDir(dir: string): boolean {
  return dir.startsWith(HASHED_TAG_DIR_PREFIX)
}

/** A tag file's bytes: the digest, and under a hashed directory a second line with the image name. */
function tagFileBody(name: string, digest: string): string {
  return isHashedTagDir(encodeTagDir(name)) ? `${digest}\n${name}\n` : `${digest}\n`
}

function isMetaCode(e: unknown, ...codes: string[]): boolean {
  return e instanceof StrataError && codes.includes(e.code)
}

/**
 * The image store. Methods throw StrataError with IMAGE_* codes for image
 * problems and the DFS client's codes (META_*, RPC_*) for transport problems.
 */
/** How a layer was built from its tar, beyond the default (uncompressed EROFS): the `--compress` algorithm. */
export type LayerVariant = 'lz4' | 'lz4hc'

export class ImageStore {
  readonly fs: FileSystem
  readonly root: string
  /** Open partial blob files (the promise of the open, so that concurrent first writes share one). */
  readonly #partials = new Map<string, Promise<PartialBlob>>()
  /** Digests whose partial file saw a failed write in this process: finishPartialBlob re-reads them. */
  readonly #tornPartials = new Set<string>()
  #opened: Promise<void> | null = null
  #closed = false

  readonly refreshMs: number

  constructor(fsys: FileSystem, opts: ImageStoreInit = {}) {
    this.fs = fsys
    this.root = (opts.root ?? IMAGE_ROOT).replace(/\/+$/, '') || '/'
    this.refreshMs = opts.refreshMs ?? REFRESH_MS
  }

  /**
   * Sets `path`'s mtime to now every refreshMs until the returned function is
   * called: a running command's staging file or lease holder directory
   * (leasesPathOf) is then never old enough for gc to take it as a dead one's.
   */
  keepFresh(path: string): () => void {
    let timer: NodeJS.Timeout | null = null
    let stopped = false
    // the next touch is timed from the end of the last one, so slow ones never pile up
    const schedule = (): void => {
      if (stopped) return
      timer = setTimeout(() => {
        void this.fs
          .utimes(path, 'now', 'now')
          .catch(() => undefined)
          .finally(schedule)
      }, this.refreshMs)
      timer.unref()
    }
    schedule()
    return () => {
      stopped = true
      if (timer) clearTimeout(timer)
    }
  }

  /** The directory of `holder`'s leases. */
  leaseHolderPath(holder: string): string {
    return `${this.root}/leases/${holder}`
  }

  // --- layout

  blobPath(digest: string): string {
    return `${this.root}/blobs/sha256/${digestHex(digest)}`
  }

  manifestPath(digest: string): string {
    return `${this.root}/manifests/sha256/${digestHex(digest)}`
  }

  tagPath(name: string, tag: string): string {
    return `${this.root}/tags/${encodeTagDir(name)}/${tag}`
  }

  /** Where the layer built from diffId's tar is recorded: one record per build variant (uncompressed, `--compress lz4`, …). */
  diffIdPath(diffId: string, variant?: LayerVariant): string {
    return `${this.root}/diffids/sha256/${digestHex(diffId)}${variant ? `.${variant}` : ''}`
  }

  leasePath(holder: string, digest: string): string {
    return `${this.root}/leases/${holder}/${digestHex(digest)}`
  }

  #dir(...parts: string[]): string {
    return [this.root, ...parts].join('/')
  }

  #tmpName(kind: string): string {
    return `${this.root}/tmp/${kind}-${Date.now().toString(36)}-${crypto.randomBytes(8).toString('hex')}`
  }

  // --- lifecycle

  /** Creates the directory skeleton (idempotent). */
  open(): Promise<void> {
    this.#opened ??= this.#open().catch((e: unknown) => {
      this.#opened = null
      throw e
    })
    return this.#opened
  }

  async #open(): Promise<void> {
    for (const d of ['blobs/sha256', 'manifests/sha256', 'tags', 'diffids/sha256', 'leases', 'tmp']) await this.#mkdirp(this.#dir(d))
  }

  async #mkdirp(path: string): Promise<void> {
    try {
      await this.fs.mkdir(path, { recursive: true, mode: 0o755 })
    } catch (e) {
      if (!isMetaCode(e, 'META_EXISTS')) throw e
    }
  }

  /** Closes open partial-blob handles. Does not shut down the FileSystem. Idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    for (const p of this.#partials.values()) await p.then((o) => this.fs.close(o.fh)).catch(() => undefined)
    this.#partials.clear()
  }

  // --- small helpers over the FileSystem

  async #statLength(path: string): Promise<number | null> {
    try {
      const st = await this.fs.lstat(path)
      return st.type === 'File' ? (st.file?.length ?? 0) : null
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return null
      throw e
    }
  }

  async #readSmall(path: string): Promise<Buffer | null> {
    try {
      return await this.fs.readFile(path)
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return null
      throw e
    }
  }

  async #unlinkQuiet(path: string): Promise<void> {
    await this.fs.unlink(path).catch(() => undefined)
  }

  /** Writes a small file to tmp/ and renames it over `path` (atomic replace). */
  async #writeAtomic(path: string, data: Buffer | string): Promise<void> {
    const tmp = this.#tmpName('put')
    try {
      await this.fs.writeFile(tmp, data)
      await this.fs.rename(tmp, path)
    } catch (e) {
      await this.#unlinkQuiet(tmp)
      throw e
    }
  }

  async #list(path: string): Promise<string[]> {
    try {
      return (await this.fs.readdirAll(path)).entries.map((e) => e.name)
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return []
      throw e
    }
  }

  // --- removal that can be taken back (see the top of the file)

  #pathOf(kind: Removable, digest: string): string {
    return kind === 'blob' ? this.blobPath(digest) : this.manifestPath(digest)
  }

  /**
   * Puts `aside` back at `dest` without replacing anything (a hard link, then
   * the aside name is dropped): a blob rebuilt meanwhile may be open or
   * mounted, and replacing it would take its chunks away from its readers.
   * False when `aside` is gone (its remover decided).
   */
  async #restore(aside: string, dest: string): Promise<boolean> {
    try {
      await this.fs.link(aside, dest)
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return false
      if (!isMetaCode(e, 'META_EXISTS')) throw e
    }
    await this.#unlinkQuiet(aside)
    return true
  }

  /** A blob or manifest found missing: links it back if a gc or discard has it aside. */
  async #resurrect(kind: Removable, digest: string): Promise<boolean> {
    const hex = digestHex(digest)
    for (const d of await this.#list(`${this.root}/tmp`)) {
      if (d.startsWith(ASIDE_PREFIX) && (await this.#restore(`${this.root}/tmp/${d}/${kind}-${hex}`, this.#pathOf(kind, digest)))) return true
    }
    return false
  }

  /**
   * Puts back everything a gc or discard killed half-way left aside, and
   * drops the emptied directories. One of a gc still running is emptied too:
   * that gc then removes less (what it finds gone it leaves), never more.
   */
  async #restoreAsides(): Promise<void> {
    for (const d of await this.#list(`${this.root}/tmp`)) {
      if (!d.startsWith(ASIDE_PREFIX)) continue
      const dir = `${this.root}/tmp/${d}`
      for (const n of await this.#list(dir)) {
        const m = /^(blob|manifest)-([0-9a-f]{64})$/.exec(n)
        if (m) await this.#restore(`${dir}/${n}`, this.#pathOf(m[1] as Removable, 'sha256:' + m[2]))
      }
      await this.fs.rmdir(dir).catch(() => undefined)
    }
  }

  /**
   * Removes the given manifests and blobs unless, once they are aside, a tag
   * or lease (or `keep`) reaches them: those are linked back. Returns what
   * was removed. A failure puts back everything still aside.
   */
  async #removeUnreferenced(manifests: string[], blobs: string[], keep: string[], pause?: (at: 'aside') => Promise<void>): Promise<{ manifests: string[]; blobs: string[] }> {
    if (manifests.length === 0 && blobs.length === 0) return { manifests: [], blobs: [] }
    const dir = `${this.root}/tmp/${ASIDE_PREFIX}${Date.now().toString(36)}-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
    await this.#mkdirp(dir)
    const aside = new Map<string, { kind: Removable; digest: string; path: string }>()
    try {
      for (const [kind, list] of [['manifest', manifests], ['blob', blobs]] as const) {
        for (const digest of list) {
          const path = `${dir}/${kind}-${digestHex(digest)}`
          try {
            await this.fs.rename(this.#pathOf(kind, digest), path)
          } catch (e) {
            if (isMetaCode(e, 'META_NOT_FOUND')) continue
            throw e
          }
          aside.set(`${kind}:${digest}`, { kind, digest, path })
        }
      }
      await pause?.('aside')
      // what is reachable now, read after everything went aside
      const leases = await this.listLeases()
      const liveManifests = new Set([...(await this.listTags()).map((t) => t.digest), ...leases.map((l) => l.digest), ...keep])
      const liveBlobs = new Set(leases.map((l) => l.digest))
      for (const d of liveManifests) {
        const a = aside.get(`manifest:${d}`)
        // (a reader may have linked it back already)
        if (a) await this.#restore(a.path, this.manifestPath(d))
        aside.delete(`manifest:${d}`)
      }
      // a layer stays while any stored manifest lists it (one stored meanwhile, untagged, too)
      for (const d of new Set([...liveManifests, ...(await this.listManifests())])) {
        try {
          for (const l of (await this.getManifest(d)).manifest.layers) liveBlobs.add(l.digest)
        } catch (e) {
          // a layer digest's lease, or an unreadable manifest: it keeps no layer alive
          if (!isMetaCode(e, 'IMAGE_DIGEST_MISMATCH', 'IMAGE_BAD_MANIFEST', 'IMAGE_NOT_FOUND')) throw e
        }
      }
      for (const d of liveBlobs) {
        const a = aside.get(`blob:${d}`)
        if (a) await this.#restore(a.path, this.blobPath(d))
        aside.delete(`blob:${d}`)
      }
      // whoever linked one back meanwhile keeps it: this drops only the aside name (and then it
      // is not reported), gone already when the reader also dropped it
      const removed: Array<{ kind: Removable; digest: string }> = []
      for (const a of aside.values()) {
        const unlinked = await this.fs.unlink(a.path).then(
          () => true,
          () => false,
        )
        if (unlinked) removed.push(a)
      }
      aside.clear()
      return { manifests: removed.filter((a) => a.kind === 'manifest').map((a) => a.digest), blobs: removed.filter((a) => a.kind === 'blob').map((a) => a.digest) }
    } finally {
      for (const a of aside.values()) await this.#restore(a.path, this.#pathOf(a.kind, a.digest)).catch(() => undefined)
      await this.fs.rmdir(dir).catch(() => undefined)
    }
  }

  /**
   * Removes manifests and blobs a failed command stored, unless a tag or
   * lease reaches them by now (another import that found them stored, a tag
   * written meanwhile): what gc would do to just these. The caller drops its
   * own leases first. Returns what was removed.
   */
  async discard(what: { manifests?: string[]; blobs?: string[] }): Promise<{ manifests: string[]; blobs: string[] }> {
    return this.#removeUnreferenced(what.manifests ?? [], what.blobs ?? [], [])
  }

  // --- blobs

  async hasBlob(digest: string): Promise<boolean> {
    return (await this.statBlob(digest)) !== null
  }

  /** The stored blob's size, or null; a blob a gc has aside is linked back first. */
  async statBlob(digest: string): Promise<StoredBlob | null> {
    let size = await this.#statLength(this.blobPath(digest))
    if (size === null && (await this.#resurrect('blob', digest))) size = await this.#statLength(this.blobPath(digest))
    return size === null ? null : { digest, size }
  }

  /**
   * Streams bytes into tmp/, hashing as it goes, checks them against
   * `expect` (IMAGE_DIGEST_MISMATCH, IMAGE_SIZE_MISMATCH; more bytes than the
   * expected size stop the copy at once) and renames the file into place.
   * When `expect.digest` is already stored (with the expected size, if
   * given) it returns at once without reading `src`.
   */
  async putBlob(src: Readable | AsyncIterable<Uint8Array>, expect: BlobExpectation = {}, opts: PutBlobOptions = {}): Promise<StoredBlob & { existed: boolean }> {
    await this.open()
    if (expect.digest !== undefined) {
      assertDigest(expect.digest, 'expected blob digest')
      const st = await this.statBlob(expect.digest)
      if (st && (expect.size === undefined || st.size === expect.size)) {
        discard(src)
        return { ...st, existed: true }
      }
    }
    const tmp = this.#tmpName('blob')
    let fh: FileHandle | null = null
    const stopFresh = this.keepFresh(tmp)
    try {
      fh = await this.fs.open(tmp, 'wx', 0o644)
      const { digest, size } = await this.#streamInto(fh, src, expect.size, opts.onProgress, opts.signal)
      await this.fs.fsync(fh)
      const h = fh
      fh = null
      await this.fs.close(h)
      checkExpect(digest, size, expect)
      await opts.beforePublish?.({ digest, size })
      return { digest, size, existed: await this.#publishBlob(tmp, digest, size) }
    } catch (e) {
      discard(src)
      if (fh) await this.fs.close(fh).catch(() => undefined)
      await this.#unlinkQuiet(tmp)
      throw e
    } finally {
      stopFresh()
    }
  }

  /**
   * Gives a verified staging file its blob name; returns whether the blob was already there.
   * A hard link, not a rename: two commands publishing the same blob at once would otherwise
   * replace the file the first one published, and a reader holding it open (a mounted layer:
   * read opens hold no write session) would lose its chunks to the GC of the replaced inode.
   */
  async #publishBlob(tmp: string, digest: string, size: number): Promise<boolean> {
    const dest = this.blobPath(digest)
    if ((await this.#statLength(dest)) === size) {
      await this.#unlinkQuiet(tmp)
      return true
    }
    try {
      await this.fs.link(tmp, dest)
    } catch (e) {
      if (!isMetaCode(e, 'META_EXISTS')) throw e
      // published meanwhile by another command: the same verified bytes, unless it is short (a broken blob, replaced)
      if ((await this.#statLength(dest)) === size) {
        await this.#unlinkQuiet(tmp)
        return true
      }
      await this.fs.rename(tmp, dest)
      return false
    }
    await this.#unlinkQuiet(tmp)
    return false
  }

  /**
   * Copies `src` into an open DFS file, hashing as it goes: pieces of
   * IO_STEP bytes, up to WRITE_WINDOW writes in flight while the next piece
   * is gathered (each write goes to its own offset; the first failure stops
   * the copy after the writes in flight have settled).
   */
  async #streamInto(fh: FileHandle, src: Readable | AsyncIterable<Uint8Array>, limit: number | undefined, onProgress?: (bytes: number) => void, signal?: AbortSignal): Promise<StoredBlob> {
    const hash = crypto.createHash('sha256')
    let size = 0
    let pending: Buffer[] = []
    let pendingBytes = 0
    const inflight = new Set<Promise<void>>()
    let failed: { e: unknown } | null = null
    let written = 0
    const flush = async () => {
      if (pendingBytes === 0) return
      const data = pending.length === 1 ? pending[0]! : Buffer.concat(pending, pendingBytes)
      pending = []
      pendingBytes = 0
      while (inflight.size >= WRITE_WINDOW && failed === null) await Promise.race(inflight)
      if (failed !== null) throw (failed as { e: unknown }).e
      const at = written
      written += data.length
      const w: Promise<void> = this.fs.write(fh, data, at).then(
        () => {
          inflight.delete(w)
          onProgress?.(data.length)
        },
        (e: unknown) => {
          inflight.delete(w)
          failed ??= { e }
        },
      )
      inflight.add(w)
    }
    try {
      throwIfAborted(signal)
      for await (const chunk of src) {
        throwIfAborted(signal)
        if (failed !== null) throw (failed as { e: unknown }).e
        const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
        if (buf.length === 0) continue
        size += buf.length
        if (limit !== undefined && size > limit) throw new StrataError('IMAGE_SIZE_MISMATCH', `blob is larger than the expected ${limit} bytes`)
        hash.update(buf)
        pending.push(buf)
        pendingBytes += buf.length
        if (pendingBytes >= IO_STEP) await flush()
      }
      await flush()
      await Promise.all(inflight)
      if (failed !== null) throw (failed as { e: unknown }).e
      throwIfAborted(signal)
    } catch (e) {
      await Promise.all(inflight)
      throw e
    }
    return { digest: 'sha256:' + hash.digest('hex'), size }
  }

  /**
   * A staging file in tmp/ written at any offsets (a blob whose bytes are
   * produced out of order, such as an EROFS layer whose superblock comes
   * last), published under a digest the caller computed: see BlobStage.
   */
  async stageBlob(): Promise<BlobStage> {
    await this.open()
    const tmp = this.#tmpName('stage')
    const fh = await this.fs.open(tmp, 'wx', 0o644)
    const stopFresh = this.keepFresh(tmp)
    return new BlobStage(
      this,
      tmp,
      fh,
      (path, digest, size) => this.#publishBlob(path, digest, size).finally(stopFresh),
      (path) => this.#unlinkQuiet(path).finally(stopFresh),
    )
  }

  /**
   * Stores a local file. Without an expected digest the file is hashed first,
   * so a blob that is already stored is not copied again.
   */
  async putBlobFile(localPath: string, expect: BlobExpectation = {}, opts: PutBlobOptions = {}): Promise<StoredBlob & { existed: boolean }> {
    if (expect.digest === undefined) {
      const local = await hashLocalFile(localPath)
      checkExpect(local.digest, local.size, expect)
      expect = local
    }
    assertDigest(expect.digest!, 'expected blob digest')
    const st = await this.statBlob(expect.digest!)
    if (st && (expect.size === undefined || st.size === expect.size)) return { ...st, existed: true }
    return this.putBlob(fs.createReadStream(localPath, { highWaterMark: 1024 * 1024 }), expect, opts)
  }

  // --- resumable staging (pulls)

  #partialPath(digest: string): string {
    return `${this.root}/tmp/partial-${digestHex(digest)}`
  }

  /**
   * Bytes staged for `digest` by earlier writePartialBlob calls (this process
   * or an earlier one): the file's length. A look, not a promise: the length
   * of a partial file whose writer was killed is eventually consistent (meta
   * sets it when it prunes the dead client's write session, from what
   * storage has, which may lie past a write that never landed), so callers
   * say where each write goes rather than asking again.
   */
  async partialBlobLength(digest: string): Promise<number> {
    const open = this.#partials.get(digest)
    if (open) return (await open).length
    return (await this.#statLength(this.#partialPath(digest))) ?? 0
  }

  /**
   * Writes `chunk` at `at` in tmp/partial-<hex> (the file is kept open until
   * finishPartialBlob or close). The first call opens the file, creating it
   * if it is missing and never emptying it: another pull of the same blob may
   * be writing it too (the same bytes at the same offsets). The
   * offset is the caller's, never the file's length: that length may change
   * between the caller's look and this call (see partialBlobLength), and
   * bytes written where the length said instead of where they belong are a
   * torn blob. Several calls may be in flight at once.
   */
  async writePartialBlob(digest: string, at: number, chunk: Uint8Array): Promise<void> {
    assertDigest(digest, 'partial blob digest')
    if (!Number.isSafeInteger(at) || at < 0) throw new StrataError('INVALID_ARGUMENT', `partial blob offset ${at} is not a non-negative integer`)
    await this.open()
    let opening = this.#partials.get(digest)
    if (!opening) {
      const path = this.#partialPath(digest)
      // never truncated: another pull of the same blob may be writing the file (the same
      // bytes at the same offsets), and emptying it under that one would leave holes in
      // what it verifies by its own hash and publishes
      opening = this.fs.open(path, { access: 'w', create: true }, 0o644).then((fh) => ({
        fh,
        length: fh.inode.file?.length ?? 0,
        // bytes this process writes in order from the first one are hashed as they go
        hash: at === 0 && !this.#tornPartials.has(digest) ? crypto.createHash('sha256') : null,
        next: 0,
      }))
      this.#partials.set(digest, opening)
      opening.catch(() => {
        if (this.#partials.get(digest) === opening) this.#partials.delete(digest)
      })
    }
    const p = await opening
    if (chunk.byteLength === 0) return
    if (p.hash && at === p.next) p.hash.update(chunk)
    else p.hash = null
    p.next = at + chunk.byteLength
    p.length = Math.max(p.length, p.next)
    try {
      await this.fs.write(p.fh, chunk, at)
    } catch (e) {
      // what the file holds is unknown now: forget the handle (a later call
      // opens it again) and re-hash the file when it is finished
      this.#tornPartials.add(digest)
      if (this.#partials.get(digest) === opening) {
        this.#partials.delete(digest)
        await this.fs.close(p.fh).catch(() => undefined)
      }
      throw e
    }
  }

  /**
   * Verifies the partial file and renames it to the blob. A file this process
   * wrote in order from its first byte, every write landing, is checked
   * against the hash taken as the bytes were written (and its stored length);
   * any other (resumed, or a write failed, or longer than this process wrote)
   * is re-read from the DFS and re-hashed whole. IMAGE_SIZE_MISMATCH or
   * IMAGE_DIGEST_MISMATCH (and the partial file is deleted) when it does not
   * match. A partial file that is gone while the blob is stored (with
   * `expectSize`) was published by another pull of the same blob: done.
   */
  async finishPartialBlob(digest: string, expectSize?: number): Promise<StoredBlob> {
    assertDigest(digest, 'partial blob digest')
    const opening = this.#partials.get(digest)
    const p = opening ? await opening.catch(() => undefined) : undefined
    this.#partials.delete(digest)
    const torn = this.#tornPartials.delete(digest)
    if (p) {
      await this.fs.fsync(p.fh).catch(() => undefined)
      await this.fs.close(p.fh)
    }
    const path = this.#partialPath(digest)
    const staged = await this.#statLength(path)
    if (staged === null) {
      // another pull of the same blob, writing the same file, published it first
      const st = await this.statBlob(digest)
      if (st && (expectSize === undefined || st.size === expectSize)) return st
    }
    let got: string | null = null
    let size = 0
    // (a file longer than this process wrote holds bytes it did not hash: re-read)
    if (p?.hash && !torn && staged === p.next) {
      got = 'sha256:' + p.hash.digest('hex')
      size = p.next
    } else {
      const hash = crypto.createHash('sha256')
      for await (const chunk of this.#readFile(path, 0, undefined, () => new StrataError('IMAGE_BLOB_MISSING', `no partial blob staged for ${digest}`))) {
        hash.update(chunk)
        size += chunk.length
      }
      got = 'sha256:' + hash.digest('hex')
    }
    try {
      checkExpect(got, size, { digest, ...(expectSize !== undefined ? { size: expectSize } : {}) })
    } catch (e) {
      await this.#unlinkQuiet(path)
      throw e
    }
    await this.#publishBlob(path, digest, size)
    return { digest, size }
  }

  // --- reading blobs

  /** Streams a blob (or the byte range [start, end)) from the DFS; IMAGE_BLOB_MISSING if it is not stored. */
  readBlob(digest: string, opts: { start?: number; end?: number } = {}): Readable {
    const path = this.blobPath(digest)
    return Readable.from(
      this.#readFile(path, opts.start ?? 0, opts.end, () => new StrataError('IMAGE_BLOB_MISSING', `blob ${digest} is not stored`), () => this.#resurrect('blob', digest)),
      { objectMode: false, highWaterMark: IO_STEP },
    )
  }

  /**
   * Reads the blob's bytes [start, start + target.length) into `target`,
   * READ_AHEAD reads at a time: for callers that reuse their buffers (a push's
   * parts), where readBlob would hand out a fresh buffer per read and the
   * caller copy it. IMAGE_BLOB_MISSING; IMAGE_SIZE_MISMATCH when the blob ends
   * before the range does.
   */
  async readBlobInto(digest: string, start: number, target: Buffer): Promise<void> {
    const path = this.blobPath(digest)
    const fh = await this.#openForRead(path, () => new StrataError('IMAGE_BLOB_MISSING', `blob ${digest} is not stored`), () => this.#resurrect('blob', digest))
    try {
      let next = 0
      const worker = async () => {
        while (next < target.length) {
          const off = next
          const n = Math.min(IO_STEP, target.length - off)
          next += n
          const r = await this.fs.read(fh, target.subarray(off, off + n), start + off)
          if (r.bytesRead !== n) throw new StrataError('IMAGE_SIZE_MISMATCH', `${path}: short read at ${start + off} (${r.bytesRead} of ${n} bytes)`)
        }
      }
      // one failure rejects at once; the others finish their current read before the close
      const workers = Array.from({ length: Math.min(READ_AHEAD, Math.ceil(target.length / IO_STEP)) }, worker)
      try {
        await Promise.all(workers)
      } finally {
        await Promise.allSettled(workers)
      }
    } finally {
      await this.fs.close(fh).catch(() => undefined)
    }
  }

  /** Opens `path`; when it is missing, `resurrect` may put it back once (a blob a gc has aside). */
  async #openForRead(path: string, missing: () => StrataError, resurrect?: () => Promise<boolean>): Promise<FileHandle> {
    try {
      return await this.fs.open(path, 'r')
    } catch (e) {
      if (!isMetaCode(e, 'META_NOT_FOUND')) throw e
      if (!resurrect || !(await resurrect())) throw missing()
    }
    try {
      return await this.fs.open(path, 'r')
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) throw missing()
      throw e
    }
  }

  async *#readFile(path: string, start: number, end: number | undefined, missing: () => StrataError, resurrect?: () => Promise<boolean>): AsyncGenerator<Buffer> {
    const fh = await this.#openForRead(path, missing, resurrect)
    const reads: Array<Promise<Buffer>> = []
    try {
      const length = fh.inode.file?.length ?? 0
      const stop = Math.min(end ?? length, length)
      let next = Math.max(0, start)
      const issue = () => {
        const at = next
        const n = Math.min(IO_STEP, stop - at)
        next += n
        const p = this.fs.read(fh, n, at).then((r) => {
          if (r.bytesRead !== n) throw new StrataError('IMAGE_SIZE_MISMATCH', `${path}: short read at ${at} (${r.bytesRead} of ${n} bytes)`)
          return r.buffer
        })
        p.catch(() => undefined)
        reads.push(p)
      }
      while (next < stop || reads.length > 0) {
        while (next < stop && reads.length < READ_AHEAD) issue()
        yield await reads.shift()!
      }
    } finally {
      for (const r of reads) await r.catch(() => undefined)
      await this.fs.close(fh).catch(() => undefined)
    }
  }

  /** Copies a blob to a local file (created or truncated). */
  async copyBlobToFile(digest: string, localPath: string, signal?: AbortSignal): Promise<void> {
    await pipeline(this.readBlob(digest), fs.createWriteStream(localPath), signal ? { signal } : {})
  }

  // --- manifests

  /**
   * Validates and stores a manifest (its bytes as given, or encodeManifest(m)).
   * IMAGE_BLOB_MISSING if a layer is not stored or is stored with another
   * size. Storing an existing manifest again is a no-op.
   */
  async putManifest(m: ImageManifest | Buffer): Promise<{ digest: string; bytes: Buffer }> {
    await this.open()
    const bytes = Buffer.isBuffer(m) ? m : encodeManifest(validateManifest(m))
    const manifest = Buffer.isBuffer(m) ? parseManifestBytes(bytes) : m
    const digest = sha256Digest(bytes)
    const seen = new Map<string, number>()
    for (const l of manifest.layers) {
      if (seen.has(l.digest)) {
        if (seen.get(l.digest) !== l.size) throw new StrataError('IMAGE_BAD_MANIFEST', `layer ${l.digest} is listed with two sizes`)
        continue
      }
      seen.set(l.digest, l.size)
    }
    await Promise.all(
      [...seen].map(async ([d, size]) => {
        const st = await this.statBlob(d)
        if (!st) throw new StrataError('IMAGE_BLOB_MISSING', `layer ${d} is not stored`, { detail: { digest: d } })
        if (st.size !== size) throw new StrataError('IMAGE_BLOB_MISSING', `layer ${d} is stored with ${st.size} bytes, the manifest says ${size}`, { detail: { digest: d } })
      }),
    )
    const path = this.manifestPath(digest)
    if ((await this.#statLength(path)) !== bytes.length) await this.#writeAtomic(path, bytes)
    return { digest, bytes }
  }

  /** A stored manifest; IMAGE_NOT_FOUND if absent, IMAGE_DIGEST_MISMATCH if its bytes were altered. */
  async getManifest(digest: string): Promise<{ digest: string; bytes: Buffer; manifest: ImageManifest }> {
    assertDigest(digest, 'manifest digest')
    let bytes = await this.#readSmall(this.manifestPath(digest))
    if (!bytes && (await this.#resurrect('manifest', digest))) bytes = await this.#readSmall(this.manifestPath(digest))
    if (!bytes) throw new StrataError('IMAGE_NOT_FOUND', `no manifest ${digest}`)
    const got = sha256Digest(bytes)
    if (got !== digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `stored manifest ${digest} hashes to ${got}`)
    return { digest, bytes, manifest: parseManifestBytes(bytes) }
  }

  async hasManifest(digest: string): Promise<boolean> {
    if ((await this.#statLength(this.manifestPath(digest))) !== null) return true
    return (await this.#resurrect('manifest', digest)) && (await this.#statLength(this.manifestPath(digest))) !== null
  }

  /** NAME[:TAG] or NAME@sha256:… → its manifest; IMAGE_NOT_FOUND if the tag or manifest does not exist. */
  async resolve(ref: string | ImageRef): Promise<{ ref: ImageRef; digest: string; bytes: Buffer; manifest: ImageManifest }> {
    const r = typeof ref === 'string' ? parseImageRef(ref) : ref
    let digest = r.digest
    if (digest === undefined) {
      const d = await this.getTag(r.name, r.tag ?? 'latest')
      if (!d) throw new StrataError('IMAGE_NOT_FOUND', `no image ${r.name}:${r.tag ?? 'latest'}`)
      digest = d
    }
    return { ref: r, ...(await this.getManifest(digest)) }
  }

  // --- tags

  /** The manifest digest a tag points at, or null. */
  async getTag(name: string, tag: string): Promise<string | null> {
    checkNameTag(name, tag)
    const rec = await this.#readTagFile(encodeTagDir(name), tag)
    if (!rec) return null
    if (rec.name !== name) throw new StrataError('IMAGE_BAD_MANIFEST', `tag ${name}:${tag} is recorded for the name ${JSON.stringify(rec.name.slice(0, 80))}`)
    return rec.digest
  }

  /**
   * Reads tags/DIR/TAG: its digest, and the name it belongs to (the decoded
   * DIR, or for a hashed DIR the name on the file's second line, which must
   * hash to DIR). Null when there is no such file; IMAGE_BAD_MANIFEST when
   * it holds anything else.
   */
  async #readTagFile(dir: string, tag: string): Promise<{ name: string; digest: string } | null> {
    const b = await this.#readSmall(`${this.root}/tags/${dir}/${tag}`)
    if (!b) return null
    const lines = b.toString('utf8').split('\n')
    const d = lines[0]!.trim()
    const plain = decodeTagDir(dir)
    const shown = plain !== null ? `${plain}:${tag}` : `${dir}/${tag}`
    if (!isDigest(d)) throw new StrataError('IMAGE_BAD_MANIFEST', `tag ${shown} holds ${JSON.stringify(d.slice(0, 80))}, not a digest`)
    if (plain !== null) return { name: plain, digest: d }
    const name = (lines[1] ?? '').trim()
    if (!isValidName(name) || encodeTagDir(name) !== dir) throw new StrataError('IMAGE_BAD_MANIFEST', `tag ${shown} does not hold the image name its directory is named after`)
    return { name, digest: d }
  }

  /**
   * Which version of a tag is current, cheaply (one metadata lookup, no
   * data read): the id of the tag file's inode, or null when there is no such
   * tag. setTag replaces the file by rename, so the id changes whenever the
   * tag moves and the digest read under an id stays right for that id.
   */
  async tagVersion(name: string, tag: string): Promise<string | null> {
    checkNameTag(name, tag)
    try {
      return String((await this.fs.lstat(this.tagPath(name, tag))).id)
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return null
      throw e
    }
  }

  /**
   * Points NAME:TAG at a stored manifest (tmp + rename: readers see the old
   * or the new digest). The manifest is leased while its bytes and layers are
   * checked and the tag written, so a gc running meanwhile either sees the
   * lease and keeps them, or has them aside and the check puts them back or
   * finds them gone: IMAGE_NOT_FOUND (no such manifest) or
   * IMAGE_BLOB_MISSING (a layer is not stored), and the tag is left as it was.
   */
  async setTag(name: string, tag: string, digest: string): Promise<void> {
    checkNameTag(name, tag)
    assertDigest(digest, 'manifest digest')
    await this.open()
    const holder = `${TRANSIENT_LEASE_PREFIX}tag-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
    await this.addLease(holder, digest)
    try {
      let manifest: ImageManifest
      try {
        manifest = (await this.getManifest(digest)).manifest
      } catch (e) {
        if (isMetaCode(e, 'IMAGE_NOT_FOUND')) throw new StrataError('IMAGE_NOT_FOUND', `no manifest ${digest} to tag`)
        throw e
      }
      for (const d of new Set(manifest.layers.map((l) => l.digest))) {
        if (!(await this.statBlob(d))) throw new StrataError('IMAGE_BLOB_MISSING', `layer ${d} of manifest ${digest} is not stored`, { detail: { digest: d } })
      }
      for (let attempt = 1; ; attempt++) {
        await this.#mkdirp(`${this.root}/tags/${encodeTagDir(name)}`)
        try {
          await this.#writeAtomic(this.tagPath(name, tag), tagFileBody(name, digest))
          break
        } catch (e) {
          // removeTag of the name's last other tag dropped the directory between the mkdir and the rename
          if (!isMetaCode(e, 'META_NOT_FOUND') || attempt >= TAG_DIR_ATTEMPTS) throw e
        }
      }
    } finally {
      await this.removeLease(holder, digest).catch(() => undefined)
    }
  }

  /** Removes a tag; IMAGE_NOT_FOUND if it does not exist. */
  async removeTag(name: string, tag: string): Promise<void> {
    checkNameTag(name, tag)
    try {
      await this.fs.unlink(this.tagPath(name, tag))
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) throw new StrataError('IMAGE_NOT_FOUND', `no image ${name}:${tag}`)
      throw e
    }
    // drop the name's directory once its last tag is gone (a concurrent setTag may refill it)
    await this.fs.rmdir(`${this.root}/tags/${encodeTagDir(name)}`).catch(() => undefined)
  }

  /** Every tag, sorted by name then tag. */
  async listTags(): Promise<TagRecord[]> {
    const out: TagRecord[] = []
    for (const dir of await this.#list(`${this.root}/tags`)) {
      const plain = decodeTagDir(dir)
      if (plain !== null ? !isValidName(plain) || encodeTagDir(plain) !== dir : !/^@[0-9a-f]{64}$/.test(dir)) continue
      // a file where a name's directory belongs names nothing
      const tags = await this.#list(`${this.root}/tags/${dir}`).catch((e: unknown) => {
        if (isMetaCode(e, 'META_NOT_DIRECTORY')) return []
        throw e
      })
      const recs = await Promise.all(
        tags.filter(isValidTag).map(async (tag) => {
          // a tag removed meanwhile or holding garbage names nothing; any other
          // failure (storage down) fails the listing: a gc that took an unreadable
          // tag for a missing one would collect what it points at
          const rec = await this.#readTagFile(dir, tag).catch((e: unknown) => {
            if (isMetaCode(e, 'IMAGE_BAD_MANIFEST')) return null
            throw e
          })
          return rec ? { name: rec.name, tag, digest: rec.digest } : null
        }),
      )
      for (const r of recs) if (r) out.push(r)
    }
    return out.sort((a, b) => (a.name === b.name ? (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0) : a.name < b.name ? -1 : 1))
  }

  // --- listings

  async listManifests(): Promise<string[]> {
    return (await this.#list(`${this.root}/manifests/sha256`)).filter((n) => HEX_RE.test(n)).map((n) => 'sha256:' + n)
  }

  async listBlobs(): Promise<StoredBlob[]> {
    const dir = `${this.root}/blobs/sha256`
    let all: { entries: Array<{ name: string }>; inodes: Array<{ file?: { length: number } }> }
    try {
      all = await this.fs.readdirAll(dir, { status: true })
    } catch (e) {
      if (isMetaCode(e, 'META_NOT_FOUND')) return []
      throw e
    }
    const out: StoredBlob[] = []
    all.entries.forEach((e, i) => {
      if (HEX_RE.test(e.name)) out.push({ digest: 'sha256:' + e.name, size: all.inodes[i]?.file?.length ?? 0 })
    })
    return out
  }

  // --- diffId cache

  /**
   * The layer built from an uncompressed layer tar with this diffId (with
   * `variant`'s compression; none by default), if that layer is still stored.
   * Each variant has its own record, so an import never reuses a layer built
   * another way (a plain import an lz4 layer, or the other way round).
   */
  async lookupDiffId(diffId: string, variant?: LayerVariant): Promise<string | null> {
    assertDigest(diffId, 'diffId')
    const b = await this.#readSmall(this.diffIdPath(diffId, variant))
    if (!b) return null
    const d = b.toString('utf8').trim()
    if (!isDigest(d)) return null
    return (await this.hasBlob(d)) ? d : null
  }

  async recordDiffId(diffId: string, layerDigest: string, variant?: LayerVariant): Promise<void> {
    assertDigest(diffId, 'diffId')
    assertDigest(layerDigest, 'layer digest')
    await this.open()
    await this.#writeAtomic(this.diffIdPath(diffId, variant), `${layerDigest}\n`)
  }

  // --- leases

  /** Marks a layer (or manifest) as in use by `holder`; gc never removes it while the lease exists. */
  async addLease(holder: string, layerDigest: string): Promise<void> {
    checkHolder(holder)
    assertDigest(layerDigest, 'leased digest')
    await this.open()
    const dir = `${this.root}/leases/${holder}`
    const path = this.leasePath(holder, layerDigest)
    for (let attempt = 1; ; attempt++) {
      try {
        await this.fs.writeFile(path, `${layerDigest}\n`)
        return
      } catch (e) {
        // no holder directory yet, or removeLease of the holder's last other lease (another
        // layer mount of the same node) dropped it between the mkdir and the create
        if (!isMetaCode(e, 'META_NOT_FOUND') || attempt >= TAG_DIR_ATTEMPTS) throw e
      }
      await this.#mkdirp(dir)
    }
  }

  /** Drops a lease (no error if it does not exist). */
  async removeLease(holder: string, layerDigest: string): Promise<void> {
    checkHolder(holder)
    try {
      await this.fs.unlink(this.leasePath(holder, layerDigest))
    } catch (e) {
      if (!isMetaCode(e, 'META_NOT_FOUND')) throw e
    }
    await this.fs.rmdir(`${this.root}/leases/${holder}`).catch(() => undefined)
  }

  /** Every lease as {holder, digest}. */
  async listLeases(): Promise<Array<{ holder: string; digest: string }>> {
    const out: Array<{ holder: string; digest: string }> = []
    for (const holder of await this.#list(`${this.root}/leases`)) {
      for (const n of await this.#list(`${this.root}/leases/${holder}`)) if (HEX_RE.test(n)) out.push({ holder, digest: 'sha256:' + n })
    }
    return out
  }

  // --- gc

  /**
   * Removes manifests no tag references (unless leased or listed in `keep`),
   * then layers no remaining manifest references and no lease names, the
   * diffId records of removed layers, staging files older than an hour
   * (partial pulls: a day) and transient leases older than an hour.
   * Listings are read blobs first, references last, so an object that
   * appears during gc is never mistaken for garbage; and what it decided to
   * remove goes aside first and is checked against tags and leases read
   * after that (#removeUnreferenced), so a lease or tag taken at any moment
   * keeps what it names.
   */
  async gc(opts: GcOptions = {}): Promise<GcResult> {
    await this.open()
    const dry = !!opts.dryRun
    const now = Date.now()
    // what a gc or discard killed half-way left aside is a candidate like anything else
    if (!dry) await this.#restoreAsides()
    const blobs = await this.listBlobs()
    const manifests = await this.listManifests()
    const tmpEntries = await this.fs.readdirAll(`${this.root}/tmp`, { status: true }).catch(() => ({ entries: [], inodes: [] }))
    await opts.pause?.('listed')

    // transient leases whose command died long ago
    if (!dry) {
      for (const holder of await this.#list(`${this.root}/leases`)) {
        if (!holder.startsWith(TRANSIENT_LEASE_PREFIX)) continue
        const st = await this.fs.lstat(`${this.root}/leases/${holder}`).catch(() => null)
        if (st && now - st.mtime / 1000 > TMP_MAX_AGE_MS) await this.fs.rm(`${this.root}/leases/${holder}`, { recursive: true }).catch(() => undefined)
      }
    }
    const tags = await this.listTags()
    const leases = await this.listLeases()
    const leased = new Set(leases.map((l) => l.digest))
    const keep = new Set<string>([...tags.map((t) => t.digest), ...(opts.keep ?? []), ...[...leased].filter((d) => manifests.includes(d))])

    let removedManifests: string[] = []
    const referenced = new Set<string>()
    // a kept manifest stored after the listing (an import that finished meanwhile) references layers too
    for (const d of new Set([...manifests, ...keep])) {
      if (keep.has(d)) {
        try {
          for (const l of (await this.getManifest(d)).manifest.layers) referenced.add(l.digest)
        } catch (e) {
          // an unreadable manifest that is still referenced keeps nothing alive but is not removed either
          if (!isMetaCode(e, 'IMAGE_DIGEST_MISMATCH', 'IMAGE_BAD_MANIFEST', 'IMAGE_NOT_FOUND')) throw e
        }
        continue
      }
      removedManifests.push(d)
    }
    let removedBlobs: string[] = []
    const keptLeased: string[] = []
    for (const b of blobs) {
      if (referenced.has(b.digest)) continue
      if (leased.has(b.digest)) {
        keptLeased.push(b.digest)
        continue
      }
      removedBlobs.push(b.digest)
    }
    const blobSize = new Map(blobs.map((b) => [b.digest, b.size]))
    const manifestSize = new Map<string, number>()
    for (const d of removedManifests) manifestSize.set(d, (await this.#statLength(this.manifestPath(d))) ?? 0)
    let freedBytes = 0
    if (!dry) {
      await opts.pause?.('decided')
      // a lease or tag taken while we were deciding wins (and what it kept is neither reported nor counted)
      const removed = await this.#removeUnreferenced(removedManifests, removedBlobs, opts.keep ?? [], opts.pause)
      removedManifests = removed.manifests
      removedBlobs = removed.blobs
      // diffId records of layers that are gone
      const gone = new Set(removedBlobs)
      for (const n of await this.#list(`${this.root}/diffids/sha256`)) {
        if (!/^[0-9a-f]{64}(\.[a-z0-9]+)?$/.test(n)) continue
        const b = await this.#readSmall(`${this.root}/diffids/sha256/${n}`)
        const d = b?.toString('utf8').trim() ?? ''
        if (!isDigest(d) || gone.has(d)) await this.#unlinkQuiet(`${this.root}/diffids/sha256/${n}`)
      }
      for (const [i, e] of tmpEntries.entries.entries()) {
        const ino = tmpEntries.inodes[i]
        // an aside directory is a gc's at work (or put back above), never stale staging
        if (!ino || e.name.startsWith(ASIDE_PREFIX)) continue
        const age = now - ino.mtime / 1000
        const maxAge = e.name.startsWith('partial-') ? PARTIAL_MAX_AGE_MS : TMP_MAX_AGE_MS
        if (age > maxAge) await this.fs.rm(`${this.root}/tmp/${e.name}`, { recursive: true }).catch(() => undefined)
      }
    }
    // what the run frees (or, dry, would free): manifests and blobs alike
    for (const d of removedManifests) freedBytes += manifestSize.get(d) ?? 0
    for (const d of removedBlobs) freedBytes += blobSize.get(d) ?? 0
    return { removedBlobs, removedManifests, keptLeased, freedBytes }
  }
}

/** Stops a source that will not be read (late errors of a destroyed stream, e.g. a lazy open, are ignored). */
function discard(src: Readable | AsyncIterable<Uint8Array>): void {
  if (!(src instanceof Readable)) return
  src.on('error', () => undefined)
  src.destroy()
}

function checkExpect(digest: string, size: number, expect: BlobExpectation): void {
  if (expect.size !== undefined && size !== expect.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `blob has ${size} bytes, expected ${expect.size}`, { detail: { expected: expect.size, actual: size } })
  if (expect.digest !== undefined && digest !== expect.digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `blob hashes to ${digest}, expected ${expect.digest}`, { detail: { expected: expect.digest, actual: digest } })
}

function checkNameTag(name: string, tag: string): void {
  if (!isValidName(name)) throw new StrataError('IMAGE_INVALID_REFERENCE', `invalid image name ${JSON.stringify(name)}`)
  if (!isValidTag(tag)) throw new StrataError('IMAGE_INVALID_REFERENCE', `invalid tag ${JSON.stringify(tag)}`)
}

function checkHolder(holder: string): void {
  if (!HOLDER_RE.test(holder)) throw new StrataError('INVALID_ARGUMENT', `lease holder ${JSON.stringify(holder)} must match ${HOLDER_RE.source}`)
}

function parseManifestBytes(bytes: Buffer): ImageManifest {
  let v: unknown
  try {
    v = JSON.parse(bytes.toString('utf8'))
  } catch (e) {
    throw new StrataError('IMAGE_BAD_MANIFEST', `manifest is not JSON: ${(e as Error).message}`, { cause: e })
  }
  return validateManifest(v)
}

/** sha256 and size of a local file (a large one is read and hashed on a worker thread). */
export async function hashLocalFile(path: string): Promise<StoredBlob> {
  return sha256File(path)
}

/**
 * A blob being written into tmp/ out of order. `push` takes bytes at their
 * offset; runs of contiguous bytes are gathered into pieces that end at
 * multiples of IO_STEP (whole chunks for every chunk size up to it) and up
 * to WRITE_WINDOW pieces are written at once; `ready()` waits while too much
 * is queued (the producer's backpressure). `publish` checks the length,
 * syncs and renames the file to its blob name; `abort` removes it. The
 * digest is the caller's to compute: the store cannot hash bytes that did
 * not arrive in order.
 */
export class BlobStage {
  #pending: Buffer[] = []
  #pendingBytes = 0
  #pendingAt = 0
  readonly #inflight = new Set<Promise<void>>()
  #queued = 0
  #failed: { e: unknown } | null = null
  #done = false
  /** piece buffers, reused: fresh 8 MiB allocations per piece cost more (page faults, GC) than the copy itself */
  readonly #pieces = new BufferPool((WRITE_WINDOW + 1) * IO_STEP)

  constructor(
    readonly store: ImageStore,
    readonly path: string,
    private fh: FileHandle | null,
    private readonly publishAs: (path: string, digest: string, size: number) => Promise<boolean>,
    private readonly unlink: (path: string) => Promise<void>,
  ) {}

  /** Queues `bufs` (kept, not copied) to be written from `position` on. */
  push(bufs: Buffer[], position: number): void {
    if (this.#failed) throw this.#failed.e
    if (this.#done) throw new StrataError('CLOSED', 'blob stage finished')
    for (let b of bufs) {
      if (this.#pendingBytes > 0 && position !== this.#pendingAt + this.#pendingBytes) this.#flush()
      while (b.length > 0) {
        if (this.#pendingBytes === 0) this.#pendingAt = position
        // pieces end at multiples of IO_STEP, so that every piece but the first and the last covers
        // whole chunks: a piece that ended inside a chunk would make the next one rewrite it
        const room = IO_STEP - (position % IO_STEP)
        const take = b.length <= room ? b : b.subarray(0, room)
        this.#pending.push(take)
        this.#pendingBytes += take.length
        position += take.length
        b = b.subarray(take.length)
        if (position % IO_STEP === 0) this.#flush()
      }
    }
  }

  /** Resolves once the queue is short enough for more; throws the first write failure. */
  async ready(): Promise<void> {
    while (this.#failed === null && (this.#inflight.size >= WRITE_WINDOW || this.#queued > WRITE_WINDOW * IO_STEP * 2)) await Promise.race(this.#inflight)
    if (this.#failed) throw this.#failed.e
  }

  #flush(): void {
    if (this.#pendingBytes === 0) return
    let data: Buffer
    let pooled = false
    if (this.#pending.length === 1) data = this.#pending[0]!
    else {
      data = this.#pieces.take(this.#pendingBytes)
      pooled = true
      let off = 0
      for (const b of this.#pending) off += b.copy(data, off)
    }
    const at = this.#pendingAt
    this.#pending = []
    this.#pendingBytes = 0
    this.#queued += data.length
    const settle = () => {
      this.#inflight.delete(w)
      this.#queued -= data.length
      if (pooled) this.#pieces.release(data)
    }
    const w: Promise<void> = this.store.fs.write(this.fh!, data, at).then(settle, (e: unknown) => {
      settle()
      this.#failed ??= { e }
    })
    this.#inflight.add(w)
  }

  /** Writes what is queued and waits for every write. */
  async drain(): Promise<void> {
    this.#flush()
    while (this.#inflight.size > 0) await Promise.all(this.#inflight)
    if (this.#failed) throw this.#failed.e
  }

  /**
   * Finishes the file and renames it to the blob of `digest` (`size` bytes:
   * IMAGE_SIZE_MISMATCH otherwise); `beforePublish` runs just before the
   * rename (e.g. to lease the digest). Returns whether the store already had
   * the blob (the staging file is then dropped).
   */
  async publish(digest: string, size: number, beforePublish?: () => Promise<void>): Promise<boolean> {
    assertDigest(digest, 'blob digest')
    try {
      await this.drain()
      this.#done = true
      const fh = this.fh!
      const length = (await this.store.fs.fsync(fh)).file?.length ?? -1
      this.fh = null
      await this.store.fs.close(fh)
      if (length !== size) throw new StrataError('IMAGE_SIZE_MISMATCH', `staged blob has ${length} bytes, expected ${size}`)
      await beforePublish?.()
      return await this.publishAs(this.path, digest, size)
    } catch (e) {
      await this.abort()
      throw e
    }
  }

  /** Stops: waits for writes in flight, closes and removes the staging file. Idempotent. */
  async abort(): Promise<void> {
    this.#done = true
    this.#pending = []
    this.#pendingBytes = 0
    await Promise.allSettled([...this.#inflight])
    if (this.fh) {
      const fh = this.fh
      this.fh = null
      await this.store.fs.close(fh).catch(() => undefined)
    }
    await this.unlink(this.path)
  }
}
