// Scenario 21: the permission matrix. rwx denials are EACCES
// (META_NO_PERMISSION); ownership, sticky, immutable and tree-root denials are
// EPERM (META_NOT_PERMITTED) — see docs/meta.md for why this differs from
// 3FS's all-EPERM.

import test from 'ava'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'

const FS_IMMUTABLE_FL = 0x10

let m!: MetaCluster
useSharedMetaCluster(test, {}, (c) => (m = c))

test.serial('permission matrix: uid 1000 vs 1001, sticky, setgid, immutable, root bypass', async (t) => {
  const root = m.client()
  const u0 = { uid: 1000, gid: 1000, groups: [2000] }
  const u1 = { uid: 1001, gid: 1001, groups: [] }
  const a = m.client(u0)
  const b = m.client(u1)

  await root.mkdirs('/home', { perm: 0o777 })
  // non-root users cannot create in the root directory (0755 root)
  t.is(await codeOf(a.mkdirs('/nope')), 'META_NO_PERMISSION')

  // 1000's private directory
  const p = await a.mkdirs('/home/p', { perm: 0o700 })
  t.deepEqual([p.acl.uid, p.acl.gid, p.acl.perm], [1000, 1000, 0o700])
  await a.create('/home/p/f', { flags: { access: 'r', create: true }, perm: 0o644 })
  t.is(await codeOf(b.stat('/home/p/f')), 'META_NO_PERMISSION', 'no search permission')
  t.is(await codeOf(b.list('/home/p')), 'META_NO_PERMISSION', 'no read permission')
  t.is(await codeOf(b.create('/home/p/g', { flags: { access: 'r', create: true } })), 'META_NO_PERMISSION', 'no write permission')
  t.is(await codeOf(b.remove('/home/p/f')), 'META_NO_PERMISSION')
  // root bypasses rwx
  t.is((await root.stat('/home/p/f')).type, 'File')
  t.is((await root.list('/home/p')).entries.length, 1)
  await root.create('/home/p/byroot', { flags: { access: 'r', create: true } })

  // file access modes
  await a.mkdirs('/home/open', { perm: 0o755 })
  const f = await a.create('/home/open/f', { flags: { access: 'r', create: true }, perm: 0o644 })
  t.is((await b.open('/home/open/f', { access: 'r' })).stat.id, f.stat.id)
  t.is(await codeOf(b.open('/home/open/f', { access: 'w' }, 's1')), 'META_NO_PERMISSION')
  await a.setAttr('/home/open/f', { perm: 0o4666 })
  await b.open('/home/open/f', { access: 'w' }, 's2')
  t.is((await a.stat('/home/open/f')).acl.perm, 0o666, 'a write by a non-owner clears set-id bits')

  // chmod / chown / chgrp / utimes
  t.is(await codeOf(b.setAttr('/home/open/f', { perm: 0o600 })), 'META_NOT_PERMITTED')
  t.is(await codeOf(a.setAttr('/home/open/f', { uid: 1001 })), 'META_NOT_PERMITTED')
  t.is((await a.setAttr('/home/open/f', { gid: 2000 })).acl.gid, 2000, 'owner may chgrp to a group of theirs')
  t.is(await codeOf(a.setAttr('/home/open/f', { gid: 3000 })), 'META_NOT_PERMITTED')
  t.is((await root.setAttr('/home/open/f', { uid: 1001, gid: 1001 })).acl.uid, 1001)
  await root.setAttr('/home/open/f', { uid: 1000, gid: 1000 })
  t.is(await codeOf(b.setAttr('/home/open/f', { mtime: 1_000_000 })), 'META_NOT_PERMITTED', 'explicit times need ownership')
  t.is((await b.setAttr('/home/open/f', { mtime: -1, atime: -1 })).type, 'File', '"now" needs write permission only')
  await a.setAttr('/home/open/f', { perm: 0o644 })
  t.is(await codeOf(b.setAttr('/home/open/f', { mtime: -1 })), 'META_NO_PERMISSION')
  const set = await a.setAttr('/home/open/f', { mtime: 1_700_000_000_000_000, atime: 1_700_000_000_000_000 })
  t.is(set.mtime, 1_700_000_000_000_000)
  // tree roots keep their permissions; setting the ones they have is no change (tar -x into a mount root)
  t.is(await codeOf(root.setAttr('/', { perm: 0o777 })), 'META_NOT_PERMITTED')
  t.is(await codeOf(root.setAttr('/', { uid: 1000 })), 'META_NOT_PERMITTED')
  t.is(await codeOf(root.setAttr('/', { uid: 0, gid: 1000 })), 'META_NOT_PERMITTED')
  const top = await root.stat('/')
  t.deepEqual((await root.setAttr('/', { uid: top.acl.uid, gid: top.acl.gid, perm: top.acl.perm })).acl, top.acl)

  // sticky directory: only the owner of the file (or of the directory, or root) removes or renames
  await root.mkdirs('/tmp', { perm: 0o1777 })
  await a.create('/tmp/af', { flags: { access: 'r', create: true } })
  await b.create('/tmp/bf', { flags: { access: 'r', create: true } })
  t.is(await codeOf(b.remove('/tmp/af')), 'META_NOT_PERMITTED')
  t.is(await codeOf(b.rename('/tmp/af', '/tmp/x')), 'META_NOT_PERMITTED')
  t.is(await codeOf(b.rename('/tmp/bf', '/tmp/af')), 'META_NOT_PERMITTED', 'cannot replace another user\'s file either')
  await b.remove('/tmp/bf')
  await a.rename('/tmp/af', '/tmp/af2')
  await root.remove('/tmp/af2')
  // a directory moved to another parent needs write permission on itself (its ".."), as rename(2)
  await root.mkdirs('/pub')
  await root.mkdirs('/pub/a', { perm: 0o777 })
  await root.mkdirs('/pub/b', { perm: 0o777 })
  await root.mkdirs('/pub/a/rootdir', { perm: 0o755 })
  t.is(await codeOf(a.rename('/pub/a/rootdir', '/pub/b/rootdir')), 'META_NO_PERMISSION')
  await a.rename('/pub/a/rootdir', '/pub/a/renamed')
  await root.rename('/pub/a/renamed', '/pub/b/rootdir')

  // setgid directory: new files get the directory's group, new directories also the bit
  await root.mkdirs('/sg', { perm: 0o2777 })
  await root.setAttr('/sg', { gid: 50 })
  const sf = await a.create('/sg/f', { flags: { access: 'r', create: true } })
  t.is(sf.stat.acl.gid, 50)
  const sd = await a.mkdirs('/sg/d', { perm: 0o755 })
  t.is(sd.acl.gid, 50)
  t.is(sd.acl.perm & 0o2000, 0o2000)
  // a symlink too (Linux gives every new inode below a set-group-id directory its group)
  t.is((await a.symlink('/sg/l', 'f')).acl.gid, 50)
  t.is((await a.create('/home/open/plain', { flags: { access: 'r', create: true } })).stat.acl.gid, 1000)
  // S_ISGID of a group the caller is not in is dropped (chmod, and a group-executable create), as Linux does
  t.is((await a.setAttr('/sg/f', { perm: 0o2755 })).acl.perm, 0o755)
  t.is((await a.create('/sg/x', { flags: { access: 'r', create: true }, perm: 0o2755 })).stat.acl.perm, 0o755)
  t.is((await a.setAttr('/home/open/plain', { perm: 0o2755 })).acl.perm, 0o2755, 'its own group keeps it')
  t.is((await root.setAttr('/sg/f', { perm: 0o2755 })).acl.perm, 0o2755, 'root keeps it')

  // immutable: no write open, unlink, rename or link; only root may set or clear it
  const imm = await a.create('/home/open/imm', { flags: { access: 'r', create: true }, perm: 0o666 })
  t.is(await codeOf(a.setAttr('/home/open/imm', { iflags: FS_IMMUTABLE_FL })), 'META_NOT_PERMITTED')
  await root.setAttr('/home/open/imm', { iflags: FS_IMMUTABLE_FL })
  t.is(await codeOf(a.open('/home/open/imm', { access: 'w' }, 's3')), 'META_NOT_PERMITTED')
  t.is(await codeOf(root.open('/home/open/imm', { access: 'rw' }, 's4')), 'META_NOT_PERMITTED', 'even root')
  t.is((await a.open('/home/open/imm', { access: 'r' })).stat.id, imm.stat.id)
  t.is(await codeOf(a.remove('/home/open/imm')), 'META_NOT_PERMITTED')
  t.is(await codeOf(root.remove('/home/open/imm')), 'META_NOT_PERMITTED')
  t.is(await codeOf(a.rename('/home/open/imm', '/home/open/imm2')), 'META_NOT_PERMITTED')
  t.is(await codeOf(a.hardLink('/home/open/imm', '/home/open/imm3')), 'META_NOT_PERMITTED')
  t.is(await codeOf(a.setAttr('/home/open/imm', { iflags: 0 })), 'META_NOT_PERMITTED')
  await root.setAttr('/home/open/imm', { iflags: 0 })
  await a.remove('/home/open/imm')

  // directory acl changes reach the entry's copy (used for search checks)
  await a.setAttr('/home/open', { perm: 0o700 })
  t.is(await codeOf(b.stat('/home/open/f')), 'META_NO_PERMISSION')
  await a.setAttr('/home/open', { perm: 0o711 })
  t.is((await b.stat('/home/open/f')).type, 'File')
  t.is(await codeOf(b.list('/home/open')), 'META_NO_PERMISSION')
})

test.serial('an immutable inode keeps its mode, owner, group and times, for root and the owner alike (Linux may_setattr; 3FS does not check)', async (t) => {
  const root = m.client()
  const a = m.client({ uid: 1000, gid: 1000, groups: [2000] })
  await root.mkdirs('/immattr', { perm: 0o777 })
  const made = (await a.create('/immattr/f', { flags: { access: 'r', create: true }, perm: 0o644 })).stat
  await a.mkdirs('/immattr/d', { perm: 0o755 })
  await root.setAttr('/immattr/f', { iflags: FS_IMMUTABLE_FL })
  await root.setAttr('/immattr/d', { iflags: FS_IMMUTABLE_FL })
  const before = await root.statById(made.id)
  const refused = async (who: typeof root, path: string, attrs: Parameters<typeof root.setAttr>[1]) => {
    const e = await t.throwsAsync(who.setAttr(path, attrs))
    return `${(e as { code?: string }).code}: ${(e as { reason?: string }).reason}`
  }
  t.regex(await refused(root, '/immattr/f', { perm: 0o600 }), /^META_NOT_PERMITTED: .* is immutable: its mode cannot change$/)
  t.regex(await refused(a, '/immattr/f', { perm: 0o644 }), /its mode cannot change$/, 'the owner, and an unchanged mode, too')
  t.regex(await refused(root, '/immattr/f', { uid: 1001 }), /its owner cannot change$/)
  t.regex(await refused(a, '/immattr/f', { gid: 2000 }), /its group cannot change$/)
  t.regex(await refused(root, '/immattr/f', { mtime: 1_000_000 }), /its times cannot change$/)
  t.regex(await refused(a, '/immattr/f', { atime: -1, mtime: -1 }), /its times cannot change$/, '"now" too (touch)')
  t.regex(await refused(root, '/immattr/f', { uid: 5, gid: 5, perm: 0o600 }), /its mode, owner, group cannot change$/)
  t.regex(await refused(root, '/immattr/f', { iflags: FS_IMMUTABLE_FL, perm: 0o600 }), /its mode cannot change$/, 'keeping the flag in the same request')
  t.regex(await refused(root, '/immattr/d', { perm: 0o700 }), /its mode cannot change$/, 'directories too')
  const after = await root.statById(made.id)
  t.deepEqual([after.acl, after.atime, after.mtime, after.ctime], [before.acl, before.atime, before.mtime, before.ctime])
  // the tree root is immutable (3FS Acl::root) only to keep it in place: its times still change (tar -x into a mount root)
  t.is((await root.stat('/')).acl.iflags, FS_IMMUTABLE_FL)
  t.is((await root.setAttr('/', { atime: 1_000_000, mtime: 1_000_000 })).mtime, 1_000_000)
  await root.setAttr('/', { atime: -1, mtime: -1 })
  // a directory's layout (the policy for new files) and the flag itself still change
  const dir = await root.stat('/immattr/d')
  t.is((await root.setAttr('/immattr/d', { layout: dir.directory!.layout })).id, dir.id)
  // clearing the flag in the request that also chmods is chattr -i, then chmod; setting it, chmod then chattr +i
  const cleared = await root.setAttr('/immattr/f', { iflags: 0, perm: 0o600 })
  t.deepEqual([cleared.acl.iflags, cleared.acl.perm], [0, 0o600])
  const set = await root.setAttr('/immattr/f', { iflags: FS_IMMUTABLE_FL, perm: 0o640 })
  t.deepEqual([set.acl.iflags, set.acl.perm], [FS_IMMUTABLE_FL, 0o640])
  await root.setAttr('/immattr/f', { iflags: 0 })
  await root.setAttr('/immattr/d', { iflags: 0 })
  t.is((await a.setAttr('/immattr/f', { perm: 0o644, mtime: -1 })).acl.perm, 0o644, 'without the flag all is as before')

})

test.serial('setAttr refuses uid and gid 4294967295 ((uid_t)-1, chown\'s "unchanged"), from root too; everything else stays', async (t) => {
  const root = m.client()
  await root.mkdirs('/ids')
  const f = (await root.create('/ids/f', { flags: { access: 'r', create: true } })).stat
  await root.setAttr('/ids/f', { uid: 1000, gid: 1000 })
  const err = async (p: Promise<unknown>) => {
    const e = await t.throwsAsync(p)
    return `${(e as { code?: string }).code}: ${(e as { reason?: string }).reason}`
  }
  t.is(await err(root.setAttr('/ids/f', { uid: 0xffffffff })), 'META_INVALID_ARGUMENT: uid 4294967295 is (uid_t)-1, chown\'s "unchanged" value, not a valid owner')
  t.is(await err(root.setAttr('/ids/f', { gid: 0xffffffff })), 'META_INVALID_ARGUMENT: gid 4294967295 is (gid_t)-1, chown\'s "unchanged" value, not a valid group')
  t.is(await codeOf(root.setAttr('/ids/f', { uid: 0xffffffff, gid: 5, perm: 0o600 })), 'META_INVALID_ARGUMENT', 'the whole request is refused')
  t.is(await codeOf(root.setAttr('/ids', { gid: 0xffffffff })), 'META_INVALID_ARGUMENT', 'directories too')
  const st = await root.statById(f.id)
  t.deepEqual([st.acl.uid, st.acl.gid, st.acl.perm], [1000, 1000, 0o644])
  // the largest real ids are fine
  t.deepEqual((await root.setAttr('/ids/f', { uid: 0xfffffffe, gid: 0xfffffffe })).acl.uid, 0xfffffffe)
})

test.serial('rename over an entry of the wrong type in a directory the caller may not write is EACCES, not ENOTDIR/EISDIR (vfs_rename: may_delete checks the permission before the type)', async (t) => {
  const root = m.client()
  const u = m.client({ uid: 1000, gid: 1000, groups: [] })
  await root.mkdirs('/rtype/ro/d', { recursive: true })
  await root.create('/rtype/ro/f', { flags: { access: 'r', create: true } })
  await root.mkdirs('/rtype/w', { perm: 0o777 })
  await u.mkdirs('/rtype/w/src')
  await u.create('/rtype/w/f', { flags: { access: 'r', create: true } })
  t.is(await codeOf(u.rename('/rtype/w/src', '/rtype/ro/f')), 'META_NO_PERMISSION', 'a directory over a file')
  t.is(await codeOf(u.rename('/rtype/w/f', '/rtype/ro/d')), 'META_NO_PERMISSION', 'a file over a directory')
  // with the permission, the type rules answer as before
  t.is(await codeOf(root.rename('/rtype/w/src', '/rtype/ro/f')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(root.rename('/rtype/w/f', '/rtype/ro/d')), 'META_IS_DIRECTORY')
})
