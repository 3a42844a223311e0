// The one-pass EROFS layer builder both inputs feed: a layer tar
// (tar-to-erofs.ts) and a local directory (dir-to-erofs.ts) hand it entries
// as tar headers with their data, in order, and it applies the layer rules
// (entry-rules.ts) to them and writes the image as they come: file data
// straight into the image (a sparse file as a chunk-based inode whose holes
// are not stored), the inodes and directories at the end. So the two inputs
// cannot differ in what a layer keeps (names, types, modes, owners, times to
// the nanosecond before 1970 too, xattrs, hard links, devices, whiteouts,
// holes), and a directory gives the layer its tar would (README.md).
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { StrataError } from '../../../fs/common/errors.js'
import { EROFS_UUID } from './erofs.js'
import { dataBytes, planChunks, type ChunkPlan } from './erofs-chunks.js'
import { CHUNK_HOLE, ErofsWriter, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, fitsInline, newNode, xattrAreaSize, type ErofsNode } from './erofs-writer.js'
import { isOverlayXattr } from './fs-ops.js'
import { badHardlink, checkRepeat, classifyEntry, dup, hardlinkThroughSymlink, whiteoutOver, type Seen } from './entry-rules.js'
import { ancestorsOf, baseOf, normalizeEntryPath, parentOf } from './paths.js'
import type { TarEntryHeader } from './tar-reader.js'
import { SPARSE_HOLE_CAP, checkSparseHoles, type SparseMap } from './tar-sparse.js'
import type { Timespec, UnpackStats } from './types.js'

const BLOCK = 4096
const IMPLICIT_DIR_MODE = 0o755
const OPAQUE_XATTR = 'trusted.overlay.opaque'
/** bytes of inline file tails held in memory until the image's metadata is written */
const DEFAULT_TAIL_BUDGET = 256 * 1024 * 1024
/** bytes of the image waiting for the thread pool to write them before the build waits */
const WRITE_BEHIND = 32 * 1024 * 1024
/** bytes of sparse files' block maps held in memory until the image's metadata is written */
const CHUNK_MAP_BUDGET = 64 * 1024 * 1024


/** The header's xattrs as a layer keeps them (overlayfs's own are never taken from a tar). */
function layerXattrs(h: TarEntryHeader, rel: string, type: number): Map<string, Buffer> {
  const out = new Map<string, Buffer>()
  for (const [name, value] of h.xattrs) {
    if (isOverlayXattr(name)) continue
    // Linux allows user.* only on regular files and directories; unpacking such an entry fails the same way
    if (name.startsWith('user.') && type !== S_IFREG && type !== S_IFDIR) {
      throw new StrataError('IMAGE_BAD_ARCHIVE', `xattr ${name} on ${JSON.stringify(rel)} cannot be set: user xattrs exist only on files and directories`)
    }
    out.set(name, value)
  }
  // what EROFS cannot store is refused here, naming the entry (the image's metadata is written at the end)
  xattrAreaSize(out, JSON.stringify(rel || '.'))
  return out
}

/**
 * A regular file's data as the builder reads it: the tar reader's current
 * member is one, a local file another. `chunk()` waits for the next piece
 * (null at the end), `buffered()` hands out what is there without waiting
 * (null when nothing is, and in a hole); a file with holes has a `sparseMap`
 * and is passed over them with `skipHole(n)`.
 */
export interface EntryData {
  readonly sparseMap: SparseMap | null
  buffered(): Buffer | null
  chunk(max?: number): Promise<Buffer | null>
  skipHole(n: number): void
}

export class LayerBuilder {
  readonly root: ErofsNode
  readonly seen = new Map<string, Seen>()
  readonly nodes = new Map<string, ErofsNode>()
  readonly opaque = new Set<string>()
  /** directories of this layer that also have a whiteout in it: opaque too */
  readonly whitedDirs = new Set<string>()
  /** paths this layer has whiteouts of */
  readonly whited = new Set<string>()
  /** directories this layer implied; their time is the layer's newest, known at the end */
  readonly implied = new Set<ErofsNode>()
  rootSeen = false
  readonly stats: UnpackStats = { entries: 0, files: 0, bytes: 0, whiteouts: 0, maxMtime: 0 }

  tailBytes = 0
  /** zeros and block maps the layer's sparse files need stored so far (SPARSE_HOLE_CAP bounds them) */
  sparseCost = 0
  mapBytes = 0

  constructor(
    readonly w: ErofsWriter,
    readonly ready?: () => Promise<void>,
    readonly tailBudget = DEFAULT_TAIL_BUDGET,
  ) {
    this.root = newNode(S_IFDIR | IMPLICIT_DIR_MODE, { uid: 0, gid: 0, mtime: { sec: 0, nsec: 0 } })
    this.nodes.set('', this.root)
    this.implied.add(this.root)
  }

  /**
   * The directory at `rel`, creating it and its missing ancestors as implied
   * directories (unpack's parents(rel, true)); a whiteout, file or symlink on
   * the way is an error.
   */
  dirAt(rel: string): ErofsNode {
    const have = this.nodes.get(rel)
    if (have && this.seen.get(rel) === 'wh') {
      // an entry under a path this layer whited out: a new directory over the lower one
      this.nodes.delete(rel)
      this.whitedDirs.add(rel)
    } else if (have) {
      if (have.children) return have
      if ((have.mode & S_IFMT) === S_IFLNK) throw new StrataError('IMAGE_UNSAFE_PATH', `${JSON.stringify(rel)} is a symlink; no entry may be written through it`)
      throw dup(rel, 'is both a non-directory entry and a parent directory in this layer')
    }
    const parent = this.dirAt(parentOf(rel))
    const d = newNode(S_IFDIR | IMPLICIT_DIR_MODE, { uid: 0, gid: 0, mtime: { sec: 0, nsec: 0 } })
    parent.children!.set(baseOf(rel), d)
    this.nodes.set(rel, d)
    this.seen.set(rel, 'idir')
    this.implied.add(d)
    return d
  }

  parentsOf(rel: string): ErofsNode {
    return this.dirAt(parentOf(rel))
  }

  async entry(h: TarEntryHeader, r: EntryData): Promise<void> {
    const k = classifyEntry(h, this.stats)
    if (k.kind === 'skip') return
    if (k.kind === 'opaque') return this.opaqueMarker(k.dir)
    if (k.kind === 'whiteout') return this.whiteout(k.target, h)
    if (k.kind === 'root') return this.rootEntry(h)
    const rel = k.rel
    const prev = this.seen.get(rel)
    checkRepeat(rel, h, prev)
    if (prev === 'wh') {
      // the entry replaces its own whiteout; a directory also hides the lower one's entries
      this.nodes.delete(rel)
      if (h.type === 'directory') this.whitedDirs.add(rel)
    }
    const parent = this.parentsOf(rel)
    const name = baseOf(rel)
    const mtime = h.mtime
    if (h.type === 'directory') {
      let d = this.nodes.get(rel)
      if (!d) {
        d = newNode(S_IFDIR, { uid: 0, gid: 0, mtime })
        parent.children!.set(name, d)
        this.nodes.set(rel, d)
      }
      this.implied.delete(d)
      d.mode = S_IFDIR | h.mode
      d.uid = h.uid
      d.gid = h.gid
      d.mtime = mtime
      d.xattrs = layerXattrs(h, rel, S_IFDIR)
      this.seen.set(rel, 'dir')
      return
    }
    let node: ErofsNode
    switch (h.type) {
      case 'file':
        node = newNode(S_IFREG | h.mode, { uid: h.uid, gid: h.gid, mtime, xattrs: layerXattrs(h, rel, S_IFREG) })
        await this.regularFile(node, rel, h.size, r)
        this.stats.files++
        this.stats.bytes += h.size
        break
      case 'symlink':
        node = newNode(S_IFLNK | 0o777, { uid: h.uid, gid: h.gid, mtime, xattrs: layerXattrs(h, rel, S_IFLNK) })
        this.storeBytes(node, Buffer.from(h.linkname, 'utf8'))
        break
      case 'link':
        node = this.hardlinkTarget(rel, h)
        node.nlink++
        break
      case 'character-device':
      case 'block-device':
      case 'fifo': {
        const type = h.type === 'fifo' ? S_IFIFO : h.type === 'block-device' ? S_IFBLK : S_IFCHR
        node = newNode(type | h.mode, { uid: h.uid, gid: h.gid, mtime, xattrs: layerXattrs(h, rel, type) })
        if (type !== S_IFIFO) {
          node.rdevMajor = h.devmajor
          node.rdevMinor = h.devminor
        }
        break
      }
    }
    parent.children!.set(name, node)
    this.nodes.set(rel, node)
    this.seen.set(rel, 'node')
  }

  /**
   * Whether a file's last partial block goes next to its inode. Tails wait in
   * memory until the end, so past the budget they are written as blocks of
   * their own: an image of millions of small files stays in bounded memory.
   */
  inlineTail(xattrBytes: number, tail: number): boolean {
    if (!fitsInline(xattrBytes, tail) || this.tailBytes + tail > this.tailBudget) return false
    this.tailBytes += tail
    return true
  }

  /**
   * A regular file's data: a sparse one with whole chunks of hole as a
   * CHUNK_BASED file (the holes not stored), anything else flat. What the
   * holes still cost (zeros stored, block maps) is bounded per layer before
   * any of it is written.
   */
  async regularFile(node: ErofsNode, rel: string, size: number, r: EntryData): Promise<void> {
    const map = r.sparseMap
    if (map === null) return this.fileData(node, rel, size, r)
    const plan = planChunks(map, size, CHUNK_MAP_BUDGET - this.mapBytes)
    const cost = plan ? plan.storedBytes - dataBytes(map) + plan.mapBytes : size - dataBytes(map)
    this.sparseCost = checkSparseHoles(this.sparseCost, cost, SPARSE_HOLE_CAP, rel, 'stored')
    if (plan === null) return this.fileData(node, rel, size, r)
    this.mapBytes += plan.mapBytes
    return this.chunkedData(node, rel, size, r, plan)
  }

  /** A sparse file as chunks: those with data stored whole from a block boundary each, the others holes. */
  async chunkedData(node: ErofsNode, rel: string, size: number, r: EntryData, plan: ChunkPlan): Promise<void> {
    node.size = size
    const map = new Uint32Array(plan.count).fill(CHUNK_HOLE)
    const chunk = 2 ** plan.bits
    let at = 0
    for (const i of plan.stored) {
      const start = i * chunk
      if (start > at) r.skipHole(start - at)
      map[i] = this.w.beginData()
      let left = Math.min(chunk, size - start)
      while (left > 0) {
        const c = await r.chunk(left)
        if (c === null) throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: ${start + Math.min(chunk, size - start) - left} bytes of ${size}`)
        this.w.write([c])
        left -= c.length
        if (this.w.behind > WRITE_BEHIND) await this.w.settled(WRITE_BEHIND)
        if (this.ready) await this.ready()
      }
      this.w.endData()
      at = start + Math.min(chunk, size - start)
    }
    if (size > at) r.skipHole(size - at)
    node.chunks = { bits: plan.bits, map }
  }

  /** Streams a file's data into the image: whole blocks as they arrive, the last partial block inline when it fits. */
  async fileData(node: ErofsNode, rel: string, size: number, r: EntryData): Promise<void> {
    node.size = size
    const tailLen = size % BLOCK
    const inline = this.inlineTail(xattrAreaSize(node.xattrs, rel), tailLen)
    const toData = inline ? size - tailLen : size
    node.startBlock = toData > 0 ? this.w.beginData() : 0
    const tail = inline ? Buffer.alloc(tailLen) : null
    let got = 0
    while (got < size) {
      const first = r.buffered() ?? (await r.chunk())
      if (first === null) break
      const bufs = [first]
      for (let c = r.buffered(); c !== null; c = r.buffered()) bufs.push(c)
      const out: Buffer[] = []
      for (const b of bufs) {
        const dataPart = Math.max(0, Math.min(b.length, toData - got))
        if (dataPart > 0) out.push(dataPart === b.length ? b : b.subarray(0, dataPart))
        if (dataPart < b.length) b.copy(tail!, got + dataPart - toData, dataPart)
        got += b.length
      }
      if (out.length > 0) {
        this.w.write(out)
        if (this.w.behind > WRITE_BEHIND) await this.w.settled(WRITE_BEHIND)
        if (this.ready) await this.ready()
      }
    }
    if (got !== size) throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: ${got} bytes of ${size}`)
    if (toData > 0) this.w.endData()
    node.tail = tail
  }

  /** Small data known up front (a symlink's target). */
  storeBytes(node: ErofsNode, data: Buffer): void {
    node.size = data.length
    const tailLen = data.length % BLOCK
    const inline = this.inlineTail(xattrAreaSize(node.xattrs, 'symlink'), tailLen)
    const toData = inline ? data.length - tailLen : data.length
    if (toData > 0) {
      node.startBlock = this.w.beginData()
      this.w.write([data.subarray(0, toData)])
      this.w.endData()
    }
    node.tail = inline ? Buffer.from(data.subarray(toData)) : null
  }

  hardlinkTarget(rel: string, h: TarEntryHeader): ErofsNode {
    const target = normalizeEntryPath(h.linkname, 'hard link target')
    if (target === '') throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: hard link to the root`)
    const prev = this.seen.get(target)
    if (prev !== 'node') {
      for (const a of ancestorsOf(target)) {
        const n = this.nodes.get(a)
        if (!n) break
        if ((n.mode & S_IFMT) === S_IFLNK) throw hardlinkThroughSymlink(rel, target, a)
        if (!n.children) break
      }
      throw badHardlink(rel, target, prev)
    }
    return this.nodes.get(target)!
  }

  rootEntry(h: TarEntryHeader): void {
    if (h.type !== 'directory') throw new StrataError('IMAGE_BAD_ARCHIVE', `the root entry is a ${h.type}, not a directory`)
    this.implied.delete(this.root)
    this.root.mode = S_IFDIR | h.mode
    this.root.uid = h.uid
    this.root.gid = h.gid
    this.root.mtime = h.mtime
    this.root.xattrs = layerXattrs(h, '', S_IFDIR)
    this.rootSeen = true
  }

  whiteout(target: string, h: TarEntryHeader): void {
    this.stats.whiteouts++
    const over = whiteoutOver(target, this.seen.get(target), this.whited.has(target))
    this.whited.add(target)
    if (over === 'opaque') this.whitedDirs.add(target)
    if (over !== 'whiteout') return
    const parent = this.parentsOf(target)
    const node = newNode(S_IFCHR | h.mode, { uid: h.uid, gid: h.gid, mtime: h.mtime })
    parent.children!.set(baseOf(target), node)
    this.nodes.set(target, node)
    this.seen.set(target, 'wh')
  }

  opaqueMarker(dir: string): void {
    this.stats.whiteouts++
    if (this.opaque.has(dir)) throw dup(dir, 'has two opaque markers in this layer')
    const kind = this.seen.get(dir)
    if (kind === 'node') throw dup(dir, 'is both a non-directory entry and an opaque directory in this layer')
    this.opaque.add(dir)
    if (dir !== '') {
      this.parentsOf(dir)
      this.dirAt(dir)
    }
  }

  /** Implied directories get the layer's newest mtime; opaque directories their xattr. */
  finishTree(): Timespec {
    const dflt: Timespec = { sec: this.stats.maxMtime, nsec: 0 }
    for (const d of this.implied) {
      d.mtime = dflt
      if (d === this.root) d.xattrs = new Map()
    }
    for (const rel of new Set([...this.opaque, ...this.whitedDirs])) {
      const d = this.nodes.get(rel)!
      d.xattrs = new Map(d.xattrs)
      d.xattrs.set(OPAQUE_XATTR, Buffer.from('y'))
    }
    return dflt
  }
}

const FIXED_UUID = Buffer.from(EROFS_UUID.replaceAll('-', ''), 'hex')

export interface LayerBuildOptions {
  /** sees every byte of the image with its offset as it is written (block 0 last); may keep the buffers */
  onWrite?: (bufs: Buffer[], position: number) => void
  /** awaited between writes: a consumer of onWrite that falls behind slows the build down */
  ready?: () => Promise<void>
  /** bytes of small-file tails kept in memory to be stored next to their inodes (default 256 MiB) */
  inlineTailBudget?: number
}

/**
 * Writes the layer `feed` hands `LayerBuilder` its entries for at `outFile`
 * (a temporary sibling renamed into place when complete; removed on
 * failure). The same entries give the same bytes.
 */
export async function buildLayer(
  outFile: string,
  opts: LayerBuildOptions,
  feed: (b: LayerBuilder) => Promise<void>,
): Promise<{ size: number; stats: UnpackStats }> {
  const tmp = path.join(path.dirname(outFile), `.${path.basename(outFile)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`)
  let fd: number
  try {
    fd = fs.openSync(tmp, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o644)
  } catch (e) {
    throw writeError(e, outFile)
  }
  try {
    let size: number
    let stats: UnpackStats
    let w: ErofsWriter | null = null
    try {
      w = new ErofsWriter(fd, opts.onWrite)
      const b = new LayerBuilder(w, opts.ready, opts.inlineTailBudget)
      await feed(b)
      const buildTime = b.finishTree()
      size = w.finish(b.root, buildTime, FIXED_UUID)
      await w.settled()
      stats = b.stats
    } finally {
      // never close the descriptor under writes still in the thread pool
      await w?.idle()
      fs.closeSync(fd)
    }
    fs.renameSync(tmp, outFile)
    return { size, stats }
  } catch (e) {
    fs.rmSync(tmp, { force: true })
    if (e instanceof StrataError) throw e
    throw writeError(e, outFile)
  }
}

export function writeError(e: unknown, file: string): StrataError {
  const code = (e as NodeJS.ErrnoException)?.code
  const msg = `${file}: ${(e as Error)?.message ?? String(e)}`
  if (code === 'ENOSPC' || code === 'EDQUOT') return new StrataError('NO_SPACE', msg, { cause: e })
  return new StrataError('IMAGE_BUILD_FAILED', msg, { cause: e })
}
