// Scenario 22 (symlinks) and 25 (directory lock) at the RPC level.

import test from 'ava'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'

let m!: MetaCluster
useSharedMetaCluster(test, {}, (c) => (m = c))

test.serial('symlinks: relative and absolute, follow rules, ELOOP limits, unlink, hard links', async (t) => {
  const c = m.client()
  await c.mkdirs('/d/sub', { recursive: true })
  const target = await c.create('/d/sub/file', { flags: { access: 'r', create: true } })
  const abs = await c.symlink('/abs', '/d/sub/file')
  await c.symlink('/d/rel', 'sub/file')
  await c.symlink('/d/up', '../d/sub')
  // stat follows only when asked; the link itself keeps its target verbatim (readlink)
  t.is((await c.stat('/abs', { followLastSymlink: true })).id, target.stat.id)
  t.is((await c.stat('/d/rel', { followLastSymlink: true })).id, target.stat.id)
  const l = await c.stat('/abs')
  t.is(l.type, 'Symlink')
  t.is(l.id, abs.id)
  t.is(l.symlink!.target, '/d/sub/file')
  t.is((await c.stat('/d/rel')).symlink!.target, 'sub/file')
  // symlinks in the middle of a path are always followed
  t.is((await c.stat('/d/up/file')).id, target.stat.id)
  t.is(await c.realPath('/d/up/file'), '/d/sub/file')
  t.is(await c.realPath('/d/up/file', false), '/d/sub/file')
  // open and create follow the last symlink
  t.is((await c.open('/d/rel', { access: 'r' })).stat.id, target.stat.id)
  t.is((await c.create('/abs', { flags: { access: 'r', create: true } })).stat.id, target.stat.id)
  t.is(await codeOf(c.create('/abs', { flags: { access: 'r', create: true, excl: true } })), 'META_EXISTS')
  // a dangling link: create makes its target
  await c.symlink('/dangling', '/d/made')
  const made = await c.create('/dangling', { flags: { access: 'r', create: true } })
  t.is((await c.stat('/d/made')).id, made.stat.id)
  t.is(await codeOf(c.symlink('/abs', '/x')), 'META_EXISTS')
  t.is(await codeOf(c.symlink('/empty', '')), 'META_INVALID_ARGUMENT')

  // nesting: lN -> lN-1/. ; depth 4 resolves, depth 5 is ELOOP
  await c.symlink('/l1', '/d')
  for (let i = 2; i <= 5; i++) await c.symlink(`/l${i}`, `/l${i - 1}/.`)
  t.is((await c.stat('/l4/sub/file')).id, target.stat.id)
  t.is(await codeOf(c.stat('/l5/sub/file')), 'META_TOO_MANY_SYMLINKS')
  // a flat chain longer than the total limit (10) is ELOOP too
  await c.symlink('/c0', '/d/sub/file')
  for (let i = 1; i <= 11; i++) await c.symlink(`/c${i}`, `/c${i - 1}`)
  t.is((await c.stat('/c9', { followLastSymlink: true })).id, target.stat.id)
  t.is(await codeOf(c.stat('/c11', { followLastSymlink: true })), 'META_TOO_MANY_SYMLINKS')
  // loops
  await c.symlink('/loopa', '/loopb')
  await c.symlink('/loopb', '/loopa')
  t.is(await codeOf(c.stat('/loopa', { followLastSymlink: true })), 'META_TOO_MANY_SYMLINKS')

  // unlink removes the link, not its target; the link's inode goes with its last link
  await c.remove('/abs')
  t.is(await codeOf(c.stat('/abs')), 'META_NOT_FOUND')
  t.is(await codeOf(c.statById(abs.id)), 'META_NOT_FOUND')
  t.is((await c.stat('/d/sub/file')).id, target.stat.id)

  // hard links: not to directories; both names share the inode
  const h = await c.hardLink('/d/sub/file', '/d/hard')
  t.is(h.nlink, 2)
  t.is((await c.stat('/d/hard')).id, target.stat.id)
  t.is(await codeOf(c.hardLink('/d/sub', '/d/dirlink')), 'META_NOT_PERMITTED')
  t.is(await codeOf(c.hardLink('/d/sub/file', '/d/hard')), 'META_EXISTS')
  await c.remove('/d/sub/file')
  const still = await c.stat('/d/hard')
  t.is(still.nlink, 1)
  t.false((await c.gcList()).some((e) => e.inode === target.stat.id))
})

test.serial('a dangling symlink is named by the path the caller gave, with its target as detail, not by what failed inside the target', async (t) => {
  const c = m.client()
  await c.mkdirs('/dl/dir', { recursive: true })
  await c.symlink('/dl/abs', '/nowhere/x')
  await c.symlink('/dl/rel', 'missing')
  await c.symlink('/dl/chain', 'abs')
  await c.create('/dl/file', { flags: { access: 'r', create: true } })
  await c.symlink('/dl/tofile', 'file/x')
  const err = async (p: Promise<unknown>) => {
    const e = (await t.throwsAsync(p)) as { code?: string; reason?: string; detail?: Record<string, unknown> }
    return { what: `${e.code}: ${e.reason}`, target: e.detail?.target }
  }
  const follow = { followLastSymlink: true }
  t.deepEqual(await err(c.stat('/dl/abs', follow)), { what: 'META_NOT_FOUND: /dl/abs is a dangling symlink (to /nowhere/x)', target: '/nowhere/x' })
  t.deepEqual(await err(c.stat('/dl/rel', follow)), { what: 'META_NOT_FOUND: /dl/rel is a dangling symlink (to missing)', target: 'missing' })
  t.deepEqual(await err(c.stat('/dl/chain', follow)), { what: 'META_NOT_FOUND: /dl/chain is a dangling symlink (to abs)', target: 'abs' })
  t.deepEqual(await err(c.open('/dl/abs', { access: 'r' })), { what: 'META_NOT_FOUND: /dl/abs is a dangling symlink (to /nowhere/x)', target: '/nowhere/x' })
  t.deepEqual(await err(c.setAttr('/dl/rel', { perm: 0o600 })), { what: 'META_NOT_FOUND: /dl/rel is a dangling symlink (to missing)', target: 'missing' })
  // in the middle of a path: named on the whole path, as a missing component is
  t.deepEqual(await err(c.stat('/dl/abs/y')), { what: 'META_NOT_FOUND: abs in /dl/abs/y is a dangling symlink (to /nowhere/x)', target: '/nowhere/x' })
  // a link to something that is not a directory, and a plain missing name, keep their own errors
  t.is(await codeOf(c.stat('/dl/tofile', follow)), 'META_NOT_DIRECTORY')
  t.deepEqual(await err(c.stat('/dl/none', follow)), { what: 'META_NOT_FOUND: /dl/none not found', target: undefined })
  // the link itself is still there, and create through it still makes its target
  t.is((await c.stat('/dl/rel')).type, 'Symlink')
  const made = await c.create('/dl/rel', { flags: { access: 'r', create: true } })
  t.is((await c.stat('/dl/missing')).id, made.stat.id)
})

test.serial('directory lock: others cannot change the directory while a client holds it', async (t) => {
  const root = m.client()
  const dir = await root.mkdirs('/locked', { perm: 0o777 })
  await root.create('/locked/existing', { flags: { access: 'r', create: true }, perm: 0o666 })
  await root.mkdirs('/elsewhere', { perm: 0o777 })
  const a = m.client({ uid: 1000, gid: 1000, groups: [] })
  const b = m.client({ uid: 1001, gid: 1001, groups: [] })
  const locked = await a.lock(dir.id, 'try_lock')
  t.is(locked.directory!.lock!.client, a.clientId)
  t.is((await b.stat('/locked')).directory!.lock!.client, a.clientId, 'the holder is visible in stat')
  t.is(await codeOf(b.create('/locked/x', { flags: { access: 'r', create: true } })), 'META_NO_LOCK')
  t.is(await codeOf(b.mkdirs('/locked/d')), 'META_NO_LOCK')
  t.is(await codeOf(b.symlink('/locked/s', '/x')), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/locked/existing')), 'META_NO_LOCK')
  t.is(await codeOf(b.rename('/locked/existing', '/elsewhere/e')), 'META_NO_LOCK')
  t.is(await codeOf(b.hardLink('/locked/existing', '/locked/h')), 'META_NO_LOCK')
  // reads and opens of existing files are fine
  t.is((await b.list('/locked')).entries.length, 1)
  await b.open('/locked/existing', { access: 'w' }, 'sb')
  // the holder works normally
  await a.create('/locked/mine', { flags: { access: 'r', create: true } })
  t.is(await codeOf(b.lock(dir.id, 'try_lock')), 'META_NO_LOCK')
  t.is(await codeOf(b.lock(dir.id, 'unlock')), 'META_NO_LOCK')
  await a.lock(dir.id, 'try_lock')
  // preempt takes it over
  t.is((await b.lock(dir.id, 'preempt_lock')).directory!.lock!.client, b.clientId)
  t.is(await codeOf(a.create('/locked/y', { flags: { access: 'r', create: true } })), 'META_NO_LOCK')
  await b.create('/locked/z', { flags: { access: 'r', create: true } })
  t.is(await codeOf(a.lock(dir.id, 'unlock')), 'META_NO_LOCK')
  t.is((await b.lock(dir.id, 'unlock')).directory!.lock, null)
  t.is(await codeOf(b.lock(dir.id, 'unlock')), 'META_NO_LOCK')
  await a.lock(dir.id, 'try_lock')
  t.is((await b.lock(dir.id, 'clear')).directory!.lock, null)
  await b.create('/locked/w', { flags: { access: 'r', create: true } })
  // needs write permission on the directory, and a directory
  const f = await root.create('/plain', { flags: { access: 'r', create: true }, perm: 0o666 })
  t.is(await codeOf(a.lock(f.stat.id, 'try_lock')), 'META_NOT_DIRECTORY')
  const ro = await root.mkdirs('/ro', { perm: 0o755 })
  t.is(await codeOf(a.lock(ro.id, 'try_lock')), 'META_NO_PERMISSION')
})

test.serial('directory lock: removing a locked directory, or a tree with one inside, is refused to other clients', async (t) => {
  const root = m.client()
  const a = root.as({ uid: 0, gid: 0, groups: [] }, 'lock-holder-a')
  const b = root.as({ uid: 0, gid: 0, groups: [] }, 'other-client-b')
  await root.mkdirs('/lt/top/mid/deep', { recursive: true })
  await root.create('/lt/top/mid/deep/f', { flags: { access: 'r', create: true } })
  await root.mkdirs('/lt/empty')
  await root.mkdirs('/lt/dst')
  await root.mkdirs('/trash/u', { recursive: true })
  const deep = await root.stat('/lt/top/mid/deep')
  const empty = await root.stat('/lt/empty')
  await a.lock(deep.id, 'try_lock')
  await a.lock(empty.id, 'try_lock')
  // the locked directory itself, and every tree that holds it
  t.is(await codeOf(b.remove('/lt/empty', { rmdir: true, checkType: true })), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/lt/top/mid/deep', { recursive: true })), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/lt/top/mid', { recursive: true })), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/lt/top', { recursive: true })), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/lt', { recursive: true })), 'META_NO_LOCK')
  // without recursive, a non-empty directory is still just not empty
  t.is(await codeOf(b.remove('/lt/top', { rmdir: true, checkType: true })), 'META_NOT_EMPTY')
  // a rename over the locked (empty) directory removes it too
  t.is(await codeOf(b.rename('/lt/dst', '/lt/empty')), 'META_NO_LOCK')
  // and a move into the trash is a recursive remove
  t.is(await codeOf(b.rename('/lt/top', '/trash/u/top')), 'META_NO_LOCK')
  // nothing changed
  t.is((await root.stat('/lt/top/mid/deep/f')).type, 'File')
  t.is((await root.stat('/lt/empty')).id, empty.id)
  t.is((await root.stat('/lt/dst')).type, 'Directory')
  // moving the tree elsewhere keeps its contents (3FS: only the parents' locks count), and the lock still holds there
  await b.rename('/lt/top', '/lt/dst/top')
  t.is(await codeOf(b.remove('/lt/dst', { recursive: true })), 'META_NO_LOCK')
  t.is(await codeOf(b.remove('/lt/dst/top/mid/deep/f')), 'META_NO_LOCK')
  // the holder may remove what it locked
  await a.remove('/lt/dst/top', { recursive: true })
  await a.remove('/lt/empty', { rmdir: true, checkType: true })
  // once released or cleared, the others may too
  await root.mkdirs('/lt/again/inner', { recursive: true })
  const inner = await root.stat('/lt/again/inner')
  await a.lock(inner.id, 'try_lock')
  t.is(await codeOf(b.remove('/lt/again', { recursive: true })), 'META_NO_LOCK')
  await b.lock(inner.id, 'clear')
  await b.remove('/lt', { recursive: true })
  t.is(await codeOf(root.stat('/lt')), 'META_NOT_FOUND')
})
