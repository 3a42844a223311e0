// One file-backed EROFS mount per layer per node, shared by every sandbox on
// the node. The layer file is read through the node's FUSE mount of the DFS,
// so the kernel fetches only the blocks it touches and all sandboxes share
// one page cache. Mounts are reference-counted by user (a sandbox id); the
// last release unmounts. Each layer digest has its own operation queue, so
// concurrent acquires of one layer share one mount and a release never races
// a mount. While mounted, the layer is leased in the image store (holder =
// the node id) so gc never removes it.
//
// State on disk is just the mountpoints, <stateDir>/layers/<hex>: a restarted
// daemon finds them in /proc/self/mountinfo, re-creates the reference counts
// with adopt(digest, users), and sweep() removes whatever nobody claimed.
import fs from 'node:fs/promises'
import path from 'node:path'
import { StrataError } from '../../fs/common/errors.js'
import { readMounts } from '../../fs/fuse/mounts.js'
import type { ImageStore } from '../image/store.js'
import { digestHex } from '../image/types.js'
import { MS, isMounted, mountOrThrow, unmountAll } from './mounts.js'

export interface LayerMountsOptions {
  /** the node's FUSE mount of the DFS (`strata cluster up` mounts it at DIR/mnt) */
  fuseMnt: string
  /** local directory for this node's layer mountpoints */
  stateDir: string
  /** where layers are stored (blob paths, leases) */
  store: ImageStore
  /** lease holder: the node id */
  nodeId: string
  /**
   * Keep a layer mounted this long after its last user released it, so a
   * node creating sandboxes back to back does not remount (and re-lease)
   * the same layers each time. Default 0: unmount at once.
   */
  lingerMs?: number
}

/** One user's hold on a mounted layer. */
export interface LayerMount {
  digest: string
  /** the mounted EROFS tree */
  dir: string
  /** drops this hold (idempotent); the last one unmounts */
  release(): Promise<void>
}

export interface LayerMountInfo {
  digest: string
  dir: string
  /** users holding it, with their hold counts */
  users: Record<string, number>
}

interface Entry {
  digest: string
  dir: string
  users: Map<string, number>
  /** set while nobody uses it and it lingers */
  idle?: NodeJS.Timeout
}

const HEX_RE = /^[0-9a-f]{64}$/

export class LayerMounts {
  readonly fuseMnt: string
  readonly dir: string
  readonly store: ImageStore
  readonly nodeId: string
  readonly lingerMs: number
  readonly #entries = new Map<string, Entry>()
  readonly #queues = new Map<string, Promise<unknown>>()
  #anon = 0

  constructor(opts: LayerMountsOptions) {
    this.fuseMnt = path.resolve(opts.fuseMnt)
    this.dir = path.join(path.resolve(opts.stateDir), 'layers')
    this.store = opts.store
    this.nodeId = opts.nodeId
    this.lingerMs = opts.lingerMs ?? 0
  }

  /** Where `digest` is (or would be) mounted. */
  mountpoint(digest: string): string {
    return path.join(this.dir, digestHex(digest))
  }

  /** The layer file as the kernel sees it: through the FUSE mount. */
  layerFile(digest: string): string {
    return path.join(this.fuseMnt, this.store.blobPath(digest))
  }

  /**
   * Mounts the layer unless it is mounted already and takes a hold on it for
   * `user` (a sandbox id; one anonymous user per call when omitted).
   */
  acquire(digest: string, user?: string): Promise<LayerMount> {
    const u = user ?? `anon-${++this.#anon}`
    const dir = this.mountpoint(digest)
    return this.#serial(digest, async () => {
      let e = this.#entries.get(digest)
      if (!e) {
        await this.#mount(digest, dir)
        e = { digest, dir, users: new Map() }
        this.#entries.set(digest, e)
      }
      if (e.idle) {
        clearTimeout(e.idle)
        delete e.idle
      }
      e.users.set(u, (e.users.get(u) ?? 0) + 1)
      return this.#handle(digest, dir, u)
    })
  }

  /**
   * Re-adopts a mount left by an earlier daemon: `users` are the sandboxes
   * that still use it (one hold each; a user may appear more than once).
   * Throws ROOTFS_NOT_MOUNTED when the layer is not mounted at its mountpoint.
   */
  adopt(digest: string, users: string[]): Promise<LayerMount[]> {
    const dir = this.mountpoint(digest)
    return this.#serial(digest, async () => {
      let e = this.#entries.get(digest)
      if (!e) {
        if (!isMounted(dir)) throw new StrataError('ROOTFS_NOT_MOUNTED', `layer ${digest} is not mounted at ${dir}`, { detail: { digest, dir } })
        await this.store.addLease(this.nodeId, digest)
        e = { digest, dir, users: new Map() }
        this.#entries.set(digest, e)
      }
      const out: LayerMount[] = []
      for (const u of users) {
        e.users.set(u, (e.users.get(u) ?? 0) + 1)
        out.push(this.#handle(digest, dir, u))
      }
      return out
    })
  }

  /** Layer mounts present on this node (in the mount table under the state dir), claimed or not. */
  scan(): Array<{ digest: string; dir: string }> {
    const out: Array<{ digest: string; dir: string }> = []
    const seen = new Set<string>()
    for (const m of readMounts()) {
      if (path.dirname(m.mountpoint) !== this.dir) continue
      const hex = path.basename(m.mountpoint)
      if (!HEX_RE.test(hex) || seen.has(hex)) continue
      seen.add(hex)
      out.push({ digest: `sha256:${hex}`, dir: m.mountpoint })
    }
    return out
  }

  /** Layers this instance holds, with their users. */
  list(): LayerMountInfo[] {
    return [...this.#entries.values()].map((e) => ({ digest: e.digest, dir: e.dir, users: Object.fromEntries(e.users) }))
  }

  /**
   * Unmounts every layer mount under the state dir that nobody holds (left by
   * a crashed daemon), removes its mountpoint and drops its lease; also drops
   * this node's leases on layers it no longer mounts (state dir wiped by a
   * reboot). Returns the digests it cleared.
   */
  async sweep(): Promise<string[]> {
    const hexes = new Set<string>(this.scan().map((s) => digestHex(s.digest)))
    for (const n of await fs.readdir(this.dir).catch(() => [] as string[])) if (HEX_RE.test(n)) hexes.add(n)
    for (const l of await this.store.listLeases()) if (l.holder === this.nodeId) hexes.add(digestHex(l.digest))
    const swept: string[] = []
    for (const hex of hexes) {
      const digest = `sha256:${hex}`
      await this.#serial(digest, async () => {
        if (this.#entries.has(digest)) return
        await this.#unmount(digest, this.mountpoint(digest))
        swept.push(digest)
      })
    }
    return swept
  }

  #handle(digest: string, dir: string, user: string): LayerMount {
    let released = false
    return {
      digest,
      dir,
      release: () => {
        if (released) return Promise.resolve()
        released = true
        return this.#release(digest, user)
      },
    }
  }

  #release(digest: string, user: string): Promise<void> {
    return this.#serial(digest, async () => {
      const e = this.#entries.get(digest)
      const n = e?.users.get(user)
      if (!e || !n) return
      if (n > 1) e.users.set(user, n - 1)
      else e.users.delete(user)
      if (e.users.size > 0) return
      if (this.lingerMs > 0) {
        e.idle = setTimeout(() => void this.#dropIdle(digest).catch(() => undefined), this.lingerMs)
        e.idle.unref()
        return
      }
      await this.#unmountEntry(e)
    })
  }

  #dropIdle(digest: string): Promise<void> {
    return this.#serial(digest, async () => {
      const e = this.#entries.get(digest)
      if (!e || e.users.size > 0) return
      if (e.idle) clearTimeout(e.idle)
      await this.#unmountEntry(e)
    })
  }

  /**
   * Unmounts a layer nobody holds; it stays in the list until the unmount is
   * over (the node's layer listing never shows none while one is still
   * mounted). Runs inside the digest's queue, so no acquire sees it meanwhile.
   */
  async #unmountEntry(e: Entry): Promise<void> {
    try {
      await this.#unmount(e.digest, e.dir)
    } finally {
      this.#entries.delete(e.digest)
    }
  }

  /** Unmounts every lingering layer nobody uses now (instead of waiting for lingerMs). */
  async dropIdle(): Promise<string[]> {
    const idle = [...this.#entries.values()].filter((e) => e.users.size === 0).map((e) => e.digest)
    for (const d of idle) await this.#dropIdle(d)
    return idle
  }

  async #mount(digest: string, dir: string): Promise<void> {
    const file = this.layerFile(digest)
    // lease first, then look: a gc running meanwhile either sees the lease, or has the
    // blob aside and statBlob links it back (or it is gone: IMAGE_BLOB_MISSING)
    await this.store.addLease(this.nodeId, digest)
    try {
      await this.store.statBlob(digest)
      let st
      try {
        st = await fs.stat(file)
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') throw new StrataError('IMAGE_BLOB_MISSING', `layer ${digest} is not stored (${file})`, { cause: e })
        throw new StrataError('ROOTFS_MOUNT_FAILED', `layer ${digest}: cannot stat ${file}: ${(e as Error).message}`, { cause: e })
      }
      if (!st.isFile()) throw new StrataError('ROOTFS_MOUNT_FAILED', `layer ${digest}: ${file} is not a regular file`)
    } catch (e) {
      await this.store.removeLease(this.nodeId, digest).catch(() => undefined)
      throw e
    }
    try {
      await fs.mkdir(dir, { recursive: true })
      // a mount left by an earlier daemon that nobody adopted or swept yet is reused, not stacked on
      if (!isMounted(dir)) await mountOrThrow('ROOTFS_MOUNT_FAILED', `layer ${digest}`, file, dir, 'erofs', MS.RDONLY | MS.NODEV | MS.NOSUID)
    } catch (e) {
      await this.#unmount(digest, dir).catch(() => undefined)
      throw e
    }
  }

  async #unmount(digest: string, dir: string): Promise<void> {
    await unmountAll(dir)
    await fs.rmdir(dir).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw new StrataError('ROOTFS_UNMOUNT_FAILED', `cannot remove layer mountpoint ${dir}: ${e.code}`, { cause: e })
    })
    await this.store.removeLease(this.nodeId, digest)
  }

  #serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.#queues.get(key) ?? Promise.resolve()
    const next = prev.then(fn, fn)
    const tail = next.catch(() => undefined)
    this.#queues.set(key, tail)
    void tail.then(() => {
      if (this.#queues.get(key) === tail) this.#queues.delete(key)
    })
    return next
  }
}
