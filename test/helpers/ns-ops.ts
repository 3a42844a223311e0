// Random namespace operations for the differential test of fs/meta: a seeded
// generator over a tiny name space (names a, b, c; depth ≤ 3), so that
// collisions, missing parents, type mismatches and renames into one's own
// subtree come up all the time; and the same operation applied to a Strata
// FileSystem or to a local directory with node:fs, each answering a
// comparable Outcome (errno name, or the normalized result).

import fs from 'node:fs'
import path from 'node:path'
import type { FileSystem } from '../../fs/client/index.js'
import { ERRORS, isErrorCode } from '../../fs/common/errors.js'
import type { Inode } from '../../fs/meta/protocol.js'
import { rng } from './random.js'

export type Op =
  | { op: 'mkdir'; p: string; mode: number }
  | { op: 'create'; p: string; excl: boolean; trunc: boolean }
  | { op: 'write'; p: string; off: number; n: number }
  | { op: 'truncate'; p: string; len: number }
  | { op: 'unlink'; p: string }
  | { op: 'rmdir'; p: string }
  | { op: 'rmr'; p: string }
  | { op: 'rename'; p: string; q: string }
  | { op: 'link'; p: string; q: string }
  | { op: 'symlink'; target: string; p: string }
  | { op: 'readlink'; p: string }
  | { op: 'chmod'; p: string; mode: number }
  | { op: 'chown'; p: string; uid: number; gid: number }
  | { op: 'utimes'; p: string; ms: number }
  | { op: 'stat'; p: string; follow: boolean }
  | { op: 'list'; p: string }

/** What both sides must agree on. */
export interface Attrs {
  type: 'File' | 'Directory' | 'Symlink'
  perm: number
  uid: number
  gid: number
  /** files and symlinks (a directory's nlink is 1 in meta, 2 + subdirectories on Linux: docs/meta.md, deviations) */
  nlink?: number
  size?: number
  target?: string
}

export type Outcome = { ok: true; value?: unknown } | { ok: false; errno: string }

const NAMES = ['a', 'b', 'c']
const MODES = [0o644, 0o755, 0o600, 0o700, 0o4755, 0o1777, 0o2750]

/** A seeded sequence of `n` operations. */
export function generateOps(seed: number, n: number): Op[] {
  const r = rng(seed)
  const pick = <T>(a: readonly T[]): T => a[Math.floor(r() * a.length)]!
  const int = (k: number) => Math.floor(r() * k)
  const rel = (): string => {
    const depth = 1 + int(3)
    const parts = Array.from({ length: depth }, () => pick(NAMES))
    // now and then a `..` in the middle (never above the run's root) or a trailing slash
    if (depth >= 2 && r() < 0.05) parts.splice(1, 0, '..')
    return parts.join('/') + (r() < 0.04 ? '/' : '')
  }
  const ops: Op[] = []
  for (let i = 0; i < n; i++) {
    const k = r()
    const p = rel()
    if (k < 0.14) ops.push({ op: 'mkdir', p, mode: pick([0o755, 0o700, 0o777]) })
    else if (k < 0.28) ops.push({ op: 'create', p, excl: r() < 0.3, trunc: r() < 0.3 })
    else if (k < 0.36) ops.push({ op: 'write', p, off: int(10), n: 1 + int(5) })
    else if (k < 0.41) ops.push({ op: 'truncate', p, len: int(12) })
    else if (k < 0.49) ops.push({ op: 'unlink', p })
    else if (k < 0.54) ops.push({ op: 'rmdir', p })
    else if (k < 0.56) ops.push({ op: 'rmr', p: p.replace(/\/+$/, '') })
    else if (k < 0.7) ops.push({ op: 'rename', p, q: rel() })
    else if (k < 0.75) ops.push({ op: 'link', p, q: rel() })
    else if (k < 0.8) {
      const depth = 1 + int(2)
      ops.push({ op: 'symlink', target: Array.from({ length: depth }, () => pick(NAMES)).join('/'), p })
    } else if (k < 0.82) ops.push({ op: 'readlink', p })
    else if (k < 0.85) ops.push({ op: 'chmod', p, mode: pick(MODES) })
    else if (k < 0.87) ops.push({ op: 'chown', p, uid: pick([0, 1000, 65534]), gid: pick([0, 100, 65534]) })
    else if (k < 0.89) ops.push({ op: 'utimes', p, ms: 1_600_000_000_000 + int(1_000_000) })
    else if (k < 0.96) ops.push({ op: 'stat', p, follow: r() < 0.5 })
    else ops.push({ op: 'list', p })
  }
  return ops
}

const payload = (op: { off: number; n: number }) => Buffer.from('0123456789abcdef'.slice(op.off % 8, (op.off % 8) + op.n))

function typeOf(st: fs.Stats): Attrs['type'] {
  return st.isDirectory() ? 'Directory' : st.isSymbolicLink() ? 'Symlink' : 'File'
}

export function localAttrs(abs: string, follow: boolean): Attrs {
  const st = follow ? fs.statSync(abs) : fs.lstatSync(abs)
  const type = typeOf(st)
  const a: Attrs = { type, perm: st.mode & 0o7777, uid: st.uid, gid: st.gid }
  if (type !== 'Directory') a.nlink = st.nlink
  if (type === 'File') a.size = st.size
  if (type === 'Symlink') a.target = fs.readlinkSync(abs)
  return a
}

export function strataAttrs(inode: Inode): Attrs {
  const a: Attrs = { type: inode.type, perm: inode.acl.perm & 0o7777, uid: inode.acl.uid, gid: inode.acl.gid }
  if (inode.type !== 'Directory') a.nlink = inode.nlink
  if (inode.type === 'File') a.size = inode.file!.length
  if (inode.type === 'Symlink') a.target = inode.symlink!.target
  return a
}

/** Both sides' errors as errno names: Strata codes through the catalogue, as the FUSE boundary maps them (fs/fuse/errno.ts). */
export function errnoOf(e: unknown): string {
  const code = (e as { code?: unknown } | null)?.code
  if (typeof code === 'string' && isErrorCode(code)) return ERRORS[code].errno
  if (typeof code === 'string' && /^E[A-Z0-9]+$/.test(code)) return code
  throw e
}

async function outcome(fn: () => Promise<unknown> | unknown): Promise<Outcome> {
  try {
    const value = await fn()
    return value === undefined ? { ok: true } : { ok: true, value }
  } catch (e) {
    return { ok: false, errno: errnoOf(e) }
  }
}

/** Applies `op` under the local directory `root`. */
export function applyLocal(root: string, op: Op): Promise<Outcome> {
  // not path.join: that would fold `x/..` lexically, where the kernel walks x (a file there is ENOTDIR)
  const at = (p: string) => `${root}/${p}`
  return outcome(() => {
    switch (op.op) {
      case 'mkdir':
        fs.mkdirSync(at(op.p), { mode: op.mode })
        // mkdir(2) applies the umask, meta's mkdirs takes the mode as given (over FUSE the kernel applies
        // the umask): undo it, keeping the set-group-id bit a set-group-id parent passed on
        fs.chmodSync(at(op.p), op.mode | (fs.lstatSync(at(op.p)).mode & 0o2000))
        return
      case 'create': {
        const C = fs.constants
        const fd = fs.openSync(at(op.p), C.O_CREAT | C.O_RDWR | (op.excl ? C.O_EXCL : 0) | (op.trunc ? C.O_TRUNC : 0), 0o644)
        fs.closeSync(fd)
        return
      }
      case 'write': {
        const fd = fs.openSync(at(op.p), 'r+')
        try {
          fs.writeSync(fd, payload(op), 0, op.n, op.off)
        } finally {
          fs.closeSync(fd)
        }
        return
      }
      case 'truncate':
        return fs.truncateSync(at(op.p), op.len)
      case 'unlink':
        return fs.unlinkSync(at(op.p))
      case 'rmdir':
        return fs.rmdirSync(at(op.p))
      case 'rmr':
        return fs.rmSync(at(op.p), { recursive: true })
      case 'rename':
        return fs.renameSync(at(op.p), at(op.q))
      case 'link':
        return fs.linkSync(at(op.p), at(op.q))
      case 'symlink':
        return fs.symlinkSync(op.target, at(op.p))
      case 'readlink':
        return fs.readlinkSync(at(op.p))
      case 'chmod':
        return fs.chmodSync(at(op.p), op.mode)
      case 'chown':
        return fs.chownSync(at(op.p), op.uid, op.gid)
      case 'utimes':
        return fs.utimesSync(at(op.p), new Date(op.ms), new Date(op.ms))
      case 'stat':
        return localAttrs(at(op.p), op.follow)
      case 'list':
        return fs
          .readdirSync(at(op.p))
          .sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)))
    }
  })
}

/** Applies `op` under the Strata directory `root` (absolute, no trailing slash). */
export function applyStrata(f: FileSystem, root: string, op: Op): Promise<Outcome> {
  const at = (p: string) => `${root}/${p}`
  return outcome(async () => {
    switch (op.op) {
      case 'mkdir':
        await f.mkdir(at(op.p), { mode: op.mode })
        return
      case 'create': {
        const fh = await f.create(at(op.p), { excl: op.excl, trunc: op.trunc })
        await f.close(fh)
        return
      }
      case 'write': {
        const fh = await f.open(at(op.p), 'r+')
        try {
          await f.write(fh, payload(op), op.off)
        } finally {
          await f.close(fh)
        }
        return
      }
      case 'truncate':
        await f.truncate(at(op.p), op.len)
        return
      case 'unlink':
        return f.unlink(at(op.p))
      case 'rmdir':
        return f.rmdir(at(op.p))
      case 'rmr':
        return f.rm(at(op.p), { recursive: true })
      case 'rename':
        await f.rename(at(op.p), at(op.q))
        return
      case 'link':
        await f.link(at(op.p), at(op.q))
        return
      case 'symlink':
        await f.symlink(op.target, at(op.p))
        return
      case 'readlink':
        return f.readlink(at(op.p))
      case 'chmod':
        await f.chmod(at(op.p), op.mode)
        return
      case 'chown':
        await f.chown(at(op.p), op.uid, op.gid)
        return
      case 'utimes':
        await f.utimes(at(op.p), op.ms, op.ms)
        return
      case 'stat':
        return strataAttrs(op.follow ? await f.stat(at(op.p)) : await f.lstat(at(op.p)))
      case 'list':
        return (await f.readdirAll(at(op.p))).entries.map((e) => e.name)
    }
  })
}

/** Every path under a local root with its attributes (lstat), sorted. */
export function localTree(root: string): Array<[string, Attrs]> {
  const out: Array<[string, Attrs]> = []
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(root, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name
      const a = localAttrs(path.join(root, r), false)
      out.push([r, a])
      if (a.type === 'Directory') walk(r)
    }
  }
  walk('')
  return out
}

/** The same over Strata. */
export async function strataTree(f: FileSystem, root: string): Promise<Array<[string, Attrs]>> {
  const out: Array<[string, Attrs]> = []
  const walk = async (rel: string) => {
    const names = (await f.readdirAll(rel ? `${root}/${rel}` : root)).entries.map((e) => e.name).sort()
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name
      const a = strataAttrs(await f.lstat(`${root}/${r}`))
      out.push([r, a])
      if (a.type === 'Directory') await walk(r)
    }
  }
  await walk('')
  return out
}
