// 3fs-virt/rm-rf makes the kernel drop the removed name with an rmdir/unlink
// through the mount (ops.ts dropFromKernel). The kernel follows symlinks by
// host paths, so that call must never leave the mount: here the ops serve a
// plain host directory whose "d" is a host symlink to another filesystem
// (/dev/shm), as a DFS symlink would look to the kernel, and the host file
// there must survive.
import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { createLogger } from '../../../fs/common/log.js'
import { FileSystem } from '../../../fs/client/file/file-system.js'
import { StrataFuseOps } from '../../../fs/fuse/ops.js'
import { startMetaCluster } from '../../helpers/meta-cluster.js'
import { tmpDir } from '../../helpers/procs.js'

const shm = fs.existsSync('/dev/shm') && fs.statSync('/dev/shm').dev !== fs.statSync(process.env.TMPDIR ?? '/tmp').dev

;(shm ? test : test.skip)('rm-rf: the kernel-cache drop never follows a path off the mount', async (t) => {
  const m = await startMetaCluster(t)
  const f = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], periodicSyncMs: 0, metaRetry: { totalMs: 30_000 } })
  t.teardown(() => f.shutdown())
  await f.mkdir('/d')
  await f.writeFile('/d/victim', Buffer.from('dfs'))
  // the "mount": d leads to another filesystem, where a host file of the same name lives
  const mnt = tmpDir(t, 'strata-rmrf-drop-')
  const elsewhere = fs.mkdtempSync('/dev/shm/strata-rmrf-drop-')
  t.teardown(() => fs.rmSync(elsewhere, { recursive: true, force: true }))
  fs.writeFileSync(path.join(elsewhere, 'victim'), 'host')
  fs.symlinkSync(elsewhere, path.join(mnt, 'd'))
  const ops = new StrataFuseOps({ fs: f, mountpoint: mnt, kernelInvalidate: true, attrTimeoutMs: 1000, uid: 0, gid: 0, log: createLogger('test', () => {}) })
  await ops.symlink(path.join(mnt, 'd', 'victim'), '/3fs-virt/rm-rf/x')
  await t.throwsAsync(f.lstat('/d/victim'), { code: 'META_NOT_FOUND' } as never, 'removed in the DFS')
  t.is(fs.readFileSync(path.join(elsewhere, 'victim'), 'utf8'), 'host', 'the host file is untouched')
})
