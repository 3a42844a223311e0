// Chunk inspection: query-chunk (one chunk on every target of its chain) and
// dump-chunkmeta (all chunk metadata of the SERVING targets of some chains).

import fs from 'node:fs'
import path from 'node:path'
import { StrataError, toStrataError, type WireError } from '../common/errors.js'
import { StorageMethod } from '../common/services.js'
import { formatChunkId, formatChunkIdHex, parseChunkIdString } from '../common/chunk-id.js'
import type { LocalTargetState, PublicTargetState } from '../common/types.js'
import type { ChunkMeta, GetAllChunkMetadataRsp, QueryChunkRsp } from '../storage/protocol.js'
import { fetchRouting, nodeAddress, storageCall, type AdminSession } from './session.js'
import type { Listing } from './table.js'

/** Chunk metadata as printed and as JSON (chunk id as hex text). */
export interface ChunkMetaView {
  chunkId: string
  /** meta-server rendering `0x<inode>-<track>-<index>` */
  chunkName: string
  size: number
  chunkSize: number
  commitVer: number
  updateVer: number
  chainVer: number
  checksum: string
  state: string
  recycleState: string
  timestamp: number
}

function hex32(n: number): string {
  return (n >>> 0).toString(16).padStart(8, '0')
}

export function chunkMetaView(m: ChunkMeta): ChunkMetaView {
  const id = Buffer.isBuffer(m.chunkId) ? m.chunkId : Buffer.from(m.chunkId as unknown as Uint8Array)
  return {
    chunkId: formatChunkIdHex(id),
    chunkName: formatChunkId(id),
    size: m.size,
    chunkSize: m.chunkSize,
    commitVer: m.commitVer,
    updateVer: m.updateVer,
    chainVer: m.chainVer,
    checksum: hex32(m.checksum),
    state: m.state,
    recycleState: m.recycleState,
    timestamp: m.timestamp,
  }
}

export interface QueryChunkRow {
  targetId: number
  nodeId: number
  publicState: PublicTargetState
  localState: LocalTargetState
  meta: ChunkMetaView | null
  error?: WireError
}

export const QUERY_CHUNK_HEADER = ['TargetId', 'NodeId', 'PublicState', 'LocalState', 'Size', 'ChunkSize', 'CommitVer', 'UpdateVer', 'ChainVer', 'Checksum', 'State', 'Error']

/**
 * `query-chunk -c CHAIN --chunk ID`: asks every target of the chain (head
 * first) for its metadata of the chunk. A target without the chunk shows
 * CHUNK_NOT_FOUND; an unreachable one its RPC error.
 */
export async function queryChunk(s: AdminSession, chainId: number, chunk: string): Promise<Listing<QueryChunkRow> & { chunkId: string }> {
  const chunkId = parseChunkIdString(chunk)
  const ri = await fetchRouting(s)
  const chain = ri.chains[String(chainId)]
  if (!chain) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${chainId} not found`)
  const records = await Promise.all(
    chain.targets.map(async (ct): Promise<QueryChunkRow> => {
      const ti = ri.targets[String(ct.targetId)]
      const base = { targetId: ct.targetId, nodeId: ti?.nodeId ?? 0, publicState: ct.publicState, localState: ti?.localState ?? ('OFFLINE' as const) }
      try {
        const rsp = await storageCall<QueryChunkRsp>(s, nodeAddress(s, ri, base.nodeId), StorageMethod.queryChunk, { chainId, chunkId, targetId: ct.targetId })
        if (!rsp?.meta) return { ...base, meta: null, error: { code: 'CHUNK_NOT_FOUND', message: 'the chunk does not exist' } }
        return { ...base, meta: chunkMetaView(rsp.meta) }
      } catch (e) {
        const se = toStrataError(e)
        return { ...base, meta: null, error: { code: se.code, message: se.reason } }
      }
    }),
  )
  const rows = records.map((r) => {
    const m = r.meta
    return [
      String(r.targetId),
      r.nodeId ? String(r.nodeId) : 'N/A',
      r.publicState,
      r.localState,
      ...(m ? [String(m.size), String(m.chunkSize), String(m.commitVer), String(m.updateVer), String(m.chainVer), m.checksum, m.state] : Array<string>(7).fill('N/A')),
      r.error ? r.error.code : 'OK',
    ]
  })
  return { header: QUERY_CHUNK_HEADER, rows, records, chunkId: formatChunkIdHex(chunkId) }
}

export interface ChunkMetaRow extends ChunkMetaView {
  chainId: number
  targetId: number
}

export const DUMP_CHUNKMETA_HEADER = ['ChainId', 'TargetId', 'ChunkId', 'Size', 'ChunkSize', 'CommitVer', 'UpdateVer', 'ChainVer', 'Checksum', 'State', 'RecycleState']

export interface DumpChunkMetaResult extends Listing<ChunkMetaRow> {
  /** targets skipped because they were not SERVING, or failed */
  skipped: Array<{ chainId: number; targetId: number; reason: string }>
  /** files written with -m DIR */
  files: string[]
}

/**
 * `dump-chunkmeta [-c chain…] [-m DIR]`: metadata of every chunk on every
 * SERVING target of the chains (all chains by default). With `outDir` one
 * `<chainId>-<targetId>.meta` file (JSON lines) per target is written too.
 */
export async function dumpChunkMeta(s: AdminSession, o: { chainIds?: number[]; outDir?: string } = {}): Promise<DumpChunkMetaResult> {
  const ri = await fetchRouting(s)
  let chains = Object.values(ri.chains).sort((a, b) => a.chainId - b.chainId)
  if (o.chainIds?.length) {
    for (const id of o.chainIds) if (!ri.chains[String(id)]) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${id} not found`)
    chains = chains.filter((c) => o.chainIds!.includes(c.chainId))
  }
  if (o.outDir) {
    if (fs.existsSync(o.outDir)) throw new StrataError('ALREADY_EXISTS', `output directory ${o.outDir} already exists`)
    fs.mkdirSync(o.outDir, { recursive: true })
  }
  const records: ChunkMetaRow[] = []
  const skipped: DumpChunkMetaResult['skipped'] = []
  const files: string[] = []
  for (const c of chains) {
    for (const ct of c.targets) {
      if (ct.publicState !== 'SERVING') {
        skipped.push({ chainId: c.chainId, targetId: ct.targetId, reason: `not SERVING (${ct.publicState})` })
        continue
      }
      const ti = ri.targets[String(ct.targetId)]
      try {
        const rsp = await storageCall<GetAllChunkMetadataRsp>(s, nodeAddress(s, ri, ti?.nodeId ?? 0), StorageMethod.getAllChunkMetadata, {
          chainId: c.chainId,
          targetId: ct.targetId,
        })
        const rows = (rsp?.metas ?? []).map((m) => ({ chainId: c.chainId, targetId: ct.targetId, ...chunkMetaView(m) }))
        rows.sort((a, b) => (a.chunkId < b.chunkId ? -1 : a.chunkId > b.chunkId ? 1 : 0))
        records.push(...rows)
        if (o.outDir) {
          const f = path.join(o.outDir, `${c.chainId}-${ct.targetId}.meta`)
          fs.writeFileSync(f, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''))
          files.push(f)
        }
      } catch (e) {
        const se = toStrataError(e)
        skipped.push({ chainId: c.chainId, targetId: ct.targetId, reason: `${se.code}: ${se.reason}` })
      }
    }
  }
  const rows = records.map((r) => [
    String(r.chainId),
    String(r.targetId),
    r.chunkId,
    String(r.size),
    String(r.chunkSize),
    String(r.commitVer),
    String(r.updateVer),
    String(r.chainVer),
    r.checksum,
    r.state,
    r.recycleState,
  ])
  return { header: DUMP_CHUNKMETA_HEADER, rows, records, skipped, files }
}
