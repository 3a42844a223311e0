// The engine-independent half of a transaction: reads from a consistent
// snapshot merged with this transaction's buffered writes (read-your-writes,
// including clears and clearRange), the read-conflict set (get/getRange add
// to it, snapshot reads do not), the write buffer, and versionstamp slots. An
// engine supplies the snapshot and, at commit, checks the read-conflict set
// and applies the buffer atomically.

import { StrataError } from '../common/errors.js'
import { ks } from './keys.js'
import { RangeSet } from './range-set.js'
import type { KeyValue, RangeOptions, ReadWriteTxn } from './types.js'

/** What an engine provides: point and range reads at the transaction's read version. */
export interface SnapshotReader {
  get(key: Buffer): Buffer | undefined
  /** lazily, in key order (descending when `reverse`), the pairs with begin <= key < end */
  range(begin: Buffer, end: Buffer, reverse: boolean): Iterable<KeyValue>
}

export interface TxnLimits {
  /** longest key accepted by set/clear/get (the engine's hard limit) */
  maxKeyBytes: number
  maxValueBytes: number
}

/** A value to be completed at commit with the versionstamp of slot `index`. */
export interface PendingVersionstamp {
  prefix: Buffer
  index: number
}

export interface WriteEntry {
  key: Buffer
  /** new value; null = cleared; PendingVersionstamp = setVersionstampedValue */
  value: Buffer | null | PendingVersionstamp
}

export interface VersionstampedKeyWrite {
  prefix: Buffer
  value: Buffer
  index: number
}

/** Max versionstamp slots per commit (2-byte index). */
export const MAX_VERSIONSTAMPS = 0x10000

function asBuffer(b: unknown, what: string): Buffer {
  if (Buffer.isBuffer(b)) return b
  if (b instanceof Uint8Array) return Buffer.from(b.buffer, b.byteOffset, b.byteLength)
  throw new StrataError('INVALID_ARGUMENT', `${what} must be a Buffer`)
}

function copy(b: Buffer): Buffer {
  return Buffer.from(b)
}

export class BufferedTxn implements ReadWriteTxn {
  /** buffered point writes by key string, in no particular order */
  readonly writes = new Map<string, WriteEntry>()
  /** ranges cleared by clearRange (applied before `writes` at commit) */
  readonly cleared = new RangeSet()
  /** setVersionstampedKey calls, applied last at commit */
  readonly versionstampedKeys: VersionstampedKeyWrite[] = []
  readonly readPoints = new Set<string>()
  readonly readRanges = new RangeSet()
  /** versionstamp slots handed out so far (setVersionstampedKey + setVersionstampedValue, call order) */
  versionstampCount = 0
  private finished = false

  constructor(
    private readonly src: SnapshotReader,
    readonly readVersion: bigint,
    private readonly limits: TxnLimits,
    /** Date.now() after which every operation fails with TIMEOUT */
    private readonly deadline: number,
    /** throws CLOSED when the engine was closed */
    private readonly assertOpen: () => void,
    private readonly writable: boolean,
  ) {}

  hasWrites(): boolean {
    return this.writes.size > 0 || this.cleared.size > 0 || this.versionstampedKeys.length > 0
  }

  hasReadConflicts(): boolean {
    return this.readPoints.size > 0 || this.readRanges.size > 0
  }

  /** After this every operation throws: the transaction's function returned. */
  finish(): void {
    this.finished = true
  }

  private check(): void {
    if (this.finished) throw new StrataError('INVALID_ARGUMENT', 'the transaction already finished (an operation was not awaited inside the transaction function?)')
    this.assertOpen()
    if (Date.now() > this.deadline) throw new StrataError('TIMEOUT', 'the transaction ran past its deadline')
  }

  private checkWrite(): void {
    this.check()
    if (!this.writable) throw new StrataError('INVALID_ARGUMENT', 'write in a read-only transaction')
  }

  private key(k: unknown, what = 'key'): Buffer {
    const b = asBuffer(k, what)
    if (b.length === 0) throw new StrataError('INVALID_ARGUMENT', `empty ${what} (the engine does not store zero-length keys)`)
    if (b.length > this.limits.maxKeyBytes)
      throw new StrataError('KV_VALUE_TOO_LARGE', `${what} of ${b.length} bytes exceeds the ${this.limits.maxKeyBytes}-byte key limit`)
    return b
  }

  private value(v: unknown, extra = 0): Buffer {
    const b = asBuffer(v, 'value')
    if (b.length + extra > this.limits.maxValueBytes)
      throw new StrataError('KV_VALUE_TOO_LARGE', `value of ${b.length + extra} bytes exceeds the ${this.limits.maxValueBytes}-byte value limit`)
    return b
  }

  // ---- reads

  async snapshotGet(key: Buffer): Promise<Buffer | undefined> {
    this.check()
    return this.getImpl(this.key(key), true)
  }

  async get(key: Buffer): Promise<Buffer | undefined> {
    this.check()
    return this.getImpl(this.key(key), !this.writable)
  }

  async snapshotGetRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]> {
    this.check()
    return this.rangeImpl(asBuffer(begin, 'range begin'), asBuffer(end, 'range end'), opts, true)
  }

  async getRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]> {
    this.check()
    return this.rangeImpl(asBuffer(begin, 'range begin'), asBuffer(end, 'range end'), opts, !this.writable)
  }

  private getImpl(key: Buffer, snapshot: boolean): Buffer | undefined {
    const s = ks(key)
    const w = this.writes.get(s)
    if (w !== undefined) return ownValue(w) // decided by this transaction: no read conflict needed
    if (this.cleared.contains(s)) return undefined
    if (!snapshot) this.readPoints.add(s)
    return this.src.get(key)
  }

  private rangeImpl(begin: Buffer, end: Buffer, opts: RangeOptions | undefined, snapshot: boolean): KeyValue[] {
    const bs = ks(begin)
    const es = ks(end)
    if (!(bs < es)) return []
    const limit = opts?.limit && opts.limit > 0 ? opts.limit : Infinity
    const reverse = opts?.reverse === true

    // own writes inside the range, in iteration order
    let own: string[] = []
    if (this.writes.size > 0) {
      for (const k of this.writes.keys()) if (k >= bs && k < es) own.push(k)
      if (own.length > 1) own.sort()
      if (reverse) own.reverse()
    }
    const hasCleared = this.cleared.size > 0
    const hasOwn = own.length > 0

    const out: KeyValue[] = []
    let lastKs = ''
    const it = this.src.range(begin, end, reverse)[Symbol.iterator]()
    try {
      const nextDb = (): { s: string; kv: KeyValue } | undefined => {
        for (;;) {
          const r = it.next()
          if (r.done) return undefined
          const s = ks(r.value.key)
          if ((hasOwn && this.writes.has(s)) || (hasCleared && this.cleared.contains(s))) continue
          return { s, kv: r.value }
        }
      }
      let db = nextDb()
      let oi = 0
      while (out.length < limit) {
        while (oi < own.length && this.writes.get(own[oi]!)!.value === null) oi++
        const o = oi < own.length ? own[oi]! : undefined
        if (db === undefined && o === undefined) break
        const takeOwn = o !== undefined && (db === undefined || (reverse ? o > db.s : o < db.s))
        if (takeOwn) {
          const w = this.writes.get(o)!
          out.push({ key: copy(w.key), value: ownValue(w)! })
          lastKs = o
          oi++
        } else {
          out.push(db!.kv)
          lastKs = db!.s
          db = nextDb()
        }
      }
    } finally {
      it.return?.()
    }

    if (!snapshot) {
      if (out.length === limit) {
        // only the part actually read conflicts
        if (reverse) this.readRanges.add(lastKs, es)
        else this.readRanges.add(bs, lastKs + '\u0000')
      } else {
        this.readRanges.add(bs, es)
      }
    }
    return out
  }

  // ---- conflicts

  addReadConflict(key: Buffer): void {
    this.check()
    const b = asBuffer(key, 'key')
    this.readPoints.add(ks(b))
  }

  addReadConflictRange(begin: Buffer, end: Buffer): void {
    this.check()
    this.readRanges.add(ks(asBuffer(begin, 'range begin')), ks(asBuffer(end, 'range end')))
  }

  // ---- writes

  set(key: Buffer, value: Buffer): void {
    this.checkWrite()
    const k = this.key(key)
    const v = this.value(value)
    this.writes.set(ks(k), { key: copy(k), value: copy(v) })
  }

  clear(key: Buffer): void {
    this.checkWrite()
    const k = this.key(key)
    this.writes.set(ks(k), { key: copy(k), value: null })
  }

  clearRange(begin: Buffer, end: Buffer): void {
    this.checkWrite()
    const bs = ks(asBuffer(begin, 'range begin'))
    const es = ks(asBuffer(end, 'range end'))
    if (!(bs < es)) return
    this.cleared.add(bs, es)
    for (const k of this.writes.keys()) if (k >= bs && k < es) this.writes.delete(k)
  }

  setVersionstampedKey(keyPrefix: Buffer, value: Buffer): void {
    this.checkWrite()
    const p = asBuffer(keyPrefix, 'key prefix')
    if (p.length + 10 > this.limits.maxKeyBytes)
      throw new StrataError('KV_VALUE_TOO_LARGE', `versionstamped key of ${p.length + 10} bytes exceeds the ${this.limits.maxKeyBytes}-byte key limit`)
    const v = this.value(value)
    this.versionstampedKeys.push({ prefix: copy(p), value: copy(v), index: this.nextSlot() })
  }

  setVersionstampedValue(key: Buffer, valuePrefix: Buffer): void {
    this.checkWrite()
    const k = this.key(key)
    const p = this.value(valuePrefix, 10)
    this.writes.set(ks(k), { key: copy(k), value: { prefix: copy(p), index: this.nextSlot() } })
  }

  private nextSlot(): number {
    if (this.versionstampCount >= MAX_VERSIONSTAMPS) throw new StrataError('INVALID_ARGUMENT', `more than ${MAX_VERSIONSTAMPS} versionstamps in one transaction`)
    return this.versionstampCount++
  }
}

function ownValue(w: WriteEntry): Buffer | undefined {
  if (w.value === null) return undefined
  if (Buffer.isBuffer(w.value)) return copy(w.value)
  // FDB: accessed_unreadable — the value is only known at commit
  throw new StrataError('INVALID_ARGUMENT', 'read of a key whose versionstamped value is only known at commit')
}
