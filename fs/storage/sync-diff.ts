// Resync diff: what the predecessor of a SYNCING target sends it, chunk by
// chunk, after comparing its own chunk metadata with the successor's
// (3FS ResyncWorker::handleSync). The rules are order-sensitive; each one is
// only reached when every rule above it did not apply.
//
// The predecessor is authoritative for committed data, so "send" always means
// a full-chunk replace of the local copy. "Skip" covers chunks that a client
// write is currently moving through the chain: such a write is forwarded to
// the SYNCING successor as a full-chunk replace anyway, so resending would
// only race it. "Fatal" means the successor holds something committed that
// the predecessor cannot explain; 3FS then force-offlines the successor and
// abandons this sync round rather than overwrite or keep unexplained data,
// and so does resync.ts.

import type { ChunkMeta } from './protocol.js'

/**
 * 'heavy' resends every chunk that survives the consistency checks. 3FS has
 * only NONE and HEAVY; checksums are compared at every level, so 'light' is
 * accepted as a synonym of 'none'.
 */
export type FullSyncLevel = 'none' | 'light' | 'heavy'
export type SyncAction = 'transfer' | 'remove' | 'skip' | 'fatal'

export type SyncReason =
  /** neither side has the chunk */
  | 'absent'
  /** successor has a chunk the predecessor does not: remove it */
  | 'remote-only'
  /** predecessor has a chunk the successor does not: send it */
  | 'local-only'
  /** local chunk is being removed; the removal itself will be forwarded */
  | 'local-recycling'
  /** successor's copy was committed under an older chain version */
  | 'remote-chain-ver-low'
  /** successor's copy has a pending or torn write */
  | 'remote-uncommitted'
  /** successor committed under a newer chain version than our committed copy */
  | 'remote-chain-ver-high'
  /** ditto, but our copy has a write in flight that will fix it */
  | 'local-uncommitted'
  /** same chain version, different version, our copy committed under an older chain version */
  | 'commit-ver-mismatch'
  /** same chain version, different version, because a write is in flight now */
  | 'chain-writing'
  | 'full-sync-heavy'
  /** versions agree but contents differ, and no current write explains it */
  | 'checksum-mismatch'
  /** versions agree, contents differ because a write under the current chain version is in flight */
  | 'checksum-mismatch-writing'
  | 'equal'

export interface SyncClassification {
  action: SyncAction
  reason: SyncReason
}

/** The fields the rules look at. */
export type SyncMeta = Pick<ChunkMeta, 'chunkId' | 'commitVer' | 'updateVer' | 'chainVer' | 'state' | 'recycleState' | 'checksum'>

/**
 * Decide one chunk. `local` is the predecessor's metadata, `remote` the
 * SYNCING successor's, `currentChainVer` the chain version this sync runs
 * under.
 */
export function classifySync(
  local: SyncMeta | undefined,
  remote: SyncMeta | undefined,
  currentChainVer: number,
  level: FullSyncLevel = 'none',
): SyncClassification {
  if (local === undefined) return remote === undefined ? { action: 'skip', reason: 'absent' } : { action: 'remove', reason: 'remote-only' }
  // 3FS looks at the recycle state only for chunks both sides have, so a
  // local-only chunk is sent even while it is being removed.
  if (remote === undefined) return { action: 'transfer', reason: 'local-only' }

  if (local.recycleState !== 'NORMAL') return { action: 'skip', reason: 'local-recycling' }
  if (local.chainVer > remote.chainVer) return { action: 'transfer', reason: 'remote-chain-ver-low' }
  if (remote.updateVer !== remote.commitVer || remote.state !== 'COMMIT') return { action: 'transfer', reason: 'remote-uncommitted' }
  if (local.chainVer < remote.chainVer) {
    return local.state === 'COMMIT' ? { action: 'fatal', reason: 'remote-chain-ver-high' } : { action: 'skip', reason: 'local-uncommitted' }
  }
  if (local.updateVer !== remote.commitVer) {
    return local.chainVer !== currentChainVer && local.state === 'COMMIT'
      ? { action: 'fatal', reason: 'commit-ver-mismatch' }
      : { action: 'skip', reason: 'chain-writing' }
  }
  if (level === 'heavy') return { action: 'transfer', reason: 'full-sync-heavy' }
  if (local.checksum !== remote.checksum) {
    return local.chainVer !== currentChainVer
      ? { action: 'fatal', reason: 'checksum-mismatch' }
      : { action: 'skip', reason: 'checksum-mismatch-writing' }
  }
  return { action: 'skip', reason: 'equal' }
}

export function syncDecision(
  local: SyncMeta | undefined,
  remote: SyncMeta | undefined,
  currentChainVer: number,
  level: FullSyncLevel = 'none',
): SyncAction {
  return classifySync(local, remote, currentChainVer, level).action
}

export interface SyncFatal {
  chunkId: Buffer
  reason: SyncReason
  local: SyncMeta
  remote: SyncMeta
}

export interface SyncDiff {
  /** full-chunk writes: chunks present on both sides (in remote order), then local-only chunks (in local order) */
  transfer: Buffer[]
  /** removals on the successor, in remote order; 3FS sends these before the writes */
  remove: Buffer[]
  skip: Buffer[]
  /** non-empty means: do not transfer anything, offline the successor */
  fatal: SyncFatal[]
  /** per-reason counts, for logs and metrics */
  counts: Partial<Record<SyncReason, number>>
}

function key(id: Buffer): string {
  return id.toString('hex')
}

/**
 * Diff whole chunk sets. Unlike 3FS, which stops at the first fatal chunk,
 * every fatal chunk is reported so the log shows the full extent; the caller
 * must still abort when `fatal` is non-empty.
 */
export function diffChunkSets(
  localMetas: Iterable<SyncMeta>,
  remoteMetas: Iterable<SyncMeta>,
  currentChainVer: number,
  level: FullSyncLevel = 'none',
): SyncDiff {
  const locals = new Map<string, SyncMeta>()
  for (const m of localMetas) locals.set(key(m.chunkId), m)
  const diff: SyncDiff = { transfer: [], remove: [], skip: [], fatal: [], counts: {} }
  const seen = new Set<string>()
  const record = (local: SyncMeta | undefined, remote: SyncMeta | undefined, id: Buffer): void => {
    const c = classifySync(local, remote, currentChainVer, level)
    diff.counts[c.reason] = (diff.counts[c.reason] ?? 0) + 1
    switch (c.action) {
      case 'transfer':
        diff.transfer.push(id)
        break
      case 'remove':
        diff.remove.push(id)
        break
      case 'skip':
        diff.skip.push(id)
        break
      case 'fatal':
        diff.fatal.push({ chunkId: id, reason: c.reason, local: local!, remote: remote! })
        break
    }
  }
  for (const remote of remoteMetas) {
    const k = key(remote.chunkId)
    if (seen.has(k)) continue
    seen.add(k)
    record(locals.get(k), remote, remote.chunkId)
  }
  for (const [k, local] of locals) {
    if (!seen.has(k)) record(local, undefined, local.chunkId)
  }
  return diff
}
