// Configuration of one FUSE daemon (`strata daemon fuse --config F`): where
// to mount, how to reach the cluster, and the 3FS FUSE knobs that fuse-native
// can express (mount-wide attr/entry timeouts, periodic sync, write buffer).

import path from 'node:path'
import { canonicalMountpoint } from './mountpoint-path.js'
import { StrataError } from '../common/errors.js'
import type { Timers } from '../common/config.js'
import type { RetryPolicy } from '../client/retry-policy.js'
import type { MetaRetryPolicy } from '../client/file/meta-client.js'
import type { ReadMode } from '../client/target-selection.js'
import { MAX_WRITE_BUFFER_SIZE } from '../client/index.js'
import { checkGroups, checkId } from '../common/user-ids.js'

export interface FuseDaemonConfig {
  /** absolute mount point (created when missing) */
  mountpoint: string
  mgmtdAddresses: string[]
  /** fixed meta servers (default: META nodes from routing info) */
  metaAddresses?: string[]
  /** meta servers to try when routing info lists none */
  metaFallbackAddresses?: string[]
  /** cluster directory (its cluster.json's meta processes become fallback addresses) */
  clusterDir?: string
  /** node id and host:port of the daemon's RPC server (Core echo/stats/config); none when unset */
  nodeId?: number
  listen?: string
  /** where the daemon records {pid, mountpoint, connection} once mounted */
  stateFile?: string
  /** kernel attribute cache and daemon path cache lifetime, seconds (0 → 0.001: FUSE2 ignores 0) */
  attrTimeout?: number
  /** kernel name cache lifetime, seconds */
  entryTimeout?: number
  /** periodic sync of length hints and write buffers, ms (0: off) */
  periodicSyncMs?: number
  periodicSyncLimit?: number
  /** per-inode write buffer, bytes (0: write through) */
  writeBufferSize?: number
  /** full write buffers of one file flushed while the writer goes on (FileSystemOptions.writeBehind) */
  writeBehind?: number
  /** a stat of a file with local unsynced writes flushes and syncs first (3FS sync_on_stat) */
  syncOnStat?: boolean
  /** identity every request runs as (fuse-native does not expose the caller); default: the daemon's */
  uid?: number
  gid?: number
  groups?: number[]
  /** let other users use the mount (libfuse allow_other; default: true when running as root) */
  allowOther?: boolean
  /** kernel permission checks from the reported mode bits (libfuse default_permissions) */
  defaultPermissions?: boolean
  readonly?: boolean
  /** fuse-native per-request timeout, ms; 0 (default) disables it so failover is latency, not EIO */
  opTimeoutMs?: number
  /**
   * a request whose meta or storage servers are unreachable fails with
   * ENOTCONN (CLUSTER_UNREACHABLE) once mgmtd has also refused connections
   * this long, ms: the cluster is stopped, and the client's 60 s failover
   * budget would only keep callers in D state. 0: wait out the whole budget.
   * A failover with mgmtd up is never cut short.
   */
  orphanTimeoutMs?: number
  /**
   * kernel readahead, bytes (set on the mount's bdi). 3FS uses 16 MiB; 1 MiB
   * here: sequential reads measured no faster above 1 MiB, while a cold
   * sandbox start (EROFS layers read through the mount) read 8.5% of its
   * layer at 16 MiB against ~3% at 128 KiB.
   */
  maxReadahead?: number
  /**
   * largest READ the kernel sends, bytes (a multiple of 4 KiB up to 1 MiB).
   * libfuse 2 alone gets 128 KiB; Strata's build of the addon raises the
   * kernel's limit to 1 MiB (native/fuse/fuse-native.c, change 5), so a
   * sequential reader's 1 MiB read is one request, not eight.
   */
  maxRead?: number
  /** largest WRITE the kernel sends, bytes (a multiple of 4 KiB up to 1 MiB), as maxRead */
  maxWrite?: number
  /** whole-chunk read-ahead for read-only handles read sequentially (fs/fuse/read-ahead.ts); default true */
  chunkReadAhead?: boolean
  /** bytes the mount's chunk read-ahead may hold at once; default 64 MiB */
  chunkReadAheadBudget?: number
  /** chunks a streaming reader may have fetched ahead of the one it reads; default 4 */
  chunkReadAheadWindow?: number
  /** how long a fetched chunk may be served, ms (another client's writes show after at most this long); default 1000 */
  chunkReadAheadMaxAgeMs?: number
  /** READs that a fetched read-ahead chunk wholly covers are answered by libfuse's threads, without the event loop (fs/fuse/fast-reads.ts); default true */
  nativeReads?: boolean
  /** how long a stop waits for files still open before a lazy unmount, ms */
  unmountGraceMs?: number
  storageRetry?: Partial<RetryPolicy>
  metaRetry?: Partial<MetaRetryPolicy>
  readMode?: ReadMode
  timers?: Partial<Timers>
  /** libfuse debug output */
  debug?: boolean
}

export interface ResolvedFuseConfig extends Required<Omit<FuseDaemonConfig, 'metaAddresses' | 'metaFallbackAddresses' | 'clusterDir' | 'nodeId' | 'listen' | 'stateFile' | 'storageRetry' | 'metaRetry' | 'readMode' | 'timers' | 'groups'>> {
  metaAddresses?: string[]
  metaFallbackAddresses?: string[]
  clusterDir?: string
  nodeId?: number
  listen?: string
  stateFile?: string
  storageRetry?: Partial<RetryPolicy>
  metaRetry?: Partial<MetaRetryPolicy>
  readMode?: ReadMode
  timers?: Partial<Timers>
  groups: number[]
}

export const FUSE_DEFAULTS = {
  // FUSE2's own default; 3FS uses 30 s with kernel invalidation that a path-based FUSE2 daemon cannot send
  attrTimeout: 1,
  entryTimeout: 1,
  periodicSyncMs: 5000,
  periodicSyncLimit: 1000,
  writeBufferSize: 1024 * 1024,
  writeBehind: 4,
  syncOnStat: true,
  defaultPermissions: false,
  readonly: false,
  opTimeoutMs: 0,
  orphanTimeoutMs: 5000,
  maxReadahead: 1024 * 1024,
  maxRead: 1024 * 1024,
  maxWrite: 1024 * 1024,
  chunkReadAhead: true,
  chunkReadAheadBudget: 64 * 1024 * 1024,
  chunkReadAheadWindow: 4,
  chunkReadAheadMaxAgeMs: 1000,
  nativeReads: true,
  unmountGraceMs: 3000,
  debug: false,
} as const

function bad(msg: string): never {
  throw new StrataError('BAD_CONFIG', `fuse config: ${msg}`)
}

function num(v: unknown, name: string, dflt: number, opts: { min?: number; integer?: boolean } = {}): number {
  if (v === undefined || v === null) return dflt
  if (typeof v !== 'number' || !Number.isFinite(v)) bad(`${name} must be a number, got ${JSON.stringify(v)}`)
  if (opts.integer && !Number.isInteger(v)) bad(`${name} must be an integer, got ${v}`)
  if (v < (opts.min ?? 0)) bad(`${name} must be at least ${opts.min ?? 0}, got ${v}`)
  return v
}

/** The largest FUSE request the kernel may send: whole pages, at most the 256 the addon asks for. */
export const FUSE_MAX_REQUEST = 1024 * 1024

function requestSize(v: unknown, name: string, dflt: number): number {
  const n = num(v, name, dflt, { integer: true, min: 4096 })
  if (n % 4096 !== 0 || n > FUSE_MAX_REQUEST) bad(`${name} must be a multiple of 4096 from 4096 to ${FUSE_MAX_REQUEST}, got ${n}`)
  return n
}

function writeBufferSize(v: unknown): number {
  const n = num(v, 'writeBufferSize', FUSE_DEFAULTS.writeBufferSize, { integer: true })
  if (n > MAX_WRITE_BUFFER_SIZE) bad(`writeBufferSize must be at most ${MAX_WRITE_BUFFER_SIZE} (64 MiB), got ${n}`)
  return n
}

/** uid, gid, groups: what meta takes (u32 below (uid_t)-1, at most NGROUPS_MAX groups), or the daemon would start and every request fail. */
function ids<T>(check: (v: unknown, what: string) => T, v: unknown, name: string, dflt: () => T): T {
  if (v === undefined || v === null) return dflt()
  try {
    return check(v, name)
  } catch (e) {
    bad((e as StrataError).reason)
  }
}

function bool(v: unknown, name: string, dflt: boolean): boolean {
  if (v === undefined || v === null) return dflt
  if (typeof v !== 'boolean') bad(`${name} must be true or false`)
  return v
}

function addrs(v: unknown, name: string): string[] | undefined {
  if (v === undefined || v === null) return undefined
  if (!Array.isArray(v) || v.some((a) => typeof a !== 'string' || !/^[^:]+:\d+$/.test(a))) bad(`${name} must be a list of host:port`)
  return v as string[]
}

/** Validates a daemon config and fills in the defaults. */
export function resolveFuseConfig(c: FuseDaemonConfig): ResolvedFuseConfig {
  if (!c || typeof c !== 'object') bad('not an object')
  if (typeof c.mountpoint !== 'string' || !c.mountpoint) bad('mountpoint is required')
  if (!path.isAbsolute(c.mountpoint)) bad(`mountpoint must be absolute, got ${c.mountpoint}`)
  const mgmtdAddresses = addrs(c.mgmtdAddresses, 'mgmtdAddresses')
  if (!mgmtdAddresses?.length) bad('mgmtdAddresses is required')
  const uid = ids(checkId, c.uid, 'uid', () => (typeof process.getuid === 'function' ? process.getuid() : 0))
  const gid = ids(checkId, c.gid, 'gid', () => (typeof process.getgid === 'function' ? process.getgid() : 0))
  const isRoot = typeof process.getuid !== 'function' || process.getuid() === 0
  if (c.listen !== undefined && (typeof c.listen !== 'string' || !/^[^:]*:\d+$/.test(c.listen))) bad('listen must be host:port')
  const out: ResolvedFuseConfig = {
    // as the mount table will show it (through symlinks), which every later lookup compares with
    mountpoint: canonicalMountpoint(c.mountpoint),
    mgmtdAddresses,
    attrTimeout: num(c.attrTimeout, 'attrTimeout', FUSE_DEFAULTS.attrTimeout),
    entryTimeout: num(c.entryTimeout, 'entryTimeout', FUSE_DEFAULTS.entryTimeout),
    periodicSyncMs: num(c.periodicSyncMs, 'periodicSyncMs', FUSE_DEFAULTS.periodicSyncMs, { integer: true }),
    periodicSyncLimit: num(c.periodicSyncLimit, 'periodicSyncLimit', FUSE_DEFAULTS.periodicSyncLimit, { integer: true, min: 1 }),
    writeBufferSize: writeBufferSize(c.writeBufferSize),
    writeBehind: num(c.writeBehind, 'writeBehind', FUSE_DEFAULTS.writeBehind, { integer: true }),
    syncOnStat: bool(c.syncOnStat, 'syncOnStat', FUSE_DEFAULTS.syncOnStat),
    uid,
    gid,
    groups: ids(checkGroups, c.groups, 'groups', () => (uid === (process.getuid?.() ?? 0) ? (process.getgroups?.() ?? []).filter((g) => g !== gid) : [])),
    allowOther: bool(c.allowOther, 'allowOther', isRoot),
    defaultPermissions: bool(c.defaultPermissions, 'defaultPermissions', FUSE_DEFAULTS.defaultPermissions),
    readonly: bool(c.readonly, 'readonly', FUSE_DEFAULTS.readonly),
    opTimeoutMs: num(c.opTimeoutMs, 'opTimeoutMs', FUSE_DEFAULTS.opTimeoutMs, { integer: true }),
    orphanTimeoutMs: num(c.orphanTimeoutMs, 'orphanTimeoutMs', FUSE_DEFAULTS.orphanTimeoutMs, { integer: true }),
    maxReadahead: num(c.maxReadahead, 'maxReadahead', FUSE_DEFAULTS.maxReadahead, { integer: true }),
    maxRead: requestSize(c.maxRead, 'maxRead', FUSE_DEFAULTS.maxRead),
    maxWrite: requestSize(c.maxWrite, 'maxWrite', FUSE_DEFAULTS.maxWrite),
    chunkReadAhead: bool(c.chunkReadAhead, 'chunkReadAhead', FUSE_DEFAULTS.chunkReadAhead),
    chunkReadAheadBudget: num(c.chunkReadAheadBudget, 'chunkReadAheadBudget', FUSE_DEFAULTS.chunkReadAheadBudget, { integer: true }),
    chunkReadAheadWindow: num(c.chunkReadAheadWindow, 'chunkReadAheadWindow', FUSE_DEFAULTS.chunkReadAheadWindow, { integer: true, min: 1 }),
    chunkReadAheadMaxAgeMs: num(c.chunkReadAheadMaxAgeMs, 'chunkReadAheadMaxAgeMs', FUSE_DEFAULTS.chunkReadAheadMaxAgeMs, { integer: true, min: 1 }),
    nativeReads: bool(c.nativeReads, 'nativeReads', FUSE_DEFAULTS.nativeReads),
    unmountGraceMs: num(c.unmountGraceMs, 'unmountGraceMs', FUSE_DEFAULTS.unmountGraceMs, { integer: true }),
    debug: bool(c.debug, 'debug', FUSE_DEFAULTS.debug),
  }
  const meta = addrs(c.metaAddresses, 'metaAddresses')
  if (meta?.length) out.metaAddresses = meta
  const fallback = addrs(c.metaFallbackAddresses, 'metaFallbackAddresses')
  if (fallback?.length) out.metaFallbackAddresses = fallback
  if (c.clusterDir !== undefined) {
    if (typeof c.clusterDir !== 'string') bad('clusterDir must be a path')
    out.clusterDir = path.resolve(c.clusterDir)
  }
  if (c.nodeId !== undefined) out.nodeId = num(c.nodeId, 'nodeId', 0, { integer: true, min: 1 })
  if (c.listen !== undefined) out.listen = c.listen
  if (c.stateFile !== undefined) {
    if (typeof c.stateFile !== 'string' || !path.isAbsolute(c.stateFile)) bad('stateFile must be an absolute path')
    if (c.stateFile === out.mountpoint || c.stateFile.startsWith(out.mountpoint + path.sep)) bad('stateFile must not be inside the mount point')
    out.stateFile = c.stateFile
  }
  if (c.storageRetry) out.storageRetry = c.storageRetry
  if (c.metaRetry) out.metaRetry = c.metaRetry
  if (c.readMode) out.readMode = c.readMode
  if (c.timers) out.timers = c.timers
  return out
}

/** A FUSE2 timeout option value: fuse-native drops falsy options, so 0 becomes 0.001 s. */
export function fuseTimeout(seconds: number): number {
  return seconds > 0 ? seconds : 0.001
}

/**
 * The libfuse options fuse-native cannot name, appended to fsname (the
 * option string is joined verbatim): writes and reads of maxWrite and
 * maxRead bytes (big_writes: more than 4 KiB per WRITE; the addon lets the
 * kernel go past libfuse 2's 128 KiB), st_ino from the daemon (use_ino: the
 * 3FS inode id, the same for every hard link of a file), readahead, no negative caching (another client may create
 * the name any time), and auto_cache: an open keeps the file's page cache
 * when its mtime and size are what the kernel cached, instead of dropping
 * it at every open, so the sandboxes of a node that open one dataset file
 * read it from the DFS once, not once each. `ro` for a read-only mount.
 */
export function extraFuseOptions(c: ResolvedFuseConfig): string {
  const extra = ['use_ino', 'big_writes', `max_write=${c.maxWrite}`, `max_read=${c.maxRead}`, `max_readahead=${c.maxReadahead}`, 'negative_timeout=0', 'auto_cache']
  // a read-only mount is one for the kernel too: findmnt and /proc/mounts say ro, and tools that check the mount flags (statvfs ST_RDONLY) see it
  if (c.readonly) extra.push('ro')
  return ['strata', ...extra].join(',')
}
