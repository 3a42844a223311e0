// Where a mount point really is. The kernel mounts on what symlinks name, so a
// mount point given through one (`/mnt/data` -> `/srv/data`, a cluster
// directory reached through a link) is in /proc/self/mountinfo only by its
// real path: `fs mount LINK` failed 'not in the mount table after init' and
// left the mount behind, dead.

import fs from 'node:fs'
import path from 'node:path'

/**
 * The path the kernel's mount table will show for a mount on `p`. The mount point itself is
 * only readlink'ed (a mount root answers EINVAL without asking its daemon); its parents, which
 * belong to other filesystems, are realpath'ed as far as they exist.
 */
export function canonicalMountpoint(p: string, depth = 0): string {
  const abs = path.resolve(p)
  const parent = path.dirname(abs)
  if (parent === abs) return abs
  let target: string | undefined
  try {
    target = depth < 40 ? fs.readlinkSync(abs) : undefined
  } catch {
    // not a symlink (EINVAL), not there yet (ENOENT), unreadable: the name as it is
  }
  const dir = realExisting(parent)
  return target === undefined ? path.join(dir, path.basename(abs)) : canonicalMountpoint(path.resolve(dir, target), depth + 1)
}

/** realpath of the part of `d` that exists, the rest appended as it is. */
function realExisting(d: string): string {
  try {
    return fs.realpathSync(d)
  } catch {
    const up = path.dirname(d)
    return up === d ? d : path.join(realExisting(up), path.basename(d))
  }
}
