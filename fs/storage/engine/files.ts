// Chunk data files: one immutable-below-its-size file per content version,
// fanned out over 256 directories. All disk writes go through here so the
// fault switch covers every one of them.

import { promises as fsp } from 'node:fs'
import type { FileHandle } from 'node:fs/promises'
import * as path from 'node:path'
import { crc32c } from '@node-rs/crc32'
import { StrataError } from '../../common/errors.js'

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
}

const FANOUT = 256
const READ_PIECE = 1024 * 1024

function faultError(code: DiskFault, syscall: string, file: string): NodeJS.ErrnoException {
  const msg = code === 'ENOSPC' ? 'no space left on device' : 'i/o error'
  const e = new Error(`${code}: ${msg} (injected), ${syscall} '${file}'`) as NodeJS.ErrnoException
  e.code = code
  e.errno = code === 'ENOSPC' ? -28 : -5
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
    try {
      return await fn(fh)
    } finally {
      entry.refs--
      if (entry.dead && entry.refs === 0) closeQuiet(entry.fh)
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

  constructor(
    readonly root: string,
    private readonly durable: boolean,
    private readonly faults: EngineFaults,
  ) {}

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
    const fh = await fsp.open(target, mode === 'fresh' ? 'w' : 'r+')
    try {
      let len = edit.keep
      const w = edit.write
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
        await writeFully(fh, w.data, w.off)
        len = Math.max(len, w.off + w.data.length)
      }
      if (edit.size !== len) {
        this.checkFault('ftruncate', target)
        await fh.truncate(edit.size)
      }
      if (this.durable) await fh.datasync()
    } finally {
      await fh.close()
    }
    if (this.durable && mode === 'fresh') await this.syncDir(path.dirname(target))
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
