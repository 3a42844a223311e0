// FUSE layer logic without a mount: errno mapping, path cache, mount table
// parsing, config, attribute conversion, and the operations against a fake
// file client (virtual directory, rm-rf, xattrs, handles).
import os from 'node:os'
import test from 'ava'
import { ERRORS, StrataError, type ErrorCode } from '../../../fs/common/errors.js'
import { createLogger } from '../../../fs/common/log.js'
import type { FileSystem } from '../../../fs/client/file/file-system.js'
import type { Inode } from '../../../fs/meta/protocol.js'
import { errnoByName, toFuseErrno } from '../../../fs/fuse/errno.js'
import { fuseAvailable, fuseErrnoTable } from '../../../fs/fuse/native.js'
import { PathCache, childOf, parentOf } from '../../../fs/fuse/path-cache.js'
import { connectionId, parseMountinfo } from '../../../fs/fuse/mounts.js'
import { extraFuseOptions, fuseTimeout, resolveFuseConfig } from '../../../fs/fuse/config.js'
import { StrataFuseOps, inodeToStat, toStatfs } from '../../../fs/fuse/ops.js'
import { TIME_BIAS, TIME_NOW, TIME_OMIT, usToWire, wireToSetattrUs } from '../../../fs/fuse/times.js'
import { mountName } from '../../../fs/fuse/control.js'

test('every catalogue errno maps to the same negative number fuse-native uses (EAGAIN, retried out by the client, is EIO)', (t) => {
  const table = fuseErrnoTable()
  const fuseOk = fuseAvailable().ok
  for (const code of Object.keys(ERRORS) as ErrorCode[]) {
    if (ERRORS[code].errno === 'EAGAIN') {
      t.is(toFuseErrno(new StrataError(code)), -5, code)
      continue
    }
    const name = ERRORS[code].errno
    const n = toFuseErrno(new StrataError(code))
    t.true(n < 0, `${code} → ${n}`)
    const want = table[name] ?? table[name === 'ENOTSUP' ? 'EOPNOTSUPP' : name] ?? -(os.constants.errno as Record<string, number>)[name]!
    if (fuseOk || want !== undefined) t.is(n, want, `${code} (${name})`)
  }
  t.is(toFuseErrno(new StrataError('META_NOT_FOUND')), -2)
  t.is(toFuseErrno(new StrataError('META_NO_LOCK')), -37)
  t.is(toFuseErrno(new StrataError('META_NOT_SUPPORTED')), -95)
  t.is(toFuseErrno(new StrataError('META_NO_ATTR')), -61)
  t.is(toFuseErrno(new StrataError('META_NOT_EMPTY')), -39)
  t.is(toFuseErrno(new StrataError('CLOSED')), -108)
  // a read with every chain unavailable: EIO, not EAGAIN (the daemon logged errno=-11)
  t.is(toFuseErrno(new StrataError('CHAIN_UNAVAILABLE')), -5)
  t.is(toFuseErrno(Object.assign(new Error('x'), { code: 'TARGET_OFFLINE' })), -5)
  t.is(toFuseErrno(new StrataError('TIMEOUT')), -110)
  t.is(toFuseErrno(-11), -11)
  t.is(toFuseErrno(Object.assign(new Error('x'), { code: 'ENOENT' })), -2)
  t.is(toFuseErrno(Object.assign(new Error('x'), { code: 'META_EXISTS' })), -17)
  t.is(toFuseErrno(new Error('plain')), -5)
  t.is(toFuseErrno(-13), -13)
  t.is(errnoByName('NOPE'), -5)
})

test('path cache: ttl, subtree and inode invalidation, ttl 0 caches nothing', (t) => {
  let now = 0
  const c = new PathCache(1000, 100, () => now)
  const ino = (id: bigint) => ({ id }) as Inode
  c.set('/a', ino(1n))
  c.set('/a/b', ino(2n))
  c.set('/a/b/c', ino(3n))
  c.set('/ab', ino(4n))
  c.set('/x', ino(2n))
  t.is(c.get('/a/b')?.id, 2n)
  c.invalidateTree('/a/b')
  t.is(c.get('/a/b'), undefined)
  t.is(c.get('/a/b/c'), undefined)
  t.is(c.get('/a')?.id, 1n)
  t.is(c.get('/ab')?.id, 4n, 'a sibling with a common prefix stays')
  c.set('/a/b', ino(2n))
  c.invalidateInode(2n)
  t.is(c.get('/a/b'), undefined)
  t.is(c.get('/x'), undefined)
  now = 1001
  t.is(c.get('/a'), undefined, 'expired')
  const none = new PathCache(0)
  none.set('/a', ino(1n))
  t.is(none.get('/a'), undefined)
  const small = new PathCache(1000, 4, () => now)
  for (let i = 0; i < 20; i++) small.set(`/f${i}`, ino(BigInt(i)))
  t.true(small.stats().size <= 4)
  t.is(parentOf('/a/b'), '/a')
  t.is(parentOf('/a'), '/')
  t.is(childOf('/', 'x'), '/x')
  t.is(childOf('/a', 'x'), '/a/x')
})

test('mountinfo parsing: escapes, fstype, connection number', (t) => {
  const text = [
    '22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw',
    '41 26 0:38 / /tmp/with\\040space/m rw,nosuid,nodev,relatime - fuse.strata strata rw,user_id=0,group_id=0',
    '42 26 8:1 / /data rw - ext4 /dev/sda1 rw',
  ].join('\n')
  const ms = parseMountinfo(text)
  t.is(ms.length, 3)
  t.is(ms[1]!.mountpoint, '/tmp/with space/m')
  t.is(ms[1]!.fstype, 'fuse.strata')
  t.is(connectionId(ms[1]!), 38)
  t.is(ms[2]!.source, '/dev/sda1')
})

test('config: defaults, validation, FUSE option strings', (t) => {
  const c = resolveFuseConfig({ mountpoint: '/mnt/x/', mgmtdAddresses: ['127.0.0.1:1'] })
  t.is(c.mountpoint, '/mnt/x')
  t.is(c.attrTimeout, 1)
  t.is(c.periodicSyncMs, 5000)
  t.is(c.writeBufferSize, 1 << 20)
  t.is(resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], writeBufferSize: 64 << 20 }).writeBufferSize, 64 << 20)
  t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], writeBufferSize: 2 ** 40 }), { code: 'BAD_CONFIG' })
  t.is(c.opTimeoutMs, 0)
  t.throws(() => resolveFuseConfig({ mountpoint: 'rel', mgmtdAddresses: ['127.0.0.1:1'] }), { message: /absolute/ })
  t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: [] }), { message: /mgmtdAddresses/ })
  t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], stateFile: '/m/state' }), { message: /inside/ })
  t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], attrTimeout: -1 }))
  // the identity: what meta takes, or the daemon would start and every request fail (groups
  // that were not integers were dropped silently, a uid of 2^40 was taken)
  const id = (o: object) => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], ...o })
  t.deepEqual([id({ uid: 4294967294, gid: 0, groups: [1, 4294967294] }).uid, id({ uid: 5, gid: 5, groups: [1, 2] }).groups], [4294967294, [1, 2]])
  for (const bad of [{ uid: 2 ** 40 }, { uid: -1 }, { gid: 4294967295 }, { uid: '5' }, { groups: [1, '2'] }, { groups: [1, null] }, { groups: [1.5] }, { groups: '1,2' }, { groups: new Array(65537).fill(1) }]) {
    t.throws(() => id(bad), { code: 'BAD_CONFIG', message: /fuse config: (uid|gid|groups)/ }, JSON.stringify(bad).slice(0, 40))
  }
  t.is(id({ groups: new Array(65536).fill(1) }).groups.length, 65536, 'NGROUPS_MAX itself is fine')
  t.is(fuseTimeout(0), 0.001)
  t.is(fuseTimeout(2), 2)
  const opts = extraFuseOptions(c)
  t.regex(opts, /^strata,/)
  t.regex(opts, /big_writes/)
  // 1 MiB requests (the addon raises the kernel's 128 KiB limit), bounded by the options libfuse passes on
  t.regex(opts, /(^|,)max_write=1048576(,|$)/)
  t.regex(opts, /(^|,)max_read=1048576(,|$)/)
  t.regex(extraFuseOptions(resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], maxRead: 131072, maxWrite: 65536 })), /max_write=65536,max_read=131072/)
  for (const bad of [0, 4095, 6000, 2 * 1024 * 1024, 1.5, '1M']) {
    t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], maxRead: bad as number }), { code: 'BAD_CONFIG' }, String(bad))
    t.throws(() => resolveFuseConfig({ mountpoint: '/m', mgmtdAddresses: ['127.0.0.1:1'], maxWrite: bad as number }), { code: 'BAD_CONFIG' }, String(bad))
  }
  // the page cache survives an open of an unchanged file (sandboxes sharing a dataset read it once)
  t.regex(opts, /(^|,)auto_cache(,|$)/)
  t.regex(mountName('/tmp/a b/c'), /^mount-tmp_a_b_c-[0-9a-f]{8}$/)
})

const T = 1_700_000_000_000_000 // µs
function inode(id: bigint, type: Inode['type'], extra: Partial<Inode> = {}): Inode {
  return {
    id,
    type,
    acl: { uid: 1, gid: 2, perm: type === 'Directory' ? 0o755 : 0o644, iflags: 0 },
    nlink: 1,
    atime: T,
    mtime: T + 1000,
    ctime: T + 2000,
    ...(type === 'File' ? { file: { length: 1234, truncateVer: 0, layout: { tableId: 1, tableVersion: 0, chunkSize: 65536, stripeSize: 2, chains: { type: 'Empty' } }, flags: 0, dynStripe: 0 } } : {}),
    ...(type === 'Directory' ? { directory: { parent: 0n, layout: { tableId: 1, tableVersion: 0, chunkSize: 65536, stripeSize: 2, chains: { type: 'Empty' } }, name: 'd', chainAllocCounter: 0, lock: null } } : {}),
    ...(type === 'Symlink' ? { symlink: { target: 'abc' } } : {}),
    ...extra,
  }
}

test('attributes, statfs and utimens conversions', (t) => {
  const f = inodeToStat(inode(5n, 'File'))
  t.is(f.mode, 0o100644)
  t.is(f.size, 1234)
  t.is(f.uid, 1)
  t.is(f.mtime, T + 1000 + TIME_BIAS)
  t.is(f.blocks, 3)
  t.is(inodeToStat(inode(6n, 'Directory')).mode, 0o040755)
  const l = inodeToStat(inode(7n, 'Symlink'))
  t.is(l.mode & 0o170000, 0o120000)
  t.is(l.size, 3)
  const s = toStatfs({ capacity: 2 ** 50, used: 0, free: 2 ** 49 })
  t.true(s.blocks < 2 ** 32)
  t.is(s.blocks * s.bsize, 2 ** 50)
  t.is(s.bfree * s.bsize, 2 ** 49)
  // times cross the addon as µs + 2^52 with two sentinels (fs/fuse/times.ts); 0 and 1 s are times, not "now"
  t.is(wireToSetattrUs(TIME_NOW), -1)
  t.is(wireToSetattrUs(TIME_OMIT), undefined)
  for (const us of [0, 1_000_000, 1_500_000_000_123_456, -5_000_000, -315_619_200_000_000]) {
    t.true(Number.isSafeInteger(usToWire(us)) && usToWire(us) > 0 && usToWire(us) < TIME_NOW, String(us))
    t.is(wireToSetattrUs(usToWire(us)), us)
  }
  // meta's own "now" (-1 µs) is never sent for a real time
  t.is(wireToSetattrUs(usToWire(-1)), -2)
  // out of range: clamped, never a sentinel
  t.is(usToWire(1e300), TIME_NOW - 1)
  t.is(usToWire(-1e300), 1)
})

/** A FileSystem stand-in recording what the operations asked for. */
function fakeFs() {
  const calls: string[] = []
  const nodes = new Map<string, Inode>([
    ['/', inode(0n, 'Directory')],
    ['/d', inode(10n, 'Directory')],
    ['/d/f', inode(11n, 'File')],
    ['/tree', inode(12n, 'Directory')],
    ['/ln', inode(13n, 'Symlink')],
    // a real directory of that name, made by another client: the virtual one shadows it
    ['/3fs-virt', inode(14n, 'Directory')],
  ])
  const notFound = () => new StrataError('META_NOT_FOUND', 'no such entry')
  const fs = {
    async lstat(p: string) {
      calls.push(`lstat ${p}`)
      const n = nodes.get(p)
      if (!n) throw notFound()
      return n
    },
    async rm(p: string, o: { recursive?: boolean }) {
      calls.push(`rm ${p} ${!!o.recursive}`)
      if (!nodes.delete(p)) throw notFound()
    },
    // a PathAt as the daemon sends for directories the kernel holds: { parent: id, path? }
    async lstatAt(at: { parent: bigint; path?: string }) {
      calls.push(`lstatAt ${at.parent} ${at.path ?? ''}`)
      const dir = [...nodes.entries()].find(([, v]) => v.id === at.parent)
      const n = dir && (at.path === undefined ? dir[1] : nodes.get(childOf(dir[0], at.path)))
      if (!n) throw notFound()
      return n
    },
    async readdirAll(at: string | { parent: bigint }) {
      calls.push(`readdir ${typeof at === 'string' ? at : at.parent}`)
      const p = typeof at === 'string' ? at : [...nodes.entries()].find(([, v]) => v.id === at.parent)?.[0]
      if (p === undefined) throw notFound()
      const kids = [...nodes.entries()].filter(([k]) => k !== p && parentOf(k) === p)
      return { entries: kids.map(([k, v]) => ({ name: k.slice(k.lastIndexOf('/') + 1), type: v.type })), inodes: kids.map(([, v]) => v) }
    },
    meta: {
      async lockDirectory(b: { inode: bigint; action: string }) {
        calls.push(`lock ${b.inode} ${b.action}`)
        const d = [...nodes.values()].find((n) => n.id === b.inode)!
        d.directory!.lock = b.action === 'try_lock' || b.action === 'preempt_lock' ? { client: 'me', since: 1 } : null
        return { stat: d }
      },
    },
  }
  return { fs: fs as unknown as FileSystem, calls, nodes }
}

function opsWith(f: ReturnType<typeof fakeFs>, extra: { readonly?: boolean; attrTimeoutMs?: number; reportedPathsMax?: number } = {}) {
  return new StrataFuseOps({ fs: f.fs, mountpoint: '/mnt/s', attrTimeoutMs: 1000, uid: 0, gid: 0, log: createLogger('test', () => {}), ...extra })
}

async function errnoOf(p: Promise<unknown>): Promise<number> {
  try {
    await p
    return 0
  } catch (e) {
    return (e as { fuseErrno?: number }).fuseErrno ?? toFuseErrno(e)
  }
}

test('3fs-virt: listed in the root, rm-rf removes the link target recursively', async (t) => {
  const f = fakeFs()
  const ops = opsWith(f)
  const root = await ops.readdir('/')
  t.is(root.names.filter((n) => n === '3fs-virt').length, 1, 'listed once, with a real /3fs-virt in the DFS too')
  t.deepEqual((await ops.readdir('/3fs-virt')).names, ['.', '..', 'rm-rf'])
  t.is((await ops.getattr('/3fs-virt')).mode, 0o040555)
  t.is((await ops.getattr('/3fs-virt/rm-rf')).mode, 0o040777)
  t.is(await errnoOf(ops.getattr('/3fs-virt/rm-rf/x')), -2)
  t.is(await errnoOf(ops.getattr('/3fs-virt/other')), -2)
  // refused targets
  t.is(await errnoOf(ops.symlink('tree', '/3fs-virt/rm-rf/x')), -22, 'relative')
  t.is(await errnoOf(ops.symlink('/elsewhere/tree', '/3fs-virt/rm-rf/x')), -22, 'not on this mount')
  t.is(await errnoOf(ops.symlink('/mnt/sother/tree', '/3fs-virt/rm-rf/x')), -22, 'prefix of another path')
  t.is(await errnoOf(ops.symlink('/mnt/s', '/3fs-virt/rm-rf/x')), -1, 'the root')
  t.is(await errnoOf(ops.symlink('/mnt/s/3fs-virt', '/3fs-virt/rm-rf/x')), -1, 'the virtual dir')
  // the real thing
  await ops.symlink('/mnt/s/./tree/', '/3fs-virt/rm-rf/x')
  t.true(f.calls.includes('rm /tree true'), f.calls.join('\n'))
  const st = await ops.getattr('/3fs-virt/rm-rf/x')
  t.is(st.mode & 0o170000, 0o120000, 'the link is visible for the lookup that follows symlink()')
  t.is(await ops.readlink('/3fs-virt/rm-rf/x'), '/mnt/s/./tree/')
  t.is(await errnoOf(ops.symlink('/mnt/s/tree', '/3fs-virt/rm-rf/y')), -2, 'already gone')
  t.is(await errnoOf(ops.mkdir('/3fs-virt/z', 0o755)), -1)
  t.is(await errnoOf(ops.symlink('/mnt/s/d', '/3fs-virt/rm-rf/w').then(() => opsWith(f, { readonly: true }).symlink('/mnt/s/d', '/3fs-virt/rm-rf/v'))), -30)
})

test('xattrs: hf3fs.lock on directories only; ENOTSUP / ENODATA elsewhere', async (t) => {
  const f = fakeFs()
  const ops = opsWith(f)
  t.is(await errnoOf(ops.getxattr('/d', 'hf3fs.lock')), -61)
  t.deepEqual(await ops.listxattr('/d'), [])
  await ops.setxattr('/d', 'hf3fs.lock', Buffer.from('try_lock'))
  t.true(f.calls.includes('lock 10 try_lock'))
  t.deepEqual(JSON.parse((await ops.getxattr('/d', 'hf3fs.lock'))!.toString()), { client: 'me', since: 1 })
  t.deepEqual(await ops.listxattr('/d'), ['hf3fs.lock'])
  t.is(await errnoOf(ops.setxattr('/d', 'hf3fs.lock', Buffer.from('grab'))), -22)
  t.is(await errnoOf(ops.setxattr('/d', 'hf3fs.other', Buffer.from('x'))), -95)
  t.is(await errnoOf(ops.setxattr('/d', 'user.x', Buffer.from('x'))), -95)
  t.is(await errnoOf(ops.setxattr('/d/f', 'hf3fs.lock', Buffer.from('try_lock'))), -95)
  t.is(await errnoOf(ops.getxattr('/d', 'hf3fs.other')), -95)
  t.is(await errnoOf(ops.getxattr('/d', 'user.x')), -61)
  t.is(await errnoOf(ops.getxattr('/d/f', 'hf3fs.lock')), -61)
  t.is(await errnoOf(ops.getxattr('/ln', 'hf3fs.lock')), -95)
  t.is(await errnoOf(ops.getxattr('/3fs-virt', 'hf3fs.lock')), -95)
  t.is(await errnoOf(ops.removexattr('/d/f', 'hf3fs.lock')), -20)
  t.is(await errnoOf(ops.removexattr('/d', 'user.x')), -95)
  await ops.removexattr('/d', 'hf3fs.lock')
  t.true(f.calls.includes('lock 10 clear'))
  t.is(await errnoOf(ops.getxattr('/d', 'hf3fs.lock')), -61)
})

test('xattrs on a read-only mount: set and remove fail with EROFS and reach no meta lockDirectory; get and list still answer', async (t) => {
  const f = fakeFs()
  const ro = opsWith(f, { readonly: true })
  for (const action of ['try_lock', 'preempt_lock', 'unlock', 'clear']) t.is(await errnoOf(ro.setxattr('/d', 'hf3fs.lock', Buffer.from(action))), -30, action)
  t.is(await errnoOf(ro.setxattr('/d', 'user.x', Buffer.from('x'))), -30, 'any set is a change')
  t.is(await errnoOf(ro.removexattr('/d', 'hf3fs.lock')), -30)
  t.false(f.calls.some((c) => c.startsWith('lock ')), f.calls.join('\n'))
  t.is(await errnoOf(ro.getxattr('/d', 'hf3fs.lock')), -61)
  t.deepEqual(await ro.listxattr('/d'), [])
  // a lock another (writable) mount takes is visible here
  await opsWith(f).setxattr('/d', 'hf3fs.lock', Buffer.from('try_lock'))
  t.deepEqual(JSON.parse((await ro.getxattr('/d', 'hf3fs.lock'))!.toString()), { client: 'me', since: 1 })
})

test('operations object: errors become negative errnos, handles are checked', async (t) => {
  const f = fakeFs()
  const ops = opsWith(f).operations()
  const call = <T>(fn: (cb: (err: number, v?: T) => void) => void) => new Promise<[number, T | undefined]>((r) => fn((err, v) => r([err, v])))
  t.deepEqual((await call<unknown>((cb) => ops.getattr!('/nope', cb)))[0], -2)
  const [err, st] = await call<{ mode: number }>((cb) => ops.getattr!('/d/f', cb as never))
  t.is(err, 0)
  t.is(st!.mode, 0o100644)
  const [rerr] = await call((cb) => ops.read!('/d/f', 77, Buffer.alloc(4), 4, 0, (n) => cb(n)))
  t.is(rerr, -9, 'unknown handle: EBADF')
  const [oerr] = await call((cb) => ops.opendir!('/d/f', 0, cb as never))
  t.is(oerr, -20, 'opendir of a file: ENOTDIR')
  const [derr, fd] = await call<number>((cb) => ops.opendir!('/d', 0, cb))
  t.is(derr, 0)
  t.true(fd! > 0)
})

test('a directory open here keeps its place in the map of what the kernel was told, and is listed and stat\'ed by id after another client moved it', async (t) => {
  const f = fakeFs()
  // no path cache (it would answer for the old path by itself), room for two paths
  const ops = opsWith(f, { attrTimeoutMs: 0, reportedPathsMax: 2 })
  await ops.getattr('/d')
  const fd = await ops.opendir('/d')
  // more paths than the map holds: the oldest goes, but not the open directory
  for (const p of ['/tree', '/ln', '/d/f', '/tree', '/ln']) await ops.getattr(p)
  // another client renames /d to /e
  const d = f.nodes.get('/d')!
  const file = f.nodes.get('/d/f')!
  f.nodes.delete('/d')
  f.nodes.delete('/d/f')
  f.nodes.set('/e', d)
  f.nodes.set('/e/f', file)
  t.is((await ops.getattr('/d', true)).ino, 10, 'the held directory, by id')
  t.deepEqual((await ops.readdir('/d', fd)).names, ['.', '..', 'f'])
  t.is((await ops.getattr('/d/f')).ino, 11, 'a name in it, looked up in the directory by id')
  // a fresh lookup of the old name (not of the node) finds nothing
  t.is(await errnoOf(ops.getattr('/d')), -2)
})

test('a LOOKUP that finds another object (or none) where the kernel was told a directory moves that node off the name, which is answered by id from then on', async (t) => {
  const f = fakeFs()
  const ops = opsWith(f, { attrTimeoutMs: 0 })
  const lookup = (p: string) =>
    new Promise<[number, number | undefined, string | undefined]>((r) => ops.operations().getattr!(p, (err, st, as) => r([err, st?.ino, as]), false))
  t.deepEqual(await lookup('/d'), [0, 10, undefined])
  t.deepEqual(await lookup('/d/f'), [0, 11, undefined])
  // another client moves /d away and makes a new directory at its name
  const d = f.nodes.get('/d')!
  const file = f.nodes.get('/d/f')!
  f.nodes.delete('/d/f')
  f.nodes.set('/e', d)
  f.nodes.set('/e/f', file)
  f.nodes.set('/d', inode(20n, 'Directory'))
  const [err, , as] = await lookup('/d')
  t.is(err, -116, 'ESTALE: the kernel looks the name up again')
  t.true(as!.startsWith('strata-held-') && Buffer.byteLength(as!) === 4096, 'a name no request can carry')
  // libfuse's node now has that name: the held directory, and names in it by its id
  t.is((await ops.getattr('/' + as, true)).ino, 10)
  t.is((await ops.getattr(`/${as}/f`)).ino, 11)
  t.deepEqual((await ops.readdir('/' + as, await ops.opendir('/' + as))).names, ['.', '..', 'f'])
  // the kernel's next LOOKUP of the name: the new directory, nothing moved again
  t.deepEqual(await lookup('/d'), [0, 20, undefined])
  t.is((await ops.getattr('/d', true)).ino, 20)
  // the new one is removed too: its node moves as well, and the name is missing
  f.nodes.delete('/d')
  const [gone, , as2] = await lookup('/d')
  t.is(gone, -2)
  t.true(as2!.startsWith('strata-held-') && as2 !== as)
  // a moved node the daemon has no record of (dropped, or another mount's name): ESTALE, never a lookup of that name
  t.is(await errnoOf(ops.getattr('/strata-held-1-1-~', true)), -116)
  t.is(await errnoOf(ops.getattr('/strata-held-1-1-~/x')), -116)
})
