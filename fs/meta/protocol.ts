// Message shapes of the metadata service (3FS MetaSerde, service 4). Field
// names follow 3FS src/fbs/meta/Service.h and Schema.h. Inode ids are bigint
// (msgpack int64); times are microseconds since the epoch (3FS UtcTime).

import type { Layout } from '../common/layout.js'

export type InodeId = bigint

/** 3FS special inode ids (src/fbs/meta/Common.h) */
export const ROOT_INODE: InodeId = 0n
export const GC_ROOT_INODE: InodeId = 1n

export type InodeType = 'File' | 'Directory' | 'Symlink'

export interface Acl {
  uid: number
  gid: number
  /** mode bits incl. suid/sgid/sticky (no file type bits) */
  perm: number
  /** FS_IMMUTABLE_FL etc. */
  iflags: number
}

export interface VersionedLength {
  length: number
  truncateVer: number
}

export interface FileData {
  length: number
  truncateVer: number
  layout: Layout
  /** bit0: has hole */
  flags: number
  /** 0: dynamic striping off */
  dynStripe: number
}

export interface DirectoryLock {
  client: string
  /** µs */
  since: number
}

export interface DirectoryData {
  parent: InodeId
  /** default layout for children; may be the Empty variant */
  layout: Layout
  name: string
  chainAllocCounter: number
  lock: DirectoryLock | null
}

export interface SymlinkData {
  target: string
}

export interface Inode {
  id: InodeId
  type: InodeType
  acl: Acl
  nlink: number
  atime: number
  ctime: number
  mtime: number
  file?: FileData
  directory?: DirectoryData
  symlink?: SymlinkData
}

export interface DirEntry {
  parent: InodeId
  name: string
  id: InodeId
  type: InodeType
  /** copy of a child directory's acl (present iff type is Directory) */
  dirAcl?: Acl
  /** request id of the operation that created the entry (replay detection) */
  uuid: string
  /** only inside GC directories */
  gcInfo?: { user: number; origPath: string }
  /**
   * only inside GC directories: when the last link went (µs). The entry's name
   * carries when it is due, which moves on every retry of a busy entry.
   */
  removedAt?: number
}

export interface UserInfo {
  uid: number
  gid: number
  /** supplementary groups */
  groups: number[]
}

/** Every request carries who asks, from which client, and a request id for idempotency. */
export interface ReqBase {
  user: UserInfo
  client: { uuid: string; hostname: string }
  /** request uuid; a replay with the same id is answered, not applied twice */
  uuid: string
}

/** A path relative to a directory inode; absolute paths are relative to root. */
export interface PathAt {
  parent: InodeId
  path?: string
}

export interface AtFlags {
  /** follow a symlink in the last component (AT_SYMLINK_FOLLOW) */
  followLastSymlink?: boolean
  /** AT_REMOVEDIR */
  removeDir?: boolean
}

export interface OpenFlags {
  /** O_ACCMODE as 'r' | 'w' | 'rw' */
  access: 'r' | 'w' | 'rw'
  create?: boolean
  excl?: boolean
  trunc?: boolean
  append?: boolean
  directory?: boolean
}

export interface SessionInfo {
  /** one per write-mode open */
  session: string
}

export interface StatReq extends ReqBase {
  path: PathAt
  flags?: AtFlags
}
export interface StatRsp {
  stat: Inode
}

export interface BatchStatReq extends ReqBase {
  inodeIds: InodeId[]
}
export interface BatchStatRsp {
  inodes: Array<Inode | null>
}

export interface CreateReq extends ReqBase {
  path: PathAt
  session?: SessionInfo
  flags: OpenFlags
  perm: number
  layout?: Layout
}
export interface CreateRsp {
  stat: Inode
  needTruncate: boolean
}

export interface MkdirsReq extends ReqBase {
  path: PathAt
  perm: number
  recursive: boolean
  layout?: Layout
}
export interface MkdirsRsp {
  stat: Inode
}

export interface SymlinkReq extends ReqBase {
  path: PathAt
  target: string
}
export interface SymlinkRsp {
  stat: Inode
}

export interface HardLinkReq extends ReqBase {
  oldPath: PathAt
  newPath: PathAt
  flags?: AtFlags
}
export interface HardLinkRsp {
  stat: Inode
}

export interface RemoveReq extends ReqBase {
  path: PathAt
  atFlags?: AtFlags
  recursive: boolean
  /** refuse a directory unless removeDir, a non-directory if removeDir (unlink vs rmdir) */
  checkType?: boolean
  /** only remove if the entry still points at this inode */
  inodeId?: InodeId
}

export interface OpenReq extends ReqBase {
  path: PathAt
  session?: SessionInfo
  flags: OpenFlags
}
export interface OpenRsp {
  stat: Inode
  needTruncate: boolean
}

export interface SyncReq extends ReqBase {
  inode: InodeId
  /** query storage for the exact length (fsync) */
  updateLength: boolean
  atime?: number
  mtime?: number
  /** the client truncated the file (chunks already removed/cut) */
  truncated?: boolean
  lengthHint?: VersionedLength
}
export interface SyncRsp {
  stat: Inode
}

export interface CloseReq extends ReqBase {
  inode: InodeId
  session?: SessionInfo
  updateLength: boolean
  atime?: number
  mtime?: number
  lengthHint?: VersionedLength
}
export interface CloseRsp {
  stat: Inode
}

export interface RenameReq extends ReqBase {
  src: PathAt
  dest: PathAt
  moveToTrash?: boolean
  inodeId?: InodeId
}
export interface RenameRsp {
  stat: Inode | null
}

export interface ListReq extends ReqBase {
  path: PathAt
  /** exclusive cursor: the last name of the previous page */
  prev: string
  /** -1 or 0: server default (128) */
  limit: number
  /** also return the inodes */
  status: boolean
}
export interface ListRsp {
  entries: DirEntry[]
  inodes: Inode[]
  more: boolean
}

export interface GetRealPathReq extends ReqBase {
  path: PathAt
  absolute: boolean
}
export interface GetRealPathRsp {
  path: string
}

export interface SetAttrReq extends ReqBase {
  path: PathAt
  flags?: AtFlags
  uid?: number
  gid?: number
  perm?: number
  /** µs; -1 means "now" (SETATTR_TIME_NOW) */
  atime?: number
  mtime?: number
  layout?: Layout
  iflags?: number
  dynStripe?: number
}
export interface SetAttrRsp {
  stat: Inode
}

export interface PruneSessionReq extends ReqBase {
  /** the dead client whose sessions go */
  clientId: string
  /** specific sessions; empty: all of the client's */
  sessions: string[]
}

export type LockAction = 'try_lock' | 'preempt_lock' | 'unlock' | 'clear'
export interface LockDirectoryReq extends ReqBase {
  inode: InodeId
  action: LockAction
}
export interface LockDirectoryRsp {
  stat: Inode
}

export interface StatFsRsp {
  capacity: number
  used: number
  free: number
}

export interface FileSessionRecord {
  inode: InodeId
  clientId: string
  session: string
  /** µs */
  timestamp: number
}

/** ours: admin gc-list */
export interface GcListRsp {
  /** removedAt: µs, when the last link went (0: unknown) */
  entries: Array<{ gcDir: string; name: string; inode: InodeId; type: InodeType; origPath: string; user: number; removedAt: number }>
  /** more entries follow the last one (list again with prev = its `<gcDir>/<name>`) */
  more: boolean
}

// --- additions (fs/meta implementation)

export interface BatchStatByPathReq extends ReqBase {
  paths: PathAt[]
  flags?: AtFlags
}
export interface BatchStatByPathRsp {
  /** one per path, in order; null where the path does not resolve */
  inodes: Array<Inode | null>
  /** one per path, in order, with the error of a path that does not resolve */
  results: Array<{ ok: true; stat: Inode } | { ok: false; error: { code: string; message: string } }>
}

export interface RemoveRsp {
  ok: true
}

/**
 * ours: withdraw a mutation whose answer never came (the client gave up on it:
 * timeout, connection lost after sending). Keyed like the request's
 * idempotency record, so only the client that sent it can withdraw it.
 */
export interface AbandonReq extends ReqBase {
  /** uuid of the request given up on */
  request: string
}
export interface AbandonRsp {
  /** the request had been applied (its result was recorded); false: it never will be */
  applied: boolean
  /** write sessions the applied request had opened that this closed (0 or 1) */
  closed: number
}

export interface PruneSessionRsp {
  /** sessions removed (each closed with a storage-queried length unless syncOnPruneSession is off) */
  pruned: number
}

/** ours: admin gc-list */
export interface GcListReq {
  /** at most this many entries (0: all) */
  limit?: number
  /** exclusive cursor: `<gcDir>/<name>` of the last entry of the previous page */
  prev?: string
}

/** ours: admin list of write sessions */
export interface ListSessionsReq {
  /** only the sessions of this inode */
  inode?: InodeId
  /** only the sessions of this client */
  clientId?: string
  /** at most this many (0: all) */
  limit?: number
}
export interface ListSessionsRsp {
  sessions: FileSessionRecord[]
}

/** ours: admin dump of the raw inode (or directory-entry) table, in KV key order */
export interface DumpInodesReq {
  /** default 1000, at most 10000 */
  limit?: number
  /** inodes: continue after this inode's key */
  prev?: InodeId
  /** continue after this cursor (from the previous page; works for both tables) */
  cursor?: string | null
  /** dump directory entries instead of inodes */
  entries?: boolean
}
export interface DumpInodesRsp {
  inodes: Inode[]
  entries: DirEntry[]
  more: boolean
  /** pass back as `cursor` for the next page; null when there is none */
  cursor: string | null
}

/** ours: admin dump-session — the write sessions in KV key order (inode, then session), paged */
export interface DumpSessionsReq {
  /** only the sessions of this inode (a range scan of its INOS prefix) */
  inode?: InodeId
  /** only the sessions of this client */
  clientId?: string
  /** at most this many sessions (default 1000, at most 10000) */
  limit?: number
  /** exclusive cursor: the `next` of the previous page */
  prev?: { inode: InodeId; session: string } | null
}
export interface DumpSessionsRsp {
  sessions: FileSessionRecord[]
  /** more sessions may follow (a page also ends after a bounded number of records scanned) */
  more: boolean
  /** when more: the last record examined; pass as `prev` */
  next: { inode: InodeId; session: string } | null
}
