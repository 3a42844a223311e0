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
  registeredFdCount,
  submitIos,
  waitForIos,
  EAGAIN,
  EINVAL,
  EBADF,
  EACCES,
  EIO,
  IOR_BATCH_SIZES_KEPT,
  type ChunkPiece,
  type FileHandle,
} from '../../../../fs/client/index.js'

/** A fake open file: every byte at offset o reads as (o % 251). */
function fakeHandle(opts: { delayMs?: number; readable?: boolean; writable?: boolean; length?: number; scatter?: boolean } = {}) {
  const reads: number[] = []
  const lists: number[] = []
  const fs = {
    counters: { bytesRead: 0, bytesWritten: 0 },
    io: {
      plan: async (_inode: unknown, off: number, len: number): Promise<ChunkPiece[]> => [
        { chunkIndex: 0, chainId: 1, chunkId: Buffer.alloc(16), offsetInChunk: off, length: len, fileOffset: off, bufOffset: 0 },
      ],
      readPieces: async (pieces: ChunkPiece[], _opts: unknown, into?: ReadonlyArray<Buffer | readonly Buffer[] | undefined>) => {
        reads.push(pieces.length)
        await sleep(opts.delayMs ?? 0)
        return pieces.map((p, k) => {
          const end = Math.min(p.fileOffset + p.length, opts.length ?? Infinity)
          const n = Math.max(0, end - p.fileOffset)
          const dest = into?.[k]
          if (Array.isArray(dest)) lists.push(dest.length)
          if (opts.scatter && Array.isArray(dest)) {
            // what StorageClient does with a scatter list: the bytes land across it, data stays empty
            let o = 0
            for (const b of dest) for (let i = 0; i < b.length && o < n; i++, o++) b[i] = (p.fileOffset + o) % 251
            return { ok: true, data: Buffer.alloc(0), placed: n, found: n > 0, commitVer: 1, updateVer: 1, commitChainVer: 1, targetId: 1 }
          }
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
    state: { wb: { empty: true }, behind: new Map(), inode: { type: 'File', file: { layout: { chunkSize: 1 << 20 } } }, knownLength: () => 0 },
    readable: opts.readable ?? true,
    writable: opts.writable ?? false,
    closed: false,
    close: async () => undefined,
  } as unknown as FileHandle
  return { handle, reads, lists }
}

for (const scatter of [false, true]) {
  test(`contiguous requests in scattered slots are one IO, each gets its own result (${scatter ? 'received in place' : 'copied from the reply'})`, async (t) => {
    const { handle, reads, lists } = fakeHandle({ length: 950, scatter })
    const fd = regFd(handle)
    const iov = createIov(1 << 16)
    const ior = createIor({ entries: 16, forRead: true, ioDepth: 0 })
    // file ranges [0,300) [300,600) [600,900) [900,1200) into slots in reverse order of the iov, one gap request apart
    const slots = [9000, 6000, 3000, 0]
    slots.forEach((at, i) => t.true(prepIo(ior, iov, true, at, fd, i * 300, 300, i) >= 0))
    t.true(prepIo(ior, iov, true, 12000, fd, 2000, 100, 'far') >= 0)
    iov.buf.fill(0xee, 0, 13000)
    submitIos(ior)
    const cqes = await waitForIos(ior, 16, 5, 2000)
    const res = new Map(cqes.map((c) => [c.userdata, c.result]))
    t.deepEqual([0, 1, 2, 3, 'far'].map((u) => res.get(u)), [300, 300, 300, 50, 0])
    // one range for the run, one for the far request
    t.deepEqual(reads, [2])
    t.deepEqual(lists, [4])
    for (let i = 0; i < 4; i++) {
      const n = [300, 300, 300, 50][i]!
      for (let j = 0; j < n; j++) if (iov.buf[slots[i]! + j] !== (i * 300 + j) % 251) return t.fail(`request ${i} byte ${j}`)
    }
    await deregFd(fd)
  })
}

test('a read completes as soon as its own IOs are in, not when the slowest request of its batch is', async (t) => {
  const { handle } = fakeHandle()
  // this file system reports each piece as it arrives; the piece at offset 10000 only once the test lets it
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const io = (handle as unknown as { fs: { io: Record<string, unknown> } }).fs.io
  io.readPieces = async (pieces: ChunkPiece[], o: { onResult?: (k: number, r: unknown) => void }) => {
    const rs = await Promise.all(
      pieces.map(async (p, k) => {
        await (p.fileOffset >= 10000 ? gate : sleep(5))
        const data = Buffer.alloc(p.length, 7)
        const r = { ok: true, data, found: true, commitVer: 1, updateVer: 1, commitChainVer: 1, targetId: 1 }
        o.onResult?.(k, r)
        return r
      }),
    )
    return rs
  }
  const fd = regFd(handle)
  const iov = createIov(1 << 16)
  const ior = createIor({ entries: 16, forRead: true, ioDepth: 2 })
  t.true(prepIo(ior, iov, true, 0, fd, 0, 100, 'fast') >= 0)
  t.true(prepIo(ior, iov, true, 1000, fd, 10000, 100, 'slow') >= 0)
  submitIos(ior)
  const first = await waitForIos(ior, 16, 1, 20_000)
  t.deepEqual(first.map((c) => [c.userdata, c.result]), [['fast', 100]])
  t.is(ior.stats.batches, 1, 'both were one batch')
  release()
  const second = await waitForIos(ior, 16, 1, 2000)
  t.deepEqual(second.map((c) => [c.userdata, c.result]), [['slow', 100]])
  await deregFd(fd)
})

// serial (so first, alone): it counts the process-wide registry
test.serial('registrations of handles closed without deregFd are dropped: as many held after 2N as after N', async (t) => {
  const iov = createIov(4096)
  const ior = createIor({ entries: 4, forRead: true })
  t.teardown(() => ior.destroy())
  const N = 3072
  const registerAndClose = () => {
    for (let i = 0; i < N; i++) {
      const { handle } = fakeHandle()
      regFd(handle)
      ;(handle as unknown as { closed: boolean }).closed = true
    }
  }
  const before = registeredFdCount()
  registerAndClose()
  const afterN = registeredFdCount()
  registerAndClose()
  t.is(registeredFdCount(), afterN)
  t.true(afterN - before <= 1024, `${afterN - before} registrations of closed handles held`)
  // a closed handle's registration answers as an unregistered fd, and goes
  const { handle } = fakeHandle()
  const fd = regFd(handle)
  ;(handle as unknown as { closed: boolean }).closed = true
  const n = registeredFdCount()
  t.is(prepIo(ior, iov, true, 0, fd, 0, 1), -EBADF)
  t.is(registeredFdCount(), n - 1)
})

test('a long-lived ring keeps a bounded window of batch sizes: as much after 2N batches as after N', async (t) => {
  const { handle } = fakeHandle()
  const fd = regFd(handle)
  t.teardown(() => deregFd(fd))
  const iov = createIov(4096)
  // ioDepth 1: every request is a batch of its own, 64 of them per round trip
  const ior = createIor({ entries: 64, forRead: true, ioDepth: 1 })
  t.teardown(() => ior.destroy())
  const N = 3 * IOR_BATCH_SIZES_KEPT
  const run = async (n: number) => {
    for (let i = 0; i < n; i += 64) {
      for (let k = 0; k < 64; k++) t.true(prepIo(ior, iov, true, k, fd, i + k, 1, k) >= 0)
      submitIos(ior)
      let got = 0
      while (got < 64) got += (await waitForIos(ior, 64, 64 - got)).length
    }
  }
  await run(N)
  const afterN = ior.stats.batchSizes.length
  await run(N)
  t.is(ior.stats.batches, 2 * N)
  t.is(ior.stats.batchSizes.length, afterN)
  t.true(afterN >= IOR_BATCH_SIZES_KEPT && afterN < 2 * IOR_BATCH_SIZES_KEPT, `${afterN} batch sizes kept`)
  t.deepEqual(new Set(ior.stats.batchSizes), new Set([1]))
})

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
  // four contiguous requests of one file are read as one range
  t.deepEqual(reads, [1])
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
  const t0 = performance.now()
  // short waits in a loop, as a consumer with a timeout would do
  while (got.length < 1000 && performance.now() - t0 < 20_000) got.push(...(await waitForIos(ior, 1000, 1, 200)))
  t.is(got.length, 1000)
  t.true(performance.now() - t0 >= 900, 'the tail waited for the idle period')
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
  const t0 = performance.now()
  submitIos(iorN)
  // two full batches of 8 (they do not wait for the timeout: the batch sizes below show it)
  const first = await waitForIos(iorN, 64, 16, 2000)
  t.is(first.length, 16)
  // the remaining 4 wait for the batching timeout, then go together
  const rest = await waitForIos(iorN, 64, 4, 2000)
  t.is(rest.length, 4)
  t.true(performance.now() - t0 >= 149, `short batch went after ${performance.now() - t0} ms`)
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

/** A fake writable file with 4 KiB chunks: records every writePieces call; chunks in `failChunks` fail with EIO. */
function fakeWriteHandle(failChunks: number[] = []) {
  const CHUNK = 4096
  const calls: Array<Array<{ chunkIndex: number; offsetInChunk: number; data: Buffer }>> = []
  const notes: Array<[number, number]> = []
  const fs = {
    counters: { bytesRead: 0, bytesWritten: 0 },
    io: {
      plan: async (_inode: unknown, off: number, len: number): Promise<ChunkPiece[]> => {
        const out: ChunkPiece[] = []
        for (let o = off; o < off + len; ) {
          const n = Math.min(off + len, (Math.floor(o / CHUNK) + 1) * CHUNK) - o
          out.push({ chunkIndex: Math.floor(o / CHUNK), chainId: 1, chunkId: Buffer.alloc(16), offsetInChunk: o % CHUNK, length: n, fileOffset: o, bufOffset: o - off })
          o += n
        }
        return out
      },
      writePieces: async (pieces: ChunkPiece[], sources: Buffer[]) => {
        calls.push(pieces.map((p, i) => ({ chunkIndex: p.chunkIndex, offsetInChunk: p.offsetInChunk, data: Buffer.from(sources[i]!) })))
        return pieces.map((p) => (failChunks.includes(p.chunkIndex) ? Object.assign(new Error('disk'), { code: 'IO_ERROR' }) : undefined))
      },
    },
    noteWrite: (_st: unknown, _tv: number, off: number, bytes: number) => void notes.push([off, bytes]),
  }
  const handle = {
    fs,
    state: { inode: { type: 'File', file: { layout: { chunkSize: CHUNK } } }, beginWrite: () => 1, behind: new Map(), wb: { empty: true } },
    readable: false,
    writable: true,
    closed: false,
    close: async () => undefined,
  } as unknown as FileHandle
  return { handle, calls, notes }
}

test('writes: contiguous requests of one batch go as whole-chunk pieces in file order, each request keeps its own result', async (t) => {
  const { handle, calls, notes } = fakeWriteHandle([1])
  const fd = regFd(handle)
  const iov = createIov(1 << 16)
  for (let i = 0; i < iov.buf.length; i++) iov.buf[i] = (i * 7) % 256
  const ior = createIor({ entries: 16, forRead: false, ioDepth: 9 })
  // eight 1 KiB requests covering file [0, 8 KiB), prepared last to first, from scattered iov places;
  // and one more that leaves a gap (file 9 KiB), which must stay a write of its own
  const bufOf = (k: number) => (7 - k) * 2048
  for (let k = 7; k >= 0; k--) t.true(prepIo(ior, iov, false, bufOf(k), fd, k * 1024, 1024, k) >= 0)
  t.true(prepIo(ior, iov, false, 30000, fd, 9 * 1024, 512, 'gap') >= 0)
  submitIos(ior)
  const cqes = await waitForIos(ior, 16, 9, 2000)
  const res = Object.fromEntries(cqes.map((c) => [String(c.userdata), c.result]))
  // chunk 1 (file 4–8 KiB) failed: exactly the requests inside it report EIO
  for (let k = 0; k < 4; k++) t.is(res[String(k)], 1024)
  for (let k = 4; k < 8; k++) t.is(res[String(k)], -EIO)
  t.is(res.gap, 512)
  const runs = calls.map((c) => c.map((p) => [p.chunkIndex, p.offsetInChunk, p.data.length])).sort((a, b) => a.length - b.length)
  t.deepEqual(runs, [[[2, 1024, 512]], [[0, 0, 4096], [1, 0, 4096]]])
  // the merged pieces carry each request's bytes at its file offset
  const merged = calls.find((c) => c.length === 2)!
  for (let k = 0; k < 8; k++) {
    const piece = merged[Math.floor(k / 4)]!.data
    t.deepEqual(piece.subarray((k % 4) * 1024, (k % 4 + 1) * 1024), iov.buf.subarray(bufOf(k), bufOf(k) + 1024))
  }
  // length hints per request: written ones with their size, failed ones as -1
  t.is(notes.length, 9)
  t.deepEqual(notes.filter(([, n]) => n === -1).map(([o]) => o).sort((a, b) => a - b), [4096, 5120, 6144, 7168])
  await deregFd(fd)
})
