// Directory tree snapshots and their differences, for every image test:
// names, types, modes (with setuid/setgid/sticky), owners, sizes, contents
// (sha256), link targets, device numbers, xattrs, hard-link groups and mtimes
// of non-directories. Used to check unpacked layers against GNU tar, EROFS
// mounts and overlays against `umoci unpack`, and imported or pulled images
// (their layers mounted and stacked) against the tree they came from.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { native } from '../../fs/common/native.js'

export interface TreeEntry {
  type: 'file' | 'dir' | 'symlink' | 'char' | 'block' | 'fifo' | 'socket'
  /** permission bits with setuid/setgid/sticky, in octal ('4755'); absent for a typeOnly entry, like every field below */
  mode?: string
  uid?: number
  gid?: number
  /** files */
  size?: number
  /** files: hex sha256 of the content */
  sha256?: string
  /** symlinks */
  target?: string
  /** character and block devices */
  rdev?: number
  /** everything but directories (implied directories and overlay merges make those differ) */
  mtimeNs?: bigint
  /** name → hex value, sorted by name; absent when there are none. trusted.overlay.* and security.* are left out. */
  xattrs?: Record<string, string>
  /** the other paths of the same inode (hard links), sorted; absent when there are none */
  links?: string[]
}

/** Entries by path relative to the root ('.' is the root itself). */
export type Tree = Map<string, TreeEntry>

export interface SnapshotOptions {
  /** paths recorded by type only (e.g. whiteout files, whose presence is all that counts) */
  typeOnly?: (rel: string) => boolean
  /** leave the root out (a tar may have no entry for it) */
  skipRoot?: boolean
}

/** overlayfs' own attributes and security labels say nothing about the image */
const IGNORED_XATTRS = ['trusted.overlay.', 'security.']

function typeOf(st: fs.BigIntStats): TreeEntry['type'] {
  if (st.isFile()) return 'file'
  if (st.isDirectory()) return 'dir'
  if (st.isSymbolicLink()) return 'symlink'
  if (st.isCharacterDevice()) return 'char'
  if (st.isBlockDevice()) return 'block'
  if (st.isFIFO()) return 'fifo'
  return 'socket'
}

async function sha256(file: string): Promise<string> {
  const h = crypto.createHash('sha256')
  for await (const c of fs.createReadStream(file)) h.update(c as Buffer)
  return h.digest('hex')
}

function xattrsOf(p: string): Record<string, string> | undefined {
  const names = native()
    .llistxattr(p)
    .filter((n) => !IGNORED_XATTRS.some((pre) => n.startsWith(pre)))
    .sort()
  if (names.length === 0) return undefined
  return Object.fromEntries(names.map((n) => [n, native().lgetxattr(p, n).toString('hex')]))
}

/** Every entry under `root`. */
export async function snapshotTree(root: string, opts: SnapshotOptions = {}): Promise<Tree> {
  const out: Tree = new Map()
  const inodes = new Map<string, string[]>()
  const walk = async (rel: string): Promise<void> => {
    const p = rel === '.' ? root : path.join(root, rel)
    const st = await fs.promises.lstat(p, { bigint: true })
    const type = typeOf(st)
    if (opts.typeOnly?.(rel)) {
      out.set(rel, { type })
    } else if (!(rel === '.' && opts.skipRoot)) {
      const e: TreeEntry = { type, mode: Number(st.mode & 0o7777n).toString(8), uid: Number(st.uid), gid: Number(st.gid) }
      if (type === 'file') {
        e.size = Number(st.size)
        e.sha256 = await sha256(p)
      }
      if (type === 'symlink') e.target = await fs.promises.readlink(p)
      if (type === 'char' || type === 'block') e.rdev = Number(st.rdev)
      if (type !== 'dir') e.mtimeNs = st.mtimeNs
      const xattrs = xattrsOf(p)
      if (xattrs) e.xattrs = xattrs
      if (type !== 'dir' && st.nlink > 1n) {
        const key = `${st.dev}:${st.ino}`
        inodes.set(key, [...(inodes.get(key) ?? []), rel])
      }
      out.set(rel, e)
    }
    if (type === 'dir') {
      for (const name of (await fs.promises.readdir(p)).sort()) await walk(rel === '.' ? name : `${rel}/${name}`)
    }
  }
  await walk('.')
  for (const group of inodes.values()) {
    if (group.length < 2) continue
    for (const rel of group) out.get(rel)!.links = group.filter((x) => x !== rel).sort()
  }
  return out
}

/** A field's value as compared and shown in a diff line (bigints as `123n`). */
function show(v: unknown): string {
  if (v === undefined) return '(none)'
  return JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `${x}n` : x))
}

/**
 * The differences between two snapshots, one line per path and field
 * (empty: the trees are equal in every recorded field).
 */
export function diffTrees(actual: Tree, expected: Tree): string[] {
  const diffs: string[] = []
  const names = [...new Set([...actual.keys(), ...expected.keys()])].sort()
  for (const n of names) {
    const a = actual.get(n)
    const e = expected.get(n)
    if (!a) {
      diffs.push(`${n}: missing (expected ${e!.type})`)
      continue
    }
    if (!e) {
      diffs.push(`${n}: unexpected ${a.type}`)
      continue
    }
    if (a.type !== e.type) {
      diffs.push(`${n}: type ${a.type}, expected ${e.type}`)
      continue
    }
    const fields = [...new Set([...Object.keys(a), ...Object.keys(e)])].sort() as Array<keyof TreeEntry>
    for (const k of fields) {
      if (show(a[k]) !== show(e[k])) diffs.push(`${n}: ${k} ${show(a[k])}, expected ${show(e[k])}`)
    }
  }
  return diffs
}

/**
 * A file's size, mode, mtime and `length` bytes (hex) at each offset: how a
 * huge sparse file is compared without hashing its gigabytes of holes.
 */
export function sampleFile(file: string, offsets: number[], length = 16): { size: bigint; mode: bigint; mtimeNs: bigint; bytes: string[] } {
  const st = fs.statSync(file, { bigint: true })
  const fd = fs.openSync(file, 'r')
  try {
    const bytes = offsets.map((pos) => {
      const b = Buffer.alloc(length)
      return b.subarray(0, fs.readSync(fd, b, 0, length, pos)).toString('hex')
    })
    return { size: st.size, mode: st.mode, mtimeNs: st.mtimeNs, bytes }
  } finally {
    fs.closeSync(fd)
  }
}
