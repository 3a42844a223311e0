// Cluster-wide and node commands: init-cluster, list-nodes, register-node,
// unregister-node.

import { StrataError } from '../common/errors.js'
import { MgmtdMethod } from '../common/services.js'
import { NODE_TYPES, type NodeInfo, type NodeStatus, type NodeType } from '../common/types.js'
import type { ClusterInit } from '../mgmtd/index.js'
import { fetchRouting, type AdminSession } from './session.js'
import { checkChunkSize } from '../common/layout.js'
import { formatSize } from './units.js'
import { ymdHMS, type ActionResult, type Listing } from './table.js'

export interface InitClusterArgs {
  chainTableId: number
  chunkSize: number
  stripeSize: number
  allowExisted?: boolean
}

export async function initCluster(s: AdminSession, a: InitClusterArgs): Promise<ActionResult<ClusterInit>> {
  if (!Number.isInteger(a.chainTableId) || a.chainTableId <= 0) throw new StrataError('INVALID_ARGUMENT', `chainTableId must be a positive integer, got ${a.chainTableId}`)
  checkChunkSize(a.chunkSize, 'chunkSize')
  if (!Number.isInteger(a.stripeSize) || a.stripeSize <= 0) throw new StrataError('INVALID_ARGUMENT', `stripeSize must be a positive integer, got ${a.stripeSize}`)
  const cur = (await s.mgmtd.clusterInfo()).init
  if (!a.allowExisted) {
    // re-running the deploy script with the same settings is not an error
    if (cur && cur.chainTableId === a.chainTableId && cur.chunkSize === a.chunkSize && cur.stripeSize === a.stripeSize) {
      return {
        lines: [[`Filesystem already initialized with root directory layout: chain table ${a.chainTableId}, chunksize ${a.chunkSize} (${formatSize(a.chunkSize)}), stripesize ${a.stripeSize}`]],
        result: cur,
      }
    }
    if (cur) {
      throw new StrataError(
        'MGMTD_ALREADY_INITIALIZED',
        `cluster already initialized with chain table ${cur.chainTableId}, chunksize ${cur.chunkSize}, stripesize ${cur.stripeSize} (use --allow-config-existed to change it)`,
      )
    }
  }
  const init = await s.mgmtd.initCluster(a)
  const layout = `chain table ${a.chainTableId}, chunksize ${a.chunkSize} (${formatSize(a.chunkSize)}), stripesize ${a.stripeSize}`
  return {
    // meta takes the layout when it creates the root directory: over an
    // earlier init, an existing root keeps the layout it was created with
    lines: [[cur ? `Stored root directory layout: ${layout}; an existing root directory keeps the layout it was created with (see stat --display-layout /)` : `Init filesystem, root directory layout: ${layout}`]],
    result: init as ClusterInit,
  }
}

export interface NodeRow {
  nodeId: number
  type: NodeType
  status: NodeStatus
  hostname: string
  pid: number
  address: string
  tags: string[]
  lastHeartbeatTime: number
  configVersion: number
  /** config version mgmtd holds for the node's type (undefined: none set) */
  latestConfigVersion?: number
  releaseVersion: string
}

const STATUS_ORDER: NodeStatus[] = ['PRIMARY_MGMTD', 'HEARTBEAT_CONNECTED', 'HEARTBEAT_CONNECTING', 'HEARTBEAT_FAILED', 'DISABLED']

export const LIST_NODES_HEADER = ['Id', 'Type', 'Status', 'Hostname', 'Pid', 'Tags', 'LastHeartbeatTime', 'ConfigVersion', 'ReleaseVersion']

/** `list-nodes`: every registered node, ordered by type, status, id (3FS order). */
export async function listNodes(s: AdminSession): Promise<Listing<NodeRow>> {
  const ri = await fetchRouting(s)
  let versions: Record<string, number> = {}
  try {
    versions = (await s.mgmtd.call<{ versions: Record<string, number> }>(MgmtdMethod.getConfigVersions, {})).versions ?? {}
  } catch {
    // older mgmtd: print bare versions
  }
  const nodes = Object.values(ri.nodes).sort(
    (a: NodeInfo, b: NodeInfo) =>
      NODE_TYPES.indexOf(a.type) - NODE_TYPES.indexOf(b.type) || STATUS_ORDER.indexOf(a.status) - STATUS_ORDER.indexOf(b.status) || a.nodeId - b.nodeId,
  )
  const records: NodeRow[] = nodes.map((n) => ({
    nodeId: n.nodeId,
    type: n.type,
    status: n.status,
    hostname: n.hostname,
    pid: n.pid,
    address: n.address,
    tags: n.tags,
    lastHeartbeatTime: n.lastHeartbeatTime,
    configVersion: n.configVersion,
    ...(versions[n.type] !== undefined ? { latestConfigVersion: versions[n.type] } : {}),
    releaseVersion: n.releaseVersion,
  }))
  const rows = records.map((n) => [
    String(n.nodeId),
    n.type,
    n.status,
    n.hostname || 'N/A',
    String(n.pid),
    `[${n.tags.join(',')}]`,
    ymdHMS(n.lastHeartbeatTime),
    n.latestConfigVersion !== undefined && n.latestConfigVersion === n.configVersion ? `${n.configVersion}(UPTODATE)` : String(n.configVersion),
    n.releaseVersion || 'N/A',
  ])
  return { header: LIST_NODES_HEADER, rows, records }
}

export function parseNodeType(text: string): NodeType {
  const t = text.toUpperCase() === 'CLIENT_AGENT' ? 'CLIENT' : text.toUpperCase()
  if (!NODE_TYPES.includes(t as NodeType)) throw new StrataError('INVALID_ARGUMENT', `invalid node type "${text}"; choices: ${NODE_TYPES.join(' | ')}`)
  return t as NodeType
}

export async function registerNode(s: AdminSession, nodeId: number, type: NodeType): Promise<ActionResult<{ nodeId: number; type: NodeType }>> {
  await s.mgmtd.registerNode({ nodeId, type })
  return { lines: [[`Register node ${nodeId} of type ${type} succeeded`]], result: { nodeId, type } }
}

export async function unregisterNode(s: AdminSession, nodeId: number): Promise<ActionResult<{ nodeId: number }>> {
  await s.mgmtd.unregisterNode({ nodeId })
  return { lines: [[`Unregister node ${nodeId} succeeded`]], result: { nodeId } }
}
