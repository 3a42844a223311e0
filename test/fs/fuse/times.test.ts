// Times through a real mount (fs/fuse/times.ts, native/fuse/fuse-native.c
// change 6): 0 and 1 s are times, not "now"; times before 1970 and
// milliseconds survive a round trip; only the owner sets explicit times; and,
// with meta's default time granularity, a same-size rewrite through one mount
// is seen by the next open on another mount after the attr timeout (the
// kernel keeps a file's page cache across opens while mtime and size look
// unchanged).
import test from 'ava'
import { DEFAULT_META_SETTINGS } from '../../../fs/meta/config.js'
import { PY_EXPECT_ERR, fuseSkipReason, ok, py, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

t('explicit times: 0, 1 s, before 1970 and milliseconds round-trip; tar --mtime=@0 keeps 0; only the owner sets them, "now" needs write permission', async (tt) => {
  const c = await startFuseCluster(tt)
  const mnt = await c.mount()
  const nobody = await c.mount({ name: 'nobody', uid: 65534, gid: 65534, groups: [] })
  const r = await py(
    String.raw`
import os, sys, subprocess, errno, tarfile, io
${PY_EXPECT_ERR}
m = sys.argv[1]
f = os.path.join(m, 'f')
open(f, 'w').write('x')
for ns in [0, 1_000_000_000, 2_000_000_000, -1_000_000_000, -315_619_200_000_000_000, 1_262_304_000_123_000_000, -5_500_000_000]:
    os.utime(f, ns=(ns, ns))
    st = os.stat(f)
    assert (st.st_atime_ns, st.st_mtime_ns) == (ns, ns), (ns, st.st_atime_ns, st.st_mtime_ns)
subprocess.run(['touch', '-d', '@1', f], check=True)
assert os.stat(f).st_mtime_ns == 1_000_000_000, os.stat(f).st_mtime_ns
subprocess.run(['touch', '-d', '1969-12-31 23:59:59 UTC', f], check=True)
assert os.stat(f).st_mtime_ns == -1_000_000_000, os.stat(f).st_mtime_ns

# a reproducible archive: every entry at time 0
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode='w') as tf:
    ti = tarfile.TarInfo('r/a'); ti.size = 2; ti.mtime = 0; tf.addfile(ti, io.BytesIO(b'hi'))
open('/tmp/strata-times-test.tar', 'wb').write(buf.getvalue())
os.mkdir(os.path.join(m, 'x'))
subprocess.run(['tar', '-xf', '/tmp/strata-times-test.tar', '-C', os.path.join(m, 'x')], check=True)
os.unlink('/tmp/strata-times-test.tar')
assert os.stat(os.path.join(m, 'x', 'r', 'a')).st_mtime_ns == 0, os.stat(os.path.join(m, 'x', 'r', 'a')).st_mtime_ns

# on a mount that acts as uid 65534, root's world-writable file: "now" is allowed, an explicit time (1 s too) is not
g = os.path.join(m, 'g')
open(g, 'w').write('y')
os.chmod(g, 0o666)
ng = os.path.join(sys.argv[2], 'g')
os.utime(ng)
for when in [(1, 1), (0, 0), (2, 2)]:
    expect_err(errno.EPERM, os.utime, ng, when)
print('ok')
`,
    [mnt.mnt, nobody.mnt],
  )
  ok(tt, r, 'times')
  tt.is(r.stdout.trim(), 'ok')
  await nobody.stop()
  await mnt.stop()
})

t('a same-size rewrite through one mount is read by the next open on another mount after the attr timeout (default time granularity)', async (tt) => {
  // meta's own default, not the test clusters' usual setting: with whole seconds (3FS's) this failed
  const c = await startFuseCluster(tt, { meta: { timeGranularityMs: DEFAULT_META_SETTINGS.timeGranularityMs } })
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const r = await py(
    String.raw`
import os, sys, time
a, b = sys.argv[1], sys.argv[2]
bad = []
for i in range(5):
    name = 'f%d' % i
    open(os.path.join(a, name), 'w').write('XXXX')
    assert open(os.path.join(b, name)).read() == 'XXXX'
    # same size, same second: only the mtime's fraction tells the versions apart
    open(os.path.join(a, name), 'w').write('YYYY')
    time.sleep(1.3)
    got = open(os.path.join(b, name)).read()
    if got != 'YYYY':
        bad.append((name, got))
print(bad)
`,
    [a.mnt, b.mnt],
  )
  ok(tt, r, 'rewrite seen')
  tt.is(r.stdout.trim(), '[]')
  await a.stop()
  await b.stop()
})
