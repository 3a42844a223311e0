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
