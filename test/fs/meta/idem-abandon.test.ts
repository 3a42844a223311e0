// meta `abandon` (fs/meta/idem.ts): a client withdraws a request it gave up
// on. Not applied yet → a failure record, so the late execution answers
// META_REQUEST_ABANDONED instead of applying (no file, no session); applied →
// the write session it opened is closed, the file and its data stay, and GC
// may take it once removed. Write opens go through the idempotency record as
// creates do, so a late copy of an open that was answered and closed does not
// open its session again. Real meta processes over lmdb, real storage.

import test from 'ava'
import { randomUUID } from 'node:crypto'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { MetaMethod } from '../../../fs/common/services.js'
import { stripeChainIds } from '../../../fs/meta/chains.js'
import type { AbandonRsp, Inode } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf, type MetaTestClient } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

const CHUNK = 65536
let m!: MetaCluster
useSharedMetaCluster(test, {}, (c) => (m = c))

function abandon(c: MetaTestClient, request: string): Promise<AbandonRsp> {
  return c.call<AbandonRsp>(MetaMethod.abandon, { request })
}

async function chainsOf(inode: Inode): Promise<number[]> {
  return stripeChainIds(await m.c.mgmtd.routing(), inode.file!.layout)
}

async function chunksLeft(inode: Inode): Promise<number> {
  let n = 0
  for (const chain of new Set(await chainsOf(inode))) n += (await m.storage.queryLastChunk(chain, { ...fileChunkRange(inode.id), maxNumChunkIdsToProcess: 1000 })).totalNumChunks
  return n
}

test.serial('abandon before the request arrives: the late create and open answer META_REQUEST_ABANDONED and apply nothing', async (t) => {
  const c = m.client()
  const create = randomUUID()
  t.deepEqual(await abandon(c, create), { applied: false, closed: 0 })
  // the create a slow server held comes now
  const late = await t.throwsAsync(c.create('/ab-new', { session: 's-new' }, { uuid: create, once: true }))
  t.is(late?.message, `META_REQUEST_ABANDONED: request ${create} was abandoned: its client gave up waiting for the answer (replayed)`)
  t.is(await codeOf(c.stat('/ab-new')), 'META_NOT_FOUND')
  // a plain open for write of an existing file is withdrawn the same way
  const f = await c.create('/ab-old', { session: 's-o' })
  await c.close(f.stat.id, 's-o', false)
  const sessionsBefore = await c.sessions({ clientId: c.clientId })
  const open = randomUUID()
  t.deepEqual(await abandon(c, open), { applied: false, closed: 0 })
  t.is(await codeOf(c.open('/ab-old', { access: 'w' }, 's-old', { uuid: open, once: true })), 'META_REQUEST_ABANDONED')
  t.false((await c.sessions({ inode: f.stat.id })).some((s) => s.session === 's-old'))
  // twice: the same answer, nothing else changes
  t.deepEqual(await abandon(c, open), { applied: false, closed: 0 })
  t.deepEqual(await abandon(c, create), { applied: false, closed: 0 })
  t.deepEqual(await c.sessions({ clientId: c.clientId }), sessionsBefore)
  // the record is the client's: another client's request with the same uuid is its own
  const other = m.client()
  const mine = await other.create('/ab-new', { session: 's-other' }, { uuid: create, once: true })
  t.is(mine.stat.type, 'File')
  await other.close(mine.stat.id, 's-other', false)
})

test.serial('abandon after the request was applied: its session is closed, the data stays, a removed file is collected', async (t) => {
  const c = m.client()
  // a file with data, written and closed before
  const w = await c.create('/ab-data', { session: 'w' })
  await m.storage.write((await chainsOf(w.stat))[0]!, chunkIdOf(w.stat.id, 0), 0, Buffer.from('kept bytes'), CHUNK)
  t.is((await c.close(w.stat.id, 'w', true)).file!.length, 10)
  // an open for write that was applied, its answer lost
  const open = randomUUID()
  const o = await c.open('/ab-data', { access: 'rw' }, 's-lost', { uuid: open })
  t.is((await c.sessions({ inode: o.stat.id })).length, 1)
  t.deepEqual(await abandon(c, open), { applied: true, closed: 1 })
  t.deepEqual(await c.sessions({ inode: o.stat.id }), [])
  t.is((await c.stat('/ab-data')).file!.length, 10, 'closed without a length change')
  t.is(await chunksLeft(o.stat), 1)
  // twice: applied, nothing more to close
  t.deepEqual(await abandon(c, open), { applied: true, closed: 0 })
  // a late copy of the open replays the recorded answer and opens no session again
  t.is((await c.open('/ab-data', { access: 'rw' }, 's-lost', { uuid: open, once: true })).stat.id, o.stat.id)
  t.deepEqual(await c.sessions({ inode: o.stat.id }), [])

  // a create applied while the file is removed meanwhile: GC waits for the session, the abandon frees it
  const create = randomUUID()
  const f = await c.create('/ab-removed', { session: 's-rm' }, { uuid: create })
  await m.storage.write((await chainsOf(f.stat))[0]!, chunkIdOf(f.stat.id, 0), 0, Buffer.alloc(100, 1), CHUNK)
  await c.remove('/ab-removed')
  t.true((await c.gcList()).some((e) => e.inode === f.stat.id))
  t.deepEqual(await abandon(c, create), { applied: true, closed: 1 })
  await until(async () => !(await c.gcList()).some((e) => e.inode === f.stat.id), 15_000, 'GC of the removed file')
  t.is(await chunksLeft(f.stat), 0)
  t.is(await codeOf(c.statById(f.stat.id)), 'META_NOT_FOUND')
})

test.serial('a late copy of an answered write open that was closed since opens no session again', async (t) => {
  // a hedged open: one server answered (the client wrote and closed), the other executes its copy later
  const c = m.client()
  const f = await c.create('/ab-hedged', { session: 's-c' })
  await c.close(f.stat.id, 's-c', false)
  const uuid = randomUUID()
  await c.open('/ab-hedged', { access: 'w' }, 's-h', { uuid })
  await c.close(f.stat.id, 's-h', false)
  await c.open('/ab-hedged', { access: 'w' }, 's-h', { uuid, once: true })
  t.deepEqual(await c.sessions({ inode: f.stat.id }), [], 'no session left by the late copy')
  // a read-only open needs no record and opens no session
  await c.open('/ab-hedged', { access: 'r' }, undefined, { uuid })
  t.deepEqual(await c.sessions({ inode: f.stat.id }), [])
})

test.serial('abandon: bad input is META_INVALID_ARGUMENT', async (t) => {
  const c = m.client()
  t.is(await codeOf(c.call(MetaMethod.abandon, {}, { once: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.call(MetaMethod.abandon, { request: '' }, { once: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.call(MetaMethod.abandon, { request: 42 }, { once: true })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.call(MetaMethod.abandon, { request: '00000000-0000-0000-0000-000000000000' }, { once: true })), 'META_INVALID_ARGUMENT')
  // a request id not in uuid syntax is keyed by its hash, as every request id is
  t.deepEqual(await abandon(c, 'not-a-uuid'), { applied: false, closed: 0 })
})
