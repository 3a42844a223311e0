// Mounts an EROFS layer file read-only on a private temporary mount point for
// the length of one callback; always unmounted and removed afterwards. The
// mount point's name carries the pid of the process that made it, so that
// the mounts of a process killed with SIGKILL (which runs no finally) are
// found and removed by the next one (sweepStaleErofsMounts).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { StrataError } from '../../../fs/common/errors.js'
import { MNT, MS, native } from '../../../fs/common/native.js'
import { pidAlive, readMounts } from '../../../fs/fuse/index.js'

const PREFIX = 'strata-erofs-'

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
      native().mount(file, mp, 'erofs', MS.RDONLY | MS.NOSUID | MS.NODEV | MS.NOEXEC, null)
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
