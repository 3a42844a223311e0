// Key layout of the metadata KV, byte for byte as 3FS lays out FoundationDB
// (src/common/kv/KeyPrefix-def.h and the pack functions of src/meta/store):
//
//   INOD | inode u64 LE                       → inode
//   DENT | parent u64 LE | name bytes         → directory entry (a directory is one contiguous range)
//   INOS | inode u64 LE | session uuid 16 B   → write session of a file (inode 0xffff…ffff: prune requests)
//   IDEM | request uuid 16 B | client uuid 16 B → idempotency record
//   SING-inode-alloc-<shard>                  → inode id allocator shard counters (u64 LE)
//   META / META-<nodeId:08d>                  → distributor server map and per-server liveness
//   DLCK | inode u64 LE                       → Strata only: index of locked directories (hf3fs.lock)
//   DLKS | inode u64 LE                       → Strata only: written when a lock is taken, or a directory moved, below it (empty)
//
// Little-endian inode ids spread adjacent ids over the key space (FDB
// shards); values are msgpack (see codec.ts).

import { createHash } from 'node:crypto'
import { StrataError } from '../common/errors.js'
import type { InodeId } from './protocol.js'

export const PREFIX_INODE = Buffer.from('INOD')
export const PREFIX_DENTRY = Buffer.from('DENT')
export const PREFIX_SESSION = Buffer.from('INOS')
export const PREFIX_IDEM = Buffer.from('IDEM')
export const PREFIX_SINGLE = Buffer.from('SING')
export const PREFIX_META = Buffer.from('META')
/** Strata only: one key per locked directory, so a recursive remove finds the locks below it without a tree walk */
export const PREFIX_DIR_LOCK = Buffer.from('DLCK')
/**
 * Strata only: one key per directory, written (blind, empty value) by every transaction that
 * takes a lock in the directory's subtree or moves a directory into it. A remove of the tree
 * adds it to its read-conflict set, so it conflicts with exactly the lock changes that matter
 * to that tree, not with every lock and unlock anywhere (a read of the whole DLCK range did).
 */
export const PREFIX_LOCK_SCOPE = Buffer.from('DLKS')

export const U64_MAX = (1n << 64n) - 1n
/** inode ids 3FS hands out: below the new-chunk-engine bit… plus the bit itself */
export const INODE_NORMAL_MAX = 0x01ffffffffffffffn
/** the "no inode" id under which prune requests are stored */
export const PRUNE_INODE = U64_MAX

export function inodeLE(id: InodeId): Buffer {
  const b = Buffer.allocUnsafe(8)
  b.writeBigUInt64LE(BigInt.asUintN(64, id))
  return b
}

export function inodeKey(id: InodeId): Buffer {
  return Buffer.concat([PREFIX_INODE, inodeLE(id)])
}

export function dirLockKey(id: InodeId): Buffer {
  return Buffer.concat([PREFIX_DIR_LOCK, inodeLE(id)])
}

export function lockScopeKey(id: InodeId): Buffer {
  return Buffer.concat([PREFIX_LOCK_SCOPE, inodeLE(id)])
}

export function parseInodeKey(key: Buffer): InodeId {
  if (key.length !== 12 || !key.subarray(0, 4).equals(PREFIX_INODE)) throw new StrataError('INTERNAL', `not an inode key: ${key.toString('hex')}`)
  return key.readBigUInt64LE(4)
}

export function dentryPrefix(parent: InodeId): Buffer {
  return Buffer.concat([PREFIX_DENTRY, inodeLE(parent)])
}

export function dentryKey(parent: InodeId, name: string): Buffer {
  return Buffer.concat([PREFIX_DENTRY, inodeLE(parent), Buffer.from(name, 'utf8')])
}

export function parseDentryKey(key: Buffer): { parent: InodeId; name: string } {
  if (key.length < 12 || !key.subarray(0, 4).equals(PREFIX_DENTRY)) throw new StrataError('INTERNAL', `not a dentry key: ${key.toString('hex')}`)
  return { parent: key.readBigUInt64LE(4), name: key.subarray(12).toString('utf8') }
}

/** The smallest key after every key that starts with `prefix` (FDB strinc). */
export function prefixEnd(prefix: Buffer): Buffer {
  const b = Buffer.from(prefix)
  for (let i = b.length - 1; i >= 0; i--) {
    if (b[i]! < 0xff) {
      b[i]!++
      return b.subarray(0, i + 1)
    }
  }
  throw new StrataError('INTERNAL', 'prefix of all 0xff bytes has no end')
}

/** The key right after `key` (key + \x00): turns an inclusive bound exclusive. */
export function keyAfter(key: Buffer): Buffer {
  return Buffer.concat([key, Buffer.from([0])])
}

const UUID_RE = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i

/**
 * 16 key bytes for a uuid: its own bytes when it is a uuid (with or without
 * dashes), otherwise the first 16 bytes of its SHA-256 (clients may use any
 * unique string).
 */
export function uuidBytes(s: string): Buffer {
  if (UUID_RE.test(s)) return Buffer.from(s.replace(/-/g, ''), 'hex')
  return createHash('sha256').update(s, 'utf8').digest().subarray(0, 16)
}

export function isZeroUuid(s: string | undefined | null): boolean {
  return !s || /^[0-]+$/.test(s)
}

export function sessionPrefix(inode: InodeId): Buffer {
  return Buffer.concat([PREFIX_SESSION, inodeLE(inode)])
}

export function sessionKey(inode: InodeId, session: string): Buffer {
  return Buffer.concat([PREFIX_SESSION, inodeLE(inode), uuidBytes(session)])
}

export function idemKey(requestId: string, clientId: string): Buffer {
  return Buffer.concat([PREFIX_IDEM, uuidBytes(requestId), uuidBytes(clientId)])
}

export const INODE_ALLOC_PREFIX = 'SING-inode-alloc'
export const INODE_ALLOC_SHARDS = 32

export function inodeAllocKey(shard: number): Buffer {
  return Buffer.from(`${INODE_ALLOC_PREFIX}-${shard}`)
}

/** Distributor: the active server map */
export const META_MAP_KEY = Buffer.from('META')

export function metaServerKey(nodeId: number): Buffer {
  return Buffer.from(`META-${String(nodeId).padStart(8, '0')}`)
}

export function parseMetaServerKey(key: Buffer): number | undefined {
  const m = /^META-(\d+)$/.exec(key.toString('latin1'))
  return m ? Number(m[1]) : undefined
}
