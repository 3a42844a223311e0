// A really full disk for tests: a size-limited tmpfs mounted for one test
// (unmounted and removed at its teardown), and a filler file that takes the
// last byte of it. Mounting needs root, as the suite runs.
import fs from 'node:fs'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import type { ExecutionContext } from 'ava'
import { tmpDir } from './procs.js'

/** A tmpfs of `size` (`16m`, …) mounted at a fresh directory for this test. */
export function smallTmpfs(t: ExecutionContext, size: string, prefix = 'strata-small-'): string {
  const dir = tmpDir(t, prefix)
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir])
  // teardowns run last-first: unmounted before the directory is removed
  t.teardown(() => execFileSync('umount', ['-l', dir]))
  return dir
}

/** Writes `dir/name` until the filesystem says ENOSPC; returns its path. */
export function fillDisk(dir: string, name = 'filler'): string {
  const file = path.join(dir, name)
  const fd = fs.openSync(file, 'w')
  const block = Buffer.alloc(64 * 1024, 7)
  try {
    for (;;) fs.writeSync(fd, block)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOSPC') throw e
  } finally {
    fs.closeSync(fd)
  }
  return file
}
