// POSIX operations through a FUSE mount, driven from child processes.
import test from 'ava'
import fs from 'node:fs'
import { fuseSkipReason, ok, py, sh, startFuseCluster, PY_EXPECT_ERR } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

// Every check in one python process; prints "ok" or raises.
const POSIX = String.raw`
import errno, os, stat, sys, time
m = sys.argv[1]
${PY_EXPECT_ERR}

d = os.path.join(m, 'd')
os.mkdir(d, 0o755)
assert stat.S_ISDIR(os.stat(d).st_mode)
expect_err(errno.EEXIST, os.mkdir, d)

# create, write, read back, size
f = os.path.join(d, 'f')
data = os.urandom(300000)
with open(f, 'wb') as fh:
    fh.write(data)
assert os.stat(f).st_size == len(data), os.stat(f).st_size
with open(f, 'rb') as fh:
    assert fh.read() == data
# pwrite in the middle, pread
fd = os.open(f, os.O_RDWR)
os.pwrite(fd, b'XYZ', 1000)
assert os.pread(fd, 5, 999) == data[999:1000] + b'XYZ' + data[1003:1004]
os.fsync(fd)
os.close(fd)
# append
with open(f, 'ab') as fh:
    fh.write(b'tail')
assert os.stat(f).st_size == len(data) + 4
with open(f, 'rb') as fh:
    fh.seek(len(data))
    assert fh.read() == b'tail'
# O_EXCL on an existing name
expect_err(errno.EEXIST, os.open, f, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
# truncate (path and fd), O_TRUNC
os.truncate(f, 10)
assert os.stat(f).st_size == 10
with open(f, 'r+b') as fh:
    fh.truncate(100000)
assert os.stat(f).st_size == 100000
with open(f, 'rb') as fh:
    b = fh.read()
    assert b[:10] == data[:10] and b[10:] == bytes(100000 - 10)
with open(f, 'wb') as fh:
    fh.write(b'new')
assert open(f, 'rb').read() == b'new'

# readdir
for i in range(20):
    open(os.path.join(d, 'n%02d' % i), 'w').close()
names = sorted(os.listdir(d))
assert names == sorted(['f'] + ['n%02d' % i for i in range(20)]), names

# rename: file, over a file, directory, into its own descendant
os.rename(os.path.join(d, 'n00'), os.path.join(d, 'm00'))
assert not os.path.exists(os.path.join(d, 'n00')) and os.path.exists(os.path.join(d, 'm00'))
os.rename(os.path.join(d, 'n01'), os.path.join(d, 'n02'))
assert not os.path.exists(os.path.join(d, 'n01'))
os.mkdir(os.path.join(d, 'sub'))
os.mkdir(os.path.join(d, 'sub', 'deeper'))
open(os.path.join(d, 'sub', 'deeper', 'x'), 'w').write('x')
os.rename(os.path.join(d, 'sub'), os.path.join(m, 'sub2'))
assert open(os.path.join(m, 'sub2', 'deeper', 'x')).read() == 'x'
expect_err(errno.EINVAL, os.rename, os.path.join(m, 'sub2'), os.path.join(m, 'sub2', 'deeper', 'y'))
os.mkdir(os.path.join(m, 'full'))
open(os.path.join(m, 'full', 'a'), 'w').close()
expect_err(errno.ENOTEMPTY, os.rename, os.path.join(m, 'sub2', 'deeper'), os.path.join(m, 'full'))
expect_err(errno.ENOTDIR, os.rename, os.path.join(m, 'sub2'), os.path.join(d, 'f'))

# unlink, rmdir
os.unlink(os.path.join(d, 'm00'))
expect_err(errno.ENOENT, os.stat, os.path.join(d, 'm00'))
expect_err(errno.ENOTEMPTY, os.rmdir, os.path.join(m, 'full'))
os.unlink(os.path.join(m, 'full', 'a'))
os.rmdir(os.path.join(m, 'full'))
expect_err(errno.ENOENT, os.stat, os.path.join(m, 'full'))
expect_err(errno.EISDIR, os.unlink, d)
expect_err(errno.ENOTDIR, os.rmdir, f)

# symlinks
os.symlink('f', os.path.join(d, 'ln'))
assert os.readlink(os.path.join(d, 'ln')) == 'f'
assert open(os.path.join(d, 'ln'), 'rb').read() == b'new'
assert stat.S_ISLNK(os.lstat(os.path.join(d, 'ln')).st_mode)
os.symlink('/nonexistent/target', os.path.join(d, 'dangling'))
assert os.readlink(os.path.join(d, 'dangling')) == '/nonexistent/target'
expect_err(errno.ENOENT, os.stat, os.path.join(d, 'dangling'))
os.unlink(os.path.join(d, 'ln'))
assert os.path.exists(f)

# hard links
os.link(f, os.path.join(d, 'hl'))
# each name is its own kernel node (libfuse 2, no use_ino): f's attributes were cached
# by the kernel just before, for the attr timeout (1 ms here); the new name's are fresh
assert os.stat(os.path.join(d, 'hl')).st_nlink == 2
time.sleep(0.05)
assert os.stat(f).st_nlink == 2
assert open(os.path.join(d, 'hl'), 'rb').read() == b'new'
os.unlink(f)
assert open(os.path.join(d, 'hl'), 'rb').read() == b'new'
assert os.stat(os.path.join(d, 'hl')).st_nlink == 1
expect_err(errno.EPERM, os.link, d, os.path.join(m, 'dirlink'))

# chmod, chown, utimes
g = os.path.join(d, 'hl')
os.chmod(g, 0o640)
assert stat.S_IMODE(os.stat(g).st_mode) == 0o640
os.chown(g, 1234, 5678)
st = os.stat(g)
assert (st.st_uid, st.st_gid) == (1234, 5678), (st.st_uid, st.st_gid)
os.chown(g, -1, 42)
assert (os.stat(g).st_uid, os.stat(g).st_gid) == (1234, 42)
# the kernel passes (uid_t)-1 for the id chown leaves alone: never sent to meta as an owner
os.chown(g, 4321, -1)
assert (os.stat(g).st_uid, os.stat(g).st_gid) == (4321, 42), (os.stat(g).st_uid, os.stat(g).st_gid)
os.lchown(os.path.join(d, 'dangling'), 7, 8)
assert os.lstat(os.path.join(d, 'dangling')).st_uid == 7
os.utime(g, (1500000000, 1500000000))
assert int(os.stat(g).st_mtime) == 1500000000, os.stat(g).st_mtime
os.utime(g)
assert abs(os.stat(g).st_mtime - __import__('time').time()) < 60
# atime and mtime apart (what cp -a and tar -x set), and one of them alone (touch -m / -a: UTIME_OMIT for the other)
os.utime(g, (1400000000, 1500000000))
time.sleep(0.05)
assert (int(os.stat(g).st_atime), int(os.stat(g).st_mtime)) == (1400000000, 1500000000), (os.stat(g).st_atime, os.stat(g).st_mtime)
__import__('subprocess').run(['touch', '-m', '-d', '@1300000000', g], check=True)
time.sleep(0.05)
assert (int(os.stat(g).st_atime), int(os.stat(g).st_mtime)) == (1400000000, 1300000000), (os.stat(g).st_atime, os.stat(g).st_mtime)
__import__('subprocess').run(['touch', '-a', '-d', '@1200000000', g], check=True)
time.sleep(0.05)
assert (int(os.stat(g).st_atime), int(os.stat(g).st_mtime)) == (1200000000, 1300000000), (os.stat(g).st_atime, os.stat(g).st_mtime)

# statfs
sv = os.statvfs(m)
assert sv.f_blocks > 0 and sv.f_bsize > 0 and sv.f_namemax == 255

# access
assert os.access(g, os.R_OK | os.W_OK)
assert not os.access(g, os.X_OK)
assert os.access(d, os.X_OK)

# xattrs: only hf3fs.lock on directories
expect_err(errno.EOPNOTSUPP, os.setxattr, g, 'user.x', b'1')
expect_err(errno.EOPNOTSUPP, os.setxattr, d, 'hf3fs.other', b'1')
expect_err(errno.ENODATA, os.getxattr, d, 'user.x')
expect_err(errno.ENODATA, os.getxattr, d, 'hf3fs.lock')
assert os.listxattr(d) == []

# the virtual directory
assert os.path.isdir(os.path.join(m, '3fs-virt'))
assert '3fs-virt' in os.listdir(m)
assert os.listdir(os.path.join(m, '3fs-virt')) == ['rm-rf']
expect_err(errno.EPERM, os.mkdir, os.path.join(m, '3fs-virt', 'x'))

# mknod of a regular file; a fifo is not supported
os.mknod(os.path.join(d, 'node'), 0o644 | stat.S_IFREG)
assert os.stat(os.path.join(d, 'node')).st_size == 0
expect_err(errno.ENOSYS, os.mkfifo, os.path.join(d, 'fifo'))
print('ok')
`

t('basic POSIX operations through the mount', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const r = await py(POSIX, [a.mnt])
  ok(t, r, 'posix checks')
  t.is(r.stdout.trim(), 'ok')
  // shell tools: ls -l, du, df, stat, find
  const s = await sh(`cd ${a.mnt} && mkdir -p x/y && echo hello > x/y/z && ls -la x/y && df -h . && find x -type f && stat -c %s x/y/z && cat x/y/z`)
  ok(t, s, 'shell tools')
  t.regex(s.stdout, /hello/)
  // the kernel's readahead for the mount is maxReadahead (1 MiB by default), not the 128 KiB
  // the kernel keeps when only libfuse's max_readahead asks for more
  const { findMount } = await import('../../../fs/fuse/mounts.js')
  const m = findMount(a.mnt)!
  t.is(fs.readFileSync(`/sys/class/bdi/${m.major}:${m.minor}/read_ahead_kb`, 'utf8').trim(), String(1024))
  const code = await a.stop()
  t.is(code, 0, a.log())
  t.falsy((await import('../../../fs/fuse/mounts.js')).findMount(a.mnt), 'unmounted on SIGTERM')
})
