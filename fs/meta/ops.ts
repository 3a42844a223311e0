// The metadata operations, each the body of one KV transaction, following
// 3FS src/meta/store/ops/*.cc. Request validation and normalization happen in
// service.ts; idempotency records are written by the service's driver in the
// same transaction.

import { StrataError } from '../common/errors.js'
import { isEmptyLayout, validateNewLayout, type Layout } from '../common/layout.js'
import type { ReadOnlyTxn, ReadWriteTxn } from '../kv/types.js'
import {
  ALLPERMS,
  FS_CHAIN_ALLOCATION_FL,
  FS_FL_INHERITABLE,
  FS_FL_SUPPORTED,
  FS_HUGE_FILE_FL,
  FS_IMMUTABLE_FL,
  READ,
  S_ISGID,
  S_ISUID,
  S_ISVTX,
  WRITE,
  aclEquals,
  checkImmutableSetAttr,
  checkPermission,
  checkRecursiveRmPerm,
  chmodPerm,
  createPerm,
  hasPermission,
  inGroup,
  isRoot,
  notPermitted,
} from './acl.js'
import type { ChainAllocator } from './chains.js'
import type { MetaSettings } from './config.js'
import type { FileHelper } from './file-helper.js'
import type { GcInfo, GcManager } from './gc.js'
import type { InodeIdAllocator } from './inode-alloc.js'
import { SETATTR_TIME_NOW, castGranularity, hexId, newDirectory, newEntry, newFile, newSymlink, nowUs, updateTime } from './inode.js'
import { PathResolver, checkValidForCreate, trailingSlashName, type ResolveResult } from './path.js'
import {
  addDentryConflict,
  addInodeConflict,
  checkEmpty,
  inconsistent,
  isTreeRoot,
  listDirEntries,
  listLockedDirectories,
  lockScopeChain,
  loadDirEntry,
  loadEntryInode,
  loadInode,
  mustLoadInode,
  removeDirEntry,
  removeInode,
  removeSession,
  storeDirEntry,
  storeDirLockIndex,
  storeInode,
  storeSession,
  addLockScopeConflict,
  touchLockScopes,
  validName,
} from './store.js'
import {
  GC_ROOT_INODE,
  ROOT_INODE,
  type BatchStatByPathReq,
  type BatchStatByPathRsp,
  type CloseReq,
  type CreateReq,
  type CreateRsp,
  type DirEntry,
  type GetRealPathReq,
  type HardLinkReq,
  type Inode,
  type InodeId,
  type ListReq,
  type ListRsp,
  type LockDirectoryReq,
  type MkdirsReq,
  type OpenFlags,
  type OpenReq,
  type RemoveReq,
  type RenameReq,
  type ReqBase,
  type SetAttrReq,
  type StatReq,
  type SymlinkReq,
  type SyncReq,
  type UserInfo,
  type VersionedLength,
} from './protocol.js'

export interface MetaContext {
  settings: MetaSettings
  ids: InodeIdAllocator
  chains: ChainAllocator
  files: FileHelper
  gc: GcManager
}

function accessBits(flags: OpenFlags): number {
  return flags.access === 'r' ? READ : flags.access === 'w' ? WRITE : READ | WRITE
}

function checkLock(dir: Inode, req: ReqBase): void {
  const lock = dir.directory?.lock
  if (lock && lock.client !== req.client.uuid) throw new StrataError('META_NO_LOCK', `directory ${hexId(dir.id)} is locked by client ${lock.client}`)
}

/**
 * Removing directory `root` (an rmdir, a recursive remove, a move into the
 * trash, a rename over it) also removes what is inside it, so a lock held by
 * another client on `root` or on any directory below it refuses the change
 * (3FS checks only the parent's lock; Strata closes that gap, docs/meta.md).
 * The locked directories come from the lock index, so no tree walk is needed.
 *
 * The index and the places of the locked directories are snapshot reads; what
 * keeps the answer true at commit is root's lock scope: a lock taken below
 * root, or a directory (maybe holding locks) moved below it, after this
 * snapshot writes that key (touchLockScopes), so the caller conflicts and its
 * retry sees the lock. Lock changes elsewhere in the filesystem do not touch it.
 */
async function checkTreeLocks(txn: ReadWriteTxn, root: Inode, req: ReqBase, name: string, below = true): Promise<void> {
  const own = root.directory?.lock
  if (own && own.client !== req.client.uuid) throw new StrataError('META_NO_LOCK', `directory ${name} is locked by client ${own.client}`)
  // an empty directory (its emptiness read with a conflict) has nothing below it
  if (!below) return
  addLockScopeConflict(txn, root.id)
  for (const id of await listLockedDirectories(txn)) {
    if (id === root.id) continue
    const dir = await loadInode(txn, id)
    const lock = dir?.directory?.lock
    if (!dir || !lock || lock.client === req.client.uuid || dir.nlink === 0) continue
    let ancestors: Inode[]
    try {
      ancestors = await loadAncestors(txn, dir.directory!.parent, true)
    } catch {
      continue // a stale index entry (its tree is being collected)
    }
    const at = ancestors.findIndex((a) => a.id === root.id)
    // a removed tree keeps its parent pointers: below a removed directory (nlink 0) is not inside root any more
    if (at >= 0 && !ancestors.slice(0, at).some((a) => a.nlink === 0)) {
      throw new StrataError('META_NO_LOCK', `directory ${name} contains ${hexId(id)} (${dir.directory!.name}), locked by client ${lock.client}`)
    }
  }
}

function fileOf(inode: Inode, what: string) {
  if (inode.type !== 'File' || !inode.file) {
    throw new StrataError(inode.type === 'Directory' ? 'META_IS_DIRECTORY' : 'META_INVALID_ARGUMENT', `${what}: inode ${hexId(inode.id)} is not a file`)
  }
  return inode.file
}

export class MetaStore {
  constructor(private readonly ctx: MetaContext) {}

  private get s(): MetaSettings {
    return this.ctx.settings
  }

  private get gran(): number {
    return this.s.timeGranularityMs * 1000
  }

  private now(): number {
    return castGranularity(nowUs(), this.gran)
  }

  resolver(txn: ReadOnlyTxn, user: UserInfo): PathResolver {
    return new PathResolver(txn, user, { maxSymlinkDepth: this.s.maxSymlinkDepth, maxSymlinkCount: this.s.maxSymlinkCount })
  }

  private async allocateInodeId(txn: ReadWriteTxn): Promise<InodeId> {
    const id = await this.ctx.ids.allocate()
    // 3FS inodeId_check_unique
    if (await loadInode(txn, id, false)) throw new StrataError('INTERNAL', `inode id ${hexId(id)} handed out twice`)
    return id
  }

  // --- read-only operations

  async stat(txn: ReadOnlyTxn, req: StatReq): Promise<Inode> {
    return this.resolver(txn, req.user).inode(req.path, req.flags?.followLastSymlink ?? false, false)
  }

  async batchStat(txn: ReadOnlyTxn, ids: InodeId[]): Promise<Array<Inode | null>> {
    return Promise.all(ids.map((id) => loadInode(txn, id)))
  }

  async batchStatByPath(txn: ReadOnlyTxn, req: BatchStatByPathReq): Promise<BatchStatByPathRsp> {
    const results: BatchStatByPathRsp['results'] = []
    const inodes: Array<Inode | null> = []
    for (const p of req.paths) {
      try {
        const stat = await this.resolver(txn, req.user).inode(p, req.flags?.followLastSymlink ?? false, false)
        results.push({ ok: true, stat })
        inodes.push(stat)
      } catch (e) {
        if (!(e instanceof StrataError) || e.retryable || e.code === 'INTERNAL') throw e
        results.push({ ok: false, error: { code: e.code, message: e.reason } })
        inodes.push(null)
      }
    }
    return { inodes, results }
  }

  async list(txn: ReadOnlyTxn, req: ListReq): Promise<ListRsp> {
    const inode = await this.resolver(txn, req.user).inode(req.path, true, true)
    // name what the caller named: the path when there is one
    if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${req.path.path ? req.path.path : hexId(inode.id)} is not a directory`)
    checkPermission(inode.acl, req.user, READ, `directory ${hexId(inode.id)}`)
    const limit = req.limit > 0 ? req.limit : this.s.listDefaultLimit
    const page = await listDirEntries(txn, inode.id, req.prev ?? '', limit)
    const inodes = req.status ? await Promise.all(page.entries.map((e) => loadEntryInode(txn, e))) : []
    return { entries: page.entries, inodes, more: page.more }
  }

  async getRealPath(txn: ReadOnlyTxn, req: GetRealPathReq): Promise<string> {
    let entry: DirEntry
    if (req.path.path !== undefined && req.path.path !== null) {
      const r = this.resolver(txn, req.user)
      r.trace = []
      entry = await r.dirEntry(req.path, true)
      if (!req.absolute) return simplifyPath(r.trace)
    } else {
      const inode = await mustLoadInode(txn, req.path.parent)
      if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', 'only the absolute path of a directory can be found by inode')
      if (isTreeRoot(inode.id)) return '/'
      entry = await this.entryOfDirectory(txn, inode)
    }
    if (entry.id === ROOT_INODE) return '/'
    const names = [entry.name]
    let parent = entry.parent
    for (let guard = 0; !isTreeRoot(parent); guard++) {
      if (guard > 4096) throw inconsistent('directory tree contains a loop')
      const p = await mustLoadInode(txn, parent)
      const e = await this.entryOfDirectory(txn, p)
      names.unshift(e.name)
      parent = e.parent
    }
    return simplifyPath(['/', ...names])
  }

  /** The entry that names a directory (3FS Inode::snapshotLoadDirEntry). */
  async entryOfDirectory(txn: ReadOnlyTxn, inode: Inode): Promise<DirEntry> {
    if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${hexId(inode.id)} is not a directory`)
    const { parent, name } = inode.directory!
    let entry: DirEntry | null = null
    if (name) entry = await loadDirEntry(txn, parent, name)
    else {
      let prev = ''
      for (;;) {
        const page = await listDirEntries(txn, parent, prev, 1024)
        entry = page.entries.find((e) => e.id === inode.id) ?? null
        if (entry || !page.more || !page.entries.length) break
        prev = page.entries[page.entries.length - 1]!.name
      }
    }
    if (!entry || entry.id !== inode.id) throw new StrataError('META_NOT_FOUND', `entry of directory ${hexId(inode.id)} not found, maybe removed`)
    return entry
  }

  // --- open / create

  private validateOpenFlags(flags: OpenFlags, req: { session?: { session: string } | undefined }, create: boolean): void {
    if (flags.directory) {
      if (flags.access !== 'r') throw new StrataError('META_INVALID_ARGUMENT', 'O_DIRECTORY with write access')
      if (flags.trunc) throw new StrataError('META_INVALID_ARGUMENT', 'O_DIRECTORY with O_TRUNC')
    }
    if (flags.access !== 'r' && (!req.session || !req.session.session)) {
      throw new StrataError('META_INVALID_ARGUMENT', 'a write open needs a session')
    }
    if (!create && flags.access === 'r' && (flags.trunc || flags.append)) throw new StrataError('META_INVALID_ARGUMENT', 'O_RDONLY with O_TRUNC or O_APPEND')
  }

  /**
   * Opening an existing inode (3FS OpenOp::openExists and
   * BatchedOp::openExists): type and permission checks, clearing set-id bits
   * on a write by a non-owner, a write session for a write open.
   */
  private openExisting(txn: ReadWriteTxn, inode: Inode, req: OpenReq | CreateReq, isCreate: boolean): { stat: Inode; needTruncate: boolean } {
    const flags = req.flags
    if (flags.excl && (isCreate || flags.create)) throw new StrataError('META_EXISTS', `${req.path.path ?? hexId(inode.id)} exists`)
    if (inode.type === 'Symlink') throw new StrataError('META_BUSY', 'found a symlink where a file was resolved; retry')
    const access = accessBits(flags)
    if (inode.type === 'Directory') {
      if (flags.access !== 'r' || flags.trunc || isCreate) throw new StrataError('META_IS_DIRECTORY', `${hexId(inode.id)} is a directory`)
      checkPermission(inode.acl, req.user, access, `directory ${hexId(inode.id)}`)
      return { stat: inode, needTruncate: false }
    }
    if (flags.directory) throw new StrataError('META_NOT_DIRECTORY', `${hexId(inode.id)} is not a directory`)
    if (flags.access !== 'r' && inode.acl.iflags & FS_IMMUTABLE_FL) throw notPermitted(`file ${hexId(inode.id)} is immutable`)
    checkPermission(inode.acl, req.user, access, `file ${hexId(inode.id)}`)
    let dirty = false
    const sbits = S_ISUID | S_ISGID | S_ISVTX
    if (flags.access !== 'r' && req.user.uid !== inode.acl.uid && inode.acl.perm & sbits) {
      inode.acl.perm &= ~sbits
      dirty = true
    }
    if (flags.access !== 'r' && req.session) {
      storeSession(txn, { inode: inode.id, clientId: req.client.uuid, session: req.session.session, timestamp: nowUs() })
    }
    if (dirty) {
      addInodeConflict(txn, inode.id)
      storeInode(txn, inode)
    }
    return { stat: inode, needTruncate: !!flags.trunc }
  }

  async open(txn: ReadWriteTxn, req: OpenReq): Promise<{ stat: Inode; needTruncate: boolean }> {
    this.validateOpenFlags(req.flags, req, false)
    const r = this.resolver(txn, req.user)
    let inode: Inode
    if (req.path.path === undefined || req.path.path === null) inode = await r.inode(req.path, true, true)
    else {
      const entry = await r.dirEntry(req.path, true)
      inode = await loadEntryInode(txn, entry)
    }
    return this.openExisting(txn, inode, req, false)
  }

  async create(txn: ReadWriteTxn, req: CreateReq): Promise<CreateRsp> {
    checkValidForCreate(req.path)
    this.validateOpenFlags(req.flags, req, true)
    if (req.layout) validateLayoutArg(req.layout, true)
    const r = this.resolver(txn, req.user)
    let res = await r.resolve(req.path.parent, req.path.path!)
    if (res.entry && res.entry.type === 'Symlink') {
      // O_CREAT|O_EXCL never follows a final symlink (POSIX)
      if (req.flags.excl) throw new StrataError('META_EXISTS', `${req.path.path} exists (a symlink)`)
      res = await r.followSymlink(res.entry)
    }
    if (res.entry) {
      const inode = await loadEntryInode(txn, res.entry)
      if (res.entry.uuid && res.entry.uuid === req.uuid) {
        // replay of a create that committed (3FS: "create already finished")
        return { stat: inode, needTruncate: false }
      }
      return this.openExisting(txn, inode, req, true)
    }
    const name = res.name
    if (!validName(name)) throw new StrataError('META_INVALID_ARGUMENT', `cannot create ${JSON.stringify(name)}`)
    const parent = await r.parentInode(res)
    return { stat: await this.createFile(txn, parent, name, req), needTruncate: false }
  }

  private async createFile(txn: ReadWriteTxn, parent: Inode, name: string, req: CreateReq): Promise<Inode> {
    if (parent.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${hexId(parent.id)} is not a directory`)
    if (parent.nlink === 0) throw new StrataError('META_NOT_FOUND', `directory ${hexId(parent.id)} was removed`)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    let layout: Layout = req.layout ?? parent.directory!.layout
    let counter: { value: number } | undefined
    if (isEmptyLayout(layout)) {
      if (parent.acl.iflags & FS_CHAIN_ALLOCATION_FL) counter = { value: parent.directory!.chainAllocCounter }
      layout = await this.ctx.chains.allocate(layout, counter)
    } else {
      await this.ctx.chains.checkLayoutValid(layout)
    }
    const id = await this.allocateInodeId(txn)
    // the inheritable iflags ('I', 's') go to every child, files as directories (ref/3fs.md §2.3):
    // 3FS keeps a file's iflags 0 and marks 's' in the inode id (new chunk engine); Strata has one
    // chunk engine, so the flag is kept in the acl, where stat shows it (docs/meta.md, deviations)
    const acl = { uid: req.user.uid, gid: req.user.gid, perm: createPerm(req.perm & ALLPERMS, req.user, parent.acl), iflags: parent.acl.iflags & FS_FL_INHERITABLE }
    // BSD group semantics below a set-group-id directory
    if (parent.acl.perm & S_ISGID) acl.gid = parent.acl.gid
    const inode = newFile(id, acl, layout, this.now())
    const entry = newEntry(parent.id, name, id, 'File', req.uuid)
    addInodeConflict(txn, parent.id)
    addDentryConflict(txn, parent.id, name)
    storeDirEntry(txn, entry)
    storeInode(txn, inode)
    if (req.flags.access !== 'r' && req.session) {
      storeSession(txn, { inode: id, clientId: req.client.uuid, session: req.session.session, timestamp: nowUs() })
    }
    if (counter && counter.value !== parent.directory!.chainAllocCounter) {
      parent.directory!.chainAllocCounter = counter.value
      storeInode(txn, parent)
    }
    return inode
  }

  // --- mkdirs / symlink / hard link

  private async directoryDepth(txn: ReadOnlyTxn, dir: InodeId): Promise<number> {
    let depth = 0
    let cur = dir
    while (cur !== ROOT_INODE && cur !== GC_ROOT_INODE) {
      const inode = await loadInode(txn, cur)
      if (!inode || inode.type !== 'Directory') break
      if (++depth > this.s.maxDirectoryDepth + 1) break
      cur = inode.directory!.parent
    }
    return depth
  }

  async mkdirs(txn: ReadWriteTxn, req: MkdirsReq): Promise<Inode> {
    if (req.path.path === undefined || req.path.path === null || req.path.path === '') throw new StrataError('META_INVALID_ARGUMENT', 'path not set')
    if (req.layout) validateLayoutArg(req.layout, true)
    const r = this.resolver(txn, req.user)
    // "a/b/" names a/b, and an existing a/b of any type is EEXIST (mkdir(2)), not a walk into it
    const { r: res, missing: rawMissing } = await r.resolveRange(req.path.parent, trailingSlashName(req.path.path).path)
    // "a/b/" names a/b
    const missing = rawMissing.filter((c, i) => !(c === '.' && i === rawMissing.length - 1 && i > 0))
    if (missing.length === 0) {
      if (res.entry && res.entry.uuid && res.entry.uuid === req.uuid) return loadEntryInode(txn, res.entry)
      throw new StrataError('META_EXISTS', `${req.path.path} exists`)
    }
    if (missing.length !== 1 && !req.recursive) throw new StrataError('META_NOT_FOUND', `parent of ${req.path.path} not found`)
    const parent = await r.parentInode(res)
    if (parent.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${hexId(parent.id)} is not a directory`)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    if (parent.nlink === 0) throw new StrataError('META_NOT_FOUND', `directory ${hexId(parent.id)} was removed`)
    const layout = req.layout ?? parent.directory!.layout
    await this.ctx.chains.checkLayoutValid(layout)
    // a given table (version) must exist, even though files only get chains from it at create
    if (req.layout && isEmptyLayout(req.layout)) await this.ctx.chains.checkChainTable(req.layout)
    const depth = (await this.directoryDepth(txn, parent.id)) + missing.length
    if (depth > this.s.maxDirectoryDepth) throw new StrataError('META_INVALID_ARGUMENT', `directory depth ${depth} exceeds ${this.s.maxDirectoryDepth}`)
    addInodeConflict(txn, parent.id)
    addDentryConflict(txn, parent.id, missing[0]!)
    const acl = { uid: req.user.uid, gid: req.user.gid, perm: req.perm & ALLPERMS, iflags: parent.acl.iflags & FS_FL_INHERITABLE }
    if (parent.acl.perm & S_ISGID) {
      acl.gid = parent.acl.gid
      acl.perm |= S_ISGID
    }
    let parentId = parent.id
    let inode: Inode | null = null
    const now = this.now()
    for (const name of missing) {
      if (!validName(name)) throw new StrataError('META_INVALID_ARGUMENT', `cannot create directory ${JSON.stringify(name)}`)
      const id = await this.allocateInodeId(txn)
      inode = newDirectory(id, parentId, name, { ...acl }, layout, now)
      storeDirEntry(txn, newEntry(parentId, name, id, 'Directory', req.uuid, acl))
      storeInode(txn, inode)
      parentId = id
    }
    return inode!
  }

  async symlink(txn: ReadWriteTxn, req: SymlinkReq): Promise<Inode> {
    checkValidForCreate(req.path)
    if (typeof req.target !== 'string' || req.target === '') throw new StrataError('META_INVALID_ARGUMENT', 'symlink target is empty')
    const r = this.resolver(txn, req.user)
    const res = await r.resolve(req.path.parent, req.path.path!)
    if (res.entry) {
      if (res.entry.uuid && res.entry.uuid === req.uuid) return loadEntryInode(txn, res.entry)
      throw new StrataError('META_EXISTS', `${req.path.path} exists`)
    }
    const parent = await r.parentInode(res)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    if (parent.nlink === 0) throw new StrataError('META_NOT_FOUND', `directory ${hexId(parent.id)} was removed`)
    const id = await this.allocateInodeId(txn)
    const entry = newEntry(parent.id, res.name, id, 'Symlink', req.uuid)
    // BSD group semantics below a set-group-id directory, as for files and directories (Linux: every new inode)
    const gid = parent.acl.perm & S_ISGID ? parent.acl.gid : req.user.gid
    const inode = newSymlink(id, req.target, req.user.uid, gid, this.now())
    addInodeConflict(txn, parent.id)
    addDentryConflict(txn, parent.id, res.name)
    storeDirEntry(txn, entry)
    storeInode(txn, inode)
    return inode
  }

  async hardLink(txn: ReadWriteTxn, req: HardLinkReq): Promise<Inode> {
    checkValidForCreate(req.newPath, 'newPath')
    const follow = req.flags?.followLastSymlink ?? false
    const newRes = await settle(this.resolver(txn, req.user).resolveFollow(req.newPath.parent, req.newPath.path!, false))
    // a replay answers the link it made, whatever became of the old path since
    if (newRes.ok && newRes.value.entry?.uuid && newRes.value.entry.uuid === req.uuid) return loadEntryInode(txn, newRes.value.entry)
    // link(2) resolves the old path first: its errors (ENOENT, ENOTDIR, ELOOP) come before the new path's and EEXIST
    const inode = await this.resolver(txn, req.user).inode(req.oldPath, follow, true)
    if (!newRes.ok) throw newRes.error
    const res = newRes.value
    if (res.entry) throw new StrataError('META_EXISTS', `${req.newPath.path} exists`)
    const parent = await this.resolver(txn, req.user).parentInode(res)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    if (parent.nlink === 0) throw new StrataError('META_NOT_FOUND', `directory ${hexId(parent.id)} was removed`)
    if (inode.acl.iflags & FS_IMMUTABLE_FL) throw notPermitted(`${hexId(inode.id)} is immutable`)
    // link(2): EPERM for a directory (3FS answers kIsDirectory)
    if (inode.type === 'Directory') throw notPermitted(`${hexId(inode.id)} is a directory; hard links to directories are not allowed`)
    if (inode.nlink >= 0xffff) throw new StrataError('META_TOO_MANY_LINKS', `${hexId(inode.id)} has ${inode.nlink} links`)
    const entry = newEntry(parent.id, res.name, inode.id, inode.type, req.uuid)
    addInodeConflict(txn, parent.id)
    addDentryConflict(txn, parent.id, res.name)
    storeDirEntry(txn, entry)
    inode.nlink++
    updateTime(inode, 'ctime', nowUs(), this.gran, true)
    addInodeConflict(txn, inode.id)
    storeInode(txn, inode)
    return inode
  }

  // --- remove

  /** 3FS PathResolveOp::byDirectoryInodeId: a directory named by its inode id. */
  private async resolveDirectoryById(txn: ReadWriteTxn, id: InodeId): Promise<ResolveResult> {
    const inode = await mustLoadInode(txn, id)
    const entry = await this.entryOfDirectory(txn, inode)
    const parent = await mustLoadInode(txn, entry.parent)
    return { parent: { id: entry.parent, acl: parent.acl, inode: parent }, entry, name: entry.name }
  }

  async remove(txn: ReadWriteTxn, req: RemoveReq): Promise<void> {
    const hasPath = req.path.path !== undefined && req.path.path !== null
    const named = hasPath ? trailingSlashName(req.path.path!) : { path: '', dirOnly: false }
    if (hasPath) checkValidForCreate({ parent: req.path.parent, path: named.path })
    const r = this.resolver(txn, req.user)
    const res = hasPath ? await r.resolve(req.path.parent, named.path) : await this.resolveDirectoryById(txn, req.path.parent)
    const entry = res.entry
    if (!entry) throw new StrataError('META_NOT_FOUND', `${req.path.path ?? hexId(req.path.parent)} not found`)
    if (named.dirOnly && entry.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${req.path.path} is not a directory`)
    if (isTreeRoot(entry.id)) throw notPermitted('cannot remove a tree root')
    if (req.inodeId !== undefined && req.inodeId !== null && entry.id !== req.inodeId) throw new StrataError('META_NOT_FOUND', `${entry.name} is no longer inode ${hexId(req.inodeId)}`)
    const parent = await r.parentInode(res)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    if (req.checkType) {
      if (req.atFlags?.removeDir && entry.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${entry.name} is not a directory`)
      if (!req.atFlags?.removeDir && entry.type === 'Directory') throw new StrataError('META_IS_DIRECTORY', `${entry.name} is a directory`)
    }
    const inode = await loadEntryInode(txn, entry)
    if (parent.acl.perm & S_ISVTX && req.user.uid !== parent.acl.uid && !isRoot(req.user) && req.user.uid !== inode.acl.uid) {
      throw notPermitted(`cannot remove ${entry.name}: sticky directory owned by another user`)
    }
    if (inode.acl.iflags & FS_IMMUTABLE_FL) throw notPermitted(`cannot remove ${entry.name}: immutable`)
    // the path a removed file or tree had, for gc-list and gc-orphans (the last link of a file: its GC entry keeps it too)
    const gcInfo: GcInfo = { user: req.user.uid, origPath: entry.name }
    if (entry.type === 'File' && inode.nlink === 1) gcInfo.origPath = await origPathOf(txn, entry.parent, entry.name)
    if (entry.type === 'Directory') {
      const empty = await checkEmpty(txn, entry.id)
      if (!empty && !req.recursive) throw new StrataError('META_NOT_EMPTY', `directory ${req.path.path ?? entry.name} is not empty`)
      await checkTreeLocks(txn, inode, req, entry.name, !empty)
      if (empty) {
        addDentryConflict(txn, entry.parent, entry.name)
        addInodeConflict(txn, inode.id)
        removeDirEntry(txn, entry)
        removeInode(txn, inode)
        return
      }
      checkRecursiveRmPerm(inode.acl, req.user, this.s.recursiveRemoveCheckOwner, `directory ${entry.name}`)
      await this.recursiveCheckRmPerm(txn, inode.id, req.user)
      gcInfo.origPath = await origPathOf(txn, entry.parent, entry.name)
    }
    this.ctx.gc.removeEntry(txn, entry, inode, gcInfo)
  }

  /** Best-effort check that every directory below may be removed by `user` (3FS DirEntryList::recursiveCheckRmPerm). */
  private async recursiveCheckRmPerm(txn: ReadOnlyTxn, root: InodeId, user: UserInfo): Promise<void> {
    let limit = this.s.recursiveRemovePermCheck
    if (limit <= 0) return
    const queue: InodeId[] = [root]
    while (queue.length) {
      const dir = queue.shift()!
      let prev = ''
      let found = false
      let n = 0
      for (;;) {
        if (limit-- <= 0) break
        const page = await listDirEntries(txn, dir, prev, 128)
        n += page.entries.length
        for (const e of page.entries) {
          prev = e.name
          if (e.type !== 'Directory') continue
          found = true
          if (queue.length < limit) queue.push(e.id)
          checkRecursiveRmPerm(e.dirAcl!, user, false, `directory ${e.name}`)
        }
        if (!page.more || (n > 1024 && !found)) break
      }
      if (limit <= 0) break
    }
  }

  // --- rename

  async rename(txn: ReadWriteTxn, req: RenameReq): Promise<Inode | null> {
    const srcNamed = trailingSlashName(req.src.path ?? '')
    const dstNamed = trailingSlashName(req.dest.path ?? '')
    checkValidForCreate(req.src.path ? { parent: req.src.parent, path: srcNamed.path } : req.src, 'src')
    const dstName = checkValidForCreate(req.dest.path ? { parent: req.dest.parent, path: dstNamed.path } : req.dest, 'dest')
    const srcR = this.resolver(txn, req.user)
    const dstR = this.resolver(txn, req.user)
    // rename(2) order: the source's path, then the destination's, then a missing source name; both walks
    // ran at once before, so when both failed the errno was whichever walk failed first
    const srcRes = await settle(srcR.resolve(req.src.parent, srcNamed.path))
    const dstRes = await settle(dstR.resolve(req.dest.parent, dstNamed.path))
    if (dstRes.ok && dstRes.value.entry?.uuid && dstRes.value.entry.uuid === req.uuid) return loadEntryInode(txn, dstRes.value.entry)
    if (!srcRes.ok) throw srcRes.error
    if (!dstRes.ok) throw dstRes.error
    const src = srcRes.value
    const dst = dstRes.value
    if (!src.entry) throw new StrataError('META_NOT_FOUND', `rename source ${req.src.path} not found`)
    if (req.inodeId !== undefined && req.inodeId !== null && src.entry.id !== req.inodeId) throw new StrataError('META_NOT_FOUND', `rename source is no longer inode ${hexId(req.inodeId)}`)
    const srcEntry = src.entry
    // rename(2): a trailing slash on either side needs the source to be a directory
    if ((srcNamed.dirOnly || dstNamed.dirOnly) && srcEntry.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `rename source ${req.src.path} is not a directory`)
    if (dst.entry && dst.entry.parent === srcEntry.parent && dst.entry.name === srcEntry.name) return loadEntryInode(txn, dst.entry)
    // rename(2): two links of the same file — "return successfully and perform no other action" (3FS removes the source name)
    if (dst.entry && dst.entry.id === srcEntry.id) return loadEntryInode(txn, dst.entry)
    if (dst.entry && dst.entry.type === 'File' && req.moveToTrash) throw new StrataError('META_EXISTS', `rename destination ${req.dest.path} exists`)
    // a directory's new ancestors (dst's parent first), read with conflicts
    let dstAncestors: Inode[] = []
    if (srcEntry.type === 'Directory') {
      // rename(2): a move into its own subtree is EINVAL before the destination's type or emptiness is looked at
      dstAncestors = await this.checkRenameLoop(txn, srcEntry.id, dst.parent.id)
      // the replaced (empty) directory goes away: not while another client holds its lock
      if (dst.entry && dst.entry.type === 'Directory') {
        addInodeConflict(txn, dst.entry.id) // a lock taken on it meanwhile aborts this rename
        await checkTreeLocks(txn, await loadEntryInode(txn, dst.entry), req, dst.entry.name, false)
      }
      if (underTrash(dstAncestors)) {
        // a move into the trash removes the tree: the locks below count as for a recursive remove
        await checkTreeLocks(txn, await loadEntryInode(txn, srcEntry), req, srcEntry.name)
        // moving a directory into /trash/…: the remove permissions, unless it is already in the trash (3FS)
        if (req.moveToTrash) {
          checkRecursiveRmPerm(srcEntry.dirAcl!, req.user, this.s.recursiveRemoveCheckOwner, `directory ${srcEntry.name}`)
          await this.recursiveCheckRmPerm(txn, srcEntry.id, req.user)
        } else if (!isRoot(req.user) && !underTrash(await loadAncestors(txn, src.parent.id))) {
          throw notPermitted('moving a directory into the trash needs moveToTrash')
        }
      }
    } else if (dst.entry && dst.entry.type === 'Directory') {
      // rename(2): a destination that is an ancestor of the source is ENOTEMPTY (it holds the source), before the type rule
      if ((await loadAncestors(txn, src.parent.id, true)).some((a) => a.id === dst.entry!.id)) {
        throw new StrataError('META_NOT_EMPTY', `rename destination ${req.dest.path} is an ancestor of the source`)
      }
    }
    await this.checkRenamePermission(txn, srcR, src, req, false)
    const dstInode = await this.checkRenamePermission(txn, dstR, dst, req, true)
    // the type of what is replaced is looked at after both parents' permissions (may_delete in vfs_rename:
    // EACCES before ENOTDIR/EISDIR): a directory replaces only a directory, and a non-directory cannot
    // replace a directory (3FS lets it)
    if (dst.entry && srcEntry.type === 'Directory' && dst.entry.type !== 'Directory') {
      throw new StrataError('META_NOT_DIRECTORY', `rename destination ${req.dest.path} is not a directory`)
    }
    if (dst.entry && srcEntry.type !== 'Directory' && dst.entry.type === 'Directory') {
      throw new StrataError('META_IS_DIRECTORY', `rename destination ${req.dest.path} is a directory`)
    }
    // rename(2): a directory moved to another parent is itself changed (its parent, "..") and needs
    // write permission on itself, or anyone who may write both parents could carry off another user's tree
    const inode = await loadEntryInode(txn, srcEntry, false)
    if (inode.type === 'Directory' && src.parent.id !== dst.parent.id) checkPermission(inode.acl, req.user, WRITE, `directory ${hexId(inode.id)}`)
    // only a directory can replace a directory, and only an empty one (a non-directory is EISDIR above,
    // empty or not); checked after the permissions, as Linux does: EACCES before ENOTEMPTY (rename(2))
    if (inode.type === 'Directory' && dst.entry && !(await checkEmpty(txn, dst.entry.id))) {
      throw new StrataError('META_NOT_EMPTY', `rename destination ${req.dest.path} is a non-empty directory`)
    }

    addInodeConflict(txn, src.parent.id)
    addDentryConflict(txn, srcEntry.parent, srcEntry.name)
    addInodeConflict(txn, dst.parent.id)
    addDentryConflict(txn, dst.parent.id, dstName)

    if (srcEntry.type === 'Directory') {
      inode.directory!.parent = dst.parent.id
      inode.directory!.name = dstName
      storeInode(txn, inode)
      // the moved tree may hold locks: a remove of a tree it now lies in that read before this commit must see them
      if (src.parent.id !== dst.parent.id) touchLockScopes(txn, dstAncestors.map((a) => a.id))
    }
    removeDirEntry(txn, srcEntry)
    if (dst.entry) {
      const old = dst.entry
      if (old.type === 'File') {
        const oldInode = dstInode ?? (await loadEntryInode(txn, old))
        const origPath = oldInode.nlink === 1 ? await origPathOf(txn, old.parent, old.name) : old.name
        this.ctx.gc.removeEntry(txn, old, oldInode, { user: req.user.uid, origPath })
      } else if (old.type === 'Directory') {
        removeInode(txn, old.id)
      } else {
        // the replaced symlink loses a link; with its last link its inode goes, as an unlink does. (It was
        // kept at nlink 0 "for FUSE caches", but nothing ever removed it: every symlink replaced by a rename
        // leaked an inode no path or GC entry reaches — found by the fsck after the differential test.)
        const link = await loadEntryInode(txn, old, false)
        if (link.nlink === 0) throw inconsistent(`symlink ${old.name} has nlink 0`)
        updateTime(link, 'ctime', nowUs(), this.gran, true)
        link.nlink--
        addInodeConflict(txn, link.id)
        if (link.nlink === 0) removeInode(txn, link)
        else storeInode(txn, link)
      }
    }
    const { parent: _p, name: _n, ...data } = srcEntry
    storeDirEntry(txn, { ...data, parent: dst.parent.id, name: dstName, uuid: req.uuid })
    return inode
  }

  private async checkRenameLoop(txn: ReadWriteTxn, srcId: InodeId, dstParent: InodeId): Promise<Inode[]> {
    const ancestors = await loadAncestors(txn, dstParent)
    for (const a of ancestors) {
      if (a.id === srcId) throw new StrataError('META_INVALID_ARGUMENT', 'cannot move a directory into its own subtree')
      if (a.nlink === 0) throw new StrataError('META_NOT_FOUND', `destination directory ${hexId(a.id)} was removed`)
      if (a.id === a.directory!.parent) {
        if (a.id === ROOT_INODE) break
        if (a.id === GC_ROOT_INODE) throw notPermitted('cannot move a directory into a removed directory')
        throw inconsistent(`directory ${hexId(a.id)} is its own parent`)
      }
    }
    if (ancestors.length > this.s.maxDirectoryDepth) throw new StrataError('META_INVALID_ARGUMENT', `directory depth would exceed ${this.s.maxDirectoryDepth}`)
    return ancestors
  }

  private async checkRenamePermission(txn: ReadWriteTxn, r: PathResolver, res: ResolveResult, req: RenameReq, dst: boolean): Promise<Inode | null> {
    const parent = await r.parentInode(res)
    checkPermission(parent.acl, req.user, WRITE, `directory ${hexId(parent.id)}`)
    checkLock(parent, req)
    if (dst && parent.nlink === 0) throw new StrataError('META_NOT_FOUND', `destination directory ${hexId(parent.id)} was removed`)
    if (!res.entry) return null
    const inode = await loadEntryInode(txn, res.entry)
    if (inode.acl.iflags & FS_IMMUTABLE_FL) throw notPermitted(`cannot move ${res.entry.name}: immutable`)
    if (parent.acl.perm & S_ISVTX && req.user.uid !== parent.acl.uid && !isRoot(req.user) && req.user.uid !== inode.acl.uid) {
      throw notPermitted(`cannot move ${res.entry.name}: sticky directory owned by another user`)
    }
    return inode
  }

  // --- attributes

  async setAttr(txn: ReadWriteTxn, req: SetAttrReq): Promise<Inode> {
    const follow = req.flags?.followLastSymlink ?? true
    const r = this.resolver(txn, req.user)
    let entry: DirEntry | null = null
    let inode: Inode
    if (req.path.path !== undefined && req.path.path !== null) {
      entry = await r.dirEntry(req.path, follow)
      inode = await loadEntryInode(txn, entry)
    } else {
      inode = await r.inode(req.path, follow, true)
    }
    await this.checkSetAttr(inode, req)
    const oldAcl = { ...inode.acl }
    let dirty = this.applySetAttr(inode, req)
    if (inode.type === 'Directory' && !aclEquals(inode.acl, oldAcl) && inode.id !== ROOT_INODE) {
      if (!entry || entry.name === '.' || entry.name === '..') {
        entry = await this.entryOfDirectory(txn, inode)
        if (!inode.directory!.name) {
          inode.directory!.name = entry.name
          dirty = true
        }
      }
      entry.dirAcl = { ...inode.acl }
      addDentryConflict(txn, entry.parent, entry.name)
      storeDirEntry(txn, entry)
    }
    if (dirty) {
      addInodeConflict(txn, inode.id)
      storeInode(txn, inode)
    }
    return inode
  }

  private async checkSetAttr(inode: Inode, req: SetAttrReq): Promise<void> {
    const user = req.user
    const owner = user.uid === inode.acl.uid
    // a tree root's mode and owner stay as created; setting them to what they are is no change (tar -x and
    // rsync -a of a tree into a mount root set its owner and mode to the archived ones, usually the same)
    const rootChange = (req.perm != null && (req.perm & ALLPERMS) !== inode.acl.perm) || (req.uid != null && req.uid !== inode.acl.uid) || (req.gid != null && req.gid !== inode.acl.gid)
    if (isTreeRoot(inode.id) && rootChange) throw notPermitted(`the permissions of tree root ${inode.id} cannot change`)
    if (req.iflags != null && req.iflags !== inode.acl.iflags) {
      if (req.iflags & ~FS_FL_SUPPORTED) throw new StrataError('META_INVALID_ARGUMENT', `only iflags 0x${FS_FL_SUPPORTED.toString(16)} are supported`)
      if (!(inode.acl.iflags & FS_CHAIN_ALLOCATION_FL) && req.iflags & FS_CHAIN_ALLOCATION_FL && !this.s.iflagsChainAllocation) throw notPermitted('FS_CHAIN_ALLOCATION_FL is disabled')
      const changed = req.iflags ^ inode.acl.iflags
      const ownerChangeable = this.s.allowOwnerChangeImmutable ? FS_HUGE_FILE_FL | FS_IMMUTABLE_FL : FS_HUGE_FILE_FL
      if (!(isRoot(user) || (owner && changed === (changed & ownerChangeable)))) throw notPermitted('only root can set these inode flags')
    }
    // the tree roots are immutable only so that nothing removes or moves them (3FS Acl::root); their
    // times stay settable (tar -x or rsync -a into the mount root set them), their mode and owner never change
    if (!isTreeRoot(inode.id)) checkImmutableSetAttr(inode.acl, req, `${inode.type === 'Directory' ? 'directory' : 'file'} ${hexId(inode.id)}`)
    if (req.perm != null && (req.perm & ALLPERMS) !== inode.acl.perm && !isRoot(user) && !owner) throw notPermitted(`uid ${user.uid} does not own ${hexId(inode.id)}`)
    if (req.uid != null && req.uid !== inode.acl.uid && !isRoot(user)) throw notPermitted('only root can change the owner')
    if (req.gid != null && req.gid !== inode.acl.gid && !isRoot(user) && (!owner || !inGroup(user, req.gid))) {
      throw notPermitted(`uid ${user.uid} may not change the group to ${req.gid}`)
    }
    if (req.atime != null || req.mtime != null) {
      const explicit = (req.atime != null && req.atime !== SETATTR_TIME_NOW) || (req.mtime != null && req.mtime !== SETATTR_TIME_NOW)
      if (explicit) {
        if (!owner && !isRoot(user)) throw notPermitted(`uid ${user.uid} may not set explicit times on ${hexId(inode.id)}`)
      } else if (!owner && !isRoot(user) && !hasPermission(inode.acl, user, WRITE)) {
        throw new StrataError('META_NO_PERMISSION', `uid ${user.uid} has no write permission on ${hexId(inode.id)}`)
      }
    }
    if (req.layout) {
      if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', 'a layout can only be set on a directory')
      checkPermission(inode.acl, user, WRITE, `directory ${hexId(inode.id)}`)
      validateLayoutArg(req.layout, true)
      await this.ctx.chains.checkLayoutValid(req.layout)
      if (isEmptyLayout(req.layout)) await this.ctx.chains.checkChainTable(req.layout)
    }
    if (req.dynStripe && inode.type !== 'File') throw new StrataError('META_INVALID_ARGUMENT', 'dynStripe on a non-file')
  }

  private applySetAttr(inode: Inode, req: SetAttrReq): boolean {
    let dirty = false
    const set = <K extends 'iflags' | 'uid' | 'gid' | 'perm'>(k: K, v: number | undefined | null) => {
      if (v != null && inode.acl[k] !== v) {
        inode.acl[k] = v
        dirty = true
      }
    }
    set('iflags', req.iflags)
    set('uid', req.uid)
    set('gid', req.gid)
    set('perm', req.perm != null ? chmodPerm(req.perm & ALLPERMS, req.user, req.gid ?? inode.acl.gid) : null)
    // chown(2) of a file, by root too: set-user-id goes, set-group-id with group execute (a plain
    // setgid without it is a mandatory-locking mark and stays); a mode given alongside (FUSE sends
    // one when the kernel kills the bits itself) is taken as is
    if ((req.uid != null || req.gid != null) && req.perm == null && inode.type === 'File') {
      const kill = S_ISUID | (inode.acl.perm & S_IXGRP ? S_ISGID : 0)
      set('perm', inode.acl.perm & ~kill)
    }
    if (req.layout && inode.directory && JSON.stringify(layoutKey(inode.directory.layout)) !== JSON.stringify(layoutKey(req.layout))) {
      inode.directory.layout = req.layout
      dirty = true
    }
    if (dirty) updateTime(inode, 'ctime', nowUs(), this.gran, true)
    dirty = updateTime(inode, 'atime', req.atime, this.gran, false) || dirty
    dirty = updateTime(inode, 'mtime', req.mtime, this.gran, false) || dirty
    if (req.dynStripe && inode.file && inode.file.dynStripe && inode.file.dynStripe < req.dynStripe) {
      let d = inode.file.dynStripe
      const max = Math.min(req.dynStripe, inode.file.layout.stripeSize)
      while (d < max) d = Math.min(d * 2, inode.file.layout.stripeSize)
      if (d !== inode.file.dynStripe) {
        inode.file.dynStripe = d
        dirty = true
      }
    }
    return dirty
  }

  // --- sync / close (3FS BatchedOp::syncAndClose, one request per transaction)

  /**
   * The new length of a file: a usable hint (same truncateVer, larger) is
   * taken as is; without one storage is asked, and a result shorter than
   * what is stored, or a truncate, bumps truncateVer.
   */
  private async queryLength(inode: Inode, hint: VersionedLength | null, truncate: boolean): Promise<VersionedLength> {
    const f = inode.file!
    const cur = { length: f.length, truncateVer: f.truncateVer }
    if (hint && !truncate) {
      if (cur.truncateVer >= hint.truncateVer && cur.length >= hint.length) return cur
      if (hint.truncateVer === cur.truncateVer && hint.length > cur.length) return { length: hint.length, truncateVer: hint.truncateVer }
    }
    const length = await this.ctx.files.queryLength(inode)
    const truncateVer = truncate || length < f.length ? f.truncateVer + 1 : f.truncateVer
    return { length, truncateVer }
  }

  private async applyLength(inode: Inode, updateLength: boolean, hint: VersionedLength | null, truncate: boolean): Promise<boolean> {
    const f = inode.file!
    let next: VersionedLength | null = null
    if (updateLength) next = await this.queryLength(inode, truncate ? null : hint, truncate)
    else if (hint && hint.truncateVer === f.truncateVer && hint.length > f.length) next = hint
    if (!next || (next.length === f.length && next.truncateVer === f.truncateVer)) return false
    if (next.truncateVer < f.truncateVer || (next.truncateVer === f.truncateVer && next.length < f.length)) {
      throw inconsistent(`length of ${hexId(inode.id)} would go from ${f.length}@${f.truncateVer} to ${next.length}@${next.truncateVer}`)
    }
    updateTime(inode, 'mtime', nowUs(), this.gran, true)
    if (next.truncateVer !== f.truncateVer) updateTime(inode, 'ctime', nowUs(), this.gran, true)
    f.length = next.length
    f.truncateVer = next.truncateVer
    return true
  }

  async sync(txn: ReadWriteTxn, req: SyncReq): Promise<Inode> {
    if (req.truncated && !req.updateLength) throw new StrataError('META_INVALID_ARGUMENT', 'truncated needs updateLength')
    const inode = await mustLoadInode(txn, req.inode)
    if (req.updateLength || req.truncated || req.lengthHint) fileOf(inode, 'sync')
    if (req.lengthHint && req.lengthHint.truncateVer > inode.file!.truncateVer) {
      throw new StrataError('META_INVALID_ARGUMENT', `length hint truncateVer ${req.lengthHint.truncateVer} is ahead of the file's ${inode.file!.truncateVer}`)
    }
    let dirty = updateTime(inode, 'atime', req.atime, this.gran, true)
    dirty = updateTime(inode, 'mtime', req.mtime, this.gran, true) || dirty
    if (req.truncated) dirty = updateTime(inode, 'ctime', req.mtime ?? nowUs(), this.gran, true) || dirty
    if (inode.type === 'File') dirty = (await this.applyLength(inode, !!req.updateLength || !!req.truncated, req.lengthHint ?? null, !!req.truncated)) || dirty
    if (dirty) {
      addInodeConflict(txn, inode.id)
      storeInode(txn, inode)
    }
    return inode
  }

  async close(txn: ReadWriteTxn, req: CloseReq): Promise<Inode> {
    if ((req.updateLength || req.mtime != null) && !req.session) throw new StrataError('META_INVALID_ARGUMENT', 'close with updateLength or mtime needs the session')
    const inode = await mustLoadInode(txn, req.inode)
    if (req.session || req.updateLength) fileOf(inode, 'close')
    let dirty = updateTime(inode, 'atime', req.atime, this.gran, true)
    dirty = updateTime(inode, 'mtime', req.mtime, this.gran, true) || dirty
    if (req.session) removeSession(txn, inode.id, req.session.session)
    if (inode.type === 'File') dirty = (await this.applyLength(inode, !!req.updateLength, req.lengthHint ?? null, false)) || dirty
    if (dirty) {
      addInodeConflict(txn, inode.id)
      storeInode(txn, inode)
    }
    return inode
  }

  // --- directory lock (hf3fs.lock)

  async lockDirectory(txn: ReadWriteTxn, req: LockDirectoryReq): Promise<Inode> {
    const inode = await loadInode(txn, req.inode, false)
    if (!inode) throw new StrataError('META_NOT_FOUND', `inode ${hexId(req.inode)} not found`)
    checkPermission(inode.acl, req.user, WRITE, `directory ${hexId(inode.id)}`)
    if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${hexId(inode.id)} is not a directory`)
    const dir = inode.directory!
    const me = req.client.uuid
    const action = req.action
    if (action === 'try_lock' || action === 'preempt_lock') {
      if (action === 'try_lock' && dir.lock && dir.lock.client !== me) throw new StrataError('META_NO_LOCK', `directory locked by client ${dir.lock.client}`)
      if (!dir.lock || dir.lock.client !== me) {
        dir.lock = { client: me, since: nowUs() }
        storeInode(txn, inode)
        storeDirLockIndex(txn, inode.id, me)
        // a remove of any tree holding this directory that read before this commit must see the lock (checkTreeLocks)
        touchLockScopes(txn, await lockScopeChain(txn, inode.id))
      }
      return inode
    }
    if (action === 'unlock' || action === 'clear') {
      if (action === 'unlock') {
        if (!dir.lock) throw new StrataError('META_NO_LOCK', 'directory is not locked')
        if (dir.lock.client !== me) throw new StrataError('META_NO_LOCK', `directory locked by client ${dir.lock.client}`)
      }
      if (dir.lock) {
        dir.lock = null
        storeInode(txn, inode)
        storeDirLockIndex(txn, inode.id, null)
      }
      return inode
    }
    throw new StrataError('META_INVALID_ARGUMENT', `unknown lock action ${String(action)}`)
  }
}

function layoutKey(l: Layout): unknown {
  return { ...l, chains: l.chains.type === 'ChainRange' ? { ...l.chains, seed: l.chains.seed.toString() } : l.chains }
}

function validateLayoutArg(layout: Layout, allowEmpty: boolean): void {
  try {
    validateNewLayout(layout, allowEmpty)
  } catch (e) {
    throw new StrataError('META_INVALID_ARGUMENT', `invalid layout: ${(e as StrataError).reason ?? String(e)}`)
  }
}

/** `ancestors` (parent first, tree root last) end in /trash/… */
function underTrash(ancestors: Inode[]): boolean {
  const n = ancestors.length
  return n >= 2 && ancestors[n - 1]!.id === ROOT_INODE && ancestors[n - 2]!.directory?.name === 'trash'
}

/**
 * Absolute path of `name` in directory `parent`, from the parents' names. It
 * is only recorded (gc-list), so its reads are snapshot reads: an unlink must
 * not conflict with every change to a directory above it.
 */
async function origPathOf(txn: ReadWriteTxn, parent: InodeId, name: string): Promise<string> {
  let orig = name
  for (const a of await loadAncestors(txn, parent, true)) if (!isTreeRoot(a.id)) orig = `${a.directory!.name}/${orig}`
  return `/${orig}`
}

/**
 * The ancestors of a directory up to its tree root, loaded into the
 * read-conflict set (3FS Inode::loadAncestors), or with snapshot reads.
 */
export async function loadAncestors(txn: ReadWriteTxn, parent: InodeId, snapshot = false): Promise<Inode[]> {
  const out: Inode[] = []
  const seen = new Set<InodeId>()
  let cur = parent
  for (;;) {
    if (seen.has(cur)) throw inconsistent('directory tree contains a loop')
    seen.add(cur)
    const inode = await loadInode(txn, cur, snapshot)
    if (!inode) throw new StrataError('META_NOT_FOUND', `directory ${hexId(cur)} not found`)
    if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${hexId(cur)} is not a directory`)
    out.push(inode)
    if (inode.directory!.parent === inode.id) break
    cur = inode.directory!.parent
  }
  return out
}

/** 3FS simplifyPath: drop ".", resolve ".." lexically. */
export function simplifyPath(components: string[]): string {
  const out: string[] = []
  let absolute = false
  for (const c of components) {
    if (c === '.' || c === '') continue
    if (c === '..') {
      if (out.length && out[out.length - 1] !== '..') out.pop()
      else if (!absolute) out.push(c)
    } else if (c === '/') {
      absolute = true
      out.length = 0
    } else out.push(c)
  }
  const p = (absolute ? '/' : '') + out.join('/')
  return p || (absolute ? '/' : '.')
}

/** group execute (sys/stat.h) */
const S_IXGRP = 0o010

/** A promise's outcome as a value, so that of two path walks the error of the one POSIX looks at first wins. */
async function settle<T>(p: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  try {
    return { ok: true, value: await p }
  } catch (error) {
    return { ok: false, error }
  }
}
