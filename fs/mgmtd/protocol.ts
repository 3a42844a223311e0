// Message shapes of the cluster manager (3FS MgmtdSerde, service 217).

import type {
  ChainId,
  ChainTableId,
  LocalTargetState,
  NodeId,
  NodeInfo,
  NodeType,
  RoutingInfo,
  TargetId,
} from '../common/types.js'

export interface HeartbeatTarget {
  targetId: TargetId
  localState: LocalTargetState
  chainId: ChainId
  diskIndex: number
  usedSize: number
  /** set while the node holds the target offline until it restarts (TargetInfo.offlineReason) */
  offlineReason?: string
}

/** longest offlineReason a heartbeat may carry: a line for operators, not a document */
export const MAX_OFFLINE_REASON = 2000

export interface HeartbeatReq {
  nodeId: NodeId
  type: NodeType
  /** strictly increasing per node process start; older ones are rejected */
  hbVersion: number
  /** sender clock, ms since epoch; skew > 30 s is rejected */
  timestamp: number
  address: string
  hostname: string
  pid: number
  configVersion: number
  releaseVersion: string
  /** STORAGE only */
  targets?: HeartbeatTarget[]
}
export interface HeartbeatRsp {
  routingInfoVersion: number
  configVersion: number
}

export interface RegisterNodeReq {
  nodeId: NodeId
  type: NodeType
}

export interface GetRoutingInfoReq {
  /** return null when the current version equals this */
  knownVersion?: number
}
export interface GetRoutingInfoRsp {
  info: RoutingInfo | null
}

export interface ChainSpec {
  chainId: ChainId
  /** head first */
  targets: TargetId[]
}
export interface SetChainsReq {
  chains: ChainSpec[]
  setPreferredTargetOrder?: boolean
}
export interface SetChainTableReq {
  chainTableId: ChainTableId
  chains: ChainId[]
  desc?: string
}

export interface UpdateChainReq {
  chainId: ChainId
  targetId: TargetId
  mode: 'add' | 'remove'
}

export interface RotateLastSrvReq {
  chainId: ChainId
}

export interface SetConfigReq {
  nodeType: NodeType
  content: string
  desc?: string
}
export interface GetConfigReq {
  nodeType: NodeType
}
export interface GetConfigRsp {
  nodeType: NodeType
  configVersion: number
  content: string
  desc: string
}

export interface ClientSession {
  clientId: string
  nodeType: NodeType
  hostname: string
  pid: number
  start: number
  lastExtend: number
  description: string
  /** when the client process started (ms; 3FS clientStart); absent from clients that do not say */
  clientStart?: number
  /** the client's release (3FS releaseVersion) */
  releaseVersion?: string
  /** the config version the client runs with (3FS configVersion; 0: none) */
  configVersion?: number
}
export interface ExtendClientSessionReq {
  clientId: string
  nodeType: NodeType
  hostname: string
  pid: number
  description?: string
  clientStart?: number
  releaseVersion?: string
  configVersion?: number
}
export interface ListClientSessionsRsp {
  sessions: ClientSession[]
  /** mgmtd is bootstrapping (3FS): the list may be incomplete */
  bootstrapping?: boolean
}

/** Root layout defaults written by `init-cluster <chainTableId> <chunkSize> <stripeSize>`. */
export interface ClusterInit {
  chainTableId: ChainTableId
  chunkSize: number
  stripeSize: number
  initializedAt: number
}
export interface GetClusterInfoRsp {
  init: ClusterInit | null
  primary: { nodeId: NodeId; address: string }
  routingInfoVersion: number
}

export interface NodeIdReq {
  nodeId: NodeId
}
export interface SetNodeTagsReq {
  nodeId: NodeId
  tags: string[]
}

export type { NodeInfo }
