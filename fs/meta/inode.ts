// Constructors and small helpers for inodes and entries (3FS Inode::newFile,
// newDirectory, newSymlink, DirEntry::newFile…), times in µs.

import { StrataError } from '../common/errors.js'
import { ALLOC_COUNTER_UNSET, type Layout } from '../common/layout.js'
import type { Acl, DirEntry, Inode, InodeId, InodeType } from './protocol.js'

/** SetAttr "now" (3FS SETATTR_TIME_NOW, UtcTime of -1 µs) */
export const SETATTR_TIME_NOW = -1

/** 3FS Layout(): what the GC root and GC directories carry (never used to create files) */
export const NULL_LAYOUT: Layout = { tableId: 0, tableVersion: 0, chunkSize: 0, stripeSize: 0, chains: { type: 'Empty' } }

export function nowUs(): number {
  // µs resolution (Date.now() has ms only), comparable across processes
  return Math.floor((performance.timeOrigin + performance.now()) * 1000)
}

export function castGranularity(us: number, granularityUs: number): number {
  return granularityUs > 1 ? Math.floor(us / granularityUs) * granularityUs : us
}

/**
 * 3FS SetAttr::update for times: "now" resolves to the clock, the value is
 * cut to the granularity, and with `cmp` it may only move forward.
 */
export function updateTime(inode: Inode, field: 'atime' | 'mtime' | 'ctime', nv: number | undefined | null, granularityUs: number, cmp: boolean): boolean {
  if (nv === undefined || nv === null) return false
  if (!Number.isFinite(nv)) throw new StrataError('META_INVALID_ARGUMENT', `${field} must be a number of µs`)
  const v = castGranularity(nv === SETATTR_TIME_NOW ? nowUs() : nv, granularityUs)
  if (v !== inode[field] && (!cmp || v > inode[field])) {
    inode[field] = v
    return true
  }
  return false
}

export function newFile(id: InodeId, acl: Acl, layout: Layout, time: number): Inode {
  return { id, type: 'File', acl, nlink: 1, atime: time, ctime: time, mtime: time, file: { length: 0, truncateVer: 0, layout, flags: 0, dynStripe: 0 } }
}

export function newDirectory(id: InodeId, parent: InodeId, name: string, acl: Acl, layout: Layout, time: number): Inode {
  return {
    id,
    type: 'Directory',
    acl,
    nlink: 1,
    atime: time,
    ctime: time,
    mtime: time,
    directory: { parent, layout, name, chainAllocCounter: ALLOC_COUNTER_UNSET, lock: null },
  }
}

export function newSymlink(id: InodeId, target: string, uid: number, gid: number, time: number): Inode {
  // the permission of a symlink is never checked and never changes
  return { id, type: 'Symlink', acl: { uid, gid, perm: 0o777, iflags: 0 }, nlink: 1, atime: time, ctime: time, mtime: time, symlink: { target } }
}

export function newEntry(parent: InodeId, name: string, id: InodeId, type: InodeType, uuid = '', dirAcl?: Acl): DirEntry {
  const e: DirEntry = { parent, name, id, type, uuid }
  if (type === 'Directory') e.dirAcl = { ...(dirAcl ?? { uid: 0, gid: 0, perm: 0o755, iflags: 0 }) }
  return e
}

export function hexId(id: InodeId): string {
  return `0x${BigInt.asUintN(64, id).toString(16).padStart(16, '0')}`
}
