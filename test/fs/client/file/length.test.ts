// Scenario 19 (ref/3fs.md §9) at the file-API level with two FileSystem
// instances (two clients): lengths become visible through periodic sync of
// length hints, exactly at fsync, and truncate/extend bump the truncate
// version. Also: USRBIO writes do not move the length until periodic sync or
// fsync, and a stale hint from before a truncate is not adopted.

import test from 'ava'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileChunkRange } from '../../../../fs/common/chunk-id.js'
import { createIor, createIov, prepIo, regFd, submitIos, waitForIos, deregFd } from '../../../../fs/client/index.js'
import { startFsCluster, patternBytes } from './helpers.js'

async function waitLength(get: () => Promise<number>, want: number, ms: number): Promise<number> {
  const end = Date.now() + ms
  let last = -1
  while (Date.now() < end) {
    last = await get()
    if (last === want) return Date.now()
    await sleep(50)
  }
  throw new Error(`length ${last}, expected ${want} within ${ms} ms`)
}

test.serial('client B sees A\'s unsynced length within the periodic sync interval, exactly after fsync', async (t) => {
  const c = await startFsCluster(t)
  const a = c.fs({ periodicSyncMs: 1000 })
  const b = c.fs({ periodicSyncMs: 1000 })
  const fh = await a.open('/len', 'w')
  const data = patternBytes(10_000, 2)
  const t0 = Date.now()
  await a.write(fh, data)
  // right after the write nothing is on meta (the bytes are still in A's buffer), unless a periodic round already ran
  const l0 = (await b.stat('/len')).file!.length
  if (Date.now() - t0 < 900) t.is(l0, 0)
  await waitLength(async () => (await b.stat('/len')).file!.length, 10_000, 15_000)
  // (waitLength fails if B never sees it: without periodic sync the length stays on A until close)
  t.log(`B saw 10000 after ${Date.now() - t0} ms`)
  // B reads the bytes
  const rb = await b.open('/len', 'r')
  t.deepEqual((await b.read(rb, 20_000, 0)).buffer, data)
  // more writes, then fsync: B sees the exact length at once
  await a.write(fh, Buffer.alloc(2345, 7))
  const st = await a.fsync(fh)
  t.is(st.file!.length, 12_345)
  t.is((await b.stat('/len')).file!.length, 12_345)
  // truncate to 100 from A: length 100, truncateVer + 1, chunks past the first gone
  const tv = st.file!.truncateVer
  const st2 = await a.ftruncate(fh, 100)
  t.is(st2.file!.length, 100)
  t.is(st2.file!.truncateVer, tv + 1)
  const sb = await b.stat('/len')
  t.is(sb.file!.length, 100)
  t.is(sb.file!.truncateVer, tv + 1)
  // extend to 200 000: zero-filled
  await a.ftruncate(fh, 200_000)
  t.is((await b.stat('/len')).file!.length, 200_000)
  const rb2 = await b.open('/len', 'r')
  const back = await b.read(rb2, 300_000, 0)
  t.is(back.bytesRead, 200_000)
  t.deepEqual(back.buffer.subarray(0, 100), data.subarray(0, 100))
  t.true(back.buffer.subarray(100).equals(Buffer.alloc(200_000 - 100)))
  await b.close(rb)
  await b.close(rb2)
  await a.close(fh)
  t.is((await b.stat('/len')).file!.length, 200_000)
})

test.serial('a hint written before a truncate is not adopted after it; close reports the exact length', async (t) => {
  const c = await startFsCluster(t)
  const a = c.fs({ periodicSyncMs: 0 })
  const b = c.fs({ periodicSyncMs: 0 })
  const fa = await a.open('/h', 'w')
  await a.write(fa, Buffer.alloc(50_000, 1))
  await a.fsync(fa)
  // B truncates the file to 10 behind A's back
  await b.truncate('/h', 10)
  // A writes 5 bytes at 1000 under the old truncate version, then the periodic sync reports them
  await a.write(fa, Buffer.from('hello'), 1000)
  await a.periodicSync()
  // the stale hint (1005 @ old version) must not be taken as is; meta asks storage instead
  const st = await b.stat('/h')
  t.true(st.file!.length === 10 || st.file!.length === 1005, `length ${st.file!.length}`)
  await a.close(fa)
  // close queried storage: the chunk holds data up to 1005
  t.is((await b.stat('/h')).file!.length, 1005)
  const bytes = await b.readFile('/h')
  t.is(bytes.length, 1005)
  t.deepEqual(bytes.subarray(0, 10), Buffer.alloc(10, 1))
  t.true(bytes.subarray(10, 1000).equals(Buffer.alloc(990)))
  t.is(bytes.subarray(1000).toString(), 'hello')
})

test.serial('USRBIO writes change the length only at periodic sync or fsync', async (t) => {
  const c = await startFsCluster(t)
  // periodic sync driven by hand, so "not yet" is not a race with the timer
  const a = c.fs({ periodicSyncMs: 0 })
  const b = c.fs({ periodicSyncMs: 0 })
  const fh = await a.open('/u', 'w')
  const fd = regFd(fh)
  const iov = createIov(1 << 20)
  patternBytes(1 << 20, 5).copy(iov.buf)
  const ior = createIor({ entries: 8, forRead: false })
  prepIo(ior, iov, false, 0, fd, 0, 1 << 20, 'w1')
  submitIos(ior)
  const [cqe] = await waitForIos(ior, 1, 1, 20_000)
  t.deepEqual(cqe && [cqe.userdata, cqe.result], ['w1', 1 << 20])
  // the data is on storage, the length is not on meta yet
  const stripe = await a.io.stripe(fh.layout)
  let chunks = 0
  for (const chain of new Set(stripe)) chunks += (await c.m.storage.queryLastChunk(chain, fileChunkRange(fh.inodeId))).totalNumChunks
  t.is(chunks, (1 << 20) / fh.layout.chunkSize)
  t.is((await b.stat('/u')).file!.length, 0)
  t.deepEqual(a.dirtyInodes(), [fh.inodeId])
  // a periodic sync round carries the hint
  await a.periodicSync()
  t.is((await b.stat('/u')).file!.length, 1 << 20)
  t.deepEqual(a.dirtyInodes(), [])
  // a second write, then fsync makes it visible at once
  prepIo(ior, iov, false, 0, fd, 1 << 20, 1 << 19, 'w2')
  submitIos(ior)
  t.is((await waitForIos(ior, 1, 1, 20_000))[0]!.result, 1 << 19)
  const st = await a.fsync(fh)
  t.is(st.file!.length, (1 << 20) + (1 << 19))
  t.is((await b.stat('/u')).file!.length, (1 << 20) + (1 << 19))
  // read back through a read ring on B
  const rfd = await regFd('/u', b)
  const riov = createIov(1 << 20)
  const rior = createIor({ entries: 4, forRead: true })
  prepIo(rior, riov, true, 0, rfd, (1 << 20) - 100, 200, 'r')
  submitIos(rior)
  t.is((await waitForIos(rior, 1, 1, 20_000))[0]!.result, 200)
  t.deepEqual(riov.buf.subarray(0, 100), iov.buf.subarray((1 << 20) - 100, 1 << 20))
  t.deepEqual(riov.buf.subarray(100, 200), iov.buf.subarray(0, 100))
  await deregFd(rfd)
  await deregFd(fd)
  await a.close(fh)
})
