// The daemon's path → inode cache. fuse-native is path-based (libfuse 2's
// high-level API): every request names a path, and the kernel asks getattr
// for every path it looks up. Attributes meta returned (from stat, or from a
// listing with status) are kept for `ttlMs` (the attr timeout, so the daemon
// adds no staleness of its own) and dropped by every change this mount makes:
// the path itself, or for rename/unlink/rmdir the whole subtree under it.

import type { Inode } from '../meta/protocol.js'

interface Entry {
  inode: Inode
  expires: number
}

export interface PathCacheStats {
  hits: number
  misses: number
  size: number
}

export class PathCache {
  private readonly map = new Map<string, Entry>()
  /** inode id → paths cached for it (hard links, a file listed and stat'ed) */
  private readonly byInode = new Map<bigint, Set<string>>()
  private hits = 0
  private misses = 0
  private sets = 0

  constructor(
    readonly ttlMs: number,
    readonly maxEntries = 100_000,
    private readonly now: () => number = () => performance.now(),
  ) {}

  get(path: string): Inode | undefined {
    const e = this.map.get(path)
    if (!e) {
      this.misses++
      return undefined
    }
    if (e.expires <= this.now()) {
      this.delete(path)
      this.misses++
      return undefined
    }
    this.hits++
    return e.inode
  }

  set(path: string, inode: Inode): void {
    if (this.ttlMs <= 0) return
    if (this.map.size >= this.maxEntries || ++this.sets % 4096 === 0) this.prune()
    this.delete(path) // re-insert: insertion order = age order
    this.map.set(path, { inode, expires: this.now() + this.ttlMs })
    let paths = this.byInode.get(inode.id)
    if (!paths) this.byInode.set(inode.id, (paths = new Set()))
    paths.add(path)
  }

  private delete(path: string): void {
    const e = this.map.get(path)
    if (!e) return
    this.map.delete(path)
    const paths = this.byInode.get(e.inode.id)
    if (paths) {
      paths.delete(path)
      if (paths.size === 0) this.byInode.delete(e.inode.id)
    }
  }

  /** Drops one path. */
  invalidate(path: string): void {
    this.delete(path)
  }

  /** Drops a path and everything below it. */
  invalidateTree(path: string): void {
    this.delete(path)
    const prefix = path === '/' ? '/' : path + '/'
    for (const k of [...this.map.keys()]) if (k.startsWith(prefix)) this.delete(k)
  }

  /** Drops every path that names this inode (hard links, a file whose size changed). */
  invalidateInode(id: bigint): void {
    const paths = this.byInode.get(id)
    if (!paths) return
    for (const p of [...paths]) this.delete(p)
  }

  clear(): void {
    this.map.clear()
    this.byInode.clear()
  }

  stats(): PathCacheStats {
    return { hits: this.hits, misses: this.misses, size: this.map.size }
  }

  private prune(): void {
    const now = this.now()
    for (const [k, e] of [...this.map]) if (e.expires <= now) this.delete(k)
    // still full: drop the oldest half
    if (this.map.size >= this.maxEntries) {
      let n = Math.floor(this.map.size / 2)
      for (const k of [...this.map.keys()]) {
        if (n-- <= 0) break
        this.delete(k)
      }
    }
  }
}

/** Parent directory of a FUSE path ('/a/b' → '/a', '/a' → '/'). */
export function parentOf(p: string): string {
  const i = p.lastIndexOf('/')
  return i <= 0 ? '/' : p.slice(0, i)
}

/** Last component of a FUSE path. */
export function nameOf(p: string): string {
  return p.slice(p.lastIndexOf('/') + 1)
}

/** Child path of a directory path. */
export function childOf(dir: string, name: string): string {
  return dir === '/' ? `/${name}` : `${dir}/${name}`
}
