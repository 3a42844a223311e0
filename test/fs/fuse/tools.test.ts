// Real tools on a FUSE mount: cp -a, tar, git, rsync, fio, sqlite, make, python.
import fs from 'node:fs/promises'
import path from 'node:path'
import test from 'ava'
import { tmpDir } from '../../helpers/procs.js'
import { fuseSkipReason, ok, py, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

// A local tree with the shapes tools trip over: nesting, empty files and
// directories, sizes around page/buffer boundaries, modes, symlinks
// (relative, absolute, dangling), a hard link.
const MAKE_TREE = String.raw`
import os, random, sys
root = sys.argv[1]
random.seed(7)
os.makedirs(root)
sizes = [0, 1, 4095, 4096, 4097, 65535, 65536, 131073, 1048576 + 3]
n = 0
for a in range(2):
    for b in range(3):
        d = os.path.join(root, 'dir%d' % a, 'sub%d' % b)
        os.makedirs(d)
        for s in sizes[(a * 3 + b) % 3::3]:
            p = os.path.join(d, 'f%d_%d' % (n, s))
            with open(p, 'wb') as f:
                f.write(random.randbytes(s))
            n += 1
os.makedirs(os.path.join(root, 'empty', 'deeper'))
with open(os.path.join(root, 'mode600'), 'w') as f: f.write('secret')
os.chmod(os.path.join(root, 'mode600'), 0o600)
with open(os.path.join(root, 'exec.sh'), 'w') as f: f.write('#!/bin/sh\necho hi\n')
os.chmod(os.path.join(root, 'exec.sh'), 0o755)
os.symlink('dir0/sub0', os.path.join(root, 'rel-link'))
os.symlink('/etc/hostname', os.path.join(root, 'abs-link'))
os.symlink('does/not/exist', os.path.join(root, 'dangling'))
os.link(os.path.join(root, 'mode600'), os.path.join(root, 'hardlink'))
with open(os.path.join(root, 'name with spaces & ünïcode'), 'w') as f: f.write('x' * 100)
print(n)
`

/** type, mode, size, link target of every entry, sorted: what must survive a copy */
const LISTING = `find . -mindepth 1 -printf '%P %y %m %s %l\\n' | LC_ALL=C sort`
/** every entry's mtime in whole seconds (cp -a and tar -x set it with utimensat, links included) */
const MTIMES = `find . -mindepth 1 -printf '%P %T@\\n' | awk '{ printf "%s %d\\n", $1, $2 }' | LC_ALL=C sort`

t('cp -a of a tree onto the mount, diff -r against the source', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const local = tmpDir(t, 'strata-fuse-src-')
  const src = path.join(local, 'src')
  ok(t, await py(MAKE_TREE, [src]), 'make tree')
  const cp = await sh(`cp -a ${src} ${a.mnt}/copy`)
  ok(t, cp, 'cp -a')
  ok(t, await sh(`diff -r --no-dereference ${src} ${a.mnt}/copy`), 'diff -r')
  const l1 = await sh(`cd ${src} && ${LISTING}`)
  const l2 = await sh(`cd ${a.mnt}/copy && ${LISTING}`)
  t.is(l2.stdout, l1.stdout)
  t.is((await sh(`cd ${a.mnt}/copy && ${MTIMES}`)).stdout, (await sh(`cd ${src} && ${MTIMES}`)).stdout)
  // and back out again
  ok(t, await sh(`cp -a ${a.mnt}/copy ${local}/back && diff -r --no-dereference ${src} ${local}/back`), 'cp -a back + diff')
  // a source with a user xattr: cp -a tolerates the mount's ENOTSUP
  const x = await sh(`f=${local}/xattr-src; echo data > $f; (setfattr -n user.k -v v $f 2>/dev/null || python3 -c "import os; os.setxattr('$f', 'user.k', b'v')" || true); cp -a $f ${a.mnt}/xattr-copy && cat ${a.mnt}/xattr-copy`)
  ok(t, x, 'cp -a with xattr')
  t.is(x.stdout.trim(), 'data')
})

t('tar round trip through the mount', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const local = tmpDir(t, 'strata-fuse-tar-')
  const src = path.join(local, 'src')
  ok(t, await py(MAKE_TREE, [src]), 'make tree')
  ok(t, await sh(`mkdir ${a.mnt}/t && tar -C ${src} -cf - . | tar -C ${a.mnt}/t -xf -`), 'tar onto the mount')
  ok(t, await sh(`mkdir ${local}/back && tar -C ${a.mnt}/t -cf ${local}/out.tar . && tar -C ${local}/back -xf ${local}/out.tar`), 'tar off the mount')
  ok(t, await sh(`diff -r --no-dereference ${src} ${local}/back`), 'diff -r')
  const l1 = await sh(`cd ${src} && ${LISTING}`)
  const l2 = await sh(`cd ${local}/back && ${LISTING}`)
  t.is(l2.stdout, l1.stdout)
  t.is((await sh(`cd ${local}/back && ${MTIMES}`)).stdout, (await sh(`cd ${src} && ${MTIMES}`)).stdout)
  // a tar file written to and read from the mount
  ok(t, await sh(`tar -C ${src} -czf ${a.mnt}/tree.tgz . && mkdir ${local}/back2 && tar -C ${local}/back2 -xzf ${a.mnt}/tree.tgz && diff -r --no-dereference ${src} ${local}/back2`), 'tgz on the mount')
  // into the mount root itself, as root: tar sets the root's owner and mode to the archived `.` (here what
  // they are already) and its times; the tree root's owner and mode cannot change, setting them unchanged works
  const top = path.join(local, 'top')
  ok(t, await sh(`mkdir -m 0755 ${top} && echo hi > ${top}/f && chown 0:0 ${top} && tar -C ${top} -cf - . | tar -C ${a.mnt} -xf - && cat ${a.mnt}/f`), 'tar into the mount root')
  const other = await sh(`chmod 0700 ${top} && tar -C ${top} -cf - . | tar -C ${a.mnt} -xf -`)
  t.not(other.code, 0, 'a different mode for the root is refused')
  t.regex(other.stderr, /Cannot change mode to rwx------: Operation not permitted/)
})

t('git clone onto the mount, git fsck, commit, gc', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const local = tmpDir(t, 'strata-fuse-git-')
  const env = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@e', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@e', HOME: local, GIT_CONFIG_NOSYSTEM: '1' }
  const mk = await sh(
    `git init -q -b main repo && cd repo && for i in $(seq 1 12); do mkdir -p d$((i % 4)); head -c $((i * 7919)) /dev/urandom > d$((i % 4))/bin$i; seq 1 $((i * 300)) > d$((i % 4))/text$i; git add -A; git commit -q -m "commit $i"; done && git gc -q && for i in $(seq 13 16); do echo $i >> d1/text1; git commit -qam "commit $i"; done && git rev-parse HEAD`,
    { cwd: local, env },
  )
  ok(t, mk, 'make repo')
  const head = mk.stdout.trim()
  const clone = await sh(`git clone -q --no-hardlinks ${local}/repo ${a.mnt}/clone && cd ${a.mnt}/clone && git fsck --full --strict && git status --porcelain && git rev-parse HEAD && git log --oneline | wc -l`, { env })
  ok(t, clone, 'clone + fsck')
  const lines = clone.stdout.trim().split('\n')
  t.is(lines[lines.length - 2], head)
  t.is(lines[lines.length - 1]!.trim(), '16')
  ok(t, await sh(`diff -r -x .git ${local}/repo ${a.mnt}/clone`), 'work tree equal')
  // work inside the mount: commit (index.lock, renames), repack, fsck again
  const work = await sh(`cd ${a.mnt}/clone && echo more >> d2/text2 && git commit -qam more && git gc -q --prune=now && git fsck --full --strict && git log --oneline | wc -l && git status --porcelain`, { env })
  ok(t, work, 'commit + gc + fsck in the mount')
  t.is(work.stdout.trim(), '17')
})

t('hard links share st_ino (the 3FS inode id): git clone of a repository on the mount, rsync -aH run twice, tar and du see links', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const local = tmpDir(t, 'strata-fuse-links-')
  const env = { GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@e', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@e', HOME: local, GIT_CONFIG_NOSYSTEM: '1' }
  const m = a.mnt
  // st_ino: one per file, not per name; the root is 1, never 0
  const ino = await sh(`echo x > ${m}/f && ln ${m}/f ${m}/g && stat -c %i ${m}/f ${m}/g ${m} && ls -i ${m} | awk '$2 == "f" || $2 == "g" {print $1}'`)
  ok(t, ino, 'stat')
  const [fi, gi, root, lf, lg] = ino.stdout.trim().split('\n')
  t.is(fi, gi)
  t.is(root, '1')
  t.deepEqual([lf, lg], [fi, fi], 'readdir reports the same inode numbers')
  // git clone of a local repository hard-links its objects and checks each by inode ("hardlink different from source")
  const clone = await sh(
    `cd ${m} && git init -q -b main repo && cd repo && seq 1 1000 > a && git add a && git commit -qm one && git gc -q && cd .. && git clone -q repo repo2 && cd repo2 && git fsck --full --strict && git log --oneline | wc -l`,
    { env },
  )
  ok(t, clone, 'git clone on the mount')
  t.is(clone.stdout.trim(), '1')
  // rsync -aH: a second and third run find the links in place and leave no temporary names behind
  ok(t, await sh(`mkdir ${local}/src && echo z > ${local}/src/f1 && ln ${local}/src/f1 ${local}/src/hard1 && for i in 1 2 3; do rsync -aH ${local}/src/ ${m}/rsh/ || exit 1; done`), 'rsync -aH')
  const names = await sh(`ls -A ${m}/rsh`)
  t.deepEqual(names.stdout.trim().split('\n'), ['f1', 'hard1'])
  const rs = await sh(`stat -c %i ${m}/rsh/f1 ${m}/rsh/hard1`)
  const [r1, r2] = rs.stdout.trim().split('\n')
  t.is(r1, r2, 'rsync -H made a link')
  // tar archives the second name as a link; du counts the file once
  const tar = await sh(`tar -C ${m} -cvvf ${local}/l.tar f g && du -b -s -c ${m}/f ${m}/g | tail -1`)
  ok(t, tar, 'tar + du')
  t.regex(tar.stdout, /g link to f/)
  t.regex(tar.stdout, /^2\s+total$/m)
})

t('fio verify jobs on the mount', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  await fs.mkdir(path.join(a.mnt, 'fio'))
  const common = `--directory=${a.mnt}/fio --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=terse`
  // 16 MiB file, 4 KiB random writes (4 MiB of them: every random 4 KiB write is a storage write on 3 replicas)
  const rand = await sh(`fio --name=v --rw=randwrite --bs=4k --size=16m --io_size=4m ${common}`, { timeoutMs: 240_000 })
  ok(t, rand, 'fio randwrite 4k verify')
  const seq = await sh(`fio --name=s --rw=write --bs=1m --size=16m ${common}`, { timeoutMs: 240_000 })
  ok(t, seq, 'fio seq write 1m verify')
  const mixed = await sh(`fio --name=m --rw=randrw --bs=64k --size=4m --numjobs=2 ${common}`, { timeoutMs: 240_000 })
  ok(t, mixed, 'fio randrw 64k x2 verify')
  t.log(`randwrite ${rand.ms} ms, seq ${seq.ms} ms, randrw ${mixed.ms} ms`)
})

// argv: directory, journal mode. A writer process commits transactions while a reader process
// checks the database; both through the mount (fcntl locks, and the WAL index: a MAP_SHARED -shm file).
const SQLITE_WRITER_AND_READER = String.raw`
import os, sqlite3, subprocess, sys
d, mode = sys.argv[1], sys.argv[2]
db = os.path.join(d, mode + '.db')
c = sqlite3.connect(db)
c.execute('PRAGMA journal_mode=' + mode)
c.execute('create table t(a integer primary key, b blob)')
c.commit()
c.close()
reader = subprocess.Popen([sys.executable, '-c', '''
import sqlite3, sys
seen = 0
while seen < 40:
    c = sqlite3.connect(sys.argv[1], timeout=60)
    assert c.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    n = c.execute("select count(*) from t").fetchone()[0]
    assert n % 3 == 0 and n >= seen, (n, seen)
    seen = n
    c.close()
''', db])
c = sqlite3.connect(db, timeout=60)
for i in range(40):
    with c:
        for _ in range(3):
            c.execute('insert into t(b) values(?)', (os.urandom(2000),))
assert reader.wait(timeout=300) == 0, 'reader failed'
if mode == 'wal':
    c.execute('PRAGMA wal_checkpoint(TRUNCATE)')
c.execute('vacuum')
print(mode, c.execute('PRAGMA integrity_check').fetchone()[0], c.execute('select count(*) from t').fetchone()[0])
`

// a small C project built with make -j2, rebuilt after a header changes (mtimes decide)
const MAKE_PROJECT = String.raw`
set -euo pipefail
mkdir mk && cd mk
for i in 1 2 3 4; do printf '#include "k.h"\nint f%d(void) { return %d * K; }\n' $i $i > f$i.c; done
echo '#define K 3' > k.h
printf '#include <stdio.h>\nint f1(void), f2(void), f3(void), f4(void);\nint main(void) { printf("%%d\\n", f1() + f2() + f3() + f4()); return 0; }\n' > main.c
printf 'prog: main.o f1.o f2.o f3.o f4.o\n\t$(CC) -o $@ $^\n%%.o: %%.c k.h\n\t$(CC) -O2 -c $< -o $@\n' > Makefile
make -s -j2 && ./prog && make -q && echo up-to-date
touch -d '1 minute ago' *.o prog
echo '#define K 4' > k.h
make -s -j2 && ./prog && make -q && echo up-to-date
`

// byte-compiling a package and zip archives of it (python3 -m compileall, -m zipfile), imported from both
const PY_PACKAGE = String.raw`
set -euo pipefail
mkdir -p py/pkg/sub && cd py
for i in 1 2 3; do echo "X = $i" > pkg/m$i.py; echo "Y = $i" > pkg/sub/s$i.py; done
touch pkg/__init__.py pkg/sub/__init__.py
python3 -m compileall -q pkg && find pkg -name '*.pyc' | wc -l
python3 -c 'import pkg.m1, pkg.sub.s3; print(pkg.m1.X + pkg.sub.s3.Y)'
python3 -m zipfile -c p.zip pkg && python3 -m zipfile -t p.zip
mkdir ex && python3 -m zipfile -e p.zip ex && diff -r pkg ex/pkg && echo same
PYTHONPATH=p.zip python3 -c 'import pkg.m2; print(pkg.m2.X)'
`

t('sqlite (rollback journal and WAL, a reader beside a writer), make -j2 and python compileall/zipfile on the mount', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  for (const mode of ['delete', 'wal']) {
    const r = await py(SQLITE_WRITER_AND_READER, [a.mnt, mode], { timeoutMs: 300_000 })
    ok(t, r, `sqlite ${mode}`)
    t.is(r.stdout.trim(), `${mode} ok 120`)
  }
  const mk = await sh(MAKE_PROJECT, { cwd: a.mnt, timeoutMs: 300_000 })
  ok(t, mk, 'make')
  t.deepEqual(mk.stdout.trim().split('\n'), ['30', 'up-to-date', '40', 'up-to-date'])
  const pyr = await sh(PY_PACKAGE, { cwd: a.mnt })
  ok(t, pyr, 'python')
  t.deepEqual(pyr.stdout.trim().split('\n').filter((l) => !l.startsWith('Done testing')), ['8', '4', 'same', '2'])
})
