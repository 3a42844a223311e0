// Low-level file operations for unpacking: attribute setters that never follow
// symlinks, and one place that turns OS errors into catalogue codes.
import fs from 'node:fs'
import { native } from '../../../fs/common/native.js'
import { StrataError } from '../../../fs/common/errors.js'
import type { Timespec } from './types.js'

/** OS error during unpack → catalogue code (the OS error stays as `cause`). */
export function fsError(e: unknown, what: string): StrataError {
  if (e instanceof StrataError) return e
  const code = (e as NodeJS.ErrnoException)?.code
  const msg = `${what}: ${(e as Error)?.message ?? String(e)}`
  switch (code) {
    case 'ENAMETOOLONG':
      return new StrataError('IMAGE_BAD_ARCHIVE', msg, { cause: e })
    case 'ELOOP':
      return new StrataError('IMAGE_UNSAFE_PATH', msg, { cause: e })
    case 'EPERM':
    case 'EACCES':
      return new StrataError('IMAGE_NEEDS_ROOT', msg, { cause: e })
    case 'EEXIST':
      return new StrataError('IMAGE_DUPLICATE_ENTRY', msg, { cause: e })
    case 'ENOSPC':
    case 'EDQUOT':
      return new StrataError('NO_SPACE', msg, { cause: e })
    default:
      return new StrataError('IO_ERROR', msg, { cause: e })
  }
}

export function lstatOrNull(p: string): fs.BigIntStats | null {
  try {
    return fs.lstatSync(p, { bigint: true, throwIfNoEntry: false }) ?? null
  } catch (e) {
    throw fsError(e, 'lstat')
  }
}

/** Runs a metadata syscall, turning its failure into a catalogue error. */
export function sys<T>(what: string, f: () => T): T {
  try {
    return f()
  } catch (e) {
    throw fsError(e, what)
  }
}

/** A device's major and minor numbers from st_rdev (glibc's encoding, as makedev). */
export function devNumbers(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)
  return { major: Number(major), minor: Number(minor) }
}

/**
 * A file's xattrs as a tar of it carries them: overlayfs's own left out, its
 * opaque mark returned as `opaque` (a marker entry in a tar). An xattr removed
 * between the listing and its read is taken as never there; other OS errors
 * are thrown as they are, for the caller to name the path.
 */
export function tarXattrsOf(abs: string): { xattrs: Map<string, Buffer>; opaque: boolean } {
  const n = native()
  const xattrs = new Map<string, Buffer>()
  let opaque = false
  for (const name of n.llistxattr(abs).sort()) {
    let value: Buffer
    try {
      value = n.lgetxattr(abs, name)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENODATA') continue
      throw e
    }
    if (name === 'trusted.overlay.opaque') opaque = value.toString() === 'y'
    else if (!isOverlayXattr(name)) xattrs.set(name, value)
  }
  return { xattrs, opaque }
}

/** Xattrs we never take from a tar nor emit into one: overlayfs's own. */
export function isOverlayXattr(name: string): boolean {
  return name.startsWith('trusted.overlay.') || name.startsWith('user.overlay.')
}

/** Removes every xattr of `abs` (not following a final symlink). */
export function clearXattrs(abs: string): void {
  const n = native()
  for (const name of n.llistxattr(abs)) {
    try {
      n.lremovexattr(abs, name)
    } catch (e) {
      // system.* attributes such as ACLs may be listed but only be removable as a whole.
      if ((e as NodeJS.ErrnoException).code !== 'ENODATA') throw fsError(e, `removing xattr ${name}`)
    }
  }
}

/** Sets xattrs in name order (EROFS keeps inline xattrs in listing order; a fixed order keeps layers reproducible). */
export function setXattrs(abs: string, xattrs: Map<string, Buffer>, rel: string): void {
  const n = native()
  for (const name of [...xattrs.keys()].sort()) {
    if (isOverlayXattr(name)) continue
    try {
      n.lsetxattr(abs, name, xattrs.get(name)!, 0)
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === 'ENOSPC' || code === 'EDQUOT') throw fsError(e, `xattr ${name} on ${JSON.stringify(rel)}`)
      throw new StrataError('IMAGE_BAD_ARCHIVE', `xattr ${name} on ${JSON.stringify(rel)} cannot be set: ${(e as Error).message}`, {
        cause: e,
      })
    }
  }
}

export function setTimes(abs: string, t: Timespec): void {
  try {
    native().lutimens(abs, t.sec, t.nsec, t.sec, t.nsec)
  } catch (e) {
    throw fsError(e, 'utimensat')
  }
}

export function timesOf(st: fs.BigIntStats): Timespec {
  // floor, so that a time before 1970 has nsec in [0, 1e9) as a timespec does (BigInt division truncates)
  let sec = st.mtimeNs / 1_000_000_000n
  if (sec * 1_000_000_000n > st.mtimeNs) sec -= 1n
  return { sec: Number(sec), nsec: Number(st.mtimeNs - sec * 1_000_000_000n) }
}
