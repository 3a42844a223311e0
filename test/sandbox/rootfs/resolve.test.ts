// Path resolution inside an untrusted root, on local directories.
import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { StrataError } from '../../../fs/common/errors.js'
import { cleanAbsolute, resolveInRoot } from '../../../sandbox/rootfs/index.js'

function tree(t: import('ava').ExecutionContext): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-resolve-'))
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }))
  fs.mkdirSync(path.join(root, 'etc/conf'), { recursive: true })
  fs.mkdirSync(path.join(root, 'usr/lib'), { recursive: true })
  fs.writeFileSync(path.join(root, 'etc/file'), 'f')
  fs.symlinkSync('/etc', path.join(root, 'abs'))
  fs.symlinkSync('usr/lib', path.join(root, 'lib'))
  fs.symlinkSync('../etc/conf', path.join(root, 'usr/conf'))
  fs.symlinkSync('../../..', path.join(root, 'usr/up'))
  fs.symlinkSync('/', path.join(root, 'slash'))
  fs.symlinkSync('a', path.join(root, 'b'))
  fs.symlinkSync('b', path.join(root, 'a'))
  fs.symlinkSync('/nowhere/new', path.join(root, 'dangling'))
  return root
}

const R = (root: string, p: string) => resolveInRoot(root, cleanAbsolute(p, 'ROOTFS_BAD_MOUNT_TARGET', 't'), 'ROOTFS_BAD_MOUNT_TARGET', 't')

test('cleanAbsolute refuses relative paths, .., NUL and the root; drops . and empty components', (t) => {
  t.deepEqual(cleanAbsolute('/a//b/./c/', 'ROOTFS_BAD_MOUNT_TARGET', 't'), ['a', 'b', 'c'])
  for (const bad of ['a/b', '', '/', '/./', '/a/../b', '/..', '/a/\0']) {
    const e = t.throws(() => cleanAbsolute(bad, 'ROOTFS_BAD_MOUNT_TARGET', 't'), { instanceOf: StrataError })
    t.is(e?.code, 'ROOTFS_BAD_MOUNT_TARGET', JSON.stringify(bad))
  }
})

test('symlinks resolve inside the root: absolute links restart at the root, never on the host', async (t) => {
  const root = tree(t)
  t.like(await R(root, '/abs/conf'), { hostPath: path.join(root, 'etc/conf'), type: 'dir', existing: 2 })
  t.like(await R(root, '/lib'), { hostPath: path.join(root, 'usr/lib'), type: 'dir' })
  t.like(await R(root, '/usr/conf/x/y'), { hostPath: path.join(root, 'etc/conf/x/y'), type: null, existing: 2, parts: ['etc', 'conf', 'x', 'y'] })
  t.like(await R(root, '/slash/etc/file'), { hostPath: path.join(root, 'etc/file'), type: 'file' })
  // a dangling absolute link points at a path to create inside the root
  t.like(await R(root, '/dangling'), { hostPath: path.join(root, 'nowhere/new'), type: null, existing: 0 })
})

test('escapes, loops and files in the middle are refused', async (t) => {
  const root = tree(t)
  for (const p of ['/usr/up', '/usr/up/x', '/a', '/etc/file/x', '/slash']) {
    const e = await t.throwsAsync(R(root, p), { instanceOf: StrataError })
    t.is(e?.code, 'ROOTFS_BAD_MOUNT_TARGET', p)
  }
})
