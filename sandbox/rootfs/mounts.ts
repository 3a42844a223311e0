// The mount calls sandbox/rootfs makes, through the N-API addon (never
// mount(8)), turning errno failures into typed errors. The calls are
// synchronous: the kernel may read a layer's superblock through the FUSE
// mount meanwhile, which is served by the FUSE daemon, a separate process.
import path from 'node:path'
import { StrataError, type ErrorCode } from '../../fs/common/errors.js'
import { MNT, MS, native } from '../../fs/common/native.js'
import { readMounts, type MountEntry } from '../../fs/fuse/mounts.js'

export { MS }

function errnoOf(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? 'EIO'
}

export function mountOrThrow(code: ErrorCode, what: string, source: string | null, target: string, fstype: string | null, flags: number, data: string | null = null): void {
  try {
    native().mount(source, target, fstype, flags, data)
  } catch (e) {
    const errno = errnoOf(e)
    throw new StrataError(code, `${what}: mount ${source ?? '(none)'} on ${target} failed: ${errno}`, { cause: e, detail: { errno, source, target, fstype } })
  }
}

/** Mount entries at `dir` or below it, deepest (last mounted) first. */
export function mountsUnder(dir: string, mounts: MountEntry[] = readMounts()): MountEntry[] {
  const root = path.resolve(dir)
  return mounts.filter((m) => m.mountpoint === root || m.mountpoint.startsWith(root + '/')).reverse()
}

export function isMounted(dir: string, mounts: MountEntry[] = readMounts()): boolean {
  const p = path.resolve(dir)
  return mounts.some((m) => m.mountpoint === p)
}

/**
 * Removes every mount stacked at `dir` (umount2, then MNT_DETACH when busy).
 * Not mounted is success. Throws ROOTFS_UNMOUNT_FAILED when a mount stays.
 */
export function unmountAll(dir: string): void {
  const p = path.resolve(dir)
  for (let i = 0; i < 64 && isMounted(p); i++) {
    try {
      native().umount2(p, 0)
      continue
    } catch (e) {
      if (errnoOf(e) === 'EINVAL' && !isMounted(p)) return
    }
    try {
      native().umount2(p, MNT.DETACH)
    } catch (e) {
      if (isMounted(p)) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `cannot unmount ${p}: ${errnoOf(e)}`, { cause: e, detail: { errno: errnoOf(e), target: p } })
    }
  }
  if (isMounted(p)) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `${p} is still mounted`, { detail: { target: p } })
}

/** Unmounts everything at or below `dir`, deepest first. */
export function unmountTree(dir: string): void {
  for (let round = 0; round < 8; round++) {
    const ms = mountsUnder(dir)
    if (ms.length === 0) return
    for (const m of ms) unmountAll(m.mountpoint)
  }
  const left = mountsUnder(dir)
  if (left.length) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `mounts remain under ${dir}: ${left.map((m) => m.mountpoint).join(', ')}`)
}
