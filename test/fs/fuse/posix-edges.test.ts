// POSIX edge cases a demanding program hits, through real mounts driven from
// child processes: open files whose names another client changes, data a
// process still holds when the mount is stopped, set-group-id bits of another group's files.
import test from 'ava'
import { spawn } from 'node:child_process'
import { PY_EXPECT_ERR, fuseSkipReason, ok, py, run, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

// argv: mount A, mount B (attr and entry timeouts of 1 ms: the kernel asks the daemon every time)
const OPEN_FILE_RENAMED_ELSEWHERE = String.raw`
import os, sys
a, b = sys.argv[1], sys.argv[2]

# a writer and a reader on A; B renames the file away and puts a 5-byte file at its name
fd = os.open(os.path.join(a, 'f'), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'x' * 1000)
r = os.open(os.path.join(a, 'f'), os.O_RDONLY)
assert os.read(r, 10) == b'x' * 10
os.rename(os.path.join(b, 'f'), os.path.join(b, 'g'))
with open(os.path.join(b, 'f'), 'wb') as fh:
    fh.write(b'other')
# A reads on past what its kernel knows: the kernel asks for the size of the open file
# (GETATTR with its handle), which must be the open file's, not the 5 bytes of the name's new file
os.write(fd, b'y' * 1000)
got = os.pread(r, 4096, 0)
assert got == b'x' * 1000 + b'y' * 1000, ('read through the reader', len(got), got[:8])
os.write(fd, b'z' * 1000)
got = os.pread(fd, 4096, 0)
assert got == b'x' * 1000 + b'y' * 1000 + b'z' * 1000, ('read through the writer', len(got))
os.close(fd)
os.close(r)
with open(os.path.join(b, 'g'), 'rb') as fh:
    assert fh.read() == b'x' * 1000 + b'y' * 1000 + b'z' * 1000
print('ok')
`

t('a read of an open file asks for its own size when another client renamed it and put another file at its name', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const r = await py(OPEN_FILE_RENAMED_ELSEWHERE, [a.mnt, b.mnt])
  ok(t, r, 'open file renamed elsewhere')
  t.is(r.stdout.trim(), 'ok')
})

// argv: mount; writes through a shared mapping, never msyncs, prints "ready" and waits to be killed
const DIRTY_MAPPING = String.raw`
import mmap, os, sys, time
fd = os.open(os.path.join(sys.argv[1], 'mapped'), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, 65536)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[100:110] = b'MAPPED-ONE'
m[65000:65010] = b'MAPPED-TWO'
print('ready', flush=True)
time.sleep(600)
`

t('stopping a mount keeps what a process wrote through a shared mapping it still holds (no msync)', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const holder = spawn('python3', ['-c', DIRTY_MAPPING, a.mnt], { stdio: ['ignore', 'pipe', 'pipe'] })
  const gone = new Promise<void>((r) => holder.once('exit', () => r()))
  t.teardown(async () => {
    holder.kill('SIGKILL')
    await gone
  })
  let err = ''
  holder.stderr!.on('data', (d: Buffer) => (err += d.toString()))
  await new Promise<void>((resolve, reject) => {
    holder.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve())
    holder.once('exit', (code) => reject(new Error(`the mapping's holder exited ${code}: ${err}`)))
  })
  // the holder keeps the file open and mapped: the stop waits its grace period, then detaches
  t.is(await a.stop(), 0, a.log())
  holder.kill('SIGKILL')
  await gone
  const b = await c.mount({ name: 'b' })
  const r = await py(`import sys; d = open(sys.argv[1] + '/mapped', 'rb').read(); print(len(d), d[100:110].decode(), d[65000:65010].decode())`, [b.mnt])
  ok(t, r, 'read back on a fresh mount')
  t.is(r.stdout.trim(), '65536 MAPPED-ONE MAPPED-TWO')
})

// argv: mount A (attributes cached 1 ms, names 1 s: the kernel keeps each name's inode and asks
// for its attributes by node id), mount B. B changes what type of object is at names A's kernel holds.
const TYPE_CHANGED_ELSEWHERE = String.raw`
import errno, os, sys
a, b = sys.argv[1], sys.argv[2]
A = lambda n: os.path.join(a, n)
B = lambda n: os.path.join(b, n)
${PY_EXPECT_ERR}

# a file becomes a directory: stat answers the directory (was EIO: the kernel marked the inode bad)
open(A('f1'), 'w').close(); os.stat(A('f1'))
os.unlink(B('f1')); os.mkdir(B('f1'))
expect_err(errno.EPERM, os.link, A('f1'), A('g1'))
assert os.path.isdir(A('f1')) and os.listdir(A('f1')) == []

# a directory becomes a file
os.mkdir(A('d2')); os.stat(A('d2'))
os.rmdir(B('d2')); open(B('d2'), 'w').close()
assert os.path.isfile(A('d2'))
os.link(A('d2'), A('g2'))
assert os.stat(B('g2')).st_ino == os.stat(B('d2')).st_ino

# link of a file another client replaced by a symlink, and the reverse: the link is made and
# link() succeeds (was EIO after making it: the new name's type differed from the kernel's)
open(A('f3'), 'w').close(); os.stat(A('f3'))
os.unlink(B('f3')); os.symlink('target3', B('f3'))
os.link(A('f3'), A('g3'))
assert os.readlink(B('g3')) == 'target3' and os.readlink(A('g3')) == 'target3'
os.symlink('target4', A('f4')); os.lstat(A('f4'))
os.unlink(B('f4')); open(B('f4'), 'w').close()
os.link(A('f4'), A('g4'))
assert os.path.isfile(A('g4')) and not os.path.islink(A('g4'))
assert os.stat(B('g4')).st_ino == os.stat(B('f4')).st_ino

# open of a name A's kernel holds as a file, now a directory, opens the directory (was EISDIR),
# and the reverse opens the file (was ENOTDIR)
open(A('f5'), 'w').close(); os.stat(A('f5'))
os.unlink(B('f5')); os.mkdir(B('f5')); open(B('f5/x'), 'w').close()
os.close(os.open(A('f5'), os.O_RDONLY))
assert os.listdir(A('f5')) == ['x']
os.mkdir(A('d6')); os.stat(A('d6'))
os.rmdir(B('d6'))
with open(B('d6'), 'wb') as fh:
    fh.write(b'six')
with open(A('d6'), 'rb') as fh:
    assert fh.read() == b'six'
print('ok')
`

t('a name another client gave another file type answers with the new type, never EIO (stat, link)', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a', attrTimeout: 0.001, entryTimeout: 1 })
  const b = await c.mount({ name: 'b' })
  const r = await py(TYPE_CHANGED_ELSEWHERE, [a.mnt, b.mnt])
  ok(t, r, 'type changed elsewhere')
  t.is(r.stdout.trim(), 'ok')
})

// argv: mount A, mount B. A process on A works in a directory (its cwd and an O_DIRECTORY
// descriptor) that B renames, moves a directory above, and finally replaces by a file.
const HELD_DIR_CHANGED_ELSEWHERE = String.raw`
import errno, os, stat, sys, time
a, b = sys.argv[1], sys.argv[2]
A = lambda n: os.path.join(a, n)
B = lambda n: os.path.join(b, n)
${PY_EXPECT_ERR}

os.makedirs(A('top/d')); open(A('top/d/f'), 'w').close()
os.chdir(A('top/d'))
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
ino = os.fstat(fd).st_ino

def same_dir(what, *expect):
    assert stat.S_ISDIR(os.fstat(fd).st_mode) and os.fstat(fd).st_ino == ino, (what, 'fstat', os.fstat(fd))
    assert os.stat('.').st_ino == ino, (what, 'stat .')
    assert sorted(os.listdir('.')) == sorted(expect), (what, 'ls .', os.listdir('.'))
    assert sorted(os.listdir(fd)) == sorted(expect), (what, 'listdir(fd)', os.listdir(fd))

# B renames the directory: the cwd and the descriptor follow it (were ENOENT)
os.rename(B('top/d'), B('top/e'))
same_dir('renamed', 'f')
os.close(os.open('g', os.O_CREAT | os.O_WRONLY, 0o644))
os.mkdir('sub', dir_fd=fd)
os.close(os.open('h', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
with open('f', 'w') as fh:
    fh.write('via cwd')
assert sorted(os.listdir(B('top/e'))) == ['f', 'g', 'h', 'sub'], os.listdir(B('top/e'))
with open(B('top/e/f')) as fh:
    assert fh.read() == 'via cwd'
same_dir('after changes', 'f', 'g', 'h', 'sub')
os.unlink('g'); os.rmdir('sub'); os.rename('h', 'h2')
same_dir('after removals', 'f', 'h2')

# B moves a directory above it
os.rename(B('top'), B('top2'))
same_dir('parent moved', 'f', 'h2')
os.mkdir('sub2')
assert sorted(os.listdir(B('top2/e'))) == ['f', 'h2', 'sub2']
# once A's kernel looks the old name up again (its 1 s entry timeout), the name is gone, and the
# directory held below it is still the one listed
time.sleep(1.2)
expect_err(errno.ENOENT, os.stat, A('top'))
same_dir('old name looked up', 'f', 'h2', 'sub2')

# B replaces the directory by a file at its (new) name: the directory still lists (was EIO)
os.rename(B('top2/e'), B('kept'))
with open(B('top2/e'), 'w') as fh:
    fh.write('a file')
same_dir('moved away, a file at its name', 'f', 'h2', 'sub2')
os.close(os.open('late', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
assert sorted(os.listdir(B('kept'))) == ['f', 'h2', 'late', 'sub2']

# B removes it: clean errors, never EIO
for n in os.listdir(B('kept')):
    (os.rmdir if n == 'sub2' else os.unlink)(B('kept/' + n))
os.rmdir(B('kept'))
for fn, args in [(os.listdir, ('.',)), (os.fstat, (fd,)), (os.stat, ('.',)), (os.open, ('x', os.O_CREAT | os.O_WRONLY)), (os.mkdir, ('y',))]:
    try:
        fn(*args)
    except OSError as e:
        assert e.errno in (errno.ENOENT, errno.ESTALE), (fn.__name__, e)
os.close(fd)
os.chdir('/')
with open(A('top2/e')) as fh:
    assert fh.read() == 'a file'
print('ok')
`

// argv: mount A, mount B. B moves away a directory A holds open and puts a file at its name.
const HELD_DIR_REPLACED_BY_FILE = String.raw`
import os, stat, sys, time
a, b = sys.argv[1], sys.argv[2]
A = lambda n: os.path.join(a, n)
B = lambda n: os.path.join(b, n)

os.mkdir(A('r')); open(A('r/x'), 'w').close()
fd = os.open(A('r'), os.O_RDONLY | os.O_DIRECTORY)
os.chdir(A('r'))
os.rename(B('r'), B('r-kept'))
with open(B('r'), 'w') as fh:
    fh.write('file')
# within A's 1 s entry timeout its kernel still has the name as the directory
assert stat.S_ISDIR(os.stat(A('r')).st_mode), os.stat(A('r'))
# once it looks the name up again, the name is the file, and the directory held open keeps its own
# node (before: the name went on showing the directory while it was open here, as the kernel would
# otherwise have been told "a file" for the directory's node and marked it bad)
time.sleep(1.2)
with open(A('r')) as fh:
    assert fh.read() == 'file'
assert stat.S_ISREG(os.stat(A('r')).st_mode), os.stat(A('r'))
assert os.listdir(fd) == ['x'] and os.listdir('.') == ['x'], (os.listdir(fd), os.listdir('.'))
assert stat.S_ISDIR(os.fstat(fd).st_mode)
os.close(os.open('y', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
assert sorted(os.listdir(B('r-kept'))) == ['x', 'y']
os.close(fd)
os.chdir('/')
print('ok')
`

t('a working directory and a directory descriptor follow their directory when another client renames or replaces it', async (t) => {
  const c = await startFuseCluster(t)
  // names cached 1 s (the kernel keeps the cwd's node and asks by node id), attributes 1 ms
  const a = await c.mount({ name: 'a', attrTimeout: 0.001, entryTimeout: 1 })
  const b = await c.mount({ name: 'b' })
  const r = await py(HELD_DIR_CHANGED_ELSEWHERE, [a.mnt, b.mnt])
  ok(t, r, 'held directory changed elsewhere')
  t.is(r.stdout.trim(), 'ok')
  const f = await py(HELD_DIR_REPLACED_BY_FILE, [a.mnt, b.mnt])
  ok(t, f, 'held directory replaced by a file')
  t.is(f.stdout.trim(), 'ok')
})

// argv: mount A, mount B. B moves away a directory A holds (a working directory and a descriptor)
// and puts a new directory at its name, then does the same to a working directory with a file.
const HELD_DIR_NAME_REUSED = String.raw`
import os, stat, sys, time
a, b = sys.argv[1], sys.argv[2]
A = lambda n: os.path.join(a, n)
B = lambda n: os.path.join(b, n)

os.makedirs(A('p/d')); open(A('p/d/old'), 'w').close()
os.chdir(A('p/d'))
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
ino = os.fstat(fd).st_ino

def still_old(what, *expect):
    assert os.stat('.').st_ino == ino, (what, 'stat .', os.stat('.').st_ino, ino)
    assert os.fstat(fd).st_ino == ino, (what, 'fstat', os.fstat(fd).st_ino, ino)
    assert sorted(os.listdir('.')) == sorted(expect), (what, 'ls .', os.listdir('.'))
    assert sorted(os.listdir(fd)) == sorted(expect), (what, 'listdir(fd)', os.listdir(fd))

os.rename(B('p/d'), B('p/moved'))
os.mkdir(B('p/d')); open(B('p/d/new'), 'w').close()
# A's kernel looks the name up again (its 1 s entry timeout): the new directory, with a node of its
# own (before, libfuse gave it the held node, and the working directory became the new directory)
time.sleep(1.2)
now = os.stat(A('p/d'))
assert stat.S_ISDIR(now.st_mode) and now.st_ino != ino, ('the name', now.st_ino, ino)
assert os.listdir(A('p/d')) == ['new'], os.listdir(A('p/d'))
still_old('a new directory at its name', 'old')
# the kernel dropped the working directory's name (as for any name another client changed)
try:
    cwd = os.getcwd()
except FileNotFoundError:
    cwd = None
assert cwd is None, cwd
assert os.stat('..').st_ino == os.stat(A('p')).st_ino
os.close(os.open('c', os.O_CREAT | os.O_WRONLY, 0o644))
os.mkdir('sub', dir_fd=fd)
with open('old', 'w') as fh:
    fh.write('through the cwd')
assert sorted(os.listdir(B('p/moved'))) == ['c', 'old', 'sub'], os.listdir(B('p/moved'))
with open(B('p/moved/old')) as fh:
    assert fh.read() == 'through the cwd'
os.chdir('sub'); os.chdir('..')
still_old('after changes in it', 'c', 'old', 'sub')
os.close(os.open(A('p/d/n2'), os.O_CREAT | os.O_WRONLY, 0o644))
assert sorted(os.listdir(B('p/d'))) == ['n2', 'new'], os.listdir(B('p/d'))
os.rename('c', 'c2')
still_old('the new one changed by name', 'c2', 'old', 'sub')
assert sorted(os.listdir(A('p'))) == ['d', 'moved'] and all(len(n) < 256 for n in os.listdir(a)), (os.listdir(A('p')), os.listdir(a))
os.close(fd)
os.chdir('/')

# a file at the old name of a working directory (no descriptor): the working directory stays good (was EIO)
os.mkdir(A('q')); open(A('q/x'), 'w').close()
os.chdir(A('q'))
ino = os.stat('.').st_ino
os.rename(B('q'), B('q-moved'))
with open(B('q'), 'w') as fh:
    fh.write('a file')
time.sleep(1.2)
with open(A('q')) as fh:
    assert fh.read() == 'a file'
assert os.stat('.').st_ino == ino and os.listdir('.') == ['x'], (os.stat('.'), os.listdir('.'))
os.close(os.open('y', os.O_CREAT | os.O_WRONLY, 0o644))
assert sorted(os.listdir(B('q-moved'))) == ['x', 'y'], os.listdir(B('q-moved'))
os.chdir('/')
print('ok')
`

t('a directory held here keeps its node when another client puts a new directory or a file at its old name', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a', attrTimeout: 0.001, entryTimeout: 1 })
  const b = await c.mount({ name: 'b' })
  const r = await py(HELD_DIR_NAME_REUSED, [a.mnt, b.mnt])
  ok(t, r, 'held directory name reused')
  t.is(r.stdout.trim(), 'ok')
})

// argv: mount A, mount B. Threads of a process on A keep working in a directory (its cwd and a
// descriptor) while B replaces it at its name and other threads on A look the name up at once.
const HELD_DIR_REPLACED_UNDER_LOAD = String.raw`
import errno, os, sys, threading, time
a, b = sys.argv[1], sys.argv[2]
A = lambda n: os.path.join(a, n)
B = lambda n: os.path.join(b, n)
errs = []
for r in range(6):
    os.makedirs(A('p%d/d' % r)); open(A('p%d/d/old' % r), 'w').close()
    os.chdir(A('p%d/d' % r))
    fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
    stop = False
    def busy():
        while not stop:
            try:
                os.listdir('.'); os.stat('.'); os.listdir(fd); os.stat('old')
            except OSError as e:
                errs.append(('in it', r, e))
    def look():
        for _ in range(50):
            try:
                os.stat(A('p%d/d' % r))
            except OSError as e:
                # two lookups racing at the moment the node moves: one may get ESTALE (docs/fuse.md)
                if e.errno != errno.ESTALE:
                    errs.append(('its name', r, e))
    workers = [threading.Thread(target=busy) for _ in range(3)]
    for w in workers: w.start()
    os.rename(B('p%d/d' % r), B('p%d/moved' % r))
    if r % 2:
        os.mkdir(B('p%d/d' % r))
    else:
        open(B('p%d/d' % r), 'w').close()
    lookers = [threading.Thread(target=look) for _ in range(3)]
    for w in lookers: w.start()
    for w in lookers: w.join()
    stop = True
    for w in workers: w.join()
    assert sorted(os.listdir('.')) == ['old'] and sorted(os.listdir(fd)) == ['old'], (r, os.listdir('.'))
    os.close(fd)
    os.chdir('/')
assert not errs, errs[:5]
print('ok')
`

t('a directory held here and replaced elsewhere while threads work in it and look its name up at once never fails with EIO', async (t) => {
  const c = await startFuseCluster(t)
  // every stat looks the name up (1 ms timeouts): lookups of the name race with the move of its node
  const a = await c.mount({ name: 'a', attrTimeout: 0.001, entryTimeout: 0.001 })
  const b = await c.mount({ name: 'b' })
  const r = await py(HELD_DIR_REPLACED_UNDER_LOAD, [a.mnt, b.mnt])
  ok(t, r, 'held directory replaced under load')
  t.is(r.stdout.trim(), 'ok')
})

// argv: mount A, mount B. A holds a file open for writing; B moves it away and makes a directory at its name.
const DIR_AT_OPEN_FILE_NAME = String.raw`
import os, sys
a, b = sys.argv[1], sys.argv[2]
fd = os.open(os.path.join(a, 'f'), os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b'a' * 100)
os.rename(os.path.join(b, 'f'), os.path.join(b, 'moved'))
os.mkdir(os.path.join(b, 'f'))
# A looks at the name (the kernel asks again) and goes on writing through the descriptor
os.lstat(os.path.join(a, 'f'))
assert os.write(fd, b'b' * 100) == 100
assert os.fstat(fd).st_size == 200
assert os.pread(fd, 300, 0) == b'a' * 100 + b'b' * 100
os.lstat(os.path.join(a, 'f'))
assert os.write(fd, b'c' * 100) == 100
os.close(fd)
# the writes went to the open file, now at B's 'moved'
with open(os.path.join(b, 'moved'), 'rb') as fh:
    assert fh.read() == b'a' * 100 + b'b' * 100 + b'c' * 100
# once it is closed, A sees the directory at the name
assert os.path.isdir(os.path.join(a, 'f')), os.lstat(os.path.join(a, 'f'))
assert os.listdir(os.path.join(a, 'f')) == []

# the same for a file in a directory A renamed itself (its names moved with it)
os.mkdir(os.path.join(a, 'd'))
fd = os.open(os.path.join(a, 'd', 'f'), os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, b'a' * 10)
os.rename(os.path.join(a, 'd'), os.path.join(a, 'e'))
os.rename(os.path.join(b, 'e', 'f'), os.path.join(b, 'moved2'))
os.mkdir(os.path.join(b, 'e', 'f'))
os.lstat(os.path.join(a, 'e', 'f'))
assert os.write(fd, b'b' * 10) == 10
os.close(fd)
with open(os.path.join(b, 'moved2'), 'rb') as fh:
    assert fh.read() == b'a' * 10 + b'b' * 10
print('ok')
`

for (const [what, timeouts] of [
  ['timeouts of 1 ms', { attrTimeout: 0.001, entryTimeout: 0.001 }],
  ['the default 1 s timeouts', { attrTimeout: 1, entryTimeout: 1 }],
] as const) {
  t(`writes through an open file go on after another client put a directory at its name (${what})`, async (t) => {
    const c = await startFuseCluster(t)
    const a = await c.mount({ name: 'a', ...timeouts })
    const b = await c.mount({ name: 'b' })
    const r = await py(DIR_AT_OPEN_FILE_NAME, [a.mnt, b.mnt])
    ok(t, r, 'directory at an open file name')
    t.is(r.stdout.trim(), 'ok')
  })
}

// argv: root's mount, uid 1000's mount (gid 1000, no other groups). Root makes a world-writable
// set-group-id directory of group 50, where 1000 gets files of a group it is not in.
const SGID_OF_ANOTHER_GROUP = String.raw`
set -euo pipefail
R=$1 U=$2
mkdir $R/sg $R/home && chgrp 50 $R/sg && chmod 2777 $R/sg && chown 1000:1000 $R/home
touch $U/sg/f && chmod 2755 $U/sg/f
mk() { python3 -c "import os, sys; os.close(os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY, int(sys.argv[2], 8)))" "$@"; }
mk $U/sg/g 2755 && mk $U/sg/h 2745
touch $U/home/own && chmod 2755 $U/home/own
mkdir $U/sg/d $U/sg/e && chmod 2775 $U/sg/e
touch $R/sg/byroot && chmod 2755 $R/sg/byroot
stat -c '%n %a %g' $R/sg/f $R/sg/g $R/sg/h $R/home/own $R/sg/d $R/sg/e $R/sg/byroot | sed "s|$R/||"
`

t('chmod g+s and a create with S_ISGID by a user not in the file\'s group drop the bit, as Linux does', async (t) => {
  const c = await startFuseCluster(t)
  const r = await c.mount({ name: 'root' })
  const u = await c.mount({ name: 'u1000', uid: 1000, gid: 1000 })
  const res = await run('bash', ['-c', SGID_OF_ANOTHER_GROUP, 'sgid', r.mnt, u.mnt])
  ok(t, res, 'chmod and create as uid 1000')
  // kept: a create without group execute (Linux keeps it there too), the user's own group, a new
  // directory below a set-group-id one (inherited, not asked for), root's chmod
  t.deepEqual(res.stdout.trim().split('\n'), ['sg/f 755 50', 'sg/g 755 50', 'sg/h 2745 50', 'home/own 2755 1000', 'sg/d 2755 50', 'sg/e 775 50', 'sg/byroot 2755 50'])
})

// argv: mount. What docs/fuse.md promises where the mount differs from ext4: clean errnos, never EIO.
const DOCUMENTED_DIFFERENCES = String.raw`
set -uo pipefail
cd $1 && printf hello > f
# fallocate(2) itself: plain, punch hole (with KEEP_SIZE, as it must be), zero range
python3 -c "
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open('f', os.O_RDWR)
for mode in (0, 3, 0x10):
    r = libc.fallocate(fd, mode, ctypes.c_long(0), ctypes.c_long(8192))
    print('fallocate', mode, r, os.strerror(ctypes.get_errno()))
"
fallocate -l 8192 f 2>&1 | sed 's/.*: //'
echo "f $(stat -c %s f) $(cat f)"
python3 -c "import os; fd = os.open('f', os.O_RDWR); os.posix_fallocate(fd, 0, 10000); print('posix_fallocate', os.fstat(fd).st_size)"
python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('sock')" 2>&1 | tail -1
mkdir -p d/a d/b && stat -c 'nlink %h' d
truncate -s 1M sparse && stat -c 'blocks %b' sparse
`

t('fallocate fails with EOPNOTSUPP (posix_fallocate still works), a Unix socket with ENOSYS, a directory has st_nlink 1 and a sparse file its length in st_blocks', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const res = await run('bash', ['-c', DOCUMENTED_DIFFERENCES, 'diffs', a.mnt])
  ok(t, res, 'probes')
  t.deepEqual(res.stdout.trim().split('\n'), [
    'fallocate 0 -1 Operation not supported',
    'fallocate 3 -1 Operation not supported',
    'fallocate 16 -1 Operation not supported',
    'Operation not supported',
    'f 5 hello',
    'posix_fallocate 10000',
    'OSError: [Errno 38] Function not implemented',
    'nlink 1',
    'blocks 2048',
  ])
})

// argv: root's mount, uid 1000's mount. In world-writable directories, 1000 moves root's directory and file.
const MOVE_ANOTHER_USERS_DIRECTORY = String.raw`
set -uo pipefail
R=$1 U=$2
mkdir -p $R/a/rootdir $R/a/rootdir2 $R/b && chmod 777 $R/a $R/b && echo x > $R/a/rootfile
mv $U/a/rootdir $U/b/ 2>&1 | sed 's/.*: //'
mv $U/a/rootdir2 $U/a/renamed && echo same parent: moved
mv $U/a/rootfile $U/b/ && echo file: moved
mv $R/a/rootdir $R/b/ && echo root: moved
ls $R/a $R/b | tr '\n' ' '
echo
# over a non-empty directory in a directory 1000 may not write: the permission is checked first
mkdir -p $R/nw/full/x $U/a/mine
python3 -c "import os, sys; os.rename(sys.argv[1], sys.argv[2])" $U/a/mine $U/nw/full 2>&1 | tail -1 || :
`

t('moving another user\'s directory to another parent needs write permission on it (its ".." changes), and a rename over a non-empty directory checks permissions first: EACCES, as rename(2)', async (t) => {
  const c = await startFuseCluster(t)
  const r = await c.mount({ name: 'root' })
  const u = await c.mount({ name: 'u1000', uid: 1000, gid: 1000 })
  const res = await run('bash', ['-c', MOVE_ANOTHER_USERS_DIRECTORY, 'mv', r.mnt, u.mnt])
  ok(t, res, 'mv as uid 1000')
  t.deepEqual(res.stdout.trim().split('\n'), [
    'Permission denied',
    'same parent: moved',
    'file: moved',
    'root: moved',
    `${r.mnt}/a: renamed  ${r.mnt}/b: rootdir rootfile `,
    `PermissionError: [Errno 13] Permission denied: '${u.mnt}/a/mine' -> '${u.mnt}/nw/full'`,
  ])
})

// argv: root's mount, the owner's (uid 1000) mount. f (1000's, 0644, "hello") is immutable.
const IMMUTABLE_ATTRS = String.raw`
set -uo pipefail
R=$1 U=$2
before=$(stat -c '%a %u %g %X %Y' $R/f)
for m in $R $U; do
  for c in 'chmod 600' 'chmod 644' 'chown 1001' 'chgrp 1000' 'touch' 'touch -d 2020-01-01' 'truncate -s 0' 'truncate -s 100'; do
    out=$(LC_ALL=C $c $m/f 2>&1) && echo "$c: done" || echo "$c: $(echo "$out" | sed 's/.*: //')"
  done
  python3 -c "import os, sys; os.truncate(sys.argv[1], 1)" $m/f 2>&1 | tail -1
done
[ "$(stat -c '%a %u %g %X %Y' $R/f)" = "$before" ] && echo unchanged
cat $R/f; echo
`

t('chmod, chown, chgrp, touch and truncate of an immutable file fail with EPERM, as root and as its owner, and change nothing', async (t) => {
  const c = await startFuseCluster(t)
  const r = await c.mount({ name: 'root' })
  const u = await c.mount({ name: 'u1000', uid: 1000, gid: 1000 })
  const root = c.m.client()
  await root.create('/f', { flags: { access: 'r', create: true }, perm: 0o644 })
  await sh(`printf hello > ${r.mnt}/f`)
  await root.setAttr('/f', { uid: 1000, gid: 1000 })
  await root.setAttr('/f', { iflags: 0x10 })
  const res = await run('bash', ['-c', IMMUTABLE_ATTRS, 'imm', r.mnt, u.mnt])
  ok(t, res, 'setattr probes')
  t.log(`probes took ${res.ms} ms`)
  const each = [
    'chmod 600: Operation not permitted',
    'chmod 644: Operation not permitted',
    'chown 1001: Operation not permitted',
    'chgrp 1000: Operation not permitted',
    'touch: Operation not permitted',
    'touch -d 2020-01-01: Operation not permitted',
    'truncate -s 0: Operation not permitted',
    'truncate -s 100: Operation not permitted',
    'PermissionError: [Errno 1] Operation not permitted: \'MNT/f\'',
  ]
  t.deepEqual(res.stdout.trim().split('\n'), [...each.map((l) => l.replace('MNT', r.mnt)), ...each.map((l) => l.replace('MNT', u.mnt)), 'unchanged', 'hello'])
  // once the flag is cleared, all of it works again
  await root.setAttr('/f', { iflags: 0 })
  ok(t, await sh(`chmod 600 ${u.mnt}/f && touch ${u.mnt}/f && truncate -s 1 ${u.mnt}/f && chown 1001 ${r.mnt}/f`), 'after chattr -i')
  t.deepEqual([(await root.stat('/f')).acl.perm, (await root.stat('/f')).acl.uid, (await root.stat('/f')).file!.length], [0o600, 1001, 1])
})
