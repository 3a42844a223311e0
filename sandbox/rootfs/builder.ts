// A sandbox's root filesystem: an overlay whose lowers are the node's shared
// layer mounts (top layer first) and whose upper and work dirs are on local
// disk, plus datasets: read-only bind mounts of DFS paths (through the FUSE
// mount) at paths inside the rootfs. Nothing is copied or unpacked.
//
// Layout under the sandbox's state dir:
//   rootfs/           the overlay mount point (what the runtime gets)
//   overlay/upper/    the sandbox's writes
//   overlay/work/     overlayfs scratch
// destroy() unmounts everything found in the mount table under the state
// dir (deepest first) before it removes a single file, so a dataset's DFS
// tree can never be deleted through a stale bind mount.
import fs from 'node:fs/promises'
import path from 'node:path'
import { StrataError } from '../../fs/common/errors.js'
import { MS, mountOrThrow, mountsUnder, unmountTree } from './mounts.js'
import type { LayerMount, LayerMounts } from './layers.js'
import { checkMountTarget, cleanAbsolute, RESERVED_MOUNT_TARGETS, reservedTarget, resolveInRoot } from './resolve.js'

export interface DatasetMount {
  /** absolute path in the DFS */
  source: string
  /** absolute path inside the sandbox */
  target: string
}

export interface RootfsSpec {
  sandboxId: string
  /** layer digests, lowest first (image order) */
  layers: string[]
  datasets?: DatasetMount[]
  /** the sandbox's local state directory */
  stateDir: string
}

export interface MountedDataset extends DatasetMount {
  /** where it is mounted on the host (inside the rootfs, symlinks resolved) */
  hostPath: string
  type: 'dir' | 'file'
}

export interface RootfsBuilderOptions {
  layers: LayerMounts
  /** the node's FUSE mount of the DFS; defaults to the one the LayerMounts read through */
  fuseMnt?: string
}

/** Data passed in the overlay's mount options is split on `,` and `:`; paths holding them are refused. */
const OVERLAY_UNSAFE = /[,:\\\n]/

export class Rootfs {
  readonly sandboxId: string
  readonly stateDir: string
  /** the merged tree */
  readonly dir: string
  readonly upperDir: string
  readonly workDir: string
  readonly datasets: MountedDataset[] = []
  /** @internal */
  readonly holds: LayerMount[] = []
  #destroyed: Promise<void> | null = null

  constructor(sandboxId: string, stateDir: string) {
    this.sandboxId = sandboxId
    this.stateDir = path.resolve(stateDir)
    this.dir = path.join(this.stateDir, 'rootfs')
    this.upperDir = path.join(this.stateDir, 'overlay', 'upper')
    this.workDir = path.join(this.stateDir, 'overlay', 'work')
  }

  /**
   * Unmounts datasets and the overlay, releases the layers and removes the
   * directories it made. Idempotent; works on half-built state.
   */
  destroy(): Promise<void> {
    this.#destroyed ??= this.#destroy().catch((e: unknown) => {
      this.#destroyed = null
      throw e
    })
    return this.#destroyed
  }

  async #destroy(): Promise<void> {
    // everything mounted at or below rootfs/, deepest first: datasets, then the overlay
    await unmountTree(this.dir)
    const left = mountsUnder(this.stateDir)
    if (left.length) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `mounts remain under ${this.stateDir}: ${left.map((m) => m.mountpoint).join(', ')}`)
    let firstErr: unknown
    for (const h of this.holds.splice(0).reverse()) {
      try {
        await h.release()
      } catch (e) {
        firstErr ??= e
      }
    }
    await fs.rm(path.join(this.stateDir, 'overlay'), { recursive: true, force: true })
    await fs.rmdir(this.dir).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e
    })
    // the state dir belongs to the caller; it goes only if nothing else is in it
    await fs.rmdir(this.stateDir).catch(() => undefined)
    if (firstErr) throw firstErr
  }
}

export class RootfsBuilder {
  readonly layers: LayerMounts
  readonly fuseMnt: string

  constructor(opts: RootfsBuilderOptions) {
    this.layers = opts.layers
    this.fuseMnt = path.resolve(opts.fuseMnt ?? opts.layers.fuseMnt)
  }

  /** Builds the rootfs. On failure everything done so far is undone and the error rethrown. */
  async create(spec: RootfsSpec): Promise<Rootfs> {
    const datasets = checkSpec(spec)
    const r = new Rootfs(spec.sandboxId, spec.stateDir)
    if (OVERLAY_UNSAFE.test(r.stateDir) || OVERLAY_UNSAFE.test(this.layers.dir)) {
      throw new StrataError('INVALID_ARGUMENT', `state directories must not contain , : \\ or newlines (${r.stateDir})`)
    }
    // not ours to undo: another rootfs (or an unadopted one) lives there
    if (mountsUnder(r.stateDir).length) throw new StrataError('ALREADY_EXISTS', `${r.stateDir} already holds mounts`)
    try {
      // sources first: a missing dataset fails before anything is mounted
      const sources = []
      for (const d of datasets) sources.push(await this.#resolveSource(d.source))
      await fs.mkdir(r.upperDir, { recursive: true })
      await fs.mkdir(r.workDir, { recursive: true })
      await fs.mkdir(r.dir, { recursive: true })
      for (const digest of spec.layers) r.holds.push(await this.layers.acquire(digest, spec.sandboxId))
      const lower = r.holds.map((h) => h.dir).reverse().join(':')
      const data = `lowerdir=${lower},upperdir=${r.upperDir},workdir=${r.workDir}`
      // mount(2) takes at most one page of options
      if (data.length >= 4096) throw new StrataError('ROOTFS_MOUNT_FAILED', `rootfs of ${spec.sandboxId}: ${spec.layers.length} layers make ${data.length} bytes of overlay options (the limit is 4095); use a shorter state dir or fewer layers`)
      await mountOrThrow('ROOTFS_MOUNT_FAILED', `rootfs of ${spec.sandboxId}`, `strata-rootfs-${spec.sandboxId}`, r.dir, 'overlay', 0, data)
      for (const [i, d] of datasets.entries()) r.datasets.push(await this.#mountDataset(r, d, sources[i]!))
      return r
    } catch (e) {
      await r.destroy().catch(() => undefined)
      throw e
    }
  }

  /**
   * Re-adopts a rootfs an earlier daemon built (after a restart): its overlay
   * must still be mounted; its layers are re-held for the sandbox. Layers of
   * several sandboxes may be adopted one sandbox at a time.
   */
  async adopt(spec: RootfsSpec): Promise<Rootfs> {
    const datasets = checkSpec(spec, true)
    const r = new Rootfs(spec.sandboxId, spec.stateDir)
    const ms = mountsUnder(r.dir)
    if (!ms.some((m) => m.mountpoint === r.dir && m.fstype === 'overlay')) {
      throw new StrataError('ROOTFS_NOT_MOUNTED', `the rootfs of ${spec.sandboxId} is not mounted at ${r.dir}`)
    }
    try {
      for (const digest of spec.layers) r.holds.push(...(await this.layers.adopt(digest, [spec.sandboxId])))
    } catch (e) {
      for (const h of r.holds.splice(0)) await h.release().catch(() => undefined)
      throw e
    }
    for (const d of datasets) {
      const parts = cleanAbsolute(d.target, 'ROOTFS_BAD_MOUNT_TARGET', 'dataset target')
      const hostPath = path.join(r.dir, ...parts)
      const st = await fs.stat(hostPath).catch(() => null)
      r.datasets.push({ ...d, hostPath, type: st?.isFile() ? 'file' : 'dir' })
    }
    return r
  }

  async #resolveSource(source: string): Promise<{ hostPath: string; type: 'dir' | 'file' }> {
    const parts = cleanAbsolute(source, 'ROOTFS_BAD_DATASET', 'dataset source')
    const r = await resolveInRoot(this.fuseMnt, parts, 'ROOTFS_BAD_DATASET', 'dataset source')
    if (r.type === null) throw new StrataError('ROOTFS_DATASET_NOT_FOUND', `dataset ${source} does not exist in the DFS`, { detail: { source } })
    if (r.type === 'other') throw new StrataError('ROOTFS_BAD_DATASET', `dataset ${source} is neither a directory nor a regular file`, { detail: { source } })
    return { hostPath: r.hostPath, type: r.type }
  }

  async #mountDataset(r: Rootfs, d: DatasetMount, src: { hostPath: string; type: 'dir' | 'file' }): Promise<MountedDataset> {
    const parts = checkMountTarget(d.target)
    const t = await resolveInRoot(r.dir, parts, 'ROOTFS_BAD_MOUNT_TARGET', 'dataset target')
    // a symlink in the image may lead a harmless-looking target onto a reserved path
    const reserved = reservedTarget(t.parts)
    if (reserved) throw new StrataError('ROOTFS_BAD_MOUNT_TARGET', `dataset target ${d.target} resolves through a symlink to /${t.parts.join('/')}, on or below ${reserved}, which is reserved (${RESERVED_MOUNT_TARGETS.join(', ')})`, { detail: { target: d.target } })
    if (t.type !== null && t.type !== src.type) {
      throw new StrataError('ROOTFS_BAD_MOUNT_TARGET', `dataset target ${d.target} is a ${t.type} in the rootfs, the source ${d.source} is a ${src.type}`)
    }
    // create the missing components one by one: each is new, so none is a symlink
    for (let i = t.existing; i < t.parts.length; i++) {
      const p = path.join(r.dir, ...t.parts.slice(0, i + 1))
      try {
        if (i < t.parts.length - 1 || src.type === 'dir') await fs.mkdir(p, { mode: 0o755 })
        else await (await fs.open(p, 'wx', 0o644)).close()
      } catch (e) {
        // e.g. EROFS: the target lies inside an earlier dataset
        const errno = (e as NodeJS.ErrnoException).code
        throw new StrataError('ROOTFS_BAD_MOUNT_TARGET', `dataset target ${d.target}: cannot create /${t.parts.slice(0, i + 1).join('/')}: ${errno}`, { cause: e, detail: { errno } })
      }
    }
    await mountOrThrow('ROOTFS_MOUNT_FAILED', `dataset ${d.source}`, src.hostPath, t.hostPath, null, MS.BIND)
    // a bind mount takes its flags only from a remount
    await mountOrThrow('ROOTFS_MOUNT_FAILED', `dataset ${d.source} (read-only remount)`, null, t.hostPath, null, MS.BIND | MS.REMOUNT | MS.RDONLY | MS.NOSUID | MS.NODEV)
    return { ...d, hostPath: t.hostPath, type: src.type }
  }
}

const SANDBOX_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/

/** `adopting`: targets recorded by an earlier daemon are taken as they were mounted. */
function checkSpec(spec: RootfsSpec, adopting = false): DatasetMount[] {
  if (!SANDBOX_ID_RE.test(spec.sandboxId ?? '')) throw new StrataError('INVALID_ARGUMENT', `sandbox id ${JSON.stringify(spec.sandboxId)} must match ${SANDBOX_ID_RE.source}`)
  if (!Array.isArray(spec.layers) || spec.layers.length === 0) throw new StrataError('INVALID_ARGUMENT', 'a rootfs needs at least one layer')
  if (typeof spec.stateDir !== 'string' || !spec.stateDir) throw new StrataError('INVALID_ARGUMENT', 'stateDir is required')
  const datasets = spec.datasets ?? []
  for (const d of datasets) {
    cleanAbsolute(d.source, 'ROOTFS_BAD_DATASET', 'dataset source')
    if (!adopting) checkMountTarget(d.target)
  }
  return datasets
}
