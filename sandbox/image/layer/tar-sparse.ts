// GNU sparse files in tar archives (`tar --sparse`): the data map of each
// format, checked, and a cursor that turns the stored data segments back into
// the file's full contents, holes read as zeros.
//
// Formats (GNU tar manual, "Storing Sparse Files"): old GNU `S` headers (map
// in the header and in extension blocks after it, read by the caller); PAX 0.0
// (repeated GNU.sparse.offset / GNU.sparse.numbytes records), 0.1
// (GNU.sparse.map=off,len,…), both with GNU.sparse.size; PAX 1.0
// (GNU.sparse.realsize; the map is decimal lines at the start of the data,
// padded to a block). A malformed map is refused, as Go's archive/tar does:
// numbers that are not decimal (or octal in `S` headers), a segment past the
// real size, segments unsorted or overlapping, stored data that is longer or
// shorter than the map says.
import { StrataError } from '../../../fs/common/errors.js'

/** offset, length pairs, sorted and disjoint once checked */
export type SparseMap = number[]

function bad(name: string, why: string): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(name)}: sparse file: ${why}`)
}

function decimal(s: string | undefined, what: string, name: string): number {
  if (s === undefined || !/^[0-9]{1,16}$/.test(s) || !Number.isSafeInteger(Number(s))) throw bad(name, `invalid ${what} ${JSON.stringify(s ?? '')}`)
  return Number(s)
}

export interface PaxSparse {
  /** 1.0 keeps its map at the start of the data */
  version: '0.0' | '0.1' | '1.0'
  realSize: number
  /** the real name (GNU.sparse.name), when given */
  name: string | undefined
  /** 0.x: the map from the records */
  map: SparseMap | null
}

/** The sparse description in an entry's PAX records, or null when it has none. */
export function paxSparse(values: Map<string, string>, sparse00: string[][] | null, name: string): PaxSparse | null {
  const major = values.get('GNU.sparse.major')
  const minor = values.get('GNU.sparse.minor')
  const realName = values.get('GNU.sparse.name')
  const shown = realName ?? name
  if (major !== undefined || minor !== undefined) {
    if (major === '1' && minor === '0') return { version: '1.0', realSize: decimal(values.get('GNU.sparse.realsize'), 'GNU.sparse.realsize', shown), name: realName, map: null }
    if (major !== '0' || (minor !== '0' && minor !== '1')) throw bad(shown, `unsupported GNU sparse format ${major ?? '?'}.${minor ?? '?'}`)
  }
  const mapText = values.get('GNU.sparse.map')
  if (mapText === undefined && sparse00 === null) {
    if (major !== undefined || values.has('GNU.sparse.size') || values.has('GNU.sparse.numblocks')) throw bad(shown, 'no data map')
    return null
  }
  const realSize = decimal(values.get('GNU.sparse.size') ?? values.get('GNU.sparse.realsize'), 'GNU.sparse.size', shown)
  const map: SparseMap = []
  let version: '0.0' | '0.1'
  if (mapText !== undefined) {
    version = '0.1'
    if (mapText !== '') for (const n of mapText.split(',')) map.push(decimal(n, 'map number', shown))
    if (map.length % 2 !== 0) throw bad(shown, 'GNU.sparse.map has an odd count of numbers')
  } else {
    version = '0.0'
    sparse00!.forEach(([k, v], i) => {
      if (k !== (i % 2 === 0 ? 'GNU.sparse.offset' : 'GNU.sparse.numbytes')) throw bad(shown, 'GNU.sparse.offset and GNU.sparse.numbytes records do not alternate')
      map.push(decimal(v, k, shown))
    })
    if (map.length % 2 !== 0) throw bad(shown, 'GNU.sparse.offset without GNU.sparse.numbytes')
  }
  const nb = values.get('GNU.sparse.numblocks')
  if (nb !== undefined && decimal(nb, 'GNU.sparse.numblocks', shown) !== map.length / 2) throw bad(shown, `GNU.sparse.numblocks is ${nb}, the map has ${map.length / 2} entries`)
  return { version, realSize, name: realName, map }
}

/**
 * Reads a PAX 1.0 map from the data's first blocks: feed whole 512-byte
 * blocks until `done`. Memory grows with the bytes fed, never with a count
 * the archive claims.
 */
export class Sparse1Parser {
  readonly map: SparseMap = []
  #count = -1
  #token = ''
  constructor(readonly name: string) {}

  get done(): boolean {
    return this.#count >= 0 && this.map.length === 2 * this.#count
  }

  feed(block: Buffer): void {
    for (let i = 0; i < block.length && !this.done; i++) {
      const c = block[i]!
      if (c === 10) {
        const n = decimal(this.#token, 'map number', this.name)
        this.#token = ''
        if (this.#count < 0) this.#count = n
        else this.map.push(n)
      } else if (c >= 48 && c <= 57 && this.#token.length < 17) this.#token += String.fromCharCode(c)
      else throw bad(this.name, 'malformed data map')
    }
  }
}

/** Checks `map` against the real size and the stored data's length. */
export function checkSparseMap(map: SparseMap, realSize: number, stored: number, name: string): void {
  if (!Number.isSafeInteger(realSize) || realSize < 0) throw bad(name, `invalid size ${realSize}`)
  let end = 0
  let sum = 0
  for (let i = 0; i < map.length; i += 2) {
    const off = map[i]!
    const len = map[i + 1]!
    if (!Number.isSafeInteger(off) || !Number.isSafeInteger(len) || off < 0 || len < 0) throw bad(name, `invalid map entry ${off},${len}`)
    if (off < end) throw bad(name, `map entry ${off},${len} overlaps or precedes the one before it`)
    if (off + len > realSize) throw bad(name, `map entry ${off},${len} lies beyond the file's size ${realSize}`)
    end = off + len
    sum += len
  }
  if (sum !== stored) throw bad(name, `the map holds ${sum} bytes of data, the archive ${stored}`)
}

/**
 * Most bytes one archive's sparse files may cost beyond their data, summed: a
 * header may claim a size up to 2^53, so without a bound a tar of a few KiB
 * would write terabytes. Where holes are written as zeros (the unpack
 * directory of `--compress` and `--squash`), the cost is the holes; the
 * one-pass EROFS writer keeps whole chunks of hole as holes, and its cost is
 * the zeros it still stores plus the block maps (erofs-chunks.ts). 1 GiB is
 * far above what sparse files in container layers need (lastlog, small
 * database files) and keeps the worst case of one layer to a size an import
 * of real data also reaches.
 */
export const SPARSE_HOLE_CAP = 1024 * 1024 * 1024

/**
 * Bytes a sparse file takes on disk beyond its data when it is written with
 * its holes kept: the rest of each 4 KiB block its data touches (a byte every
 * 4 KiB fills every block). `map` is sorted and disjoint (checkSparseMap).
 */
export function blockSlack(map: SparseMap): number {
  const B = 4096
  let allocated = 0
  let covered = 0
  let data = 0
  for (let i = 0; i < map.length; i += 2) {
    const off = map[i]!
    const len = map[i + 1]!
    if (len === 0) continue
    const start = Math.max(Math.floor(off / B) * B, covered)
    const end = Math.ceil((off + len) / B) * B
    allocated += end - start
    covered = end
    data += len
  }
  return allocated - data
}

/**
 * Adds a sparse file's `holes` (the bytes it costs beyond its data) to the
 * archive's running `total`; refuses it when the sum passes `cap`. The cost
 * is its holes (`holes`: written as zeros), what the EROFS writer stores for
 * it (`stored`: zeros and block map), or the rest of the file system blocks
 * its data touches (`blocks`: unpacked with its holes kept).
 */
export function checkSparseHoles(total: number, holes: number, cap: number, name: string, kind: 'holes' | 'stored' | 'blocks' = 'holes'): number {
  const sum = total + holes
  if (sum > cap) {
    if (kind === 'blocks') {
      const before = total > 0 ? ` (with ${total} bytes for sparse files before it)` : ''
      throw bad(name, `unpacking it takes ${holes} bytes of zeros in the 4 KiB blocks its data touches${before}, over the cap of ${cap} bytes per layer (${capText(cap)}): its data is spread too thinly over its size`)
    }
    if (kind === 'stored') {
      const before = total > 0 ? ` (with ${total} bytes for sparse files before it)` : ''
      throw bad(name, `storing it takes ${holes} bytes of zeros and block map beyond its data${before}, over the cap of ${cap} bytes per layer (${capText(cap)}): its data is spread too thinly over its size`)
    }
    const before = total > 0 ? ` (with ${total} hole bytes of sparse files before it)` : ''
    throw bad(name, `its holes (${holes} bytes${before}) exceed the cap of ${cap} hole bytes per layer (${capText(cap)}): holes are stored as zeros`)
  }
  return sum
}

function capText(cap: number): string {
  return cap % (1024 * 1024 * 1024) === 0 ? `${cap / (1024 * 1024 * 1024)} GiB` : cap % (1024 * 1024) === 0 ? `${cap / (1024 * 1024)} MiB` : `${cap} bytes`
}

/** Shared zeros for holes (read-only by contract: consumers write them out, never into them). */
const ZEROS = Buffer.alloc(1024 * 1024)

/** Position in a sparse file while it is read: what comes next, data or a hole. */
export class SparseCursor {
  #i = 0
  pos = 0
  constructor(
    readonly map: SparseMap,
    readonly size: number,
  ) {}

  get remaining(): number {
    return this.size - this.pos
  }

  /** Bytes of stored data that come next (0 in a hole or at the end). */
  dataAhead(): number {
    while (this.#i < this.map.length && this.pos >= this.map[this.#i]! + this.map[this.#i + 1]!) this.#i += 2
    if (this.#i < this.map.length && this.pos >= this.map[this.#i]!) return this.map[this.#i]! + this.map[this.#i + 1]! - this.pos
    return 0
  }

  /** Bytes of hole that come next (0 in data or at the end). */
  holeAhead(): number {
    if (this.dataAhead() > 0) return 0
    // empty segments (GNU tar ends its maps with one at the real size) hold no data
    let j = this.#i
    while (j < this.map.length && this.map[j + 1] === 0) j += 2
    return (j < this.map.length ? this.map[j]! : this.size) - this.pos
  }

  /** Zeros of the hole at the position, at most `max` bytes (call when dataAhead() is 0). */
  hole(max: number): Buffer {
    const end = this.#i < this.map.length ? this.map[this.#i]! : this.size
    const n = Math.min(max, end - this.pos, ZEROS.length)
    this.pos += n
    return ZEROS.subarray(0, n)
  }
}
