// The two CSV files of 3FS's admin_cli:
//   chains      (`upload-chains`):      header `ChainId,TargetId,TargetId…`, one chain per line, head first
//   chain table (`upload-chain-table`): header `ChainId`, one chain per line
// Parsing is strict: a wrong header, a short or long row, a non-numeric or
// non-positive id, or an id listed twice is refused with the line number.
// Checks that need the cluster (unknown target, target already in another
// chain, unknown chain) are in validateChains/validateChainTable.

import { StrataError } from '../common/errors.js'
import type { ChainId, TargetId } from '../common/types.js'
import { MAX_CHAIN_ID } from './placement.js'

export interface ChainCsvRow {
  chainId: ChainId
  /** head first */
  targets: TargetId[]
  /** 1-based line in the file */
  line: number
}

/** What 3FS's `upload-chains -d` writes. */
export const CHAINS_CSV_TEMPLATE = 'ChainId,TargetId,TargetId\n123,100001,100101\n234,100002,100102\n'
/** What 3FS's `upload-chain-table -d` writes. */
export const CHAIN_TABLE_CSV_TEMPLATE = 'ChainId\n123\n234\n'

function invalid(source: string, msg: string): StrataError {
  return new StrataError('INVALID_ARGUMENT', `invalid ${source}: ${msg}`)
}

interface Line {
  line: number
  cells: string[]
}

function splitLines(text: string): Line[] {
  const out: Line[] = []
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/)
  lines.forEach((raw, i) => {
    if (raw.trim() === '') return
    out.push({ line: i + 1, cells: raw.split(',').map((c) => c.trim()) })
  })
  return out
}

function parseId(source: string, l: Line, col: number, what: string, max: number): number {
  const cell = l.cells[col] ?? ''
  if (!/^\d+$/.test(cell)) throw invalid(source, `line ${l.line}: ${what} "${cell}" is not a number`)
  const v = Number(cell)
  if (v <= 0) throw invalid(source, `line ${l.line}: ${what} must be positive, got ${cell}`)
  if (!Number.isSafeInteger(v) || v > max) throw invalid(source, `line ${l.line}: ${what} ${cell} is out of range (max ${max})`)
  return v
}

/** Parses and checks a chains CSV on its own (header, shape, numbers, duplicates). */
export function parseChainsCsv(text: string, source = 'chains CSV'): ChainCsvRow[] {
  const lines = splitLines(text)
  if (lines.length === 0) throw invalid(source, 'line 1: the file is empty (expected header ChainId,TargetId[,TargetId…])')
  const header = lines[0]!
  if (header.cells[0] !== 'ChainId') throw invalid(source, `line ${header.line}: column[0] expected 'ChainId', got '${header.cells[0]}'`)
  if (header.cells.length === 1) throw invalid(source, `line ${header.line}: no TargetId columns in the header`)
  header.cells.forEach((c, i) => {
    if (i > 0 && c !== 'TargetId') throw invalid(source, `line ${header.line}: column[${i}] expected 'TargetId', got '${c}'`)
  })
  if (lines.length === 1) throw invalid(source, 'no chains after the header')
  const rows: ChainCsvRow[] = []
  const chainLine = new Map<number, number>()
  const targetLine = new Map<number, number>()
  for (const l of lines.slice(1)) {
    if (l.cells.length !== header.cells.length) {
      throw invalid(source, `line ${l.line}: expected ${header.cells.length} columns, got ${l.cells.length}`)
    }
    const chainId = parseId(source, l, 0, 'ChainId', MAX_CHAIN_ID)
    if (chainLine.has(chainId)) throw invalid(source, `line ${l.line}: duplicate chain ${chainId} (also on line ${chainLine.get(chainId)})`)
    chainLine.set(chainId, l.line)
    const targets: number[] = []
    for (let c = 1; c < l.cells.length; c++) {
      const tid = parseId(source, l, c, 'TargetId', Number.MAX_SAFE_INTEGER)
      const prev = targetLine.get(tid)
      if (prev === l.line) throw invalid(source, `line ${l.line}: duplicate target ${tid} (listed twice in chain ${chainId})`)
      if (prev !== undefined) throw invalid(source, `line ${l.line}: duplicate target ${tid} (also on line ${prev})`)
      targetLine.set(tid, l.line)
      targets.push(tid)
    }
    rows.push({ chainId, targets, line: l.line })
  }
  return rows
}

/** Parses and checks a chain table CSV (header `ChainId`, unique positive ids). */
export function parseChainTableCsv(text: string, source = 'chain table CSV'): ChainId[] {
  return parseChainTableCsvLines(text, source).ids
}

/** parseChainTableCsv, also giving the 1-based file line of each id (for later error messages). */
export function parseChainTableCsvLines(text: string, source = 'chain table CSV'): { ids: ChainId[]; lines: number[] } {
  const lines = splitLines(text)
  if (lines.length === 0) throw invalid(source, 'the file is empty (expected header ChainId)')
  const header = lines[0]!
  if (header.cells.length !== 1 || header.cells[0] !== 'ChainId') {
    throw invalid(source, `line ${header.line}: expected the single column 'ChainId', got '${header.cells.join(',')}'`)
  }
  if (lines.length === 1) throw invalid(source, 'no chains after the header')
  const ids: number[] = []
  const at: number[] = []
  const seen = new Map<number, number>()
  for (const l of lines.slice(1)) {
    if (l.cells.length !== 1) throw invalid(source, `line ${l.line}: expected 1 column, got ${l.cells.length}`)
    const id = parseId(source, l, 0, 'ChainId', MAX_CHAIN_ID)
    if (seen.has(id)) throw invalid(source, `line ${l.line}: duplicate chain ${id} (also on line ${seen.get(id)})`)
    seen.set(id, l.line)
    ids.push(id)
    at.push(l.line)
  }
  return { ids, lines: at }
}

export function formatChainsCsv(chains: ReadonlyArray<{ chainId: number; targets: readonly number[] }>): string {
  const width = Math.max(1, ...chains.map((c) => c.targets.length))
  let out = ['ChainId', ...Array<string>(width).fill('TargetId')].join(',') + '\n'
  for (const c of chains) out += [c.chainId, ...c.targets].join(',') + '\n'
  return out
}

export function formatChainTableCsv(chainIds: readonly number[]): string {
  return ['ChainId', ...chainIds].join('\n') + '\n'
}

/** What the cluster knows, for the checks that need it. */
export interface KnownTopology {
  /** every target mgmtd knows (in a chain or orphan) → its chain (0 if none) */
  targets: Map<TargetId, { chainId: ChainId }>
  /** existing chains → their target ids */
  chains: Map<ChainId, TargetId[]>
}

/**
 * Checks parsed chains against the cluster: every target must exist (created
 * on a storage node and reported to mgmtd), must not already serve another
 * chain, and an existing chain may only be re-uploaded with the same targets.
 */
export function validateChains(rows: readonly ChainCsvRow[], known: KnownTopology, source = 'chains CSV'): void {
  for (const r of rows) {
    const existing = known.chains.get(r.chainId)
    if (existing) {
      const a = [...existing].sort((x, y) => x - y)
      const b = [...r.targets].sort((x, y) => x - y)
      if (a.length !== b.length || a.some((v, i) => v !== b[i])) {
        throw invalid(source, `line ${r.line}: chain ${r.chainId} already exists with targets ${existing.join(',')}`)
      }
      continue
    }
    for (const tid of r.targets) {
      const t = known.targets.get(tid)
      if (!t) throw invalid(source, `line ${r.line}: unknown target ${tid} (create it on its storage node first: strata admin create-target)`)
      for (const [cid, tids] of known.chains) {
        if (cid !== r.chainId && tids.includes(tid)) throw invalid(source, `line ${r.line}: target ${tid} already belongs to chain ${cid}`)
      }
    }
  }
}

/** Checks a chain table against the cluster's chains. */
export function validateChainTable(
  chainIds: readonly ChainId[],
  knownChains: ReadonlySet<ChainId> | Map<ChainId, unknown>,
  source = 'chain table CSV',
  /** each id's file line (parseChainTableCsvLines); ids from no file (cluster layout) have none */
  lines?: readonly number[],
): void {
  chainIds.forEach((id, i) => {
    const at = lines?.[i] !== undefined ? `line ${lines[i]}: ` : ''
    if (!knownChains.has(id)) throw invalid(source, `${at}unknown chain ${id} (upload it first: strata admin upload-chains)`)
  })
}
