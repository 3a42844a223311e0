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

export class ChainAllocator {
  private readonly roundRobin = new Map<string, number>()

  constructor(private readonly mgmtd: MgmtdClient) {}

  private async routing(): Promise<RoutingInfo> {
    return this.mgmtd.routing()
  }

  /** 3FS checkLayoutValid: structurally valid and every chain of a concrete layout exists with targets. */
  async checkLayoutValid(layout: Layout): Promise<void> {
    try {
      validateLayout(layout, true)
    } catch (e) {
      throw invalidLayout((e as StrataError).reason ?? String(e))
    }
    if (layout.chains.type === 'Empty') return
    let ri = await this.routing()
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
    let table = chainTableOf(await this.routing(), layout.tableId, layout.tableVersion)
    if (!table) table = chainTableOf(await this.mgmtd.refresh(), layout.tableId, layout.tableVersion)
    if (!table) throw invalidLayout(`chain table ${layout.tableId} version ${layout.tableVersion} not found`)
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
