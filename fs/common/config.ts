// Timers and addresses every daemon shares. 3FS's production defaults are
// minutes long; a local cluster on one machine runs the same logic at the
// test-scale values of ref/3fs.md appendix C so failures are noticed in seconds.

export interface Timers {
  /** storage/meta → mgmtd heartbeat period */
  heartbeatIntervalMs: number
  /** no heartbeat for this long → node HEARTBEAT_FAILED, its targets local OFFLINE */
  heartbeatFailIntervalMs: number
  /** mgmtd chain updater period */
  chainUpdateIntervalMs: number
  /** newly uploaded chains are left alone this long before the updater touches them */
  newChainBootstrapMs: number
  /** clients and storage poll routing info this often (they also refresh on version mismatch) */
  routingRefreshMs: number
  /** resync worker loop period */
  resyncIntervalMs: number
  /** minimum gap between two resync attempts of one chain */
  resyncMinGapMs: number
  /** mgmtd forgets client sessions not extended for this long */
  clientSessionTimeoutMs: number
  /** heartbeat timestamps further than this from mgmtd's clock are rejected */
  maxClockSkewMs: number
}

export const PRODUCTION_TIMERS: Timers = {
  heartbeatIntervalMs: 10_000,
  heartbeatFailIntervalMs: 60_000,
  chainUpdateIntervalMs: 1_000,
  newChainBootstrapMs: 120_000,
  routingRefreshMs: 10_000,
  resyncIntervalMs: 500,
  resyncMinGapMs: 30_000,
  clientSessionTimeoutMs: 20 * 60_000,
  maxClockSkewMs: 30_000,
}

export const LOCAL_TIMERS: Timers = {
  heartbeatIntervalMs: 500,
  heartbeatFailIntervalMs: 3_000,
  chainUpdateIntervalMs: 200,
  newChainBootstrapMs: 3_000,
  routingRefreshMs: 1_000,
  resyncIntervalMs: 200,
  resyncMinGapMs: 1_000,
  clientSessionTimeoutMs: 5_000,
  maxClockSkewMs: 30_000,
}

export function mergeTimers(base: Timers, override?: Partial<Timers>): Timers {
  const out = { ...base }
  if (override) {
    for (const [k, v] of Object.entries(override)) {
      if (!(k in base)) throw new Error(`unknown timer ${k}`)
      if (typeof v !== 'number' || !(v >= 0)) throw new Error(`timer ${k} must be a non-negative number`)
      ;(out as Record<string, number>)[k] = v
    }
  }
  return out
}

export const RELEASE_VERSION = '0.1.0'
