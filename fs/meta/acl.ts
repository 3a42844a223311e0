// Permission model of the metadata service: classic owner/group/other bits
// with uid 0 bypassing them, as 3FS's Acl::checkPermission.
//
// Errno choice (a deliberate deviation from 3FS, which maps every meta
// permission failure to EPERM): an rwx denial is POSIX EACCES
// (META_NO_PERMISSION), what the kernel itself reports with
// `default_permissions`; a denial because the caller is not the owner (chmod,
// chown, utimes with explicit times, sticky directories, recursive remove of
// another user's tree) or because of FS_IMMUTABLE_FL, or an attempt on a tree
// root, is EPERM (META_NOT_PERMITTED), as Linux reports for those cases.

import { StrataError } from '../common/errors.js'
import type { Acl, SetAttrReq, UserInfo } from './protocol.js'

export const S_ISUID = 0o4000
export const S_ISGID = 0o2000
export const S_ISVTX = 0o1000
export const ALLPERMS = 0o7777

/** access bits as in 3FS AccessType (also the rwx bits of "other") */
export const EXEC = 1
export const WRITE = 2
export const READ = 4

/** Linux ioctl_iflags values */
export const FS_SECRM_FL = 0x00000001
export const FS_IMMUTABLE_FL = 0x00000010
export const FS_INDEX_FL = 0x00001000
export const FS_HUGE_FILE_FL = 0x00040000
/** 'I': the directory keeps its own chain allocation counter (3FS reuses FS_INDEX_FL) */
export const FS_CHAIN_ALLOCATION_FL = FS_INDEX_FL
/** 's': files below use the new chunk engine (3FS reuses FS_SECRM_FL); stored, otherwise ignored */
export const FS_NEW_CHUNK_ENGINE = FS_SECRM_FL
export const FS_FL_SUPPORTED = FS_IMMUTABLE_FL | FS_CHAIN_ALLOCATION_FL | FS_NEW_CHUNK_ENGINE | FS_HUGE_FILE_FL
export const FS_FL_INHERITABLE = FS_CHAIN_ALLOCATION_FL | FS_NEW_CHUNK_ENGINE

export const ROOT_ACL: Acl = Object.freeze({ uid: 0, gid: 0, perm: 0o755, iflags: FS_IMMUTABLE_FL })
export const GC_ROOT_ACL: Acl = Object.freeze({ uid: 0, gid: 0, perm: 0o700, iflags: FS_IMMUTABLE_FL })

export function isRoot(user: UserInfo): boolean {
  return user.uid === 0
}

export function inGroup(user: UserInfo, gid: number): boolean {
  return user.gid === gid || (Array.isArray(user.groups) && user.groups.includes(gid))
}

export function hasPermission(acl: Acl, user: UserInfo, access: number): boolean {
  let needed: number
  if (user.uid === 0) needed = 0
  else if (user.uid === acl.uid) needed = access << 6
  else if (inGroup(user, acl.gid)) needed = access << 3
  else needed = access
  return (acl.perm & needed) === needed
}

function accessName(access: number): string {
  return `${access & READ ? 'r' : '-'}${access & WRITE ? 'w' : '-'}${access & EXEC ? 'x' : '-'}`
}

/** Throws META_NO_PERMISSION (EACCES) unless `user` has `access` on `acl`. */
export function checkPermission(acl: Acl, user: UserInfo, access: number, what = 'object'): void {
  if (!hasPermission(acl, user, access)) {
    throw new StrataError(
      'META_NO_PERMISSION',
      `uid ${user.uid} has no ${accessName(access)} permission on ${what} (uid ${acl.uid}, gid ${acl.gid}, mode ${acl.perm.toString(8).padStart(4, '0')})`,
    )
  }
}

export function notPermitted(msg: string): StrataError {
  return new StrataError('META_NOT_PERMITTED', msg)
}

/**
 * 3FS Acl::checkRecursiveRmPerm: not immutable; the owner (or anyone for a
 * non-sticky directory when `owner` is false) and rwx on the directory.
 */
export function checkRecursiveRmPerm(acl: Acl, user: UserInfo, owner: boolean, what = 'directory'): void {
  if (acl.iflags & FS_IMMUTABLE_FL) throw notPermitted(`${what} is immutable`)
  if (!isRoot(user) && (owner || acl.perm & S_ISVTX) && user.uid !== acl.uid) throw notPermitted(`uid ${user.uid} does not own ${what}`)
  checkPermission(acl, user, READ | WRITE | EXEC, what)
}

/**
 * chmod, chown and utimes (explicit or "now") of an immutable inode are EPERM,
 * for root too, as Linux's may_setattr; truncate is refused where it starts,
 * at the write open. 3FS's setAttr does not look at the flag, so there root
 * or the owner could change an immutable file's mode, owner and times. The
 * flag itself stays changeable (by root) in the same request: one that clears
 * it is taken as `chattr -i` first, one that sets it as `chattr +i` last.
 * A directory's layout is not refused: it is the policy for new files below
 * (the tree roots, immutable from the start, carry the default one; their
 * caller skips this check).
 */
export function checkImmutableSetAttr(acl: Acl, req: Pick<SetAttrReq, 'iflags' | 'perm' | 'uid' | 'gid' | 'atime' | 'mtime'>, what: string): void {
  if (!(acl.iflags & FS_IMMUTABLE_FL) || (req.iflags != null && !(req.iflags & FS_IMMUTABLE_FL))) return
  const changes = [req.perm != null && 'mode', req.uid != null && 'owner', req.gid != null && 'group', (req.atime != null || req.mtime != null) && 'times'].filter(Boolean)
  if (changes.length) throw notPermitted(`${what} is immutable: its ${changes.join(', ')} cannot change`)
}

export function aclEquals(a: Acl, b: Acl): boolean {
  return a.uid === b.uid && a.gid === b.gid && a.perm === b.perm && a.iflags === b.iflags
}

/**
 * The mode a chmod by `user` stores for an inode of group `gid`: without
 * membership in that group a non-root caller's S_ISGID is dropped silently,
 * as Linux does (setattr_prepare; POSIX chmod). Otherwise anyone who could
 * get a file of another group (below a set-group-id directory, or given to
 * them by root) could make it run with that group's rights.
 */
export function chmodPerm(perm: number, user: UserInfo, gid: number): number {
  return perm & S_ISGID && !isRoot(user) && !inGroup(user, gid) ? perm & ~S_ISGID : perm
}

/**
 * The mode a new file created by `user` below `parent` keeps: below a
 * set-group-id directory of a group the caller is not in, S_ISGID on a
 * group-executable file is dropped (Linux mode_strip_sgid), for the same
 * reason as in chmodPerm.
 */
export function createPerm(perm: number, user: UserInfo, parent: Acl): number {
  if ((perm & (S_ISGID | 0o010)) !== (S_ISGID | 0o010) || !(parent.perm & S_ISGID)) return perm
  return isRoot(user) || inGroup(user, parent.gid) ? perm : perm & ~S_ISGID
}
