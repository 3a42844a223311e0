// Chain and chain table commands: upload-chains, upload-chain-table,
// list-chains, list-chain-tables, update-chain, rotate-lastsrv, dump-chains,
// dump-chain-table.

import { StrataError } from '../common/errors.js'
import { chainStatus, latestChainTable, type ChainInfo, type ChainTable, type LocalTargetState, type PublicTargetState, type RoutingInfo } from '../common/types.js'
import { formatChainTableCsv, formatChainsCsv, parseChainTableCsvLines, parseChainsCsv, validateChainTable, validateChains, type ChainCsvRow, type KnownTopology } from './csv.js'
import { fetchRouting, listOrphanTargets, type AdminSession } from './session.js'
import type { ActionResult, Listing } from './table.js'

/** Everything mgmtd knows about targets and chains, for CSV validation. */
export async function knownTopology(s: AdminSession, ri?: RoutingInfo): Promise<KnownTopology> {
  ri ??= await fetchRouting(s)
  const targets = new Map<number, { chainId: number }>()
  const chains = new Map<number, number[]>()
  for (const c of Object.values(ri.chains)) chains.set(c.chainId, c.targets.map((t) => t.targetId))
  for (const t of Object.values(ri.targets)) targets.set(t.targetId, { chainId: t.chainId })
  for (const t of await listOrphanTargets(s)) if (!targets.has(t.targetId)) targets.set(t.targetId, { chainId: 0 })
  return { targets, chains }
}

export interface UploadChainsOptions {
  /** name of the CSV in messages */
  source?: string
  setPreferredTargetOrder?: boolean
  /** skip the checks against the cluster (targets not yet reported) */
  skipTargetCheck?: boolean
}

/** `upload-chains`: parses, validates against the cluster, then sets the chains in mgmtd. */
export async function uploadChains(s: AdminSession, csvText: string, o: UploadChainsOptions = {}): Promise<ActionResult<{ chains: ChainCsvRow[]; created: number[] }>> {
  const rows = parseChainsCsv(csvText, o.source ?? 'chains CSV')
  return uploadChainRows(s, rows, o)
}

export async function uploadChainRows(s: AdminSession, rows: ChainCsvRow[], o: UploadChainsOptions = {}): Promise<ActionResult<{ chains: ChainCsvRow[]; created: number[] }>> {
  if (!o.skipTargetCheck) validateChains(rows, await knownTopology(s), o.source ?? 'chains CSV')
  const rsp = await s.mgmtd.setChains({
    chains: rows.map((r) => ({ chainId: r.chainId, targets: r.targets })),
    ...(o.setPreferredTargetOrder ? { setPreferredTargetOrder: true } : {}),
  })
  const created = (rsp as { created?: number[] }).created ?? rows.map((r) => r.chainId)
  return { lines: [[`Upload ${rows.length} chains succeeded`]], result: { chains: rows, created } }
}

/** `upload-chain-table`: a new version of the table (same content as the latest: no new version). */
export async function uploadChainTable(
  s: AdminSession,
  tableId: number,
  csvText: string,
  o: { desc?: string; source?: string } = {},
): Promise<ActionResult<{ chainTableId: number; chainTableVersion: number; chains: number[] }>> {
  const source = o.source ?? 'chain table CSV'
  const { ids, lines } = parseChainTableCsvLines(csvText, source)
  return uploadChainTableIds(s, tableId, ids, { ...o, source, lines })
}

export async function uploadChainTableIds(
  s: AdminSession,
  tableId: number,
  ids: number[],
  o: { desc?: string; source?: string; lines?: readonly number[] } = {},
): Promise<ActionResult<{ chainTableId: number; chainTableVersion: number; chains: number[] }>> {
  if (!Number.isInteger(tableId) || tableId <= 0) throw new StrataError('INVALID_ARGUMENT', `chain table id must be a positive integer, got ${tableId}`)
  const ri = await fetchRouting(s)
  validateChainTable(ids, new Set(Object.values(ri.chains).map((c) => c.chainId)), o.source ?? 'chain table CSV', o.lines)
  const rsp = await s.mgmtd.setChainTable({ chainTableId: tableId, chains: ids, ...(o.desc !== undefined ? { desc: o.desc } : {}) })
  return {
    lines: [[`Upload chain table ${tableId} of version ${rsp.chainTableVersion} succeeded`]],
    result: { chainTableId: tableId, chainTableVersion: rsp.chainTableVersion, chains: ids },
  }
}

export interface ChainTargetRow {
  targetId: number
  publicState: PublicTargetState
  localState: LocalTargetState
}

export interface ChainRow {
  chainId: number
  /** tables referencing the chain (with -t: just that table) */
  chainTables: number[]
  /** for each entry of chainTables, the table version shown */
  chainTableVersions: number[]
  chainVersion: number
  status: string
  preferredOrder: number[]
  /** head → tail */
  targets: ChainTargetRow[]
}

export const LIST_CHAINS_HEADER = ['ChainId', 'ChainTable', 'ChainTableVersion', 'ChainVersion', 'Status', 'PreferredOrder']

function chainTargets(ri: RoutingInfo, c: ChainInfo): ChainTargetRow[] {
  return c.targets.map((t) => ({ targetId: t.targetId, publicState: t.publicState, localState: ri.targets[String(t.targetId)]?.localState ?? 'OFFLINE' }))
}

function joinRefs(v: number[]): string {
  if (v.length === 0) return 'N/A'
  if (v.length <= 2) return v.join(',')
  return `${v[0]},${v[1]},...`
}

/**
 * `list-chains [-t table [-v version]]`. With a table: its chains in table
 * order (latest version unless -v). Without: every chain by id, with the
 * tables that reference it (3FS's ReferencedBy) and their latest versions.
 * Targets print as `id(PUBLIC-LOCAL)` head first.
 */
export async function listChains(s: AdminSession, o: { tableId?: number; version?: number } = {}): Promise<Listing<ChainRow>> {
  const ri = await fetchRouting(s)
  const records: ChainRow[] = []
  const row = (c: ChainInfo, tables: number[], versions: number[]): ChainRow => ({
    chainId: c.chainId,
    chainTables: tables,
    chainTableVersions: versions,
    chainVersion: c.chainVersion,
    status: chainStatus(c),
    preferredOrder: c.preferredTargetOrder ?? [],
    targets: chainTargets(ri, c),
  })
  if (o.tableId !== undefined) {
    const versions = ri.chainTables[String(o.tableId)]
    const table: ChainTable | undefined = o.version ? versions?.[String(o.version)] : latestChainTable(ri, o.tableId)
    if (!table) throw new StrataError('MGMTD_CHAIN_TABLE_NOT_FOUND', `chain table ${o.tableId}${o.version ? ` version ${o.version}` : ''} not found`)
    for (const id of table.chains) {
      const c = ri.chains[String(id)]
      if (!c) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${id} of table ${o.tableId} not found`)
      records.push(row(c, [table.chainTableId], [table.chainTableVersion]))
    }
  } else {
    const refs = new Map<number, Map<number, number>>()
    for (const [tid, vs] of Object.entries(ri.chainTables)) {
      for (const t of Object.values(vs)) {
        for (const cid of t.chains) {
          const m = refs.get(cid) ?? new Map<number, number>()
          m.set(Number(tid), Math.max(m.get(Number(tid)) ?? 0, t.chainTableVersion))
          refs.set(cid, m)
        }
      }
    }
    for (const c of Object.values(ri.chains).sort((a, b) => a.chainId - b.chainId)) {
      const m = [...(refs.get(c.chainId) ?? new Map<number, number>())].sort((a, b) => a[0] - b[0])
      records.push(row(c, m.map((x) => x[0]), m.map((x) => x[1])))
    }
  }
  const width = Math.max(0, ...records.map((r) => r.targets.length))
  const header = [...LIST_CHAINS_HEADER, ...Array<string>(width).fill('Target')]
  const rows = records.map((r) => [
    String(r.chainId),
    joinRefs(r.chainTables),
    joinRefs(r.chainTableVersions),
    String(r.chainVersion),
    r.status,
    `[${r.preferredOrder.join(',')}]`,
    ...r.targets.map((t) => `${t.targetId}(${t.publicState}-${t.localState})`),
  ])
  return { header, rows, records }
}

export interface ChainTableRow {
  chainTableId: number
  chainTableVersion: number
  chainCount: number
  /** distinct replica counts of the table's chains */
  replicaCount: number[]
  desc: string
  chains: number[]
}

export const LIST_CHAIN_TABLES_HEADER = ['ChainTableId', 'ChainTableVersion', 'ChainCount', 'ReplicaCount', 'Desc']

/** `list-chain-tables`: every version of every table. */
export async function listChainTables(s: AdminSession): Promise<Listing<ChainTableRow>> {
  const ri = await fetchRouting(s)
  const tables: ChainTable[] = []
  for (const vs of Object.values(ri.chainTables)) tables.push(...Object.values(vs))
  tables.sort((a, b) => a.chainTableId - b.chainTableId || a.chainTableVersion - b.chainTableVersion)
  const records = tables.map((t) => {
    const sizes = new Set<number>()
    for (const cid of t.chains) sizes.add(ri.chains[String(cid)]?.targets.length ?? 0)
    return {
      chainTableId: t.chainTableId,
      chainTableVersion: t.chainTableVersion,
      chainCount: t.chains.length,
      replicaCount: [...sizes].sort((a, b) => a - b),
      desc: t.desc ?? '',
      chains: [...t.chains],
    }
  })
  const rows = records.map((r) => [String(r.chainTableId), String(r.chainTableVersion), String(r.chainCount), r.replicaCount.join('/'), r.desc])
  return { header: LIST_CHAIN_TABLES_HEADER, rows, records }
}

export interface ChainInfoResult {
  chainId: number
  chainVersion: number
  targets: Array<{ targetId: number; publicState: PublicTargetState }>
  preferredOrder: number[]
}

/** 3FS statChainInfo: two-column rows. */
function chainInfoLines(c: ChainInfoResult): string[][] {
  return [
    ['ChainId', String(c.chainId)],
    ['ChainVersion', String(c.chainVersion)],
    ...c.targets.map((t) => ['Target', `${t.targetId}(${t.publicState})`]),
    ['PreferredOrder', `[${c.preferredOrder.join(',')}]`],
  ]
}

/** The chain an update-chain / rotate-lastsrv answered (as committed, like 3FS prints it); an older mgmtd that answers only a version: as routing shows it now. */
async function chainAfter(s: AdminSession, chainId: number, chainVersion: number, committed?: ChainInfo): Promise<ActionResult<ChainInfoResult>> {
  const c = committed ?? (await fetchRouting(s)).chains[String(chainId)]
  const result: ChainInfoResult = c
    ? { chainId, chainVersion: c.chainVersion, targets: c.targets.map((t) => ({ ...t })), preferredOrder: c.preferredTargetOrder ?? [] }
    : { chainId, chainVersion, targets: [], preferredOrder: [] }
  return { lines: chainInfoLines(result), result }
}

/** `update-chain <chainId> <targetId> -m add|remove`. */
export async function updateChain(s: AdminSession, chainId: number, targetId: number, mode: string): Promise<ActionResult<ChainInfoResult>> {
  const m = mode.toLowerCase()
  if (m !== 'add' && m !== 'remove') throw new StrataError('INVALID_ARGUMENT', `invalid mode "${mode}" (add | remove)`)
  const rsp = await s.mgmtd.updateChain({ chainId, targetId, mode: m })
  return chainAfter(s, chainId, rsp.chainVersion, rsp.chain)
}

/** `rotate-lastsrv <chainId>`: when the LASTSRV target's disk is lost, make the next target LASTSRV. */
export async function rotateLastSrv(s: AdminSession, chainId: number): Promise<ActionResult<ChainInfoResult>> {
  const rsp = await s.mgmtd.rotateLastSrv({ chainId })
  return chainAfter(s, chainId, rsp.chainVersion, rsp.chain)
}

/** `dump-chains`: the current chains as an upload-chains CSV (head first, current order). */
export async function dumpChains(s: AdminSession): Promise<string> {
  const ri = await fetchRouting(s)
  const chains = Object.values(ri.chains).sort((a, b) => a.chainId - b.chainId)
  return formatChainsCsv(chains.map((c) => ({ chainId: c.chainId, targets: c.targets.map((t) => t.targetId) })))
}

/** `dump-chain-table <tableId> [-v version]`: a table version as an upload-chain-table CSV. */
export async function dumpChainTable(s: AdminSession, tableId: number, version?: number): Promise<string> {
  const ri = await fetchRouting(s)
  const t = version ? ri.chainTables[String(tableId)]?.[String(version)] : latestChainTable(ri, tableId)
  if (!t) throw new StrataError('MGMTD_CHAIN_TABLE_NOT_FOUND', `chain table ${tableId}${version ? ` version ${version}` : ''} not found`)
  return formatChainTableCsv(t.chains)
}
