// Mounts an EROFS layer file read-only on a private temporary mount point for
// the length of one callback; always unmounted and removed afterwards. The
// mount point's name carries the pid of the process that made it, so that
// the mounts of a process killed with SIGKILL (which runs no finally) are
// found and removed by the next one (sweepStaleErofsMounts).
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { StrataError } from '../../../fs/common/errors.js'
import { MNT, MS, native } from '../../../fs/common/native.js'
import { pidAlive, readMounts } from '../../../fs/fuse/index.js'

const PREFIX = 'strata-erofs-'

const execFileAsync = promisify(execFile)

export async function withErofsMount<T>(erofsFile: string, tmpDir: string | undefined, fn: (dir: string) => Promise<T>): Promise<T> {
  if (process.getuid?.() !== 0) throw new StrataError('IMAGE_NEEDS_ROOT', 'mounting an EROFS layer needs root')
  const file = path.resolve(erofsFile)
  let st: fs.Stats
  try {
    st = await fs.promises.stat(file)
  } catch (e) {
    throw new StrataError('NOT_FOUND', `layer file ${file}: ${(e as Error).message}`, { cause: e })
  }
  if (!st.isFile()) throw new StrataError('IMAGE_BAD_LAYER', `${file} is not a regular file`)
  sweepStaleErofsMounts()
  const mp = await fs.promises.mkdtemp(path.join(tmpDir ?? os.tmpdir(), `${PREFIX}${process.pid}-`))
  let mounted = false
  try {
    try {
      try {
        native().mount(file, mp, 'erofs', MS.RDONLY | MS.NOSUID | MS.NODEV | MS.NOEXEC, null)
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOTBLK') throw e
        await mountThroughLoop(file, mp)
      }
      mounted = true
      native().mount(null, mp, null, MS.PRIVATE, null)
    } catch (e) {
      if (e instanceof StrataError) throw e
      throw new StrataError('IMAGE_BAD_LAYER', `mounting ${file} as EROFS: ${(e as Error).message}`, { cause: e })
    }
    return await fn(mp)
  } finally {
    if (mounted) await unmount(mp)
    await fs.promises.rmdir(mp).catch(() => {})
  }
}

/**
 * The kernel mounts an EROFS file directly only when its filesystem reads
 * through the page cache (read_folio); a file on tmpfs (a work dir or a /tmp
 * that is tmpfs, as on many distributions) is refused with ENOTBLK. Such a
 * file is mounted through a loop device, set up by mount(8) with autoclear,
 * so the device goes with the unmount.
 */
async function mountThroughLoop(file: string, mp: string): Promise<void> {
  try {
    await execFileAsync('mount', ['-t', 'erofs', '-o', 'loop,ro,nosuid,nodev,noexec', '--', file, mp], { timeout: 30_000 })
  } catch (e) {
    const why = ((e as { stderr?: string }).stderr ?? '').trim() || (e as Error).message
    throw new StrataError(
      'IO_ERROR',
      `mounting ${file} as EROFS: its filesystem (${path.dirname(file)}) cannot back a mount (tmpfs?) and no loop device could be set up (${why}); use a --work-dir on a disk filesystem`,
      { cause: e },
    )
  }
}

async function unmount(mp: string): Promise<void> {
  for (let i = 0; ; i++) {
    try {
      native().umount2(mp, 0)
      return
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      if (code === 'EINVAL' || code === 'ENOENT') return
      if (code !== 'EBUSY' || i >= 20) {
        native().umount2(mp, MNT.DETACH)
        return
      }
      await sleep(50)
    }
  }
}

/**
 * Unmounts and removes the EROFS mount points of processes that are gone
 * (`strata-erofs-<pid>-…` anywhere in the mount table). Returns how many.
 */
export function sweepStaleErofsMounts(): number {
  let n = 0
  for (const m of readMounts().reverse()) {
    const hit = new RegExp(`^${PREFIX}(\\d+)-[^/]+$`).exec(path.basename(m.mountpoint))
    if (!hit || m.fstype !== 'erofs' || pidAlive(Number(hit[1]))) continue
    try {
      native().umount2(m.mountpoint, MNT.DETACH)
      fs.rmdirSync(m.mountpoint)
      n++
    } catch { /* another sweeper got it first, or it is not ours to remove */ }
  }
  return n
}
