// Namespace invariant checker over the meta KV (fsck): reads every inode,
// directory entry, write session and lock index key in one snapshot and
// reports what no sequence of correct operations can leave behind. Tests run
// it after random and crash workloads; operators can run it against a
// cluster's KV (`strata admin fsck`), since a read-only snapshot never blocks
// the meta servers.
//
// What GC legitimately leaves in between (docs/meta.md "Write sessions, GC"):
// a file or directory whose last link went has nlink 0 and one entry in a GC
// directory (a child of the GC root); a removed directory keeps its old
// parent pointer and its contents keep their entries (and links) until GC
// takes the tree apart.

import fs from 'node:fs'
import path from 'node:path'
import { StrataError, isStrataError } from '../common/errors.js'
import { openLmdbKv, type KvDurability, type ReadOnlyTxn } from '../kv/index.js'
import { aclEquals } from './acl.js'
import { decodeDirEntry, decodeInode } from './codec.js'
import { PREFIX_DENTRY, PREFIX_DIR_LOCK, PREFIX_INODE, PREFIX_SESSION, PRUNE_INODE, parseDentryKey, parseInodeKey, prefixEnd } from './keys.js'
import { GC_ROOT_INODE, ROOT_INODE, type DirEntry, type Inode, type InodeId } from './protocol.js'

export interface FsckViolation {
  /** stable kind, for tests and scripts */
  kind:
    | 'ROOT'
    | 'DANGLING_ENTRY'
    | 'ENTRY_TYPE'
    | 'PARENT_NOT_DIRECTORY'
    | 'DIRECTORY_PARENT'
    | 'DIRECTORY_LINKS'
    | 'DIR_ACL'
    | 'NLINK'
    | 'GC_ENTRY_NLINK'
    | 'CYCLE'
    | 'UNREACHABLE'
    | 'ORPHAN_SESSION'
    | 'LOCK_INDEX'
    | 'DECODE'
  id?: string
  message: string
}

export interface FsckReport {
  inodes: number
  entries: number
  sessions: number
  violations: FsckViolation[]
}

const hex = (id: InodeId) => `0x${id.toString(16)}`

/** Every key/value of a prefix, in pages (one snapshot: the caller's transaction). */
async function scan(txn: ReadOnlyTxn, prefix: Buffer): Promise<Array<{ key: Buffer; value: Buffer }>> {
  const out: Array<{ key: Buffer; value: Buffer }> = []
  const end = prefixEnd(prefix)
  let begin = prefix
  for (;;) {
    const page = await txn.snapshotGetRange(begin, end, { limit: 10_000 })
    out.push(...page)
    if (page.length < 10_000) return out
    begin = Buffer.concat([page[page.length - 1]!.key, Buffer.from([0])])
  }
}

/** Reads the namespace tables in `txn` (one snapshot) and checks them. */
export async function fsckTxn(txn: ReadOnlyTxn): Promise<FsckReport> {
  const violations: FsckViolation[] = []
  const inodes = new Map<InodeId, Inode>()
  for (const kv of await scan(txn, PREFIX_INODE)) {
    try {
      const id = parseInodeKey(kv.key)
      inodes.set(id, decodeInode(id, kv.value))
    } catch (e) {
      violations.push({ kind: 'DECODE', message: `inode key ${kv.key.toString('hex')}: ${(e as Error).message}` })
    }
  }
  const entries: DirEntry[] = []
  for (const kv of await scan(txn, PREFIX_DENTRY)) {
    try {
      const k = parseDentryKey(kv.key)
      entries.push(decodeDirEntry(k.parent, k.name, kv.value))
    } catch (e) {
      violations.push({ kind: 'DECODE', message: `dentry key ${kv.key.toString('hex')}: ${(e as Error).message}` })
    }
  }
  const sessions: InodeId[] = []
  for (const kv of await scan(txn, PREFIX_SESSION)) {
    const id = kv.key.length >= 12 ? kv.key.readBigUInt64LE(4) : PRUNE_INODE
    // prune requests (inode 0xffff…ffff) name no inode
    if (id !== PRUNE_INODE) sessions.push(id)
  }
  const locks = (await scan(txn, PREFIX_DIR_LOCK)).map((kv) => kv.key.readBigUInt64LE(4))
  violations.push(...checkNamespace(inodes, entries, sessions, locks))
  return { inodes: inodes.size, entries: entries.length, sessions: sessions.length, violations }
}

/** The invariants over decoded tables (pure, so tests can feed it broken tables). */
export function checkNamespace(inodes: Map<InodeId, Inode>, entries: DirEntry[], sessions: InodeId[] = [], locks: InodeId[] = []): FsckViolation[] {
  const v: FsckViolation[] = []
  const add = (kind: FsckViolation['kind'], id: InodeId | undefined, message: string) => v.push({ kind, ...(id !== undefined ? { id: hex(id) } : {}), message })

  for (const rootId of [ROOT_INODE, GC_ROOT_INODE]) {
    const r = inodes.get(rootId)
    if (!r || r.type !== 'Directory' || r.directory?.parent !== rootId) add('ROOT', rootId, `tree root ${hex(rootId)} missing or not a directory that is its own parent`)
  }
  // GC directories are the GC root's children; an entry in one is a removed inode awaiting collection
  const gcDirs = new Set(entries.filter((e) => e.parent === GC_ROOT_INODE).map((e) => e.id))
  const isGcEntry = (e: DirEntry) => gcDirs.has(e.parent)

  const links = new Map<InodeId, DirEntry[]>()
  const children = new Map<InodeId, DirEntry[]>()
  for (const e of entries) {
    const where = `entry ${hex(e.parent)}/${e.name}`
    const parent = inodes.get(e.parent)
    if (!parent || parent.type !== 'Directory') add('PARENT_NOT_DIRECTORY', e.parent, `${where}: parent is ${parent ? `a ${parent.type}` : 'missing'}`)
    const inode = inodes.get(e.id)
    if (!inode) {
      add('DANGLING_ENTRY', e.id, `${where} points at missing inode ${hex(e.id)}`)
      continue
    }
    if (inode.type !== e.type) add('ENTRY_TYPE', e.id, `${where} says ${e.type}, inode ${hex(e.id)} is a ${inode.type}`)
    if (!links.has(e.id)) links.set(e.id, [])
    links.get(e.id)!.push(e)
    if (!children.has(e.parent)) children.set(e.parent, [])
    children.get(e.parent)!.push(e)
    if (inode.type === 'Directory' && e.parent !== GC_ROOT_INODE) {
      if (!e.dirAcl || !aclEquals(e.dirAcl, inode.acl)) add('DIR_ACL', e.id, `${where}: entry acl ${JSON.stringify(e.dirAcl)} is not the directory's ${JSON.stringify(inode.acl)}`)
      // a removed directory keeps its old parent pointer (GC takes the tree apart from there)
      if (!isGcEntry(e) && (inode.directory?.parent !== e.parent || (inode.directory.name && inode.directory.name !== e.name))) {
        add('DIRECTORY_PARENT', e.id, `${where}: directory ${hex(e.id)} says parent ${hex(inode.directory?.parent ?? -1n)} name ${JSON.stringify(inode.directory?.name)}`)
      }
    }
    if (isGcEntry(e) && inode.nlink !== 0) add('GC_ENTRY_NLINK', e.id, `${where}: a GC entry, but inode ${hex(e.id)} has nlink ${inode.nlink}`)
  }

  for (const [id, inode] of inodes) {
    if (id === ROOT_INODE || id === GC_ROOT_INODE) continue
    const named = links.get(id) ?? []
    const gc = named.filter(isGcEntry)
    const live = named.length - gc.length
    if (inode.type === 'Directory') {
      if (named.length !== 1) add('DIRECTORY_LINKS', id, `directory ${hex(id)} has ${named.length} entries: ${named.map((e) => `${hex(e.parent)}/${e.name}`).join(', ')}`)
      else if (inode.nlink !== (gc.length ? 0 : 1)) add('NLINK', id, `directory ${hex(id)} has nlink ${inode.nlink}`)
    } else {
      if (gc.length > 1 || (gc.length === 1 && live > 0)) add('NLINK', id, `${inode.type} ${hex(id)} has ${gc.length} GC entries and ${live} other entries`)
      else if (gc.length === 0 && inode.nlink !== live) add('NLINK', id, `${inode.type} ${hex(id)} has nlink ${inode.nlink} but ${live} entries name it`)
    }
  }

  // reachability from the two tree roots over entries; what is left over is unreachable (or a cycle)
  const reached = new Set<InodeId>([ROOT_INODE, GC_ROOT_INODE])
  const queue: InodeId[] = [ROOT_INODE, GC_ROOT_INODE]
  while (queue.length) {
    const dir = queue.pop()!
    for (const e of children.get(dir) ?? []) {
      if (reached.has(e.id)) continue
      reached.add(e.id)
      if (e.type === 'Directory') queue.push(e.id)
    }
  }
  for (const [id, inode] of inodes) {
    if (reached.has(id)) continue
    add('UNREACHABLE', id, `${inode.type} ${hex(id)} (nlink ${inode.nlink}) is reachable from neither / nor the GC root`)
  }
  // parent pointers of live directories lead to a root without a loop
  for (const [id, inode] of inodes) {
    if (inode.type !== 'Directory' || id === ROOT_INODE || id === GC_ROOT_INODE) continue
    const seen = new Set<InodeId>([id])
    let cur = inode.directory?.parent
    for (let steps = 0; cur !== undefined && cur !== ROOT_INODE && cur !== GC_ROOT_INODE; steps++) {
      if (seen.has(cur)) {
        add('CYCLE', id, `parent pointers from directory ${hex(id)} loop at ${hex(cur)}`)
        break
      }
      seen.add(cur)
      cur = inodes.get(cur)?.directory?.parent
    }
  }
  for (const id of new Set(sessions)) {
    if (!inodes.has(id)) add('ORPHAN_SESSION', id, `write session of missing inode ${hex(id)}`)
  }
  for (const id of locks) {
    const d = inodes.get(id)
    if (d && (d.type !== 'Directory' || !d.directory?.lock)) add('LOCK_INDEX', id, `lock index names ${hex(id)}, which holds no lock`)
  }
  return v
}

/**
 * fsck of the lmdb KV environment at `kvPath` (read-only: one snapshot; the
 * meta servers keep running). Without `durability`, the env's own ('nosync'
 * or a synced one: every process of an env agrees on it).
 */
export async function fsckKvPath(kvPath: string, durability?: KvDurability): Promise<FsckReport> {
  // openLmdbKv would create an empty environment where none is
  if (!fs.existsSync(path.join(kvPath, 'data.mdb'))) throw new StrataError('NOT_FOUND', `no meta KV at ${kvPath} (no data.mdb)`)
  const kv = await openLmdbKv({ path: kvPath, durability: durability ?? 'flushed' }).catch((e: unknown) => {
    // `admin fsck --kv DIR` cannot know how the meta servers open DIR; a 'nosync' env refuses any
    // other durability (BAD_CONFIG), and fsck writes nothing, so it takes the env's own
    if (durability || !isStrataError(e, 'BAD_CONFIG') || !/durability 'nosync'/.test(e.reason)) throw e
    return openLmdbKv({ path: kvPath, durability: 'nosync' })
  })
  try {
    return await kv.readOnly((txn) => fsckTxn(txn))
  } finally {
    await kv.close()
  }
}
