// Value encoding of the metadata KV: msgpack (msgpackr, no shared records so
// every value decodes on its own; 64-bit ids stay bigint).

import { Packr } from 'msgpackr'
import { StrataError } from '../common/errors.js'
import type { DirEntry, FileSessionRecord, Inode, InodeId } from './protocol.js'

const packr = new Packr({ useRecords: false, mapsAsObjects: true })

export function encodeValue(v: unknown): Buffer {
  return packr.pack(v)
}

export function decodeValue<T>(b: Buffer, what: string): T {
  try {
    return packr.unpack(b) as T
  } catch (e) {
    throw new StrataError('INTERNAL', `corrupted ${what} value: ${(e as Error).message}`, { cause: e })
  }
}

export function encodeInode(inode: Inode): Buffer {
  const { id: _id, ...data } = inode
  return encodeValue(data)
}

export function decodeInode(id: InodeId, b: Buffer): Inode {
  const data = decodeValue<Omit<Inode, 'id'>>(b, `inode ${id}`)
  const inode = { id, ...data } as Inode
  if (inode.directory) inode.directory.parent = BigInt(inode.directory.parent)
  return inode
}

export function encodeDirEntry(e: DirEntry): Buffer {
  const { parent: _p, name: _n, ...data } = e
  return encodeValue(data)
}

export function decodeDirEntry(parent: InodeId, name: string, b: Buffer): DirEntry {
  const data = decodeValue<Omit<DirEntry, 'parent' | 'name'>>(b, `dentry ${parent}/${name}`)
  const e = { parent, name, ...data } as DirEntry
  e.id = BigInt(e.id)
  return e
}

export function encodeSession(s: FileSessionRecord): Buffer {
  return encodeValue(s)
}

export function decodeSession(b: Buffer): FileSessionRecord {
  const s = decodeValue<FileSessionRecord>(b, 'file session')
  s.inode = BigInt(s.inode)
  return s
}
