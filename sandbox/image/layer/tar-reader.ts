// Streaming OCI layer tar reader: one normalized header and a body per
// entry; malformed input is IMAGE_BAD_ARCHIVE (with an Error as cause); the
// end-of-archive block is required, so a stream cut at an entry boundary
// counts as truncated.
//
// It parses the input buffers in place (bodies are slices of them, never
// copied) and reads exactly as tar-stream 3.2.2 did before it, quirks
// included: zero blocks are skipped wherever they appear; ustar (`ustar\0`)
// and GNU (`ustar  \0`) headers only (v7 is refused); a directory entry has
// no data whatever its size field says; PAX (`x`), PAX global (`g`, merged
// into the next `x` record set only) and GNU long names (`L`, `K`, `N`) of
// at most 4 MiB; a PAX `size` overrides the header's. PAX values are UTF-8
// strings except SCHILY.xattr.* values, which keep their raw bytes
// (binary xattrs such as security.capability). Sparse files (tar-sparse.ts)
// read at their full size, holes as zeros.
import type { Readable } from 'node:stream'
import { StrataError, toStrataError } from '../../../fs/common/errors.js'
import { checkSparseMap, checkSparseHoles, paxSparse, SPARSE_HOLE_CAP, Sparse1Parser, SparseCursor, type SparseMap } from './tar-sparse.js'
import type { Timespec } from './types.js'

export type TarEntryType = 'file' | 'link' | 'symlink' | 'character-device' | 'block-device' | 'directory' | 'fifo'

export interface TarEntryHeader {
  /** Name as stored (after PAX path / GNU long name), not yet normalized. */
  name: string
  type: TarEntryType
  /** Permission bits including setuid, setgid and sticky (07777). */
  mode: number
  uid: number
  gid: number
  size: number
  mtime: Timespec
  /** Symlink target or hard link target name; '' for other types. */
  linkname: string
  devmajor: number
  devminor: number
  /** SCHILY.xattr.* records, raw values. */
  xattrs: Map<string, Buffer>
}

export interface TarEntry {
  header: TarEntryHeader
  /** The entry's data; read it to the end before asking for the next entry (it is skipped otherwise). */
  body: AsyncIterable<Buffer>
}

const BLOCK = 512
const XATTR_KEY = 'SCHILY.xattr.'
/** PAX and GNU long-name records larger than this are refused (tar-stream's limit). */
const MAX_META_RECORD = 4 * 1024 * 1024
const MAX_ID = 0xfffffffe
/** Input chunks kept in the queue array before it is compacted. */
const COMPACT_AT = 64
const EMPTY = Buffer.alloc(0)

function bad(msg: string, cause?: unknown): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', msg, cause === undefined ? undefined : { cause })
}

/** A malformed-input error with an Error cause, as tar-stream's errors were reported. */
function tarError(why: string): StrataError {
  return bad(`tar: ${why}`, new Error(why))
}

function padOf(size: number): number {
  const r = size % BLOCK
  return r === 0 ? 0 : BLOCK - r
}

// --- header fields (tar-stream 3.2.2 semantics)

function cstr(b: Buffer, start: number, len: number): string {
  let end = start
  const stop = start + len
  while (end < stop && b[end] !== 0) end++
  return b.toString('utf8', start, end)
}

function parse256(b: Buffer, start: number, len: number): number {
  const first = b[start]
  let positive: boolean
  if (first === 0x80) positive = true
  else if (first === 0xff) positive = false
  else return NaN
  let sum = 0
  let mul = 1
  for (let i = start + len - 1; i > start; i--) {
    const byte = b[i]!
    sum += (positive ? byte : 0xff - byte) * mul
    mul *= 256
  }
  // a negative number is two's complement (GNU tar's base-256: 0xff…ff is -1); tar-stream 3.2.2 read it one too high
  return positive ? sum : -(sum + 1)
}

function decodeOct(b: Buffer, start: number, len: number): number {
  if (b[start]! & 0x80) return parse256(b, start, len)
  const stop = start + len
  let off = start
  while (off < stop && b[off] === 32) off++
  let end = off
  while (end < stop && b[end] !== 32) end++
  while (off < end && b[off] === 0) off++
  if (end === off) return 0
  // parseInt stops at the first non-octal character (a NUL terminator)
  let v = 0
  let i = off
  for (; i < end; i++) {
    const c = b[i]!
    if (c < 48 || c > 55) break
    v = v * 8 + (c - 48)
  }
  return i === off ? parseInt(b.toString('utf8', off, end), 8) : v
}

function cksum(b: Buffer): number {
  let sum = 8 * 32
  for (let i = 0; i < 148; i++) sum += b[i]!
  for (let i = 156; i < BLOCK; i++) sum += b[i]!
  return sum
}

function isUstar(b: Buffer): boolean {
  return b[257] === 0x75 && b[258] === 0x73 && b[259] === 0x74 && b[260] === 0x61 && b[261] === 0x72 && b[262] === 0
}

function isGnu(b: Buffer): boolean {
  return b[257] === 0x75 && b[258] === 0x73 && b[259] === 0x74 && b[260] === 0x61 && b[261] === 0x72 && b[262] === 0x20 && b[263] === 0x20 && b[264] === 0
}

type RawType = TarEntryType | 'contiguous-file' | 'pax-header' | 'pax-global-header' | 'gnu-long-path' | 'gnu-long-link-path' | null

function typeOf(flag: number): RawType {
  switch (flag) {
    case 0:
      return 'file'
    case 1:
      return 'link'
    case 2:
      return 'symlink'
    case 3:
      return 'character-device'
    case 4:
      return 'block-device'
    case 5:
      return 'directory'
    case 6:
      return 'fifo'
    case 7:
      return 'contiguous-file'
    case 72:
      return 'pax-header'
    case 55:
      return 'pax-global-header'
    case 27:
      return 'gnu-long-link-path'
    case 28:
    case 30:
      return 'gnu-long-path'
  }
  return null
}

interface Pax {
  values: Map<string, string>
  /** raw bytes of SCHILY.xattr.* values */
  raw: Map<string, Buffer> | null
  /** GNU sparse 0.0: the repeated GNU.sparse.offset / GNU.sparse.numbytes records, in order */
  sparse00: string[][] | null
}

function decodePax(buf: Buffer): Pax {
  const values = new Map<string, string>()
  let raw: Map<string, Buffer> | null = null
  let sparse00: string[][] | null = null
  while (buf.length) {
    let i = 0
    while (i < buf.length && buf[i] !== 32) i++
    const len = parseInt(buf.toString('utf8', 0, i), 10)
    if (!len) break
    const rec = buf.subarray(i + 1, len - 1)
    const eq = rec.indexOf(61)
    if (eq === -1) break
    const key = rec.toString('utf8', 0, eq)
    values.set(key, rec.toString('utf8', eq + 1))
    if (key === 'GNU.sparse.offset' || key === 'GNU.sparse.numbytes') (sparse00 ??= []).push([key, values.get(key)!])
    if (key.startsWith(XATTR_KEY)) (raw ??= new Map()).set(key, Buffer.from(rec.subarray(eq + 1)))
    buf = buf.subarray(len)
  }
  return { values, raw, sparse00 }
}

function parseId(v: string | undefined, fallback: number, what: string, name: string): number {
  if (v === undefined) {
    if (!Number.isSafeInteger(fallback) || fallback < 0 || fallback > MAX_ID) throw bad(`${name}: invalid ${what} ${fallback}`)
    return fallback
  }
  if (!/^[0-9]{1,10}$/.test(v) || Number(v) > MAX_ID) throw bad(`${name}: invalid PAX ${what} ${JSON.stringify(v)}`)
  return Number(v)
}

function parsePaxTime(s: string, name: string): Timespec {
  const m = /^(-?)([0-9]{1,15})(?:\.([0-9]*))?$/.exec(s)
  if (!m) throw bad(`${name}: invalid PAX mtime ${JSON.stringify(s)}`)
  const sec = Number(m[2])
  const nsec = Number(((m[3] ?? '') + '000000000').slice(0, 9))
  if (m[1] === '-') return nsec === 0 ? { sec: -sec, nsec: 0 } : { sec: -sec - 1, nsec: 1e9 - nsec }
  return { sec, nsec }
}

const NO_XATTRS: ReadonlyMap<string, Buffer> = new Map()

/** Why an entry of typeflag `flag` (a header's byte 156) cannot be read, in words. */
function unsupportedType(flag: number): string {
  const c = String.fromCharCode(flag)
  if (c === 'V') return 'is a volume label (tar --label): volume entries are not supported'
  if (c === 'M') return 'continues a file from another volume (tar --multi-volume): multi-volume archives are not supported'
  const shown = flag >= 0x21 && flag <= 0x7e ? `'${c}'` : `0x${flag.toString(16).padStart(2, '0')}`
  return `unsupported tar entry type ${shown}`
}

function convertHeader(
  b: Buffer,
  type: RawType,
  name: string,
  linkname: string,
  size: number,
  pax: Pax | null,
  globalRaw: Map<string, Buffer> | null,
): TarEntryHeader {
  let t: TarEntryType
  switch (type) {
    case 'file':
    case 'contiguous-file':
      t = 'file'
      break
    case 'link':
    case 'symlink':
    case 'character-device':
    case 'block-device':
    case 'directory':
    case 'fifo':
      t = type
      break
    default:
      throw bad(`${JSON.stringify(name)}: ${unsupportedType(b[156]!)}`)
  }
  const values = pax?.values
  let xattrs: Map<string, Buffer> = NO_XATTRS as Map<string, Buffer>
  if (values) {
    const keys: string[] = []
    for (const k of values.keys()) {
      if (k.startsWith(XATTR_KEY)) keys.push(k)
    }
    if (keys.length) {
      xattrs = new Map()
      for (const k of keys.sort()) {
        const xname = k.slice(XATTR_KEY.length)
        if (xname === '') throw bad(`${JSON.stringify(name)}: empty xattr name`)
        xattrs.set(xname, pax!.raw?.get(k) ?? globalRaw?.get(k) ?? Buffer.from(values.get(k)!, 'utf8'))
      }
    }
  }
  if (!Number.isSafeInteger(size) || size < 0) throw bad(`${JSON.stringify(name)}: invalid size ${size}`)
  const rawMode = decodeOct(b, 100, 8)
  if (!Number.isInteger(rawMode)) throw bad(`${JSON.stringify(name)}: invalid mode`)
  let mtime: Timespec
  const paxTime = values?.get('mtime')
  if (paxTime !== undefined) mtime = parsePaxTime(paxTime, name)
  else {
    const ms = 1000 * decodeOct(b, 136, 12)
    // as a Date: NaN and times past ±8.64e15 ms are invalid
    if (!Number.isFinite(ms) || Math.abs(ms) > 8.64e15) throw bad(`${JSON.stringify(name)}: invalid mtime`)
    mtime = { sec: Math.floor(ms / 1000), nsec: 0 }
  }
  if ((t === 'link' || t === 'symlink') && linkname === '') throw bad(`${JSON.stringify(name)}: ${t} without a target`)
  return {
    name,
    type: t,
    mode: rawMode & 0o7777,
    uid: parseId(values?.get('uid'), decodeOct(b, 108, 8), 'uid', name),
    gid: parseId(values?.get('gid'), decodeOct(b, 116, 8), 'gid', name),
    size,
    mtime,
    linkname: t === 'link' || t === 'symlink' ? linkname : '',
    devmajor: decodeOct(b, 329, 8) || 0,
    devminor: decodeOct(b, 337, 8) || 0,
    // a fresh map per entry (callers may keep or change it)
    xattrs: xattrs === NO_XATTRS ? new Map() : xattrs,
  }
}

/**
 * Pull-based tar parser over a stream. `next()` returns the next entry's
 * header (skipping what is left of the previous entry's data); the current
 * entry's data is read with `chunk()` (any size, as it arrives), `buffered()`
 * (what has arrived, without waiting) or `readAll()` (all of it, as slices).
 * Call `close()` when done: it destroys the input unless the archive was read
 * to its end.
 */
export class TarReader {
  readonly #input: Readable
  readonly #it: AsyncIterator<Buffer | string>
  #chunks: Buffer[] = []
  #head = 0
  #off = 0
  #buffered = 0
  /** bytes received from the input */
  #total = 0
  /** bytes taken from the queue */
  #consumed = 0
  #inputDone = false
  #finished = false
  /** data bytes of the current entry still unread, then its padding */
  #remaining = 0
  #pad = 0
  /** end of the last entry's data blocks (its padding included) */
  #endOfData = 0
  #paxGlobal: Pax | null = null
  /** the current entry is a sparse file: its map and the read position (#remaining counts stored bytes) */
  #sparse: SparseCursor | null = null
  /** hole bytes of the sparse files read so far (their size beyond their stored data) */
  #holes = 0
  readonly #holeCap: number

  /** `holeCap`: most hole bytes the archive's sparse files may expand to, summed (default SPARSE_HOLE_CAP) */
  constructor(input: Readable, opts: { holeCap?: number } = {}) {
    this.#input = input
    this.#holeCap = opts.holeCap ?? SPARSE_HOLE_CAP
    this.#it = (input as AsyncIterable<Buffer | string>)[Symbol.asyncIterator]()
  }

  /** Data bytes of the current entry not read yet (of a sparse file: holes included). */
  get remaining(): number {
    return this.#sparse ? this.#sparse.remaining : this.#remaining
  }

  async #pull(): Promise<boolean> {
    if (this.#inputDone) return false
    let r: IteratorResult<Buffer | string>
    try {
      r = await this.#it.next()
    } catch (e) {
      this.#inputDone = true
      throw toStrataError(e, 'IO_ERROR')
    }
    if (r.done) {
      this.#inputDone = true
      return false
    }
    const buf = typeof r.value === 'string' ? Buffer.from(r.value) : r.value
    if (buf.length === 0) return true
    if (this.#head >= COMPACT_AT) {
      this.#chunks = this.#chunks.slice(this.#head)
      this.#head = 0
    }
    this.#chunks.push(buf)
    this.#buffered += buf.length
    this.#total += buf.length
    return true
  }

  /** Waits until `n` bytes are buffered; false when the input ends first. */
  async #fill(n: number): Promise<boolean> {
    while (this.#buffered < n) if (!(await this.#pull())) return false
    return true
  }

  /** Up to `max` buffered bytes from the front, as one slice of an input buffer. */
  #takeSome(max: number): Buffer {
    const c = this.#chunks[this.#head]!
    const avail = c.length - this.#off
    let out: Buffer
    if (max >= avail) {
      out = this.#off === 0 ? c : c.subarray(this.#off)
      this.#chunks[this.#head++] = undefined as unknown as Buffer
      this.#off = 0
    } else {
      out = c.subarray(this.#off, this.#off + max)
      this.#off += max
    }
    this.#buffered -= out.length
    this.#consumed += out.length
    return out
  }

  /** Exactly `n` buffered bytes, contiguous (copied only when they span input buffers). */
  #take(n: number): Buffer {
    if (n === 0) return EMPTY
    const first = this.#takeSome(n)
    if (first.length === n) return first
    const out = Buffer.allocUnsafe(n)
    first.copy(out, 0)
    let at = first.length
    while (at < n) {
      const p = this.#takeSome(n - at)
      p.copy(out, at)
      at += p.length
    }
    return out
  }

  async #skip(n: number): Promise<void> {
    while (n > 0) {
      while (this.#buffered === 0) if (!(await this.#pull())) throw tarError('Unexpected end of data')
      n -= this.#takeSome(n).length
    }
  }

  /** The current entry's data map (offset, length pairs) when it is a sparse file, else null. */
  get sparseMap(): SparseMap | null {
    return this.#sparse?.map ?? null
  }

  /** Bytes of hole at the current entry's read position (0 in data, at the end, or when the entry is not sparse). */
  holeAhead(): number {
    return this.#sparse?.holeAhead() ?? 0
  }

  /** Passes over `n` bytes of a hole of the current (sparse) entry without handing out its zeros. */
  skipHole(n: number): void {
    const sp = this.#sparse
    if (!sp || n > sp.holeAhead()) throw new StrataError('INTERNAL', `tar reader: ${n} bytes are not a hole here`)
    sp.pos += n
  }

  /** The current entry's data that has already arrived (at most `max` bytes), without waiting; null when none has. */
  // (in a sparse file's hole: null, so that a caller draining what has arrived writes zeros a piece at a time)
  buffered(max = Infinity): Buffer | null {
    const sp = this.#sparse
    if (sp) {
      const ahead = sp.dataAhead()
      if (ahead === 0) return null
      max = Math.min(max, ahead)
    }
    if (this.#remaining === 0 || this.#buffered === 0) return null
    const out = this.#takeSome(Math.min(max, this.#remaining))
    this.#remaining -= out.length
    if (sp) sp.pos += out.length
    return out
  }

  /** The next piece of the current entry's data (waits for input); null at the end of the data. */
  async chunk(max = Infinity): Promise<Buffer | null> {
    const sp = this.#sparse
    if (sp) {
      if (sp.remaining === 0) return null
      if (sp.dataAhead() === 0) return sp.hole(max)
    } else if (this.#remaining === 0) return null
    while (this.#buffered === 0) if (!(await this.#pull())) throw tarError('Unexpected end of data')
    return this.buffered(max)
  }

  /** The rest of the current entry's data as slices of the input (waits until it has all arrived; a sparse file's holes as shared zeros). */
  async readAll(): Promise<Buffer[]> {
    if (!(await this.#fill(this.#remaining))) throw tarError('Unexpected end of data')
    const out: Buffer[] = []
    for (let c = await this.chunk(); c !== null; c = await this.chunk()) out.push(c)
    return out
  }

  /** Old GNU `S` map entries (offset, length; octal) from `count` slots at `at`; an empty offset ends the list. */
  #oldGnuMap(b: Buffer, at: number, count: number, map: SparseMap): void {
    for (let i = 0; i < count; i++) {
      const o = at + i * 24
      if (b[o] === 0) return
      map.push(decodeOct(b, o, 12), decodeOct(b, o + 12, 12))
    }
  }

  /** The next entry's header, or null after the last entry (the archive was complete). */
  async next(): Promise<TarEntryHeader | null> {
    if (this.#remaining > 0 || this.#pad > 0) {
      await this.#skip(this.#remaining + this.#pad)
      this.#remaining = 0
      this.#pad = 0
    }
    this.#sparse = null
    let longPath: string | null = null
    let longLink: string | null = null
    let pax: Pax | null = null
    for (;;) {
      if (!(await this.#fill(BLOCK))) {
        if (this.#buffered > 0) throw tarError('Unexpected end of data')
        if (this.#total < this.#endOfData + BLOCK) {
          throw bad(`tar: truncated (${this.#total} bytes, no end-of-archive block after the last entry)`)
        }
        this.#finished = true
        return null
      }
      const b = this.#take(BLOCK)
      const c = cksum(b)
      if (c === 8 * 32) continue // a zero block
      if (c !== decodeOct(b, 148, 8)) throw tarError('Invalid tar header. Maybe the tar is corrupted or it needs to be gunzipped?')
      const ustar = isUstar(b)
      if (!ustar && !isGnu(b)) throw tarError('Invalid tar header: unknown format.')
      // old GNU sparse file ('S'): its map is in the header and in extension blocks before the data
      const oldSparse = b[156] === 0x53 && !ustar
      const type = oldSparse ? 'file' : typeOf(b[156] === 0 ? 0 : b[156]! - 48)
      let size = decodeOct(b, 124, 12)
      let sparseMap: SparseMap | null = null
      let realSize = 0
      if (oldSparse) {
        sparseMap = []
        this.#oldGnuMap(b, 386, 4, sparseMap)
        realSize = decodeOct(b, 483, 12)
        for (let more = b[482] !== 0; more; ) {
          if (!(await this.#fill(BLOCK))) throw tarError('Unexpected end of data')
          const ext = this.#take(BLOCK)
          this.#oldGnuMap(ext, 0, 21, sparseMap)
          more = ext[504] !== 0
        }
      }
      if (type === 'pax-header' || type === 'pax-global-header' || type === 'gnu-long-path' || type === 'gnu-long-link-path') {
        if (size > MAX_META_RECORD) throw tarError('Header exceeds max size')
        if (!(size >= 0)) throw tarError('Invalid header')
        if (!(await this.#fill(size))) throw tarError('Unexpected end of data')
        const data = this.#take(size)
        await this.#skip(padOf(size))
        if (type === 'gnu-long-path') longPath = cstr(data, 0, data.length)
        else if (type === 'gnu-long-link-path') longLink = cstr(data, 0, data.length)
        else if (type === 'pax-global-header') this.#paxGlobal = decodePax(data)
        else {
          const local = decodePax(data)
          if (this.#paxGlobal === null) pax = local
          else {
            const values = new Map(this.#paxGlobal.values)
            for (const [k, v] of local.values) values.set(k, v)
            pax = { values, raw: local.raw ?? this.#paxGlobal.raw, sparse00: local.sparse00 }
          }
        }
        continue
      }
      let name = cstr(b, 0, 100)
      if (ustar && b[345] !== 0) name = cstr(b, 345, 155) + '/' + name
      let linkname = b[157] === 0 ? '' : cstr(b, 157, 100)
      // (an empty long name is ignored)
      if (longPath) name = longPath
      if (longLink) linkname = longLink
      if (pax) {
        const p = pax.values.get('path')
        if (p) name = p
        const l = pax.values.get('linkpath')
        if (l) linkname = l
        const s = pax.values.get('size')
        if (s) size = parseInt(s, 10)
      }
      if (!(size >= 0)) throw tarError('Invalid header')
      const ps = pax && (type === 'file' || type === 'contiguous-file') ? paxSparse(pax.values, pax.sparse00, name) : null
      if (ps) {
        if (ps.name !== undefined) name = ps.name
        realSize = ps.realSize
        sparseMap = ps.map
      }
      if (!Number.isSafeInteger(size) || size < 0) throw bad(`${JSON.stringify(name)}: invalid size ${size}`)
      // stored bytes of the entry (a sparse file: data segments, after a PAX 1.0 map)
      let stored = size
      const pad = padOf(size)
      if (ps?.version === '1.0') {
        const p = new Sparse1Parser(name)
        while (!p.done) {
          if (stored < BLOCK) throw bad(`${JSON.stringify(name)}: sparse file: the data map runs past the entry's data`)
          if (!(await this.#fill(BLOCK))) throw tarError('Unexpected end of data')
          p.feed(this.#take(BLOCK))
          stored -= BLOCK
        }
        sparseMap = p.map
      }
      if (sparseMap) {
        checkSparseMap(sparseMap, realSize, stored, name)
        // from the map alone, before a byte of the holes is handed out (they are written as zeros)
        this.#holes = checkSparseHoles(this.#holes, realSize - stored, this.#holeCap, name)
      }
      const header = convertHeader(b, type, name, linkname, sparseMap ? realSize : size, pax, this.#paxGlobal?.raw ?? null)
      // a directory entry has no data, whatever its size field says
      const dataSize = header.type === 'directory' ? 0 : stored
      this.#remaining = dataSize
      this.#pad = header.type === 'directory' ? 0 : pad
      this.#endOfData = this.#consumed + dataSize + this.#pad
      if (sparseMap) this.#sparse = new SparseCursor(sparseMap, realSize)
      return header
    }
  }

  /** Stops reading: the input is destroyed unless the archive was read to its end. */
  close(): void {
    if (this.#finished) return
    this.#finished = true
    if (!this.#input.destroyed) this.#input.destroy()
  }
}

/**
 * Reads an uncompressed tar stream entry by entry. The input is consumed; it is
 * destroyed when reading stops early or fails. Errors: IMAGE_BAD_ARCHIVE for
 * malformed, oversized (PAX/long-name records over 4 MiB) or truncated input;
 * an error of the input stream itself is passed on (as a StrataError).
 */
export async function* readTar(input: Readable, opts: { holeCap?: number } = {}): AsyncGenerator<TarEntry, void, undefined> {
  const r = new TarReader(input, opts)
  try {
    for (;;) {
      const header = await r.next()
      if (header === null) return
      const body: AsyncIterable<Buffer> = {
        [Symbol.asyncIterator]: () => ({
          next: async (): Promise<IteratorResult<Buffer>> => {
            const c = await r.chunk()
            return c === null ? { done: true, value: undefined } : { done: false, value: c }
          },
        }),
      }
      yield { header, body }
    }
  } finally {
    r.close()
  }
}
