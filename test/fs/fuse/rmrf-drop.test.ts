// 3fs-virt/rm-rf makes the kernel drop the removed name with an rmdir/unlink
// through the mount (ops.ts dropFromKernel). The kernel follows symlinks by
// host paths, so that call must never leave the mount: here the ops serve a
// plain host directory whose "d" is a host symlink to another filesystem
// (/dev/shm), as a DFS symlink would look to the kernel, and the host file
// there must survive.
import fs from 'node:fs'
import path from 'node:path'
import test, { type ExecutionContext } from 'ava'
import { createLogger } from '../../../fs/common/log.js'
import { FileSystem } from '../../../fs/client/file/file-system.js'
import { StrataFuseOps } from '../../../fs/fuse/ops.js'
import { startMetaCluster } from '../../helpers/meta-cluster.js'
import { tmpDir } from '../../helpers/procs.js'

const shm = fs.existsSync('/dev/shm') && fs.statSync('/dev/shm').dev !== fs.statSync(process.env.TMPDIR ?? '/tmp').dev

/** A meta cluster with /d/victim in its DFS, and a client of it. */
async function dfsWithVictim(t: ExecutionContext): Promise<FileSystem> {
  const m = await startMetaCluster(t)
  const f = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], periodicSyncMs: 0, metaRetry: { totalMs: 30_000 } })
  t.teardown(() => f.shutdown())
  await f.mkdir('/d')
  await f.writeFile('/d/victim', Buffer.from('dfs'))
  return f
}

/** The FUSE ops over `f` as a daemon mounted at `mnt` runs them, the kernel-cache drop on. */
function rmrfOps(f: FileSystem, mnt: string): StrataFuseOps {
  return new StrataFuseOps({ fs: f, mountpoint: mnt, kernelInvalidate: true, attrTimeoutMs: 1000, uid: 0, gid: 0, log: createLogger('test', () => {}) })
}

;(shm ? test : test.skip)('rm-rf: the kernel-cache drop never follows a path off the mount', async (t) => {
  const f = await dfsWithVictim(t)
  // the "mount": d leads to another filesystem, where a host file of the same name lives
  const mnt = tmpDir(t, 'strata-rmrf-drop-')
  const elsewhere = fs.mkdtempSync('/dev/shm/strata-rmrf-drop-')
  t.teardown(() => fs.rmSync(elsewhere, { recursive: true, force: true }))
  fs.writeFileSync(path.join(elsewhere, 'victim'), 'host')
  fs.symlinkSync(elsewhere, path.join(mnt, 'd'))
  const ops = rmrfOps(f, mnt)
  // the daemon records its FUSE mount's device; here the "mount" is the host directory
  ops.setMountDevice(fs.statSync(mnt, { bigint: true }).dev)
  await ops.symlink(path.join(mnt, 'd', 'victim'), '/3fs-virt/rm-rf/x')
  await t.throwsAsync(f.lstat('/d/victim'), { code: 'META_NOT_FOUND' } as never, 'removed in the DFS')
  t.is(fs.readFileSync(path.join(elsewhere, 'victim'), 'utf8'), 'host', 'the host file is untouched')
})

// A stop with files open detaches the mount lazily while the daemon still serves them, and a mount
// point can be covered by another mount: the path is then a host directory on another device than
// the FUSE mount's, and a host file with the removed name must survive. The device the drop checks is
// the one recorded at mount time, not whatever the mount point is now.
;(shm ? test : test.skip)('rm-rf: the kernel-cache drop removes nothing once the mount point is no longer the FUSE mount', async (t) => {
  const f = await dfsWithVictim(t)
  // what the mount point shows now: a host directory with a file of the same name
  const mnt = tmpDir(t, 'strata-rmrf-drop-')
  fs.mkdirSync(path.join(mnt, 'd'))
  fs.writeFileSync(path.join(mnt, 'd', 'victim'), 'host')
  const ops = rmrfOps(f, mnt)
  // the FUSE mount the daemon made: another device (here /dev/shm's stands for its 0:N)
  ops.setMountDevice(fs.statSync('/dev/shm', { bigint: true }).dev)
  await ops.symlink(path.join(mnt, 'd', 'victim'), '/3fs-virt/rm-rf/x')
  await t.throwsAsync(f.lstat('/d/victim'), { code: 'META_NOT_FOUND' } as never, 'removed in the DFS')
  t.is(fs.readFileSync(path.join(mnt, 'd', 'victim'), 'utf8'), 'host', 'the host file under the mount point is untouched')
})

// What the kernel was told about each path (ops.ts `reported`) must go with a tree rm-rf removes,
// also when the kernel no longer has the tree's names cached (then its drop never comes back as an
// rmdir here): those paths stayed until reportedPathsMax pushed them out, one per path ever listed.
test('rm-rf forgets what the kernel was told about the removed tree: as many paths kept after 2N as after N', async (t) => {
  const m = await startMetaCluster(t)
  const f = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], periodicSyncMs: 0, metaRetry: { totalMs: 30_000 } })
  t.teardown(() => f.shutdown())
  const mnt = tmpDir(t, 'strata-rmrf-forget-')
  // no kernel drop: what a daemon does when the kernel has let the names go
  const ops = new StrataFuseOps({ fs: f, mountpoint: mnt, attrTimeoutMs: 1000, uid: 0, gid: 0, log: createLogger('test', () => {}) })
  await ops.getattr('/')
  const base = ops.stats().reportedPaths
  const treeListedAndRemoved = async (n: number, name: string) => {
    await f.mkdir(`/${name}`)
    for (let i = 0; i < n; i++) await f.writeFile(`/${name}/f${i}`, Buffer.from('x'))
    await ops.getattr(`/${name}`)
    for (const e of (await ops.readdir(`/${name}`)).names) await ops.getattr(`/${name}/${e}`)
    t.true(ops.stats().reportedPaths >= base + n, 'the kernel was told of every file')
    await ops.symlink(path.join(mnt, name), `/3fs-virt/rm-rf/${name}`)
    await t.throwsAsync(f.lstat(`/${name}`), { code: 'META_NOT_FOUND' } as never)
    return ops.stats().reportedPaths
  }
  const N = 20
  const afterN = await treeListedAndRemoved(N, 'a')
  const after2N = await treeListedAndRemoved(2 * N, 'b')
  t.is(afterN, base)
  t.is(after2N, base)
})
