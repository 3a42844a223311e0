// The transactional KV interface the metadata service is written against.
// It is shaped like FoundationDB's (what 3FS uses): snapshot reads that add
// no conflicts, reads that add read-conflict keys and ranges, buffered writes,
// serializable commit, and whole-operation retry on conflict. Any engine that
// passes test/fs/kv/conformance.ts can serve fs/meta: the embedded lmdb engine
// today, a Postgres-wire SERIALIZABLE engine later, without fs/meta changing.

export interface KeyValue {
  key: Buffer
  value: Buffer
}

export interface RangeOptions {
  /** at most this many pairs (0: no limit) */
  limit?: number
  /** descending key order */
  reverse?: boolean
}

/** Reads of one transaction, all from the same consistent snapshot (its read version). */
export interface ReadOnlyTxn {
  /** the snapshot version reads are served at */
  readonly readVersion: bigint
  /** read without adding a read conflict */
  snapshotGet(key: Buffer): Promise<Buffer | undefined>
  /** range [begin, end) without adding a read conflict */
  snapshotGetRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]>
  /** in a read-only transaction the same as snapshotGet */
  get(key: Buffer): Promise<Buffer | undefined>
  getRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]>
}

export interface ReadWriteTxn extends ReadOnlyTxn {
  /** read and add `key` to the read-conflict set; sees this transaction's own writes */
  get(key: Buffer): Promise<Buffer | undefined>
  /**
   * read [begin, end) and add the range actually read to the read-conflict set
   * (up to the last key returned when a limit cut it short); sees own writes
   */
  getRange(begin: Buffer, end: Buffer, opts?: RangeOptions): Promise<KeyValue[]>
  addReadConflict(key: Buffer): void
  addReadConflictRange(begin: Buffer, end: Buffer): void
  set(key: Buffer, value: Buffer): void
  clear(key: Buffer): void
  clearRange(begin: Buffer, end: Buffer): void
  /**
   * Writes `value` under `keyPrefix + versionstamp` where the 10-byte
   * versionstamp (8-byte commit version BE + 2-byte order within the commit)
   * is assigned at commit: unique and increasing across all commits.
   */
  setVersionstampedKey(keyPrefix: Buffer, value: Buffer): void
  /** Writes `valuePrefix + versionstamp` as the value of `key`. */
  setVersionstampedValue(key: Buffer, valuePrefix: Buffer): void
}

export interface TransactOptions {
  /** give up with KV_CONFLICT after this many conflicting attempts (default 100) */
  maxRetries?: number
  /** give up with TIMEOUT after this long in total (default 5000 ms, like 3FS) */
  timeoutMs?: number
  /**
   * This transaction frees space, or is needed before space can be freed
   * (removals, GC steps, closing a write session). When the store's disk is
   * full, an engine may let such a commit use room it keeps aside for that
   * (the lmdb engine's space reserve); any other commit fails NO_SPACE.
   */
  frees?: boolean
}

export interface CommitInfo {
  /** the version the transaction committed at (undefined for a read-only one) */
  commitVersion?: bigint
  /** the versionstamps assigned, in call order */
  versionstamps: Buffer[]
}

export interface KvEngine {
  /**
   * Runs `fn` in a read-write transaction and commits it. On a conflict (some
   * key or range in the read-conflict set was written by a transaction that
   * committed after this one's read version) the whole of `fn` runs again on a
   * fresh transaction. `fn` must therefore have no side effects outside the
   * transaction.
   */
  transact<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts?: TransactOptions): Promise<T>
  /** Like transact, also returning the commit version and versionstamps. */
  transactWithInfo<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts?: TransactOptions): Promise<{ result: T; info: CommitInfo }>
  /** Runs `fn` on a consistent snapshot; nothing to commit, never conflicts. */
  readOnly<T>(fn: (txn: ReadOnlyTxn) => Promise<T>): Promise<T>
  /** Idempotent. */
  close(): Promise<void>
}
