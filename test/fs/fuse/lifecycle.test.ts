// The mount's lifecycle: `strata cluster up` mounts DIR/mnt and `cluster
// down` unmounts it (also after the daemon was SIGKILLed); `strata fs mount`
// / `fs umount`; a daemon that dies of an uncaught error unmounts first; a
// new daemon clears the dead mount a SIGKILLed one left.
import path from 'node:path'
import test from 'ava'
import { spawn } from 'node:child_process'
import { CLI, tmpDir, until } from '../../helpers/procs.js'
import { findMount, forceUnmount } from '../../../fs/fuse/mounts.js'
import { FUSE_FSTYPE } from '../../../fs/fuse/mounts.js'
import { fuseSkipReason, ok, run, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

const strata = (args: string[], env: NodeJS.ProcessEnv = {}) => run(process.execPath, [CLI, ...args], { env: { STRATA_LOG_LEVEL: 'error', ...env }, timeoutMs: 180_000 })

t('cluster up mounts DIR/mnt; fs mount/umount; cluster down clears a dead mount', async (t) => {
  const dir = path.join(tmpDir(t, 'strata-fuse-cli-'), 'c')
  const mnt = path.join(dir, 'mnt')
  const m2 = path.join(dir, 'm2')
  t.teardown(async () => {
    await strata(['cluster', 'down', '--dir', dir])
    for (const p of [mnt, m2]) if (findMount(p)) await forceUnmount(p)
  })
  const up = await strata(['cluster', 'up', '--dir', dir, '-q'])
  ok(t, up, 'cluster up')
  t.is(findMount(mnt)?.fstype, FUSE_FSTYPE)
  ok(t, await sh(`echo hello > ${mnt}/hello && mkdir ${mnt}/d && cat ${mnt}/hello`), 'use the cluster mount')
  // a second mount by hand
  const mount = await strata(['fs', 'mount', m2, '--cluster', dir, '--attr-timeout', '0', '--entry-timeout', '0'])
  ok(t, mount, 'fs mount')
  const pid = Number(mount.stdout.trim())
  t.true(pid > 0, mount.stdout)
  t.is(findMount(m2)?.fstype, FUSE_FSTYPE)
  const r = await sh(`cat ${m2}/hello`)
  t.is(r.stdout.trim(), 'hello')
  // refuses a second daemon on the same mount point
  const again = await strata(['fs', 'mount', m2, '--cluster', dir])
  t.is(again.code, 1)
  t.regex(again.stderr, /CLUSTER_RUNNING/)
  ok(t, await strata(['fs', 'umount', m2]), 'fs umount')
  t.falsy(findMount(m2))
  const none = await strata(['fs', 'umount', m2])
  t.regex(none.stderr, /NOT_FOUND/)
  // SIGKILL the cluster's daemon: a dead mount stays until cleared
  ok(t, await strata(['cluster', 'kill', '--dir', dir, '--node', 'fuse-1']), 'kill fuse-1')
  t.truthy(findMount(mnt), 'dead mount left by SIGKILL')
  const dead = await sh(`ls ${mnt} 2>&1 || true`)
  t.regex(dead.stdout, /not connected/)
  // cluster start brings it back (the new daemon clears the stale mount)
  ok(t, await strata(['cluster', 'start', '--dir', dir, '--node', 'fuse-1']), 'start fuse-1')
  t.is((await sh(`cat ${mnt}/hello`)).stdout.trim(), 'hello')
  ok(t, await strata(['cluster', 'kill', '--dir', dir, '--node', 'fuse-1']), 'kill fuse-1 again')
  ok(t, await strata(['cluster', 'down', '--dir', dir]), 'cluster down')
  t.falsy(findMount(mnt), 'cluster down cleared the dead mount')
  // up again (restart with saved configs) mounts again; down unmounts cleanly
  ok(t, await strata(['cluster', 'up', '--dir', dir, '-q']), 'cluster up again')
  t.is((await sh(`cat ${mnt}/hello`)).stdout.trim(), 'hello')
  ok(t, await strata(['cluster', 'down', '--dir', dir]), 'cluster down again')
  t.falsy(findMount(mnt))
})

t('a daemon that dies of an uncaught error unmounts; a new one clears what a SIGKILLed one left', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'crash', env: { STRATA_FUSE_TEST_CRASH_AFTER_MS: '1500' } })
  const code = await a.exited
  t.is(code, 70, a.log())
  t.falsy(findMount(a.mnt), 'no mount left after the crash')
  t.regex(a.log(), /uncaught exception/)
  // SIGKILL: the mount is left dead ...
  const b = await c.mount({ name: 'stale' })
  b.child.kill('SIGKILL')
  await b.exited
  t.truthy(findMount(b.mnt))
  // ... and the next daemon on that mount point clears it and mounts
  const b2 = await c.mount({ name: 'stale' })
  ok(t, await sh(`echo x > ${b2.mnt}/x && cat ${b2.mnt}/x`), 'remounted')
  t.regex(b2.log(), /clearing a stale FUSE mount/)
})

t('SIGTERM with files still open: lazy unmount, the buffered writes are flushed and the session closed', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'busy', periodicSyncMs: 0, unmountGraceMs: 1000 })
  // a writer that keeps its file open (and its cwd in the mount) with 300000 bytes in the write buffer
  const holder = spawn('python3', ['-u', '-c', `
import os, sys, time
os.chdir(sys.argv[1])
fd = os.open('held', os.O_CREAT | os.O_WRONLY)
os.write(fd, b'z' * 300000)
print('written', flush=True)
time.sleep(600)
`, a.mnt], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => holder.kill('SIGKILL'))
  await new Promise<void>((r) => holder.stdout.once('data', () => r()))
  const t0 = Date.now()
  const code = await a.stop()
  t.is(code, 0, a.log())
  t.log(`stopped in ${Date.now() - t0} ms`)
  // the daemon did not wait for the file to be closed: its holder (asleep for 10 min) is still there
  t.is(holder.exitCode, null, 'stopped while the file was still open')
  t.is(holder.signalCode, null)
  t.falsy(findMount(a.mnt))
  t.regex(a.log(), /detaching lazily|aborting the FUSE connection/)
  holder.kill('SIGKILL')
  // the bytes that were only in the daemon's write buffer reached storage, and close fixed the length
  const b = await c.mount({ name: 'after' })
  await until(async () => (await sh(`stat -c %s ${b.mnt}/held`)).stdout.trim() === '300000', 20_000, 'length 300000')
  const r = await sh(`python3 -c "import sys; d=open(sys.argv[1],'rb').read(); print(len(d), d == b'z' * 300000)" ${b.mnt}/held`)
  t.is(r.stdout.trim(), '300000 True')
})
