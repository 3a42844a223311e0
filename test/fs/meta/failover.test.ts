// Scenario 23: meta servers are stateless. A client retries a request whose
// answer it lost — on another server, with the same request uuid — and the
// replay is answered, not applied twice. Two meta processes over one lmdb KV;
// one is SIGKILLed in the middle of 500 creates.

import test from 'ava'
import { randomUUID } from 'node:crypto'
import { MetaMethod } from '../../../fs/common/services.js'
import { lmdbKvAvailable, useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

let m!: MetaCluster
useSharedMetaCluster(test, { metas: 2, meta: { idemExpireMs: 8000, idemCleanIntervalMs: 500 } }, (c) => (m = c))

test.serial('replays with the same request uuid are answered from the first result', async (t) => {
  const c = m.client()
  const on1 = m.client(undefined, c.clientId)
  on1.addresses = [m.metaAddresses[0]!]
  const on2 = m.client(undefined, c.clientId)
  on2.addresses = [m.metaAddresses[m.metaAddresses.length - 1]!]

  // create with O_EXCL, replayed on the other server: success, the same inode
  const u1 = randomUUID()
  const a = await on1.create('/a', { flags: { access: 'w', create: true, excl: true }, session: 's-a' }, { uuid: u1 })
  const a2 = await on2.create('/a', { flags: { access: 'w', create: true, excl: true }, session: 's-a' }, { uuid: u1 })
  t.is(a2.stat.id, a.stat.id)
  t.is(await codeOf(on2.create('/a', { flags: { access: 'w', create: true, excl: true }, session: 's-a' })), 'META_EXISTS', 'a new request still conflicts')

  // hard link then remove, each replayed: nlink goes 1 → 2 → 1, not 0
  const u2 = randomUUID()
  await on1.hardLink('/a', '/b', { uuid: u2 })
  t.is((await on2.hardLink('/a', '/b', { uuid: u2 })).nlink, 2)
  const u3 = randomUUID()
  await on1.remove('/b', {}, { uuid: u3 })
  await on2.remove('/b', {}, { uuid: u3 })
  t.is((await c.stat('/a')).nlink, 1)
  t.false((await c.gcList()).some((e) => e.inode === a.stat.id))
  // a remove whose first answer was an error replays the error
  const u4 = randomUUID()
  t.is(await codeOf(on1.remove('/nothing', {}, { uuid: u4 })), 'META_NOT_FOUND')
  await c.create('/nothing', { flags: { access: 'r', create: true } })
  t.is(await codeOf(on2.remove('/nothing', {}, { uuid: u4 })), 'META_NOT_FOUND')
  t.is((await c.stat('/nothing')).type, 'File')

  // rename replayed after the source is gone: the recorded answer
  const u5 = randomUUID()
  await on1.rename('/nothing', '/moved', { uuid: u5 })
  t.is((await on2.rename('/nothing', '/moved', { uuid: u5 }))!.type, 'File')
  // mkdirs and symlink replays
  const u6 = randomUUID()
  const d = await on1.mkdirs('/d/e', { recursive: true }, { uuid: u6 })
  t.is((await on2.mkdirs('/d/e', { recursive: true }, { uuid: u6 })).id, d.id)
  const u7 = randomUUID()
  const s = await on1.symlink('/s', '/a', { uuid: u7 })
  t.is((await on2.symlink('/s', '/a', { uuid: u7 })).id, s.id)

  // records expire (here after 8 s): a very late replay is a new request
  await until(async () => (await codeOf(on2.remove('/b', {}, { uuid: u3, once: true }))) === 'META_NOT_FOUND', 25000, 'idempotency record expired')
})

test.serial('SIGKILL a meta server during 500 creates: the client fails over, nothing is duplicated', async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built: needs meta child processes sharing one KV')
    t.pass()
    return
  }
    const c = m.client()
  await c.mkdirs('/fo')
  const N = 500
  const results: string[] = new Array(N)
  let done = 0
  let killed = false
  const uuids = Array.from({ length: N }, () => randomUUID())
  const worker = async (k: number) => {
    for (let i = k; i < N; i += 4) {
      results[i] = await codeOf(c.create(`/fo/f${i}`, { flags: { access: 'w', create: true, excl: true }, session: `s${i}` }, { uuid: uuids[i]!, totalMs: 30000 }))
      done++
    }
  }
  const killer = (async () => {
    await until(() => done >= 150, 60000, '150 creates done')
    await m.c.kill('meta-1', 'SIGKILL')
    killed = true
  })()
  await Promise.all([0, 1, 2, 3].map(worker))
  await killer
  t.true(killed)
  t.true(c.stats.failovers > 0, 'the client failed over')
  t.deepEqual(results.filter((r) => r !== 'OK'), [], 'every create succeeded exactly once (replays answered)')
  const listed = await c.listAll('/fo')
  t.is(listed.length, N)
  const { inodes } = await c.dumpAll()
  const { entries } = await c.dumpAll(true)
  const named = new Set(entries.map((e) => e.id))
  t.deepEqual(inodes.filter((i) => i.id > 1n && !named.has(i.id)).map((i) => i.id), [], 'no orphan inodes')
  t.is(new Set(listed.map((e) => e.id)).size, N)
  t.true(listed.every((e) => inodes.some((i) => i.id === e.id && i.nlink === 1)))

  // the distributor map drops the dead server
  await until(async () => {
    const st = (await m.rpc.stats(m.metaAddresses[1]!)) as { distributor?: { active: number[] } }
    return st.distributor && st.distributor.active.length === 1 && st.distributor.active[0] === 102
  }, 15000, 'meta-1 out of the server map')

  // replayed removes during a second failover never decrement twice
  m.c.start('meta-1')
  await until(() => m.rpc.echo(m.metaAddresses[0]!).then(() => true), 30000, 'meta-1 back')
  for (let i = 0; i < 100; i++) await c.hardLink(`/fo/f${i}`, `/fo/h${i}`)
  const c2 = m.client(undefined, c.clientId)
  c2.addresses = [m.metaAddresses[0]!, m.metaAddresses[1]!]
  let removed = 0
  const remover = (async () => {
    for (let i = 0; i < 100; i++) {
      const uuid = randomUUID()
      await c2.remove(`/fo/h${i}`, {}, { uuid, totalMs: 30000 })
      // the answer may have been lost: replay it on the other server
      const again = m.client(undefined, c.clientId)
      again.addresses = [m.metaAddresses[1]!]
      await again.call(MetaMethod.remove, { path: { parent: 0n, path: `/fo/h${i}` }, recursive: false }, { uuid })
      removed++
    }
  })()
  await until(() => removed >= 30, 60000, '30 removes')
  await m.c.kill('meta-1', 'SIGKILL')
  await remover
  for (let i = 0; i < 100; i++) t.is((await c.stat(`/fo/f${i}`)).nlink, 1, `f${i}`)

  // clean shutdown on SIGTERM: exit code 0, and it leaves the server map at once
  const child = m.c.procs.get('meta-2')!.child!
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  child.kill('SIGTERM')
  t.is(await exited, 0)
  t.regex(m.c.log('meta-2'), /stopped/)
})
