// The meta server's gcList (behind `strata admin gc-list`): `more` when the
// limit cut the listing, the `<GcDir>/<Name>` cursor (anything else is
// META_INVALID_ARGUMENT), and RemovedAt = when the last link went, stable
// while a busy entry (a file still open for writing) is renamed on each retry.

import test from 'ava'
import { MetaMethod } from '../../../fs/common/services.js'
import { parseGcEntry } from '../../../fs/meta/gc.js'
import type { GcListRsp } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

let m!: MetaCluster
// files are due at once and retried every 300 ms while their write session lives
useSharedMetaCluster(test, { inProcess: true, meta: { gcFileDelayMs: 0, gcRetryDelayMs: 300 } }, (c) => (m = c))

test.serial('gcList: more, the GcDir/Name cursor, and a RemovedAt that stays the time of removal', async (t) => {
  const c = m.client()
  const gcList = (body: { limit?: number; prev?: string }) => c.call<GcListRsp>(MetaMethod.gcList, body)
  await c.mkdirs('/g')
  const open: Array<{ id: bigint; session: string }> = []
  for (let i = 0; i < 5; i++) {
    const session = `s-${i}`
    const st = (await c.create(`/g/f${i}`, { session })).stat
    open.push({ id: st.id, session })
  }
  t.teardown(async () => {
    for (const f of open) await c.close(f.id, f.session, false).catch(() => undefined)
  })
  const before = Date.now() * 1000
  for (let i = 0; i < 5; i++) await c.remove(`/g/f${i}`)
  const after = Date.now() * 1000

  const all = await gcList({})
  t.is(all.entries.length, 5)
  t.false(all.more)
  // a removed file keeps the path it had, as a removed directory does
  t.deepEqual(all.entries.map((e) => e.origPath).sort(), ['/g/f0', '/g/f1', '/g/f2', '/g/f3', '/g/f4'])
  // still open for writing: GC is busy and renames the entries to a later due time, again and again
  const firstNames = new Map(all.entries.map((e) => [e.inode, e.name]))
  await until(async () => (await gcList({})).entries.every((e) => e.name !== firstNames.get(e.inode)), 10_000, 'every busy entry renamed by a retry')
  const later = await gcList({})
  for (const e of later.entries) {
    const due = parseGcEntry(e.name)!.timestampUs
    t.true(e.removedAt >= before - 1000 && e.removedAt <= after + 1000, `removedAt ${e.removedAt} within the removes [${before}, ${after}]`)
    t.true(due > e.removedAt, 'the name carries the later due time, not the removal')
    t.is(e.removedAt, all.entries.find((x) => x.inode === e.inode)!.removedAt, 'unchanged by the renames')
  }

  // a limit that cuts the listing says so; the cursor pages through everything exactly once
  const first = await gcList({ limit: 2 })
  t.is(first.entries.length, 2)
  t.true(first.more)
  // every page starts after the cursor (a busy entry that a retry renames between two pages moves
  // behind the cursor and is listed again: page until every inode was seen)
  const seen = new Set(first.entries.map((e) => e.inode))
  let page = first
  for (let i = 0; page.more && seen.size < 5 && i < 20; i++) {
    const last = page.entries[page.entries.length - 1]!
    page = await gcList({ limit: 2, prev: `${last.gcDir}/${last.name}` })
    for (const e of page.entries) {
      t.true(e.gcDir > last.gcDir || (e.gcDir === last.gcDir && e.name > last.name), 'after the cursor')
      seen.add(e.inode)
    }
  }
  t.is(seen.size, 5)
  t.false((await gcList({ limit: 5 })).more, 'exactly the limit: nothing more')

  t.is(await codeOf(c.call(MetaMethod.gcList, { prev: 'bogus' }, { once: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.call(MetaMethod.gcList, { prev: 'GC-Node-101.1/' }, { once: true })), 'META_INVALID_ARGUMENT')
})

test.serial('gcList is root\'s: the GC root is 0700 and OrigPath names files removed from private directories', async (t) => {
  const c = m.client()
  const u = { uid: 1000, gid: 1000, groups: [] }
  await c.mkdirs('/priv', { perm: 0o777 })
  const a = m.client(u)
  await a.mkdirs('/priv/mine', { perm: 0o700 })
  const f = (await a.create('/priv/mine/secret-name', { session: 'sp' })).stat
  t.teardown(() => a.close(f.id, 'sp', false).catch(() => undefined))
  await a.remove('/priv/mine/secret-name')
  t.is((await c.gcList()).find((e) => e.inode === f.id)?.origPath, '/priv/mine/secret-name')
  for (const user of [u, { uid: 65534, gid: 65534, groups: [] }, { uid: 1, gid: 0, groups: [0] }]) {
    const e = await t.throwsAsync(c.call(MetaMethod.gcList, {}, { user, once: true }))
    t.is((e as { code?: string }).code, 'META_NOT_PERMITTED', `uid ${user.uid}`)
    t.is((e as { reason?: string }).reason, `only root may list the GC directories (uid ${user.uid})`)
  }
  // the same for a listing of the GC root itself (what admin gc-list falls back to)
  t.is(await codeOf(c.call(MetaMethod.list, { path: { parent: 1n }, prev: '', limit: 0, status: false }, { user: u, once: true })), 'META_NO_PERMISSION')
})

test.serial('gcList: a file removed through its last hard link or replaced by a rename shows its full original path', async (t) => {
  const c = m.client()
  const gcList = (body: { limit?: number; prev?: string }) => c.call<GcListRsp>(MetaMethod.gcList, body)
  await c.mkdirs('/h/a/b', { recursive: true })
  // write sessions keep the entries in the GC directories while the test looks
  const x = (await c.create('/h/a/b/x', { session: 'sx' })).stat
  const r1 = (await c.create('/h/r1', { session: 'sr' })).stat
  t.teardown(async () => {
    await c.close(x.id, 'sx', false).catch(() => undefined)
    await c.close(r1.id, 'sr', false).catch(() => undefined)
  })
  await c.hardLink('/h/a/b/x', '/h/y')
  await c.remove('/h/a/b/x')
  t.false((await gcList({})).entries.some((e) => e.inode === x.id), 'one link left: not in GC')
  await c.remove('/h/y')
  await c.create('/h/r2', { flags: { access: 'r', create: true } })
  await c.rename('/h/r2', '/h/r1')
  const entries = (await gcList({})).entries
  t.is(entries.find((e) => e.inode === x.id)?.origPath, '/h/y')
  t.is(entries.find((e) => e.inode === r1.id)?.origPath, '/h/r1')
})
