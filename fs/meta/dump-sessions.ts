// Admin dump of the file write sessions (INOS records), the data behind
// `strata admin dump-session` (3FS's dump-session scans the same records
// straight from FoundationDB). Pages follow the KV key order — inode (LE),
// then session — so a cursor is just the (inode, session) of the last record
// examined: sessionKey() rebuilds its key. A page reads a bounded number of
// records, so a filter that matches few of many still answers quickly (with
// `more` and a cursor to go on from).

import { StrataError } from '../common/errors.js'
import type { KvEngine } from '../kv/types.js'
import { decodeSession } from './codec.js'
import { PREFIX_SESSION, PRUNE_INODE, keyAfter, prefixEnd, sessionKey, sessionPrefix } from './keys.js'
import type { DumpSessionsReq, DumpSessionsRsp, FileSessionRecord, InodeId } from './protocol.js'

export const DUMP_SESSIONS_DEFAULT_LIMIT = 1000
export const DUMP_SESSIONS_MAX_LIMIT = 10_000
/** records read per page at most, matching or not */
export const DUMP_SESSIONS_SCAN_BUDGET = 20_000

function bad(msg: string): StrataError {
  return new StrataError('META_INVALID_ARGUMENT', msg)
}

/** validated request fields (inode ids arrive as bigint or number from msgpack) */
export interface DumpSessionsArgs {
  inode?: InodeId
  clientId?: string
  limit: number
  prev?: { inode: InodeId; session: string }
}

export function parseDumpSessionsReq(p: unknown, toInode: (v: unknown, what: string) => InodeId): DumpSessionsArgs {
  const r = (p ?? {}) as DumpSessionsReq
  if (typeof r !== 'object') throw bad('dumpSessions: request must be an object')
  const a: DumpSessionsArgs = { limit: DUMP_SESSIONS_DEFAULT_LIMIT }
  if (r.limit !== undefined && r.limit !== null) {
    if (typeof r.limit !== 'number' || !Number.isInteger(r.limit) || r.limit < 0) throw bad(`dumpSessions: limit must be a non-negative integer, got ${String(r.limit)}`)
    if (r.limit > 0) a.limit = Math.min(DUMP_SESSIONS_MAX_LIMIT, r.limit)
  }
  if (r.inode !== undefined && r.inode !== null) a.inode = toInode(r.inode, 'inode')
  if (r.clientId !== undefined && r.clientId !== null) {
    if (typeof r.clientId !== 'string') throw bad('dumpSessions: clientId must be a string')
    if (r.clientId) a.clientId = r.clientId
  }
  if (r.prev !== undefined && r.prev !== null) {
    if (typeof r.prev !== 'object' || typeof r.prev.session !== 'string' || !r.prev.session) throw bad('dumpSessions: prev must be {inode, session} (the next of the previous page)')
    a.prev = { inode: toInode(r.prev.inode, 'prev.inode'), session: r.prev.session }
    if (a.inode !== undefined && a.prev.inode !== a.inode) throw bad(`dumpSessions: prev is a session of inode ${a.prev.inode}, not of inode ${a.inode}`)
  }
  return a
}

/** One page of write sessions, in key order, from a snapshot of the KV. */
export async function dumpSessions(kv: KvEngine, a: DumpSessionsArgs, budget = DUMP_SESSIONS_SCAN_BUDGET): Promise<DumpSessionsRsp> {
  const prefix = a.inode !== undefined ? sessionPrefix(a.inode) : PREFIX_SESSION
  // prune requests (inode 0xffff…ffff) sort last and are not sessions: the range stops before them
  const end = a.inode !== undefined ? prefixEnd(prefix) : sessionPrefix(PRUNE_INODE)
  let begin: Buffer = a.prev ? keyAfter(sessionKey(a.prev.inode, a.prev.session)) : prefix
  const sessions: FileSessionRecord[] = []
  let scanned = 0
  let last: FileSessionRecord | null = null
  for (;;) {
    const want = Math.min(1000, budget - scanned)
    const kvs = await kv.readOnly((txn) => txn.snapshotGetRange(begin, end, { limit: want }))
    for (const entry of kvs) {
      scanned++
      const s = decodeSession(entry.value)
      last = s
      if (s.inode !== PRUNE_INODE && (a.clientId === undefined || s.clientId === a.clientId)) {
        sessions.push(s)
        if (sessions.length >= a.limit) return page(sessions, await hasMore(kv, keyAfter(entry.key), end), s)
      }
    }
    if (kvs.length < want) return { sessions, more: false, next: null }
    begin = keyAfter(kvs[kvs.length - 1]!.key)
    // the budget is spent: the caller goes on from the last record read
    if (scanned >= budget) return page(sessions, true, last)
  }
}

function page(sessions: FileSessionRecord[], more: boolean, last: FileSessionRecord | null): DumpSessionsRsp {
  return { sessions, more, next: more && last ? { inode: last.inode, session: last.session } : null }
}

async function hasMore(kv: KvEngine, begin: Buffer, end: Buffer): Promise<boolean> {
  return (await kv.readOnly((txn) => txn.snapshotGetRange(begin, end, { limit: 1 }))).length > 0
}
