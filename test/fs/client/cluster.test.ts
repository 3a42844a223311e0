// StorageClient against a real cluster: mgmtd + 3 storage daemons, chains of
// three replicas. Tests are serial because some install fault hooks on the
// shared storage nodes.

import test from 'ava'
import { randomBytes } from 'node:crypto'
import { StorageClient, type ReadMode } from '../../../fs/client/index.js'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { isStrataError } from '../../../fs/common/errors.js'
import { ServiceId, StorageMethod } from '../../../fs/common/services.js'
import { MgmtdClient } from '../../../fs/mgmtd/index.js'
import type { QueryChunkRsp } from '../../../fs/storage/protocol.js'
import { startCluster, type Cluster } from './cluster-helper.js'

const CHUNK_SIZE = 64 * 1024
let cluster: Cluster
let mgmtd: MgmtdClient
let sc: StorageClient

test.before(async () => {
  cluster = await startCluster([1, 2])
  mgmtd = new MgmtdClient({ addresses: [cluster.mgmtd.address] })
  sc = new StorageClient({ mgmtd, retry: { deadlineMs: 20_000, readDeadlineMs: 20_000 } })
})

test.after.always(async () => {
  sc?.close()
  mgmtd?.close()
  await cluster?.close()
})

test.serial('write then read round-trips, overwrites, short reads and holes', async (t) => {
  const id = chunkIdOf(1001n, 0)
  const a = randomBytes(5000)
  const b = randomBytes(3000)
  const r1 = await sc.write(1, id, 0, a, CHUNK_SIZE)
  t.is(r1.lengthInfo, a.length)
  t.true(r1.commitVer >= 1 && r1.commitVer === r1.updateVer)
  const r2 = await sc.write(1, id, 4000, b, CHUNK_SIZE)
  t.true(r2.commitVer > r1.commitVer)
  const expect = Buffer.concat([a.subarray(0, 4000), b])
  t.deepEqual(await sc.read(1, id, 0, 7000), expect)
  t.deepEqual(await sc.read(1, id, 1234, 100), expect.subarray(1234, 1334))
  // reading past the end of the chunk is a short read
  t.deepEqual(await sc.read(1, id, 6000, 4096), expect.subarray(6000))
  // a gap before a write reads back as zeros
  const id2 = chunkIdOf(1001n, 1)
  await sc.write(1, id2, 100, Buffer.from('tail'), CHUNK_SIZE)
  t.deepEqual(await sc.read(1, id2, 0, 104), Buffer.concat([Buffer.alloc(100), Buffer.from('tail')]))
  // a chunk never written is a hole, or CHUNK_NOT_FOUND when strict
  t.is((await sc.read(1, chunkIdOf(1001n, 7), 0, 10)).length, 0)
  t.true(isStrataError(await t.throwsAsync(sc.read(1, chunkIdOf(1001n, 7), 0, 10, { strict: true })), 'CHUNK_NOT_FOUND'))
  // the server refuses a write that does not fit the chunk size it was created with
  t.true(isStrataError(await t.throwsAsync(sc.write(1, id, 0, Buffer.alloc(10), CHUNK_SIZE * 2)), 'CHUNK_SIZE_MISMATCH'))
  const s = sc.stats()
  t.true(s.bytesWritten >= a.length + b.length)
  t.true(s.bytesRead > 0)
})

test.serial('successful reads and holes count no failures', async (t) => {
  // every read IO used to build an INTERNAL 'read IO without result' error on its way out (and count it)
  const id = chunkIdOf(1009n, 0)
  await sc.write(1, id, 0, randomBytes(3000), CHUNK_SIZE)
  const before = sc.stats().failures
  const res = await sc.batchRead([
    { chainId: 1, chunkId: id, offset: 0, length: 3000 },
    { chainId: 1, chunkId: id, offset: 100, length: 10 },
    { chainId: 2, chunkId: chunkIdOf(1009n, 5), offset: 0, length: 10 }, // hole
  ])
  t.true(res.every((r) => r.ok))
  await sc.read(1, id, 0, 10)
  t.deepEqual(sc.stats().failures, before)
})

test.serial('reads into the caller\'s buffers: received in place, short chunks and holes, mixed with plain reads in one batch', async (t) => {
  const big = randomBytes(CHUNK_SIZE)
  const short = randomBytes(CHUNK_SIZE - 1000)
  const a = chunkIdOf(1002n, 0)
  const b = chunkIdOf(1002n, 1)
  await sc.write(1, a, 0, big, CHUNK_SIZE)
  await sc.write(2, b, 0, short, CHUNK_SIZE)
  const dest = Buffer.alloc(3 * CHUNK_SIZE, 0xee)
  const rs = await sc.batchRead([
    { chainId: 1, chunkId: a, offset: 0, length: CHUNK_SIZE, into: dest.subarray(0, CHUNK_SIZE) },
    { chainId: 2, chunkId: b, offset: 0, length: CHUNK_SIZE, into: dest.subarray(CHUNK_SIZE, 2 * CHUNK_SIZE) },
    { chainId: 1, chunkId: chunkIdOf(1002n, 9), offset: 0, length: CHUNK_SIZE, into: dest.subarray(2 * CHUNK_SIZE) },
    { chainId: 1, chunkId: a, offset: 0, length: CHUNK_SIZE },
  ])
  const data = rs.map((r) => (r.ok ? r.data : null))
  t.true(data[0]!.equals(big))
  t.is(data[0]!.buffer, dest.buffer, 'a whole chunk was received into the caller\'s memory')
  t.is(data[0]!.byteOffset, dest.byteOffset)
  t.true(data[1]!.equals(short), 'a short chunk reads short')
  t.true(dest.subarray(0, CHUNK_SIZE).equals(big))
  t.true(dest.subarray(CHUNK_SIZE + short.length, 2 * CHUNK_SIZE).every((x) => x === 0xee), 'nothing written past a short chunk')
  t.is(data[2]!.length, 0, 'a hole')
  t.true(dest.subarray(2 * CHUNK_SIZE).every((x) => x === 0xee))
  t.true(data[3]!.equals(big))
  t.not(data[3]!.buffer, dest.buffer, 'a read without into gets its own buffer')
  // into that cannot hold the range is refused before anything is sent
  const [bad] = await sc.batchRead([{ chainId: 1, chunkId: a, offset: 0, length: CHUNK_SIZE, into: Buffer.alloc(10) }])
  t.true(!bad!.ok && isStrataError(bad!.error, 'INVALID_ARGUMENT'))
  t.true((await sc.read(1, a, 0, CHUNK_SIZE, { into: Buffer.alloc(CHUNK_SIZE) })).equals(big))
})

test.serial('reads into a scatter list: whole and partial chunks land across the list in order (received in place, checksums verified), short chunks fill a prefix', async (t) => {
  // chunks large enough that every piece of the list is an attachment
  const CS = 1024 * 1024
  const big = randomBytes(CS)
  const short = randomBytes(CS - 70_000)
  const a = chunkIdOf(1077n, 0)
  const b = chunkIdOf(1077n, 1)
  await sc.write(1, a, 0, big, CS)
  await sc.write(2, b, 0, short, CS)
  // quarters of a chunk in reverse order of one region, 0xee around and between them
  const q = CS / 4
  const region = Buffer.alloc(CS + 5 * 64, 0xee)
  const list = (base: Buffer) => [3, 2, 1, 0].map((k) => base.subarray(64 + k * (q + 64), 64 + k * (q + 64) + q))
  const gaps = (base: Buffer) => [0, 1, 2, 3, 4].every((k) => base.subarray(k * (q + 64), k * (q + 64) + 64).every((x) => x === 0xee))
  const whole = list(region)
  const region2 = Buffer.alloc(CS + 5 * 64, 0xee)
  const shortList = list(region2)
  const partial = [Buffer.alloc(100_000, 0xee), Buffer.alloc(150_000, 0xee)]
  const before = sc.stats().checksumMismatches
  const rs = await sc.batchRead(
    [
      { chainId: 1, chunkId: a, offset: 0, length: CS, into: whole },
      { chainId: 2, chunkId: b, offset: 0, length: CS, into: shortList },
      { chainId: 1, chunkId: a, offset: 12_345, length: 250_000, into: partial },
      { chainId: 1, chunkId: chunkIdOf(1077n, 9), offset: 0, length: CS, into: [Buffer.alloc(CS)] },
    ],
    { verifyChecksum: true },
  )
  t.true(rs.every((r) => r.ok))
  const ok = rs.map((r) => (r.ok ? r : null)!)
  t.deepEqual(ok.map((r) => r.placed), [CS, short.length, 250_000, 0])
  t.deepEqual(ok.map((r) => r.data.length), [0, 0, 0, 0], 'a scattered result has no data of its own')
  t.true(Buffer.concat(whole).equals(big), 'a whole chunk across the list')
  t.true(gaps(region), 'nothing written between the pieces')
  t.true(Buffer.concat(shortList).subarray(0, short.length).equals(short), 'a short chunk fills a prefix of the list')
  t.true(Buffer.concat(shortList).subarray(short.length).every((x) => x === 0xee), 'and nothing past it')
  t.true(Buffer.concat(partial).equals(big.subarray(12_345, 12_345 + 250_000)), 'a partial range across the list')
  t.false(ok[3]!.found, 'a hole')
  t.is(sc.stats().checksumMismatches, before)
  // a list that cannot hold the range is refused before anything is sent
  const [bad] = await sc.batchRead([{ chainId: 1, chunkId: a, offset: 0, length: CS, into: [Buffer.alloc(q), Buffer.alloc(q)] }])
  t.true(!bad!.ok && isStrataError(bad!.error, 'INVALID_ARGUMENT'))
})

test.serial('an acknowledged write is on every replica: all read modes return the same bytes', async (t) => {
  const id = chunkIdOf(1002n, 3)
  const data = randomBytes(CHUNK_SIZE)
  await sc.write(2, id, 0, data, CHUNK_SIZE)
  for (const mode of ['head', 'tail', 'roundRobin', 'random', 'loadBalance'] as ReadMode[]) {
    for (let i = 0; i < 3; i++) t.deepEqual(await sc.read(2, id, 0, CHUNK_SIZE, { mode }), data, mode)
  }
  // and the replicas agree on the committed version, asked one by one
  const ri = await mgmtd.refresh()
  const metas = await Promise.all(
    ri.chains['2']!.targets.map(async (ct) => {
      const addr = await cluster.addressOfTarget(ct.targetId)
      return cluster.rpc.call<QueryChunkRsp>(addr, ServiceId.Storage, StorageMethod.queryChunk, { chainId: 2, chunkId: id })
    }),
  )
  t.is(metas.length, 3)
  for (const m of metas) {
    t.is(m.meta!.size, CHUNK_SIZE)
    t.is(m.meta!.commitVer, metas[0]!.meta!.commitVer)
    t.is(m.meta!.checksum, metas[0]!.meta!.checksum)
  }
})

test.serial('batchRead across chains: one RPC per node, per-IO results in order', async (t) => {
  const ios: Array<{ chainId: number; chunkId: Buffer; offset: number; length: number }> = []
  const want: Buffer[] = []
  for (let i = 0; i < 8; i++) {
    const chainId = 1 + (i % 2)
    const chunkId = chunkIdOf(1003n, i)
    const data = randomBytes(1000 + i * 100)
    await sc.write(chainId, chunkId, 0, data, CHUNK_SIZE)
    ios.push({ chainId, chunkId, offset: 10, length: 500 })
    want.push(data.subarray(10, 510))
  }
  ios.push({ chainId: 1, chunkId: chunkIdOf(1003n, 99), offset: 0, length: 10 }) // hole
  for (const mode of ['loadBalance', 'head', 'tail'] as ReadMode[]) {
    const before = sc.stats().rpcs.batchRead ?? 0
    const res = await sc.batchRead(ios, { mode })
    const rpcs = (sc.stats().rpcs.batchRead ?? 0) - before
    t.true(rpcs >= 1 && rpcs <= 3, `${mode}: ${rpcs} RPCs`)
    if (mode !== 'loadBalance') t.is(rpcs, mode === 'head' ? distinctHeads() : distinctTails(), mode)
    for (let i = 0; i < want.length; i++) {
      const r = res[i]!
      t.true(r.ok && r.found, mode)
      if (r.ok) t.deepEqual(r.data, want[i])
    }
    const hole = res[8]!
    t.true(hole.ok && !hole.found && hole.data.length === 0)
  }

  function distinctHeads(): number {
    const ri = mgmtd.cachedRouting!
    return new Set([1, 2].map((c) => ri.targets[String(ri.chains[String(c)]!.targets[0]!.targetId)]!.nodeId)).size
  }
  function distinctTails(): number {
    const ri = mgmtd.cachedRouting!
    return new Set([1, 2].map((c) => ri.targets[String(ri.chains[String(c)]!.targets.at(-1)!.targetId)]!.nodeId)).size
  }
})

test.serial('injected CHUNK_NOT_COMMIT on batchRead is retried until the read succeeds', async (t) => {
  const id = chunkIdOf(1004n, 0)
  const data = randomBytes(4096)
  await sc.write(1, id, 0, data, CHUNK_SIZE)
  const ri = await mgmtd.refresh()
  const head = await cluster.addressOfTarget(ri.chains['1']!.targets[0]!.targetId)
  await cluster.rpc.setFault(head, { service: 3, method: 1, kind: 'fail', code: 'CHUNK_NOT_COMMIT', count: 2 })
  const before = sc.stats().retries.CHUNK_NOT_COMMIT ?? 0
  t.deepEqual(await sc.read(1, id, 0, 4096, { mode: 'head' }), data)
  t.is((sc.stats().retries.CHUNK_NOT_COMMIT ?? 0) - before, 2)
  await cluster.rpc.clearFaults(head)
})

test.serial('injected failures of write and truncate RPCs are retried with the same tag', async (t) => {
  const id = chunkIdOf(1005n, 0)
  const ri = await mgmtd.refresh()
  const head = await cluster.addressOfTarget(ri.chains['2']!.targets[0]!.targetId)
  await cluster.rpc.setFault(head, { service: 3, method: StorageMethod.write, kind: 'fail', code: 'TARGET_OFFLINE', count: 2 })
  const before = sc.stats()
  const data = randomBytes(2048)
  const r = await sc.write(2, id, 0, data, CHUNK_SIZE)
  t.is(r.lengthInfo, 2048)
  t.is((sc.stats().retries.TARGET_OFFLINE ?? 0) - (before.retries.TARGET_OFFLINE ?? 0), 2)
  t.true(sc.stats().routingRefreshes > before.routingRefreshes)
  await cluster.rpc.setFault(head, { service: 3, method: StorageMethod.truncateChunks, kind: 'fail', code: 'CHANNEL_IS_LOCKED', count: 1 })
  const tr = await sc.truncate(2, id, 100, CHUNK_SIZE)
  t.is(tr.lengthInfo, 100)
  t.deepEqual(await sc.read(2, id, 0, 4096, { mode: 'tail' }), data.subarray(0, 100))
  // each logical update advanced the chunk by exactly one version
  const w2 = await sc.write(2, id, 0, Buffer.from('x'), CHUNK_SIZE)
  t.is(w2.commitVer, tr.commitVer + 1)
  await cluster.rpc.clearFaults(head)
})

test.serial('truncate, queryLastChunk and removeChunks over a file range', async (t) => {
  const ino = 1006n
  const lens = [CHUNK_SIZE, CHUNK_SIZE, 5000, CHUNK_SIZE, 777]
  for (let i = 0; i < lens.length; i++) await sc.write(1, chunkIdOf(ino, i), 0, randomBytes(lens[i]!), CHUNK_SIZE)
  const range = fileChunkRange(ino)
  const q = await sc.queryLastChunk(1, range)
  t.deepEqual(q.lastChunkId, chunkIdOf(ino, 4))
  t.is(q.lastChunkLen, 777)
  t.is(q.totalNumChunks, 5)
  t.is(q.totalChunkLen, lens.reduce((a, b) => a + b, 0))
  t.false(q.moreChunksInRange)
  // a capped query reports that more chunks exist
  const capped = await sc.queryLastChunk(1, { ...range, maxNumChunkIdsToProcess: 2 })
  t.deepEqual(capped.lastChunkId, chunkIdOf(ino, 4))
  t.true(capped.moreChunksInRange)
  // the same answer from any replica once acknowledged
  const fromTail = await sc.queryLastChunk(1, range, { mode: 'tail' })
  t.deepEqual(fromTail, q)

  // truncate: shrink, only-extend is a no-op on a longer chunk, extend zero-fills
  const last = chunkIdOf(ino, 4)
  const before = await sc.read(1, last, 0, 777)
  t.is((await sc.truncate(1, last, 10, CHUNK_SIZE)).lengthInfo, 10)
  t.is((await sc.truncate(1, last, 5, CHUNK_SIZE, true)).lengthInfo, 10)
  t.is((await sc.truncate(1, last, 100, CHUNK_SIZE, true)).lengthInfo, 100)
  t.deepEqual(await sc.read(1, last, 0, 4096), Buffer.concat([before.subarray(0, 10), Buffer.alloc(90)]))
  // truncate creates a missing chunk
  t.is((await sc.truncate(1, chunkIdOf(ino, 9), 64, CHUNK_SIZE)).lengthInfo, 64)
  t.deepEqual(await sc.read(1, chunkIdOf(ino, 9), 0, 100), Buffer.alloc(64))

  // remove the tail of the file from chunk 3 on, two chunks per request
  const rm = await sc.removeChunks(1, { ...fileChunkRange(ino, 3), maxNumChunkIdsToProcess: 2 })
  t.is(rm.numChunksRemoved, 3) // chunks 3, 4, 9
  t.true(rm.steps >= 2)
  const q2 = await sc.queryLastChunk(1, range)
  t.deepEqual(q2.lastChunkId, chunkIdOf(ino, 2))
  t.is(q2.totalNumChunks, 3)
  for (const mode of ['head', 'tail'] as ReadMode[]) t.is((await sc.read(1, chunkIdOf(ino, 4), 0, 10, { mode })).length, 0)
  // then everything
  t.is((await sc.removeChunks(1, range)).numChunksRemoved, 3)
  const q3 = await sc.queryLastChunk(1, range)
  t.is(q3.lastChunkId, null)
  t.is(q3.totalNumChunks, 0)
  // removing an empty range is fine
  t.deepEqual(await sc.removeChunks(1, range), { numChunksRemoved: 0, steps: 1 })
})

test.serial('many concurrent writes and reads through a small channel pool', async (t) => {
  const small = new StorageClient({ mgmtd, numChannels: 4, maxConcurrentPerNode: 2 })
  t.teardown(() => small.close())
  const ino = 1007n
  const datas = Array.from({ length: 24 }, () => randomBytes(8192))
  await Promise.all(datas.map((d, i) => small.write(1 + (i % 2), chunkIdOf(ino, i), 0, d, CHUNK_SIZE)))
  t.is(small.channels.inUse, 0)
  const res = await small.batchRead(datas.map((_, i) => ({ chainId: 1 + (i % 2), chunkId: chunkIdOf(ino, i), offset: 0, length: 8192 })))
  res.forEach((r, i) => t.true(r.ok && r.data.equals(datas[i]!)))
  // overwrites of one chunk serialize at the head; the last acknowledged one wins
  const id = chunkIdOf(ino, 100)
  const vs = await Promise.all(Array.from({ length: 8 }, (_, i) => small.write(1, id, 0, Buffer.alloc(16, i), CHUNK_SIZE)))
  const versions = vs.map((v) => v.commitVer).sort((a, b) => a - b)
  t.deepEqual(versions, Array.from({ length: 8 }, (_, i) => versions[0]! + i))
  const winner = vs.findIndex((v) => v.commitVer === versions.at(-1))
  t.deepEqual(await small.read(1, id, 0, 16, { mode: 'tail' }), Buffer.alloc(16, winner))
})
