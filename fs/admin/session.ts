// An operator's connection to a cluster: an mgmtd client (found through the
// cluster directory or given addresses) and an RPC client for direct storage
// calls, plus helpers every admin command needs.

import { StrataError } from '../common/errors.js'
import { MgmtdMethod, ServiceId, StorageMethod } from '../common/services.js'
import type { NodeId, RoutingInfo, TargetInfo } from '../common/types.js'
// the client alone: mgmtd/index.js also loads the service and its lmdb store, which every
// CLI command that talks to a cluster would pay for at start
import { MgmtdClient } from '../mgmtd/client.js'
import type { GetRoutingInfoRsp } from '../mgmtd/protocol.js'
import { RpcClient } from '../rpc/index.js'
import { clusterExists, readClusterFile, resolveClusterDir, type ClusterFile } from './cluster-file.js'

export interface AdminSessionOptions {
  /** cluster directory (resolved with resolveClusterDir) */
  clusterDir?: string | null
  /** mgmtd addresses; when given the cluster directory is optional */
  mgmtdAddresses?: string[]
  /** per-RPC deadline (default 10 s) */
  timeoutMs?: number
}

export interface AdminSession {
  mgmtd: MgmtdClient
  rpc: RpcClient
  /** the cluster description when the session was opened through a cluster directory */
  cluster: ClusterFile | null
  /** where mgmtd is asked (given, or from the cluster description) */
  mgmtdAddresses: string[]
  timeoutMs: number
  close(): void
}

export function openAdminSession(o: AdminSessionOptions = {}): AdminSession {
  let cluster: ClusterFile | null = null
  let addresses = o.mgmtdAddresses?.filter(Boolean) ?? []
  if (addresses.length === 0) {
    cluster = readClusterFile(resolveClusterDir(o.clusterDir))
    addresses = cluster.mgmtdAddresses
  } else if (o.clusterDir) {
    const dir = resolveClusterDir(o.clusterDir)
    if (clusterExists(dir)) cluster = readClusterFile(dir)
  }
  const timeoutMs = o.timeoutMs ?? 10_000
  const rpc = new RpcClient({ connectTimeoutMs: Math.min(3000, timeoutMs), defaultTimeoutMs: timeoutMs, maxBackoffMs: 200 })
  const mgmtd = new MgmtdClient({ addresses, rpc, timeoutMs })
  return {
    mgmtd,
    rpc,
    cluster,
    mgmtdAddresses: [...addresses],
    timeoutMs,
    close() {
      mgmtd.close()
      rpc.close()
    },
  }
}

/** Fresh routing info straight from mgmtd (admin commands never trust a cache). */
export async function fetchRouting(s: AdminSession): Promise<RoutingInfo> {
  const rsp = await s.mgmtd.call<GetRoutingInfoRsp>(MgmtdMethod.getRoutingInfo, {})
  if (!rsp?.info) throw new StrataError('INTERNAL', 'mgmtd returned no routing info')
  return rsp.info
}

export async function listOrphanTargets(s: AdminSession): Promise<TargetInfo[]> {
  const rsp = await s.mgmtd.call<{ targets: TargetInfo[] }>(MgmtdMethod.listOrphanTargets, {})
  return rsp?.targets ?? []
}

/** RPC address of a node: from routing info, else from the cluster description. */
export function nodeAddress(s: AdminSession, ri: RoutingInfo | null, nodeId: NodeId): string {
  const fromRouting = ri?.nodes[String(nodeId)]?.address
  if (fromRouting) return fromRouting
  const p = s.cluster?.processes.find((x) => x.nodeId === nodeId)
  if (p) return p.address
  throw new StrataError('MGMTD_NODE_NOT_FOUND', `node ${nodeId} is unknown to mgmtd and to the cluster description (no address)`)
}

export function storageCall<T>(s: AdminSession, address: string, method: (typeof StorageMethod)[keyof typeof StorageMethod], payload: unknown): Promise<T> {
  return s.rpc.call<T>(address, ServiceId.Storage, method, payload, { timeoutMs: s.timeoutMs })
}

/** Runs fn with a session and closes it afterwards. */
export async function withAdminSession<T>(o: AdminSessionOptions, fn: (s: AdminSession) => Promise<T>): Promise<T> {
  const s = openAdminSession(o)
  try {
    return await fn(s)
  } finally {
    s.close()
  }
}
