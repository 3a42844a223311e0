// The Debian rootfs cache's cleanup of interrupted builds: debootstrap mounts
// /proc and /sys inside the tree it builds, so a build killed midway leaves
// mounts there; the next build detaches them before it removes the tree.
import test from 'ava'
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { sweepStaleRootfsBuilds } from '../../../sandbox/image/index.js'
import { tmpDir } from '../../helpers/procs.js'

test('a killed build\'s directory is removed with its mounts detached, never removed through; live builds stay', async (t) => {
  const cache = tmpDir(t, 'strata-rootfs-cache-')
  // a pid that is surely gone: a child that already exited
  const dead = spawnSync('true').pid!
  const stale = path.join(cache, `debian-bookworm-0123456789abcdef.building-${dead}`)
  const proc = path.join(stale, 'proc')
  fs.mkdirSync(proc, { recursive: true })
  fs.writeFileSync(path.join(stale, 'half-built'), 'x')
  execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', proc])
  t.teardown(() => { spawnSync('umount', ['-l', proc]) })
  // what a removal through the mount would delete
  fs.writeFileSync(path.join(proc, 'precious'), 'y')
  // a handle on the mounted tmpfs's root: it still reaches the tree once the mount is detached
  const rootFd = fs.openSync(proc, 'r')
  t.teardown(() => fs.closeSync(rootFd))
  const live = path.join(cache, `debian-bookworm-0123456789abcdef.building-${process.pid}`)
  fs.mkdirSync(live)
  const finished = path.join(cache, 'debian-bookworm-0123456789abcdef')
  fs.mkdirSync(finished)

  sweepStaleRootfsBuilds(cache)
  t.false(fs.existsSync(stale))
  t.false(fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(proc), 'the mount is detached')
  // the detached tmpfs was not emptied: its file is still listed in it
  t.deepEqual(fs.readdirSync(`/proc/self/fd/${rootFd}`), ['precious'])
  t.true(fs.existsSync(live), 'this process\'s own build stays')
  t.true(fs.existsSync(finished), 'finished trees stay')
})
