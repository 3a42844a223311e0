// A small deterministic POSIX (ustar + PAX) tar writer for layerToTar.
//
// tar-stream's packer is not used here: it writes uid/gid above 2097151 as
// 7777777, truncates mtimes to 32 bits, cannot carry nanoseconds and encodes
// PAX values as UTF-8 strings, which corrupts binary xattrs
// (security.capability). This writer emits ustar headers with empty
// uname/gname, and a PAX record set (sorted by key) only when a field does not
// fit: non-ASCII or long names, large ids/sizes, sub-second mtimes, xattrs.
//
// Headers, padding and small file data are gathered in a batch buffer (file
// data is read straight into it) and written to the output, and hashed, one
// batch at a time; large file data goes out in its own buffers.
import crypto from 'node:crypto'
import type { Writable } from 'node:stream'
import { toStrataError } from '../../../fs/common/errors.js'
import type { TarEntryType } from './tar-reader.js'
import type { Timespec } from './types.js'

export interface TarWriteHeader {
  /** Full entry name; directories end with '/'. */
  name: string
  type: TarEntryType
  mode: number
  uid: number
  gid: number
  size: number
  mtime: Timespec
  linkname?: string
  devmajor?: number
  devminor?: number
  xattrs?: Map<string, Buffer>
}

/** Reads up to `length` bytes of a file at `position` into `buf` at `offset`; returns the bytes read (0 at the end). */
export type ReadAt = (buf: Buffer, offset: number, length: number, position: number) => number

const TYPEFLAG: Record<TarEntryType, number> = {
  file: 0x30,
  link: 0x31,
  symlink: 0x32,
  'character-device': 0x33,
  'block-device': 0x34,
  directory: 0x35,
  fifo: 0x36,
}

const MAX_OCT7 = 0o7777777
const MAX_OCT11 = 0o77777777777
const ZEROS = Buffer.alloc(1024)
const EMPTY = Buffer.alloc(0)
/** Bytes gathered before they are written out. */
const BATCH = 256 * 1024
/** Large files are read and written in pieces of this size. */
const PIECE = 1024 * 1024

function yieldToLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve))
}

function isAscii(b: Buffer): boolean {
  for (let i = 0; i < b.length; i++) if (b[i]! >= 0x80) return false
  return true
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), value, Buffer.from('\n')])
  let len = body.length + 1
  while (String(len).length + body.length !== len) len = String(len).length + body.length
  return Buffer.concat([Buffer.from(String(len)), body])
}

/** Splits a name into ustar (prefix, name) fields, or null when it does not fit. */
function splitUstar(name: Buffer): [Buffer, Buffer] | null {
  if (name.length <= 100) return [EMPTY, name]
  for (let i = Math.min(name.length - 1, 155); i > 0; i--) {
    if (name[i] === 0x2f && name.length - i - 1 <= 100 && name.length - i - 1 > 0) return [name.subarray(0, i), name.subarray(i + 1)]
  }
  return null
}

function formatTime(t: Timespec): string {
  if (t.nsec === 0) return String(t.sec)
  // a PAX time is one decimal number: {-2 s, +0.25 s} is -1.75
  const [sign, sec, nsec] = t.sec < 0 ? ['-', -t.sec - 1, 1e9 - t.nsec] : ['', t.sec, t.nsec]
  return `${sign}${sec}.${String(nsec).padStart(9, '0').replace(/0+$/, '')}`
}

/** Writes `n` as `width - 1` octal digits and a NUL at b[at]. */
function putOct(b: Buffer, at: number, n: number, width: number): void {
  const s = n.toString(8)
  const digits = width - 1
  let i = 0
  for (; i < digits - s.length; i++) b[at + i] = 0x30
  b.write(s, at + i, 'latin1')
  b[at + digits] = 0
}

/** Encodes a ustar header into b[at, at + 512). */
function putUstarHeader(
  b: Buffer,
  at: number,
  f: {
    name: Buffer
    prefix: Buffer
    mode: number
    uid: number
    gid: number
    size: number
    mtime: number
    typeflag: number
    linkname: Buffer
    devmajor: number
    devminor: number
  },
): void {
  b.fill(0, at, at + 512)
  f.name.copy(b, at, 0, 100)
  putOct(b, at + 100, f.mode, 8)
  putOct(b, at + 108, f.uid, 8)
  putOct(b, at + 116, f.gid, 8)
  putOct(b, at + 124, f.size, 12)
  putOct(b, at + 136, f.mtime, 12)
  b.fill(0x20, at + 148, at + 156)
  b[at + 156] = f.typeflag
  f.linkname.copy(b, at + 157, 0, 100)
  b.write('ustar\u000000', at + 257, 'latin1')
  putOct(b, at + 329, f.devmajor, 8)
  putOct(b, at + 337, f.devminor, 8)
  f.prefix.copy(b, at + 345, 0, 155)
  let sum = 0
  for (let i = at; i < at + 512; i++) sum += b[i]!
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', at + 148, 'latin1')
}

export class TarWriter {
  #out: Writable
  #hash = crypto.createHash('sha256')
  #size = 0
  #error: unknown = null
  #buf: Buffer = Buffer.allocUnsafe(BATCH)
  #pos = 0
  #signal: AbortSignal | undefined

  /** `signal` stops the tar between two batches: the call writing fails with its reason. */
  constructor(out: Writable, signal?: AbortSignal) {
    this.#out = out
    this.#signal = signal
    out.on('error', (e) => {
      this.#error ??= e
    })
  }

  #check(): void {
    this.#signal?.throwIfAborted()
    if (this.#error !== null) throw toStrataError(this.#error, 'IO_ERROR')
    if (this.#out.destroyed) throw toStrataError(new Error('output stream destroyed before the tar was written'), 'IO_ERROR')
  }

  /**
   * Writes a buffer the writer no longer touches, waiting for the output to
   * drain, and lets the event loop run (file data is read synchronously, and
   * an output that drains at once would otherwise never let timers, signals
   * or a reader's destroy() in).
   */
  async #emit(buf: Buffer): Promise<void> {
    this.#check()
    if (buf.length === 0) return
    this.#hash.update(buf)
    this.#size += buf.length
    if (this.#out.write(buf)) {
      await yieldToLoop()
      return
    }
    if (this.#out.destroyed) throw toStrataError(this.#error ?? new Error('output stream destroyed before the tar was written'), 'IO_ERROR')
    await new Promise<void>((resolve, reject) => {
      const cleanup = (): void => {
        this.#out.off('drain', onDrain)
        this.#out.off('error', onError)
        this.#out.off('close', onClose)
      }
      const onDrain = (): void => {
        cleanup()
        resolve()
      }
      const onError = (e: unknown): void => {
        cleanup()
        reject(toStrataError(e, 'IO_ERROR'))
      }
      const onClose = (): void => {
        cleanup()
        if (this.#error !== null) reject(toStrataError(this.#error, 'IO_ERROR'))
        else reject(toStrataError(new Error('output stream closed before the tar was written'), 'IO_ERROR'))
      }
      this.#out.on('drain', onDrain)
      this.#out.on('error', onError)
      this.#out.on('close', onClose)
    })
    await yieldToLoop()
  }

  /** Writes out what the batch holds; the next batch is a fresh buffer (the output may still hold the old one). */
  async #flush(): Promise<void> {
    if (this.#pos === 0) return this.#check()
    const full = this.#buf.subarray(0, this.#pos)
    this.#buf = Buffer.allocUnsafe(BATCH)
    this.#pos = 0
    await this.#emit(full)
  }

  /** Makes room for `n` bytes in the batch (n ≤ BATCH). */
  async #reserve(n: number): Promise<void> {
    if (this.#pos + n > this.#buf.length) await this.#flush()
    else this.#check()
  }

  async #put(data: Buffer): Promise<void> {
    if (data.length > BATCH / 4) {
      await this.#flush()
      await this.#emit(data)
      return
    }
    await this.#reserve(data.length)
    data.copy(this.#buf, this.#pos)
    this.#pos += data.length
  }

  /** Zeros up to the next 512-byte boundary after `n` bytes of data. */
  async #pad(n: number): Promise<void> {
    const r = n % 512
    if (r === 0) return
    await this.#reserve(512 - r)
    this.#buf.fill(0, this.#pos, this.#pos + 512 - r)
    this.#pos += 512 - r
  }

  /** The header block(s) of an entry: a PAX record set where ustar cannot hold a value (and `extra`), then the ustar header. */
  async #header(h: TarWriteHeader, extra?: Map<string, Buffer>): Promise<number> {
    const pax = new Map<string, Buffer>(extra)
    const nameBuf = Buffer.from(h.name)
    let split = isAscii(nameBuf) ? splitUstar(nameBuf) : null
    if (split === null) {
      pax.set('path', nameBuf)
      split = [EMPTY, nameBuf.subarray(0, 100)]
    }
    let linkBuf = h.linkname ? Buffer.from(h.linkname) : EMPTY
    if (linkBuf.length > 100 || !isAscii(linkBuf)) {
      pax.set('linkpath', linkBuf)
      linkBuf = linkBuf.subarray(0, 100)
    }
    let uid = h.uid
    let gid = h.gid
    let size = h.type === 'file' ? h.size : 0
    if (uid > MAX_OCT7) {
      pax.set('uid', Buffer.from(String(uid)))
      uid = 0
    }
    if (gid > MAX_OCT7) {
      pax.set('gid', Buffer.from(String(gid)))
      gid = 0
    }
    const realSize = size
    if (size > MAX_OCT11) {
      pax.set('size', Buffer.from(String(size)))
      size = 0
    }
    let mtime = h.mtime.sec
    if (h.mtime.nsec !== 0 || mtime < 0 || mtime > MAX_OCT11) {
      pax.set('mtime', Buffer.from(formatTime(h.mtime)))
      mtime = Math.min(Math.max(mtime, 0), MAX_OCT11)
    }
    if (h.xattrs) for (const [k, v] of h.xattrs) pax.set(`SCHILY.xattr.${k}`, v)
    if (pax.size) {
      const keys = [...pax.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      const records = Buffer.concat(keys.map((k) => paxRecord(k, pax.get(k)!)))
      const base = h.name.replace(/\/+$/, '').split('/').pop() ?? ''
      const paxName = Buffer.from(('PaxHeaders/' + base.replace(/[^\x20-\x7e]/g, '_')).slice(0, 100))
      await this.#reserve(512)
      putUstarHeader(this.#buf, this.#pos, {
        name: paxName,
        prefix: EMPTY,
        mode: 0o644,
        uid: 0,
        gid: 0,
        size: records.length,
        mtime: 0,
        typeflag: 0x78, // 'x'
        linkname: EMPTY,
        devmajor: 0,
        devminor: 0,
      })
      this.#pos += 512
      await this.#put(records)
      await this.#pad(records.length)
    }
    await this.#reserve(512)
    putUstarHeader(this.#buf, this.#pos, {
      name: split[1],
      prefix: split[0],
      mode: h.mode & 0o7777,
      uid,
      gid,
      size,
      mtime,
      typeflag: TYPEFLAG[h.type],
      linkname: linkBuf,
      devmajor: h.devmajor ?? 0,
      devminor: h.devminor ?? 0,
    })
    this.#pos += 512
    return realSize
  }

  /** Writes one entry; `body` must yield exactly `size` bytes for files. */
  async entry(h: TarWriteHeader, body?: AsyncIterable<Buffer>): Promise<void> {
    const realSize = await this.#header(h)
    if (h.type !== 'file') return
    let n = 0
    if (body) {
      for await (const chunk of body) {
        n += chunk.length
        if (n > realSize) break
        await this.#put(chunk)
      }
    }
    if (n !== realSize) throw toStrataError(new Error(`${h.name}: file changed size while being read (${n} of ${realSize} bytes)`), 'IO_ERROR')
    await this.#pad(realSize)
  }

  /**
   * Writes a regular file entry whose `h.size` bytes are read with `read`
   * (synchronously, straight into the batch when they fit in it; in pieces
   * of a batch otherwise). Fewer bytes than `h.size` is an IO_ERROR.
   */
  async fileEntry(h: TarWriteHeader, read: ReadAt): Promise<void> {
    const size = await this.#header({ ...h, type: 'file' })
    await this.#copy(h.name, read, 0, size)
    await this.#pad(size)
  }

  /**
   * Writes a regular file that has holes as a GNU sparse member (PAX format
   * 1.0, which GNU tar, Go's archive/tar and so podman, skopeo and umoci
   * read): only the data segments of `map` (offset, length pairs, sorted,
   * disjoint, within `h.size`) are stored, after the map itself.
   */
  async sparseFileEntry(h: TarWriteHeader, map: number[], read: ReadAt): Promise<void> {
    const lines = [String(map.length / 2), ...map.map(String)]
    const mapText = Buffer.from(lines.join('\n') + '\n')
    const mapBytes = Math.ceil(mapText.length / 512) * 512
    let data = 0
    for (let k = 1; k < map.length; k += 2) data += map[k]!
    // GNU tar's placeholder name (DIR/GNUSparseFile.PID/NAME, with 0 for a pid: the same input gives the same bytes)
    const cut = h.name.lastIndexOf('/')
    const placeholder = `${h.name.slice(0, cut + 1)}GNUSparseFile.0/${h.name.slice(cut + 1)}`
    const records = new Map<string, Buffer>([
      ['GNU.sparse.major', Buffer.from('1')],
      ['GNU.sparse.minor', Buffer.from('0')],
      ['GNU.sparse.name', Buffer.from(h.name)],
      ['GNU.sparse.realsize', Buffer.from(String(h.size))],
    ])
    const stored = await this.#header({ ...h, type: 'file', name: placeholder, size: mapBytes + data }, records)
    await this.#put(mapText)
    await this.#pad(mapText.length)
    for (let k = 0; k < map.length; k += 2) await this.#copy(h.name, read, map[k]!, map[k + 1]!)
    await this.#pad(stored)
  }

  /** `length` bytes of a file from `position`, read straight into the batch when they fit in it, in pieces otherwise. */
  async #copy(name: string, read: ReadAt, position: number, length: number): Promise<void> {
    const short = (got: number): Error => toStrataError(new Error(`${name}: file changed size while being read (${position + got} of ${position + length} bytes)`), 'IO_ERROR')
    if (length <= BATCH) {
      await this.#reserve(length)
      let got = 0
      while (got < length) {
        const n = read(this.#buf, this.#pos + got, length - got, position + got)
        if (n === 0) throw short(got)
        got += n
      }
      this.#pos += length
      return
    }
    await this.#flush()
    let got = 0
    while (got < length) {
      const piece = Buffer.allocUnsafe(Math.min(PIECE, length - got))
      let filled = 0
      while (filled < piece.length) {
        const n = read(piece, filled, piece.length - filled, position + got + filled)
        if (n === 0) throw short(got + filled)
        filled += n
      }
      got += filled
      await this.#emit(piece)
    }
  }

  /** Writes the end-of-archive blocks; ends `out` when `end`. */
  async finish(end: boolean): Promise<{ diffId: string; size: number }> {
    await this.#put(ZEROS)
    await this.#flush()
    if (end) {
      await new Promise<void>((resolve, reject) => {
        this.#out.end((err?: Error | null) => {
          const e = this.#error ?? err ?? null
          if (e !== null) reject(toStrataError(e, 'IO_ERROR'))
          else resolve()
        })
      })
    }
    if (this.#error !== null) throw toStrataError(this.#error, 'IO_ERROR')
    return { diffId: 'sha256:' + this.#hash.digest('hex'), size: this.#size }
  }
}
