// Scenario 14: 8 clients race O_CREAT|O_EXCL on the same 200 names through two
// meta servers sharing one KV. Exactly one create per name wins, every other
// gets EEXIST, the directory lists 200 entries, and no inode is orphaned.

import test from 'ava'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { MetaMethod } from '../../../fs/common/services.js'
import type { BatchStatByPathRsp } from '../../../fs/meta/protocol.js'

let m!: MetaCluster
useSharedMetaCluster(test, { metas: 2 }, (c) => (m = c))

test.serial('concurrent O_EXCL creators: one winner per name, no orphan inodes', async (t) => {
  const root = m.client()
  await root.mkdirs('/race', { perm: 0o777 })
  const NAMES = 200
  const CLIENTS = 8
  const names = Array.from({ length: NAMES }, (_, i) => `n${String(i).padStart(3, '0')}`)
  const wins = new Map<string, number>()
  const other: string[] = []
  await Promise.all(
    Array.from({ length: CLIENTS }, async (_, k) => {
      const c = m.client({ uid: 1000 + k, gid: 1000, groups: [] })
      c.addresses = [m.metaAddresses[k % m.metaAddresses.length]!]
      const order = [...names].sort(() => Math.random() - 0.5)
      for (const name of order) {
        const code = await codeOf(c.create(`/race/${name}`, { flags: { access: 'w', create: true, excl: true }, session: `s-${k}-${name}` }))
        if (code === 'OK') wins.set(name, (wins.get(name) ?? 0) + 1)
        else if (code !== 'META_EXISTS') other.push(`${name}: ${code}`)
      }
    }),
  )
  t.deepEqual(other, [])
  t.is(wins.size, NAMES)
  t.true([...wins.values()].every((n) => n === 1))
  const listed = await root.listAll('/race')
  t.deepEqual(listed.map((e) => e.name), names)

  // every winner holds a write session; the losers none
  const sessions = await root.sessions()
  t.is(sessions.filter((s) => listed.some((e) => e.id === s.inode)).length, NAMES)

  // no orphans: every inode but the two roots is named by an entry, every entry names an inode
  const { inodes } = await root.dumpAll(false)
  const { entries } = await root.dumpAll(true)
  const ids = new Set(inodes.map((i) => i.id))
  const named = new Set(entries.map((e) => e.id))
  const orphans = inodes.filter((i) => i.id > 1n && !named.has(i.id))
  t.deepEqual(orphans.map((i) => i.id), [])
  t.deepEqual(entries.filter((e) => !ids.has(e.id)).map((e) => `${e.parent}/${e.name}`), [])
  t.is(inodes.filter((i) => i.type === 'File').length, NAMES)
})

test.serial('list: pages of 128 by default, raw byte order, exclusive cursor, inodes with status', async (t) => {
  const c = m.client()
  await c.mkdirs('/order')
  const odd = ['é', 'a', 'Z', 'B', 'a b', 'a.b', '~']
  for (const n of odd) await c.create(`/order/${n}`, { flags: { access: 'r', create: true } })
  const names = (await c.list('/order')).entries.map((e) => e.name)
  t.deepEqual(names, [...odd].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y))))
  t.deepEqual(names, ['B', 'Z', 'a', 'a b', 'a.b', '~', 'é'])

  const p1 = await c.list('/race')
  t.is(p1.entries.length, 128)
  t.true(p1.more)
  t.deepEqual(p1.inodes, [])
  const p2 = await c.list('/race', { prev: p1.entries[127]!.name, status: true })
  t.is(p2.entries.length, 72)
  t.false(p2.more)
  t.is(p2.entries[0]!.name, 'n128')
  t.deepEqual(p2.inodes.map((i) => i.id), p2.entries.map((e) => e.id))
  const p3 = await c.list('/race', { prev: 'n010', limit: 3 })
  t.deepEqual(p3.entries.map((e) => e.name), ['n011', 'n012', 'n013'])
  t.is(await codeOf(c.list('/race/n000')), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.list('/missing')), 'META_NOT_FOUND')

  // batchStat by inode ids (missing ids are null) and batchStatByPath
  const ids = [p2.entries[0]!.id, 0x7fffffffn, p2.entries[1]!.id]
  const bs = await c.call<{ inodes: Array<{ id: bigint } | null> }>(MetaMethod.batchStat, { inodeIds: ids })
  t.deepEqual(bs.inodes.map((i) => (i ? i.id : null)), [ids[0], null, ids[2]])
  const bp = await c.call<BatchStatByPathRsp>(MetaMethod.batchStatByPath, { paths: [{ parent: 0n, path: '/race/n001' }, { parent: 0n, path: '/race/none' }] })
  t.is(bp.inodes[0]!.type, 'File')
  t.is(bp.inodes[1], null)
  t.deepEqual(bp.results[1], { ok: false, error: { code: 'META_NOT_FOUND', message: (bp.results[1] as { error: { message: string } }).error.message } })
})
