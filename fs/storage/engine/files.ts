// Chunk data files: one immutable-below-its-size file per content version,
// fanned out over 256 directories. All disk writes go through here so the
// fault switch covers every one of them.

import { constants as fsc, promises as fsp } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import * as path from 'node:path'
import { crc32c } from '../../common/crc32c.js'
import { BufferPool } from '../../common/buffer-pool.js'
import { StrataError } from '../../common/errors.js'
import { alignedMemory, directIoReady, DIRECT_IO_ALIGN } from '../../common/native.js'

export type DiskFault = 'ENOSPC' | 'EIO'

/**
 * Test-only fault switches. `failWrites` makes every data-file write fail as a
 * full or broken disk would until it is reset to null. The hooks run inside an
 * update between its persistent steps; an exception thrown by a hook aborts
 * the update exactly where a process crash would (no rollback), which is how
 * tests produce a DIRTY chunk without killing the process.
 */
export interface EngineFaults {
  failWrites: DiskFault | null
  beforeDataWrite: ((chunkId: Buffer) => void | Promise<void>) | null
  afterDataWrite: ((chunkId: Buffer) => void | Promise<void>) | null
  /** Opens with O_DIRECT fail with EINVAL, as on a filesystem without direct I/O. */
  refuseDirect?: boolean
}

const FANOUT = 256
const READ_PIECE = 1024 * 1024

/*
 * Large writes bypass the page cache (O_DIRECT), as 3FS's storage does. Three
 * replicas on one host would otherwise each copy every byte into new page
 * cache: on the benchmark VM that copy into freshly allocated pages cost ~3 ms
 * of kernel CPU per MiB per replica, most of a replicated write's CPU, where a
 * direct write costs ~0.2 ms. The offset, the length and the memory must be
 * aligned to the device's logical block: DIRECT_IO_ALIGN.
 */
/** Smaller writes stay buffered: their copy is cheap and a read soon after finds them in the page cache. */
const DIRECT_MIN = 64 * 1024
/** O_DIRECT is Linux's; elsewhere the constant is absent and every write is buffered. */
const O_DIRECT: number = (fsc as Record<string, number>).O_DIRECT ?? 0

/** Aligned bounce buffers for direct writes, shared by every target of the process. */
let bouncePool: BufferPool | null = null
function bounce(): BufferPool {
  return (bouncePool ??= new BufferPool(32 * 1024 * 1024, alignedMemory))
}

const FAULT_ERRNO = { ENOSPC: [-28, 'no space left on device'], EIO: [-5, 'i/o error'], EINVAL: [-22, 'invalid argument'] } as const

function faultError(code: DiskFault | 'EINVAL', syscall: string, file: string): NodeJS.ErrnoException {
  const [errno, msg] = FAULT_ERRNO[code]
  const e = new Error(`${code}: ${msg} (injected), ${syscall} '${file}'`) as NodeJS.ErrnoException
  e.code = code
  e.errno = errno
  e.syscall = syscall
  e.path = file
  return e
}

function isENOENT(e: unknown): boolean {
  return (e as NodeJS.ErrnoException)?.code === 'ENOENT'
}

/** What a new content version is made of: base[0, keep), zeros up to `size`, `write` laid over it. */
export interface ContentEdit {
  keep: number
  size: number
  write: { off: number; data: Buffer } | null
}

export type MaterializeMode = 'fresh' | 'inplace'

interface CachedFd {
  fh: Promise<FileHandle>
  refs: number
  /** Dropped from the cache; close once the last reader releases it. */
  dead: boolean
}

/**
 * Read-only file handles kept open across reads. An open/close pair costs two
 * thread-pool round trips, more than a page-cache read itself. A handle stays
 * valid for every byte range a record can still name, because files are never
 * rewritten below a live size; any path whose inode may change (unlink,
 * re-creation) is invalidated first.
 */
class FdCache {
  private readonly map = new Map<string, CachedFd>()

  constructor(private readonly capacity: number) {}

  async use<T>(file: string, fn: (fh: FileHandle) => Promise<T>): Promise<T> {
    const { fh, release } = await this.acquire(file)
    try {
      return await fn(fh)
    } finally {
      release()
    }
  }

  /** A handle kept open (and out of eviction's reach) until `release` is called, exactly once. */
  async acquire(file: string): Promise<{ fh: FileHandle; release: () => void }> {
    let e = this.map.get(file)
    if (e) {
      // refresh LRU position
      this.map.delete(file)
      this.map.set(file, e)
    } else {
      e = { fh: fsp.open(file, 'r'), refs: 0, dead: false }
      this.map.set(file, e)
      this.evict()
    }
    const entry = e
    entry.refs++
    let fh: FileHandle
    try {
      fh = await entry.fh
    } catch (err) {
      entry.refs--
      if (this.map.get(file) === entry) this.map.delete(file)
      throw err
    }
    let released = false
    return {
      fh,
      release: () => {
        if (released) return
        released = true
        entry.refs--
        if (entry.dead && entry.refs === 0) closeQuiet(entry.fh)
      },
    }
  }

  invalidate(file: string): void {
    const e = this.map.get(file)
    if (!e) return
    this.map.delete(file)
    this.retire(e)
  }

  clear(): void {
    for (const e of this.map.values()) this.retire(e)
    this.map.clear()
  }

  private evict(): void {
    for (const [file, e] of this.map) {
      if (this.map.size <= this.capacity) break
      this.map.delete(file)
      this.retire(e)
    }
  }

  private retire(e: CachedFd): void {
    e.dead = true
    if (e.refs === 0) closeQuiet(e.fh)
  }
}

function closeQuiet(fh: Promise<FileHandle>): void {
  fh.then((h) => h.close()).catch(() => undefined)
}

export class ChunkFiles {
  private readonly fds = new FdCache(512)
  /** outstanding leases by path (see lease) */
  private readonly leases = new Map<string, number>()
  /** false once the filesystem refused O_DIRECT (some FUSE and network filesystems, tmpfs before Linux 6.6) */
  private directOk: boolean

  constructor(
    readonly root: string,
    private readonly durable: boolean,
    private readonly faults: EngineFaults,
    directWrites = true,
  ) {
    this.directOk = directWrites && O_DIRECT !== 0
  }

  /** Writes counted by how they reached the disk (engine stats). */
  readonly writeCounts = { direct: 0, buffered: 0 }
  /** direct writes whose data first had to be copied into aligned memory (it arrived unaligned) */
  directCopies = 0

  async init(): Promise<void> {
    await fsp.mkdir(this.root, { recursive: true })
    const dirs: Promise<unknown>[] = []
    for (let i = 0; i < FANOUT; i++) dirs.push(fsp.mkdir(path.join(this.root, fanoutName(i)), { recursive: true }))
    await Promise.all(dirs)
  }

  pathOf(chunkId: Buffer, tag: string): string {
    // Hashing spreads chunks of one file (which share their id prefix) over all directories.
    return path.join(this.root, fanoutName(crc32c(chunkId) & (FANOUT - 1)), `${chunkId.toString('hex')}.${tag}`)
  }

  /**
   * Reads exactly [offset, offset+length) of a file whose record says it holds
   * at least that much, into a buffer from `alloc` (default: a new one).
   */
  async read(file: string, offset: number, length: number, alloc: (n: number) => Buffer = Buffer.allocUnsafe): Promise<Buffer> {
    const buf = alloc(length)
    if (length > 0) await this.readInto(file, buf, offset)
    return buf
  }

  /** Fills `buf` from `offset` of `file`. */
  async readInto(file: string, buf: Buffer, offset: number): Promise<void> {
    if (buf.length === 0) return
    await this.fds.use(file, (fh) => readFully(fh, buf, offset, file))
  }

  /**
   * An open read descriptor of `file` for a reader that sends from it later
   * (sendfile), held until `release()`. While any is held the file counts as
   * leased: the engine then writes no update into it in place, so the bytes a
   * lease holder may still send stay as they were, whatever versions follow.
   */
  async lease(file: string): Promise<{ fd: number; release: () => void }> {
    const { fh, release } = await this.fds.acquire(file)
    this.leases.set(file, (this.leases.get(file) ?? 0) + 1)
    let done = false
    return {
      fd: fh.fd,
      release: () => {
        if (done) return
        done = true
        const n = (this.leases.get(file) ?? 1) - 1
        if (n > 0) this.leases.set(file, n)
        else this.leases.delete(file)
        release()
      },
    }
  }

  isLeased(file: string): boolean {
    return this.leases.has(file)
  }

  /** CRC32C of [offset, offset+length) continuing from `initial`, read piecewise. */
  async crcRange(file: string, offset: number, length: number, initial: number): Promise<number> {
    if (length === 0) return initial
    return this.fds.use(file, async (fh) => {
      const buf = Buffer.allocUnsafe(Math.min(length, READ_PIECE))
      let crc = initial
      let pos = offset
      let left = length
      while (left > 0) {
        const piece = buf.subarray(0, Math.min(left, buf.length))
        await readFully(fh, piece, pos, file)
        crc = crc32c(piece, crc) >>> 0
        pos += piece.length
        left -= piece.length
      }
      return crc
    })
  }

  /**
   * Makes `target` hold the edited content. `fresh` builds a new file from
   * nothing (zero-filled wherever `edit` writes nothing); `inplace` extends
   * `target` itself past `edit.keep`, which is only legal when no live version
   * covers bytes at or beyond it (the caller guarantees that). Syncs the data
   * when the engine is durable.
   */
  async materialize(mode: MaterializeMode, target: string, edit: ContentEdit): Promise<void> {
    this.checkFault('open', target)
    if (mode === 'fresh') {
      if (edit.keep !== 0) throw new StrataError('INTERNAL', 'a fresh file cannot keep base bytes')
      // The name may belong to garbage a reader still has open; give readers a new handle.
      this.fds.invalidate(target)
    }
    const w = edit.write
    const flags = mode === 'fresh' ? fsc.O_WRONLY | fsc.O_CREAT | fsc.O_TRUNC : fsc.O_RDWR
    let direct = this.directOk && w !== null && w.data.length >= DIRECT_MIN && w.off % DIRECT_IO_ALIGN === 0 && w.data.length % DIRECT_IO_ALIGN === 0
    let fh: FileHandle
    try {
      if (direct && this.faults.refuseDirect) throw faultError('EINVAL', 'open', target)
      fh = await fsp.open(target, direct ? flags | O_DIRECT : flags)
    } catch (e) {
      if (!direct || (e as NodeJS.ErrnoException).code !== 'EINVAL') throw e
      this.directOk = direct = false
      fh = await fsp.open(target, flags)
    }
    try {
      let len = edit.keep
      // A pure append needs nothing below it to be zero, so leftovers past the
      // end (an abandoned append) may stay: they lie beyond every live size.
      const pureAppend = mode === 'inplace' && w !== null && w.off === edit.keep && edit.size === w.off + w.data.length
      if (mode === 'inplace' && !pureAppend) {
        const st = await fh.stat()
        if (st.size < edit.keep) {
          throw new StrataError('IO_ERROR', `data file ${target} is ${st.size} bytes, its record needs ${edit.keep}`)
        }
        // Cut leftovers (a truncation, an abandoned append) so zero-filled ranges really read back as zeros.
        if (st.size > edit.keep) {
          this.checkFault('ftruncate', target)
          await fh.truncate(edit.keep)
        }
      }
      if (w) {
        this.checkFault('write', target)
        if (direct) direct = await this.writeDirect(fh, target, w.data, w.off)
        else await writeFully(fh, w.data, w.off)
        this.writeCounts[direct ? 'direct' : 'buffered']++
        len = Math.max(len, w.off + w.data.length)
      }
      if (edit.size !== len) {
        this.checkFault('ftruncate', target)
        await fh.truncate(edit.size)
      }
      // A new file's directory entry must be durable too; the two syncs are
      // independent, and on ext4 they usually share one journal commit.
      if (this.durable) await Promise.all([fh.datasync(), mode === 'fresh' ? this.syncDir(path.dirname(target)) : null])
    } finally {
      await fh.close()
    }
  }

  /**
   * Writes `data` at `position` through an O_DIRECT handle: as it is when its
   * memory is aligned (chunk writes arrive so, see DIRECT_IO_ALIGN), else
   * from an aligned copy. Should
   * the device refuse the alignment after all (EINVAL), the data goes through
   * a buffered handle instead and later writes stay buffered. True when the
   * data went direct.
   */
  private async writeDirect(fh: FileHandle, file: string, data: Buffer, position: number): Promise<boolean> {
    const pool = bounce()
    const ready = directIoReady(data)
    const b = ready ? data : pool.take(data.length)
    try {
      if (!ready) {
        data.copy(b)
        this.directCopies++
      }
      await writeFully(fh, b, position)
      return true
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EINVAL') throw e
      this.directOk = false
      const bh = await fsp.open(file, fsc.O_RDWR)
      try {
        await writeFully(bh, data, position)
      } finally {
        await bh.close()
      }
      return false
    } finally {
      if (!ready) pool.release(b)
    }
  }

  async unlinkQuiet(file: string): Promise<void> {
    this.fds.invalidate(file)
    try {
      await fsp.unlink(file)
    } catch (e) {
      if (!isENOENT(e)) throw e
    }
  }

  /** Closes cached handles (engine close). */
  closeAll(): void {
    this.fds.clear()
  }

  /** Lists data files of one fanout directory (used to reclaim orphans). */
  async listFanout(i: number): Promise<string[]> {
    try {
      return await fsp.readdir(path.join(this.root, fanoutName(i)))
    } catch (e) {
      if (isENOENT(e)) return []
      throw e
    }
  }

  fanoutPath(i: number, name: string): string {
    return path.join(this.root, fanoutName(i), name)
  }

  static get fanoutCount(): number {
    return FANOUT
  }

  async removeAll(): Promise<void> {
    this.fds.clear()
    await fsp.rm(this.root, { recursive: true, force: true })
    await this.init()
  }

  private async syncDir(dir: string): Promise<void> {
    const dh = await fsp.open(dir, 'r')
    try {
      await dh.sync()
    } finally {
      await dh.close()
    }
  }

  private checkFault(syscall: string, file: string): void {
    const f = this.faults.failWrites
    if (f) throw faultError(f, syscall, file)
  }
}

function fanoutName(i: number): string {
  return i.toString(16).padStart(2, '0')
}

async function readFully(fh: FileHandle, buf: Buffer, position: number, file: string): Promise<void> {
  let done = 0
  while (done < buf.length) {
    const { bytesRead } = await fh.read(buf, done, buf.length - done, position + done)
    if (bytesRead === 0) {
      throw new StrataError('IO_ERROR', `data file ${file} ends at ${position + done}, record needs ${position + buf.length}`)
    }
    done += bytesRead
  }
}

async function writeFully(fh: FileHandle, data: Buffer, position: number): Promise<void> {
  let done = 0
  while (done < data.length) {
    const { bytesWritten } = await fh.write(data, done, data.length - done, position + done)
    done += bytesWritten
  }
}
