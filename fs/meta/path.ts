// Path resolution, as 3FS PathResolveOp: a component walk over directory
// entries from snapshot reads (nothing joins the read-conflict set; callers
// add what they depend on), search permission from each directory entry's
// copy of the directory acl, symlinks followed in the middle of a path and —
// when asked — at its end, with a nesting limit (max_symlink_depth, default
// 4) and a total limit (max_symlink_count, default 10).

import { StrataError } from '../common/errors.js'
import type { ReadOnlyTxn } from '../kv/types.js'
import { EXEC, ROOT_ACL, checkPermission } from './acl.js'
import { loadDirEntry, loadEntryInode, loadInode, mustLoadInode } from './store.js'
import { ROOT_INODE, type Acl, type DirEntry, type Inode, type InodeId, type PathAt, type UserInfo } from './protocol.js'

/** `/` → ["/"], `a/b/` → ["a", "b", "."] (boost::filesystem iteration), empty components dropped. */
export function splitPath(path: string): string[] {
  const out: string[] = []
  if (path.startsWith('/')) out.push('/')
  const parts = path.split('/')
  for (let i = 0; i < parts.length; i++) {
    const p = parts[i]!
    if (p === '') continue
    out.push(p)
  }
  if (path.length > 1 && path.endsWith('/') && out.length > 0 && out[out.length - 1] !== '/') out.push('.')
  return out
}

/** Last component of a path, as boost's filename(): "" for "", "/" for "/", "." after a trailing slash. */
export function filenameOf(path: string): string {
  const c = splitPath(path)
  return c.length ? c[c.length - 1]! : ''
}

/** what checkValidForCreate's callers name their path argument, as a message says it */
const PATH_ROLE: Record<string, string> = { path: 'path', src: 'rename source', dest: 'rename destination', newPath: 'link name' }

/**
 * 3FS PathAt::validForCreate: the path must end in a name. A refusal names the
 * path given and its role (it said 'src: file name is .', naming neither).
 */
export function checkValidForCreate(p: PathAt, what = 'path'): string {
  const role = PATH_ROLE[what] ?? what
  if (p.path === undefined || p.path === null || p.path === '') throw new StrataError('META_INVALID_ARGUMENT', `${role} not set`)
  const name = filenameOf(p.path)
  if (name === '' ) throw new StrataError('META_INVALID_ARGUMENT', `${role} ${p.path} has no file name`)
  if (name === '.' || name === '..') throw new StrataError('META_INVALID_ARGUMENT', `${role} ${p.path} ends in '${name}', which names a directory, not an entry in one`)
  if (name === '/') throw new StrataError('META_INVALID_ARGUMENT', `${role} ${p.path} is the root directory, not an entry in one`)
  return name
}

/**
 * For remove and rename, whose target is a name and not what a path
 * resolves to: `d/` names d and says it must be a directory (rmdir(2) and
 * rename(2) accept `d/`; `f/` is ENOTDIR), where 3FS takes `d/` as `d/.` and
 * refuses it. A last component '.' or '..' (`d/.`, `d/../`) is left as it is
 * for checkValidForCreate to refuse (EINVAL, as rmdir(2)).
 */
export function trailingSlashName(path: string): { path: string; dirOnly: boolean } {
  if (!path.endsWith('/')) return { path, dirOnly: false }
  const stripped = path.replace(/\/+$/, '')
  if (stripped === '') return { path, dirOnly: false }
  const last = stripped.slice(stripped.lastIndexOf('/') + 1)
  if (last === '.' || last === '..') return { path, dirOnly: false }
  return { path: stripped, dirOnly: true }
}

export function rootEntry(): DirEntry {
  return { parent: ROOT_INODE, name: '.', id: ROOT_INODE, type: 'Directory', dirAcl: ROOT_ACL, uuid: '' }
}

function fakeDirEntry(parent: InodeId, name: string, id: InodeId, acl: Acl): DirEntry {
  return { parent, name, id, type: 'Directory', dirAcl: acl, uuid: '' }
}

/** What a parent directory is known by during a walk: its id, acl, and the inode when loaded. */
export interface ParentInfo {
  id: InodeId
  acl: Acl
  inode?: Inode
}

export interface ResolveResult {
  parent: ParentInfo
  /** null: the last component does not exist (the parent does) */
  entry: DirEntry | null
  /** the name looked up last (the missing one when entry is null) */
  name: string
}

export interface ResolveLimits {
  maxSymlinkDepth: number
  maxSymlinkCount: number
}

export class PathResolver {
  private depth = 0
  private symlinks = 0
  /** components of the path walked so far (for getRealPath), "/" first when absolute */
  trace: string[] | null = null

  constructor(
    private readonly txn: ReadOnlyTxn,
    private readonly user: UserInfo,
    private readonly limits: ResolveLimits,
  ) {}

  async parentInode(r: ResolveResult): Promise<Inode> {
    if (r.parent.inode) return r.parent.inode
    const inode = await mustLoadInode(this.txn, r.parent.id)
    r.parent.inode = inode
    return inode
  }

  private async loadParent(parent: InodeId | DirEntry): Promise<ParentInfo> {
    if (typeof parent !== 'bigint') {
      if (parent.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `${parent.name} is not a directory`)
      return { id: parent.id, acl: parent.dirAcl ?? ROOT_ACL }
    }
    if (parent === ROOT_INODE) return { id: ROOT_INODE, acl: ROOT_ACL }
    const inode = await loadInode(this.txn, parent)
    if (!inode) throw new StrataError('META_NOT_FOUND', `directory 0x${parent.toString(16)} not found`)
    if (inode.type !== 'Directory') throw new StrataError('META_NOT_DIRECTORY', `inode 0x${parent.toString(16)} is not a directory`)
    return { id: parent, acl: inode.acl, inode }
  }

  private async component(parent: InodeId | DirEntry, name: string, search = true): Promise<ResolveResult> {
    const parentId = typeof parent === 'bigint' ? parent : parent.id
    if (this.trace) {
      if (parentId === ROOT_INODE) this.trace = ['/']
      this.trace.push(name)
    }
    const info = await this.loadParent(parent)
    if (search) checkPermission(info.acl, this.user, EXEC, `directory 0x${parentId.toString(16)}`)
    if (name === '.') return { parent: info, entry: fakeDirEntry(parentId, '.', parentId, info.acl), name }
    if (name === '..') {
      const inode = info.inode ?? (await mustLoadInode(this.txn, parentId))
      info.inode = inode
      const up = inode.directory!.parent
      // 3FS gives the ".." entry the acl of the directory it sits in; we give it
      // the acl of the directory it names, so the next step checks the right one.
      const upAcl = up === parentId ? inode.acl : up === ROOT_INODE ? ROOT_ACL : ((await loadInode(this.txn, up))?.acl ?? inode.acl)
      return { parent: info, entry: fakeDirEntry(parentId, '..', up, upAcl), name }
    }
    return { parent: info, entry: await loadDirEntry(this.txn, parentId, name), name }
  }

  /**
   * Walks components[from..]; returns the last result and the index of the
   * first missing component (components.length when everything exists).
   */
  private async walk(parentId: InodeId, path: string, comps: string[], trailingSlash = false): Promise<{ r: ResolveResult; missing: number }> {
    let parent: InodeId | DirEntry = parentId
    let i = 0
    if (comps.length === 0) throw new StrataError('META_NOT_FOUND', 'empty path')
    if (comps[0] === '/') {
      parent = ROOT_INODE
      i++
      if (this.trace) this.trace = ['/']
      if (i === comps.length) return { r: { parent: { id: ROOT_INODE, acl: ROOT_ACL }, entry: rootEntry(), name: '/' }, missing: i }
    }
    for (;;) {
      const name = comps[i]!
      if (name === '.') {
        i++
        // `d/` is d, which must be a directory: unlike `d/.` it needs no search permission on d (path_resolution(7))
        if (i === comps.length) return { r: await this.component(parent, '.', !trailingSlash), missing: i }
        continue
      }
      const r = await this.component(parent, name)
      if (!r.entry) return { r, missing: i }
      i++
      if (i === comps.length) return { r, missing: i }
      const entry = r.entry.type === 'Symlink' ? (await this.followExisting(r.entry, `${name} in ${path}`)).entry : r.entry
      // named on the whole path, as a missing component is: a bare name is ambiguous in a deep path
      if (entry.type === 'File') throw new StrataError('META_NOT_DIRECTORY', `${name} in ${path} is not a directory`)
      parent = entry
    }
  }

  /** Resolves the path without following a symlink at its end; only its last component may be missing. */
  async resolve(parentId: InodeId, path: string): Promise<ResolveResult> {
    const comps = splitPath(path)
    const { r, missing } = await this.walk(parentId, path, comps, path.length > 1 && path.endsWith('/'))
    if (missing >= comps.length - 1) return r
    throw new StrataError('META_NOT_FOUND', `${comps[missing]} in ${path} not found`)
  }

  /** Like resolve, components missing from the end allowed (mkdirs). */
  async resolveRange(parentId: InodeId, path: string): Promise<{ r: ResolveResult; missing: string[] }> {
    const comps = splitPath(path)
    const { r, missing } = await this.walk(parentId, path, comps)
    return { r, missing: comps.slice(missing) }
  }

  async resolveFollow(parentId: InodeId, path: string, followLast: boolean): Promise<ResolveResult> {
    const r = await this.resolve(parentId, path)
    if (followLast && r.entry && r.entry.type === 'Symlink') return this.followSymlink(r.entry)
    return r
  }

  /**
   * Follows the symlink `entry` that `what` names to an existing entry. A link that
   * dangles is META_NOT_FOUND on the name the caller gave, with the link's target as
   * detail: what failed inside the target (`nowhere in /nowhere/x not found`) names
   * paths the user never typed.
   */
  private async followExisting(entry: DirEntry, what: string): Promise<ResolveResult & { entry: DirEntry }> {
    let r: ResolveResult
    try {
      r = await this.followSymlink(entry)
    } catch (e) {
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND') throw await this.dangling(entry, what, e)
      throw e
    }
    if (!r.entry) throw await this.dangling(entry, what)
    return r as ResolveResult & { entry: DirEntry }
  }

  private async dangling(entry: DirEntry, what: string, cause?: StrataError): Promise<StrataError> {
    const target = (await loadEntryInode(this.txn, entry)).symlink!.target
    return new StrataError('META_NOT_FOUND', `${what} is a dangling symlink (to ${target})`, {
      ...(cause ? { cause } : {}),
      detail: { target, ...(cause ? { reason: cause.reason } : {}) },
    })
  }

  async followSymlink(entry: DirEntry): Promise<ResolveResult> {
    if (++this.depth > this.limits.maxSymlinkDepth) throw new StrataError('META_TOO_MANY_SYMLINKS', `symlinks nested deeper than ${this.limits.maxSymlinkDepth}`)
    try {
      for (;;) {
        if (++this.symlinks > this.limits.maxSymlinkCount) throw new StrataError('META_TOO_MANY_SYMLINKS', `more than ${this.limits.maxSymlinkCount} symlinks`)
        const link = await loadEntryInode(this.txn, entry)
        const target = link.symlink!.target
        if (this.trace) this.trace.pop()
        const r = await this.resolve(entry.parent, target)
        if (!r.entry || r.entry.type !== 'Symlink') return r
        entry = r.entry
      }
    } finally {
      this.depth--
    }
  }

  /** The entry a path names (following a final symlink when asked); NOT_FOUND when missing. */
  async dirEntry(p: PathAt, followLast: boolean): Promise<DirEntry> {
    if (p.path === undefined || p.path === null) throw new StrataError('META_INVALID_ARGUMENT', 'path not set')
    const r = await this.resolve(p.parent, p.path)
    if (!r.entry) throw new StrataError('META_NOT_FOUND', `${p.path} not found`)
    if (followLast && r.entry.type === 'Symlink') return (await this.followExisting(r.entry, p.path)).entry
    return r.entry
  }

  /** The inode of a PathAt: the parent itself when no path is given. */
  async inode(p: PathAt, followLast: boolean, checkRefCnt: boolean): Promise<Inode> {
    let inode: Inode
    if (p.path === undefined || p.path === null) {
      inode = await mustLoadInode(this.txn, p.parent)
    } else {
      const entry = await this.dirEntry(p, followLast)
      inode = await loadEntryInode(this.txn, entry)
    }
    if (checkRefCnt && inode.nlink === 0) throw new StrataError('META_NOT_FOUND', `inode 0x${inode.id.toString(16)} was removed`)
    return inode
  }
}
