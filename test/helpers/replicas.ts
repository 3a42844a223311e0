// "Replicas equal" as ref/3fs.md §9 defines it: for every chunk of a chain,
// every target shows the same length and checksum, commitVer == updateVer,
// and byte-identical data.
import { ServiceId, StorageMethod } from '../../fs/common/services.js'
import type { GetAllChunkMetadataRsp, QueryChunkRsp } from '../../fs/storage/protocol.js'
import type { TestCluster } from './procs.js'

export interface ReplicaReport {
  ok: boolean
  problems: string[]
  chunks: number
}

export async function compareReplicas(c: TestCluster, chainIds?: number[]): Promise<ReplicaReport> {
  const ri = await c.mgmtd.refresh()
  const problems: string[] = []
  let chunks = 0
  for (const chainId of chainIds ?? c.chains.map((x) => x.chainId)) {
    const chain = ri.chains[chainId]!
    const metas = await Promise.all(
      chain.targets.map((t) =>
        c.rpc.call<GetAllChunkMetadataRsp>(c.address(c.targetNode.get(t.targetId)!), ServiceId.Storage, StorageMethod.getAllChunkMetadata, { targetId: t.targetId }),
      ),
    )
    const ref = new Map(metas[0]!.metas.map((m) => [m.chunkId.toString('hex'), m]))
    chunks += ref.size
    for (let i = 0; i < metas.length; i++) {
      const tid = chain.targets[i]!.targetId
      const mine = new Map(metas[i]!.metas.map((m) => [m.chunkId.toString('hex'), m]))
      if (mine.size !== ref.size) problems.push(`chain ${chainId} target ${tid}: ${mine.size} chunks vs ${ref.size}`)
      for (const [k, m] of mine) {
        const r = ref.get(k)
        if (!r) {
          problems.push(`chain ${chainId} target ${tid}: extra chunk ${k}`)
          continue
        }
        if (m.commitVer !== m.updateVer || m.state !== 'COMMIT') problems.push(`chain ${chainId} target ${tid} chunk ${k}: ${m.state} v${m.commitVer}/u${m.updateVer}`)
        if (m.size !== r.size || m.checksum !== r.checksum) problems.push(`chain ${chainId} target ${tid} chunk ${k}: size/checksum ${m.size}/${m.checksum} vs ${r.size}/${r.checksum}`)
      }
    }
    // byte comparison of every chunk across replicas
    for (const k of ref.keys()) {
      const chunkId = Buffer.from(k, 'hex')
      const datas = await Promise.all(
        chain.targets.map((t) =>
          c.rpc.call<QueryChunkRsp>(c.address(c.targetNode.get(t.targetId)!), ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId, withData: true }),
        ),
      )
      for (let i = 1; i < datas.length; i++) {
        const a = datas[0]!.data
        const b = datas[i]!.data
        if (!a || !b || !a.equals(b)) problems.push(`chain ${chainId} chunk ${k}: bytes differ on target ${chain.targets[i]!.targetId}`)
      }
    }
  }
  return { ok: problems.length === 0, problems: problems.slice(0, 20), chunks }
}
