// Filesystem commands of 3FS's admin_cli (§7 "FS ops"): mkdir, create, ls,
// stat [--display-layout], set-perm, rm, mv, gc-list, session-prune, and
// query-chunk by path. They run as a file client (MetaClient + StorageClient)
// on top of an admin session; like the other admin modules they return data
// and leave printing to bin/commands.

import { StrataError, toStrataError } from '../common/errors.js'
import { chunkIdOf, formatChunkId, formatChunkIdHex } from '../common/chunk-id.js'
import { layoutChainIndexes, validateNewLayout, type Layout } from '../common/layout.js'
import { latestChainTable, type RoutingInfo } from '../common/types.js'
import { StorageClient } from '../client/storage-client.js'
import { FileSystem } from '../client/file/file-system.js'
import { MetaClient } from '../client/file/meta-client.js'
import { inodeAt, normalizePath, pathAt, plainPath } from '../client/file/flags.js'
import { chainTableOf } from '../client/file/pieces.js'
import type { DirEntry, Inode, InodeType, UserInfo } from '../meta/protocol.js'
import { GC_ROOT_INODE } from '../meta/protocol.js'
import { queryChunk, type QueryChunkRow } from './chunks.js'
import type { ClusterFile } from './cluster-file.js'
import { chainTableNotFound } from '../meta/chains.js'
import { fetchRouting, type AdminSession } from './session.js'
import { timeOf, ymdHMS, type ActionResult, type Listing } from './table.js'

/** An admin session that can also talk to meta and storage as a file client. */
export interface FsAdminSession {
  admin: AdminSession
  meta: MetaClient
  storage: StorageClient
  fs: FileSystem
  close(): Promise<void>
}

/** Meta process addresses recorded in a cluster description (used when routing info lists none). */
export function metaAddressesOf(c: ClusterFile | null | undefined): string[] {
  return (c?.processes ?? []).filter((p) => p.role === 'meta' && p.address).map((p) => p.address)
}

export function openFsAdminSession(s: AdminSession, o: { user?: Partial<UserInfo>; metaAddresses?: string[] } = {}): FsAdminSession {
  const meta = new MetaClient({
    mgmtd: s.mgmtd,
    rpc: s.rpc,
    ...(o.metaAddresses?.length ? { addresses: o.metaAddresses } : { fallbackAddresses: metaAddressesOf(s.cluster) }),
    ...(o.user ? { user: o.user } : {}),
    // one-shot commands keep no file open; they need no client session
    sessionExtendIntervalMs: 0,
    // --timeout is the budget of each request, retries included (as for `fs` commands); a server that
    // has not answered within a quarter of it gets company (MetaClient.attemptTimeoutFor)
    retry: { totalMs: s.timeoutMs },
    description: 'strata admin',
  })
  const storage = new StorageClient({ mgmtd: s.mgmtd, rpc: s.rpc, clientId: meta.clientId, retry: { deadlineMs: s.timeoutMs, readDeadlineMs: s.timeoutMs } })
  const fs = new FileSystem({ mgmtd: s.mgmtd, storage, meta, periodicSyncMs: 0 })
  return {
    admin: s,
    meta,
    storage,
    fs,
    async close() {
      try {
        await fs.shutdown()
      } finally {
        storage.close()
        meta.close()
      }
    },
  }
}

export async function withFsAdminSession<T>(s: AdminSession, fn: (f: FsAdminSession) => Promise<T>, o: { user?: Partial<UserInfo>; metaAddresses?: string[] } = {}): Promise<T> {
  const f = openFsAdminSession(s, o)
  try {
    return await fn(f)
  } finally {
    await f.close()
  }
}

// --- formatting helpers

/** 3FS InodeId::toHexString */
export function inodeHex(id: bigint): string {
  return `0x${id.toString(16).padStart(16, '0')}`
}

export function permString(perm: number): string {
  return (perm & 0o7777).toString(8).padStart(4, '0')
}

/** IFlags as 3FS's stat prints them: `0x%08x`. */
export function iflagsString(iflags: number): string {
  return `0x${(iflags >>> 0).toString(16).padStart(8, '0')}`
}

/**
 * Parses an octal permission like 3FS (`755`, `0644`); throws INVALID_ARGUMENT. The
 * message states the range: `17777` is octal, only too large (it said 'octal expected').
 */
export function parsePerm(text: string | number): number {
  const s = String(text).trim()
  if (!/^0?[0-7]{1,4}$/.test(s)) throw new StrataError('INVALID_ARGUMENT', `invalid permission format: ${text} (octal from 0 to 7777 expected)`)
  return parseInt(s, 8)
}

/** `--inode` argument of stat: decimal or 0x-hex inode id. */
export function parseInodeId(text: string): bigint {
  const s = text.trim()
  if (!/^(0x[0-9a-fA-F]+|\d+)$/.test(s)) throw new StrataError('INVALID_ARGUMENT', `invalid inode id: ${text}`)
  const id = BigInt(s)
  // inode ids are u64: a larger one cannot be encoded into a request
  if (id > 0xffff_ffff_ffff_ffffn) throw new StrataError('INVALID_ARGUMENT', `invalid inode id: ${text} is larger than 0xffffffffffffffff`)
  return id
}

// --- layouts

export interface LayoutArgs {
  chainTableId?: number
  chainTableVer?: number
  /** comma-separated chain ids, or already parsed */
  chainList?: string | number[]
  chunkSize?: number
  stripeSize?: number
}

/**
 * 3FS admin parseLayout: nothing given → undefined (inherit the parent's);
 * with only chunk/stripe size and a base layout → the base with those
 * changed; a chain list → ChainList; else a table → an Empty layout meta
 * fills with a chain range at create.
 */
export function parseLayoutArgs(a: LayoutArgs, base?: Layout): Layout | undefined {
  const given = [a.chainTableId, a.chainTableVer, a.chainList, a.chunkSize, a.stripeSize].filter((x) => x !== undefined).length
  if (given === 0) return undefined
  if (base && a.chainList === undefined && a.chainTableId === undefined && a.chainTableVer === undefined) {
    // checked here as the other forms are, so a size no layout allows is INVALID_ARGUMENT
    // from every command (fs put says so), not meta's META_INVALID_ARGUMENT
    const l: Layout = { ...base, chunkSize: a.chunkSize ?? base.chunkSize, stripeSize: a.stripeSize ?? base.stripeSize }
    validateNewLayout(l, true)
    return l
  }
  if (a.chunkSize === undefined || (a.stripeSize === undefined && a.chainList === undefined) || (a.chainList === undefined && a.chainTableId === undefined)) {
    throw new StrataError(
      'INVALID_ARGUMENT',
      'a layout is --chunk-size and/or --stripe-size alone (the parent directory\'s layout with those sizes), or --chain-table-id with --chunk-size and --stripe-size, or --chain-list with --chunk-size',
    )
  }
  if (a.chainList !== undefined) {
    const ids = Array.isArray(a.chainList)
      ? a.chainList
      : a.chainList
          .split(',')
          .filter((x) => x.trim() !== '')
          .map((x) => {
            const v = Number(x.trim())
            if (!Number.isInteger(v) || v <= 0) throw new StrataError('INVALID_ARGUMENT', `Failed to parse chain-list ${a.chainList}, element ${x}`)
            return v
          })
    if (ids.length === 0) throw new StrataError('INVALID_ARGUMENT', 'chain-list is empty')
    if (a.stripeSize !== undefined && a.stripeSize !== ids.length) {
      throw new StrataError('INVALID_ARGUMENT', `chain-list and stripe-size not match, len(${ids.join(',')}) == ${ids.length}, stripe ${a.stripeSize}`)
    }
    const l: Layout = { tableId: a.chainTableId ?? 0, tableVersion: a.chainTableVer ?? 0, chunkSize: a.chunkSize, stripeSize: ids.length, chains: { type: 'ChainList', chainIndexes: ids } }
    validateNewLayout(l)
    return l
  }
  // --chain-table-ver pins the version meta allocates the file's chains from (0: the latest at create)
  const l: Layout = { tableId: a.chainTableId!, tableVersion: a.chainTableVer ?? 0, chunkSize: a.chunkSize, stripeSize: a.stripeSize!, chains: { type: 'Empty' } }
  validateNewLayout(l, true)
  return l
}

export interface LayoutView {
  tableId: number
  tableVersion: number
  chunkSize: number
  stripeSize: number
  type: 'Empty' | 'ChainRange' | 'ChainList'
  /** ChainRange */
  baseIndex?: number
  shuffle?: number
  /** decimal string (u64) */
  seed?: string
  /** table indexes of the stripe, slot by slot (after the shuffle) */
  chainIndexes: number[]
  /** chain ids of the stripe, slot by slot; null where routing info does not resolve them */
  chains: Array<number | null>
}

export function layoutView(layout: Layout, ri: RoutingInfo | null): LayoutView {
  const indexes = layoutChainIndexes(layout)
  const table = ri && !(layout.tableId === 0 && layout.tableVersion === 0) ? chainTableOf(ri, layout.tableId, layout.tableVersion) : undefined
  const chains = indexes.map((i) => {
    if (layout.tableId === 0 && layout.tableVersion === 0) return i
    if (!table || table.length === 0) return null
    return table[(i - 1) % table.length] ?? null
  })
  const v: LayoutView = {
    tableId: layout.tableId,
    tableVersion: layout.tableVersion,
    chunkSize: layout.chunkSize,
    stripeSize: layout.stripeSize,
    type: layout.chains.type,
    chainIndexes: indexes,
    chains,
  }
  if (layout.chains.type === 'ChainRange') {
    v.baseIndex = layout.chains.baseIndex
    v.shuffle = layout.chains.shuffle
    v.seed = layout.chains.seed.toString()
  }
  return v
}

function layoutRows(v: LayoutView, chainList = true): string[][] {
  const rows: string[][] = [
    ['Layout-ChainTable', String(v.tableId)],
    ['Layout-ChainTableVersion', String(v.tableVersion)],
    ['Layout-ChunkSize', String(v.chunkSize)],
    ['Layout-StripeSize', String(v.stripeSize)],
    ['Layout-Type', v.type],
  ]
  if (v.type === 'ChainRange') {
    rows.push(['Layout-BaseIndex', String(v.baseIndex)], ['Layout-Shuffle', String(v.shuffle)], ['Layout-Seed', String(v.seed)])
  }
  rows.push(['Layout-ChainCount', String(v.chainIndexes.length)])
  if (chainList) rows.push(['Layout-Chains', `[${v.chains.map((c) => (c === null ? '?' : String(c))).join(', ')}]`])
  return rows
}

// --- commands

export interface StatView {
  path: string
  type: InodeType
  inode: string
  nlink: number
  permission: string
  iflags: string
  uid: number
  gid: number
  access: string
  change: string
  modified: string
  /** files */
  length?: number
  truncateVer?: number
  dynStripe?: number
  /** directories */
  parentInode?: string
  /** a directory's lock (lockDirectory / hf3fs.lock): the holding client's id and since when; null when free */
  lock?: { client: string; since: string } | null
  /** symlinks */
  target?: string
  layout?: LayoutView
}

/**
 * `stat [-L] [--display-layout] [--display-chain-list] [--inode] PATH`:
 * 3FS's two-column table (Type Inode NLink Permission IFlags Uid Gid Access
 * Change Modified, then Length/DynamicStripe, ParentInode or Target), and
 * with --display-layout the Layout-* rows including Layout-Chains.
 */
export async function adminStat(
  f: FsAdminSession,
  path: string,
  o: { follow?: boolean; displayLayout?: boolean; displayChainList?: boolean; byInode?: boolean } = {},
): Promise<ActionResult<StatView>> {
  const at = o.byInode ? inodeAt(parseInodeId(path)) : pathAt(path)
  const st = (await f.meta.stat({ path: at, flags: { followLastSymlink: !!o.follow } })).stat
  const ri = o.displayLayout || o.displayChainList ? await fetchRouting(f.admin) : null
  const v: StatView = {
    path: o.byInode ? path : normalizePath(path),
    type: st.type,
    inode: inodeHex(st.id),
    nlink: st.nlink,
    permission: permString(st.acl.perm),
    iflags: iflagsString(st.acl.iflags),
    uid: st.acl.uid,
    gid: st.acl.gid,
    access: timeOf(Math.floor(st.atime / 1000)),
    change: timeOf(Math.floor(st.ctime / 1000)),
    modified: timeOf(Math.floor(st.mtime / 1000)),
  }
  const lines: string[][] = [
    ['Type', v.type],
    ['Inode', v.inode],
    ['NLink', String(v.nlink)],
    ['Permission', v.permission],
    ['IFlags', v.iflags],
    ['Uid', String(v.uid)],
    ['Gid', String(v.gid)],
    ['Access', v.access],
    ['Change', v.change],
    ['Modified', v.modified],
  ]
  if (st.type === 'File' && st.file) {
    v.length = st.file.length
    v.truncateVer = st.file.truncateVer
    v.dynStripe = st.file.dynStripe
    lines.push(['Length', `${st.file.length}@${st.file.truncateVer}`], ['DynamicStripe', String(st.file.dynStripe)])
    if (ri) {
      v.layout = layoutView(st.file.layout, ri)
      lines.push(...layoutRows(v.layout))
    }
  } else if (st.type === 'Directory' && st.directory) {
    v.parentInode = inodeHex(st.directory.parent)
    lines.push(['ParentInode', v.parentInode])
    // the only way besides getxattr on a mount to find who holds a (possibly stale) lock
    const lk = st.directory.lock
    v.lock = lk ? { client: lk.client, since: ymdHMS(Math.floor(lk.since / 1000)) } : null
    lines.push(['Lock', v.lock ? `${v.lock.client} since ${v.lock.since}` : '-'])
    if (ri) {
      v.layout = layoutView(st.directory.layout, ri)
      lines.push(...layoutRows(v.layout))
    }
  } else if (st.type === 'Symlink' && st.symlink) {
    v.target = st.symlink.target
    lines.push(['Target', v.target])
  }
  return { lines, result: v }
}

/** With -s, the fields stat's JSON gives them (numbers, same names): */
export interface LsRow {
  name: string
  type: InodeType
  inode: string
  modified?: string
  /** files: their length; symlinks: the length of their target (as lstat(2)); directories: none */
  length?: number
  /** files */
  truncateVer?: number
  /** symlinks */
  target?: string
  permission?: string
}

/** `ls [-l limit] [-s] [PATH]`: Name Type Inode (+ Modified Length Permission with -s), paging through the listing. */
export async function adminLs(f: FsAdminSession, path = '/', o: { limit?: number; status?: boolean } = {}): Promise<Listing<LsRow>> {
  const records: LsRow[] = []
  let prev = ''
  let left = o.limit
  for (;;) {
    const page = await f.meta.list({ path: pathAt(path), prev, limit: left ?? 0, status: !!o.status })
    page.entries.forEach((e: DirEntry, i: number) => {
      const row: LsRow = { name: e.name, type: e.type, inode: inodeHex(e.id) }
      if (o.status) {
        const ino: Inode | undefined = page.inodes[i]
        if (ino) {
          row.modified = timeOf(Math.floor(ino.mtime / 1000))
          if (ino.type === 'File') {
            row.length = ino.file?.length ?? 0
            row.truncateVer = ino.file?.truncateVer ?? 0
          } else if (ino.type === 'Symlink') {
            row.target = ino.symlink?.target ?? ''
            row.length = Buffer.byteLength(row.target)
          }
          row.permission = permString(ino.acl.perm)
        }
      }
      records.push(row)
    })
    if (left !== undefined) left -= page.entries.length
    if (!page.more || page.entries.length === 0 || (left !== undefined && left <= 0)) break
    prev = page.entries[page.entries.length - 1]!.name
  }
  const header = o.status ? ['Name', 'Type', 'Inode', 'Modified', 'Length', 'Permission'] : ['Name', 'Type', 'Inode']
  const rows = records.map((r) => (o.status ? [r.name, r.type, r.inode, r.modified ?? 'N/A', lsLength(r), r.permission ?? 'N/A'] : [r.name, r.type, r.inode]))
  return { header, rows, records }
}

/**
 * ls -s's Length column: a file's `length@truncateVer` and a directory's `-`
 * as 3FS prints them; a symlink's length (its target's), where 3FS prints the
 * target itself (which may hold spaces and break the columns; stat shows it).
 */
function lsLength(r: LsRow): string {
  if (r.modified === undefined) return 'N/A'
  if (r.type === 'File') return `${r.length ?? 0}@${r.truncateVer ?? 0}`
  if (r.type === 'Symlink') return String(r.length ?? 0)
  return '-'
}

function inodeResult(verb: string, path: string, st: Inode | null): ActionResult<{ path: string; inode: string | null; type: InodeType | null }> {
  return {
    lines: [[`${verb} ${normalizePath(path)}${st ? ` (inode ${inodeHex(st.id)})` : ''}`]],
    result: { path: normalizePath(path), inode: st ? inodeHex(st.id) : null, type: st ? st.type : null },
  }
}

/** `mkdir [-p] [--perm P] [layout flags] PATH` (default perm 0755). */
export async function adminMkdir(f: FsAdminSession, path: string, o: { recursive?: boolean; perm?: number; layout?: Layout } = {}) {
  const st = await f.fs.mkdir(path, { mode: o.perm ?? 0o755, recursive: !!o.recursive, ...(o.layout ? { layout: o.layout } : {}) })
  return inodeResult('Created directory', path, st)
}

/** `create [-p perm] [layout flags] PATH`: a file with no session (3FS create with flags 0); default perm 0644. */
export async function adminCreate(f: FsAdminSession, path: string, o: { perm?: number; layout?: Layout } = {}) {
  const rsp = await f.meta.create({
    path: pathAt(path),
    // an existing path is an error (META_EXISTS): neither a layout nor a mode could be applied to it
    flags: { access: 'r', create: true, excl: true },
    perm: (o.perm ?? 0o644) & 0o7777,
    ...(o.layout ? { layout: o.layout } : {}),
  })
  return inodeResult('Created file', path, rsp.stat)
}

/**
 * Layout flags of create/mkdir resolved against routing info and the parent's
 * layout: a table or table version that does not exist is
 * MGMTD_CHAIN_TABLE_NOT_FOUND; sizes alone change the layout the new inode
 * would inherit (with `recursive`, that of the nearest existing ancestor, as
 * mkdirs gives every missing component the same layout).
 */
export async function resolveLayoutArgs(f: FsAdminSession, path: string, a: LayoutArgs, o: { recursive?: boolean } = {}): Promise<Layout | undefined> {
  if (a.chainTableId !== undefined) {
    const ri = await fetchRouting(f.admin)
    const table = a.chainTableVer ? ri.chainTables[String(a.chainTableId)]?.[String(a.chainTableVer)] : latestChainTable(ri, a.chainTableId)
    if (!table) throw chainTableNotFound(a.chainTableId, a.chainTableVer ?? 0)
    // a chain list of table indexes needs a concrete version: --chain-table-ver defaults to the latest
    if (a.chainList !== undefined && a.chainTableVer === undefined) a = { ...a, chainTableVer: table.chainTableVersion }
  }
  const only = a.chainList === undefined && a.chainTableId === undefined && a.chainTableVer === undefined
  if (!only || (a.chunkSize === undefined && a.stripeSize === undefined)) return parseLayoutArgs(a)
  let dir = plainPath(path)
  for (;;) {
    dir = dir.replace(/\/[^/]*$/, '') || '/'
    let st: Inode
    try {
      st = (await f.meta.stat({ path: pathAt(dir), flags: { followLastSymlink: true } })).stat
    } catch (e) {
      if (o.recursive && dir !== '/' && toStrataError(e).code === 'META_NOT_FOUND') continue
      throw e
    }
    if (st.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${dir} is not a directory`)
    return parseLayoutArgs(a, st.directory?.layout)
  }
}

/** `set-perm [--uid U] [--gid G] [--perm P] [--iflags F] PATH` (follows the last symlink, as 3FS). */
export async function adminSetPerm(f: FsAdminSession, path: string, o: { uid?: number; gid?: number; perm?: number; iflags?: number }) {
  if (o.uid === undefined && o.gid === undefined && o.perm === undefined && o.iflags === undefined) {
    throw new StrataError('INVALID_ARGUMENT', 'set-perm needs at least one of --uid, --gid, --perm, --iflags')
  }
  const st = (
    await f.meta.setAttr({
      path: pathAt(path),
      flags: { followLastSymlink: true },
      ...(o.uid !== undefined ? { uid: o.uid } : {}),
      ...(o.gid !== undefined ? { gid: o.gid } : {}),
      ...(o.perm !== undefined ? { perm: o.perm & 0o7777 } : {}),
      ...(o.iflags !== undefined ? { iflags: o.iflags } : {}),
    })
  ).stat
  return {
    // iflags too: set-perm --iflags alone printed only what it had not changed
    lines: [[`Set permission of ${normalizePath(path)}: uid ${st.acl.uid} gid ${st.acl.gid} perm ${permString(st.acl.perm)} iflags ${iflagsString(st.acl.iflags)}`]],
    // iflags as stat prints them (and --json gives them): 0x%08x
    result: { path: normalizePath(path), inode: inodeHex(st.id), uid: st.acl.uid, gid: st.acl.gid, permission: permString(st.acl.perm), iflags: iflagsString(st.acl.iflags) },
  }
}

/** `rm [-r] PATH` (no type check, like 3FS remove; -r removes a whole tree at once). */
export async function adminRm(f: FsAdminSession, path: string, o: { recursive?: boolean } = {}) {
  await f.fs.rm(path, { recursive: !!o.recursive })
  return { lines: [[`Removed ${normalizePath(path)}`]], result: { path: normalizePath(path), recursive: !!o.recursive } }
}

/** `mv SRC DST` (POSIX rename). */
export async function adminMv(f: FsAdminSession, src: string, dst: string) {
  const st = await f.fs.rename(src, dst)
  return {
    lines: [[`Renamed ${normalizePath(src)} to ${normalizePath(dst)}`]],
    result: { src: normalizePath(src), dst: normalizePath(dst), inode: st ? inodeHex(st.id) : null },
  }
}

export interface GcRow {
  gcDir: string
  name: string
  inode: string
  type: InodeType
  origPath: string
  user: number
  removedAt: string
}

export const GC_LIST_HEADER = ['GcDir', 'Name', 'Inode', 'Type', 'OrigPath', 'User', 'RemovedAt']

/** `gc-list [-l limit] [-p prev]`: entries waiting in the GC directories (removed files and trees). */
export async function adminGcList(f: FsAdminSession, o: { limit?: number; prev?: string } = {}): Promise<Listing<GcRow> & { more: boolean; next: string | null }> {
  // a malformed cursor fails before any request
  const cur = o.prev !== undefined ? parseGcCursor(o.prev) : null
  let entries: Array<{ gcDir: string; name: string; inode: bigint; type: InodeType; origPath: string; user: number; removedAt: number }>
  let more = false
  try {
    const rsp = await f.meta.gcList({ ...(o.limit !== undefined ? { limit: o.limit } : {}), ...(o.prev !== undefined ? { prev: o.prev } : {}) })
    entries = rsp.entries ?? []
    more = !!rsp.more
  } catch (e) {
    // a server without the admin helper: list gcRoot the way 3FS's admin_cli does
    if (toStrataError(e).code !== 'RPC_UNKNOWN_METHOD') throw e
    entries = []
    const limit = o.limit ?? 0
    const dirs = await f.meta.list({ path: { parent: GC_ROOT_INODE }, prev: '', limit: 0, status: false })
    for (const d of dirs.entries) {
      if (cur && d.name < cur.gcDir) continue
      let prev = cur && cur.gcDir === d.name ? cur.name : ''
      for (;;) {
        const page = await f.meta.list({ path: { parent: d.id }, prev, limit: 0, status: false })
        for (const e2 of page.entries) {
          if (limit && entries.length >= limit) {
            more = true
            break
          }
          entries.push({ gcDir: d.name, name: e2.name, inode: e2.id, type: e2.type, origPath: e2.gcInfo?.origPath ?? '', user: e2.gcInfo?.user ?? 0, removedAt: e2.removedAt ?? 0 })
        }
        if (more || !page.more || page.entries.length === 0) break
        prev = page.entries[page.entries.length - 1]!.name
      }
      if (more) break
    }
  }
  const records: GcRow[] = entries.map((e) => ({
    gcDir: e.gcDir,
    name: e.name,
    inode: inodeHex(BigInt(e.inode)),
    type: e.type,
    origPath: e.origPath,
    user: e.user,
    removedAt: e.removedAt ? ymdHMS(Math.floor(e.removedAt / 1000)) : 'N/A',
  }))
  const rows = records.map((r) => [r.gcDir, r.name, r.inode, r.type, r.origPath || '-', String(r.user), r.removedAt])
  // as 3FS gc-list: a last row `...` when the listing was cut at the limit
  if (more) rows.push(['...'])
  const last = records[records.length - 1]
  return { header: GC_LIST_HEADER, rows, records, more, next: more && last ? `${last.gcDir}/${last.name}` : null }
}

/** gc-list's `-p` cursor: `<GcDir>/<Name>` of the last entry listed (both as gc-list prints them). */
export function parseGcCursor(text: string): { gcDir: string; name: string } {
  const m = /^([^/]+)\/([^/]+)$/.exec(text)
  if (!m) throw new StrataError('INVALID_ARGUMENT', `bad gc-list cursor "${text}", expected GcDir/Name of the last entry listed (e.g. GC-Node-101.1/S-<20 digits>-0x<inode>)`)
  return { gcDir: m[1]!, name: m[2]! }
}

/**
 * `session-prune`: removes the write sessions of clients mgmtd no longer
 * lists as alive (or of one client with --client-id, optionally only some
 * sessions). Prints `num sessions N`. Meta enforces the rules (root only,
 * never a live client's sessions), so every client of it gets them.
 */
export async function adminSessionPrune(f: FsAdminSession, o: { clientId?: string; sessions?: string[] } = {}): Promise<ActionResult<{ pruned: number; clients: string[] }>> {
  if (o.sessions?.length && !o.clientId) throw new StrataError('INVALID_ARGUMENT', 'session-prune: --session needs --client-id (sessions are per client)')
  let clients: string[]
  if (o.clientId) clients = [o.clientId]
  else {
    const live = new Set((await f.admin.mgmtd.listClientSessions()).sessions.map((s) => s.clientId))
    const all = (await f.meta.listSessions({})).sessions ?? []
    clients = [...new Set(all.map((s) => s.clientId).filter((c) => !live.has(c)))]
  }
  let pruned = 0
  for (const clientId of clients) {
    let rsp: { pruned?: number }
    try {
      rsp = await f.meta.pruneSession({ clientId, sessions: o.clientId ? (o.sessions ?? []) : [] })
    } catch (e) {
      // without --client-id: a client that came back since mgmtd was asked is simply not dead
      if (!o.clientId && toStrataError(e).code === 'META_CLIENT_ALIVE') continue
      throw e
    }
    pruned += typeof rsp?.pruned === 'number' ? rsp.pruned : 0
  }
  return { lines: [['num sessions', String(pruned)]], result: { pruned, clients } }
}

export interface ChunkOfPath {
  path: string
  inode: string
  chunkIndex: number
  chainId: number
  /** hex form (4-byte groups) */
  chunkId: string
  /** meta form 0x<inode>-<track>-<index> */
  chunkName: string
}

/**
 * `query-chunk --path P --chunk-index I`: computes the chunk's chain from
 * the file's layout (as every client does) and its ChunkId, then asks every
 * replica of that chain for the chunk.
 */
export async function queryChunkByPath(f: FsAdminSession, path: string, chunkIndex: number): Promise<Listing<QueryChunkRow> & { chunk: ChunkOfPath }> {
  const st = (await f.meta.stat({ path: pathAt(path), flags: { followLastSymlink: true } })).stat
  if (st.type !== 'File' || !st.file) throw new StrataError('META_INVALID_ARGUMENT', `${normalizePath(path)} is not a file`)
  const layout = st.file.layout
  const ri = await fetchRouting(f.admin)
  const view = layoutView(layout, ri)
  const chainId = view.chains[chunkIndex % layout.stripeSize]
  if (chainId === null || chainId === undefined) throw new StrataError('MGMTD_CHAIN_TABLE_NOT_FOUND', `chain table ${layout.tableId} version ${layout.tableVersion} does not resolve the layout's chains`)
  const id = chunkIdOf(st.id, chunkIndex)
  const listing = await queryChunk(f.admin, chainId, formatChunkIdHex(id))
  return {
    ...listing,
    chunk: { path: normalizePath(path), inode: inodeHex(st.id), chunkIndex, chainId, chunkId: formatChunkIdHex(id), chunkName: formatChunkId(id) },
  }
}
