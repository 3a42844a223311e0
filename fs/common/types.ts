// Cluster-wide data model shared by mgmtd, storage and clients. Names and
// enumerations follow 3FS (src/fbs/mgmtd/MgmtdTypes.h); values travel over
// RPC as plain msgpack objects, so everything here is plain data.

export type NodeType = 'MGMTD' | 'META' | 'STORAGE' | 'CLIENT' | 'FUSE'
export const NODE_TYPES: readonly NodeType[] = ['MGMTD', 'META', 'STORAGE', 'CLIENT', 'FUSE']

export type NodeStatus =
  | 'PRIMARY_MGMTD'
  | 'HEARTBEAT_CONNECTED'
  | 'HEARTBEAT_CONNECTING'
  | 'HEARTBEAT_FAILED'
  | 'DISABLED'

/** Public target state: stored with the chain and broadcast in routing info. */
export type PublicTargetState = 'SERVING' | 'SYNCING' | 'WAITING' | 'LASTSRV' | 'OFFLINE'
export const PUBLIC_STATES: readonly PublicTargetState[] = ['SERVING', 'SYNCING', 'WAITING', 'LASTSRV', 'OFFLINE']

/** Local target state: reported by the storage node in heartbeats. */
export type LocalTargetState = 'UPTODATE' | 'ONLINE' | 'OFFLINE'
export const LOCAL_STATES: readonly LocalTargetState[] = ['UPTODATE', 'ONLINE', 'OFFLINE']

export type NodeId = number
export type TargetId = number
export type ChainId = number
export type ChainTableId = number

export interface NodeInfo {
  nodeId: NodeId
  type: NodeType
  status: NodeStatus
  hostname: string
  pid: number
  /** host:port of the node's RPC server */
  address: string
  tags: string[]
  /** ms since epoch of the last heartbeat mgmtd accepted */
  lastHeartbeatTime: number
  configVersion: number
  releaseVersion: string
}

export interface ChainTargetInfo {
  targetId: TargetId
  publicState: PublicTargetState
}

export interface ChainInfo {
  chainId: ChainId
  chainVersion: number
  /** head → tail */
  targets: ChainTargetInfo[]
  preferredTargetOrder: TargetId[]
}

export interface ChainTable {
  chainTableId: ChainTableId
  chainTableVersion: number
  chains: ChainId[]
  desc: string
}

export interface TargetInfo {
  targetId: TargetId
  publicState: PublicTargetState
  localState: LocalTargetState
  chainId: ChainId
  nodeId: NodeId
  diskIndex: number
  usedSize: number
  /**
   * Why the target's storage node holds it offline until the process restarts
   * (offline-target, a disk error, a resync that found diverged chunks);
   * absent when it is not held offline.
   */
  offlineReason?: string
}

export interface RoutingInfo {
  routingInfoVersion: number
  bootstrapping: boolean
  nodes: Record<string, NodeInfo>
  /** tableId → version → table */
  chainTables: Record<string, Record<string, ChainTable>>
  chains: Record<string, ChainInfo>
  targets: Record<string, TargetInfo>
}

/** Status of a chain as printed by `list-chains` (SERVING / SYNCING / UNAVAILABLE / SERVING(k/n)). */
export function chainStatus(chain: ChainInfo): string {
  const n = chain.targets.length
  const serving = chain.targets.filter((t) => t.publicState === 'SERVING').length
  if (serving === 0) return 'UNAVAILABLE'
  if (chain.targets.some((t) => t.publicState === 'SYNCING')) return 'SYNCING'
  if (serving === n) return 'SERVING'
  return `SERVING(${serving}/${n})`
}

/** Latest version of a chain table, or undefined. */
export function latestChainTable(ri: RoutingInfo, tableId: ChainTableId): ChainTable | undefined {
  const versions = ri.chainTables[String(tableId)]
  if (!versions) return undefined
  let best: ChainTable | undefined
  for (const t of Object.values(versions)) if (!best || t.chainTableVersion > best.chainTableVersion) best = t
  return best
}
