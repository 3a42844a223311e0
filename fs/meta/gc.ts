// Garbage collection, as 3FS GcManager. A removed file or directory whose
// last link went is not deleted in the removing transaction: its entry moves
// into one of this server's GC directories (GC-Node-<id>.1 … .4 under the GC
// root, inode 1) named `<type>-<20-digit µs timestamp>-<inode hex>` with type
// d (directory), S (< 32 chunks), f, L (≥ 128 chunks). A background scan
// picks entries older than the GC delay:
//  - a file waits while any write session (INOS) of it exists — that is how
//    unlink-while-open-for-write defers deletion — then its chunks are removed
//    from every chain of its stripe, then the GC entry and the inode go;
//  - a directory is taken apart in transactions of 32 children, each child
//    going through removeEntry (into GC itself); children the remover may not
//    delete move to /trash/gc-orphans/<user>-<date>/… with an
//    `_hf3fs_original_path` symlink; finally the directory inode goes.
// An entry that cannot be processed yet (busy, or a critical error) is
// renamed to a timestamp `retry delay` in the future; the time of removal
// stays in the entry's `removedAt` (what gc-list shows).

import { randomInt } from 'node:crypto'
import { StrataError, isStrataError, toStrataError } from '../common/errors.js'
import type { Layout } from '../common/layout.js'
import type { Logger } from '../common/log.js'
import type { KvEngine, ReadWriteTxn } from '../kv/types.js'
import { FS_IMMUTABLE_FL, GC_ROOT_ACL, checkRecursiveRmPerm } from './acl.js'
import type { MetaSettings } from './config.js'
import type { FileHelper } from './file-helper.js'
import type { InodeIdAllocator } from './inode-alloc.js'
import { NULL_LAYOUT, castGranularity, hexId, newDirectory, newEntry, newSymlink, nowUs, updateTime } from './inode.js'
import { dentryKey, dirLockKey, inodeKey, lockScopeKey } from './keys.js'
import {
  addDentryConflict,
  addInodeConflict,
  checkEmpty,
  inconsistent,
  listDirEntries,
  loadDirEntry,
  loadEntryInode,
  loadInode,
  lockScopeChain,
  removeDirEntry,
  removeInode,
  snapshotFirstSession,
  storeDirEntry,
  storeInode,
  touchLockScopes,
} from './store.js'
import { GC_ROOT_INODE, ROOT_INODE, type DirEntry, type Inode, type InodeId, type UserInfo } from './protocol.js'

export const GC_DIRS_PER_SERVER = 5
const SMALL_FILE_CHUNKS = 32
const LARGE_FILE_CHUNKS = 128
const DIR_ENTRY_BATCH = 32
/** GC's transactions free space (or, moving an entry to the tail, keep GC going): on a full disk they may use the KV's reserve */
const FREES = { frees: true } as const
const SCAN_BATCH = 256

export type GcType = 'd' | 'L' | 'f' | 'S'
const GC_TYPES: GcType[] = ['d', 'L', 'f', 'S']

export function gcDirName(nodeId: number, idx: number): string {
  return idx === 0 ? `GC-Node-${nodeId}` : `GC-Node-${nodeId}.${idx}`
}

export function formatGcEntry(prefix: GcType, timestampUs: number, inode: InodeId): string {
  return `${prefix}-${String(Math.max(0, Math.floor(timestampUs))).padStart(20, '0')}-${hexId(inode)}`
}

export function parseGcEntry(name: string): { type: GcType; timestampUs: number; inode: InodeId } | null {
  const m = /^([dLfS])-(\d{20})-0x([0-9a-f]+)$/.exec(name)
  if (!m) return null
  return { type: m[1] as GcType, timestampUs: Number(m[2]), inode: BigInt(`0x${m[3]}`) }
}

export interface GcInfo {
  user: number
  origPath: string
}

function joinPath(a: string, b: string): string {
  if (!a) return b
  if (!b) return a
  return a.endsWith('/') ? `${a}${b}` : `${a}/${b}`
}

export interface GcManagerOptions {
  kv: KvEngine
  nodeId: number
  settings: MetaSettings
  ids: InodeIdAllocator
  files: FileHelper
  log: Logger
}

export class GcManager {
  /** this server's GC directories (their entries under the GC root) */
  private dirs: DirEntry[] = []
  private readonly inflight = new Set<string>()
  private readonly queue: Array<{ dir: DirEntry; type: GcType; entry: DirEntry }> = []
  private running = 0
  private stopped = false
  private idle: Array<() => void> = []
  readonly stats = { filesRemoved: 0, dirsRemoved: 0, chunksRemoved: 0, busy: 0, failed: 0 }

  constructor(private readonly o: GcManagerOptions) {}

  private get granularityUs(): number {
    return this.o.settings.timeGranularityMs * 1000
  }

  get directories(): readonly DirEntry[] {
    return this.dirs
  }

  /** Opens (index 0 only if it exists) or creates this server's GC directories. */
  async init(): Promise<void> {
    const dirs: DirEntry[] = []
    for (let i = 0; i < GC_DIRS_PER_SERVER; i++) {
      const name = gcDirName(this.o.nodeId, i)
      const create = i !== 0
      const id = create ? await this.o.ids.allocate() : 0n
      const e = await this.o.kv.transact(async (txn) => {
        const found = await loadDirEntry(txn, GC_ROOT_INODE, name, false)
        if (found) return found
        if (!create) return null
        if (await loadInode(txn, id, false)) throw new StrataError('INTERNAL', `inode id ${id} handed out twice`)
        const now = nowUs()
        storeInode(txn, newDirectory(id, GC_ROOT_INODE, name, { ...GC_ROOT_ACL }, NULL_LAYOUT, now))
        const entry = newEntry(GC_ROOT_INODE, name, id, 'Directory', '', GC_ROOT_ACL)
        storeDirEntry(txn, entry)
        return entry
      })
      if (e) dirs.push(e)
    }
    this.dirs = dirs
  }

  private pick(): DirEntry {
    const usable = this.dirs.filter((d) => d.name !== gcDirName(this.o.nodeId, 0))
    const from = usable.length ? usable : this.dirs
    if (!from.length) throw new StrataError('INTERNAL', 'no GC directory')
    return from[randomInt(from.length)]!
  }

  /**
   * Drops one link of `inode` through `entry` (3FS GcManager::removeEntry):
   * nlink−1 and ctime; a symlink's entry is deleted (and the inode when its
   * last link went); a file or directory entry is deleted and, at nlink 0,
   * the inode gets an entry in a GC directory.
   */
  removeEntry(txn: ReadWriteTxn, entry: DirEntry, inode: Inode, gcInfo: GcInfo): void {
    if (inode.nlink === 0) throw inconsistent(`entry ${entry.parent}/${entry.name} exists but inode ${hexId(inode.id)} has nlink 0`)
    if (inode.acl.iflags & FS_IMMUTABLE_FL) throw new StrataError('META_NOT_PERMITTED', `inode ${hexId(inode.id)} is immutable`)
    inode.nlink--
    updateTime(inode, 'ctime', nowUs(), this.granularityUs, true)
    addInodeConflict(txn, inode.id)
    addDentryConflict(txn, entry.parent, entry.name)
    if (entry.type === 'Symlink') {
      removeDirEntry(txn, entry)
      if (inode.nlink !== 0) storeInode(txn, inode)
      else removeInode(txn, inode)
      return
    }
    storeInode(txn, inode)
    removeDirEntry(txn, entry)
    if (inode.type === 'Directory') {
      if (inode.nlink !== 0) throw inconsistent(`directory ${hexId(inode.id)} had nlink > 1`)
      if (inode.directory!.parent !== entry.parent) throw inconsistent(`directory ${hexId(inode.id)} has parent ${inode.directory!.parent}, entry says ${entry.parent}`)
    }
    if (inode.nlink !== 0) return
    const dir = this.pick()
    const now = nowUs()
    if (inode.type === 'File') {
      const f = inode.file!
      const chunks = f.layout.chunkSize ? Math.floor(f.length / f.layout.chunkSize) : 0
      const type: GcType = chunks < SMALL_FILE_CHUNKS ? 'S' : chunks >= LARGE_FILE_CHUNKS ? 'L' : 'f'
      const e = newEntry(dir.id, formatGcEntry(type, now, inode.id), inode.id, 'File')
      // 3FS keeps gcInfo for directories only; the path of a removed file is what an operator
      // looks for in gc-list (a file held open stays here until its writer closes)
      e.gcInfo = { user: gcInfo.user, origPath: gcInfo.origPath }
      e.removedAt = now
      storeDirEntry(txn, e)
    } else {
      const e = newEntry(dir.id, formatGcEntry('d', now, inode.id), inode.id, 'Directory', '', inode.acl)
      e.gcInfo = { user: gcInfo.user, origPath: gcInfo.origPath }
      e.removedAt = now
      storeDirEntry(txn, e)
    }
  }

  // --- background scan

  /** One scan over this server's GC directories; due entries go to the worker queue. */
  async scan(): Promise<void> {
    if (!this.o.settings.gcEnabled || this.stopped) return
    for (const dir of this.dirs) {
      for (const type of GC_TYPES) {
        const delayMs = type === 'd' ? this.o.settings.gcDirectoryDelayMs : this.o.settings.gcFileDelayMs
        const end = formatGcEntry(type, nowUs() - delayMs * 1000, ROOT_INODE)
        let prev: string = type
        for (;;) {
          const page = await this.o.kv.readOnly((txn) => listDirEntries(txn, dir.id, prev, SCAN_BATCH, { end }))
          for (const entry of page.entries) {
            const key = entry.id.toString()
            if (this.inflight.has(key)) continue
            this.inflight.add(key)
            this.queue.push({ dir, type, entry })
          }
          if (!page.more || page.entries.length === 0) break
          prev = page.entries[page.entries.length - 1]!.name
          if (this.queue.length > 4 * SCAN_BATCH) break
        }
      }
    }
    this.pump()
  }

  private pump(): void {
    while (!this.stopped && this.running < Math.max(1, this.o.settings.gcConcurrency) && this.queue.length) {
      const task = this.queue.shift()!
      this.running++
      void this.run(task.dir, task.type, task.entry).finally(() => {
        this.running--
        this.inflight.delete(task.entry.id.toString())
        if (this.running === 0 && this.queue.length === 0) for (const f of this.idle.splice(0)) f()
        this.pump()
      })
    }
  }

  /** Resolves when no GC task runs (tests and shutdown). */
  drained(): Promise<void> {
    if (this.running === 0 && this.queue.length === 0) return Promise.resolve()
    return new Promise((r) => this.idle.push(r))
  }

  stop(): void {
    this.stopped = true
    for (const t of this.queue.splice(0)) this.inflight.delete(t.entry.id.toString())
  }

  private async run(dir: DirEntry, type: GcType, entry: DirEntry): Promise<void> {
    try {
      if (entry.type === 'Directory') await this.gcDirectory(entry)
      else await this.gcFile(entry)
    } catch (e) {
      const err = toStrataError(e)
      const busy = err.code === 'META_BUSY'
      if (busy) this.stats.busy++
      else this.stats.failed++
      const critical = !busy && (err.code.startsWith('META_') || err.code === 'INTERNAL' || err.code === 'INVALID_ARGUMENT')
      if (busy) this.o.log.debug('gc entry busy', { name: entry.name, reason: err.reason })
      else this.o.log.warn('gc task failed', { name: entry.name, err })
      if ((busy || critical) && !this.stopped) {
        await this.moveToTail(dir, type, entry).catch((e2: unknown) => this.o.log.warn('gc retry rename failed', { name: entry.name, err: e2 }))
      }
    }
  }

  private async moveToTail(dir: DirEntry, type: GcType, entry: DirEntry): Promise<void> {
    await this.o.kv.transact(async (txn) => {
      const cur = await loadDirEntry(txn, dir.id, entry.name, false)
      if (!cur) return
      // the new name says when the entry is due again; removedAt stays (entries from before it existed keep their first name's time)
      const removedAt = cur.removedAt ?? parseGcEntry(cur.name)?.timestampUs
      storeDirEntry(txn, { ...cur, name: formatGcEntry(type, nowUs() + this.o.settings.gcRetryDelayMs * 1000, entry.id), ...(removedAt ? { removedAt } : {}) })
      removeDirEntry(txn, cur)
    }, FREES)
  }

  private removeGcEntryAndInode(txn: ReadWriteTxn, entry: DirEntry): void {
    txn.clear(dentryKey(entry.parent, entry.name))
    txn.clear(inodeKey(entry.id))
    if (entry.type === 'Directory') {
      txn.clear(dirLockKey(entry.id))
      txn.clear(lockScopeKey(entry.id))
    }
  }

  private async gcFile(entry: DirEntry): Promise<void> {
    const inode = await this.o.kv.readOnly(async (txn) => {
      const [inode, session] = await Promise.all([loadInode(txn, entry.id), snapshotFirstSession(txn, entry.id)])
      if (session) throw new StrataError('META_BUSY', `file ${hexId(entry.id)} still has write session ${session.session} of client ${session.clientId}`)
      if (inode && (inode.nlink !== 0 || inode.acl.iflags & FS_IMMUTABLE_FL)) throw inconsistent(`GC entry ${entry.name}: inode has nlink ${inode.nlink}`)
      return inode
    })
    if (inode) {
      if (inode.type !== 'File') throw inconsistent(`GC entry ${entry.name} is a file entry for a ${inode.type}`)
      const n = await this.o.files.removeChunks(inode)
      this.stats.chunksRemoved += n
      this.o.log.debug('gc removed chunks', { inode: hexId(inode.id), chunks: n })
    } else {
      this.o.log.warn('inode of GC entry not found', { name: entry.name })
    }
    await this.o.kv.transact(async (txn) => {
      this.removeGcEntryAndInode(txn, entry)
    }, FREES)
    this.stats.filesRemoved++
  }

  private async gcDirectory(task: DirEntry): Promise<void> {
    const uid = task.gcInfo ? task.gcInfo.user : (task.dirAcl?.uid ?? 0)
    const user: UserInfo = { uid, gid: uid, groups: [] }
    let checked = false
    for (;;) {
      const finished = await this.o.kv.transact(async (txn) => {
        if (!checked) {
          const inode = await loadInode(txn, task.id, false)
          if (!inode) {
            this.removeGcEntryAndInode(txn, task)
            return true
          }
          if (inode.nlink !== 0 || inode.type !== 'Directory' || inode.acl.iflags & FS_IMMUTABLE_FL) {
            throw inconsistent(`GC entry ${task.name}: inode nlink ${inode.nlink}, type ${inode.type}`)
          }
        }
        const page = await listDirEntries(txn, task.id, '', DIR_ENTRY_BATCH, { snapshot: false })
        for (const child of page.entries) await this.removeChild(txn, task, child, user)
        if (!page.more) {
          this.removeGcEntryAndInode(txn, task)
          return true
        }
        return false
      }, FREES)
      checked = true
      if (finished) break
      if (this.stopped) throw new StrataError('CLOSED', 'GC stopped')
    }
    this.stats.dirsRemoved++
  }

  private async removeChild(txn: ReadWriteTxn, task: DirEntry, child: DirEntry, user: UserInfo): Promise<void> {
    const inode = await loadEntryInode(txn, child, false)
    if (inode.type === 'Directory' && inode.directory!.parent !== child.parent) throw inconsistent(`entry ${child.name} and its directory disagree on the parent`)
    let perm = true
    if (inode.acl.iflags & FS_IMMUTABLE_FL) perm = false
    else if (inode.type === 'Directory') {
      try {
        checkRecursiveRmPerm(inode.acl, user, false)
      } catch (e) {
        if (!isStrataError(e)) throw e
        perm = await checkEmpty(txn, inode.id)
      }
    }
    if (!perm) {
      const orphan = await this.createOrphanEntry(txn, task, child, inode, user)
      this.o.log.warn('no permission to remove during recursive remove, moved to orphans', { entry: child.name, to: `${orphan.parent}/${orphan.name}` })
      if (inode.type === 'Directory') {
        inode.directory!.parent = orphan.parent
        storeInode(txn, inode)
        // back in the namespace, maybe holding locks: as for a rename (checkTreeLocks)
        touchLockScopes(txn, await lockScopeChain(txn, orphan.parent))
      }
      removeDirEntry(txn, child)
      return
    }
    const gcInfo: GcInfo = {
      user: task.gcInfo ? task.gcInfo.user : (task.dirAcl?.uid ?? 0),
      origPath: task.gcInfo ? joinPath(task.gcInfo.origPath, child.name) : child.name,
    }
    this.removeEntry(txn, child, inode, gcInfo)
  }

  private async createOrphanEntry(txn: ReadWriteTxn, task: DirEntry, entry: DirEntry, inode: Inode, user: UserInfo): Promise<DirEntry> {
    const d = new Date()
    const date = `${d.getUTCFullYear()}${String(d.getUTCMonth() + 1).padStart(2, '0')}${String(d.getUTCDate()).padStart(2, '0')}`
    const comps = ['trash', 'gc-orphans', `user-${user.uid}-${date}`]
    if (inode.type === 'File') comps.push(hexId(entry.parent))
    const root = await loadInode(txn, ROOT_INODE, false)
    const layout: Layout = root?.directory?.layout ?? NULL_LAYOUT
    const now = castGranularity(nowUs(), 1_000_000)
    let parent = ROOT_INODE
    for (const fname of comps) {
      for (let i = 0; ; i++) {
        const name = i === 0 ? fname : `${fname.slice(0, 240)}.${i}`
        const found = await loadDirEntry(txn, parent, name, false)
        if (found) {
          if (found.type === 'Directory') {
            parent = found.id
            break
          }
          continue
        }
        const id = await this.o.ids.allocate()
        if (await loadInode(txn, id, false)) throw new StrataError('INTERNAL', `inode id ${id} handed out twice`)
        const acl = { uid: 0, gid: 0, perm: 0o755, iflags: 0 }
        storeDirEntry(txn, newEntry(parent, name, id, 'Directory', '', acl))
        storeInode(txn, newDirectory(id, parent, name, acl, layout, now))
        parent = id
        break
      }
    }
    if (task.gcInfo) {
      const linkParent = inode.type === 'Directory' ? inode.id : parent
      const origPath = inode.type === 'Directory' ? joinPath(task.gcInfo.origPath, entry.name) : task.gcInfo.origPath
      for (let i = 0; ; i++) {
        const name = i === 0 ? '_hf3fs_original_path' : `_hf3fs_original_path.${nowUs()}${i}`
        const found = await loadDirEntry(txn, linkParent, name, false)
        if (found) {
          if (found.type === 'Symlink') {
            const link = await loadEntryInode(txn, found, false)
            if (link.symlink!.target === origPath) break
          }
          continue
        }
        const id = await this.o.ids.allocate()
        storeInode(txn, newSymlink(id, origPath, task.gcInfo.user, task.gcInfo.user, now))
        storeDirEntry(txn, newEntry(linkParent, name, id, 'Symlink'))
        break
      }
    }
    for (let i = 0; ; i++) {
      const name = i === 0 ? entry.name : `${entry.name.slice(0, 230)}.${nowUs()}${i}`
      if (await loadDirEntry(txn, parent, name, false)) continue
      const orphan: DirEntry = { ...entry, parent, name }
      storeDirEntry(txn, orphan)
      return orphan
    }
  }
}
