// The identity a client acts as (uid, gid, supplementary groups) where it is
// given by hand: the CLI's --uid/--gid/--groups and a FUSE daemon's config.

import { StrataError } from './errors.js'

/**
 * The largest uid or gid: ids are u32 on the wire, and 4294967295 is
 * (uid_t)-1, which chown(2) reads as "leave unchanged", never a user.
 */
export const MAX_ID = 0xfffffffe

/** Linux's NGROUPS_MAX: setgroups(2) takes no more supplementary groups than this. */
export const NGROUPS_MAX = 65536

/** An id in [0, MAX_ID]; anything else (a string, a fraction, -1) is INVALID_ARGUMENT. */
export function checkId(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > MAX_ID) {
    throw new StrataError('INVALID_ARGUMENT', `${what} must be an integer in [0, ${MAX_ID}], got ${JSON.stringify(v)}`)
  }
  return v
}

/** A supplementary group list: at most NGROUPS_MAX ids, each a checkId. */
export function checkGroups(v: unknown, what: string): number[] {
  if (!Array.isArray(v)) throw new StrataError('INVALID_ARGUMENT', `${what} must be a list of gids, got ${JSON.stringify(v)}`)
  if (v.length > NGROUPS_MAX) throw new StrataError('INVALID_ARGUMENT', `${what} lists ${v.length} groups; the kernel allows at most ${NGROUPS_MAX} (NGROUPS_MAX)`)
  return v.map((g, i) => checkId(g, `${what}[${i}]`))
}
