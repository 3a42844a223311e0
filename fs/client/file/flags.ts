// Open flags and paths as programs give them (Node's 'r+'/'wx' strings, O_*
// numbers, or the protocol's OpenFlags), turned into the meta protocol's
// shapes. Paths are absolute strings resolved by the meta server; the client
// only tidies them (no '..' folding: that is the server's job, symlinks make
// lexical folding wrong).

import { constants as fsc } from 'node:fs'
import { StrataError } from '../../common/errors.js'
import { ROOT_INODE, type OpenFlags, type PathAt } from '../../meta/protocol.js'

export type OpenFlagsInput = string | number | OpenFlags

const STRING_FLAGS: Record<string, OpenFlags> = {
  r: { access: 'r' },
  rs: { access: 'r' },
  sr: { access: 'r' },
  'r+': { access: 'rw' },
  'rs+': { access: 'rw' },
  'sr+': { access: 'rw' },
  w: { access: 'w', create: true, trunc: true },
  wx: { access: 'w', create: true, trunc: true, excl: true },
  xw: { access: 'w', create: true, trunc: true, excl: true },
  'w+': { access: 'rw', create: true, trunc: true },
  'wx+': { access: 'rw', create: true, trunc: true, excl: true },
  'xw+': { access: 'rw', create: true, trunc: true, excl: true },
  a: { access: 'w', create: true, append: true },
  as: { access: 'w', create: true, append: true },
  sa: { access: 'w', create: true, append: true },
  ax: { access: 'w', create: true, append: true, excl: true },
  xa: { access: 'w', create: true, append: true, excl: true },
  'a+': { access: 'rw', create: true, append: true },
  'as+': { access: 'rw', create: true, append: true },
  'sa+': { access: 'rw', create: true, append: true },
  'ax+': { access: 'rw', create: true, append: true, excl: true },
  'xa+': { access: 'rw', create: true, append: true, excl: true },
}

/** Node-style string, POSIX O_* number or OpenFlags → OpenFlags (a fresh object). */
export function parseOpenFlags(f: OpenFlagsInput = 'r'): OpenFlags {
  if (typeof f === 'string') {
    const hit = STRING_FLAGS[f]
    if (!hit) throw new StrataError('INVALID_ARGUMENT', `unknown open flags "${f}"`)
    return { ...hit }
  }
  if (typeof f === 'number') {
    if (!Number.isInteger(f) || f < 0) throw new StrataError('INVALID_ARGUMENT', `bad open flags ${f}`)
    const acc = f & 3
    const access = acc === fsc.O_RDONLY ? 'r' : acc === fsc.O_WRONLY ? 'w' : acc === fsc.O_RDWR ? 'rw' : undefined
    if (!access) throw new StrataError('INVALID_ARGUMENT', `bad access mode in open flags ${f}`)
    const out: OpenFlags = { access }
    if (f & fsc.O_CREAT) out.create = true
    if (f & fsc.O_EXCL) out.excl = true
    if (f & fsc.O_TRUNC) out.trunc = true
    if (f & fsc.O_APPEND) out.append = true
    if (f & fsc.O_DIRECTORY) out.directory = true
    return out
  }
  if (f && typeof f === 'object' && (f.access === 'r' || f.access === 'w' || f.access === 'rw')) {
    const out: OpenFlags = { access: f.access }
    if (f.create) out.create = true
    if (f.excl) out.excl = true
    if (f.trunc) out.trunc = true
    if (f.append) out.append = true
    if (f.directory) out.directory = true
    return out
  }
  throw new StrataError('INVALID_ARGUMENT', `bad open flags ${String(f)}`)
}

export function isWriteAccess(f: OpenFlags): boolean {
  return f.access === 'w' || f.access === 'rw'
}

export function isReadAccess(f: OpenFlags): boolean {
  return f.access === 'r' || f.access === 'rw'
}

/** POSIX-ish number for display and for USRBIO's access checks. */
export function openFlagsToNumber(f: OpenFlags): number {
  let n = f.access === 'r' ? fsc.O_RDONLY : f.access === 'w' ? fsc.O_WRONLY : fsc.O_RDWR
  if (f.create) n |= fsc.O_CREAT
  if (f.excl) n |= fsc.O_EXCL
  if (f.trunc) n |= fsc.O_TRUNC
  if (f.append) n |= fsc.O_APPEND
  if (f.directory) n |= fsc.O_DIRECTORY
  return n
}

// --- paths

/**
 * Absolute, tidied path: relative paths are taken from `cwd`, repeated
 * slashes and inner '.' components are dropped. '..' is left for the server,
 * which resolves it against the real tree. What ends the path is kept,
 * because it means something (rmdir(2), path_resolution(7)): a trailing slash
 * says "this must be a directory" (`file/` is ENOTDIR), and a last component
 * '.' or '..' cannot be removed or renamed (EINVAL) — folding `d/.` into `d`
 * would let `rm -r d/.` remove d. The root is always "/".
 */
export function normalizePath(p: string, cwd = '/'): string {
  if (typeof p !== 'string' || p === '') throw new StrataError('META_INVALID_ARGUMENT', 'path must be a non-empty string')
  if (p.includes('\0')) throw new StrataError('META_INVALID_ARGUMENT', 'path contains a NUL byte')
  const full = p.startsWith('/') ? p : `${cwd.endsWith('/') ? cwd : cwd + '/'}${p}`
  const raw = full.split('/').filter((c) => c !== '')
  const parts = raw.filter((c) => c !== '.')
  if (parts.length === 0) return '/'
  const last = raw[raw.length - 1]
  if (last === '.') return '/' + parts.join('/') + '/.'
  if (last !== '..' && full.endsWith('/')) return '/' + parts.join('/') + '/'
  return '/' + parts.join('/')
}

/** normalizePath without what ends it: `/a/b/`, `/a/b/.` → `/a/b` (names for display, base and dir names). */
export function plainPath(p: string, cwd = '/'): string {
  const n = normalizePath(p, cwd)
  const s = n.endsWith('/.') ? n.slice(0, -2) : n.endsWith('/') ? n.slice(0, -1) : n
  return s === '' ? '/' : s
}

/**
 * A path a regular file is to be created at. One whose end names a directory
 * (a trailing slash, a last component '.' or '..', the root) is
 * META_IS_DIRECTORY (EISDIR), as open(2) with O_CREAT answers for `d/x/`
 * whether or not x exists; the message names the path as given (meta alone
 * would see `d/x/.` and complain about a file name '.').
 */
export function checkFileCreatePath(p: string, cwd = '/'): void {
  const n = normalizePath(p, cwd)
  if (n === '/' || n.endsWith('/') || n.endsWith('/.') || n.endsWith('/..')) {
    throw new StrataError('META_IS_DIRECTORY', `${p}: cannot create a file there: a path ending in ${n === '/' ? '/' : n.endsWith('/') ? "'/'" : `'${n.slice(n.lastIndexOf('/') + 1)}'`} names a directory`)
  }
}

/** PathAt for an absolute path; the root itself is the root inode with no path. */
export function pathAt(p: string, cwd = '/'): PathAt {
  const n = normalizePath(p, cwd)
  return n === '/' ? { parent: ROOT_INODE } : { parent: ROOT_INODE, path: n }
}

/** PathAt naming an inode directly (stat/setAttr of an open file). */
export function inodeAt(inode: bigint): PathAt {
  return { parent: inode }
}

export function baseName(p: string): string {
  const n = plainPath(p)
  return n === '/' ? '/' : n.slice(n.lastIndexOf('/') + 1)
}

export function dirName(p: string): string {
  const n = plainPath(p)
  const i = n.lastIndexOf('/')
  return i <= 0 ? '/' : n.slice(0, i)
}

export function joinPath(dir: string, name: string): string {
  return normalizePath(`${plainPath(dir)}/${name}`)
}
