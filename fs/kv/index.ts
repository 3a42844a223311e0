// Transactional KV: the FDB-shaped interface fs/meta is written against, and
// its engines (today: the embedded lmdb engine shared by every meta process on
// the host).

export type { CommitInfo, KeyValue, KvEngine, RangeOptions, ReadOnlyTxn, ReadWriteTxn, TransactOptions } from './types.js'
export { openLmdbKv } from './lmdb.js'
export type { KvDurability, LmdbKvEngine, LmdbKvOptions, LmdbKvStats, LmdbKvTestHooks } from './lmdb.js'
export { compareKeys, keyAfter, makeVersionstamp, parseVersionstamp, prefixEnd } from './keys.js'
export { DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_MS } from './retry.js'
