// Target and chain ids, and the chain layout `strata cluster up` creates.
//
// Ids follow 3FS's deploy generator (deploy/data_placement/src/setup/gen_chain_table.py):
//   target id = ((targetPrefix * 1e6 + nodeId) * 1e3 + diskIndex + 1) * 100 + targetIndex + 1
//   chain id  = (chainPrefix * 1e3 + diskIndex + 1) * 1e5 + chainIndex
// with both prefixes 10 by default, so node 10001's first target on disk 0 is
// 1001000100101 and a target id can be decoded back to (node, disk, index).
//
// Layout ("simple generator"): every storage node holds `targetsPerNode`
// targets, one per disk (disk index 0..M-1, target index 0). The N*M target
// slots are numbered round by round over the nodes (slot s lives on node
// s mod N, disk floor(s/N)); chain j takes R consecutive slots, which land on
// R distinct nodes because R <= N. The replica order of each chain is rotated
// so that its head is the node leading the fewest chains so far (first such
// in slot order), which spreads chain heads over the nodes.
// The chain index of the chain-id formula counts chains per disk of the
// chain's first slot (1-based), so (disk, index) and therefore chain ids are
// unique. For 3 nodes x 2 targets x 3 replicas this gives the reference
// cluster of ref/3fs.md §9: C1 = S1a,S2a,S3a and C2 = S2b,S3b,S1b.

import { StrataError } from '../common/errors.js'

export const DEFAULT_TARGET_ID_PREFIX = 10
export const DEFAULT_CHAIN_ID_PREFIX = 10
/** 3FS chain ids are u32. */
export const MAX_CHAIN_ID = 0xffffffff

function bad(msg: string): StrataError {
  return new StrataError('INVALID_ARGUMENT', msg)
}

function checkRange(what: string, v: number, min: number, max: number): void {
  if (!Number.isInteger(v) || v < min || v > max) throw bad(`${what} must be an integer in [${min}, ${max}], got ${v}`)
}

/** 3FS deploy formula for a target id. */
export function targetIdOf(nodeId: number, diskIndex: number, targetIndex = 0, prefix = DEFAULT_TARGET_ID_PREFIX): number {
  checkRange('target id prefix', prefix, 0, 99)
  checkRange('node id', nodeId, 1, 999_999)
  checkRange('disk index', diskIndex, 0, 998)
  checkRange('target index', targetIndex, 0, 98)
  const id = ((prefix * 1_000_000 + nodeId) * 1_000 + diskIndex + 1) * 100 + targetIndex + 1
  if (!Number.isSafeInteger(id)) throw bad(`target id for node ${nodeId} disk ${diskIndex} overflows`)
  return id
}

export interface DecodedTargetId {
  prefix: number
  nodeId: number
  diskIndex: number
  targetIndex: number
}

/** Inverse of targetIdOf; undefined when the id was not made by the formula. */
export function decodeTargetId(targetId: number): DecodedTargetId | undefined {
  if (!Number.isSafeInteger(targetId) || targetId <= 0) return undefined
  const targetIndex = (targetId % 100) - 1
  const disk = Math.floor(targetId / 100) % 1000
  const nodeId = Math.floor(targetId / 100_000) % 1_000_000
  const prefix = Math.floor(targetId / 100_000_000_000)
  if (targetIndex < 0 || disk < 1 || nodeId < 1) return undefined
  return { prefix, nodeId, diskIndex: disk - 1, targetIndex }
}

/** 3FS deploy formula for a chain id. */
export function chainIdOf(diskIndex: number, chainIndex: number, prefix = DEFAULT_CHAIN_ID_PREFIX): number {
  checkRange('chain id prefix', prefix, 0, 42)
  checkRange('disk index', diskIndex, 0, 998)
  checkRange('chain index', chainIndex, 1, 99_999)
  const id = (prefix * 1_000 + diskIndex + 1) * 100_000 + chainIndex
  if (id > MAX_CHAIN_ID) throw bad(`chain id ${id} exceeds the u32 range`)
  return id
}

export interface PlannedTarget {
  targetId: number
  nodeId: number
  diskIndex: number
  chainId: number
}

export interface PlannedChain {
  chainId: number
  /** head first */
  targets: number[]
}

export interface ClusterLayout {
  targets: PlannedTarget[]
  chains: PlannedChain[]
}

export interface LayoutOptions {
  /** storage node ids, in node order */
  nodeIds: number[]
  targetsPerNode: number
  replicas: number
  targetIdPrefix?: number
  chainIdPrefix?: number
}

/** Plans targets and chains for a local cluster (see the header comment). */
export function planLayout(o: LayoutOptions): ClusterLayout {
  const N = o.nodeIds.length
  const M = o.targetsPerNode
  const R = o.replicas
  if (N < 1) throw bad('need at least one storage node')
  if (new Set(o.nodeIds).size !== N) throw bad('storage node ids must be distinct')
  checkRange('targets per node', M, 1, 999)
  checkRange('replicas', R, 1, 99)
  if (R > N) throw bad(`${R} replicas need at least ${R} storage nodes, have ${N}`)
  if ((N * M) % R !== 0) {
    throw bad(`${N} nodes x ${M} targets = ${N * M} targets cannot be split into chains of ${R} replicas; pick counts whose product is a multiple of ${R}`)
  }
  const tp = o.targetIdPrefix ?? DEFAULT_TARGET_ID_PREFIX
  const cp = o.chainIdPrefix ?? DEFAULT_CHAIN_ID_PREFIX
  const slot = (s: number) => {
    const nodeId = o.nodeIds[s % N]!
    const diskIndex = Math.floor(s / N)
    return { nodeId, diskIndex, targetId: targetIdOf(nodeId, diskIndex, 0, tp) }
  }
  const K = (N * M) / R
  const perDisk = new Map<number, number>()
  const heads = new Map<number, number>()
  const targets: PlannedTarget[] = []
  const chains: PlannedChain[] = []
  for (let j = 0; j < K; j++) {
    const first = j * R
    const slots = Array.from({ length: R }, (_, r) => slot(first + r))
    // rotate so the head lands on the node leading the fewest chains so far
    let rot = 0
    for (let r = 1; r < R; r++) if ((heads.get(slots[r]!.nodeId) ?? 0) < (heads.get(slots[rot]!.nodeId) ?? 0)) rot = r
    heads.set(slots[rot]!.nodeId, (heads.get(slots[rot]!.nodeId) ?? 0) + 1)
    const ordered = [...slots.slice(rot), ...slots.slice(0, rot)]
    const headDisk = slots[0]!.diskIndex
    const idx = (perDisk.get(headDisk) ?? 0) + 1
    perDisk.set(headDisk, idx)
    const chainId = chainIdOf(headDisk, idx, cp)
    chains.push({ chainId, targets: ordered.map((s) => s.targetId) })
    for (const s of ordered) targets.push({ targetId: s.targetId, nodeId: s.nodeId, diskIndex: s.diskIndex, chainId })
  }
  targets.sort((a, b) => a.nodeId - b.nodeId || a.diskIndex - b.diskIndex)
  return { targets, chains }
}

/** Default stripe size for a table of `chains` chains: min(chains, 16). */
export function defaultStripeSize(chains: number): number {
  return Math.max(1, Math.min(chains, 16))
}
