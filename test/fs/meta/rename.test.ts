// Scenario 16: rename is one transaction — concurrent readers never see both
// or neither of the two names — and the POSIX error and replace rules.

import test from 'ava'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { MetaMethod } from '../../../fs/common/services.js'
import type { BatchStatByPathRsp, Inode } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'
import { stripeChainIds } from '../../../fs/meta/chains.js'

let m!: MetaCluster
useSharedMetaCluster(test, { metas: 2, meta: { gcFileDelayMs: 0 } }, (c) => (m = c))

test.serial('rename atomicity under concurrent stats', async (t) => {
  const c = m.client()
  await c.mkdirs('/d1/x', { recursive: true })
  await c.mkdirs('/d2')
  const FILES = 300
  for (let i = 0; i < FILES; i += 50) {
    await Promise.all(Array.from({ length: 50 }, (_, j) => c.create(`/d1/x/f${i + j}`, { flags: { access: 'r', create: true } })))
  }
  let stop = false
  let observations = 0
  const bad: string[] = []
  const readers = Array.from({ length: 4 }, async (_, k) => {
    const r = m.client()
    r.addresses = [m.metaAddresses[k % 2]!]
    while (!stop) {
      const rsp = await r.call<BatchStatByPathRsp>(MetaMethod.batchStatByPath, { paths: [{ parent: 0n, path: '/d1/x' }, { parent: 0n, path: '/d2/x' }] })
      const found = rsp.inodes.filter((x) => x !== null).length
      observations++
      if (found !== 1) bad.push(`saw ${found} of /d1/x, /d2/x`)
      const which = rsp.inodes[0] ? '/d1/x' : '/d2/x'
      const list = await r.list(which, { limit: 10000 }).catch(() => null)
      if (list && list.entries.length !== FILES) bad.push(`${which} listed ${list.entries.length} files`)
    }
  })
  for (let i = 0; i < 100; i++) {
    await c.rename(i % 2 === 0 ? '/d1/x' : '/d2/x', i % 2 === 0 ? '/d2/x' : '/d1/x')
  }
  stop = true
  await Promise.all(readers)
  t.deepEqual(bad, [])
  t.true(observations > 50, `${observations} observations`)
  const x = await c.stat('/d1/x')
  t.is(x.directory!.parent, (await c.stat('/d1')).id)
  t.is(x.directory!.name, 'x')
  t.is((await c.listAll('/d1/x')).length, FILES)
})

test.serial('rename errors and replace rules', async (t) => {
  const c = m.client()
  await c.mkdirs('/a/b/c', { recursive: true })
  // into its own subtree
  t.is(await codeOf(c.rename('/a', '/a/b/c/a')), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.rename('/a/b', '/a/b/c/x')), 'META_INVALID_ARGUMENT')
  // a directory over a non-empty directory / over a file; a file over a directory
  await c.mkdirs('/full/sub', { recursive: true })
  await c.mkdirs('/empty')
  await c.create('/file', { flags: { access: 'r', create: true } })
  t.is(await codeOf(c.rename('/a', '/full')), 'META_NOT_EMPTY')
  t.is(await codeOf(c.rename('/a', '/file')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.rename('/file', '/empty')), 'META_IS_DIRECTORY')
  // rename(2): a non-directory over a non-empty directory is EISDIR too, not ENOTEMPTY
  t.is(await codeOf(c.rename('/file', '/full')), 'META_IS_DIRECTORY')
  t.is(await codeOf(c.rename('/missing', '/x')), 'META_NOT_FOUND')
  t.is(await codeOf(c.rename('/file', '/nodir/x')), 'META_NOT_FOUND')
  t.is(await codeOf(c.rename('/file', '/file/x')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.rename('/', '/x')), 'META_INVALID_ARGUMENT')
  // onto itself: nothing happens
  const self = await c.rename('/file', '/file')
  t.is(self!.id, (await c.stat('/file')).id)
  // a directory over an empty directory replaces it (its inode goes)
  const empty = await c.stat('/empty')
  const a = await c.stat('/a')
  await c.rename('/a', '/empty')
  t.is((await c.stat('/empty')).id, a.id)
  t.is(await codeOf(c.statById(empty.id)), 'META_NOT_FOUND')
  t.is(await codeOf(c.stat('/a')), 'META_NOT_FOUND')
  t.is((await c.stat('/empty/b/c')).type, 'Directory')
  t.is((await c.realPath('/empty/b/c')), '/empty/b/c')

  // file over file: the old one goes to GC, and its chunks are removed
  const old = await c.create('/old', { flags: { access: 'w', create: true }, session: 's-old' })
  const chains = stripeChainIds(await m.c.mgmtd.routing(), old.stat.file!.layout)
  await m.storage.write(chains[0]!, chunkIdOf(old.stat.id, 0), 0, Buffer.alloc(1000, 7), 65536)
  await c.close(old.stat.id, 's-old', true)
  const nu = await c.create('/new', { flags: { access: 'r', create: true } })
  const moved = await c.rename('/new', '/old')
  t.is(moved!.id, nu.stat.id)
  t.is((await c.stat('/old')).id, nu.stat.id)
  const gc = await c.gcList()
  t.true(gc.some((e) => e.inode === old.stat.id), 'replaced file in gc-list')
  await until(async () => (await c.gcList()).every((e) => e.inode !== old.stat.id), 15000, 'replaced file collected')
  const q = await m.storage.queryLastChunk(chains[0]!, fileChunkRange(old.stat.id))
  t.is(q.lastChunkId, null)
  t.is(await codeOf(c.statById(old.stat.id)), 'META_NOT_FOUND')

  // a hard-linked file replaced keeps its inode (nlink 2 → 1)
  const h = await c.create('/h1', { flags: { access: 'r', create: true } })
  await c.hardLink('/h1', '/h2')
  await c.create('/h3', { flags: { access: 'r', create: true } })
  await c.rename('/h3', '/h2')
  t.is((await c.statById(h.stat.id)).nlink, 1)
  // rename between two links of one inode: success, and both names stay (POSIX), in one directory or across two
  await c.hardLink('/h1', '/h4')
  await c.mkdirs('/hd')
  await c.hardLink('/h1', '/hd/h5')
  const same = await c.rename('/h1', '/h4')
  t.is(same!.id, h.stat.id)
  await c.rename('/hd/h5', '/h1')
  for (const p of ['/h1', '/h4', '/hd/h5']) t.is((await c.stat(p)).id, h.stat.id, p)
  t.is((await c.statById(h.stat.id)).nlink, 3)

  // rename onto a symlink replaces the entry; the old link's inode goes with its last link, as on unlink
  // (it used to stay at nlink 0 with nothing to remove it)
  const link = await c.symlink('/lnk', '/old')
  await c.hardLink('/lnk', '/lnk2')
  await c.create('/plain', { flags: { access: 'r', create: true } })
  await c.rename('/plain', '/lnk')
  t.is((await c.stat('/lnk')).type, 'File')
  const oldLink: Inode = await c.statById(link.id)
  t.is(oldLink.nlink, 1, 'a second link keeps it')
  await c.create('/plain2', { flags: { access: 'r', create: true } })
  await c.rename('/plain2', '/lnk2')
  t.is(await codeOf(c.statById(link.id)), 'META_NOT_FOUND')

  // directory rename updates the directory's parent and name
  await c.mkdirs('/p1/q', { recursive: true })
  await c.mkdirs('/p2')
  await c.rename('/p1/q', '/p2/r')
  const r = await c.stat('/p2/r')
  t.is(r.directory!.parent, (await c.stat('/p2')).id)
  t.is(r.directory!.name, 'r')
  t.is(await c.realPath({ parent: r.id }), '/p2/r')
  // into a removed directory: not found
  const p1 = await c.stat('/p1')
  await c.remove('/p1', { rmdir: true, checkType: true })
  t.is(await codeOf(c.rename('/p2/r', { parent: p1.id, path: 'r' })), 'META_NOT_FOUND')
})
