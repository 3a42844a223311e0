// A --readonly mount refuses every change with EROFS, directory locks
// (setxattr/removexattr of hf3fs.lock) included: a lock taken there blocked
// every other client's creates in the directory, and outlived the mount.
import test from 'ava'
import { findMount } from '../../../fs/fuse/mounts.js'
import { fuseSkipReason, ok, py, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

const SCRIPT = String.raw`
import errno, os, sys
def code(fn, *a):
    try:
        r = fn(*a)
        return 'ok' if r is None else 'value'
    except OSError as e:
        return errno.errorcode[e.errno]
op, d = sys.argv[1], sys.argv[2]
if op == 'lock': print(code(os.setxattr, d, 'hf3fs.lock', sys.argv[3].encode()))
elif op == 'remove': print(code(os.removexattr, d, 'hf3fs.lock'))
elif op == 'user': print(code(os.setxattr, d, 'user.x', b'1'))
elif op == 'get': print(code(os.getxattr, d, 'hf3fs.lock'))
elif op == 'create': print(code(lambda: os.close(os.open(os.path.join(d, sys.argv[3]), os.O_CREAT | os.O_WRONLY))))
`

t('a --readonly mount refuses hf3fs.lock set and remove with EROFS; the lock state is unchanged', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'rw' })
  const r = await c.mount({ name: 'ro', readonly: true })
  const run = async (...args: string[]) => {
    const res = await py(SCRIPT, args)
    ok(t, res, args.join(' '))
    return res.stdout.trim()
  }
  ok(t, await sh(`mkdir ${a.mnt}/ad`), 'mkdir')
  const ro = `${r.mnt}/ad`
  const rw = `${a.mnt}/ad`
  for (const action of ['try_lock', 'preempt_lock', 'unlock', 'clear']) t.is(await run('lock', ro, action), 'EROFS', action)
  t.is(await run('remove', ro), 'EROFS')
  t.is(await run('user', ro), 'EROFS', 'any setxattr is a change')
  t.is(await run('create', ro, 'x'), 'EROFS', 'as every other change')
  // the kernel knows it too (it showed rw, and statvfs had no ST_RDONLY)
  t.true(findMount(r.mnt)!.options.split(',').includes('ro'), `mount options: ${findMount(r.mnt)!.options}`)
  t.regex((await sh(`findmnt -no OPTIONS ${r.mnt}`)).stdout, /^ro,/)
  t.false(findMount(a.mnt)!.options.split(',').includes('ro'))
  t.is((await c.m.client().stat('/ad')).directory?.lock ?? null, null, 'no lock was taken')
  t.is(await run('create', rw, 'y'), 'ok', 'the writable mount is not blocked')
  // a lock held by the writable mount cannot be cleared from the read-only one, which still sees it
  t.is(await run('lock', rw, 'try_lock'), 'ok')
  t.is(await run('remove', ro), 'EROFS')
  t.is(await run('lock', ro, 'clear'), 'EROFS')
  t.is(await run('get', ro), 'value')
  t.truthy((await c.m.client().stat('/ad')).directory?.lock, 'still locked')
  t.is(await run('remove', rw), 'ok')
  t.is(await r.stop(), 0, r.log())
  t.is(await a.stop(), 0, a.log())
})
