// 3FS admin_cli `list-clients` (the client sessions mgmtd holds: every file
// client and FUSE daemon extends one while it lives) and `dump-session` (the
// file write sessions meta holds: one per write-mode open, removed by close
// or by session pruning). Together they answer "which client holds this
// file open for writing, and is it still alive?" — the client id that
// `session-prune --client-id` takes.

import fs from 'node:fs'
import { StrataError } from '../common/errors.js'
import { MetaMethod, MgmtdMethod } from '../common/services.js'
import type { NodeType } from '../common/types.js'
import type { ClientSession, ListClientSessionsRsp } from '../mgmtd/protocol.js'
import type { DumpSessionsReq, DumpSessionsRsp, FileSessionRecord, InodeId } from '../meta/protocol.js'
import { inodeHex, type FsAdminSession } from './fs-ops.js'
import type { AdminSession } from './session.js'
import { ymdHMS, type Listing } from './table.js'

// --- list-clients

/** 3FS list-clients columns (Hostname is 3FS's universalId, the client's host) */
export const LIST_CLIENTS_HEADER = ['ClientId', 'ClientStart', 'SessionStart', 'LastExtend', 'ConfigVersion', 'Hostname', 'Description', 'Tags', 'ReleaseVersion']

export interface ClientRow {
  clientId: string
  /** CLIENT (file client) or FUSE */
  type: NodeType
  hostname: string
  pid: number
  description: string
  /** ms since the epoch; null when the client did not say */
  clientStart: number | null
  /** ms: when mgmtd first saw this session */
  sessionStart: number
  /** ms: the last extendClientSession */
  lastExtend: number
  configVersion: number
  tags: string[]
  releaseVersion: string
}

/**
 * `list-clients`: the client sessions mgmtd holds, ordered as 3FS orders them
 * (by hostname, then description — empty ones last — then client id). While
 * mgmtd bootstraps a last row `Mgmtd Bootstrapping  The client list may be
 * incomplete` follows, as in 3FS.
 */
export async function listClients(s: AdminSession): Promise<Listing<ClientRow> & { bootstrapping: boolean }> {
  const rsp = await s.mgmtd.call<ListClientSessionsRsp>(MgmtdMethod.listClientSessions, {})
  const sessions: ClientSession[] = Array.isArray(rsp?.sessions) ? rsp.sessions : []
  const emptyLast = (a: string, b: string) => (a === b ? 0 : !a ? 1 : !b ? -1 : a < b ? -1 : 1)
  sessions.sort((a, b) => emptyLast(a.hostname ?? '', b.hostname ?? '') || emptyLast(a.description ?? '', b.description ?? '') || (a.clientId < b.clientId ? -1 : a.clientId > b.clientId ? 1 : 0))
  const records: ClientRow[] = sessions.map((c) => ({
    clientId: c.clientId,
    type: c.nodeType,
    hostname: c.hostname ?? '',
    pid: c.pid ?? 0,
    description: c.description ?? '',
    clientStart: typeof c.clientStart === 'number' ? c.clientStart : null,
    sessionStart: c.start,
    lastExtend: c.lastExtend,
    configVersion: c.configVersion ?? 0,
    tags: [],
    releaseVersion: c.releaseVersion ?? '',
  }))
  const rows = records.map((r) => [
    r.clientId,
    r.clientStart ? ymdHMS(r.clientStart) : 'N/A',
    ymdHMS(r.sessionStart),
    ymdHMS(r.lastExtend),
    String(r.configVersion),
    r.hostname || 'N/A',
    r.description || 'N/A',
    `[${r.tags.join(',')}]`,
    r.releaseVersion || 'N/A',
  ])
  const bootstrapping = rsp?.bootstrapping === true
  if (bootstrapping) rows.push(['Mgmtd Bootstrapping', 'The client list may be incomplete'])
  return { header: LIST_CLIENTS_HEADER, rows, records, bootstrapping }
}

// --- dump-session

/** columns: the fields of 3FS's FileSession */
export const DUMP_SESSION_HEADER = ['InodeId', 'ClientId', 'SessionId', 'Timestamp']

export interface SessionRow {
  /** 0x + 16 hex digits, as the other admin commands print inodes */
  inodeId: string
  clientId: string
  sessionId: string
  /** µs since the epoch (3FS UtcTime): when the write open made the session */
  timestamp: number
}

export interface DumpSessionOptions {
  clientId?: string
  inode?: InodeId
  /** at most this many sessions (default: all) */
  limit?: number
  /** `InodeId/SessionId` of the last session of the previous page */
  prev?: string
  /** write every session (JSON lines) into this new file instead of returning rows */
  output?: string
}

export interface DumpSessionResult extends Listing<SessionRow> {
  /** -l cut the listing: more sessions follow */
  more: boolean
  /** with more: the `-p` that lists the rest (`InodeId/SessionId` of the last row) */
  next: string | null
  /** with output: how many sessions went into the file */
  written?: number
}

const PAGE = 1000

/** dump-session's `-p` cursor: `<InodeId>/<SessionId>` of the last session listed. */
export function parseSessionCursor(text: string): { inode: InodeId; session: string } {
  // one session id after the inode, as dump-session prints it (clients make UUIDs; meta takes any text)
  const m = /^\s*(0x[0-9a-fA-F]{1,16}|\d{1,20})\/([^/\s]+)\s*$/.exec(text)
  if (!m || BigInt(m[1]!) > 0xffff_ffff_ffff_ffffn) {
    throw new StrataError('INVALID_ARGUMENT', `bad dump-session cursor "${text}", expected InodeId/SessionId of the last session listed (e.g. 0x0000000000001234/<session id>)`)
  }
  return { inode: BigInt(m[1]!), session: m[2]! }
}

function row(s: FileSessionRecord): SessionRow {
  return { inodeId: inodeHex(BigInt(s.inode)), clientId: String(s.clientId), sessionId: String(s.session), timestamp: Number(s.timestamp) }
}

/**
 * `dump-session`: the write sessions meta holds, in KV order (by inode, then
 * session), optionally only a client's or an inode's. With a limit a last row
 * `...` says more follow; `next` lists them. With `output` every session
 * goes into a new file as JSON lines (3FS writes a parquet file there).
 */
export async function dumpSession(f: FsAdminSession, o: DumpSessionOptions = {}): Promise<DumpSessionResult> {
  let prev = o.prev !== undefined ? parseSessionCursor(o.prev) : null
  if (prev && o.inode !== undefined && prev.inode !== o.inode) {
    throw new StrataError('INVALID_ARGUMENT', `dump-session: -p names a session of inode ${inodeHex(prev.inode)}, but --inode is ${inodeHex(o.inode)}`)
  }
  const limit = o.limit && o.limit > 0 ? o.limit : 0
  let fd: number | null = null
  if (o.output !== undefined) {
    try {
      fd = fs.openSync(o.output, 'wx')
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === 'EEXIST') throw new StrataError('INVALID_ARGUMENT', `dump-session: output file ${o.output} already exists`)
      throw new StrataError('INVALID_ARGUMENT', `dump-session: cannot create ${o.output}: ${(e as Error).message}`)
    }
  }
  const records: SessionRow[] = []
  let written = 0
  let lastRow: SessionRow | undefined
  let more = false
  try {
    for (;;) {
      // one beyond the limit tells whether more follow
      const want = limit ? Math.min(PAGE, limit + 1 - (records.length + written)) : PAGE
      const req: DumpSessionsReq = {
        limit: want,
        ...(o.inode !== undefined ? { inode: o.inode } : {}),
        ...(o.clientId !== undefined ? { clientId: o.clientId } : {}),
        ...(prev ? { prev } : {}),
      }
      const rsp = await f.meta.call<DumpSessionsRsp>(MetaMethod.dumpSessions, req)
      for (const s of rsp.sessions ?? []) {
        if (limit && records.length + written >= limit) {
          more = true
          break
        }
        const r = row(s)
        lastRow = r
        if (fd !== null) {
          fs.writeSync(fd, JSON.stringify(r) + '\n')
          written++
        } else records.push(r)
      }
      if (more || !rsp.more || !rsp.next) break
      prev = { inode: BigInt(rsp.next.inode), session: rsp.next.session }
    }
  } finally {
    if (fd !== null) fs.closeSync(fd)
  }
  const rows = records.map((r) => [r.inodeId, r.clientId, r.sessionId, ymdHMS(Math.floor(r.timestamp / 1000))])
  if (more) rows.push(['...'])
  return { header: DUMP_SESSION_HEADER, rows, records, more, next: more && lastRow ? `${lastRow.inodeId}/${lastRow.sessionId}` : null, ...(fd !== null ? { written } : {}) }
}
