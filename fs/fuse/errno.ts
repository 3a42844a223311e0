// StrataError → the negative errno a FUSE callback returns. The error
// catalogue names the errno of every code (ERRORS[code].errno); the number
// comes from fuse-native's constants (Linux values), with Node's table as the
// fallback for the few names fuse-native lacks (ENOTSUP is EOPNOTSUPP there).

import os from 'node:os'
import { ERRORS, StrataError, isErrorCode, type ErrorCode } from '../common/errors.js'
import { fuseErrnoTable } from './native.js'

const NODE_ERRNO = os.constants.errno as Record<string, number | undefined>
const ALIASES: Record<string, string> = { ENOTSUP: 'EOPNOTSUPP', EWOULDBLOCK: 'EAGAIN', EDEADLOCK: 'EDEADLK' }

/** Negative errno for an errno name ('ENOENT' → -2); unknown names → -EIO. */
export function errnoByName(name: string): number {
  const table = fuseErrnoTable()
  const n = table[name] ?? table[ALIASES[name] ?? ''] ?? (NODE_ERRNO[name] !== undefined ? -NODE_ERRNO[name]! : undefined)
  return typeof n === 'number' && n < 0 ? n : -5
}

export const E = {
  EPERM: -1,
  ENOENT: -2,
  EIO: -5,
  EBADF: -9,
  EAGAIN: -11,
  EACCES: -13,
  EBUSY: -16,
  EEXIST: -17,
  ENOTDIR: -20,
  EISDIR: -21,
  EINVAL: -22,
  EFBIG: -27,
  ENOSPC: -28,
  EROFS: -30,
  ERANGE: -34,
  ENOSYS: -38,
  ENOTEMPTY: -39,
  ENODATA: -61,
  ENOTSUP: -95,
  ETIMEDOUT: -110,
  ESTALE: -116,
} as const

/**
 * The catalogue's errno of a code, except EAGAIN: the codes that carry it
 * (CHAIN_UNAVAILABLE, TARGET_OFFLINE, KV_CONFLICT, …) reach a FUSE reply only
 * after the client retried them for its whole budget, and to a blocking
 * read(2) or write(2) EAGAIN means "try again", which `cat` and `cp` print as
 * "Resource temporarily unavailable" and a retry loop spins on. It is EIO.
 */
function codeErrno(code: ErrorCode): number {
  const name = ERRORS[code].errno
  return name === 'EAGAIN' ? E.EIO : errnoByName(name)
}

/**
 * The negative errno for anything an operation threw: a StrataError maps
 * through the catalogue; a Node system error (`code` 'ENOENT', …) by its name;
 * a bare negative number passes through; everything else is -EIO.
 */
export function toFuseErrno(e: unknown): number {
  if (typeof e === 'number' && Number.isInteger(e) && e < 0) return e
  if (e instanceof StrataError) return codeErrno(e.code)
  const code = (e as { code?: unknown } | null)?.code
  if (typeof code === 'string') {
    if (isErrorCode(code)) return codeErrno(code)
    if (/^E[A-Z0-9]+$/.test(code)) return errnoByName(code)
  }
  return E.EIO
}
