// Compares two directory trees the way the image tests need: names, types,
// modes (with setuid/setgid/sticky), owners, sizes, contents (sha256), link
// targets, device numbers, user xattrs, hard-link groups and mtimes of
// non-directories. Used to check an imported image (its layers mounted and
// stacked with overlayfs) against the tree `umoci unpack` makes.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { native } from '../../fs/common/native.js'

export interface TreeEntry {
  type: 'file' | 'dir' | 'symlink' | 'char' | 'block' | 'fifo' | 'socket'
  mode: number
  uid: number
  gid: number
  size?: number
  sha256?: string
  target?: string
  rdev?: number
  mtimeNs?: bigint
  xattrs: Record<string, string>
  /** the smallest path sharing this entry's inode (hard links), when nlink > 1 */
  linkGroup?: string
}

export interface SnapshotOptions {
  /** xattr name prefixes to record (default ['user.']) */
  xattrPrefixes?: string[]
}

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

function xattrsOf(p: string, prefixes: string[]): Record<string, string> {
  const out: Record<string, string> = {}
  let names: string[] = []
  try {
    names = native().llistxattr(p)
  } catch {
    return out
  }
  for (const n of names.sort()) {
    if (!prefixes.some((pre) => n.startsWith(pre))) continue
    out[n] = native().lgetxattr(p, n).toString('hex')
  }
  return out
}

/** Every entry under `root` (relative paths, root itself as '.'). */
export async function snapshotTree(root: string, opts: SnapshotOptions = {}): Promise<Map<string, TreeEntry>> {
  const prefixes = opts.xattrPrefixes ?? ['user.']
  const out = new Map<string, TreeEntry>()
  const inodes = new Map<string, string[]>()
  const walk = async (rel: string): Promise<void> => {
    const p = rel === '.' ? root : path.join(root, rel)
    const st = await fs.promises.lstat(p, { bigint: true })
    const type = typeOf(st)
    const e: TreeEntry = { type, mode: Number(st.mode & 0o7777n), uid: Number(st.uid), gid: Number(st.gid), xattrs: xattrsOf(p, prefixes) }
    if (type === 'file') {
      e.size = Number(st.size)
      e.sha256 = await sha256(p)
    }
    if (type === 'symlink') e.target = await fs.promises.readlink(p)
    if (type === 'char' || type === 'block') e.rdev = Number(st.rdev)
    if (type !== 'dir') e.mtimeNs = st.mtimeNs
    if (type !== 'dir' && st.nlink > 1n) {
      const key = `${st.dev}:${st.ino}`
      const g = inodes.get(key) ?? []
      g.push(rel)
      inodes.set(key, g)
    }
    out.set(rel, e)
    if (type === 'dir') {
      for (const name of (await fs.promises.readdir(p)).sort()) await walk(rel === '.' ? name : `${rel}/${name}`)
    }
  }
  await walk('.')
  for (const g of inodes.values()) {
    if (g.length < 2) continue
    const first = [...g].sort()[0]!
    for (const rel of g) out.get(rel)!.linkGroup = first
  }
  return out
}

export interface CompareOptions {
  /** also compare directory entries' attributes other than existence (default true) */
  dirAttrs?: boolean
  /** compare mtimes of non-directories (default true) */
  mtimes?: boolean
}

/** The differences between two snapshots, one line each (empty: equal). */
export function diffTrees(actual: Map<string, TreeEntry>, expected: Map<string, TreeEntry>, opts: CompareOptions = {}): string[] {
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
    if (a.type === 'dir' && opts.dirAttrs === false) continue
    const cmp = (k: keyof TreeEntry, fmt: (v: unknown) => string = String) => {
      if (k === 'mtimeNs' && opts.mtimes === false) return
      const av = a[k]
      const ev = e[k]
      const same = typeof av === 'object' && av !== null ? JSON.stringify(av) === JSON.stringify(ev) : av === ev
      if (!same) diffs.push(`${n}: ${k} ${fmt(av)}, expected ${fmt(ev)}`)
    }
    cmp('mode', (v) => (typeof v === 'number' ? v.toString(8) : String(v)))
    cmp('uid')
    cmp('gid')
    cmp('size')
    cmp('sha256')
    cmp('target')
    cmp('rdev')
    cmp('mtimeNs')
    cmp('xattrs', (v) => JSON.stringify(v))
    cmp('linkGroup')
  }
  return diffs
}
