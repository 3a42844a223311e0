// A small deterministic POSIX (ustar + PAX) tar writer for layerToTar.
//
// tar-stream's packer is not used here: it writes uid/gid above 2097151 as
// 7777777, truncates mtimes to 32 bits, cannot carry nanoseconds and encodes
// PAX values as UTF-8 strings, which corrupts binary xattrs
// (security.capability). This writer emits ustar headers with empty
// uname/gname, and a PAX record set (sorted by key) only when a field does not
// fit: non-ASCII or long names, large ids/sizes, sub-second mtimes, xattrs.
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

const TYPEFLAG: Record<TarEntryType, string> = {
  file: '0',
  link: '1',
  symlink: '2',
  'character-device': '3',
  'block-device': '4',
  directory: '5',
  fifo: '6',
}

const MAX_OCT7 = 0o7777777
const MAX_OCT11 = 0o77777777777
const ZEROS = Buffer.alloc(1024)

function isAscii(b: Buffer): boolean {
  for (const x of b) if (x >= 0x80) return false
  return true
}

function oct(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, '0') + '\0'
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), value, Buffer.from('\n')])
  let len = body.length + 1
  while (String(len).length + body.length !== len) len = String(len).length + body.length
  return Buffer.concat([Buffer.from(String(len)), body])
}

/** Splits a name into ustar (prefix, name) fields, or null when it does not fit. */
function splitUstar(name: Buffer): [Buffer, Buffer] | null {
  if (name.length <= 100) return [Buffer.alloc(0), name]
  for (let i = Math.min(name.length - 1, 155); i > 0; i--) {
    if (name[i] === 0x2f && name.length - i - 1 <= 100 && name.length - i - 1 > 0) return [name.subarray(0, i), name.subarray(i + 1)]
  }
  return null
}

function formatTime(t: Timespec): string {
  if (t.nsec === 0) return String(t.sec)
  return `${t.sec}.${String(t.nsec).padStart(9, '0').replace(/0+$/, '')}`
}

function ustarHeader(f: {
  name: Buffer
  prefix: Buffer
  mode: number
  uid: number
  gid: number
  size: number
  mtime: number
  typeflag: string
  linkname: Buffer
  devmajor: number
  devminor: number
}): Buffer {
  const b = Buffer.alloc(512)
  f.name.copy(b, 0, 0, 100)
  b.write(oct(f.mode, 8), 100, 'latin1')
  b.write(oct(f.uid, 8), 108, 'latin1')
  b.write(oct(f.gid, 8), 116, 'latin1')
  b.write(oct(f.size, 12), 124, 'latin1')
  b.write(oct(f.mtime, 12), 136, 'latin1')
  b.write('        ', 148, 'latin1')
  b.write(f.typeflag, 156, 'latin1')
  f.linkname.copy(b, 157, 0, 100)
  b.write('ustar\u000000', 257, 'latin1')
  b.write(oct(f.devmajor, 8), 329, 'latin1')
  b.write(oct(f.devminor, 8), 337, 'latin1')
  f.prefix.copy(b, 345, 0, 155)
  let sum = 0
  for (const x of b) sum += x
  b.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1')
  return b
}

export class TarWriter {
  #out: Writable
  #hash = crypto.createHash('sha256')
  #size = 0
  #error: unknown = null

  constructor(out: Writable) {
    this.#out = out
    out.on('error', (e) => {
      this.#error ??= e
    })
  }

  async #write(buf: Buffer): Promise<void> {
    if (this.#error !== null) throw toStrataError(this.#error, 'IO_ERROR')
    if (this.#out.destroyed) throw toStrataError(new Error('output stream destroyed before the tar was written'), 'IO_ERROR')
    if (buf.length === 0) return
    this.#hash.update(buf)
    this.#size += buf.length
    if (this.#out.write(buf)) return
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
  }

  async #pad(n: number): Promise<void> {
    const r = n % 512
    if (r) await this.#write(ZEROS.subarray(0, 512 - r))
  }

  /** Writes one entry; `body` must yield exactly `size` bytes for files. */
  async entry(h: TarWriteHeader, body?: AsyncIterable<Buffer>): Promise<void> {
    const pax = new Map<string, Buffer>()
    const nameBuf = Buffer.from(h.name)
    let split = isAscii(nameBuf) ? splitUstar(nameBuf) : null
    if (split === null) {
      pax.set('path', nameBuf)
      split = [Buffer.alloc(0), nameBuf.subarray(0, 100)]
    }
    let linkBuf = Buffer.from(h.linkname ?? '')
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
    for (const [k, v] of h.xattrs ?? []) pax.set(`SCHILY.xattr.${k}`, v)
    if (pax.size) {
      const keys = [...pax.keys()].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))
      const records = Buffer.concat(keys.map((k) => paxRecord(k, pax.get(k)!)))
      const base = h.name.replace(/\/+$/, '').split('/').pop() ?? ''
      const paxName = Buffer.from(('PaxHeaders/' + base.replace(/[^\x20-\x7e]/g, '_')).slice(0, 100))
      await this.#write(
        ustarHeader({
          name: paxName,
          prefix: Buffer.alloc(0),
          mode: 0o644,
          uid: 0,
          gid: 0,
          size: records.length,
          mtime: 0,
          typeflag: 'x',
          linkname: Buffer.alloc(0),
          devmajor: 0,
          devminor: 0,
        }),
      )
      await this.#write(records)
      await this.#pad(records.length)
    }
    await this.#write(
      ustarHeader({
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
      }),
    )
    if (h.type !== 'file') return
    let n = 0
    if (body) {
      for await (const chunk of body) {
        n += chunk.length
        if (n > realSize) break
        await this.#write(chunk)
      }
    }
    if (n !== realSize) throw toStrataError(new Error(`${h.name}: file changed size while being read (${n} of ${realSize} bytes)`), 'IO_ERROR')
    await this.#pad(realSize)
  }

  /** Writes the end-of-archive blocks; ends `out` when `end`. */
  async finish(end: boolean): Promise<{ diffId: string; size: number }> {
    await this.#write(ZEROS)
    if (end) {
      await new Promise<void>((resolve, reject) => {
        this.#out.end(() => (this.#error !== null ? reject(toStrataError(this.#error, 'IO_ERROR')) : resolve()))
      })
    }
    if (this.#error !== null) throw toStrataError(this.#error, 'IO_ERROR')
    return { diffId: 'sha256:' + this.#hash.digest('hex'), size: this.#size }
  }
}
