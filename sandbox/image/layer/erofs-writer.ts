// An uncompressed EROFS image written in one pass, for building a layer
// straight from a tar stream (erofs-utils 1.5 has no `--tar` mode, so the
// alternative is unpacking to disk and running mkfs.erofs over the tree).
//
// Layout (4 KiB blocks, meta_blkaddr 0, so a nid is a byte offset / 32):
//
//   block 0      superblock at 1024, then the root inode at nid 36 (root_nid
//                is 16 bits, so the root must come early); written last
//   data area    file and symlink data as it arrives, each file from a block
//                boundary; then the directories' blocks
//   meta area    every other inode: the 64-byte extended inode (mtime to the
//                nanosecond, 32-bit ids), its inline xattrs, and the last
//                partial block of its data inline (FLAT_INLINE) when all of
//                that fits in one block; FLAT_PLAIN otherwise; a file with
//                holes (a sparse file of the tar) is CHUNK_BASED: its block
//                map (one 32-bit block address per chunk, NULL for a chunk
//                that is all hole) follows its xattrs, and only the chunks
//                that hold data are in the data area
//
// Only features every EROFS kernel reads are used (no compression, no
// shared xattrs, no superblock checksum), and the same calls give the same
// bytes: directory entries are sorted, xattrs too, and nothing depends on
// the clock.
import fs from 'node:fs'
import { StrataError } from '../../../fs/common/errors.js'
import type { Timespec } from './types.js'

const BLOCK = 4096
export const BLOCK_BITS = 12
const SUPER_OFFSET = 1024
const MAGIC = 0xe0f5e1e2
const INODE_SIZE = 64
const ROOT_NID = 36
const DIRENT_SIZE = 12
const MAX_NAME = 255

const LAYOUT_FLAT_PLAIN = 0
const LAYOUT_FLAT_INLINE = 2
const LAYOUT_CHUNK_BASED = 4
/** a block map entry of a chunk with no data: it reads as zeros */
export const CHUNK_HOLE = 0xffffffff
/** superblock feature_incompat: some inode is CHUNK_BASED (set only then, so other images keep their bytes) */
const FEATURE_INCOMPAT_CHUNKED_FILE = 0x4

export const S_IFMT = 0o170000
export const S_IFREG = 0o100000
export const S_IFDIR = 0o040000
export const S_IFLNK = 0o120000
export const S_IFCHR = 0o020000
export const S_IFBLK = 0o060000
export const S_IFIFO = 0o010000

/** EROFS dirent file types by S_IFMT. */
const FILE_TYPE: Record<number, number> = { [S_IFREG]: 1, [S_IFDIR]: 2, [S_IFCHR]: 3, [S_IFBLK]: 4, [S_IFIFO]: 5, [S_IFLNK]: 7 }

/** xattr name prefixes EROFS encodes as an index (an exact name has an empty suffix). */
const XATTR_PREFIXES: Array<{ prefix: string; index: number; exact?: boolean }> = [
  { prefix: 'system.posix_acl_access', index: 2, exact: true },
  { prefix: 'system.posix_acl_default', index: 3, exact: true },
  { prefix: 'user.', index: 1 },
  { prefix: 'trusted.', index: 4 },
  { prefix: 'security.', index: 6 },
]

export interface ErofsNode {
  /** full st_mode (type and permission bits) */
  mode: number
  uid: number
  gid: number
  mtime: Timespec
  xattrs: Map<string, Buffer>
  /** device number (character and block devices) */
  rdevMajor: number
  rdevMinor: number
  /** directories: entries by name */
  children: Map<string, ErofsNode> | null
  /** regular files and symlinks: data size */
  size: number
  /** first data block (FLAT_PLAIN data, or the whole blocks before an inline tail) */
  startBlock: number
  /** the last partial block, stored after the inode */
  tail: Buffer | null
  /** a CHUNK_BASED file: log2 of its chunk size and each chunk's first block (CHUNK_HOLE: none) */
  chunks: { bits: number; map: Uint32Array } | null
  /** hard links to this node */
  nlink: number
  /** assigned at finish() */
  nid: number
}

export function newNode(mode: number, attrs: { uid: number; gid: number; mtime: Timespec; xattrs?: Map<string, Buffer> }): ErofsNode {
  return {
    mode,
    uid: attrs.uid,
    gid: attrs.gid,
    mtime: attrs.mtime,
    xattrs: attrs.xattrs ?? new Map(),
    rdevMajor: 0,
    rdevMinor: 0,
    children: (mode & S_IFMT) === S_IFDIR ? new Map() : null,
    size: 0,
    startBlock: 0,
    tail: null,
    chunks: null,
    nlink: 1,
    nid: -1,
  }
}

function bad(msg: string): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', msg)
}

interface EncodedXattr {
  index: number
  suffix: Buffer
  value: Buffer
}

/** Inline xattr entries in name order; throws IMAGE_BAD_ARCHIVE for names or sizes EROFS cannot hold. */
function encodeXattrs(xattrs: Map<string, Buffer>, where: string): EncodedXattr[] {
  const out: EncodedXattr[] = []
  for (const name of [...xattrs.keys()].sort()) {
    const p = XATTR_PREFIXES.find((x) => (x.exact ? name === x.prefix : name.startsWith(x.prefix) && name.length > x.prefix.length))
    if (!p) throw bad(`${where}: xattr ${JSON.stringify(name)} has a namespace EROFS cannot store`)
    const suffix = Buffer.from(name.slice(p.prefix.length), 'utf8')
    const value = xattrs.get(name)!
    if (suffix.length > 255 || value.length > 0xffff) throw bad(`${where}: xattr ${JSON.stringify(name)} is too large for EROFS`)
    out.push({ index: p.index, suffix, value })
  }
  return out
}

/** Bytes of the inline xattr area (0 without xattrs). */
export function xattrAreaSize(xattrs: Map<string, Buffer>, where: string): number {
  if (xattrs.size === 0) return 0
  let n = 12
  for (const x of encodeXattrs(xattrs, where)) n += align4(4 + x.suffix.length + x.value.length)
  return n
}

function align4(n: number): number {
  return (n + 3) & ~3
}

function roundUp(n: number, to: number): number {
  return Math.ceil(n / to) * to
}

/** Whether inode + xattrs + an inline tail of `tail` bytes fit one block. */
export function fitsInline(xattrBytes: number, tail: number): boolean {
  return tail > 0 && INODE_SIZE + xattrBytes + tail <= BLOCK
}

function newEncodeDev(major: number, minor: number): number {
  return ((minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)) >>> 0
}

/** Sorted directory entries ('.' and '..' included) packed into blocks. */
interface DirLayout {
  entries: Array<{ name: Buffer; node: ErofsNode }>
  /** index of each block's first entry, and the bytes each block uses */
  blocks: Array<{ first: number; count: number; used: number }>
  size: number
}

function layoutDir(dir: ErofsNode, parent: ErofsNode): DirLayout {
  const entries: Array<{ name: Buffer; node: ErofsNode }> = [
    { name: Buffer.from('.'), node: dir },
    { name: Buffer.from('..'), node: parent },
  ]
  for (const [name, node] of dir.children!) entries.push({ name: Buffer.from(name, 'utf8'), node })
  entries.sort((a, b) => Buffer.compare(a.name, b.name))
  const blocks: DirLayout['blocks'] = []
  let cur = { first: 0, count: 0, used: 0 }
  for (let i = 0; i < entries.length; i++) {
    const need = DIRENT_SIZE + entries[i]!.name.length
    if (entries[i]!.name.length > MAX_NAME) throw bad(`name ${JSON.stringify(entries[i]!.name.toString())} is longer than ${MAX_NAME} bytes`)
    if (cur.used + need > BLOCK) {
      blocks.push(cur)
      cur = { first: i, count: 0, used: 0 }
    }
    cur.count++
    cur.used += need
  }
  blocks.push(cur)
  const size = (blocks.length - 1) * BLOCK + cur.used
  return { entries, blocks, size }
}

function dirBlock(l: DirLayout, b: number): Buffer {
  const { first, count, used } = l.blocks[b]!
  const buf = Buffer.alloc(b === l.blocks.length - 1 ? used : BLOCK)
  let nameOff = count * DIRENT_SIZE
  for (let k = 0; k < count; k++) {
    const { name, node } = l.entries[first + k]!
    const o = k * DIRENT_SIZE
    buf.writeBigUInt64LE(BigInt(node.nid), o)
    buf.writeUInt16LE(nameOff, o + 8)
    buf.writeUInt8(FILE_TYPE[node.mode & S_IFMT] ?? 0, o + 10)
    name.copy(buf, nameOff)
    nameOff += name.length
  }
  return buf
}

/** Zeros for padding a file's data to a block: only ever read from. */
const ZERO_BLOCK = Buffer.alloc(BLOCK)
/** contiguous bytes gathered into one writev (a layer is mostly files of a few KiB: a thread-pool hop each cost more than the copy) */
const BATCH_BYTES = 1024 * 1024
/** buffers per writev (IOV_MAX is 1024) */
const BATCH_BUFS = 1024

/** `bufs` without their first `n` bytes. */
function dropBytes(bufs: Buffer[], n: number): Buffer[] {
  let i = 0
  while (i < bufs.length && n >= bufs[i]!.length) n -= bufs[i++]!.length
  const rest = bufs.slice(i)
  if (n > 0 && rest.length > 0) rest[0] = rest[0]!.subarray(n)
  return rest
}

/**
 * Writes an EROFS image to a file descriptor front to back (block 0 last).
 * Feed it each file's data between `beginData()` and `endData()` with
 * `write` as it arrives, build the tree of ErofsNodes meanwhile, and call
 * `finish(root)` once, then `settled()` before the descriptor is closed.
 *
 * Writes go to the file on libuv's thread pool, gathered into writevs of
 * about a megabyte, not on the calling thread: copying a layer's hundreds
 * of megabytes into the page cache took a tenth of an import's main
 * thread, which is what bounds the build.
 */
export class ErofsWriter {
  /** next free byte of the image (always block-aligned between files) */
  #pos = BLOCK
  #inos = 0
  /** bytes handed to the thread pool or gathered for it, not yet written */
  #behind = 0
  #batch: Buffer[] = []
  #batchAt = 0
  #batchBytes = 0
  #failed: { e: unknown } | null = null
  #waiters: Array<{ ready: () => boolean; wake: () => void }> = []

  /**
   * `onWrite` sees every byte of the image once, in the order written, with
   * its offset (block 0 last); the buffers are not reused afterwards, so it
   * may keep them (to copy the image elsewhere while it is being built).
   */
  constructor(
    private readonly fd: number,
    private readonly onWrite?: (bufs: Buffer[], position: number) => void,
  ) {
    fs.writeSync(this.fd, Buffer.alloc(BLOCK), 0, BLOCK, 0)
  }

  /** Starts a file's data at the next block; returns its first block. */
  beginData(): number {
    return this.#pos / BLOCK
  }

  /** Writes data bytes of the current file at the end of the image; the buffers must not change until `settled()`. */
  write(bufs: Buffer[]): void {
    if (this.#failed) throw this.#failed.e
    this.onWrite?.(bufs, this.#pos)
    for (const b of bufs) {
      if (b.length === 0) continue
      this.#gather(b, this.#pos)
      this.#pos += b.length
    }
  }

  #gather(b: Buffer, at: number): void {
    if (this.#batchBytes > 0 && this.#batchAt + this.#batchBytes !== at) this.#flush()
    if (this.#batchBytes === 0) this.#batchAt = at
    this.#batch.push(b)
    this.#batchBytes += b.length
    this.#behind += b.length
    if (this.#batchBytes >= BATCH_BYTES || this.#batch.length >= BATCH_BUFS) this.#flush()
  }

  #flush(): void {
    if (this.#batchBytes === 0) return
    this.#writev(this.#batch, this.#batchAt, this.#batchBytes)
    this.#batch = []
    this.#batchBytes = 0
  }

  #writev(bufs: Buffer[], at: number, bytes: number): void {
    fs.writev(this.fd, bufs, at, (err, n) => {
      if (err) {
        this.#failed ??= { e: err }
        this.#behind -= bytes
      } else {
        this.#behind -= n
        // a short write to a regular file (a full disk reports ENOSPC on the next one): write the rest
        if (n < bytes) this.#writev(dropBytes(bufs, n), at + n, bytes - n)
      }
      this.#wake()
    })
  }

  #wake(): void {
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.ready()) return true
      w.wake()
      return false
    })
  }

  #until(ready: () => boolean): Promise<void> {
    this.#flush()
    return ready() ? Promise.resolve() : new Promise((wake) => this.#waiters.push({ ready, wake }))
  }

  /** Bytes not yet written to the file. */
  get behind(): number {
    return this.#behind
  }

  /**
   * Resolves once at most `max` bytes are left to write (0: all are in the
   * file); throws the first write failure.
   */
  async settled(max = 0): Promise<void> {
    await this.#until(() => this.#behind <= max || this.#failed !== null)
    if (this.#failed) throw this.#failed.e
  }

  /** Resolves once the thread pool holds no write of this image, whether or not one failed. */
  idle(): Promise<void> {
    return this.#until(() => this.#behind === 0)
  }

  /** Pads the current file's data to a whole block. */
  endData(): void {
    const pad = roundUp(this.#pos, BLOCK) - this.#pos
    if (pad > 0) this.write([ZERO_BLOCK.subarray(0, pad)])
  }

  /**
   * Lays out the directories and the inodes, writes them and the superblock.
   * `buildTime` goes into the superblock (only compact inodes, which this
   * writer does not make, use it). Returns the image size.
   */
  finish(root: ErofsNode, buildTime: Timespec, uuid: Buffer): number {
    // every node once, parents before children, children in name order
    const order: Array<{ node: ErofsNode; parent: ErofsNode }> = []
    const seen = new Set<ErofsNode>()
    const queue: Array<{ node: ErofsNode; parent: ErofsNode }> = [{ node: root, parent: root }]
    for (let i = 0; i < queue.length; i++) {
      const it = queue[i]!
      if (seen.has(it.node)) continue
      seen.add(it.node)
      order.push(it)
      if (it.node.children) {
        const names = [...it.node.children.keys()].sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')))
        for (const n of names) queue.push({ node: it.node.children.get(n)!, parent: it.node })
      }
    }
    this.#inos = order.length
    // link counts: directories count themselves, '.', and each subdirectory's '..'
    for (const { node } of order) {
      if (node.children) node.nlink = 2 + [...node.children.values()].filter((c) => c.children !== null).length
    }

    // directory contents: sizes now, blocks in the data area, tails inline when they fit
    const dirs = new Map<ErofsNode, DirLayout>()
    const xattrBytes = new Map<ErofsNode, number>()
    for (const { node, parent } of order) {
      xattrBytes.set(node, xattrAreaSize(node.xattrs, 'inode'))
      if (!node.children) continue
      const l = layoutDir(node, parent)
      dirs.set(node, l)
      node.size = l.size
    }
    const rootCapacity = BLOCK - (SUPER_OFFSET + 128) - INODE_SIZE - xattrBytes.get(root)!
    const dirTailInline = (node: ErofsNode, l: DirLayout): boolean => {
      const tail = l.size % BLOCK
      if (node === root) return tail > 0 && tail <= rootCapacity
      return fitsInline(xattrBytes.get(node)!, tail)
    }
    if (rootCapacity < 0) throw bad('the root directory has more xattrs than EROFS can hold next to the superblock')
    const dirWrites: Array<{ node: ErofsNode; l: DirLayout; inline: boolean; blocks: number }> = []
    let nextBlock = this.#pos / BLOCK
    for (const [node, l] of dirs) {
      const inline = dirTailInline(node, l)
      const blocks = inline ? l.blocks.length - 1 : l.blocks.length
      node.startBlock = blocks > 0 ? nextBlock : 0
      nextBlock += blocks
      dirWrites.push({ node, l, inline, blocks })
    }
    const dirOf = new Map(dirWrites.map((w) => [w.node, { l: w.l, inline: w.inline }]))
    const dataEnd = nextBlock * BLOCK

    // inode positions (nid = offset / 32): the root in block 0, the rest after the data
    const inlineTail = (node: ErofsNode): number => {
      const d = dirOf.get(node)
      if (d) return d.inline ? d.l.size % BLOCK : 0
      if (node.chunks) return node.chunks.map.length * 4
      return node.tail?.length ?? 0
    }
    root.nid = ROOT_NID
    let pos = dataEnd
    for (const { node } of order) {
      if (node === root) continue
      const size = INODE_SIZE + xattrBytes.get(node)! + inlineTail(node)
      pos = roundUp(pos, 32)
      // what fits in a block stays in one (an inline tail must); a longer inline part (a large block
      // map) may cross blocks, since the kernel reads its entries one by one
      if (size <= BLOCK && (pos % BLOCK) + size > BLOCK) pos = roundUp(pos, BLOCK)
      node.nid = pos / 32
      pos += size
    }
    const end = roundUp(pos, BLOCK)

    // directory blocks, then the meta area, then block 0
    for (const { l, blocks } of dirWrites) {
      for (let b = 0; b < blocks; b++) {
        const blk = dirBlock(l, b)
        this.write([blk])
        this.endData()
      }
    }
    const meta = Buffer.alloc(end - dataEnd)
    for (const { node } of order) {
      if (node === root) continue
      this.#encodeInode(node, meta, node.nid * 32 - dataEnd, dirOf.get(node))
    }
    if (this.#pos !== dataEnd) throw new StrataError('INTERNAL', `EROFS layout: data ends at ${this.#pos}, planned ${dataEnd}`)
    this.write([meta])

    const block0 = Buffer.alloc(BLOCK)
    const sb = block0.subarray(SUPER_OFFSET)
    sb.writeUInt32LE(MAGIC, 0)
    sb.writeUInt8(BLOCK_BITS, 12) // blkszbits
    sb.writeUInt16LE(ROOT_NID, 14)
    sb.writeBigUInt64LE(BigInt(this.#inos), 16)
    sb.writeBigUInt64LE(BigInt(Math.max(0, buildTime.sec)), 24)
    sb.writeUInt32LE(buildTime.nsec >>> 0, 32)
    sb.writeUInt32LE(end / BLOCK, 36)
    uuid.copy(sb, 48, 0, 16)
    if (order.some(({ node }) => node.chunks !== null)) sb.writeUInt32LE(FEATURE_INCOMPAT_CHUNKED_FILE, 80)
    this.#encodeInode(root, block0, ROOT_NID * 32, dirOf.get(root))
    this.onWrite?.([block0], 0)
    this.#gather(block0, 0)
    this.#flush()
    return end
  }

  /** `dir`: the node's directory layout and whether its last block is inline. */
  #encodeInode(node: ErofsNode, buf: Buffer, at: number, dir: { l: DirLayout; inline: boolean } | undefined): void {
    const xattrs = encodeXattrs(node.xattrs, 'inode')
    const xbytes = node.xattrs.size === 0 ? 0 : 12 + xattrs.reduce((a, x) => a + align4(4 + x.suffix.length + x.value.length), 0)
    const tail = dir ? (dir.inline ? dirBlock(dir.l, dir.l.blocks.length - 1) : null) : node.tail
    const layout = node.chunks ? LAYOUT_CHUNK_BASED : tail && tail.length > 0 ? LAYOUT_FLAT_INLINE : LAYOUT_FLAT_PLAIN
    buf.writeUInt16LE(1 | (layout << 1), at) // extended inode
    buf.writeUInt16LE(xbytes === 0 ? 0 : (xbytes - 12) / 4 + 1, at + 2)
    buf.writeUInt16LE(node.mode & 0xffff, at + 4)
    buf.writeBigUInt64LE(BigInt(node.size), at + 8)
    const type = node.mode & S_IFMT
    // a chunked file's i_u is its chunk format: the chunk size's bits above the block's (4-byte block map entries)
    const iu = type === S_IFCHR || type === S_IFBLK ? newEncodeDev(node.rdevMajor, node.rdevMinor) : node.chunks ? node.chunks.bits - BLOCK_BITS : node.startBlock
    buf.writeUInt32LE(iu >>> 0, at + 16)
    buf.writeUInt32LE((node.nid & 0xffffffff) >>> 0, at + 20)
    buf.writeUInt32LE(node.uid >>> 0, at + 24)
    buf.writeUInt32LE(node.gid >>> 0, at + 28)
    // the kernel reads i_mtime as signed 64-bit seconds: times before 1970 are kept
    buf.writeBigInt64LE(BigInt(node.mtime.sec), at + 32)
    buf.writeUInt32LE(node.mtime.nsec >>> 0, at + 40)
    buf.writeUInt32LE(node.nlink >>> 0, at + 44)
    let p = at + INODE_SIZE
    if (xbytes > 0) {
      // ibody header: name filter 0 (unused without the feature), no shared xattrs
      p += 12
      for (const x of xattrs) {
        buf.writeUInt8(x.suffix.length, p)
        buf.writeUInt8(x.index, p + 1)
        buf.writeUInt16LE(x.value.length, p + 2)
        x.suffix.copy(buf, p + 4)
        x.value.copy(buf, p + 4 + x.suffix.length)
        p += align4(4 + x.suffix.length + x.value.length)
      }
    }
    if (node.chunks) {
      for (const blk of node.chunks.map) {
        buf.writeUInt32LE(blk, p)
        p += 4
      }
    } else if (tail) tail.copy(buf, p)
  }
}
