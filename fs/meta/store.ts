// Typed access to inodes, directory entries and file sessions inside one KV
// transaction, with the invariants 3FS checks on every store (tree roots keep
// their acl, entry names are valid, file layouts are concrete…).
//
// "snapshot" loads add nothing to the read-conflict set (3FS snapshotLoad);
// the others do (3FS load). Operations add the conflict keys they need
// explicitly, as 3FS does.

import { StrataError } from '../common/errors.js'
import { validateLayout } from '../common/layout.js'
import type { KeyValue, ReadOnlyTxn, ReadWriteTxn } from '../kv/types.js'
import { FS_IMMUTABLE_FL, GC_ROOT_ACL, ROOT_ACL, aclEquals } from './acl.js'
import { decodeDirEntry, decodeInode, decodeSession, encodeDirEntry, encodeInode, encodeSession } from './codec.js'
import {
  PREFIX_DIR_LOCK,
  dentryKey,
  dirLockKey,
  dentryPrefix,
  inodeKey,
  lockScopeKey,
  keyAfter,
  parseDentryKey,
  prefixEnd,
  sessionKey,
  sessionPrefix,
} from './keys.js'
import { GC_ROOT_INODE, ROOT_INODE, type DirEntry, type FileSessionRecord, type Inode, type InodeId } from './protocol.js'

export const NAME_MAX = 255

export function isTreeRoot(id: InodeId): boolean {
  return id === ROOT_INODE || id === GC_ROOT_INODE
}

export function validName(name: string): boolean {
  return name.length > 0 && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0')
}

export function checkNameLength(name: string): void {
  if (Buffer.byteLength(name, 'utf8') > NAME_MAX) throw new StrataError('META_NAME_TOO_LONG', `name of ${Buffer.byteLength(name)} bytes exceeds ${NAME_MAX}`)
}

export function inconsistent(msg: string): StrataError {
  return new StrataError('INTERNAL', `metadata inconsistent: ${msg}`)
}

// --- inodes

export async function loadInode(txn: ReadOnlyTxn, id: InodeId, snapshot = true): Promise<Inode | null> {
  const v = snapshot ? await txn.snapshotGet(inodeKey(id)) : await txn.get(inodeKey(id))
  return v === undefined ? null : decodeInode(id, v)
}

export async function mustLoadInode(txn: ReadOnlyTxn, id: InodeId, snapshot = true): Promise<Inode> {
  const inode = await loadInode(txn, id, snapshot)
  if (!inode) throw new StrataError('META_NOT_FOUND', `inode 0x${id.toString(16)} not found`)
  return inode
}

export function addInodeConflict(txn: ReadWriteTxn, id: InodeId): void {
  txn.addReadConflict(inodeKey(id))
}

export function storeInode(txn: ReadWriteTxn, inode: Inode): void {
  if (isTreeRoot(inode.id)) {
    const name = inode.directory?.name
    if (inode.type !== 'Directory' || (name !== undefined && name !== '' && name !== '/')) throw new StrataError('INTERNAL', `refusing to store invalid tree root ${inode.id}`)
    const expected = { ...(inode.id === ROOT_INODE ? ROOT_ACL : GC_ROOT_ACL), iflags: inode.acl.iflags }
    if (!aclEquals(inode.acl, expected)) throw new StrataError('META_NOT_PERMITTED', `the acl of tree root ${inode.id} cannot change`)
  } else if (inode.type === 'Directory') {
    const name = inode.directory!.name
    if (name === '.' || name === '..' || name.includes('/')) throw new StrataError('INTERNAL', `directory ${inode.id} has invalid name ${JSON.stringify(name)}`)
  } else if (inode.type === 'File') {
    validateLayout(inode.file!.layout, false)
  }
  txn.set(inodeKey(inode.id), encodeInode(inode))
}

export function removeInode(txn: ReadWriteTxn, inode: Inode | InodeId): void {
  const id = typeof inode === 'bigint' ? inode : inode.id
  if (isTreeRoot(id)) throw new StrataError('INTERNAL', 'refusing to remove a tree root')
  if (typeof inode !== 'bigint' && inode.acl.iflags & FS_IMMUTABLE_FL) throw new StrataError('INTERNAL', `refusing to remove immutable inode ${id}`)
  txn.clear(inodeKey(id))
  // a directory deleted while locked leaves no index entry behind (stale ones are skipped anyway)
  if (typeof inode === 'bigint' || inode.directory?.lock) txn.clear(dirLockKey(id))
  if (typeof inode === 'bigint' || inode.type === 'Directory') txn.clear(lockScopeKey(id))
}

// --- index of locked directories (Strata only; the lock itself lives in the inode)

export function storeDirLockIndex(txn: ReadWriteTxn, id: InodeId, client: string | null): void {
  if (client !== null) txn.set(dirLockKey(id), Buffer.from(client, 'utf8'))
  else txn.clear(dirLockKey(id))
}

/**
 * Ids of the directories in the lock index, read from the snapshot: a caller
 * that must not miss a lock taken meanwhile below some directory adds that
 * directory's lock scope to its conflicts (addLockScopeConflict).
 */
export async function listLockedDirectories(txn: ReadOnlyTxn): Promise<InodeId[]> {
  const kvs = await txn.snapshotGetRange(PREFIX_DIR_LOCK, prefixEnd(PREFIX_DIR_LOCK))
  return kvs.map((kv) => kv.key.readBigUInt64LE(4))
}

const EMPTY = Buffer.alloc(0)

/**
 * Marks `dirs` (a directory and its ancestors) as having a new lock, or a
 * newly moved-in directory, below them: every remove of a tree rooted at one
 * of them that read before this commit conflicts. Blind writes, so lock
 * changes never conflict with each other through them; tree roots are never
 * removed and are skipped.
 */
export function touchLockScopes(txn: ReadWriteTxn, dirs: InodeId[]): void {
  for (const id of dirs) if (!isTreeRoot(id)) txn.set(lockScopeKey(id), EMPTY)
}

/** A lock taken, or a directory moved, anywhere below `dir` after this transaction's snapshot aborts it (see touchLockScopes). */
export function addLockScopeConflict(txn: ReadWriteTxn, dir: InodeId): void {
  txn.addReadConflict(lockScopeKey(dir))
}

/**
 * `dir` and its ancestors by parent pointer, each read with a conflict (a move
 * of any of them meanwhile aborts the caller, which then marks the new ones).
 * The walk ends at a tree root or, in a removed tree whose upper part GC
 * already took, at the first missing directory.
 */
export async function lockScopeChain(txn: ReadWriteTxn, dir: InodeId): Promise<InodeId[]> {
  const out: InodeId[] = []
  const seen = new Set<InodeId>()
  for (let cur = dir; !seen.has(cur) && !isTreeRoot(cur); ) {
    seen.add(cur)
    const inode = await loadInode(txn, cur, false)
    if (!inode || inode.type !== 'Directory') break
    out.push(cur)
    cur = inode.directory!.parent
  }
  return out
}

// --- directory entries

export async function loadDirEntry(txn: ReadOnlyTxn, parent: InodeId, name: string, snapshot = true): Promise<DirEntry | null> {
  checkNameLength(name)
  const key = dentryKey(parent, name)
  const v = snapshot ? await txn.snapshotGet(key) : await txn.get(key)
  return v === undefined ? null : decodeDirEntry(parent, name, v)
}

export function addDentryConflict(txn: ReadWriteTxn, parent: InodeId, name: string): void {
  txn.addReadConflict(dentryKey(parent, name))
}

export function storeDirEntry(txn: ReadWriteTxn, e: DirEntry): void {
  if (!validName(e.name)) throw new StrataError('INTERNAL', `refusing to store entry with invalid name ${JSON.stringify(e.name)}`)
  checkNameLength(e.name)
  if (isTreeRoot(e.id)) throw new StrataError('INTERNAL', `entry ${e.parent}/${e.name} would point to a tree root`)
  if ((e.type === 'Directory') !== (e.dirAcl !== undefined && e.dirAcl !== null)) throw new StrataError('INTERNAL', `entry ${e.name}: dirAcl iff directory`)
  txn.set(dentryKey(e.parent, e.name), encodeDirEntry(e))
}

export function removeDirEntry(txn: ReadWriteTxn, e: DirEntry): void {
  if (!validName(e.name)) throw new StrataError('INTERNAL', `refusing to remove entry with invalid name ${JSON.stringify(e.name)}`)
  txn.clear(dentryKey(e.parent, e.name))
}

function decodeEntries(parent: InodeId, kvs: KeyValue[]): DirEntry[] {
  return kvs.map((kv) => {
    const { parent: p, name } = parseDentryKey(kv.key)
    if (p !== parent) throw inconsistent(`listing ${parent} returned an entry of ${p}`)
    return decodeDirEntry(parent, name, kv.value)
  })
}

export interface EntryPage {
  entries: DirEntry[]
  more: boolean
}

/**
 * Entries of `parent` after `prev` (exclusive; "" from the first) and before
 * `end` (exclusive; undefined: to the end), at most `limit`, sorted by raw
 * name bytes.
 */
export async function listDirEntries(
  txn: ReadOnlyTxn,
  parent: InodeId,
  prev: string,
  limit: number,
  opts: { snapshot?: boolean; end?: string } = {},
): Promise<EntryPage> {
  const prefix = dentryPrefix(parent)
  const begin = prev ? keyAfter(dentryKey(parent, prev)) : prefix
  const end = opts.end !== undefined ? dentryKey(parent, opts.end) : prefixEnd(prefix)
  if (Buffer.compare(begin, end) >= 0) return { entries: [], more: false }
  const n = Math.max(1, limit)
  const kvs = opts.snapshot === false ? await txn.getRange(begin, end, { limit: n + 1 }) : await txn.snapshotGetRange(begin, end, { limit: n + 1 })
  const more = kvs.length > n
  return { entries: decodeEntries(parent, more ? kvs.slice(0, n) : kvs), more }
}

/** True when `parent` has no entries; the range read is conflict-checked. */
export async function checkEmpty(txn: ReadWriteTxn, parent: InodeId): Promise<boolean> {
  const prefix = dentryPrefix(parent)
  const kvs = await txn.getRange(prefix, prefixEnd(prefix), { limit: 1 })
  return kvs.length === 0
}

export async function loadEntryInode(txn: ReadOnlyTxn, entry: DirEntry, snapshot = true): Promise<Inode> {
  const inode = await loadInode(txn, entry.id, snapshot)
  if (!inode) {
    if (entry.name === '.' || entry.name === '..') throw new StrataError('META_NOT_FOUND', `inode of ${entry.name} not found`)
    throw inconsistent(`entry ${entry.parent}/${entry.name} points to missing inode 0x${entry.id.toString(16)}`)
  }
  if (inode.type !== entry.type) throw inconsistent(`entry ${entry.parent}/${entry.name} is a ${entry.type}, inode 0x${entry.id.toString(16)} a ${inode.type}`)
  return inode
}

// --- file sessions

export function storeSession(txn: ReadWriteTxn, s: FileSessionRecord): void {
  txn.set(sessionKey(s.inode, s.session), encodeSession(s))
}

export function removeSession(txn: ReadWriteTxn, inode: InodeId, session: string): void {
  txn.clear(sessionKey(inode, session))
}

export async function loadSession(txn: ReadOnlyTxn, inode: InodeId, session: string, snapshot = true): Promise<FileSessionRecord | null> {
  const key = sessionKey(inode, session)
  const v = snapshot ? await txn.snapshotGet(key) : await txn.get(key)
  return v === undefined ? null : decodeSession(v)
}

export async function listSessions(txn: ReadOnlyTxn, inode: InodeId, limit = 0): Promise<FileSessionRecord[]> {
  const prefix = sessionPrefix(inode)
  const kvs = await txn.snapshotGetRange(prefix, prefixEnd(prefix), limit > 0 ? { limit } : {})
  return kvs.map((kv) => decodeSession(kv.value))
}

/** First write session of `inode`, from the snapshot (3FS snapshotCheckExists). */
export async function snapshotFirstSession(txn: ReadOnlyTxn, inode: InodeId): Promise<FileSessionRecord | null> {
  const s = await listSessions(txn, inode, 1)
  return s[0] ?? null
}

/** Like snapshotFirstSession; when there is none the session range joins the read-conflict set. */
export async function checkSessionExists(txn: ReadWriteTxn, inode: InodeId): Promise<FileSessionRecord | null> {
  const s = await snapshotFirstSession(txn, inode)
  if (!s) {
    const prefix = sessionPrefix(inode)
    txn.addReadConflictRange(prefix, prefixEnd(prefix))
  }
  return s
}
