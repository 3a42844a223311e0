// The mount calls sandbox/rootfs makes, through the N-API addon (never
// mount(8)), turning errno failures into typed errors. The addon's calls are
// synchronous and a layer mount makes the kernel read through FUSE, so they
// run on one worker thread (mount-worker.ts), one at a time, and the event
// loop stays free.
import path from 'node:path'
import { Worker } from 'node:worker_threads'
import { StrataError, type ErrorCode } from '../../fs/common/errors.js'
import { MNT, MS } from '../../fs/common/native.js'
import { readMounts, type MountEntry } from '../../fs/fuse/mounts.js'
import type { MountReply, MountRequest } from './mount-worker.js'

export { MS }

type Pending = { resolve: () => void; reject: (e: Error) => void }
let worker: Worker | null = null
let seq = 0
const pending = new Map<number, Pending>()

function call(req: Omit<MountRequest, 'id'>): Promise<void> {
  if (!worker) {
    const w = new Worker(new URL('./mount-worker.js', import.meta.url))
    w.on('message', (r: MountReply) => {
      const p = pending.get(r.id)
      if (!p) return
      pending.delete(r.id)
      if (pending.size === 0) w.unref()
      if (r.ok) p.resolve()
      else p.reject(Object.assign(new Error(r.message), { code: r.code }))
    })
    const fail = (e: Error) => {
      if (worker === w) worker = null
      for (const p of pending.values()) p.reject(e)
      pending.clear()
    }
    w.on('error', fail)
    w.on('exit', (c) => fail(new StrataError('INTERNAL', `mount worker exited with code ${c}`)))
    w.unref()
    worker = w
  }
  const id = ++seq
  return new Promise<void>((resolve, reject) => {
    pending.set(id, { resolve, reject })
    worker!.ref()
    worker!.postMessage({ ...req, id })
  })
}

/** mount(2) on the mount thread; errors carry the errno name as `code`. */
export function mount(source: string | null, target: string, fstype: string | null, flags: number, data: string | null = null): Promise<void> {
  return call({ op: 'mount', args: [source, target, fstype, flags, data] })
}

/** umount2(2) on the mount thread. */
export function umount2(target: string, flags: number): Promise<void> {
  return call({ op: 'umount2', args: [target, flags] })
}

function errnoOf(e: unknown): string {
  return (e as NodeJS.ErrnoException).code ?? 'EIO'
}

export async function mountOrThrow(code: ErrorCode, what: string, source: string | null, target: string, fstype: string | null, flags: number, data: string | null = null): Promise<void> {
  try {
    await mount(source, target, fstype, flags, data)
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
export async function unmountAll(dir: string): Promise<void> {
  const p = path.resolve(dir)
  for (let i = 0; i < 64 && isMounted(p); i++) {
    try {
      await umount2(p, 0)
      continue
    } catch (e) {
      if (errnoOf(e) === 'EINVAL' && !isMounted(p)) return
    }
    try {
      await umount2(p, MNT.DETACH)
    } catch (e) {
      if (isMounted(p)) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `cannot unmount ${p}: ${errnoOf(e)}`, { cause: e, detail: { errno: errnoOf(e), target: p } })
    }
  }
  if (isMounted(p)) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `${p} is still mounted`, { detail: { target: p } })
}

/**
 * Unmounts everything at or below `dir`, deepest first. One read of the
 * mount table per round, not per mount: on a node with a thousand sandboxes
 * the table has thousands of lines, and this runs on every delete.
 */
export async function unmountTree(dir: string): Promise<void> {
  for (let round = 0; round < 8; round++) {
    const ms = mountsUnder(dir)
    if (ms.length === 0) return
    // one entry per stacked mount: each umount2 takes the top one off its mount point
    for (const m of ms) {
      try {
        await umount2(m.mountpoint, 0)
        continue
      } catch (e) {
        // gone meanwhile (EINVAL: not a mount point any more): the next round's read tells
        if (errnoOf(e) === 'EINVAL' || errnoOf(e) === 'ENOENT') continue
      }
      // busy: detach it; the next round's read says whether it went
      await umount2(m.mountpoint, MNT.DETACH).catch(() => undefined)
    }
  }
  const left = mountsUnder(dir)
  if (left.length) throw new StrataError('ROOTFS_UNMOUNT_FAILED', `mounts remain under ${dir}: ${left.map((m) => m.mountpoint).join(', ')}`, { detail: { target: dir } })
}
