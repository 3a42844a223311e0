// Chain allocation for new files, as 3FS ChainAllocator: a layout given or
// inherited with concrete chains is checked against routing info; an Empty
// one ("table + chunk + stripe only") gets a ChainRange whose base index comes
// from a round-robin counter per (table, stripe) — or from the parent
// directory's persisted counter when it carries the 'I' flag — a safe shuffle
// seed, and the table's latest version.

import { StrataError } from '../common/errors.js'
import {
  ALLOC_COUNTER_UNSET,
  allocateChainRange,
  layoutChainIndexes,
  resolveChainRef,
  validateLayout,
  type Layout,
} from '../common/layout.js'
import type { ChainTable, RoutingInfo } from '../common/types.js'
import type { MgmtdClient } from '../mgmtd/index.js'

function invalidLayout(msg: string): StrataError {
  return new StrataError('META_INVALID_ARGUMENT', `invalid layout: ${msg}`)
}

/** The catalogue's code for a chain table (version) routing info does not have, as mgmtd and the admin commands say it. */
export function chainTableNotFound(tableId: number, tableVersion: number): StrataError {
  return new StrataError('MGMTD_CHAIN_TABLE_NOT_FOUND', `chain table ${tableId}${tableVersion ? ` version ${tableVersion}` : ''} not found`)
}

/** Chains of a table version (0 = latest) in routing info. */
export function chainTableOf(ri: RoutingInfo, tableId: number, tableVersion: number): ChainTable | undefined {
  const versions = ri.chainTables[String(tableId)]
  if (!versions) return undefined
  if (tableVersion !== 0) return versions[String(tableVersion)]
  let best: ChainTable | undefined
  for (const t of Object.values(versions)) if (!best || t.chainTableVersion > best.chainTableVersion) best = t
  return best
}

/** Chain ids of a file's stripe, in slot order. */
export function stripeChainIds(ri: RoutingInfo, layout: Layout): number[] {
  const out: number[] = []
  for (const index of layoutChainIndexes(layout)) {
    const id = resolveChainRef({ tableId: layout.tableId, tableVersion: layout.tableVersion, index }, (t, v) => chainTableOf(ri, t, v)?.chains)
    if (id === undefined) throw new StrataError('ROUTING_ERROR', `chain index ${index} of table ${layout.tableId} version ${layout.tableVersion} not in routing info`)
    out.push(id)
  }
  return out
}

/**
 * An explicit chain list names each chain once and, when it indexes a table,
 * stays inside it. The data path wraps an index beyond the table (as 3FS
 * does, and as a ChainRange's base index is meant to), and 3FS accepts both
 * at create; a typo would then put stripes on one chain without a word.
 */
function checkChainList(ri: RoutingInfo, layout: Layout, indexes: number[]): void {
  const what = layout.tableId === 0 ? 'chain' : 'chain index'
  const dup = indexes.find((c, i) => indexes.indexOf(c) !== i)
  if (dup !== undefined) throw invalidLayout(`the chain list names ${what} ${dup} twice`)
  if (layout.tableId === 0) return
  const table = chainTableOf(ri, layout.tableId, layout.tableVersion)
  if (!table) return
  const n = table.chains.length
  const over = indexes.find((c) => c > n)
  if (over !== undefined) {
    throw invalidLayout(`chain index ${over} is beyond chain table ${layout.tableId} version ${table.chainTableVersion}, which has ${n} chain${n === 1 ? '' : 's'} (indexes 1..${n})`)
  }
}

export class ChainAllocator {
  private readonly roundRobin = new Map<string, number>()

  constructor(private readonly mgmtd: MgmtdClient) {}

  private async routing(): Promise<RoutingInfo> {
    return this.mgmtd.routing()
  }

  /**
   * The chain table a layout names (its version, or any version for 0) is in
   * routing info, refreshed once before giving up: MGMTD_CHAIN_TABLE_NOT_FOUND
   * otherwise. Raw chain lists (table 0) name no table.
   */
  async checkChainTable(layout: Layout): Promise<RoutingInfo> {
    const ri = await this.routing()
    if (layout.tableId === 0 && layout.tableVersion === 0) return ri
    if (chainTableOf(ri, layout.tableId, layout.tableVersion)) return ri
    const fresh = await this.mgmtd.refresh()
    if (chainTableOf(fresh, layout.tableId, layout.tableVersion)) return fresh
    throw chainTableNotFound(layout.tableId, layout.tableVersion)
  }

  /**
   * 3FS checkLayoutValid: structurally valid and every chain of a concrete
   * layout exists with targets. A chain table (version) that does not exist
   * is MGMTD_CHAIN_TABLE_NOT_FOUND. An Empty layout is only checked
   * structurally here (the root's layout is checked before any table is
   * uploaded); mkdirs and setAttr add checkChainTable for a given one.
   */
  async checkLayoutValid(layout: Layout): Promise<void> {
    try {
      validateLayout(layout, true)
    } catch (e) {
      throw invalidLayout((e as StrataError).reason ?? String(e))
    }
    if (layout.chains.type === 'Empty') return
    let ri = await this.checkChainTable(layout)
    if (layout.chains.type === 'ChainList') checkChainList(ri, layout, layout.chains.chainIndexes)
    let ids: number[]
    try {
      ids = stripeChainIds(ri, layout)
    } catch {
      ri = await this.mgmtd.refresh()
      try {
        ids = stripeChainIds(ri, layout)
      } catch (e) {
        throw invalidLayout((e as StrataError).reason ?? String(e))
      }
    }
    for (const id of ids) {
      const chain = ri.chains[String(id)]
      if (!chain) throw invalidLayout(`chain ${id} not found`)
      if (chain.targets.length === 0) throw invalidLayout(`chain ${id} has no target`)
    }
  }

  /**
   * Fills in chains for an Empty layout. With `counter` (a directory carrying
   * the 'I' flag) the directory's counter is used and returned advanced;
   * otherwise the in-memory round robin of this server.
   */
  async allocate(layout: Layout, counter?: { value: number }): Promise<Layout> {
    await this.checkLayoutValid(layout)
    if (layout.chains.type !== 'Empty') return layout
    const table = chainTableOf(await this.checkChainTable(layout), layout.tableId, layout.tableVersion)
    if (!table) throw chainTableNotFound(layout.tableId, layout.tableVersion)
    if (!table.chainTableVersion) throw invalidLayout(`chain table ${layout.tableId} has version 0`)
    const chainCount = table.chains.length
    if (chainCount === 0 || chainCount < layout.stripeSize) {
      throw invalidLayout(`try to allocate ${layout.stripeSize} chains from table ${layout.tableId}, found ${chainCount}`)
    }
    const key = `${layout.tableId}/${layout.stripeSize}`
    const cur = counter ? counter.value : this.roundRobin.get(key)
    const { layout: out, nextCounter } = allocateChainRange({
      tableId: layout.tableId,
      tableVersion: table.chainTableVersion,
      chunkSize: layout.chunkSize,
      stripeSize: layout.stripeSize,
      chainCount,
      counter: cur ?? ALLOC_COUNTER_UNSET,
    })
    if (counter) counter.value = nextCounter
    else this.roundRobin.set(key, nextCounter)
    return out
  }
}
