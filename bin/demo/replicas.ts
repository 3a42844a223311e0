// Stage 3 (and the end of stage 5): replicas agree. For a few chunks every
// replica is asked directly (StorageMethod.queryChunk to the node that holds
// each target of the chain); then the full chunk metadata of every target
// (getAllChunkMetadata) is compared chain by chain.

import { chunkMetaView } from '../../fs/admin/index.js'
import { formatChunkId } from '../../fs/common/chunk-id.js'
import { ServiceId, StorageMethod } from '../../fs/common/services.js'
import type { RoutingInfo } from '../../fs/common/types.js'
import type { ChunkMeta, GetAllChunkMetadataRsp, QueryChunkRsp } from '../../fs/storage/protocol.js'
import { routing, type DemoCluster } from './cluster.js'

export interface ReplicaRow {
  targetId: number
  nodeId: number
  role: string
  state: string
  size: number
  commitVer: number
  updateVer: number
  chainVer: number
  checksum: string
  chunkState: string
  error?: string
}

export interface ReplicaSample {
  chainId: number
  chunk: string
  rows: ReplicaRow[]
  equal: boolean
}

/** What has to agree between replicas of a committed chunk (chainVer may differ after a resync). */
function fingerprint(m: Pick<ChunkMeta, 'size' | 'commitVer' | 'updateVer' | 'checksum' | 'state'>): string {
  return `${m.size}/${m.commitVer}/${m.updateVer}/${m.checksum >>> 0}/${m.state}`
}

function roleOf(i: number, n: number): string {
  return i === 0 ? 'HEAD' : i === n - 1 ? 'TAIL' : 'MIDDLE'
}

function addressOfTarget(ri: RoutingInfo, targetId: number): { nodeId: number; address: string } {
  const t = ri.targets[String(targetId)]
  if (!t) throw new Error(`target ${targetId} is not in routing info`)
  const n = ri.nodes[String(t.nodeId)]
  if (!n?.address) throw new Error(`node ${t.nodeId} of target ${targetId} has no address`)
  return { nodeId: t.nodeId, address: n.address }
}

/** queryChunk on every target of the chunk's chain, head first. */
export async function queryReplicas(c: DemoCluster, chainId: number, chunkId: Buffer): Promise<ReplicaSample> {
  const ri = await routing(c)
  const chain = ri.chains[String(chainId)]
  if (!chain) throw new Error(`chain ${chainId} is not in routing info`)
  const rows = await Promise.all(
    chain.targets.map(async (ct, i): Promise<ReplicaRow> => {
      const { nodeId, address } = addressOfTarget(ri, ct.targetId)
      const base = { targetId: ct.targetId, nodeId, role: roleOf(i, chain.targets.length), state: `${ct.publicState}-${ri.targets[String(ct.targetId)]?.localState ?? 'OFFLINE'}` }
      try {
        const rsp = await c.rpc.call<QueryChunkRsp>(address, ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId }, { timeoutMs: 5000 })
        if (!rsp.meta) return { ...base, size: 0, commitVer: 0, updateVer: 0, chainVer: 0, checksum: '-', chunkState: '-', error: 'CHUNK_NOT_FOUND' }
        const v = chunkMetaView(rsp.meta)
        return { ...base, size: v.size, commitVer: v.commitVer, updateVer: v.updateVer, chainVer: v.chainVer, checksum: v.checksum, chunkState: v.state }
      } catch (e) {
        return { ...base, size: 0, commitVer: 0, updateVer: 0, chainVer: 0, checksum: '-', chunkState: '-', error: (e as { code?: string }).code ?? String(e) }
      }
    }),
  )
  const prints = new Set(rows.map((r) => (r.error ? `error:${r.targetId}` : `${r.size}/${r.commitVer}/${r.updateVer}/${r.checksum}/${r.chunkState}`)))
  const equal = prints.size === 1 && rows.every((r) => !r.error && r.chunkState === 'COMMIT')
  return { chainId, chunk: formatChunkId(chunkId), rows, equal }
}

export const REPLICA_HEADER = ['TargetId', 'NodeId', 'Role', 'State', 'Size', 'CommitVer', 'UpdateVer', 'ChainVer', 'Checksum', 'ChunkState']

export function replicaTable(s: ReplicaSample): string[][] {
  return [
    REPLICA_HEADER,
    ...s.rows.map((r) => [
      String(r.targetId),
      String(r.nodeId),
      r.role,
      r.state,
      String(r.size),
      String(r.commitVer),
      String(r.updateVer),
      String(r.chainVer),
      r.checksum,
      r.error ?? r.chunkState,
    ]),
  ]
}

export interface ReplicaCheck {
  chains: number
  /** replicas compared per chain */
  replicas: number
  /** distinct chunks over all chains */
  chunks: number
  equal: boolean
  /** human-readable differences (first few) */
  differences: string[]
}

/**
 * Every target of every chain must be SERVING-UPTODATE and hold exactly the
 * same chunks with the same size, versions, checksum and state.
 */
export async function compareAllReplicas(c: DemoCluster): Promise<ReplicaCheck> {
  const ri = await routing(c)
  const differences: string[] = []
  let chunks = 0
  let replicas = 0
  for (const chainId of c.chains) {
    const chain = ri.chains[String(chainId)]
    if (!chain) throw new Error(`chain ${chainId} is not in routing info`)
    replicas = Math.max(replicas, chain.targets.length)
    const perTarget = await Promise.all(
      chain.targets.map(async (ct) => {
        const local = ri.targets[String(ct.targetId)]?.localState
        if (ct.publicState !== 'SERVING' || local !== 'UPTODATE') differences.push(`chain ${chainId}: target ${ct.targetId} is ${ct.publicState}-${local ?? 'OFFLINE'}, not SERVING-UPTODATE`)
        const { address } = addressOfTarget(ri, ct.targetId)
        const rsp = await c.rpc.call<GetAllChunkMetadataRsp>(address, ServiceId.Storage, StorageMethod.getAllChunkMetadata, { targetId: ct.targetId }, { timeoutMs: 10_000 })
        const m = new Map<string, string>()
        for (const meta of rsp.metas) m.set(Buffer.from(meta.chunkId).toString('hex'), fingerprint(meta))
        return { targetId: ct.targetId, metas: m }
      }),
    )
    const [first, ...rest] = perTarget
    if (!first) continue
    const all = new Set<string>()
    for (const t of perTarget) for (const k of t.metas.keys()) all.add(k)
    chunks += all.size
    for (const id of all) {
      const want = first.metas.get(id)
      for (const t of rest) {
        const got = t.metas.get(id)
        if (got !== want) {
          differences.push(
            `chain ${chainId} chunk ${formatChunkId(Buffer.from(id, 'hex'))}: target ${first.targetId} has ${want ?? 'nothing'}, target ${t.targetId} has ${got ?? 'nothing'} (size/commitVer/updateVer/checksum/state)`,
          )
        }
      }
      for (const t of perTarget) {
        const fp = t.metas.get(id)
        if (fp && !fp.endsWith('/COMMIT')) differences.push(`chain ${chainId} chunk ${formatChunkId(Buffer.from(id, 'hex'))}: target ${t.targetId} is not committed (${fp})`)
      }
    }
  }
  return { chains: c.chains.length, replicas, chunks, equal: differences.length === 0, differences: differences.slice(0, 10) }
}
