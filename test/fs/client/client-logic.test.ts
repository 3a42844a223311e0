// StorageClient logic against a scripted RPC stub: what is sent where, with
// which tag, and how failures are retried. No storage semantics are modelled
// here — the stub only answers what each test scripts; the behaviour against
// real storage nodes is covered by cluster.test.ts.

import test from 'ava'
import { crc32c } from '@node-rs/crc32'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { StrataError, isStrataError, type ErrorCode } from '../../../fs/common/errors.js'
import { StorageMethod } from '../../../fs/common/services.js'
import type { PublicTargetState, RoutingInfo } from '../../../fs/common/types.js'
import type { MgmtdClient } from '../../../fs/mgmtd/client.js'
import type { RpcClient } from '../../../fs/rpc/index.js'
import type { BatchReadReq, ReadResult, RemoveChunksReq, WriteReq } from '../../../fs/storage/protocol.js'

function routing(chains: Record<number, PublicTargetState[]>, opts: { version?: number; chainVersion?: number; rotate?: number } = {}): RoutingInfo {
  const ri: RoutingInfo = { routingInfoVersion: opts.version ?? 5, bootstrapping: false, nodes: {}, chainTables: {}, chains: {}, targets: {} }
  for (let n = 1; n <= 3; n++) {
    ri.nodes[n] = { nodeId: n, type: 'STORAGE', status: 'HEARTBEAT_CONNECTED', hostname: 'h', pid: 1, address: `n${n}:7000`, tags: [], lastHeartbeatTime: 0, configVersion: 0, releaseVersion: 't' }
  }
  for (const [c, states] of Object.entries(chains)) {
    const chainId = Number(c)
    const ids = states.map((_, i) => (i + 1) * 100 + chainId)
    const rot = opts.rotate ?? 0
    const order = [...ids.slice(rot), ...ids.slice(0, rot)]
    ri.chains[chainId] = { chainId, chainVersion: opts.chainVersion ?? 3, preferredTargetOrder: [], targets: order.map((targetId, i) => ({ targetId, publicState: states[i]! })) }
    ids.forEach((targetId, i) => {
      ri.targets[targetId] = { targetId, publicState: 'SERVING', localState: 'UPTODATE', chainId, nodeId: i + 1, diskIndex: 0, usedSize: 0 }
    })
  }
  return ri
}

class FakeMgmtd {
  refreshes = 0
  constructor(
    public ri: RoutingInfo,
    public next?: RoutingInfo,
  ) {}
  async routing(): Promise<RoutingInfo> {
    return this.ri
  }
  async refresh(): Promise<RoutingInfo> {
    this.refreshes++
    if (this.next) this.ri = this.next
    return this.ri
  }
}

interface Call {
  address: string
  method: number
  payload: any
  timeoutMs: number | undefined
}

type Handler = (c: Call, n: number) => unknown

class FakeRpc {
  calls: Call[] = []
  closed = 0
  constructor(public handler: Handler) {}
  async call(address: string, _service: number, method: number, payload: unknown, opts: { timeoutMs?: number } = {}): Promise<unknown> {
    const c = { address, method, payload: structuredCloneish(payload), timeoutMs: opts.timeoutMs }
    this.calls.push(c)
    await Promise.resolve()
    return this.handler(c, this.calls.length)
  }
  close(): void {
    this.closed++
  }
  of(method: number): Call[] {
    return this.calls.filter((c) => c.method === method)
  }
}

// payloads are inspected after the client may have moved on; keep a snapshot
function structuredCloneish(p: any): any {
  return JSON.parse(JSON.stringify(p, (_k, v) => (v && v.type === 'Buffer' && Array.isArray(v.data) ? Buffer.from(v.data).toString('hex') : v)))
}

function fail(code: ErrorCode): never {
  throw new StrataError(code, 'scripted')
}

const ioResult = { lengthInfo: 0, commitVer: 1, updateVer: 1, checksum: 0, commitChainVer: 3 }
const CHUNK = chunkIdOf(42n, 0)
const fast = { initialDelayMs: 1, maxDelayMs: 5, fastInitialDelayMs: 1, fastMaxDelayMs: 2 }

function client(rpc: FakeRpc, mgmtd: FakeMgmtd, extra: Record<string, unknown> = {}): StorageClient {
  return new StorageClient({ mgmtd: mgmtd as unknown as MgmtdClient, rpc: rpc as unknown as RpcClient, clientId: 'c-1', retry: fast, ...extra })
}

/** Chunk content the stub serves: byte i of chunk (chain, index) is (chain + index + i) & 0xff. */
function content(chainId: number, chunkId: string, offset: number, length: number): Buffer {
  const idx = Buffer.from(chunkId, 'hex').readUInt32BE(12)
  return Buffer.from(Array.from({ length }, (_, i) => (chainId + idx + offset + i) & 0xff))
}

function goodRead(io: any): ReadResult {
  const data = content(io.chainId, io.chunkId, io.offset, io.length)
  return { ok: true, data, commitVer: 1, updateVer: 1, commitChainVer: 3, checksum: crc32c(data) }
}

test('a write goes to the head with the CRC32C of its data, and every retry carries the same tag', async (t) => {
  const rpc = new FakeRpc((c, n) => (n === 1 ? fail('CHANNEL_IS_LOCKED') : n === 2 ? fail('TIMEOUT') : { ...ioResult, lengthInfo: c.payload.io.length }))
  const sc = client(rpc, new FakeMgmtd(routing({ 7: ['SERVING', 'SERVING', 'SERVING'] })))
  const data = Buffer.from('hello chunk')
  const r = await sc.write(7, CHUNK, 100, data, 4096)
  t.is(r.lengthInfo, data.length)
  const writes = rpc.of(StorageMethod.write)
  t.is(writes.length, 3)
  for (const w of writes) {
    const req = w.payload as WriteReq
    t.is(w.address, 'n1:7000')
    t.deepEqual(req.io.key, { chainId: 7, chainVer: 3, chunkId: CHUNK.toString('hex') as any })
    t.is(req.io.offset, 100)
    t.is(req.io.length, data.length)
    t.is(req.io.chunkSize, 4096)
    t.is(req.io.updateVer, 0)
    t.is(req.io.updateType, 'WRITE')
    t.is(req.io.checksum, crc32c(data))
    t.deepEqual(req.tag, writes[0]!.payload.tag)
  }
  t.is(writes[0]!.payload.tag.clientId, 'c-1')
  // the next logical write: new request id and a higher seqnum
  await sc.write(7, CHUNK, 0, data, 4096)
  const tag2 = rpc.of(StorageMethod.write)[3]!.payload.tag
  t.not(tag2.requestId, writes[0]!.payload.tag.requestId)
  t.true(tag2.channel.seqnum > writes[0]!.payload.tag.channel.seqnum)
  t.is(sc.channels.inUse, 0)
  const s = sc.stats()
  t.is(s.retries.CHANNEL_IS_LOCKED, 1)
  t.is(s.retries.TIMEOUT, 1)
  t.is(s.ops.write, 2)
  t.is(s.rpcs.write, 4)
  t.is(s.bytesWritten, 2 * data.length)
  sc.close()
})

test('a stale chain version makes the client refresh routing and retry the same tag at the new head', async (t) => {
  const before = routing({ 7: ['SERVING', 'SERVING', 'SERVING'] })
  const after = routing({ 7: ['SERVING', 'SERVING', 'OFFLINE'] }, { version: 6, chainVersion: 4, rotate: 1 })
  const mgmtd = new FakeMgmtd(before, after)
  const rpc = new FakeRpc((c) => (c.payload.io.key.chainVer === 3 ? fail('ROUTING_VERSION_MISMATCH') : ioResult))
  const sc = client(rpc, mgmtd)
  await sc.write(7, CHUNK, 0, Buffer.alloc(10, 1), 1024)
  const [w1, w2] = rpc.of(StorageMethod.write)
  t.is(w1!.address, 'n1:7000')
  t.is(w2!.address, 'n2:7000')
  t.is(w2!.payload.io.key.chainVer, 4)
  t.deepEqual(w2!.payload.tag, w1!.payload.tag)
  t.is(mgmtd.refreshes, 1)
  t.is(sc.stats().routingRefreshes, 1)
  sc.close()
})

test('permanent errors surface at once; retryable ones stop at the deadline', async (t) => {
  const rpc = new FakeRpc(() => fail('CHUNK_SIZE_MISMATCH'))
  const sc = client(rpc, new FakeMgmtd(routing({ 7: ['SERVING'] })))
  t.true(isStrataError(await t.throwsAsync(sc.write(7, CHUNK, 0, Buffer.alloc(1), 1024)), 'CHUNK_SIZE_MISMATCH'))
  t.is(rpc.calls.length, 1)
  t.is(sc.stats().failures.CHUNK_SIZE_MISMATCH, 1)

  // the call's deadline, not the client's (made 10 min here), ends the retries
  rpc.handler = () => fail('TARGET_OFFLINE')
  const slow = client(rpc, new FakeMgmtd(routing({ 7: ['SERVING'] })), { retry: { ...fast, deadlineMs: 600_000 } })
  t.teardown(() => slow.close())
  const start = performance.now()
  const e = await t.throwsAsync(slow.write(7, CHUNK, 0, Buffer.alloc(1), 1024, { deadlineMs: 150 }))
  const took = performance.now() - start
  t.true(isStrataError(e, 'TARGET_OFFLINE'))
  t.regex(e!.message, /gave up after \d+ attempts/)
  t.log(`gave up after ${Math.round(took)} ms`)
  // retried until the 150 ms deadline (a lower bound it causes); the upper one is a hang guard far below 10 min
  t.true(took >= 100 && took < 60_000, `took ${took} ms`)
  t.is(slow.channels.inUse, 0)
  t.is(sc.channels.inUse, 0)
  // invalid ranges never reach the wire
  const n = rpc.calls.length
  t.true(isStrataError(await t.throwsAsync(sc.write(7, CHUNK, 1000, Buffer.alloc(100), 1024)), 'CHUNK_INVALID_RANGE'))
  t.true(isStrataError(await t.throwsAsync(sc.write(7, Buffer.alloc(4), 0, Buffer.alloc(1), 1024)), 'INVALID_ARGUMENT'))
  t.true(isStrataError(await t.throwsAsync(sc.truncate(7, CHUNK, 2048, 1024)), 'INVALID_ARGUMENT'))
  t.is(rpc.calls.length, n)
  sc.close()
})

test('a chain without a SERVING target is waited for, not failed at once', async (t) => {
  const mgmtd = new FakeMgmtd(routing({ 7: ['LASTSRV', 'OFFLINE', 'OFFLINE'] }), routing({ 7: ['SERVING', 'OFFLINE', 'OFFLINE'] }, { version: 6, chainVersion: 4 }))
  const rpc = new FakeRpc(() => ioResult)
  const sc = client(rpc, mgmtd)
  await sc.write(7, CHUNK, 0, Buffer.alloc(1), 1024)
  t.is(sc.stats().retries.CHAIN_UNAVAILABLE, 1)
  t.is(rpc.calls.length, 1)
  sc.close()
})

test('with every channel busy, updates queue instead of sharing a channel', async (t) => {
  let inFlight = 0
  let maxInFlight = 0
  const rpc = new FakeRpc(async () => {
    maxInFlight = Math.max(maxInFlight, ++inFlight)
    await new Promise((r) => setTimeout(r, 20))
    inFlight--
    return ioResult
  })
  const sc = client(rpc, new FakeMgmtd(routing({ 7: ['SERVING'] })), { numChannels: 1 })
  await Promise.all([0, 1, 2].map((i) => sc.write(7, chunkIdOf(1n, i), 0, Buffer.alloc(4), 1024)))
  t.is(maxInFlight, 1)
  const tags = rpc.calls.map((c) => c.payload.tag)
  t.deepEqual(
    tags.map((x) => x.channel.id),
    [1, 1, 1],
  )
  t.true(tags[0].channel.seqnum < tags[1].channel.seqnum && tags[1].channel.seqnum < tags[2].channel.seqnum)
  sc.close()
})

test('batchRead sends one batchRead RPC per node and returns results in request order', async (t) => {
  const rpc = new FakeRpc((c) => ({ results: (c.payload as BatchReadReq).ios.map(goodRead) }))
  const sc = client(rpc, new FakeMgmtd(routing({ 1: ['SERVING', 'SERVING', 'SERVING'], 2: ['SERVING', 'SERVING', 'SERVING'] })))
  const ios = Array.from({ length: 12 }, (_, i) => ({ chainId: 1 + (i % 2), chunkId: chunkIdOf(9n, i), offset: i, length: 64 + i }))
  const res = await sc.batchRead(ios)
  const reads = rpc.of(StorageMethod.batchRead)
  t.is(reads.length, 3) // loadBalance spreads 12 IOs over the 3 nodes
  t.is(new Set(reads.map((r) => r.address)).size, 3)
  t.deepEqual(
    reads.map((r) => r.payload.ios.length),
    [4, 4, 4],
  )
  res.forEach((r, i) => {
    t.true(r.ok)
    if (r.ok) {
      t.true(r.found)
      t.deepEqual(r.data, content(ios[i]!.chainId, ios[i]!.chunkId.toString('hex'), ios[i]!.offset, ios[i]!.length))
    }
  })
  for (const r of reads) for (const io of r.payload.ios) t.is(io.chainVer, 3)
  // head mode: everything for one node travels in a single RPC
  rpc.calls = []
  await sc.batchRead(ios, { mode: 'head' })
  t.is(rpc.calls.length, 1)
  t.is(rpc.calls[0]!.address, 'n1:7000')
  t.is(rpc.calls[0]!.payload.ios.length, 12)
  t.is(sc.stats().batchReadCalls, 2)
  t.is(sc.stats().ops.read, 24)
  sc.close()
})

test('batchRead retries only the IOs that failed; a failed node is avoided for the rest of the call', async (t) => {
  let firstNotCommit = true
  const rpc = new FakeRpc((c) => {
    if (c.address === 'n2:7000') fail('RPC_CONNECTION_CLOSED')
    return {
      results: (c.payload as BatchReadReq).ios.map((io: any): ReadResult => {
        if (io.chunkId === chunkIdOf(9n, 0).toString('hex') && firstNotCommit) {
          firstNotCommit = false
          return { ok: false, error: { code: 'CHUNK_NOT_COMMIT', message: 'pending' } }
        }
        return goodRead(io)
      }),
    }
  })
  const sc = client(rpc, new FakeMgmtd(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] })))
  const ios = Array.from({ length: 6 }, (_, i) => ({ chainId: 1, chunkId: chunkIdOf(9n, i), offset: 0, length: 8 }))
  const res = await sc.batchRead(ios, { mode: 'roundRobin' })
  t.true(res.every((r) => r.ok))
  const rounds = rpc.of(StorageMethod.batchRead)
  const first = rounds.slice(0, 3)
  t.deepEqual(first.map((r) => r.address).sort(), ['n1:7000', 'n2:7000', 'n3:7000'])
  const later = rounds.slice(3)
  t.false(later.some((r) => r.address === 'n2:7000'))
  // round 2 re-sends what n2 lost plus the one uncommitted IO, nothing else
  const resent = later.flatMap((r) => r.payload.ios.map((io: any) => Buffer.from(io.chunkId, 'hex').readUInt32BE(12))).sort()
  const lostOnN2 = first.find((r) => r.address === 'n2:7000')!.payload.ios.map((io: any) => Buffer.from(io.chunkId, 'hex').readUInt32BE(12))
  t.deepEqual(resent, [...new Set([0, ...lostOnN2])].sort())
  const s = sc.stats()
  t.is(s.retries.CHUNK_NOT_COMMIT, 1)
  t.is(s.retries.RPC_CONNECTION_CLOSED, lostOnN2.length)
  t.true(s.routingRefreshes >= 1)
  sc.close()
})

test('a missing chunk reads as a hole unless strict; flags pass through', async (t) => {
  const rpc = new FakeRpc((c) => ({
    results: (c.payload as BatchReadReq).ios.map((): ReadResult => ({ ok: false, error: { code: 'CHUNK_NOT_FOUND', message: 'no chunk' } })),
  }))
  const sc = client(rpc, new FakeMgmtd(routing({ 1: ['SERVING', 'SERVING'] })))
  const data = await sc.read(1, CHUNK, 0, 100)
  t.is(data.length, 0)
  const [r] = await sc.batchRead([{ chainId: 1, chunkId: CHUNK, offset: 0, length: 100 }], { allowReadUncommitted: true, serverVerifyChecksum: true })
  t.true(r!.ok && !r!.found)
  t.true(rpc.calls.at(-1)!.payload.allowReadUncommitted)
  t.true(rpc.calls.at(-1)!.payload.verifyChecksum)
  t.is(rpc.calls[0]!.payload.allowReadUncommitted, undefined)
  const n = rpc.calls.length
  t.true(isStrataError(await t.throwsAsync(sc.read(1, CHUNK, 0, 100, { strict: true })), 'CHUNK_NOT_FOUND'))
  t.is(rpc.calls.length, n + 1)
  t.is(sc.stats().holes, 2)
  sc.close()
})

test('data failing its checksum is re-read from another replica; when every copy is bad the read fails', async (t) => {
  const corrupt = new Set(['n1:7000'])
  const rpc = new FakeRpc((c) => ({
    results: (c.payload as BatchReadReq).ios.map((io: any) => {
      const r = goodRead(io)
      if (r.ok && corrupt.has(c.address)) r.checksum = (r.checksum + 1) >>> 0
      return r
    }),
  }))
  const sc = client(rpc, new FakeMgmtd(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] })), { random: () => 0 })
  // random() = 0 makes loadBalance start at the head, which serves bad data
  const d = await sc.read(1, CHUNK, 0, 32)
  t.deepEqual(d, content(1, CHUNK.toString('hex'), 0, 32))
  t.is(rpc.calls[0]!.address, 'n1:7000')
  t.not(rpc.calls[1]!.address, 'n1:7000')
  t.is(sc.stats().checksumMismatches, 1)

  corrupt.add('n2:7000').add('n3:7000')
  rpc.calls = []
  t.true(isStrataError(await t.throwsAsync(sc.read(1, CHUNK, 0, 32)), 'CHECKSUM_MISMATCH'))
  t.deepEqual(rpc.calls.map((c) => c.address).sort(), ['n1:7000', 'n2:7000', 'n3:7000'])
  // head mode stays on the head: one more try there, then the error
  rpc.calls = []
  t.true(isStrataError(await t.throwsAsync(sc.read(1, CHUNK, 0, 32, { mode: 'head' })), 'CHECKSUM_MISMATCH'))
  t.deepEqual(
    rpc.calls.map((c) => c.address),
    ['n1:7000', 'n1:7000'],
  )
  // checking can be turned off
  rpc.calls = []
  t.is((await sc.read(1, CHUNK, 0, 32, { mode: 'head', verifyChecksum: false })).length, 32)
  sc.close()
})

test('removeChunks loops while more chunks remain, with fresh seqnums reserving a slot per chunk', async (t) => {
  const answers = [
    { numChunksRemoved: 2, moreChunksInRange: true },
    'CHANNEL_IS_LOCKED',
    { numChunksRemoved: 2, moreChunksInRange: true },
    { numChunksRemoved: 1, moreChunksInRange: false },
  ]
  const rpc = new FakeRpc((_c, n) => {
    const a = answers[n - 1]!
    return typeof a === 'string' ? fail(a as ErrorCode) : a
  })
  const sc = client(rpc, new FakeMgmtd(routing({ 3: ['SERVING', 'SERVING'] })))
  const r = await sc.removeChunks(3, { begin: chunkIdOf(5n, 0), end: chunkIdOf(5n, 0, 1), maxNumChunkIdsToProcess: 2 })
  t.deepEqual(r, { numChunksRemoved: 5, steps: 3 })
  const calls = rpc.of(StorageMethod.removeChunks)
  t.is(calls.length, 4)
  const tags = calls.map((c) => (c.payload as RemoveChunksReq).tag)
  t.true(calls.every((c) => c.address === 'n1:7000' && c.payload.range.maxNumChunkIdsToProcess === 2 && c.payload.chainVer === 3))
  t.is(new Set(tags.map((x) => x.channel.id)).size, 1)
  for (let i = 1; i < tags.length; i++) t.is(tags[i]!.channel.seqnum - tags[i - 1]!.channel.seqnum, 2)
  t.is(sc.channels.inUse, 0)
  t.is(sc.stats().ops.removeChunks, 1)
  sc.close()
})

test('queryLastChunk asks the head by default and treats a missing chunk as an empty range', async (t) => {
  const last = chunkIdOf(5n, 9)
  const rpc = new FakeRpc((c) =>
    c.address === 'n3:7000' ? fail('CHUNK_NOT_FOUND') : { lastChunkId: last, lastChunkLen: 7, totalChunkLen: 9 * 1024 + 7, totalNumChunks: 10, moreChunksInRange: false },
  )
  const sc = client(rpc, new FakeMgmtd(routing({ 3: ['SERVING', 'SERVING', 'SERVING'] })))
  const range = { begin: chunkIdOf(5n, 0), end: chunkIdOf(5n, 0, 1) }
  const r = await sc.queryLastChunk(3, range)
  t.deepEqual(r.lastChunkId, last)
  t.is(r.totalNumChunks, 10)
  t.is(rpc.calls[0]!.address, 'n1:7000')
  t.is(rpc.calls[0]!.payload.chainVer, 3)
  t.true(rpc.calls[0]!.payload.range.maxNumChunkIdsToProcess >= 1)
  const empty = await sc.queryLastChunk(3, range, { mode: 'tail' })
  t.deepEqual(empty, { lastChunkId: null, lastChunkLen: 0, totalChunkLen: 0, totalNumChunks: 0, moreChunksInRange: false })
  sc.close()
})

test('close is idempotent, closes only an RPC client it created, and stops further calls', async (t) => {
  const rpc = new FakeRpc(() => ioResult)
  const sc = client(rpc, new FakeMgmtd(routing({ 1: ['SERVING'] })))
  sc.close()
  sc.close()
  t.is(rpc.closed, 0)
  t.true(sc.isClosed)
  t.true(isStrataError(await t.throwsAsync(sc.write(1, CHUNK, 0, Buffer.alloc(1), 1024)), 'CLOSED'))
  t.true(isStrataError(await t.throwsAsync(sc.read(1, CHUNK, 0, 1)), 'CLOSED'))
  // a client that made its own RPC client closes it
  const own = new StorageClient({ mgmtd: new FakeMgmtd(routing({ 1: ['SERVING'] })) as unknown as MgmtdClient })
  own.close()
  t.true(isStrataError(await t.throwsAsync(own.rpc.call('127.0.0.1:1', 3, 1, {})), 'CLOSED'))
})

test('close during a backoff ends the operation promptly', async (t) => {
  const rpc = new FakeRpc(() => fail('TARGET_OFFLINE'))
  const sc = new StorageClient({
    mgmtd: new FakeMgmtd(routing({ 1: ['SERVING'] })) as unknown as MgmtdClient,
    rpc: rpc as unknown as RpcClient,
    retry: { initialDelayMs: 600_000, maxDelayMs: 600_000, deadlineMs: 1_200_000 },
  })
  const p = sc.write(1, CHUNK, 0, Buffer.alloc(1), 1024)
  await new Promise((r) => setTimeout(r, 30))
  const start = performance.now()
  sc.close()
  t.true(isStrataError(await t.throwsAsync(p), 'CLOSED'))
  t.log(`ended ${Math.round(performance.now() - start)} ms after close`)
  // a hang guard, not timing: a backoff that close() does not wake sleeps 10 min
  t.true(performance.now() - start < 60_000)
  t.is(rpc.calls.length, 1, 'not sent again after the close')
})
