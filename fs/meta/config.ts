// Settings of a meta server. Names follow 3FS src/meta/base/Config.h; the
// defaults are the test-scale values of ref/3fs.md appendix C (a local cluster
// notices things in seconds), PRODUCTION_META_SETTINGS are 3FS's defaults.

import { StrataError } from '../common/errors.js'

export interface MetaSettings {
  /** a removed file's chunks are deleted this long after the remove (3FS gc_file_delay) */
  gcFileDelayMs: number
  /** removed directories are taken apart after this long (3FS gc_directory_delay) */
  gcDirectoryDelayMs: number
  /** a GC entry that could not be processed (write session still open, error) waits this long (3FS retry_delay) */
  gcRetryDelayMs: number
  /** GC directories are scanned this often (3FS scan_interval) */
  gcScanIntervalMs: number
  gcEnabled: boolean
  /** files removed concurrently by one server's GC */
  gcConcurrency: number
  /** write sessions of dead clients are looked for this often (3FS session_manager.scan_interval) */
  sessionScanIntervalMs: number
  /** sessions younger than this are never pruned (3FS: 1 min) */
  sessionPruneMinAgeMs: number
  /** clients whose mgmtd session was not extended for this long count as dead (3FS session_timeout) */
  sessionTimeoutMs: number
  /** close a pruned session with a storage-queried length instead of just deleting it */
  syncOnPruneSession: boolean
  /** idempotency records live this long (3FS idempotent_record_expire) */
  idemExpireMs: number
  /** expired idempotency records are cleaned this often (3FS idempotent_record_clean) */
  idemCleanIntervalMs: number
  /**
   * one clean reads at most idemCleanPages pages of idemCleanPageSize records
   * and the next clean goes on from where it stopped, so every record is
   * reached however many there are
   */
  idemCleanPageSize: number
  idemCleanPages: number
  /**
   * mtime/ctime/atime resolution (3FS time_granularity, 1 s there). 1 ms
   * here: a FUSE mount keeps a file's page cache across opens while its mtime
   * and size look unchanged (auto_cache), so with whole seconds a same-size
   * rewrite through another mount within one second was never seen.
   */
  timeGranularityMs: number
  /** statFs answers from a cache at most this old (3FS statfs_cache_time) */
  statfsCacheMs: number
  /** the statFs cache is refreshed this often (3FS statfs_update_interval) */
  statfsUpdateIntervalMs: number
  /** distributor liveness key update period and dead-server timeout (3FS distributor.update_interval/timeout) */
  distributorUpdateIntervalMs: number
  distributorTimeoutMs: number
  maxSymlinkDepth: number
  maxSymlinkCount: number
  maxDirectoryDepth: number
  listDefaultLimit: number
  /** 'I' (FS_CHAIN_ALLOCATION_FL) may be set by chattr (3FS iflags_chain_allocation, default off) */
  iflagsChainAllocation: boolean
  /** owners may toggle FS_IMMUTABLE_FL themselves (3FS allow_owner_change_immutable) */
  allowOwnerChangeImmutable: boolean
  /** recursive remove needs the caller to own the directory (3FS recursive_remove_check_owner) */
  recursiveRemoveCheckOwner: boolean
  /** entries checked below a directory before a recursive remove (3FS recursive_remove_perm_check) */
  recursiveRemovePermCheck: number
  /** one operation gives up after this long, retries included (3FS operation_timeout) */
  operationTimeoutMs: number
}

export const DEFAULT_META_SETTINGS: MetaSettings = {
  gcFileDelayMs: 500,
  gcDirectoryDelayMs: 0,
  gcRetryDelayMs: 1000,
  gcScanIntervalMs: 200,
  gcEnabled: true,
  gcConcurrency: 8,
  sessionScanIntervalMs: 1000,
  sessionPruneMinAgeMs: 1000,
  sessionTimeoutMs: 10_000,
  syncOnPruneSession: true,
  idemExpireMs: 30 * 60_000,
  idemCleanIntervalMs: 60_000,
  idemCleanPageSize: 2048,
  idemCleanPages: 1000,
  timeGranularityMs: 1,
  statfsCacheMs: 1000,
  statfsUpdateIntervalMs: 1000,
  distributorUpdateIntervalMs: 500,
  distributorTimeoutMs: 3000,
  maxSymlinkDepth: 4,
  maxSymlinkCount: 10,
  maxDirectoryDepth: 64,
  listDefaultLimit: 128,
  iflagsChainAllocation: true,
  allowOwnerChangeImmutable: false,
  recursiveRemoveCheckOwner: true,
  recursiveRemovePermCheck: 1024,
  operationTimeoutMs: 5000,
}

export const PRODUCTION_META_SETTINGS: MetaSettings = {
  ...DEFAULT_META_SETTINGS,
  gcFileDelayMs: 5 * 60_000,
  gcRetryDelayMs: 10 * 60_000,
  sessionScanIntervalMs: 5 * 60_000,
  sessionPruneMinAgeMs: 60_000,
  sessionTimeoutMs: 5 * 60_000,
  statfsCacheMs: 60_000,
  statfsUpdateIntervalMs: 5_000,
  distributorUpdateIntervalMs: 1_000,
  distributorTimeoutMs: 30_000,
  iflagsChainAllocation: false,
}

export function mergeMetaSettings(base: MetaSettings, override?: Partial<MetaSettings> | Record<string, unknown>): MetaSettings {
  const out = { ...base }
  if (!override) return out
  for (const [k, v] of Object.entries(override)) {
    if (!(k in base)) continue
    const want = typeof (base as unknown as Record<string, unknown>)[k]
    if (typeof v !== want || (want === 'number' && !((v as number) >= 0))) throw new StrataError('BAD_CONFIG', `meta setting ${k} must be a non-negative ${want}`)
    ;(out as unknown as Record<string, unknown>)[k] = v
  }
  return out
}
