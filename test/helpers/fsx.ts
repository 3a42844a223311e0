// fsx-style random file operations (after xfstests' fsx): a seeded op list
// that the FUSE test (a python3 driver on the mount) and the file-client
// test (FileSystem calls) both apply to one file and to an in-memory model,
// comparing contents as they go. The ops are data, so a failing list can be
// shrunk (shrinkOps) and pasted into a regression test.

import { rng } from './random.js'

export type FsxOp =
  /** pwrite through descriptor fd (0 or 1) of len bytes made from seed */
  | { op: 'write'; fd: number; off: number; len: number; seed: number }
  /** pread; compared with the model (short at EOF) */
  | { op: 'read'; fd: number; off: number; len: number }
  | { op: 'truncate'; fd: number; size: number }
  | { op: 'fsync'; fd: number }
  /** close descriptor fd and open the file again (read-write) */
  | { op: 'reopen'; fd: number }
  /** write through an O_APPEND descriptor open all along */
  | { op: 'append'; len: number; seed: number }
  /** read through a fresh MAP_SHARED mapping of the whole file (FUSE only) */
  | { op: 'mapread'; off: number; len: number }
  /** store into a MAP_SHARED mapping and msync it (FUSE only; inside the file) */
  | { op: 'mapwrite'; off: number; len: number; seed: number }
  /** fsync every descriptor, then read the whole file through another client */
  | { op: 'cross' }
  /** size (fstat) and the whole content through descriptor fd */
  | { op: 'check'; fd: number }
  /**
   * close every writable descriptor, read the whole file sequentially through
   * a read-only descriptor open all along (pieces of `piece` bytes; FUSE drops
   * its page cache first, so the mount's chunk read-ahead serves it), open them again
   */
  | { op: 'solo'; piece: number }
  /** a read through the read-only descriptor (FUSE: page cache dropped first) */
  | { op: 'roread'; off: number; len: number }
  /**
   * close every descriptor, change the file through the other client (a
   * write, or a truncate when size is given) and close it there, open them again
   */
  | { op: 'handoff'; off: number; len: number; seed: number; size?: number }
  /** a write through descriptor 0 and, at the same time, a write or read of other bytes through descriptor 1 */
  | { op: 'pair'; a: FsxWrite; b: FsxWrite | FsxRead }

export type FsxWrite = Extract<FsxOp, { op: 'write' }>
export type FsxRead = Extract<FsxOp, { op: 'read' }>

export interface FsxOptions {
  chunkSize: number
  /** the file stays below this (writes far past EOF land at most here) */
  maxLen: number
  /** mmap ops (the FUSE driver) */
  mmap: boolean
}

/** A seeded list of n ops; the same seed and options give the same list. */
export function genOps(seed: number, n: number, o: FsxOptions): FsxOp[] {
  const r = rng(seed * 2654435761 + 1)
  const int = (lo: number, hi: number) => lo + Math.floor(r() * (hi - lo + 1))
  const C = o.chunkSize
  const ops: FsxOp[] = []
  let size = 0
  // the end of the last write: the next one often continues there (the write buffer coalesces)
  let lastEnd = 0
  // a length from 1 byte to several chunks, often around a chunk
  const length = () => {
    const k = r()
    if (k < 0.3) return int(1, 64)
    if (k < 0.55) return int(1, 4096)
    if (k < 0.8) return int(C - 100, C + 100)
    if (k < 0.93) return int(1, 3 * C + 17)
    return int(4 * C, Math.min(20 * C + 333, Math.floor(o.maxLen / 2)))
  }
  // an offset: near a chunk boundary, anywhere in the file, or past its end
  const offset = (pastEof: boolean) => {
    const k = r()
    const limit = Math.max(1, size)
    if (pastEof && k < 0.12) return int(size, Math.max(size, o.maxLen - 4 * C)) // a hole
    if (k < 0.45) return Math.max(0, int(0, Math.floor(limit / C) + 1) * C + int(-40, 40))
    return int(0, limit)
  }
  for (let i = 0; i < n; i++) {
    const fd = int(0, 1)
    const k = r() * 100
    let op: FsxOp
    if (k < 34) {
      let off = r() < 0.35 ? lastEnd : offset(true)
      let len = length()
      if (off + len > o.maxLen) off = Math.max(0, o.maxLen - len)
      op = { op: 'write', fd, off, len, seed: int(1, 2 ** 31) }
      size = Math.max(size, off + len)
      lastEnd = off + len
    } else if (k < 52) {
      op = { op: 'read', fd, off: offset(false) + (r() < 0.1 ? int(0, 2 * C) : 0), len: length() }
    } else if (k < 60) {
      const m = r()
      const to = m < 0.15 ? 0 : m < 0.55 ? int(0, size) : m < 0.75 ? int(0, Math.floor(o.maxLen / C) - 4) * C + Math.floor(C / 2) : int(size, Math.min(o.maxLen, size + 3 * C))
      op = { op: 'truncate', fd, size: Math.min(to, o.maxLen) }
      size = op.size
    } else if (k < 65) {
      op = { op: 'fsync', fd }
    } else if (k < 69) {
      op = { op: 'reopen', fd }
    } else if (k < 75) {
      let len = length()
      if (size + len > o.maxLen) len = 1
      op = { op: 'append', len, seed: int(1, 2 ** 31) }
      size += len
    } else if (k < 81 && o.mmap) {
      op = { op: 'mapread', off: offset(false), len: length() }
    } else if (k < 87 && o.mmap) {
      if (size === 0) continue
      const off = int(0, size - 1)
      op = { op: 'mapwrite', off, len: Math.min(length(), size - off), seed: int(1, 2 ** 31) }
    } else if (k < 91) {
      op = { op: 'cross' }
    } else if (k < 94) {
      op = r() < 0.4 ? { op: 'solo', piece: [4096, 65536, 131072, 1 << 20][int(0, 3)]! } : { op: 'roread', off: offset(false), len: length() }
    } else if (k < 95.5) {
      if (r() < 0.3) {
        const to = int(0, Math.min(o.maxLen, size + 2 * C))
        op = { op: 'handoff', off: 0, len: 0, seed: 0, size: to }
        size = to
      } else {
        let off = offset(true)
        const len = length()
        if (off + len > o.maxLen) off = Math.max(0, o.maxLen - len)
        op = { op: 'handoff', off, len, seed: int(1, 2 ** 31) }
        size = Math.max(size, off + len)
      }
    } else if (k < 97.5) {
      // two ranges apart: the write's, and the other's before it (inside the file for a read)
      const len = Math.min(length(), Math.floor(o.maxLen / 3))
      const off = int(Math.floor(o.maxLen / 3), o.maxLen - len)
      const a: FsxWrite = { op: 'write', fd: 0, off, len, seed: int(1, 2 ** 31) }
      const room = Math.min(off, size)
      if (r() < 0.5 || room < 2) {
        const blen = int(1, Math.min(3 * C, off))
        op = { op: 'pair', a, b: { op: 'write', fd: 1, off: int(0, off - blen), len: blen, seed: int(1, 2 ** 31) } }
        size = Math.max(size, off + len)
      } else {
        const blen = int(1, Math.min(3 * C, room))
        op = { op: 'pair', a, b: { op: 'read', fd: 1, off: int(0, room - blen), len: blen } }
        size = Math.max(size, off + len)
      }
    } else {
      op = { op: 'check', fd }
    }
    ops.push(op)
  }
  ops.push({ op: 'check', fd: 0 }, { op: 'cross' })
  return ops
}

/**
 * Shrinks a failing op list (delta debugging over contiguous pieces, then
 * single ops) while `fails` still says it fails. `fails` runs the list on a
 * fresh file; the list is returned when `budgetMs` is spent.
 */
export async function shrinkOps(ops: FsxOp[], fails: (ops: FsxOp[]) => Promise<boolean>, budgetMs = 5 * 60_000): Promise<FsxOp[]> {
  const end = Date.now() + budgetMs
  let cur = ops
  let piece = Math.max(1, Math.floor(cur.length / 2))
  while (piece >= 1 && Date.now() < end) {
    let changed = false
    for (let at = 0; at < cur.length && Date.now() < end; ) {
      const cand = [...cur.slice(0, at), ...cur.slice(at + piece)]
      if (cand.length > 0 && (await fails(cand))) {
        cur = cand
        changed = true
      } else at += piece
    }
    if (!changed) piece = Math.floor(piece / 2)
  }
  return cur
}

/** The seeds a test runs: FSX_SEEDS=N runs N seeds from FSX_SEED0 (default `first`), else `count` seeds. */
export function fsxSeeds(first: number, count: number): number[] {
  const n = Number(process.env.FSX_SEEDS ?? count)
  const s0 = Number(process.env.FSX_SEED0 ?? first)
  return Array.from({ length: n }, (_, i) => s0 + i)
}

/** The op count per seed: FSX_OPS, else `n`. */
export function fsxOpCount(n: number): number {
  return Number(process.env.FSX_OPS ?? n)
}
