// CRAQ at the storage RPC level against real storage processes: replication,
// version algebra, exactly-once channels, uncommitted reads, fencing.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { crc32c } from '@node-rs/crc32'
import { startTestCluster, until, type TestCluster } from '../../helpers/procs.js'
import { CoreMethod, ServiceId, StorageMethod } from '../../../fs/common/services.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { isStrataError, StrataError } from '../../../fs/common/errors.js'
import type { BatchReadRsp, IOResult, QueryChunkRsp, UpdateReq, WriteReq } from '../../../fs/storage/protocol.js'

const CHUNK = 65536

async function head(c: TestCluster, chainId: number) {
  const ri = await c.routing()
  const chain = ri.chains[chainId]!
  const h = chain.targets.find((x) => x.publicState === 'SERVING')!
  return { chain, targetId: h.targetId, address: c.address(c.targetNode.get(h.targetId)!) }
}

function writeReq(chainId: number, chainVer: number, chunkId: Buffer, offset: number, data: Buffer, seq: number, requestId = seq): WriteReq {
  return {
    io: { key: { chainId, chainVer, chunkId }, offset, length: data.length, chunkSize: CHUNK, data, updateVer: 0, updateType: 'WRITE', checksum: crc32c(data) },
    tag: { clientId: 'test-client', requestId, channel: { id: 1, seqnum: seq } },
  }
}

async function write(c: TestCluster, chainId: number, chunkId: Buffer, offset: number, data: Buffer, seq: number): Promise<IOResult> {
  return until(
    async () => {
      const h = await head(c, chainId)
      try {
        return await c.rpc.call<IOResult>(h.address, ServiceId.Storage, StorageMethod.write, writeReq(chainId, h.chain.chainVersion, chunkId, offset, data, seq), { timeoutMs: 20000 })
      } catch (e) {
        if (e instanceof StrataError && e.retryable) return undefined
        throw e
      }
    },
    30000,
    'write acknowledged',
  )
}

async function replicas(c: TestCluster, chainId: number, chunkId: Buffer) {
  const ri = await c.routing()
  return Promise.all(
    ri.chains[chainId]!.targets.map((t) =>
      c.rpc.call<QueryChunkRsp>(c.address(c.targetNode.get(t.targetId)!), ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId, withData: true }),
    ),
  )
}

test.serial('replicated write: every replica committed with equal bytes, checksums and versions', async (t) => {
  const c = await startTestCluster(t)
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x1234n, 0)
  const data = randomBytes(CHUNK)
  const r = await write(c, chainId, chunkId, 0, data, 1)
  t.is(r.updateVer, 1)
  t.is(r.commitVer, 1)
  t.is(r.checksum, crc32c(data))
  const reps = await replicas(c, chainId, chunkId)
  t.is(reps.length, 3)
  for (const rep of reps) {
    t.is(rep.meta!.commitVer, 1)
    t.is(rep.meta!.updateVer, 1)
    t.is(rep.meta!.state, 'COMMIT')
    t.is(rep.meta!.checksum, crc32c(data))
    t.deepEqual(rep.data, data)
  }
  // partial overwrite
  const patch = randomBytes(1000)
  await write(c, chainId, chunkId, 5000, patch, 2)
  patch.copy(data, 5000)
  for (const rep of await replicas(c, chainId, chunkId)) {
    t.is(rep.meta!.updateVer, 2)
    t.deepEqual(rep.data, data)
  }
  // reads from head and tail agree
  const ri = await c.routing()
  for (const tt of ri.chains[chainId]!.targets) {
    const rsp = await c.rpc.call<BatchReadRsp>(c.address(c.targetNode.get(tt.targetId)!), ServiceId.Storage, StorageMethod.batchRead, {
      ios: [{ chainId, chainVer: ri.chains[chainId]!.chainVersion, chunkId, offset: 4000, length: 3000 }],
    })
    const res = rsp.results[0]!
    t.true(res.ok)
    if (res.ok) t.deepEqual(res.data, data.subarray(4000, 7000))
  }
})

test.serial('chunk data arrives 4 KiB-aligned on every replica, so each O_DIRECT write goes from the received frame without a copy', async (t) => {
  const c = await startTestCluster(t)
  const chainId = c.chains[0]!.chainId
  const data = randomBytes(CHUNK)
  for (let i = 0; i < 4; i++) {
    const h = await head(c, chainId)
    // a client's chunk write asks for aligned attachments (StorageClient does); the head forwards the same way
    await c.rpc.call<IOResult>(h.address, ServiceId.Storage, StorageMethod.write, writeReq(chainId, h.chain.chainVersion, chunkIdOf(0x77n, i), 0, data, i + 1), {
      timeoutMs: 20000,
      alignAttachments: 4096,
    })
  }
  const ri = await c.routing()
  let direct = 0
  for (const target of ri.chains[chainId]!.targets) {
    const st = await c.rpc.call<{ targets: Array<{ targetId: number; dataWrites: { direct: number }; directCopies: number }> }>(
      c.address(c.targetNode.get(target.targetId)!),
      ServiceId.Core,
      CoreMethod.stats,
      {},
    )
    const mine = st.targets.find((x) => x.targetId === target.targetId)!
    direct += mine.dataWrites.direct
    t.is(mine.directCopies, 0, `target ${target.targetId}: no bounce copy`)
  }
  t.is(direct, 12, 'every replica wrote every chunk with O_DIRECT')
})

test.serial('version algebra and fencing at the RPC level', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x99n, 3)
  const data = randomBytes(4096)
  await write(c, chainId, chunkId, 0, data, 1) // v = u = 1 everywhere
  const ri = await c.routing()
  const chain = ri.chains[chainId]!
  const tail = chain.targets.at(-1)!.targetId
  const tailAddr = c.address(c.targetNode.get(tail)!)
  const fwd = (updateVer: number, chainVer = chain.chainVersion): UpdateReq => ({
    io: { key: { chainId, chainVer, chunkId }, offset: 0, length: data.length, chunkSize: CHUNK, data, updateVer, updateType: 'WRITE', checksum: crc32c(data) },
    tag: { clientId: 'x', requestId: 1, channel: { id: 0, seqnum: 0 } },
    options: { isSyncing: false, fromClient: false, commitChainVer: chainVer },
  })
  const call = (req: UpdateReq) => c.rpc.call<IOResult>(tailAddr, ServiceId.Storage, StorageMethod.update, req)
  // w = v: already committed → success
  const committed = await call(fwd(1))
  t.is(committed.commitVer, 1)
  // w > u + 1: missing
  t.true(isStrataError(await t.throwsAsync(call(fwd(3))), 'CHUNK_MISSING_UPDATE'))
  const meta = (await c.rpc.call<QueryChunkRsp>(tailAddr, ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId })).meta!
  t.is(meta.updateVer, 1, 'error case left the chunk unchanged')
  t.is(meta.commitVer, 1)
  // wrong chain version → routing version mismatch
  t.true(isStrataError(await t.throwsAsync(call(fwd(2, chain.chainVersion + 5))), 'ROUTING_VERSION_MISMATCH'))
  t.true(isStrataError(await t.throwsAsync(call(fwd(2, chain.chainVersion - 1))), 'ROUTING_VERSION_MISMATCH'))
  // client write to a non-head target → routing error
  const e = await t.throwsAsync(c.rpc.call(tailAddr, ServiceId.Storage, StorageMethod.write, writeReq(chainId, chain.chainVersion, chunkId, 0, data, 9)))
  t.true(isStrataError(e, 'ROUTING_ERROR'))
  // bad checksum from a client
  const h = await head(c, chainId)
  const bad = writeReq(chainId, chain.chainVersion, chunkId, 0, data, 10)
  bad.io.checksum ^= 1
  t.true(isStrataError(await t.throwsAsync(c.rpc.call(h.address, ServiceId.Storage, StorageMethod.write, bad)), 'CHECKSUM_MISMATCH'))
  // out-of-range write
  const oob = writeReq(chainId, chain.chainVersion, chunkId, CHUNK - 10, data, 11)
  t.true(isStrataError(await t.throwsAsync(c.rpc.call(h.address, ServiceId.Storage, StorageMethod.write, oob)), 'CHUNK_INVALID_RANGE'))
})

test.serial('exactly-once per channel: a retried tag is answered from cache, an old seqnum refused', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x77n, 0)
  const h = await head(c, chainId)
  const d1 = randomBytes(100)
  const req = writeReq(chainId, h.chain.chainVersion, chunkId, 0, d1, 5, 500)
  const a = await c.rpc.call<IOResult>(h.address, ServiceId.Storage, StorageMethod.write, req)
  const b = await c.rpc.call<IOResult>(h.address, ServiceId.Storage, StorageMethod.write, req)
  t.deepEqual(a, b)
  t.is(a.updateVer, 1, 'the retry was not applied twice')
  const old = writeReq(chainId, h.chain.chainVersion, chunkId, 0, d1, 4, 400)
  t.true(isStrataError(await t.throwsAsync(c.rpc.call(h.address, ServiceId.Storage, StorageMethod.write, old)), 'DUPLICATE_UPDATE'))
  const next = await c.rpc.call<IOResult>(h.address, ServiceId.Storage, StorageMethod.write, writeReq(chainId, h.chain.chainVersion, chunkId, 0, d1, 6, 600))
  t.is(next.updateVer, 2)
})

test.serial('uncommitted read: strict read sees CHUNK_NOT_COMMIT while the tail delays, relaxed read sees new data', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x55n, 1)
  const old = Buffer.alloc(4096, 1)
  await write(c, chainId, chunkId, 0, old, 1)
  const ri = await c.routing()
  const chain = ri.chains[chainId]!
  const tailNode = c.targetNode.get(chain.targets.at(-1)!.targetId)!
  await c.rpc.setFault(c.address(tailNode), { service: ServiceId.Storage, method: StorageMethod.update, kind: 'delay', delayMs: 1500, count: 1 })
  const fresh = Buffer.alloc(4096, 2)
  const pending = write(c, chainId, chunkId, 0, fresh, 2)
  await new Promise((r) => setTimeout(r, 400))
  const h = await head(c, chainId)
  const read = (allow: boolean) =>
    c.rpc.call<BatchReadRsp>(h.address, ServiceId.Storage, StorageMethod.batchRead, {
      ios: [{ chainId, chainVer: chain.chainVersion, chunkId, offset: 0, length: 4096 }],
      allowReadUncommitted: allow,
    })
  const strict = (await read(false)).results[0]!
  t.false(strict.ok)
  if (!strict.ok) t.is(strict.error.code, 'CHUNK_NOT_COMMIT')
  const relaxed = (await read(true)).results[0]!
  t.true(relaxed.ok)
  if (relaxed.ok) t.deepEqual(relaxed.data, fresh)
  await pending
  const after = (await read(false)).results[0]!
  t.true(after.ok)
  if (after.ok) t.deepEqual(after.data, fresh, 'never a mix: the new data after commit')
})

test.serial('a read with verifyChecksum finds a chunk file corrupted on disk; a plain read returns the bytes', async (t) => {
  const c = await startTestCluster(t)
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x5a5an, 0)
  const data = randomBytes(CHUNK)
  await write(c, chainId, chunkId, 0, data, 1)
  // flip one byte in every replica's chunk file (named <chunk id hex>.<tag> under the target's data dir)
  const files: string[] = []
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name)
      if (e.isDirectory()) walk(p)
      else if (e.name.startsWith(chunkId.toString('hex') + '.')) files.push(p)
    }
  }
  walk(c.dir)
  t.is(files.length, 3, 'one chunk file per replica')
  for (const f of files) {
    const fd = fs.openSync(f, 'r+')
    const b = Buffer.alloc(1)
    fs.readSync(fd, b, 0, 1, 100)
    b[0] = b[0]! ^ 0xff
    fs.writeSync(fd, b, 0, 1, 100)
    fs.closeSync(fd)
  }
  const h = await head(c, chainId)
  const read = (verifyChecksum: boolean) =>
    c.rpc.call<BatchReadRsp>(h.address, ServiceId.Storage, StorageMethod.batchRead, {
      ios: [{ chainId, chainVer: h.chain.chainVersion, chunkId, offset: 0, length: 512 }],
      verifyChecksum,
    })
  const plain = (await read(false)).results[0]!
  t.true(plain.ok)
  const verified = (await read(true)).results[0]!
  t.false(verified.ok)
  if (!verified.ok) t.is(verified.error.code, 'CHECKSUM_MISMATCH')
})
