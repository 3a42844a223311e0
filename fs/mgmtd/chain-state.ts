// Chain state machine. mgmtd periodically recomputes every chain from its
// targets' (public, local) states; the rules decide who serves, who
// recovers, and in which order the chain is walked, so they are kept exactly
// as 3FS has them (src/mgmtd/service/updateChain.cc), quirks included:
//
// * Targets are visited grouped by their OLD public state (SERVING, LASTSRV,
//   SYNCING, WAITING, OFFLINE), in chain order within a group, and each
//   decision may depend on what earlier groups produced. That is what limits
//   recovery to one SYNCING target per chain.
// * The output is concatenated by NEW state in the same group order, so
//   failed targets drift to the tail and the head is the first SERVING.
// * Within a new group, targets appear in the order they were decided. A
//   target that was first made LASTSRV and then demoted (because some other
//   target ended up SERVING) is appended to the OFFLINE group last.

import type { LocalTargetState, PublicTargetState, TargetId } from '../common/types.js'

export type { LocalTargetState, PublicTargetState, TargetId }

export interface ChainTargetState {
  targetId: TargetId
  publicState: PublicTargetState
  localState: LocalTargetState
}

/** Output order of the groups, which is also the order old groups are visited in. */
export const PUBLIC_STATE_ORDER: readonly PublicTargetState[] = ['SERVING', 'LASTSRV', 'SYNCING', 'WAITING', 'OFFLINE']

function isAlive(ls: LocalTargetState): boolean {
  return ls === 'ONLINE' || ls === 'UPTODATE'
}

/**
 * One pass of mgmtd's chain updater. Takes the chain in its current order
 * (head first) with each target's current public state and last reported
 * local state; returns the new order with new public states. Extra fields on
 * the input objects are carried over; local states are never changed.
 */
export function generateNewChain<T extends ChainTargetState>(oldTargets: readonly T[]): T[] {
  const byOld = new Map<PublicTargetState, T[]>(PUBLIC_STATE_ORDER.map((s) => [s, []]))
  for (const t of oldTargets) {
    const group = byOld.get(t.publicState)
    if (group === undefined) throw new TypeError(`unknown public state ${String(t.publicState)}`)
    group.push(t)
  }
  const out = new Map<PublicTargetState, T[]>(PUBLIC_STATE_ORDER.map((s) => [s, []]))
  const put = (t: T, ps: PublicTargetState): void => {
    out.get(ps)!.push({ ...t, publicState: ps } as T)
  }
  const serving = out.get('SERVING')!
  const lastsrv = out.get('LASTSRV')!
  const syncing = out.get('SYNCING')!

  for (const t of byOld.get('SERVING')!) {
    if (isAlive(t.localState)) put(t, 'SERVING')
    // Only the first failed SERVING is remembered as the last server; when
    // every replica is down, the chain then waits for that one to return even
    // if a later replica was just as complete.
    else if (lastsrv.length === 0) put(t, 'LASTSRV')
    else put(t, 'OFFLINE')
  }

  for (const t of byOld.get('LASTSRV')!) {
    if (serving.length === 0) put(t, isAlive(t.localState) ? 'SERVING' : 'LASTSRV')
    else put(t, 'OFFLINE')
  }

  for (const t of byOld.get('SYNCING')!) {
    if (t.localState === 'UPTODATE') put(t, 'SERVING')
    else if (t.localState === 'ONLINE') put(t, serving.length > 0 ? 'SYNCING' : 'WAITING')
    else put(t, 'OFFLINE')
  }

  for (const old of ['WAITING', 'OFFLINE'] as const) {
    for (const t of byOld.get(old)!) {
      if (serving.length > 0 && syncing.length === 0 && t.localState === 'ONLINE') put(t, 'SYNCING')
      else if (isAlive(t.localState)) put(t, 'WAITING')
      else put(t, 'OFFLINE')
    }
  }

  if (serving.length > 0) {
    const demoted = lastsrv.splice(0)
    for (const t of demoted) put(t, 'OFFLINE')
  }

  const result: T[] = []
  for (const s of PUBLIC_STATE_ORDER) result.push(...out.get(s)!)
  return result
}

/**
 * Whether a recomputed chain differs from the stored one, i.e. whether the
 * chain version must be bumped. Compares what the chain stores (order,
 * target ids, public states).
 */
export function chainChanged(
  oldTargets: readonly Pick<ChainTargetState, 'targetId' | 'publicState'>[],
  newTargets: readonly Pick<ChainTargetState, 'targetId' | 'publicState'>[],
): boolean {
  if (oldTargets.length !== newTargets.length) return true
  for (let i = 0; i < oldTargets.length; i++) {
    const a = oldTargets[i]!
    const b = newTargets[i]!
    if (a.targetId !== b.targetId || a.publicState !== b.publicState) return true
  }
  return false
}

export interface ChainUpdate<T extends ChainTargetState> {
  targets: T[]
  chainVersion: number
  changed: boolean
}

/**
 * What mgmtd's updater does for one chain: generateNewChain, then (if the
 * chain has a preferred order and every target is SERVING) one rotation step
 * toward that order, then a version bump iff anything changed.
 */
export function computeChainUpdate<T extends ChainTargetState>(
  oldTargets: readonly T[],
  chainVersion: number,
  preferredTargetOrder: readonly TargetId[] = [],
): ChainUpdate<T> {
  let targets = generateNewChain(oldTargets)
  if (preferredTargetOrder.length > 0 && targets.length > 0 && targets[targets.length - 1]!.publicState === 'SERVING') {
    targets = rotateAsPreferredOrder(targets, preferredTargetOrder)
  }
  const changed = chainChanged(oldTargets, targets)
  return { targets, chainVersion: changed ? chainVersion + 1 : chainVersion, changed }
}

/**
 * One step toward `preferredOrder` (a prefix of the desired head-to-tail
 * order). At the first position that holds the wrong target, provided the
 * preferred target is SERVING, the target currently there is pushed to the
 * tail as OFFLINE: it will resync and rejoin behind the others. Repeated
 * passes converge on the preferred order, at the cost of one resync per step.
 */
export function rotateAsPreferredOrder<T extends ChainTargetState>(oldTargets: readonly T[], preferredOrder: readonly TargetId[]): T[] {
  const pos = new Map<TargetId, number>()
  oldTargets.forEach((t, i) => pos.set(t.targetId, i))
  for (let i = 0; i < preferredOrder.length && i < oldTargets.length; i++) {
    const oldPos = pos.get(preferredOrder[i]!)
    // 3FS treats an unknown preferred id as a programming error; stop here.
    if (oldPos === undefined) break
    if (oldPos === i) continue
    if (oldTargets[oldPos]!.publicState !== 'SERVING') break
    const kicked = oldTargets[i]!
    const rest = oldTargets.filter((_, j) => j !== i)
    return [...rest, { ...kicked, publicState: 'OFFLINE', localState: 'OFFLINE' } as T]
  }
  return oldTargets.slice()
}

/**
 * Admin `rotate-lastsrv`: when the LASTSRV head's disk is gone for good, move
 * it to the tail and make the next target the LASTSRV (it must come back to
 * SERVING on its own). Everything else becomes OFFLINE. Loses whatever only
 * the old LASTSRV had. No-op unless the head is LASTSRV and there are >= 2
 * targets.
 */
export function rotateLastSrv<T extends Pick<ChainTargetState, 'targetId' | 'publicState'>>(oldTargets: readonly T[]): T[] {
  if (oldTargets.length < 2 || oldTargets[0]!.publicState !== 'LASTSRV') return oldTargets.slice()
  const rotated = [...oldTargets.slice(1), oldTargets[0]!]
  return rotated.map((t, i) => ({ ...t, publicState: i === 0 ? 'LASTSRV' : 'OFFLINE' }) as T)
}

/** Admin `shutdown-all-chains`: SERVING -> LASTSRV, SYNCING/WAITING -> OFFLINE, order kept. */
export function shutdownChain<T extends Pick<ChainTargetState, 'publicState'>>(oldTargets: readonly T[]): T[] {
  return oldTargets.map((t) => {
    switch (t.publicState) {
      case 'SERVING':
        return { ...t, publicState: 'LASTSRV' } as T
      case 'SYNCING':
      case 'WAITING':
        return { ...t, publicState: 'OFFLINE' } as T
      default:
        return { ...t }
    }
  })
}

/**
 * Storage-side reaction to a routing update (3FS TargetMap::updateLocalState):
 * a freshly started (ONLINE) target that routing shows SERVING is up to date;
 * an UPTODATE target that routing no longer counts as a replica
 * (OFFLINE/LASTSRV/WAITING) must stop serving. Other transitions come from
 * elsewhere (syncDone -> UPTODATE, disk error / admin -> OFFLINE).
 */
export function nextLocalState(local: LocalTargetState, pub: PublicTargetState): LocalTargetState {
  if (local === 'UPTODATE' && (pub === 'OFFLINE' || pub === 'LASTSRV' || pub === 'WAITING')) return 'OFFLINE'
  if (local === 'ONLINE' && pub === 'SERVING') return 'UPTODATE'
  return local
}

/**
 * A target that was LASTSRV and is back in the chain may hold writes that
 * were never acknowledged downstream; 3FS force-commits them
 * (`resetUncommitted`) so the data it serves is self-consistent.
 */
export function shouldResetUncommitted(prevPublic: PublicTargetState, newPublic: PublicTargetState): boolean {
  return prevPublic === 'LASTSRV' && (newPublic === 'SERVING' || newPublic === 'SYNCING' || newPublic === 'WAITING')
}

export interface ChainRole {
  /** SERVING/SYNCING: this target takes part in writes */
  inWritePath: boolean
  isHead: boolean
  isTail: boolean
  /** the target to forward writes to */
  successor?: TargetId
  /** the successor is SYNCING, so this target drives its resync */
  successorSyncing: boolean
}

/**
 * A target's place in the write chain as storage derives it from routing:
 * only the immediate next target can be the successor, and only when it is
 * SERVING or SYNCING (the state ordering guarantees nothing further down is).
 * Undefined when the target is not in the chain.
 */
export function chainRole(targets: readonly Pick<ChainTargetState, 'targetId' | 'publicState'>[], targetId: TargetId): ChainRole | undefined {
  const i = targets.findIndex((t) => t.targetId === targetId)
  if (i < 0) return undefined
  const self = targets[i]!
  const inWritePath = self.publicState === 'SERVING' || self.publicState === 'SYNCING'
  const next = targets[i + 1]
  const nextOk = inWritePath && next !== undefined && (next.publicState === 'SERVING' || next.publicState === 'SYNCING')
  const role: ChainRole = {
    inWritePath,
    isHead: inWritePath && i === 0,
    isTail: inWritePath && !nextOk,
    successorSyncing: nextOk && next!.publicState === 'SYNCING',
  }
  if (nextOk) role.successor = next!.targetId
  return role
}
