// An in-memory KvEngine for in-process tests of fs/meta: MVCC snapshots,
// read-your-writes, read-conflict keys and ranges checked at commit against
// every later commit, retry of the whole closure on conflict. Modeled on 3FS's
// kv/mem engine; one process only.

import { StrataError } from '../../fs/common/errors.js'
import type { CommitInfo, KeyValue, KvEngine, RangeOptions, ReadOnlyTxn, ReadWriteTxn, TransactOptions } from '../../fs/kv/types.js'

type Version = bigint

interface Cell {
  v: Version
  value: Buffer | undefined
}

const hex = (b: Buffer) => b.toString('hex')

export class MemKv implements KvEngine {
  private readonly cells = new Map<string, Cell[]>()
  private sorted: string[] = []
  private version = 1n
  private readonly log: Array<{ v: Version; keys: string[]; ranges: Array<[string, string]> }> = []
  private closed = false
  stats = { commits: 0, conflicts: 0 }
  /** test hook: called before each commit check, with the keys (hex) the transaction writes */
  beforeCommit: ((txn: { writes: string[] }) => Promise<void> | void) | null = null

  get currentVersion(): bigint {
    return this.version
  }

  read(key: string, at: Version): Buffer | undefined {
    const hs = this.cells.get(key)
    if (!hs) return undefined
    for (let i = hs.length - 1; i >= 0; i--) if (hs[i]!.v <= at) return hs[i]!.value
    return undefined
  }

  private lowerBound(k: string): number {
    let lo = 0
    let hi = this.sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (this.sorted[mid]! < k) lo = mid + 1
      else hi = mid
    }
    return lo
  }

  keysIn(begin: string, end: string): string[] {
    const out: string[] = []
    for (let i = this.lowerBound(begin); i < this.sorted.length && this.sorted[i]! < end; i++) out.push(this.sorted[i]!)
    return out
  }

  private write(key: string, value: Buffer | undefined, v: Version): void {
    let hs = this.cells.get(key)
    if (!hs) {
      hs = []
      this.cells.set(key, hs)
      this.sorted.splice(this.lowerBound(key), 0, key)
    }
    hs.push({ v, value })
    if (hs.length > 8) hs.splice(0, hs.length - 8)
  }

  async transact<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts?: TransactOptions): Promise<T> {
    return (await this.transactWithInfo(fn, opts)).result
  }

  async transactWithInfo<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts: TransactOptions = {}): Promise<{ result: T; info: CommitInfo }> {
    const max = opts.maxRetries ?? 100
    const deadline = Date.now() + (opts.timeoutMs ?? 5000)
    for (let attempt = 0; ; attempt++) {
      if (this.closed) throw new StrataError('CLOSED', 'kv closed')
      const txn = new MemTxn(this, this.version)
      const result = await fn(txn)
      if (this.beforeCommit) await this.beforeCommit({ writes: txn.ops.map((o) => o.key) })
      if (this.conflicts(txn)) {
        this.stats.conflicts++
        if (attempt >= max) throw new StrataError('KV_CONFLICT', 'too many conflicts')
        if (Date.now() > deadline) throw new StrataError('TIMEOUT', 'transaction timed out')
        await new Promise((r) => setImmediate(r))
        continue
      }
      if (txn.ops.length === 0) return { result, info: { versionstamps: [] } }
      const v = ++this.version
      const keys: string[] = []
      const ranges: Array<[string, string]> = []
      const stamps: Buffer[] = []
      let order = 0
      const stamp = () => {
        const b = Buffer.alloc(10)
        b.writeBigUInt64BE(v, 0)
        b.writeUInt16BE(order++, 8)
        stamps.push(b)
        return b
      }
      for (const op of txn.ops) {
        if (op.kind === 'set') {
          this.write(op.key, op.value, v)
          keys.push(op.key)
        } else if (op.kind === 'clear') {
          this.write(op.key, undefined, v)
          keys.push(op.key)
        } else if (op.kind === 'clearRange') {
          for (const k of this.keysIn(op.key, op.end!)) this.write(k, undefined, v)
          ranges.push([op.key, op.end!])
        } else if (op.kind === 'vsKey') {
          const k = hex(Buffer.concat([Buffer.from(op.key, 'hex'), stamp()]))
          this.write(k, op.value, v)
          keys.push(k)
        } else {
          this.write(op.key, Buffer.concat([op.value!, stamp()]), v)
          keys.push(op.key)
        }
      }
      this.log.push({ v, keys, ranges })
      if (this.log.length > 20000) this.log.splice(0, 10000)
      this.stats.commits++
      return { result, info: { commitVersion: v, versionstamps: stamps } }
    }
  }

  private conflicts(txn: MemTxn): boolean {
    if (txn.readKeys.size === 0 && txn.readRanges.length === 0) return false
    for (let i = this.log.length - 1; i >= 0; i--) {
      const c = this.log[i]!
      if (c.v <= txn.readVersion) break
      for (const k of c.keys) {
        if (txn.readKeys.has(k)) return true
        for (const [b, e] of txn.readRanges) if (k >= b && k < e) return true
      }
      for (const [cb, ce] of c.ranges) {
        for (const k of txn.readKeys) if (k >= cb && k < ce) return true
        for (const [b, e] of txn.readRanges) if (b < ce && cb < e) return true
      }
    }
    return false
  }

  async readOnly<T>(fn: (txn: ReadOnlyTxn) => Promise<T>): Promise<T> {
    if (this.closed) throw new StrataError('CLOSED', 'kv closed')
    return fn(new MemTxn(this, this.version))
  }

  async close(): Promise<void> {
    this.closed = true
  }
}

interface Op {
  kind: 'set' | 'clear' | 'clearRange' | 'vsKey' | 'vsValue'
  key: string
  end?: string
  value?: Buffer
}

class MemTxn implements ReadWriteTxn {
  readonly readKeys = new Set<string>()
  readonly readRanges: Array<[string, string]> = []
  readonly ops: Op[] = []
  private readonly own = new Map<string, Buffer | undefined>()
  private readonly clearedRanges: Array<[string, string]> = []

  constructor(
    private readonly kv: MemKv,
    readonly readVersion: bigint,
  ) {}

  private view(k: string): Buffer | undefined {
    if (this.own.has(k)) return this.own.get(k)
    for (const [b, e] of this.clearedRanges) if (k >= b && k < e) return undefined
    return this.kv.read(k, this.readVersion)
  }

  async snapshotGet(key: Buffer): Promise<Buffer | undefined> {
    return this.view(hex(key))
  }

  async get(key: Buffer): Promise<Buffer | undefined> {
    const k = hex(key)
    this.readKeys.add(k)
    return this.view(k)
  }

  private range(begin: Buffer, end: Buffer, opts: RangeOptions = {}): { kvs: KeyValue[]; lastKey: string | null; cut: boolean } {
    const b = hex(begin)
    const e = hex(end)
    const keys = new Set(this.kv.keysIn(b, e))
    for (const k of this.own.keys()) if (k >= b && k < e) keys.add(k)
    const sorted = [...keys].sort()
    if (opts.reverse) sorted.reverse()
    const out: KeyValue[] = []
    const limit = opts.limit && opts.limit > 0 ? opts.limit : Infinity
    let lastKey: string | null = null
    let cut = false
    for (const k of sorted) {
      const v = this.view(k)
      if (v === undefined) continue
      if (out.length >= limit) {
        cut = true
        break
      }
      out.push({ key: Buffer.from(k, 'hex'), value: v })
      lastKey = k
    }
    return { kvs: out, lastKey, cut }
  }

  async snapshotGetRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]> {
    return this.range(begin, end, opts).kvs
  }

  async getRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]> {
    const r = this.range(begin, end, opts)
    const b = hex(begin)
    const e = hex(end)
    if (!r.cut || r.lastKey === null) this.readRanges.push([b, e])
    else if (opts?.reverse) this.readRanges.push([r.lastKey, e])
    else this.readRanges.push([b, r.lastKey + '00'])
    return r.kvs
  }

  addReadConflict(key: Buffer): void {
    this.readKeys.add(hex(key))
  }

  addReadConflictRange(begin: Buffer, end: Buffer): void {
    this.readRanges.push([hex(begin), hex(end)])
  }

  set(key: Buffer, value: Buffer): void {
    const k = hex(key)
    this.own.set(k, Buffer.from(value))
    this.ops.push({ kind: 'set', key: k, value: Buffer.from(value) })
  }

  clear(key: Buffer): void {
    const k = hex(key)
    this.own.set(k, undefined)
    this.ops.push({ kind: 'clear', key: k })
  }

  clearRange(begin: Buffer, end: Buffer): void {
    const b = hex(begin)
    const e = hex(end)
    for (const k of [...this.own.keys()]) if (k >= b && k < e) this.own.set(k, undefined)
    this.clearedRanges.push([b, e])
    this.ops.push({ kind: 'clearRange', key: b, end: e })
  }

  setVersionstampedKey(keyPrefix: Buffer, value: Buffer): void {
    this.ops.push({ kind: 'vsKey', key: hex(keyPrefix), value: Buffer.from(value) })
  }

  setVersionstampedValue(key: Buffer, valuePrefix: Buffer): void {
    this.ops.push({ kind: 'vsValue', key: hex(key), value: Buffer.from(valuePrefix) })
  }
}
