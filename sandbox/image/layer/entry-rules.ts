// The per-entry rules every consumer of a layer tar applies the same way
// (unpackLayer writing a tree, tarToErofs writing an image): what an entry
// is (whiteout, opaque marker, the root, an ordinary path) and when a path
// seen before may appear again.
import { StrataError } from '../../../fs/common/errors.js'
import { classifyWhiteout, normalizeEntryPath } from './paths.js'
import type { TarEntryHeader } from './tar-reader.js'
import type { UnpackStats } from './types.js'

/**
 * What a layer did at a path: `dir` (a directory entry), `idir` (a directory
 * it implied because an entry needed it), `ldir` (apply mode: a lower
 * directory an entry was written into), `node` (any other entry), `wh` (a
 * whiteout).
 */
export type Seen = 'dir' | 'idir' | 'ldir' | 'node' | 'wh'

export type EntryKind =
  | { kind: 'skip' }
  | { kind: 'opaque'; dir: string }
  | { kind: 'whiteout'; target: string }
  | { kind: 'root' }
  | { kind: 'path'; rel: string }

export function dup(rel: string, why: string): StrataError {
  return new StrataError('IMAGE_DUPLICATE_ENTRY', `${JSON.stringify(rel || '.')}: ${why}`)
}

/** Counts the entry in `stats` and classifies it (IMAGE_UNSAFE_PATH / IMAGE_BAD_ARCHIVE for bad names). */
export function classifyEntry(h: TarEntryHeader, stats: UnpackStats): EntryKind {
  stats.entries++
  if (h.mtime.sec > stats.maxMtime) stats.maxMtime = h.mtime.sec
  const rel = normalizeEntryPath(h.name)
  if (rel === '') return { kind: 'root' }
  const wh = classifyWhiteout(rel)
  if (wh.kind === 'aufs-meta') return { kind: 'skip' }
  if (wh.kind === 'opaque') return { kind: 'opaque', dir: wh.dir }
  if (wh.kind === 'whiteout') return { kind: 'whiteout', target: wh.target }
  return { kind: 'path', rel }
}

/**
 * A path may appear again only as a directory over a directory (the later
 * attributes win), or as an entry over its own whiteout (the caller replaces
 * the whiteout, see whiteoutOver).
 */
export function checkRepeat(rel: string, h: TarEntryHeader, prev: Seen | undefined): void {
  if (prev === undefined || prev === 'wh' || (h.type === 'directory' && (prev === 'dir' || prev === 'idir' || prev === 'ldir'))) return
  throw dup(rel, prev === 'node' ? 'appears twice in this layer' : 'is a directory holding entries of this layer and also a non-directory entry')
}

export function isDirSeen(s: Seen | undefined): boolean {
  return s === 'dir' || s === 'idir' || s === 'ldir'
}

/**
 * What a whiteout `.wh.NAME` does when the layer itself has NAME (before or
 * after the whiteout: the OCI spec allows both in one layer, and a whiteout
 * hides only lower layers' files): over a directory of the layer it hides
 * the lower directory's entries, i.e. the directory is opaque; over any other
 * entry it has nothing left to do (the entry already hides the lower path).
 * An entry that comes after its whiteout replaces the whiteout, and is opaque
 * when it is a directory. A second whiteout of one path is a duplicate.
 */
export function whiteoutOver(target: string, prev: Seen | undefined, whitedBefore: boolean): 'whiteout' | 'opaque' | 'none' {
  if (whitedBefore) throw dup(target, 'has two whiteouts in this layer')
  if (prev === undefined) return 'whiteout'
  return isDirSeen(prev) ? 'opaque' : 'none'
}

/**
 * The hard link target is not an earlier non-directory entry of the layer.
 * When the layer has no such path at all it may be a lower layer's file,
 * which Docker accepts: an EROFS layer cannot link to another image's inode,
 * and copying the lower file's bytes in would make the layer depend on its
 * lower layers (a layer is reused by its diff_id alone), so the way out is
 * one layer for the whole image.
 */
export function badHardlink(rel: string, target: string, prev: Seen | undefined): StrataError {
  const hint = prev === undefined ? ' (a hard link to a lower layer\'s file cannot be kept in a layer of its own: import the image with --squash)' : ''
  return new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(rel)}: hard link target ${JSON.stringify(target)} is not an earlier non-directory entry of this layer${hint}`)
}

/**
 * A hard link whose target path goes through a symlink (`h2` → `lnk/h`,
 * where `lnk` is a symlink): nothing is written or linked through a symlink,
 * whatever the link resolves to, so this is an unsafe path, not a missing
 * target (and --squash, which would not help, is not suggested).
 */
export function hardlinkThroughSymlink(rel: string, target: string, symlink: string): StrataError {
  return new StrataError('IMAGE_UNSAFE_PATH', `${JSON.stringify(rel)}: hard link target ${JSON.stringify(target)} is under the symlink ${JSON.stringify(symlink)}; no entry may be written or linked through a symlink`)
}
