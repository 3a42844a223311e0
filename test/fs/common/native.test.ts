import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { native, MS, MNT } from '../../../fs/common/native.js'

function mounted(dir: string): boolean {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === dir)
}

test('mount and umount2 through the addon; errors carry errno names', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-native-'))
  t.teardown(() => {
    if (mounted(dir)) native().umount2(dir, MNT.DETACH)
    fs.rmSync(dir, { recursive: true, force: true })
  })
  native().mount('strata-test', dir, 'tmpfs', MS.NOSUID | MS.NODEV, 'size=1m')
  t.true(mounted(dir))
  fs.writeFileSync(path.join(dir, 'f'), 'x')
  native().mount(null, dir, null, MS.REMOUNT | MS.RDONLY | MS.NOSUID | MS.NODEV, null)
  t.throws(() => fs.writeFileSync(path.join(dir, 'g'), 'y'), { code: 'EROFS' })
  native().umount2(dir, 0)
  t.false(mounted(dir))
  t.throws(() => native().umount2(dir, 0), { code: 'EINVAL' })
  t.throws(() => native().mount('x', path.join(dir, 'nope'), 'tmpfs', 0, null), { code: 'ENOENT' })
  t.true(native().gettid() > 0)
})

test('alignedBuffer: memory at the asked alignment, which O_DIRECT accepts where a misaligned view is refused; bad arguments are EINVAL', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-native-'))
  let fd = -1
  t.teardown(() => {
    if (fd >= 0) fs.closeSync(fd)
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const b = native().alignedBuffer(64 * 1024, 4096)
  t.is(b.length, 64 * 1024)
  t.is(b.byteOffset, 0)
  b.fill(7)
  fd = fs.openSync(path.join(dir, 'f'), fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_DIRECT)
  t.is(fs.writeSync(fd, b, 0, b.length, 0), b.length)
  const r = native().alignedBuffer(64 * 1024, 4096)
  t.is(fs.readSync(fd, r, 0, r.length, 0), r.length)
  t.true(r.equals(b))
  // the kernel refuses direct I/O from memory off the device's block alignment
  t.throws(() => fs.readSync(fd, r.subarray(1, 1 + 4096), 0, 4096, 0), { code: 'EINVAL' })
  t.is(native().alignedBuffer(0, 512).length, 0)
  for (const [size, align] of [[-1, 4096], [1.5, 4096], [2 ** 31, 4096], [4096, 3], [4096, 4], [4096, 1 << 20]] as const) {
    t.throws(() => native().alignedBuffer(size, align), { code: 'EINVAL' }, `${size}, ${align}`)
  }
})

test('dataExtents: where a file has data (FIEMAP), holes left out; a bad descriptor is EBADF', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fiemap-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'f')
  fs.writeFileSync(file, '')
  fs.truncateSync(file, 8 << 20)
  const fd = fs.openSync(file, 'r+')
  try {
    fs.writeSync(fd, Buffer.alloc(4096, 1), 0, 4096, 5 << 20)
    fs.fsyncSync(fd)
    const ext = native().dataExtents(fd)
    t.is(ext.length % 2, 0)
    // the one written block is covered; nothing before 5 MiB is
    t.true(ext.some((_, k) => k % 2 === 0 && ext[k]! <= 5 << 20 && ext[k]! + ext[k + 1]! >= (5 << 20) + 4096), JSON.stringify(ext))
    t.false(ext.some((_, k) => k % 2 === 0 && ext[k]! < 5 << 20 && ext[k]! + ext[k + 1]! > 0 && ext[k]! + ext[k + 1]! <= 5 << 20), JSON.stringify(ext))
  } finally {
    fs.closeSync(fd)
  }
  t.throws(() => native().dataExtents(1 << 20), { code: 'EBADF' })
})
