// Minimal container root filesystems for sandbox tests, assembled in a temp
// dir: a busybox-static tree (every applet a symlink to /bin/busybox) with a
// small /etc/passwd and /etc/group, an empty tree (no shell, no libc, no
// /etc: what "the agent needs nothing from the image" is tested against), and
// the cached Debian tree stacked under a throwaway overlay (never modified).
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import type { ExecutionContext } from 'ava'
import { tmpDir } from './procs.js'
import { debianRootfsDir } from '../../sandbox/image/debootstrap.js'

export const BUSYBOX = '/bin/busybox'
/** The demo's Debian tree (bin/demo/images.ts: bookworm minbase + python3), so a machine that ran the demo has it. */
export const DEBIAN_SPEC = { suite: 'bookworm', include: ['python3'] }
export const DEBIAN_CACHE = debianRootfsDir(DEBIAN_SPEC)

/** /bin/busybox exists and is static (busybox-static, not the dynamically linked busybox package). */
export const hasBusybox = (() => {
  try {
    // A static ELF has no PT_INTERP program header; `file` says so without us parsing ELF.
    return execFileSync('file', ['-L', BUSYBOX]).toString().includes('statically linked')
  } catch {
    return false
  }
})()

/** Users every test rootfs knows: root, alice (1000, also in staff 50), nobody. */
export const PASSWD = 'root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:Alice:/home/alice:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n'
export const GROUP = 'root:x:0:\nstaff:x:50:alice\nalice:x:1000:\nnogroup:x:65534:\n'

function skeleton(root: string): void {
  for (const d of ['proc', 'sys', 'dev', 'tmp', 'root', 'etc']) fs.mkdirSync(path.join(root, d), { recursive: true })
  fs.chmodSync(path.join(root, 'tmp'), 0o1777)
  fs.chmodSync(path.join(root, 'root'), 0o700)
}

/** A busybox rootfs at a fresh temp dir (removed by the test's teardown). */
export function busyboxRootfs(t: ExecutionContext): string {
  const root = path.join(tmpDir(t, 'strata-bb-'), 'rootfs')
  skeleton(root)
  for (const d of ['bin', 'sbin', 'usr/bin', 'usr/sbin']) fs.mkdirSync(path.join(root, d), { recursive: true })
  fs.copyFileSync(BUSYBOX, path.join(root, 'bin/busybox'))
  fs.chmodSync(path.join(root, 'bin/busybox'), 0o755)
  for (const applet of execFileSync(BUSYBOX, ['--list-full']).toString().split('\n')) {
    if (!applet || applet === 'bin/busybox') continue
    const dst = path.join(root, applet)
    if (!fs.existsSync(path.dirname(dst))) fs.mkdirSync(path.dirname(dst), { recursive: true })
    try { fs.symlinkSync('/bin/busybox', dst) } catch (e) { if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e }
  }
  fs.writeFileSync(path.join(root, 'etc/passwd'), PASSWD)
  fs.writeFileSync(path.join(root, 'etc/group'), GROUP)
  fs.mkdirSync(path.join(root, 'home/alice'), { recursive: true })
  fs.chownSync(path.join(root, 'home/alice'), 1000, 1000)
  fs.writeFileSync(path.join(root, 'root/secret'), 'for root only\n', { mode: 0o600 })
  return root
}

/** A rootfs with nothing in it but the mount points a runtime needs. */
export function emptyRootfs(t: ExecutionContext): string {
  const root = path.join(tmpDir(t, 'strata-empty-'), 'rootfs')
  skeleton(root)
  fs.rmdirSync(path.join(root, 'etc'))
  return root
}

/**
 * The cached Debian bookworm tree as the lower layer of an overlay whose upper
 * and work dirs live in a temp dir; unmounted by `cleanup` (call it after the
 * container is deleted). The cache itself is never written.
 */
export function debianRootfs(t: ExecutionContext): { rootfs: string; cleanup: () => void } {
  const dir = tmpDir(t, 'strata-deb-')
  const upper = path.join(dir, 'upper')
  const work = path.join(dir, 'work')
  const merged = path.join(dir, 'rootfs')
  for (const d of [upper, work, merged]) fs.mkdirSync(d)
  execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${DEBIAN_CACHE},upperdir=${upper},workdir=${work}`, merged])
  return {
    rootfs: merged,
    cleanup: () => {
      try { execFileSync('umount', [merged]) } catch { execFileSync('umount', ['-l', merged]) }
    },
  }
}
