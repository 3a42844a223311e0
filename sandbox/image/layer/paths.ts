// Tar entry names → safe relative paths. OCI layer paths are relative: an
// absolute name is refused like one that climbs out with `..` (a tar that
// has them was made with `tar -P` or by hand, and would overwrite the host's
// files if extracted as it says), a leading `./` is dropped, `.` and empty
// components are dropped, and `..` is resolved lexically but may never climb
// above the root.
import { StrataError } from '../../../fs/common/errors.js'

export const WHITEOUT_PREFIX = '.wh.'
export const OPAQUE_MARKER = '.wh..wh..opq'
/** AUFS bookkeeping names (`.wh..wh.plnk`, `.wh..wh.aufs`): skipped, as Docker does. */
export const AUFS_META_PREFIX = '.wh..wh.'

/**
 * Normalizes a tar name to a relative path without `.`/`..`/empty components;
 * the root is `''`. Throws IMAGE_UNSAFE_PATH when the name is absolute or
 * `..` escapes the root.
 */
export function normalizeEntryPath(name: string, what = 'entry'): string {
  if (name.includes('\0')) throw new StrataError('IMAGE_BAD_ARCHIVE', `${what} name ${JSON.stringify(name)} contains NUL`)
  if (name.includes('\uFFFD')) {
    throw new StrataError('IMAGE_BAD_ARCHIVE', `${what} name ${JSON.stringify(name)} is not valid UTF-8`)
  }
  if (name.startsWith('/')) throw new StrataError('IMAGE_UNSAFE_PATH', `${what} ${JSON.stringify(name)} is an absolute name; layer entries are relative to the layer root`)
  const out: string[] = []
  for (const c of name.split('/')) {
    if (c === '' || c === '.') continue
    if (c === '..') {
      if (out.length === 0) throw new StrataError('IMAGE_UNSAFE_PATH', `${what} ${JSON.stringify(name)} climbs out of the layer root`)
      out.pop()
      continue
    }
    out.push(c)
  }
  return out.join('/')
}

export function parentOf(rel: string): string {
  const i = rel.lastIndexOf('/')
  return i < 0 ? '' : rel.slice(0, i)
}

export function baseOf(rel: string): string {
  return rel.slice(rel.lastIndexOf('/') + 1)
}

export function joinRel(dir: string, name: string): string {
  return dir === '' ? name : `${dir}/${name}`
}

/** The ancestors of a relative path, outermost first, excluding the root and the path itself. */
export function ancestorsOf(rel: string): string[] {
  const parts = rel.split('/')
  const out: string[] = []
  for (let i = 1; i < parts.length; i++) out.push(parts.slice(0, i).join('/'))
  return out
}

export type WhiteoutKind =
  | { kind: 'none' }
  | { kind: 'aufs-meta' }
  | { kind: 'opaque'; dir: string }
  | { kind: 'whiteout'; target: string }

/** Classifies a normalized entry path by OCI whiteout naming. */
export function classifyWhiteout(rel: string): WhiteoutKind {
  const parts = rel.split('/')
  for (let i = 0; i < parts.length - 1; i++) {
    if (parts[i]!.startsWith(AUFS_META_PREFIX)) return { kind: 'aufs-meta' }
    if (parts[i]!.startsWith(WHITEOUT_PREFIX)) {
      throw new StrataError('IMAGE_BAD_ARCHIVE', `entry ${JSON.stringify(rel)} lies under a whiteout name`)
    }
  }
  const base = parts[parts.length - 1]!
  if (base === OPAQUE_MARKER) return { kind: 'opaque', dir: parentOf(rel) }
  if (base.startsWith(AUFS_META_PREFIX)) return { kind: 'aufs-meta' }
  if (!base.startsWith(WHITEOUT_PREFIX)) return { kind: 'none' }
  const name = base.slice(WHITEOUT_PREFIX.length)
  if (name === '' || name === '.' || name === '..') {
    throw new StrataError('IMAGE_UNSAFE_PATH', `whiteout ${JSON.stringify(rel)} names no entry`)
  }
  return { kind: 'whiteout', target: joinRel(parentOf(rel), name) }
}
