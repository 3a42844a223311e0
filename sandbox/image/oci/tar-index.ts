// Random access into an uncompressed tar file: one pass over the headers
// (file data is skipped by seeking, never read) builds a name → offset map,
// and entries are then streamed straight from the file. This is how image
// archives (`docker save`, OCI archives) are read without unpacking them:
// their blobs are read once, by the importer, from their place in the tar.
//
// Headers are checked as they are read: checksum, octal/base-256 numbers,
// data that would run past the end of the file (a truncated archive), the
// end-of-archive marker, PAX (`x`) and GNU long-name (`L`, `K`) records.
import fs from 'node:fs'
import { Readable } from 'node:stream'
import { Worker } from 'node:worker_threads'
import { StrataError } from '../../../fs/common/errors.js'
import type { TarScanReply } from './tar-index-worker.js'

const BLOCK = 512
const WINDOW = 64 * 1024
/** PAX and GNU long-name records larger than this are refused (a sane name is far smaller). */
const MAX_META_RECORD = 1024 * 1024

/** 'sparse': a file stored with `tar --sparse`, whose stored bytes are not its contents (never served as a blob) */
export type TarEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'sparse' | 'other'

export interface TarEntry {
  /** normalized name: no leading `./` or `/`, no trailing `/` */
  name: string
  type: TarEntryType
  /** offset of the data in the file */
  offset: number
  size: number
  linkname: string
}

function bad(file: string, why: string): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', `${file}: ${why}`)
}

/** Parses a numeric header field: octal text, or base-256 when the high bit of the first byte is set. */
export function parseTarNumber(buf: Buffer, file: string, what: string): number {
  if (buf.length > 0 && (buf[0]! & 0x80) !== 0) {
    if (buf[0] === 0xff) throw bad(file, `negative ${what} in a tar header`)
    let v = buf[0]! & 0x7f
    for (let i = 1; i < buf.length; i++) {
      v = v * 256 + buf[i]!
      if (!Number.isSafeInteger(v)) throw bad(file, `${what} in a tar header is too large`)
    }
    return v
  }
  const s = buf.toString('latin1').replace(/\0.*$/s, '').trim()
  if (s === '') return 0
  if (!/^[0-7]+$/.test(s)) {
    // printable input is quoted as it is; anything else (random bytes) as hex
    const shown = /^[\x20-\x7e]*$/.test(s) ? JSON.stringify(s) : `(bytes ${buf.toString('hex')})`
    throw bad(file, `malformed ${what} ${shown} in a tar header: not a tar archive, or a corrupt one`)
  }
  const v = parseInt(s, 8)
  if (!Number.isSafeInteger(v)) throw bad(file, `${what} in a tar header is too large`)
  return v
}

function cstr(buf: Buffer): string {
  const z = buf.indexOf(0)
  return buf.subarray(0, z < 0 ? buf.length : z).toString('utf8')
}

/** Checks a header's checksum (unsigned, as POSIX says; some old writers used signed bytes). */
function checksumOk(h: Buffer, stored: number): boolean {
  let unsigned = 0
  let signed = 0
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : h[i]!
    unsigned += b
    signed += b > 127 ? b - 256 : b
  }
  return stored === unsigned || stored === signed
}

function parsePax(data: Buffer, file: string): Map<string, string> {
  const out = new Map<string, string>()
  let pos = 0
  while (pos < data.length) {
    if (data[pos] === 0) break
    const sp = data.indexOf(0x20, pos)
    if (sp < 0) throw bad(file, 'malformed PAX record')
    const len = Number(data.subarray(pos, sp).toString('latin1'))
    if (!Number.isSafeInteger(len) || len <= sp - pos || pos + len > data.length) throw bad(file, 'malformed PAX record length')
    const rec = data.subarray(sp + 1, pos + len - 1).toString('utf8')
    const eq = rec.indexOf('=')
    if (eq < 0) throw bad(file, 'malformed PAX record')
    out.set(rec.slice(0, eq), rec.slice(eq + 1))
    pos += len
  }
  return out
}

/**
 * Normalizes an archive member name, `..` taken lexically as a layer's
 * entries are (`a/../b` is `b`); IMAGE_UNSAFE_PATH for absolute names and
 * names that climb out of the archive.
 */
export function normalizeArchiveName(name: string, file: string): string {
  if (name.startsWith('/')) throw new StrataError('IMAGE_UNSAFE_PATH', `${file}: archive member ${JSON.stringify(name)} is absolute`)
  const parts: string[] = []
  for (const c of name.split('/')) {
    if (c === '' || c === '.') continue
    if (c === '..') {
      if (parts.length === 0) throw new StrataError('IMAGE_UNSAFE_PATH', `${file}: archive member ${JSON.stringify(name)} climbs out of the archive`)
      parts.pop()
      continue
    }
    parts.push(c)
  }
  return parts.join('/')
}

/** The index of a tar file. */
export class TarIndex {
  readonly entries = new Map<string, TarEntry>()

  private constructor(readonly file: string) {}

  /** Scans the headers of `file`. Throws IMAGE_BAD_ARCHIVE, IMAGE_UNSAFE_PATH or IMAGE_DUPLICATE_ENTRY. */
  static async open(file: string): Promise<TarIndex> {
    const idx = new TarIndex(file)
    const fh = await fs.promises.open(file, 'r')
    try {
      const fileSize = (await fh.stat()).size
      const h = Buffer.alloc(BLOCK)
      let pos = 0
      let pax: Map<string, string> | null = null
      let longName: string | null = null
      let longLink: string | null = null
      // Headers of small members sit close together: read them through a 64 KiB
      // window instead of one 512-byte read each (a rootfs tar has ~10^4 of them).
      const win = Buffer.alloc(WINDOW)
      let winAt = -1
      let winLen = 0
      const readAt = async (buf: Buffer, at: number) => {
        if (buf.length <= WINDOW && !(winAt >= 0 && at >= winAt && at + buf.length <= winAt + winLen)) {
          const { bytesRead } = await fh.read(win, 0, Math.min(WINDOW, fileSize - at), at)
          winAt = at
          winLen = bytesRead
        }
        if (winAt >= 0 && at >= winAt && at + buf.length <= winAt + winLen) {
          win.copy(buf, 0, at - winAt, at - winAt + buf.length)
          return
        }
        const { bytesRead } = await fh.read(buf, 0, buf.length, at)
        if (bytesRead !== buf.length) throw bad(file, `truncated archive (ends inside a record at byte ${at})`)
      }
      for (;;) {
        if (pos + BLOCK > fileSize) {
          throw bad(file, pos === fileSize ? 'truncated archive (no end-of-archive marker)' : `truncated archive (partial header at byte ${pos})`)
        }
        await readAt(h, pos)
        if (h.every((b) => b === 0)) break // end-of-archive marker (the second zero block is optional)
        const stored = parseTarNumber(h.subarray(148, 156), file, 'checksum')
        if (!checksumOk(h, stored)) throw bad(file, `bad header checksum at byte ${pos} (not a tar file, or corrupt)`)
        const typeflag = String.fromCharCode(h[156]!)
        let size = parseTarNumber(h.subarray(124, 136), file, 'size')
        const magic = h.subarray(257, 263).toString('latin1')
        let name = cstr(h.subarray(0, 100))
        if (magic === 'ustar\0') {
          const prefix = cstr(h.subarray(345, 500))
          if (prefix) name = `${prefix}/${name}`
        }
        let linkname = cstr(h.subarray(157, 257))
        let dataAt = pos + BLOCK
        // an old GNU sparse header ('S') is followed by extension blocks of its map while byte 482 (then 504 of each) is set
        if (typeflag === 'S' && magic !== 'ustar\0') {
          const ext = Buffer.alloc(BLOCK)
          for (let more = h[482] !== 0; more; dataAt += BLOCK) {
            if (dataAt + BLOCK > fileSize) throw bad(file, `truncated archive (sparse map of ${JSON.stringify(name)})`)
            await readAt(ext, dataAt)
            more = ext[504] !== 0
          }
        }
        if (pax?.has('size')) {
          const s = Number(pax.get('size'))
          if (!Number.isSafeInteger(s) || s < 0) throw bad(file, 'malformed PAX size')
          size = s
        }
        // link, device, directory and fifo headers carry no data whatever their size field says (as Go's archive/tar reads them)
        if ('123456'.includes(typeflag)) size = 0
        const padded = Math.ceil(size / BLOCK) * BLOCK
        if (dataAt + size > fileSize) throw bad(file, `truncated archive (entry ${JSON.stringify(name)} needs ${size} bytes, the file ends first)`)
        if (typeflag === 'x' || typeflag === 'g' || typeflag === 'L' || typeflag === 'K') {
          if (size > MAX_META_RECORD) throw bad(file, `oversized ${typeflag} record (${size} bytes)`)
          const data = Buffer.alloc(size)
          await readAt(data, dataAt)
          if (typeflag === 'x') pax = parsePax(data, file)
          else if (typeflag === 'L') longName = cstr(data)
          else if (typeflag === 'K') longLink = cstr(data)
          pos = dataAt + padded
          continue
        }
        if (longName !== null) name = longName
        if (longLink !== null) linkname = longLink
        if (pax?.has('path')) name = pax.get('path')!
        if (pax?.has('linkpath')) linkname = pax.get('linkpath')!
        // PAX sparse files (GNU 0.x, 1.0): 1.0 names a placeholder in the header
        const paxSparse = pax !== null && [...pax.keys()].some((k) => k.startsWith('GNU.sparse.'))
        if (paxSparse && pax!.has('GNU.sparse.name')) name = pax!.get('GNU.sparse.name')!
        pax = null
        longName = null
        longLink = null
        const type: TarEntryType =
          typeflag === 'S' || (paxSparse && (typeflag === '0' || typeflag === '\0' || typeflag === '7'))
            ? 'sparse'
            : typeflag === '0' || typeflag === '\0' || typeflag === '7'
            ? 'file'
            : typeflag === '5'
              ? 'dir'
              : typeflag === '2'
                ? 'symlink'
                : typeflag === '1'
                  ? 'hardlink'
                  : 'other'
        const norm = normalizeArchiveName(name, file)
        if (norm !== '') {
          const prev = idx.entries.get(norm)
          if (prev && !(prev.type === 'dir' && type === 'dir')) throw new StrataError('IMAGE_DUPLICATE_ENTRY', `${file}: ${JSON.stringify(norm)} appears twice`)
          idx.entries.set(norm, { name: norm, type, offset: dataAt, size: type === 'file' ? size : 0, linkname })
        }
        pos = dataAt + padded
      }
    } finally {
      await fh.close()
    }
    return idx
  }

  /**
   * `open` on a worker thread: a rootfs tarball has ~10^4 headers, a few
   * hundred milliseconds of parsing that an import can run beside its own
   * work instead of before it. `signal` stops the worker (CANCELLED).
   */
  static scan(file: string, signal?: AbortSignal): Promise<TarIndex> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(new StrataError('CANCELLED', `indexing ${file} cancelled`))
      const w = new Worker(new URL('./tar-index-worker.js', import.meta.url), { workerData: { file } })
      let settled = false
      const settle = (f: () => void) => {
        if (settled) return
        settled = true
        signal?.removeEventListener('abort', onAbort)
        f()
      }
      const onAbort = () => {
        settle(() => reject(new StrataError('CANCELLED', `indexing ${file} cancelled`)))
        void w.terminate()
      }
      signal?.addEventListener('abort', onAbort, { once: true })
      w.once('message', (m: TarScanReply) =>
        settle(() => {
          if ('error' in m) return reject(StrataError.fromWire(m.error))
          const idx = new TarIndex(file)
          for (const e of m.entries) idx.entries.set(e.name, e)
          resolve(idx)
        }),
      )
      w.once('error', (e) => settle(() => reject(new StrataError('INTERNAL', `indexing ${file}: ${e.message}`, { cause: e }))))
      w.once('exit', (code) => settle(() => reject(new StrataError('INTERNAL', `indexing ${file}: worker exited with code ${code}`))))
    })
  }

  has(name: string): boolean {
    return this.resolve(name, false) !== null
  }

  /**
   * The regular-file entry a name stands for, following symlinks (relative
   * to the link's directory, as old `docker save` links duplicate layers) and
   * hard links inside the archive. null if there is none.
   */
  resolve(name: string, strict = true): TarEntry | null {
    let cur = normalizeArchiveName(name, this.file)
    for (let hops = 0; hops < 16; hops++) {
      const e = this.entries.get(cur)
      if (!e) return null
      if (e.type === 'file') return e
      // its stored bytes are a sparse map and data segments: an archive of blobs has no reason to hold one
      if (e.type === 'sparse') throw bad(this.file, `${JSON.stringify(cur)} is stored as a sparse file (tar --sparse): archive the image without --sparse`)
      if (e.type === 'hardlink') {
        cur = normalizeArchiveName(e.linkname, this.file)
        continue
      }
      if (e.type === 'symlink') {
        const dir = cur.includes('/') ? cur.slice(0, cur.lastIndexOf('/')) : ''
        const target = e.linkname.startsWith('/') ? e.linkname : dir ? `${dir}/${e.linkname}` : e.linkname
        const parts: string[] = []
        for (const c of target.split('/')) {
          if (c === '' || c === '.') continue
          if (c === '..') {
            if (parts.length === 0 && strict) throw new StrataError('IMAGE_UNSAFE_PATH', `${this.file}: symlink ${JSON.stringify(cur)} points outside the archive`)
            parts.pop()
            continue
          }
          parts.push(c)
        }
        if (target.startsWith('/') && strict) throw new StrataError('IMAGE_UNSAFE_PATH', `${this.file}: symlink ${JSON.stringify(cur)} is absolute`)
        cur = parts.join('/')
        continue
      }
      return null
    }
    if (strict) throw bad(this.file, `too many links resolving ${JSON.stringify(name)}`)
    return null
  }

  /** Streams an entry's data from the file. */
  open(entry: TarEntry): Readable {
    if (entry.size === 0) return Readable.from([], { objectMode: false })
    return fs.createReadStream(this.file, { start: entry.offset, end: entry.offset + entry.size - 1, highWaterMark: 1024 * 1024 })
  }

  /** Reads a whole entry into memory (for JSON documents; refuses more than `max` bytes). */
  async read(entry: TarEntry, max: number): Promise<Buffer> {
    if (entry.size > max) throw new StrataError('IMAGE_BAD_MANIFEST', `${this.file}: ${entry.name} is ${entry.size} bytes, more than the ${max} a document may have`)
    const fh = await fs.promises.open(this.file, 'r')
    try {
      const buf = Buffer.alloc(entry.size)
      const { bytesRead } = await fh.read(buf, 0, entry.size, entry.offset)
      if (bytesRead !== entry.size) throw bad(this.file, `truncated archive reading ${entry.name}`)
      return buf
    } finally {
      await fh.close()
    }
  }
}
