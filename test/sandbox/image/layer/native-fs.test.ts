// The addon calls the layer code needs: mknod, l*xattr, lutimens.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { native, XATTR } from '../../../../fs/common/native.js'
import { tmpDir } from './helpers.js'

test('mknod makes char/block devices and fifos', (t) => {
  const d = tmpDir(t)
  native().mknod(path.join(d, 'c'), 0o020000 | 0o640, 0, 0)
  native().mknod(path.join(d, 'b'), 0o060000 | 0o600, 259, 70000)
  native().mknod(path.join(d, 'p'), 0o010000 | 0o600, 0, 0)
  const c = fs.lstatSync(path.join(d, 'c'), { bigint: true })
  t.true(c.isCharacterDevice())
  t.is(c.rdev, 0n)
  const b = fs.lstatSync(path.join(d, 'b'), { bigint: true })
  t.true(b.isBlockDevice())
  t.is(b.rdev, BigInt((70000 & 0xff) | ((259 & 0xfff) << 8)) | (BigInt(70000 & ~0xff) << 12n))
  t.true(fs.lstatSync(path.join(d, 'p')).isFIFO())
  t.throws(() => native().mknod(path.join(d, 'c'), 0o020000, 0, 0), { code: 'EEXIST' })
  t.throws(() => native().mknod(path.join(d, 'x'), 0o020000, -1, 0), { instanceOf: RangeError })
  t.throws(() => (native().mknod as (...a: unknown[]) => void)(path.join(d, 'x'), 'mode', 0, 0), { instanceOf: TypeError })
})

test('l*xattr never follow symlinks; values are bytes; errors carry errno names and the path', (t) => {
  const d = tmpDir(t)
  const f = path.join(d, 'f')
  const s = path.join(d, 's')
  fs.writeFileSync(f, '')
  fs.symlinkSync(f, s)
  const n = native()
  const bin = Buffer.from([0, 0xff, 0x80, 10])
  n.lsetxattr(f, 'user.b', bin)
  n.lsetxattr(f, 'user.a', Buffer.alloc(0))
  t.deepEqual(n.lgetxattr(f, 'user.b'), bin)
  t.deepEqual(n.lgetxattr(f, 'user.a'), Buffer.alloc(0))
  t.deepEqual(n.llistxattr(f).sort(), ['user.a', 'user.b'])
  t.deepEqual(n.llistxattr(s), [], 'the link, not its target')
  n.lsetxattr(s, 'trusted.t', Buffer.from('y'))
  t.deepEqual(n.llistxattr(s), ['trusted.t'])
  t.deepEqual(n.llistxattr(f).sort(), ['user.a', 'user.b'])
  const e = t.throws(() => n.lgetxattr(f, 'user.none'), { code: 'ENODATA' }) as NodeJS.ErrnoException
  t.is(e.path, f)
  t.is(e.syscall, 'lgetxattr')
  t.throws(() => n.lsetxattr(s, 'user.x', Buffer.from('1')), { code: 'EPERM' })
  t.throws(() => n.lsetxattr(f, 'user.a', Buffer.from('1'), XATTR.CREATE), { code: 'EEXIST' })
  n.lremovexattr(f, 'user.a')
  t.deepEqual(n.llistxattr(f), ['user.b'])
  t.throws(() => n.lremovexattr(f, 'user.a'), { code: 'ENODATA' })
  t.throws(() => n.llistxattr(path.join(d, 'missing')), { code: 'ENOENT' })
})

test('lutimens sets exact nanoseconds without following symlinks', (t) => {
  const d = tmpDir(t)
  const f = path.join(d, 'f')
  const s = path.join(d, 's')
  fs.writeFileSync(f, '')
  fs.symlinkSync(f, s)
  native().lutimens(s, 1, 2, 1_700_000_000, 123_456_789)
  t.is(fs.lstatSync(s, { bigint: true }).mtimeNs, 1_700_000_000_123_456_789n)
  t.is(fs.lstatSync(s, { bigint: true }).atimeNs, 1_000_000_002n)
  t.not(fs.statSync(f, { bigint: true }).mtimeNs, 1_700_000_000_123_456_789n)
  t.throws(() => native().lutimens(f, 0, 1e9, 0, 0), { instanceOf: RangeError })
})
