// Write sessions: only write opens have one; a file unlinked while open for
// writing keeps its chunks until the session ends (scenario 17); the session
// of a crashed writer is pruned once its mgmtd client session expires, which
// frees GC and fixes the file's length from storage (scenario 18); lengths
// from hints, from storage, and after truncation.

import test from 'ava'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { MetaMethod } from '../../../fs/common/services.js'
import { stripeChainIds } from '../../../fs/meta/chains.js'
import type { Inode } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

const CHUNK = 65536

async function chainsOf(m: MetaCluster, inode: Inode): Promise<number[]> {
  return stripeChainIds(await m.c.mgmtd.routing(), inode.file!.layout)
}

async function writeChunk(m: MetaCluster, inode: Inode, index: number, length: number): Promise<void> {
  const chains = await chainsOf(m, inode)
  await m.storage.write(chains[index % chains.length]!, chunkIdOf(inode.id, index), 0, Buffer.alloc(length, index + 1), CHUNK)
}

async function chunksLeft(m: MetaCluster, inode: Inode): Promise<number> {
  let n = 0
  for (const chain of new Set(await chainsOf(m, inode))) n += (await m.storage.queryLastChunk(chain, { ...fileChunkRange(inode.id), maxNumChunkIdsToProcess: 1000 })).totalNumChunks
  return n
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

let m!: MetaCluster
useSharedMetaCluster(test, {}, (c) => (m = c))

test.serial('unlink while open for write: chunks stay until the session closes', async (t) => {
  const writer = m.client()
  const other = m.client()
  const f = await writer.create('/g', { flags: { access: 'w', create: true }, session: 'sess-g' })
  await writeChunk(m, f.stat, 0, CHUNK)
  await writeChunk(m, f.stat, 1, CHUNK)
  await other.remove('/g')
  t.is(await codeOf(other.stat('/g')), 'META_NOT_FOUND')
  t.true((await other.gcList()).some((e) => e.inode === f.stat.id))
  // well past the GC delay: the write session holds the chunks
  await sleep(1500)
  t.is(await chunksLeft(m, f.stat), 2)
  t.is((await other.statById(f.stat.id)).nlink, 0)
  t.is((await other.sessions({ inode: f.stat.id })).length, 1)
  await writeChunk(m, f.stat, 2, 100)
  const closed = await writer.close(f.stat.id, 'sess-g', true)
  t.is(closed.file!.length, 2 * CHUNK + 100)
  await until(async () => !(await other.gcList()).some((e) => e.inode === f.stat.id), 15000, 'GC of the unlinked file')
  t.is(await chunksLeft(m, f.stat), 0)
  t.is(await codeOf(other.statById(f.stat.id)), 'META_NOT_FOUND')
  const { inodes } = await other.dumpAll()
  t.false(inodes.some((i) => i.id === f.stat.id))
})

test.serial('crashed writer: its sessions are pruned after the mgmtd client session expires', async (t) => {
  const writer = m.client()
  const admin = m.client()
  const c1 = await writer.create('/c1', { flags: { access: 'w', create: true }, session: 'w-c1' })
  const c2 = await writer.create('/c2', { flags: { access: 'w', create: true }, session: 'w-c2' })
  await writeChunk(m, c1.stat, 0, 5000)
  await writeChunk(m, c2.stat, 0, CHUNK)
  await writeChunk(m, c2.stat, 1, 100000 - CHUNK)
  // the writer dies: it stops extending its mgmtd session
  m.crash(writer.clientId)
  await admin.remove('/c1')
  await sleep(600)
  t.is(await chunksLeft(m, c1.stat), 1, 'GC waits while the session exists')
  await until(async () => (await admin.sessions({ clientId: writer.clientId })).length === 0, 20000, 'dead sessions pruned')
  await until(async () => (await chunksLeft(m, c1.stat)) === 0, 15000, 'chunks of the unlinked file removed')
  // the surviving file got its length from storage when its session was closed by the prune
  const s2 = await admin.stat('/c2')
  t.is(s2.file!.length, 100000)
  t.is(s2.file!.truncateVer, 0)

  // an explicit prune never takes a live client's sessions (more in session-prune.test.ts)
  const w2 = m.client()
  const c3 = await w2.create('/c3', { flags: { access: 'w', create: true }, session: 'w2-c3' })
  await w2.open('/c3', { access: 'rw' }, 'w2-c3b')
  t.is((await admin.sessions({ inode: c3.stat.id })).length, 2)
  t.is(await codeOf(admin.call(MetaMethod.pruneSession, { clientId: w2.clientId, sessions: ['w2-c3b'] }, { once: true })), 'META_CLIENT_ALIVE')
  t.is(await codeOf(admin.call(MetaMethod.pruneSession, { clientId: w2.clientId, sessions: [] }, { once: true })), 'META_CLIENT_ALIVE')
  t.is((await admin.sessions({ inode: c3.stat.id })).length, 2)
  await w2.close(c3.stat.id, 'w2-c3', false)
  await w2.close(c3.stat.id, 'w2-c3b', false)
  t.is((await admin.sessions({ inode: c3.stat.id })).length, 0)
})

test.serial('sessions only for write opens; lengths from hints, storage and truncation', async (t) => {
  const c = m.client()
  const r = await c.create('/r', { flags: { access: 'r', create: true } })
  t.false(r.needTruncate)
  await c.open('/r', { access: 'r' })
  t.is((await c.sessions({ inode: r.stat.id })).length, 0, 'read opens leave no session')
  t.is(await codeOf(c.open('/r', { access: 'w' })), 'META_INVALID_ARGUMENT', 'write open without a session')
  const o = await c.open('/r', { access: 'w' }, 'sr')
  t.false(o.needTruncate)
  t.deepEqual((await c.sessions({ inode: r.stat.id })).map((s) => [s.session, s.clientId]), [['sr', c.clientId]])
  t.true((await c.open('/r', { access: 'w', trunc: true }, 'sr2')).needTruncate)
  t.true((await c.create('/r', { flags: { access: 'w', create: true, trunc: true }, session: 'sr3' })).needTruncate)
  t.false((await c.create('/r-new', { flags: { access: 'w', create: true, trunc: true }, session: 'sr4' })).needTruncate)

  // hints: a larger one with the same truncateVer is adopted, a smaller one ignored
  const id = r.stat.id
  t.is((await c.sync(id, { updateLength: true, lengthHint: { length: 5000, truncateVer: 0 } })).file!.length, 5000)
  t.is((await c.sync(id, { updateLength: true, lengthHint: { length: 3000, truncateVer: 0 } })).file!.length, 5000)
  t.is(await codeOf(c.sync(id, { updateLength: true, lengthHint: { length: 9000, truncateVer: 4 } })), 'META_INVALID_ARGUMENT')
  // no hint: storage decides; shorter than recorded bumps truncateVer
  let s = await c.sync(id, { updateLength: true })
  t.deepEqual([s.file!.length, s.file!.truncateVer], [0, 1])
  await writeChunk(m, r.stat, 0, CHUNK)
  await writeChunk(m, r.stat, 1, 500)
  s = await c.close(id, 'sr', true, { mtime: Date.now() * 1000 })
  t.deepEqual([s.file!.length, s.file!.truncateVer], [CHUNK + 500, 1])
  // truncate as the client does it: cut chunks, then sync(truncated)
  const chains = await chainsOf(m, r.stat)
  for (const chain of new Set(chains)) await m.storage.removeChunks(chain, fileChunkRange(id, 1))
  await m.storage.truncate(chains[0]!, chunkIdOf(id, 0), 100, CHUNK)
  s = await c.sync(id, { updateLength: true, truncated: true })
  t.deepEqual([s.file!.length, s.file!.truncateVer], [100, 2])
  t.is(await codeOf(c.sync(id, { truncated: true })), 'META_INVALID_ARGUMENT')
  // closing removes the session
  await c.close(id, 'sr2', false)
  await c.close(id, 'sr3', false)
  t.is((await c.sessions({ inode: id })).length, 0)

  // opening directories
  await c.mkdirs('/dir')
  t.is(await codeOf(c.open('/dir', { access: 'w' }, 'x')), 'META_IS_DIRECTORY')
  t.is(await codeOf(c.create('/dir', { flags: { access: 'r', create: true } })), 'META_IS_DIRECTORY')
  t.is((await c.open('/dir', { access: 'r', directory: true })).stat.type, 'Directory')
  t.is(await codeOf(c.open('/r', { access: 'r', directory: true })), 'META_NOT_DIRECTORY')
  t.is(await codeOf(c.open('/nope', { access: 'r' })), 'META_NOT_FOUND')
  // statFs aggregates storage space
  const fsStat = await c.call<{ capacity: number; used: number; free: number }>(MetaMethod.statFs, {})
  t.true(fsStat.capacity > 0)
  t.is(fsStat.capacity, fsStat.used + fsStat.free)
})
