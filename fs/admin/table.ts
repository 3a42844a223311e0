// Output shapes of the admin commands. Every command returns data; the CLI
// decides between the 3FS text table and JSON. The text form is 3FS's
// printer: each column as wide as its widest cell plus two spaces, the last
// column unpadded.

/** A listing: 3FS header and rows for text output, typed records for --json. */
export interface Listing<T> {
  header: string[]
  rows: string[][]
  records: T[]
}

/** A command that changed something: the 3FS-style message lines plus details for --json. */
export interface ActionResult<T = Record<string, unknown>> {
  /** text output, one table row per entry (a one-cell row prints as a plain line) */
  lines: string[][]
  result: T
}

import { printable } from '../common/printable.js'

const SEP = 2

export function formatTable(rows: ReadonlyArray<ReadonlyArray<string>>): string {
  // cells carry names and paths, which may hold control characters
  const table = rows.map((r) => r.map((cell) => printable(cell)))
  const widths: number[] = []
  for (const r of table) r.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length + SEP)))
  let out = ''
  for (const r of table) {
    let s = ''
    r.forEach((cell, i) => {
      s += cell
      if (i + 1 < r.length) s += ' '.repeat(widths[i]! - cell.length)
    })
    out += s + '\n'
  }
  return out
}

export function formatListing(l: Listing<unknown>): string {
  return formatTable([l.header, ...l.rows])
}

/** 3FS UtcTime::YmdHMS: `YYYY-MM-DD HH:MM:SS` in UTC, N/A for 0. */
export function ymdHMS(ms: number): string {
  if (!ms) return 'N/A'
  return timeOf(ms)
}

/** A time that is always set (an inode's times: 0 is 1970-01-01 00:00:00, as `touch -d @0` sets it). */
export function timeOf(ms: number): string {
  const d = new Date(ms)
  if (Number.isNaN(d.getTime())) return String(ms)
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, '')
}
