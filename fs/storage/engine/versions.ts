// CRAQ per-chunk version algebra (3fs.md §3.1 step 4), kept as a pure
// function so the rules can be tested and reused (e.g. by a simulator)
// without a disk underneath.

import type { ErrorCode } from '../../common/errors.js'

export interface ChunkVersions {
  commitVer: number
  updateVer: number
}

export type VersionDecision =
  | { ok: true; commitVer: number; updateVer: number }
  | { ok: false; code: ErrorCode; message: string }

/**
 * Versions a chunk takes after accepting an update that carries `reqUpdateVer`
 * (0 from a client; the head's assigned version when forwarded).
 *
 * - syncing (full-chunk replace from the predecessor): adopt `w`, with
 *   `commitVer = w - 1`, whatever the local history was;
 * - forwarded `w`: `w ≤ v` already committed, `w ≤ u` duplicate of the pending
 *   one, `w > u + 1` a predecessor update never reached us; otherwise `u := w`;
 * - from a client: `u := u + 1`, refused when an update is already pending.
 */
export function nextVersions(cur: ChunkVersions, reqUpdateVer: number, isSyncing: boolean): VersionDecision {
  const v = cur.commitVer
  const u = cur.updateVer
  const w = reqUpdateVer
  if (isSyncing) {
    if (!(w >= 1)) return { ok: false, code: 'INVALID_ARGUMENT', message: `syncing update needs updateVer >= 1, got ${w}` }
    return { ok: true, commitVer: w - 1, updateVer: w }
  }
  if (w > 0) {
    if (w <= v) return { ok: false, code: 'CHUNK_COMMITTED_UPDATE', message: `update ${w} <= commitVer ${v}` }
    if (w <= u) return { ok: false, code: 'CHUNK_STALE_UPDATE', message: `update ${w} <= updateVer ${u}` }
    if (w > u + 1) return { ok: false, code: 'CHUNK_MISSING_UPDATE', message: `update ${w} > updateVer ${u} + 1` }
    return { ok: true, commitVer: v, updateVer: w }
  }
  if (u + 1 > v + 1) {
    return { ok: false, code: 'CHUNK_ADVANCE_UPDATE', message: `update ${u} is still pending (commitVer ${v})` }
  }
  return { ok: true, commitVer: v, updateVer: u + 1 }
}
