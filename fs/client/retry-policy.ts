// How the storage client reacts to each error code (3FS StorageClientImpl's
// isFastRetryError / isTemporarilyUnavailable / isPermanentError, mapped onto
// our codes), and the backoff between attempts.

import { ERRORS, StrataError, isErrorCode, type ErrorCode } from '../common/errors.js'
import { connectRefused } from '../rpc/index.js'

export interface RetryPolicy {
  /** overall budget of one logical update (write, truncate, one removeChunks step) */
  deadlineMs: number
  /** overall budget of one read/batchRead/queryLastChunk call */
  readDeadlineMs: number
  /** timeout of one RPC attempt (capped by what is left of the deadline) */
  attemptTimeoutMs: number
  /** backoff after ordinary retryable errors: initial·2^k with jitter, capped */
  initialDelayMs: number
  maxDelayMs: number
  /** backoff after "fast retry" codes (CHUNK_NOT_COMMIT, ROUTING_VERSION_MISMATCH) */
  fastInitialDelayMs: number
  fastMaxDelayMs: number
  /** head/tail reads: extra attempts on the same replica after a checksum mismatch */
  checksumRetries: number
  /**
   * give up at once with CLUSTER_UNREACHABLE when the request's servers are
   * unreachable and mgmtd has refused connections for this long (the cluster
   * is stopped: no failover completes without mgmtd); 0: never, retry for the
   * whole deadline. Off for library clients; the FUSE daemon sets it.
   */
  orphanTimeoutMs: number
}

// Writes wait out a failover (heartbeat timeout + chain update + retries) rather than fail; 3FS: max_retry_time 60 s.
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  deadlineMs: 60_000,
  readDeadlineMs: 60_000,
  attemptTimeoutMs: 10_000,
  initialDelayMs: 20,
  maxDelayMs: 1_000,
  fastInitialDelayMs: 2,
  fastMaxDelayMs: 100,
  checksumRetries: 1,
  orphanTimeoutMs: 0,
}

export function mergeRetryPolicy(base: RetryPolicy, over?: Partial<RetryPolicy>): RetryPolicy {
  const out = { ...base }
  if (over) {
    for (const [k, v] of Object.entries(over)) {
      if (v === undefined) continue
      if (!(k in base)) throw new Error(`unknown retry option ${k}`)
      if (typeof v !== 'number' || !(v >= 0)) throw new Error(`retry option ${k} must be a non-negative number`)
      ;(out as Record<string, number>)[k] = v
    }
  }
  return out
}

const TRANSPORT: readonly ErrorCode[] = ['RPC_CONNECT_FAILED', 'RPC_SEND_FAILED', 'RPC_CONNECTION_CLOSED', 'TIMEOUT']

/** The routing the client used is (or may be) stale: fetch a newer one before retrying. */
const REFRESH = new Set<ErrorCode>([
  'ROUTING_VERSION_MISMATCH',
  'CHAIN_VERSION_MISMATCH',
  'ROUTING_ERROR',
  'TARGET_OFFLINE',
  'TARGET_NOT_FOUND',
  'TARGET_STATE_INVALID',
  'CHAIN_UNAVAILABLE',
  'NO_SUCCESSOR',
  ...TRANSPORT,
])

/** Expected to clear within milliseconds: a write in flight, a routing broadcast in flight. */
const FAST = new Set<ErrorCode>(['CHUNK_NOT_COMMIT', 'ROUTING_VERSION_MISMATCH'])

/** The replica itself is unreachable or unusable: prefer another one next time. */
const TARGET_FAILED = new Set<ErrorCode>(['IO_ERROR', 'TARGET_OFFLINE', 'TARGET_NOT_FOUND', 'TARGET_STATE_INVALID', ...TRANSPORT])

/** What clusterGone needs of a mgmtd client (MgmtdClient.unreachableForMs). */
export interface MgmtdReachability {
  unreachableForMs(): number
}

/**
 * CLUSTER_UNREACHABLE (wrapping `err`) when the request's server refused the
 * connection and mgmtd has refused every connection for at least
 * orphanTimeoutMs: the whole cluster is stopped, and retrying for the rest
 * of a 60 s budget would only keep the caller (a FUSE request, a process in
 * D state) waiting. null otherwise, and always when orphanTimeoutMs is 0. A
 * failover with mgmtd up is never cut short by this, and neither is a server
 * that is there but slow (a TIMEOUT, a dropped connection): a stopped
 * cluster refuses connections, and the retry after a dropped one says so.
 */
export function clusterGone(err: StrataError, mgmtd: MgmtdReachability | undefined, orphanTimeoutMs: number, what: string): StrataError | null {
  if (!(orphanTimeoutMs > 0) || typeof mgmtd?.unreachableForMs !== 'function' || !refusedAlongChain(err)) return null
  const ms = mgmtd.unreachableForMs()
  if (ms < orphanTimeoutMs) return null
  return new StrataError('CLUSTER_UNREACHABLE', `${what}: ${err.reason}; mgmtd has refused connections for ${Math.round(ms / 1000)} s: is the cluster running? (strata cluster status)`, { cause: err })
}

/** The error, or one it wraps, is a connect the peer refused (a connect that timed out is a busy peer, not a stopped one). */
export function refusedAlongChain(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof StrataError && depth < 8; e = e.cause, depth++) {
    if (connectRefused(e)) return true
    if (e.code !== 'RPC_CONNECT_FAILED') return false
  }
  return false
}

export function isRetryableCode(code: string): boolean {
  return isErrorCode(code) && ERRORS[code].retryable
}

export function needsRoutingRefresh(code: string): boolean {
  return REFRESH.has(code as ErrorCode)
}

export function isFastRetryCode(code: string): boolean {
  return FAST.has(code as ErrorCode)
}

export function isTargetFailure(code: string): boolean {
  return TARGET_FAILED.has(code as ErrorCode)
}

/** Delay before retry number `attempt` (1-based), with 50–100 % jitter. */
export function backoffDelay(policy: RetryPolicy, attempt: number, fast: boolean, random: () => number = Math.random): number {
  const base = fast ? policy.fastInitialDelayMs : policy.initialDelayMs
  const max = fast ? policy.fastMaxDelayMs : policy.maxDelayMs
  const d = Math.min(max, base * 2 ** Math.min(Math.max(attempt - 1, 0), 30))
  return d * (0.5 + random() * 0.5)
}
