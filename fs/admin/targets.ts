// Target commands: create-target, create-targets, list-targets,
// offline-target, remove-target. Creation and offlining go straight to the
// storage node that holds the target (3FS: StorageSerde createTarget /
// offlineTarget); listings come from mgmtd's routing info.

import { StrataError, isStrataError } from '../common/errors.js'
import { StorageMethod } from '../common/services.js'
import type { LocalTargetState, PublicTargetState, RoutingInfo } from '../common/types.js'
import type { CreateTargetReq } from '../storage/protocol.js'
import type { ChainCsvRow } from './csv.js'
import { decodeTargetId } from './placement.js'
import { fetchRouting, listOrphanTargets, nodeAddress, storageCall, type AdminSession } from './session.js'
import type { ActionResult, Listing } from './table.js'

export interface CreateTargetArgs {
  nodeId: number
  diskIndex: number
  targetId: number
  chainId: number
  chunkSizes?: number[]
}

function checkCreateAllowed(ri: RoutingInfo, a: CreateTargetArgs): void {
  const chain = ri.chains[String(a.chainId)]
  if (chain && chain.targets.length > 1) {
    const t = chain.targets.find((x) => x.targetId === a.targetId)
    if (t?.publicState === 'LASTSRV') {
      throw new StrataError('MGMTD_REFUSED', `creation of target ${a.targetId} is prohibited: it is the LASTSRV target of chain ${a.chainId}`)
    }
  }
}

async function createOne(s: AdminSession, ri: RoutingInfo, a: CreateTargetArgs): Promise<string> {
  checkCreateAllowed(ri, a)
  const req: CreateTargetReq = { targetId: a.targetId, chainId: a.chainId, diskIndex: a.diskIndex, ...(a.chunkSizes?.length ? { chunkSizes: a.chunkSizes } : {}) }
  await storageCall(s, nodeAddress(s, ri, a.nodeId), StorageMethod.createTarget, req)
  return `Create target ${a.targetId} on disk ${a.diskIndex} of ${a.nodeId} succeeded`
}

/** `create-target --node-id --disk-index --target-id --chain-id [--chunk-size …]`. */
export async function createTarget(s: AdminSession, a: CreateTargetArgs): Promise<ActionResult<CreateTargetArgs>> {
  const ri = await fetchRouting(s)
  return { lines: [[await createOne(s, ri, a)]], result: a }
}

export interface CreateTargetsArgs {
  nodeId: number
  /** only targets on these disks */
  diskIndexes?: number[]
  /** take the node's targets from this chains CSV (target ids decoded with the deploy formula) */
  chains?: ChainCsvRow[]
  chunkSizes?: number[]
}

/** Which targets `create-targets` makes on a node, and where that list came from. */
export async function targetsForNode(s: AdminSession, a: CreateTargetsArgs, ri: RoutingInfo): Promise<{ source: string; targets: CreateTargetArgs[] }> {
  const onDisk = (d: number) => !a.diskIndexes?.length || a.diskIndexes.includes(d)
  let source: string
  let targets: CreateTargetArgs[] = []
  if (a.chains) {
    source = 'chains CSV'
    for (const c of a.chains) {
      for (const tid of c.targets) {
        const d = decodeTargetId(tid)
        if (d && d.nodeId === a.nodeId && onDisk(d.diskIndex)) targets.push({ nodeId: a.nodeId, diskIndex: d.diskIndex, targetId: tid, chainId: c.chainId })
      }
    }
  } else if (s.cluster?.layout) {
    source = 'cluster layout'
    targets = s.cluster.layout.targets
      .filter((t) => t.nodeId === a.nodeId && onDisk(t.diskIndex))
      .map((t) => ({ nodeId: t.nodeId, diskIndex: t.diskIndex, targetId: t.targetId, chainId: t.chainId }))
  } else {
    // 3FS behaviour: re-create the targets routing info places on the node's disks
    if (!a.diskIndexes?.length) throw new StrataError('INVALID_ARGUMENT', 'without a cluster directory or --chains, create-targets needs --disk-index')
    source = 'routing info'
    const known = [...Object.values(ri.targets), ...(await listOrphanTargets(s))]
    for (const t of known) {
      if (t.nodeId === a.nodeId && onDisk(t.diskIndex)) targets.push({ nodeId: a.nodeId, diskIndex: t.diskIndex, targetId: t.targetId, chainId: t.chainId })
    }
  }
  if (a.chunkSizes?.length) targets = targets.map((t) => ({ ...t, chunkSizes: a.chunkSizes! }))
  return { source, targets }
}

/** `create-targets --node-id N [--disk-index …]`: every target of the node. */
export async function createTargets(s: AdminSession, a: CreateTargetsArgs): Promise<ActionResult<{ source: string; targets: CreateTargetArgs[] }>> {
  const ri = await fetchRouting(s)
  const { source, targets } = await targetsForNode(s, a, ri)
  if (targets.length === 0) throw new StrataError('NOT_FOUND', `no targets for node ${a.nodeId} in the ${source}`)
  const lines: string[][] = []
  for (const t of targets) lines.push([await createOne(s, ri, t)])
  return { lines, result: { source, targets } }
}

export type TargetRole = 'HEAD' | 'MIDDLE' | 'TAIL'

export interface TargetRow {
  targetId: number
  chainId: number
  role: TargetRole
  publicState: PublicTargetState
  localState: LocalTargetState
  nodeId: number
  diskIndex: number
  usedSize: number
  /** why its node holds it offline until the node restarts; JSON only (the table keeps 3FS's columns) */
  offlineReason?: string
}

export interface OrphanTargetRow {
  targetId: number
  localState: LocalTargetState
  nodeId: number
  diskIndex: number
  usedSize: number
}

export const LIST_TARGETS_HEADER = ['TargetId', 'ChainId', 'Role', 'PublicState', 'LocalState', 'NodeId', 'DiskIndex', 'UsedSize']
export const LIST_ORPHAN_TARGETS_HEADER = ['TargetId', 'LocalState', 'NodeId', 'DiskIndex', 'UsedSize']

/** `list-targets [-c chain]`: targets in chain order (HEAD, MIDDLE…, TAIL), chains by id. */
export async function listTargets(s: AdminSession, o: { chainId?: number } = {}): Promise<Listing<TargetRow>> {
  const ri = await fetchRouting(s)
  let chains = Object.values(ri.chains).sort((a, b) => a.chainId - b.chainId)
  if (o.chainId !== undefined) {
    const c = ri.chains[String(o.chainId)]
    if (!c) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${o.chainId} not found`)
    chains = [c]
  }
  const records: TargetRow[] = []
  for (const c of chains) {
    const n = c.targets.length
    c.targets.forEach((ct, i) => {
      const ti = ri.targets[String(ct.targetId)]
      records.push({
        targetId: ct.targetId,
        chainId: c.chainId,
        role: i === 0 ? 'HEAD' : i === n - 1 ? 'TAIL' : 'MIDDLE',
        publicState: ct.publicState,
        localState: ti?.localState ?? 'OFFLINE',
        nodeId: ti?.nodeId ?? 0,
        diskIndex: ti?.diskIndex ?? 0,
        usedSize: ti?.usedSize ?? 0,
        ...(ti?.offlineReason ? { offlineReason: ti.offlineReason } : {}),
      })
    })
  }
  const rows = records.map((r) => [
    String(r.targetId),
    String(r.chainId),
    r.role,
    r.publicState,
    r.localState,
    r.nodeId ? String(r.nodeId) : 'N/A',
    String(r.diskIndex),
    String(r.usedSize),
  ])
  return { header: LIST_TARGETS_HEADER, rows, records }
}

/** `list-targets --orphan`: targets storage nodes reported that belong to no chain. */
export async function listOrphans(s: AdminSession): Promise<Listing<OrphanTargetRow>> {
  const records = (await listOrphanTargets(s))
    .map((t) => ({ targetId: t.targetId, localState: t.localState, nodeId: t.nodeId, diskIndex: t.diskIndex, usedSize: t.usedSize }))
    .sort((a, b) => a.targetId - b.targetId)
  const rows = records.map((r) => [String(r.targetId), r.localState, r.nodeId ? String(r.nodeId) : 'N/A', String(r.diskIndex), String(r.usedSize)])
  return { header: LIST_ORPHAN_TARGETS_HEADER, rows, records }
}

export interface OfflineTargetArgs {
  targetId: number
  nodeId?: number
  force?: boolean
}

/**
 * `offline-target --target-id T [--node-id N] [--force]`: tells the storage
 * node to take the target offline. Refused without --force when the target
 * is the only SERVING replica of its chain (the chain would become unavailable).
 */
export async function offlineTarget(s: AdminSession, a: OfflineTargetArgs): Promise<ActionResult<{ targetId: number; nodeId: number; forced: boolean }>> {
  const ri = await fetchRouting(s)
  const ti = ri.targets[String(a.targetId)]
  let nodeId = a.nodeId
  if (nodeId !== undefined) {
    // as remove-target: a node that routing info does not place the target on is named, not asked
    const knownNode = ti?.nodeId || (ti ? undefined : (await listOrphanTargets(s)).find((t) => t.targetId === a.targetId)?.nodeId)
    if (knownNode && knownNode !== nodeId) {
      throw new StrataError('MGMTD_TARGET_NOT_FOUND', `target ${a.targetId} is on node ${knownNode}, not on node ${nodeId} (pass --node-id ${knownNode}, or leave it out)`)
    }
  } else {
    nodeId = ti?.nodeId || (await listOrphanTargets(s)).find((t) => t.targetId === a.targetId)?.nodeId
    if (!nodeId) {
      throw new StrataError(
        'MGMTD_TARGET_NOT_FOUND',
        ti
          ? `target ${a.targetId} is in chain ${ti.chainId} but no storage node has reported it, so its node is unknown (pass --node-id)`
          : `target ${a.targetId} is unknown to mgmtd: it is in no chain and no storage node reports it (list-targets, list-targets --orphan; pass --node-id to ask a node directly)`,
      )
    }
  }
  const chain = ti ? ri.chains[String(ti.chainId)] : undefined
  if (chain && !a.force) {
    const serving = chain.targets.filter((t) => t.publicState === 'SERVING')
    if (serving.length === 1 && serving[0]!.targetId === a.targetId) {
      throw new StrataError(
        'MGMTD_REFUSED',
        `target ${a.targetId} is the only SERVING replica of chain ${chain.chainId}; taking it offline makes the chain unavailable (use --force to do it anyway)`,
      )
    }
  }
  await onNode(nodeId, a.targetId, storageCall(s, nodeAddress(s, ri, nodeId), StorageMethod.offlineTarget, { targetId: a.targetId, force: !!a.force }))
  return { lines: [[`Offline target ${a.targetId} of ${nodeId} succeeded`]], result: { targetId: a.targetId, nodeId, forced: !!a.force } }
}

/** A storage node's "no target T on this node", named as the operator gave it. */
async function onNode<T>(nodeId: number, targetId: number, call: Promise<T>): Promise<T> {
  try {
    return await call
  } catch (e) {
    if (isStrataError(e) && e.code === 'TARGET_NOT_FOUND') throw new StrataError('TARGET_NOT_FOUND', `storage node ${nodeId} has no target ${targetId}`, { cause: e })
    throw e
  }
}

/** `remove-target --node-id N --target-id T [--force]`: deletes the target's data on its node. */
export async function removeTarget(s: AdminSession, a: { nodeId: number; targetId: number; force?: boolean }): Promise<ActionResult<{ targetId: number; nodeId: number }>> {
  const ri = await fetchRouting(s)
  const ti = ri.targets[String(a.targetId)]
  const orphan = ti ? undefined : (await listOrphanTargets(s)).find((t) => t.targetId === a.targetId)
  const knownNode = ti?.nodeId || orphan?.nodeId
  if (knownNode && knownNode !== a.nodeId) {
    throw new StrataError('MGMTD_TARGET_NOT_FOUND', `target ${a.targetId} is on node ${knownNode}, not on node ${a.nodeId} (pass --node-id ${knownNode})`)
  }
  if (ti && ti.publicState !== 'OFFLINE' && !a.force) throw new StrataError('MGMTD_REFUSED', removeRefusal(ri, a.targetId, ti.chainId, ti.publicState))
  await onNode(a.nodeId, a.targetId, storageCall(s, nodeAddress(s, ri, a.nodeId), StorageMethod.removeTarget, { targetId: a.targetId, force: !!a.force }))
  // The node heartbeats at once without the target; wait (briefly) until
  // mgmtd has taken that in, so a following list-targets --orphan or
  // update-chain add sees the removal.
  if (!ti) {
    const end = Date.now() + 5000
    while (Date.now() < end && (await listOrphanTargets(s)).some((t) => t.targetId === a.targetId)) await new Promise((r) => setTimeout(r, 50))
  }
  return { lines: [[`Remove target ${a.targetId} of ${a.nodeId} succeeded`]], result: { targetId: a.targetId, nodeId: a.nodeId } }
}

/** Why remove-target refuses a target its chain still uses, and what the operator can do. */
export function removeRefusal(ri: RoutingInfo, targetId: number, chainId: number, state: PublicTargetState): string {
  const chain = ri.chains[String(chainId)]
  const n = chain?.targets.length ?? 0
  if (state === 'LASTSRV') {
    if (n <= 1) {
      return `target ${targetId} is LASTSRV in chain ${chainId}, the chain's only target: it holds the chain's only copy of the data, and a chain's only target cannot be taken out of it; --force removes it anyway and the chain's data is lost`
    }
    return `target ${targetId} is LASTSRV in chain ${chainId}: it was the last to serve and holds the chain's newest data; if its disk is lost, run rotate-lastsrv ${chainId} first, or pass --force (its data is lost)`
  }
  return `target ${targetId} is ${state} in chain ${chainId}; offline it first (offline-target --target-id ${targetId}) or take it out of the chain (update-chain ${chainId} ${targetId} -m remove), or pass --force`
}
