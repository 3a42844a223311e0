// The commit log's record of one commit: which keys it wrote or cleared and
// which ranges it cleared, plus the wall-clock time of the commit (for
// pruning). A committing transaction checks every record newer than its read
// version against its read-conflict set.
//
// Layout (big-endian):
//   u8 format (1) | f64 commit time ms | u32 #points | u32 #ranges
//   #points  x ( u32 len | key bytes )
//   #ranges  x ( u32 len | begin bytes | u32 len | end bytes )

import { anyInRange, type RangeSet } from './range-set.js'

const FORMAT = 1
const HEADER = 1 + 8 + 4 + 4

export function encodeWriteSet(timeMs: number, points: readonly Buffer[], ranges: ReadonlyArray<readonly [Buffer, Buffer]>): Buffer {
  let size = HEADER
  for (const p of points) size += 4 + p.length
  for (const [b, e] of ranges) size += 8 + b.length + e.length
  const out = Buffer.allocUnsafe(size)
  out[0] = FORMAT
  out.writeDoubleBE(timeMs, 1)
  out.writeUInt32BE(points.length, 9)
  out.writeUInt32BE(ranges.length, 13)
  let off = HEADER
  for (const p of points) {
    out.writeUInt32BE(p.length, off)
    p.copy(out, off + 4)
    off += 4 + p.length
  }
  for (const [b, e] of ranges) {
    out.writeUInt32BE(b.length, off)
    b.copy(out, off + 4)
    off += 4 + b.length
    out.writeUInt32BE(e.length, off)
    e.copy(out, off + 4)
    off += 4 + e.length
  }
  return out
}

/** Commit time (ms since the epoch) recorded in a write set. */
export function writeSetTime(buf: Buffer): number {
  return buf.readDoubleBE(1)
}

/** Decoded form, for diagnostics and tests. */
export function decodeWriteSet(buf: Buffer): { timeMs: number; points: Buffer[]; ranges: Array<[Buffer, Buffer]> } {
  if (buf[0] !== FORMAT) throw new Error(`unknown write-set format ${buf[0]}`)
  const np = buf.readUInt32BE(9)
  const nr = buf.readUInt32BE(13)
  let off = HEADER
  const points: Buffer[] = []
  const ranges: Array<[Buffer, Buffer]> = []
  for (let i = 0; i < np; i++) {
    const len = buf.readUInt32BE(off)
    points.push(Buffer.from(buf.subarray(off + 4, off + 4 + len)))
    off += 4 + len
  }
  for (let i = 0; i < nr; i++) {
    const bl = buf.readUInt32BE(off)
    const b = Buffer.from(buf.subarray(off + 4, off + 4 + bl))
    off += 4 + bl
    const el = buf.readUInt32BE(off)
    const e = Buffer.from(buf.subarray(off + 4, off + 4 + el))
    off += 4 + el
    ranges.push([b, e])
  }
  return { timeMs: writeSetTime(buf), points, ranges }
}

/**
 * A transaction's read-conflict set, checked against encoded write sets
 * without decoding them into objects: point keys are looked up in a Set, and
 * ranges in a coalesced RangeSet, both over latin1 key strings.
 */
export class ReadConflicts {
  private sortedPoints: string[] | undefined

  constructor(
    readonly points: ReadonlySet<string>,
    readonly ranges: RangeSet,
  ) {}

  get empty(): boolean {
    return this.points.size === 0 && this.ranges.size === 0
  }

  /** Does the write set `buf` touch any key or range of this read set? */
  hits(buf: Buffer): boolean {
    if (buf[0] !== FORMAT) throw new Error(`unknown write-set format ${buf[0]}`)
    const np = buf.readUInt32BE(9)
    const nr = buf.readUInt32BE(13)
    const hasRanges = this.ranges.size > 0
    let off = HEADER
    for (let i = 0; i < np; i++) {
      const len = buf.readUInt32BE(off)
      const k = buf.toString('latin1', off + 4, off + 4 + len)
      off += 4 + len
      if (this.points.has(k) || (hasRanges && this.ranges.contains(k))) return true
    }
    for (let i = 0; i < nr; i++) {
      const bl = buf.readUInt32BE(off)
      const b = buf.toString('latin1', off + 4, off + 4 + bl)
      off += 4 + bl
      const el = buf.readUInt32BE(off)
      const e = buf.toString('latin1', off + 4, off + 4 + el)
      off += 4 + el
      if (hasRanges && this.ranges.intersects(b, e)) return true
      if (this.points.size > 0) {
        this.sortedPoints ??= [...this.points].sort()
        if (anyInRange(this.sortedPoints, b, e)) return true
      }
    }
    return false
  }
}
