// The USRBIO ring without a cluster: io_depth batching, ring-full, argument
// checks, completion bookkeeping. Files are fakes whose reads answer from a
// pattern after a controllable delay.

import test from 'ava'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  createIor,
  createIov,
  deregFd,
  prepIo,
  regFd,
  submitIos,
  waitForIos,
  EAGAIN,
  EINVAL,
  EBADF,
  EACCES,
  type ChunkPiece,
  type FileHandle,
} from '../../../../fs/client/index.js'

/** A fake open file: every byte at offset o reads as (o % 251). */
function fakeHandle(opts: { delayMs?: number; readable?: boolean; writable?: boolean; length?: number } = {}) {
  const reads: number[] = []
  const fs = {
    counters: { bytesRead: 0, bytesWritten: 0 },
    io: {
      plan: async (_inode: unknown, off: number, len: number): Promise<ChunkPiece[]> => [
        { chunkIndex: 0, chainId: 1, chunkId: Buffer.alloc(16), offsetInChunk: off, length: len, fileOffset: off, bufOffset: 0 },
      ],
      readPieces: async (pieces: ChunkPiece[]) => {
        reads.push(pieces.length)
        await sleep(opts.delayMs ?? 0)
        return pieces.map((p) => {
          const end = Math.min(p.fileOffset + p.length, opts.length ?? Infinity)
          const n = Math.max(0, end - p.fileOffset)
          const data = Buffer.alloc(n)
          for (let i = 0; i < n; i++) data[i] = (p.fileOffset + i) % 251
          return { ok: true, data, found: n > 0, commitVer: 1, updateVer: 1, commitChainVer: 1, targetId: 1 }
        })
      },
    },
    flushLocked: async () => undefined,
  }
  const handle = {
    fs,
    state: { wb: { empty: true }, behind: new Map(), inode: {}, knownLength: () => 0 },
    readable: opts.readable ?? true,
    writable: opts.writable ?? false,
    closed: false,
    close: async () => undefined,
  } as unknown as FileHandle
  return { handle, reads }
}

test('ioDepth > 0: a batch starts only with exactly ioDepth requests queued', async (t) => {
  const { handle, reads } = fakeHandle()
  const fd = regFd(handle)
  const iov = createIov(1 << 16)
  const ior = createIor({ entries: 16, forRead: true, ioDepth: 4 })
  for (let i = 0; i < 3; i++) t.true(prepIo(ior, iov, true, i * 100, fd, i * 100, 100, i) >= 0)
  submitIos(ior)
  t.deepEqual(await waitForIos(ior, 16, 1, 100), [])
  t.deepEqual(reads, [])
  t.is(ior.queuedCount, 3)
  t.true(prepIo(ior, iov, true, 300, fd, 300, 100, 3) >= 0)
  submitIos(ior)
  const cqes = await waitForIos(ior, 16, 4, 2000)
  t.is(cqes.length, 4)
  t.deepEqual(cqes.map((c) => c.userdata).sort(), [0, 1, 2, 3])
  for (const c of cqes) t.is(c.result, 100)
  t.deepEqual(reads, [4])
  t.deepEqual(ior.stats.batchSizes, [4])
  // data landed in the iov at its buffer offsets
  for (let i = 0; i < 400; i++) t.is(iov.buf[i], i % 251)
  await deregFd(fd)
})

test('ioDepth > 0: 1000 requests in batches of 64; the short tail goes once the ring sits idle with a waiter', async (t) => {
  const { handle, reads } = fakeHandle({ delayMs: 5 })
  const fd = regFd(handle)
  const iov = createIov(1000 * 64)
  const ior = createIor({ entries: 1024, forRead: true, ioDepth: 64 })
  for (let i = 0; i < 1000; i++) t.true(prepIo(ior, iov, true, i * 64, fd, i * 7, 64, { i }) >= 0)
  submitIos(ior)
  const got = []
  const t0 = Date.now()
  // short waits in a loop, as a consumer with a timeout would do
  while (got.length < 1000 && Date.now() - t0 < 20_000) got.push(...(await waitForIos(ior, 1000, 1, 200)))
  t.is(got.length, 1000)
  t.true(Date.now() - t0 >= 900, 'the tail waited for the idle period')
  const seen = new Set<number>()
  for (const c of got) {
    const i = (c.userdata as { i: number }).i
    seen.add(i)
    t.is(c.result, 64)
  }
  t.is(seen.size, 1000)
  t.deepEqual(ior.stats.batchSizes.slice(0, 15), Array(15).fill(64))
  t.deepEqual(ior.stats.batchSizes.slice(15), [40])
  t.true(ior.stats.maxConcurrentBatches > 1)
  t.is(reads.length, 16)

  // strict 3FS behaviour on request: the tail never runs
  const strict = createIor({ entries: 128, forRead: true, ioDepth: 64, shortBatchAfterMs: Infinity })
  for (let i = 0; i < 70; i++) prepIo(strict, iov, true, 0, fd, 0, 8, i)
  submitIos(strict)
  t.is((await waitForIos(strict, 128, 70, 1500)).length, 64)
  t.is(strict.queuedCount, 6)
  // and with the default, a waiter without timeout gets the tail after the idle period
  const lazy = createIor({ entries: 128, forRead: true, ioDepth: 64, shortBatchAfterMs: 100 })
  for (let i = 0; i < 10; i++) prepIo(lazy, iov, true, 0, fd, 0, 8, i)
  submitIos(lazy)
  t.is((await waitForIos(lazy, 128, 10)).length, 10)
  t.deepEqual(lazy.stats.batchSizes, [10])
})

test('ioDepth = 0: everything queued goes at once; ioDepth < 0: up to -ioDepth with timeout batching', async (t) => {
  const { handle } = fakeHandle()
  const fd = regFd(handle)
  const iov = createIov(1 << 16)
  const ior0 = createIor({ entries: 64, forRead: true, ioDepth: 0 })
  for (let i = 0; i < 10; i++) prepIo(ior0, iov, true, i, fd, i, 1, i)
  submitIos(ior0)
  t.is((await waitForIos(ior0, 64, 10, 2000)).length, 10)
  t.deepEqual(ior0.stats.batchSizes, [10])

  const iorN = createIor({ entries: 64, forRead: true, ioDepth: -8, timeoutMs: 150 })
  for (let i = 0; i < 20; i++) prepIo(iorN, iov, true, i, fd, i, 1, i)
  const t0 = Date.now()
  submitIos(iorN)
  // two full batches of 8 right away
  const first = await waitForIos(iorN, 64, 16, 2000)
  t.is(first.length, 16)
  t.true(Date.now() - t0 < 140)
  // the remaining 4 wait for the batching timeout, then go together
  const rest = await waitForIos(iorN, 64, 4, 2000)
  t.is(rest.length, 4)
  t.true(Date.now() - t0 >= 140, `short batch went after ${Date.now() - t0} ms`)
  t.deepEqual(iorN.stats.batchSizes, [8, 8, 4])
})

test('prepIo: ring full → -EAGAIN until completions are reaped; argument and access checks', async (t) => {
  const { handle } = fakeHandle()
  const fd = regFd(handle)
  const iov = createIov(4096)
  const ior = createIor({ entries: 4, forRead: true })
  for (let i = 0; i < 4; i++) t.true(prepIo(ior, iov, true, 0, fd, 0, 10, i) >= 0)
  t.is(prepIo(ior, iov, true, 0, fd, 0, 10, 5), -EAGAIN)
  submitIos(ior)
  await sleep(50)
  // completed but not reaped: still full
  t.is(prepIo(ior, iov, true, 0, fd, 0, 10, 5), -EAGAIN)
  const two = await waitForIos(ior, 2, 2, 1000)
  t.is(two.length, 2)
  t.true(prepIo(ior, iov, true, 0, fd, 0, 10, 6) >= 0)
  t.is((await waitForIos(ior, 10, 3, 1000)).length, 3)
  // bad arguments
  t.is(prepIo(ior, iov, false, 0, fd, 0, 10), -EINVAL)
  t.is(prepIo(ior, iov, true, 4000, fd, 0, 200), -EINVAL)
  t.is(prepIo(ior, iov, true, 0, fd, 0, 0), -EINVAL)
  t.is(prepIo(ior, iov, true, 0, 12345, 0, 10), -EBADF)
  const wior = createIor({ entries: 4, forRead: false })
  t.is(prepIo(wior, iov, false, 0, fd, 0, 10), -EACCES)
  // reads past the end are short, like read(2)
  const { handle: h2 } = fakeHandle({ length: 105 })
  const fd2 = regFd(h2)
  prepIo(ior, iov, true, 0, fd2, 100, 10, 'eof')
  prepIo(ior, iov, true, 0, fd2, 200, 10, 'past')
  submitIos(ior)
  const cq = await waitForIos(ior, 4, 2, 1000)
  t.deepEqual(Object.fromEntries(cq.map((c) => [c.userdata, c.result])), { eof: 5, past: 0 })
  t.throws(() => createIor({ entries: 4, forRead: true, ioDepth: 8 }))
})
