// Scenario 20: recursive remove takes a whole tree out of the namespace in
// one transaction, into GC, which dismantles it (inodes and chunks); a subtree
// the remover may not delete ends in /trash/gc-orphans with an
// `_hf3fs_original_path` symlink. Plain unlink/rmdir rules.

import test from 'ava'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { stripeChainIds } from '../../../fs/meta/chains.js'
import type { Inode } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

const CHUNK = 65536

async function writeChunk(m: MetaCluster, inode: Inode, index: number, length: number): Promise<number> {
  const chains = stripeChainIds(await m.c.mgmtd.routing(), inode.file!.layout)
  const chain = chains[index % chains.length]!
  await m.storage.write(chain, chunkIdOf(inode.id, index), 0, Buffer.alloc(length, 1), CHUNK)
  return chain
}

let m!: MetaCluster
useSharedMetaCluster(test, { meta: { recursiveRemovePermCheck: 3, gcFileDelayMs: 0, gcDirectoryDelayMs: 1500 } }, (c) => (m = c))

test.serial('recursive remove of a 3-level tree', async (t) => {
  // a small recursive permission check: /t/c's children are not looked at before the remove
    const root = m.client()
  const u = { uid: 1000, gid: 1000, groups: [] }
  const c = m.client(u)
  await root.mkdirs('/home', { perm: 0o777 })
  await c.mkdirs('/home/t')
  const files: Inode[] = []
  for (const a of ['a', 'b', 'c']) {
    for (const b of ['x', 'y', 'z']) {
      await c.mkdirs(`/home/t/${a}/${b}`, { recursive: true })
      for (let i = 0; i < 5; i++) files.push((await c.create(`/home/t/${a}/${b}/f${i}`, { flags: { access: 'r', create: true } })).stat)
    }
  }
  const chunked = files.slice(0, 6)
  const chains = new Map<bigint, number>()
  for (const f of chunked) chains.set(f.id, await writeChunk(m, f, 0, 1000))
  const before = (await root.dumpAll()).inodes.length

  // not recursive: refused
  t.is(await codeOf(c.remove('/home/t', { rmdir: true, checkType: true })), 'META_NOT_EMPTY')
  t.is(await codeOf(c.remove('/home/t/a/x/f0', { rmdir: true, checkType: true })), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.remove('/home/t/a/x', { checkType: true })), 'META_IS_DIRECTORY')
  // another user's tree: the owner check refuses
  t.is(await codeOf(m.client({ uid: 1001, gid: 1001, groups: [] }).remove('/home/t', { recursive: true })), 'META_NOT_PERMITTED')

  const t0 = await c.stat('/home/t')
  await c.remove('/home/t', { recursive: true })
  t.is(await codeOf(c.stat('/home/t')), 'META_NOT_FOUND')
  t.is(await codeOf(c.stat('/home/t/a/x/f0')), 'META_NOT_FOUND')
  t.deepEqual((await c.listAll('/home')).map((e) => e.name), [])
  const gc = await root.gcList()
  const d = gc.find((e) => e.inode === t0.id)
  t.truthy(d, 'the tree is one d- entry in a GC directory')
  t.true(d!.name.startsWith('d-'))
  t.is(d!.origPath, '/home/t')
  t.is(d!.user, 1000)

  // GC takes it apart: every inode of the tree and every chunk goes
  await until(async () => (await root.dumpAll()).inodes.length <= before - (files.length + 13), 20000, 'tree inodes collected')
  const left = new Set((await root.dumpAll()).inodes.map((i) => i.id))
  t.false(left.has(t0.id))
  t.true(files.every((f) => !left.has(f.id)))
  for (const f of chunked) t.is((await m.storage.queryLastChunk(chains.get(f.id)!, fileChunkRange(f.id))).lastChunkId, null)
  await until(async () => (await root.gcList()).length === 0, 15000, 'GC directories empty')
})

test.serial('recursive remove: a subtree the remover may not delete goes to trash/gc-orphans', async (t) => {
  const root = m.client()
  const u = { uid: 1000, gid: 1000, groups: [] }
  const other = { uid: 1001, gid: 1001, groups: [] }
  await root.mkdirs('/home2', { perm: 0o777 })
  const c = m.client(u)
  await c.mkdirs('/home2/t/a', { recursive: true })
  await c.mkdirs('/home2/t/b', { recursive: true })
  await c.mkdirs('/home2/t/c', { recursive: true, perm: 0o777 })
  // 1001's private directory deep enough that the bounded check does not see it
  const o = m.client(other)
  await o.mkdirs('/home2/t/c/private', { perm: 0o700 })
  await o.create('/home2/t/c/private/secret', { flags: { access: 'r', create: true } })
  await c.remove('/home2/t', { recursive: true })
  const orphanRoot = await until(async () => {
    const list = await root.listAll('/trash/gc-orphans').catch(() => [])
    return list.length ? list : undefined
  }, 20000, 'orphan directory created')
  t.true(orphanRoot[0]!.name.startsWith('user-1000-'))
  const orphanDir = `/trash/gc-orphans/${orphanRoot[0]!.name}`
  const kept = await until(async () => {
    const e = await root.listAll(orphanDir)
    return e.some((x) => x.name === 'private') ? e : undefined
  }, 20000, 'private subtree kept')
  t.truthy(kept)
  t.is((await root.stat(`${orphanDir}/private/secret`)).type, 'File')
  const link = await root.stat(`${orphanDir}/private/_hf3fs_original_path`)
  t.is(link.symlink!.target, '/home2/t/c/private')
  t.is(await codeOf(root.stat('/home2/t')), 'META_NOT_FOUND')
})

test.serial('remove and rename: `d/` names d and needs a directory, `d/.` and `d/..` are EINVAL (rmdir(2), rename(2))', async (t) => {
  const c = m.client()
  await c.mkdirs('/slash/d1/sub', { recursive: true })
  await c.mkdirs('/slash/d2')
  await c.create('/slash/f', { flags: { access: 'r', create: true } })
  // a last component '.' or '..' is refused, recursive or not, and nothing goes
  t.is(await codeOf(c.remove('/slash/d1/.', { recursive: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.remove('/slash/d1/./', { recursive: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.remove('/slash/d1/sub/..', { recursive: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.remove('/slash/d2/.', { rmdir: true, checkType: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.rename('/slash/d2/.', '/slash/d3')), 'META_INVALID_ARGUMENT')
  t.is((await c.stat('/slash/d1/sub')).type, 'Directory')
  // a trailing slash on a file is ENOTDIR: stat, remove, rename
  t.is(await codeOf(c.stat('/slash/f/')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.remove('/slash/f/')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.rename('/slash/f/', '/slash/g')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.rename('/slash/f', '/slash/g/')), 'META_NOT_DIRECTORY')
  t.is((await c.stat('/slash/f')).type, 'File')
  // on a directory it names the directory
  await c.rename('/slash/d2/', '/slash/d3/')
  t.is((await c.stat('/slash/d3')).type, 'Directory')
  await c.remove('/slash/d3/', { rmdir: true, checkType: true })
  await c.remove('/slash/d1/', { recursive: true })
  t.deepEqual((await c.listAll('/slash')).map((e) => e.name), ['f'])
  await c.remove('/slash', { recursive: true })
})
