// Mounts a stored image the way a node will: every layer blob as a
// file-backed EROFS mount, stacked with a read-only overlayfs (lowest layer
// last in lowerdir). Blobs are copied out of the DFS to local files first.
// Everything is unmounted at teardown.
import fs from 'node:fs'
import path from 'node:path'
import type { ExecutionContext } from 'ava'
import { MNT, MS, native } from '../../fs/common/native.js'
import type { ImageStore } from '../../sandbox/image/store.js'
import type { ImageManifest } from '../../sandbox/image/types.js'

function umount(mp: string): void {
  try {
    native().umount2(mp, 0)
  } catch {
    try {
      native().umount2(mp, MNT.DETACH)
    } catch {
      // not mounted
    }
  }
}

/** Mounts `m`'s layers under `dir`; returns the merged root (the single layer's mount for a one-layer image). */
export async function mountImage(t: ExecutionContext, store: ImageStore, m: ImageManifest, dir: string): Promise<string> {
  const mounts: string[] = []
  t.teardown(() => {
    for (const mp of mounts.reverse()) umount(mp)
  })
  const lowers: string[] = []
  for (const [i, l] of m.layers.entries()) {
    const file = path.join(dir, `layer-${i}.erofs`)
    await store.copyBlobToFile(l.digest, file)
    const mp = path.join(dir, `l${i}`)
    fs.mkdirSync(mp)
    native().mount(file, mp, 'erofs', MS.RDONLY, null)
    mounts.push(mp)
    lowers.push(mp)
  }
  if (lowers.length === 1) return lowers[0]!
  const merged = path.join(dir, 'merged')
  fs.mkdirSync(merged)
  native().mount('overlay', merged, 'overlay', MS.RDONLY, `lowerdir=${[...lowers].reverse().join(':')}`)
  mounts.push(merged)
  return merged
}
