// ref/3fs.md §9 scenarios through FUSE: 15 (large file random reads with a
// hole), 19 (length semantics between two mounts), 20 (recursive remove via
// 3fs-virt/rm-rf), 25 (directory lock xattr between two mounts).
import path from 'node:path'
import test from 'ava'
import { spawn } from 'node:child_process'
import { tmpDir, until } from '../../helpers/procs.js'
import { readFuseState } from '../../../fs/fuse/state.js'
import { fuseSkipReason, ok, py, run as runCmd, sh, startFuseCluster } from './helpers.js'
import { CLI } from '../../helpers/procs.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

const MiB = 1024 * 1024

t('scenario 15: 64 MiB file, chunk 64 KiB, stripe 2, 1 MiB hole, 2000 random reads', async (t) => {
  const c = await startFuseCluster(t, { chunkSize: 64 * 1024, stripeSize: 2 })
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const local = tmpDir(t, 'strata-fuse-s15-')
  const ref = path.join(local, 'ref')
  // the same bytes to the mount and to a local reference: data up to the
  // middle, a 1 MiB hole made by seek+write, data to 64 MiB
  const write = await py(
    String.raw`
import os, random, sys
dst, ref = sys.argv[1], sys.argv[2]
MiB = 1 << 20
random.seed(15)
hole_at, hole = 32 * MiB - 12345, MiB
with open(dst, 'wb') as f, open(ref, 'wb') as g:
    pos = 0
    while pos < 64 * MiB:
        if pos == hole_at:
            pos += hole
            f.seek(pos); g.seek(pos)
            continue
        n = min(MiB - 7, 64 * MiB - pos, hole_at - pos if pos < hole_at else 1 << 62)
        blk = random.randbytes(n)
        f.write(blk); g.write(blk)
        pos += n
print(os.path.getsize(ref))
`,
    [path.join(a.mnt, 'big'), ref],
    { timeoutMs: 300_000 },
  )
  ok(t, write, 'write 64 MiB with a hole')
  t.is(write.stdout.trim(), String(64 * MiB))
  // 2000 random reads from the other mount: chunk-crossing, in the hole, past EOF
  const reads = await py(
    String.raw`
import os, random, sys
src, ref = sys.argv[1], sys.argv[2]
MiB = 1 << 20
size = os.path.getsize(ref)
assert os.stat(src).st_size == size, (os.stat(src).st_size, size)
random.seed(1515)
fd, rd = os.open(src, os.O_RDONLY), os.open(ref, os.O_RDONLY)
bad = 0
kinds = {'cross': 0, 'hole': 0, 'eof': 0, 'any': 0}
for i in range(2000):
    k = i % 4
    if k == 0:   # across a chunk boundary
        chunk = random.randrange(1, size // 65536)
        off = chunk * 65536 - random.randrange(1, 4096)
        ln = random.randrange(2, 200000)
        kinds['cross'] += 1
    elif k == 1: # in or around the hole
        off = 32 * MiB - 12345 + random.randrange(-70000, MiB + 70000)
        ln = random.randrange(1, 300000)
        kinds['hole'] += 1
    elif k == 2: # at or past the end
        off = size - random.randrange(0, 100000) + random.choice([0, 0, 50000])
        ln = random.randrange(1, 200000)
        kinds['eof'] += 1
    else:
        off = random.randrange(0, size)
        ln = random.randrange(1, 2 * MiB)
        kinds['any'] += 1
    got, want = os.pread(fd, ln, off), os.pread(rd, ln, off)
    if got != want:
        bad += 1
        if bad < 5: print('mismatch', off, ln, len(got), len(want), file=sys.stderr)
hole = os.pread(fd, MiB, 32 * MiB - 12345)
assert hole == bytes(MiB), 'hole is not zeros'
assert os.pread(fd, 10, size) == b'' and os.pread(fd, 10, size + 12345) == b''
print(bad, kinds)
`,
    [path.join(b.mnt, 'big'), ref],
    { timeoutMs: 300_000 },
  )
  ok(t, reads, '2000 random reads')
  t.regex(reads.stdout, /^0 /, reads.stderr)
})

/** A long-lived python process holding files open on a mount, driven line by line. */
function holder() {
  const child = spawn('python3', ['-u', '-c', String.raw`
import os, sys
fds = {}
for line in sys.stdin:
    cmd, *a = line.split()
    try:
        if cmd == 'open': fds[a[0]] = os.open(a[1], os.O_CREAT | os.O_RDWR)
        elif cmd == 'write': os.pwrite(fds[a[0]], bytes([int(a[3]) & 255]) * int(a[2]), int(a[1]))
        elif cmd == 'fsync': os.fsync(fds[a[0]])
        elif cmd == 'close': os.close(fds.pop(a[0]))
        elif cmd == 'truncate': os.ftruncate(fds[a[0]], int(a[1]))
        print('ok', flush=True)
    except OSError as e:
        print('err', e.errno, flush=True)
`])
  let buf = ''
  const waiters: Array<(l: string) => void> = []
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString()
    let i
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i)
      buf = buf.slice(i + 1)
      waiters.shift()?.(line)
    }
  })
  return {
    cmd(line: string): Promise<string> {
      return new Promise((r) => {
        waiters.push(r)
        child.stdin.write(line + '\n')
      })
    },
    close() {
      child.stdin.end()
      child.kill()
    },
  }
}

async function statSize(p: string): Promise<number> {
  const r = await sh(`stat -c %s ${p}`)
  return r.code === 0 ? Number(r.stdout.trim()) : -1
}

t('scenario 19: length semantics between two mounts', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a', periodicSyncMs: 1000 })
  const b = await c.mount({ name: 'b' })
  const h = holder()
  t.teardown(() => h.close())
  const fa = path.join(a.mnt, 'len')
  const fb = path.join(b.mnt, 'len')
  t.is(await h.cmd(`open f ${fa}`), 'ok')
  t.is(await h.cmd('write f 0 10000 7'), 'ok')
  // B sees the length within the periodic sync interval (+ attr timeout), file still open in A
  const t0 = Date.now()
  await until(async () => (await statSize(fb)) === 10000, 10_000, 'B sees 10000 bytes')
  const seen = Date.now() - t0
  // (the until above fails if periodic sync never reports it: without it the length stays in A until close)
  t.log(`B saw 10000 bytes after ${seen} ms`)
  // after fsync in A, B sees the exact length at once
  t.is(await h.cmd('write f 10000 5000 8'), 'ok')
  t.is(await h.cmd('fsync f'), 'ok')
  t.is(await statSize(fb), 15000)
  const ino = await c.m.client().stat('/len')
  const tv0 = ino.file!.truncateVer
  // truncate -s 100 from B: length 100, truncateVer + 1
  ok(t, await sh(`truncate -s 100 ${fb}`), 'truncate -s 100')
  t.is(await statSize(fa), 100)
  const ino2 = await c.m.client().stat('/len')
  t.is(ino2.file!.length, 100)
  t.true(ino2.file!.truncateVer > tv0, `truncateVer ${tv0} -> ${ino2.file!.truncateVer}`)
  // extend to 200000: zero-filled past 100
  ok(t, await sh(`truncate -s 200000 ${fb}`), 'truncate -s 200000')
  const r = await py(`import sys; d = open(sys.argv[1], 'rb').read(); print(len(d), d[:100] == bytes([7]) * 100, d[100:] == bytes(len(d) - 100))`, [fa])
  ok(t, r, 'read back')
  t.is(r.stdout.trim(), '200000 True True')
  t.is(await h.cmd('close f'), 'ok')
  t.is(await statSize(fb), 200000)
})

t('scenario 20: recursive remove through 3fs-virt/rm-rf', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const mk = await py(
    String.raw`
import os, sys
root = os.path.join(sys.argv[1], 'tree')
n = 0
for i in range(5):
    for j in range(10):
        d = os.path.join(root, 'l1-%d' % i, 'l2-%d' % j)
        os.makedirs(d)
        for k in range(10):
            with open(os.path.join(d, 'f%d' % k), 'wb') as f:
                if n % 25 == 0: f.write(os.urandom(5000))
            n += 1
print(n)
`,
    [a.mnt],
    { timeoutMs: 300_000 },
  )
  ok(t, mk, 'make tree')
  t.is(mk.stdout.trim(), '500')
  // a plain rmdir of the non-empty tree fails
  const rmdir = await sh(`rmdir ${a.mnt}/tree 2>&1 || true`)
  t.regex(rmdir.stdout, /not empty/i)
  const before = await c.m.client().gcList()
  // relative targets and targets outside the mount are refused
  t.not((await sh(`ln -s tree ${a.mnt}/3fs-virt/rm-rf/rel`)).code, 0)
  t.not((await sh(`ln -s /tmp ${a.mnt}/3fs-virt/rm-rf/outside`)).code, 0)
  const ln = await sh(`ln -s ${a.mnt}/tree ${a.mnt}/3fs-virt/rm-rf/x`)
  ok(t, ln, 'ln -s into rm-rf')
  // gone at once, on both mounts
  t.not((await sh(`stat ${a.mnt}/tree`)).code, 0)
  t.not((await sh(`stat ${b.mnt}/tree`)).code, 0)
  t.false((await sh(`ls ${b.mnt}`)).stdout.split('\n').includes('tree'))
  // one GC entry for the whole directory
  const after = await c.m.client().gcList()
  const added = after.filter((e) => !before.some((x) => x.inode === e.inode))
  t.true(
    added.some((e) => e.name.startsWith('d-') || e.type === 'Directory'),
    JSON.stringify(after, (_k, v) => (typeof v === 'bigint' ? v.toString() : v)),
  )
  // and the GC eventually removes it all
  await until(async () => (await c.m.client().gcList()).length === 0, 60_000, 'GC finished')
  t.pass()
})

t('scenario 25: directory lock xattr between two mounts', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const stA = readFuseState(path.join(c.m.c.dir, 'a.state.json'))!
  const script = String.raw`
import errno, json, os, sys
op, d = sys.argv[1], sys.argv[2]
def code(fn, *a):
    try:
        r = fn(*a)
        return 'ok' if r is None else r
    except OSError as e:
        return errno.errorcode[e.errno]
if op == 'lock': print(code(os.setxattr, d, 'hf3fs.lock', sys.argv[3].encode()))
elif op == 'get':
    r = code(os.getxattr, d, 'hf3fs.lock')
    print(r.decode() if isinstance(r, bytes) else r)
elif op == 'list': print(json.dumps(os.listxattr(d)))
elif op == 'create': print(code(lambda: os.close(os.open(os.path.join(d, sys.argv[3]), os.O_CREAT | os.O_WRONLY))))
elif op == 'unlink': print(code(os.unlink, os.path.join(d, sys.argv[3])))
elif op == 'other':
    print(code(os.setxattr, d, 'hf3fs.other', b'1'), code(os.getxattr, d, 'hf3fs.other'), code(os.setxattr, d, 'trusted.x', b'1'), code(os.setxattr, d, 'user.x', b'1'), code(os.setxattr, os.path.join(d, 'fa'), 'hf3fs.lock', b'try_lock'), code(os.setxattr, d, 'hf3fs.lock', b'bogus'))
elif op == 'remove': print(code(os.removexattr, d, 'hf3fs.lock'))
`
  const run = async (...args: string[]) => {
    const r = await py(script, args)
    ok(t, r, args.join(' '))
    return r.stdout.trim()
  }
  ok(t, await sh(`mkdir ${a.mnt}/locked`), 'mkdir')
  const da = `${a.mnt}/locked`
  const db = `${b.mnt}/locked`
  t.is(await run('get', da), 'ENODATA')
  t.is(await run('lock', da, 'try_lock'), 'ok')
  // the holder, as JSON, seen from both mounts
  const holder = JSON.parse(await run('get', db)) as { client: string }
  t.is(holder.client, stA.clientId)
  t.deepEqual(JSON.parse(await run('list', da)), ['hf3fs.lock'])
  // B may not create (ENOLCK); A may
  t.is(await run('create', db, 'fb'), 'ENOLCK')
  t.is(await run('create', da, 'fa'), 'ok')
  t.is(await run('unlink', db, 'fa'), 'ENOLCK')
  // B cannot take it with try_lock
  t.not(await run('lock', db, 'try_lock'), 'ok')
  // other hf3fs.* names and other namespaces: ENOTSUP; the lock only on directories; bad values EINVAL
  t.is(await run('other', da), 'ENOTSUP ENOTSUP ENOTSUP ENOTSUP ENOTSUP EINVAL')
  // removexattr clears it: B can create again
  t.is(await run('remove', da), 'ok')
  t.is(await run('get', db), 'ENODATA')
  t.is(await run('create', db, 'fb'), 'ok')
  // preempt_lock by B takes it over
  t.is(await run('lock', da, 'try_lock'), 'ok')
  t.is(await run('lock', db, 'preempt_lock'), 'ok')
  t.is(await run('create', da, 'fc'), 'ENOLCK')
  t.is(await run('create', db, 'fc'), 'ok')
  t.is(await run('lock', db, 'unlock'), 'ok')
  t.is(await run('create', da, 'fd'), 'ok')
})

t('scenario 20: after 3fs-virt/rm-rf the removed names are gone from this mount at once, long kernel cache timeouts or not', async (t) => {
  const c = await startFuseCluster(t)
  // 60 s: without an invalidation the kernel would answer the stats below from its caches
  const a = await c.mount({ name: 'a', attrTimeout: 60, entryTimeout: 60 })
  const r = await py(
    String.raw`
import errno, os, sys
m = sys.argv[1]
def st(p):
    try:
        os.lstat(p); return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
os.makedirs(os.path.join(m, 'd', 'tree', 'sub'))
open(os.path.join(m, 'd', 'tree', 'sub', 'f'), 'w').close()
open(os.path.join(m, 'd', 'file'), 'w').close()
os.symlink('file', os.path.join(m, 'd', 'link'))
names = ['d/tree', 'd/tree/sub/f', 'd/file', 'd/link']
before = [st(os.path.join(m, n)) for n in names]
os.symlink(os.path.join(m, 'd', 'tree'), os.path.join(m, '3fs-virt', 'rm-rf', 'x'))
held = os.open(os.path.join(m, 'd', 'file'), os.O_RDONLY)  # open on this mount: libfuse 2 hides it on unlink
os.symlink(os.path.join(m, 'd', 'file'), os.path.join(m, '3fs-virt', 'rm-rf', 'y'))
# through a path with a symlink in the middle
os.symlink('d', os.path.join(m, 'dl'))
os.symlink(os.path.join(m, 'dl', 'link'), os.path.join(m, '3fs-virt', 'rm-rf', 'z'))
after = [st(os.path.join(m, n)) for n in names]
os.close(held)
print(' '.join(before), '|', ' '.join(after), '|', ','.join(sorted(os.listdir(os.path.join(m, 'd')))))
`,
    [a.mnt],
  )
  ok(t, r, 'rm-rf')
  t.is(r.stdout.trim(), 'ok ok ok ok | ENOENT ENOENT ENOENT ENOENT |')
  // the names are free again
  ok(t, await sh(`mkdir ${a.mnt}/d/tree && touch ${a.mnt}/d/file && ls ${a.mnt}/d`), 'recreate')
})

t('scenario 25: a directory lock held through a mount stops rm -r, rmdir, mv and rm-rf of other clients (admin CLI, a second mount)', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const admin = (...args: string[]) => runCmd(process.execPath, [CLI, 'admin', '--mgmtd-address', c.m.c.mgmtdAddress, ...args])
  ok(t, await sh(`mkdir -p ${a.mnt}/top/mid/locked ${a.mnt}/empty ${a.mnt}/else && touch ${a.mnt}/top/mid/locked/f ${a.mnt}/else/g`), 'tree')
  ok(t, await py(`import os, sys\nfor d in sys.argv[1:]: os.setxattr(d, 'hf3fs.lock', b'try_lock')`, [`${a.mnt}/top/mid/locked`, `${a.mnt}/empty`]), 'lock')
  const refused = async (args: string[]) => {
    const r = await admin(...args)
    t.is(r.code, 1, `${args.join(' ')}: ${r.stdout}${r.stderr}`)
    t.regex(r.stderr, /^strata: META_NO_LOCK: /m, args.join(' '))
  }
  // the tree that holds the locked directory, the locked directory itself, an entry in it, moves into and out of it
  await refused(['rm', '-r', '/top'])
  await refused(['rm', '-r', '/top/mid'])
  await refused(['rm', '-r', '/top/mid/locked'])
  await refused(['rm', '/empty'])
  await refused(['rm', '/top/mid/locked/f'])
  await refused(['mv', '/top/mid/locked/f', '/else/f'])
  await refused(['mv', '/else/g', '/top/mid/locked/g'])
  await refused(['mv', '/else', '/empty'])
  // the second mount: ENOLCK
  const rb = await py(
    String.raw`
import errno, os, sys
m = sys.argv[1]
def code(fn, *a):
    try:
        fn(*a); return 'ok'
    except OSError as e:
        return errno.errorcode[e.errno]
print(code(os.symlink, os.path.join(m, 'top'), os.path.join(m, '3fs-virt', 'rm-rf', 'x')), code(os.rmdir, os.path.join(m, 'empty')), code(os.rename, os.path.join(m, 'else'), os.path.join(m, 'empty')))
`,
    [b.mnt],
  )
  ok(t, rb, 'mount b')
  t.is(rb.stdout.trim(), 'ENOLCK ENOLCK ENOLCK')
  ok(t, await sh(`test -f ${a.mnt}/top/mid/locked/f && test -d ${a.mnt}/empty && test -f ${a.mnt}/else/g`), 'all still there')
  // the holder may remove its tree
  ok(t, await sh(`ln -s ${a.mnt}/top ${a.mnt}/3fs-virt/rm-rf/x && rmdir ${a.mnt}/empty`), 'holder removes')
  ok(t, await admin('rm', '-r', '/else'), 'admin rm -r of an unlocked tree')
})
