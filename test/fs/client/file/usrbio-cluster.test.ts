// The USRBIO-shaped batch API against a real cluster, case by case against
// 3FS's hf3fs_usrbio semantics: lengths and offsets, holes and the end of
// the file, writes that extend a file and its length after fsync/close (also
// with writes still in flight), fd registration rules, rings destroyed under
// load, waitForIos's min/max/timeout, concurrent waiters, bad arguments.

import test from 'ava'
import os from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  createIor,
  createIov,
  deregFd,
  destroyIor,
  prepIo,
  regFd,
  submitIos,
  waitForIos,
  wrapIov,
  EACCES,
  EBADF,
  EINVAL,
  IOR_FORBID_READ_HOLES,
  maxFileSize,
  type FileSystem,
  type Ior,
} from '../../../../fs/client/index.js'
import { useSharedMetaCluster } from '../../../helpers/meta-cluster.js'
import { FileSystem as Fs } from '../../../../fs/client/index.js'
import { patternBytes } from './helpers.js'

const CHUNK = 64 * 1024
const EFBIG = os.constants.errno.EFBIG
let fs: FileSystem
useSharedMetaCluster(test, { chunkSize: CHUNK }, (m) => {
  fs = new Fs({ mgmtdAddresses: [m.c.mgmtdAddress], periodicSyncMs: 60_000, routingRefreshMs: 200 })
})
test.after.always(async () => {
  await fs?.shutdown().catch(() => undefined)
})

/** Runs every prepared request of `ior` and returns results by userdata. */
async function reap(ior: Ior, n: number): Promise<Map<unknown, number>> {
  submitIos(ior)
  const got = new Map<unknown, number>()
  while (got.size < n) {
    const cqes = await waitForIos(ior, 64, 1, 20_000)
    if (cqes.length === 0) throw new Error(`only ${got.size} of ${n} completions`)
    for (const c of cqes) got.set(c.userdata, c.result)
  }
  return got
}

test.serial('reads: short at the end of the file, 0 past it, holes as zeros (or -EIO with FORBID_READ_HOLES)', async (t) => {
  const data = patternBytes(3 * CHUNK + 100, 1)
  const fh = await fs.open('/r', 'w')
  await fs.write(fh, data.subarray(0, CHUNK), 0)
  // chunk 1 is a hole
  await fs.write(fh, data.subarray(2 * CHUNK), 2 * CHUNK)
  await fs.close(fh)
  const fd = await regFd('/r', fs)
  const iov = createIov(8 * CHUNK)
  iov.buf.fill(0xee)
  const ior = createIor({ entries: 16, forRead: true })
  t.true(prepIo(ior, iov, true, 0, fd, CHUNK - 10, 20, 'into-hole') >= 0)
  t.true(prepIo(ior, iov, true, CHUNK, fd, 3 * CHUNK + 50, 200, 'eof') >= 0)
  t.true(prepIo(ior, iov, true, 2 * CHUNK, fd, 3 * CHUNK + 100, 10, 'at-eof') >= 0)
  t.true(prepIo(ior, iov, true, 3 * CHUNK, fd, 10 * CHUNK, 10, 'past') >= 0)
  t.true(prepIo(ior, iov, true, 4 * CHUNK, fd, 0, 3 * CHUNK + 100, 'all') >= 0)
  const r = await reap(ior, 5)
  t.deepEqual(Object.fromEntries(r), { 'into-hole': 20, eof: 50, 'at-eof': 0, past: 0, all: 3 * CHUNK + 100 })
  t.deepEqual(iov.buf.subarray(0, 10), data.subarray(CHUNK - 10, CHUNK))
  t.deepEqual(iov.buf.subarray(10, 20), Buffer.alloc(10))
  t.deepEqual(iov.buf.subarray(CHUNK, CHUNK + 50), data.subarray(3 * CHUNK + 50))
  // past the result nothing of the iov was touched
  t.is(iov.buf[CHUNK + 50], 0xee)
  const whole = Buffer.concat([data.subarray(0, CHUNK), Buffer.alloc(CHUNK), data.subarray(2 * CHUNK)])
  t.deepEqual(iov.buf.subarray(4 * CHUNK, 7 * CHUNK + 100), whole)

  const strict = createIor({ entries: 4, forRead: true, flags: IOR_FORBID_READ_HOLES })
  t.true(prepIo(strict, iov, true, 0, fd, CHUNK - 10, 20, 'hole') >= 0)
  t.true(prepIo(strict, iov, true, 0, fd, 0, 100, 'data') >= 0)
  const s = await reap(strict, 2)
  t.true(s.get('hole')! < 0)
  t.is(s.get('data'), 100)
  await deregFd(fd)
})

test.serial('prepIo argument checks: zero length, a buffer crossing the iov end or outside it, a write on a read ring, a read-only fd on a write ring', async (t) => {
  await fs.writeFile('/a', 'x')
  const rfd = await regFd('/a', fs)
  const iov = createIov(4096)
  const ior = createIor({ entries: 4, forRead: true })
  t.is(prepIo(ior, iov, true, 0, rfd, 0, 0), -EINVAL)
  t.is(prepIo(ior, iov, true, 4000, rfd, 0, 97), -EINVAL)
  t.is(prepIo(ior, iov, true, 4096, rfd, 0, 1), -EINVAL)
  t.is(prepIo(ior, iov, true, -1, rfd, 0, 1), -EINVAL)
  t.is(prepIo(ior, iov, true, 0, rfd, -1, 1), -EINVAL)
  t.is(prepIo(ior, iov, false, 0, rfd, 0, 1), -EINVAL)
  const wior = createIor({ entries: 4, forRead: false })
  t.is(prepIo(wior, iov, false, 0, rfd, 0, 1), -EACCES)
  t.is(prepIo(wior, iov, true, 0, rfd, 0, 1), -EINVAL)
  t.is(prepIo(ior, iov, true, 0, 999_999, 0, 1), -EBADF)
  // nothing was queued by the refused calls
  t.is(ior.queuedCount + wior.queuedCount, 0)
  await deregFd(rfd)
  // a deregistered fd
  t.is(prepIo(ior, iov, true, 0, rfd, 0, 1), -EBADF)
})

test.serial('writes that extend a file: the length after fsync, and after deregFd closes an owned fd with writes still in flight', async (t) => {
  const fd = await regFd('/w', fs, 'w')
  const iov = createIov(4 * CHUNK)
  patternBytes(4 * CHUNK, 3).copy(iov.buf)
  const ior = createIor({ entries: 8, forRead: false })
  t.true(prepIo(ior, iov, false, 0, fd, 0, CHUNK, 'a') >= 0)
  const r = await reap(ior, 1)
  t.is(r.get('a'), CHUNK)
  t.is((await fs.fsync(fd.handle)).file!.length, CHUNK)
  // a write past the end, then the owner deregisters at once: the close waits for the write and reports its length
  t.true(prepIo(ior, iov, false, CHUNK, fd, 3 * CHUNK, 2 * CHUNK, 'b') >= 0)
  submitIos(ior)
  await deregFd(fd)
  const [c] = await waitForIos(ior, 1, 1, 20_000)
  t.is(c?.result, 2 * CHUNK)
  t.is((await fs.stat('/w')).file!.length, 5 * CHUNK)
  t.deepEqual((await fs.readFile('/w')).subarray(3 * CHUNK), iov.buf.subarray(CHUNK, 3 * CHUNK))
})

test.serial('an open handle of a removed file still reads and writes through its fd; a closed handle is -EBADF at prepIo', async (t) => {
  await fs.writeFile('/gone', patternBytes(1000, 4))
  const fh = await fs.open('/gone', 'r+')
  const fd = regFd(fh)
  await fs.unlink('/gone')
  const iov = createIov(4096)
  const rior = createIor({ entries: 4, forRead: true })
  t.true(prepIo(rior, iov, true, 0, fd, 0, 1000, 'r') >= 0)
  t.is((await reap(rior, 1)).get('r'), 1000)
  t.deepEqual(iov.buf.subarray(0, 1000), patternBytes(1000, 4))
  const wior = createIor({ entries: 4, forRead: false })
  t.true(prepIo(wior, iov, false, 0, fd, 1000, 500, 'w') >= 0)
  t.is((await reap(wior, 1)).get('w'), 500)
  await fh.close()
  t.is(prepIo(rior, iov, true, 0, fd, 0, 10), -EBADF)
  t.is(prepIo(wior, iov, false, 0, fd, 0, 10), -EBADF)
  await deregFd(fd)
})

test.serial('the same handle registered twice is refused, as 3FS refuses an fd registered twice', async (t) => {
  await fs.writeFile('/twice', 'x')
  const fh = await fs.open('/twice', 'r')
  const fd = regFd(fh)
  const err = t.throws(() => regFd(fh))
  t.is((err as { code?: string }).code, 'INVALID_ARGUMENT')
  await deregFd(fd)
  // once deregistered it can be registered again
  const again = regFd(fh)
  await deregFd(again)
  await fh.close()
})

test.serial('waitForIos: timeout 0 returns what is there at once; a timeout that expires returns the results so far; maxResults caps, minResults > maxResults is maxResults', async (t) => {
  await fs.writeFile('/wait', patternBytes(8192, 5))
  const fd = await regFd('/wait', fs)
  const iov = createIov(8192)
  const ior = createIor({ entries: 8, forRead: true, ioDepth: 4, shortBatchAfterMs: Infinity })
  t.deepEqual(await waitForIos(ior, 8, 1, 0), [])
  // 5 requests, ioDepth 4: four run, the fifth never does (3FS)
  for (let i = 0; i < 5; i++) t.true(prepIo(ior, iov, true, i * 1000, fd, i * 1000, 1000, i) >= 0)
  submitIos(ior)
  const got = await waitForIos(ior, 8, 5, 1500)
  t.is(got.length, 4, 'the expired timeout returned the four that completed')
  t.deepEqual(got.map((c) => c.result), [1000, 1000, 1000, 1000])
  t.deepEqual(await waitForIos(ior, 8, 1, 0), [])
  // top it up to a batch: min 10 > max 2 waits for 2
  for (let i = 5; i < 8; i++) t.true(prepIo(ior, iov, true, i * 1000, fd, i * 1000, 1000, i) >= 0)
  submitIos(ior)
  t.is((await waitForIos(ior, 2, 10, 20_000)).length, 2)
  t.is((await waitForIos(ior, 8, 2, 20_000)).length, 2)
  // bad arguments are INVALID_ARGUMENT, not a hang or a busy loop
  for (const [max, min, to] of [[0, 1, 0], [1.5, 1, 0], [4, Number.NaN, 0], [4, 1, Number.NaN], [4, 1, 'x']] as Array<[number, number, number]>) {
    const e = await t.throwsAsync(waitForIos(ior, max, min, to), undefined, `${max} ${min} ${to}`)
    t.is((e as { code?: string }).code, 'INVALID_ARGUMENT', `${max} ${min} ${to}`)
  }
  await deregFd(fd)
})

test.serial('many concurrent waiters: every completion reaped exactly once, userdata round trip', async (t) => {
  await fs.writeFile('/many', patternBytes(256 * 100, 6))
  const fd = await regFd('/many', fs)
  const iov = createIov(256 * 100)
  const ior = createIor({ entries: 100, forRead: true, ioDepth: -7 })
  const tokens = Array.from({ length: 100 }, (_, i) => ({ i }))
  const waiters = Array.from({ length: 10 }, async () => {
    const mine = []
    while (mine.length < 10) mine.push(...(await waitForIos(ior, 10 - mine.length, 1, 20_000)))
    return mine
  })
  for (let i = 0; i < 100; i++) t.is(prepIo(ior, iov, true, i * 256, fd, (99 - i) * 256, 256, tokens[i]), i)
  submitIos(ior)
  const all = (await Promise.all(waiters)).flat()
  t.is(all.length, 100)
  t.is(new Set(all.map((c) => c.index)).size, 100)
  for (const c of all) {
    t.is(c.userdata, tokens[c.index])
    t.is(c.result, 256)
  }
  t.deepEqual(iov.buf, Buffer.concat(Array.from({ length: 100 }, (_, i) => patternBytes(256 * 100, 6).subarray((99 - i) * 256, (100 - i) * 256))))
  await deregFd(fd)
})

test.serial('a destroyed ring: waiters return, prepIo and submitIos are -EINVAL, waitForIos is CLOSED; IOs in flight still finish', async (t) => {
  await fs.writeFile('/d', patternBytes(CHUNK, 7))
  const fd = await regFd('/d', fs)
  const iov = createIov(CHUNK)
  const ior = createIor({ entries: 8, forRead: true })
  const waiting = waitForIos(ior, 8, 8)
  t.true(prepIo(ior, iov, true, 0, fd, 0, CHUNK, 'x') >= 0)
  submitIos(ior)
  destroyIor(ior)
  const e = await t.throwsAsync(waiting)
  t.is((e as { code?: string }).code, 'CLOSED')
  t.is(prepIo(ior, iov, true, 0, fd, 0, 1), -EINVAL)
  t.is(submitIos(ior), -EINVAL)
  const e2 = await t.throwsAsync(waitForIos(ior, 1, 0, 0))
  t.is((e2 as { code?: string }).code, 'CLOSED')
  // the read that was in flight still lands in the iov
  const until = Date.now() + 20_000
  while (ior.inFlight > 0 && Date.now() < until) await sleep(20)
  t.is(ior.inFlight, 0)
  t.deepEqual(iov.buf, patternBytes(CHUNK, 7))
  await deregFd(fd)
})

test.serial('bad arguments to the ring calls are stable errors, not crashes or hangs', async (t) => {
  const iov = createIov(16)
  const bad = [undefined, null, {}, 'ior'] as unknown as Ior[]
  for (const b of bad) {
    t.is(prepIo(b, iov, true, 0, 0, 0, 1), -EINVAL)
    t.is(submitIos(b), -EINVAL)
    const e = await t.throwsAsync(waitForIos(b, 1, 1, 0))
    t.is((e as { code?: string }).code, 'INVALID_ARGUMENT')
  }
  for (const o of [{ maxJobs: 0 }, { maxJobs: Number.NaN }, { maxJobs: 1.5 }, { timeoutMs: Number.NaN }, { shortBatchAfterMs: -1 }]) {
    const e = t.throws(() => createIor({ entries: 4, forRead: true, ...o }), undefined, JSON.stringify(o))
    t.is((e as { code?: string }).code, 'INVALID_ARGUMENT', JSON.stringify(o))
  }
  // a huge ring costs nothing until used
  const big = createIor({ entries: 2 ** 31 - 1, forRead: true })
  t.is(big.entries, 2 ** 31 - 1)
  const e = t.throws(() => createIor({ entries: 2 ** 31, forRead: true }))
  t.is((e as { code?: string }).code, 'INVALID_ARGUMENT')
})

test.serial('a read ring, stat and fsync are not held back by a write ring that keeps writing the same file', async (t) => {
  await fs.writeFile('/busy', patternBytes(CHUNK, 8))
  const wfd = await regFd('/busy', fs, 'r+')
  const rfd = await regFd('/busy', fs)
  const wiov = createIov(4096)
  const riov = createIov(CHUNK)
  // batches of one: each write is in flight on its own
  const wior = createIor({ entries: 4, forRead: false, ioDepth: 1 })
  const rior = createIor({ entries: 4, forRead: true })
  // the writer always has writes in flight (apart, far from what is read), up to 400 writes
  let writes = 0
  let readerDone = false
  const at = (n: number) => CHUNK + (n % 16) * 8192
  const writer = (async () => {
    for (let i = 0; i < 4; i++) prepIo(wior, wiov, false, 0, wfd, at(i), 4096, i)
    submitIos(wior)
    let next = 4
    while (!readerDone && writes < 400) {
      const cqes = await waitForIos(wior, 4, 1, 20_000)
      for (const c of cqes) {
        t.is(c.result, 4096)
        writes++
        prepIo(wior, wiov, false, 0, wfd, at(next++), 4096, next)
      }
      submitIos(wior)
    }
    await waitForIos(wior, 4, 4, 20_000)
  })()
  // wait for the writer to be going, then read
  while (writes < 10) await sleep(5)
  t.true(prepIo(rior, riov, true, 0, rfd, 0, CHUNK, 'r') >= 0)
  submitIos(rior)
  const [c] = await waitForIos(rior, 1, 1, 20_000)
  t.is(c?.result, CHUNK)
  t.true(writes < 400, `the read finished only when the writer stopped (${writes} writes)`)
  // stat (which syncs a dirty file first) and fsync wait for the writes in flight when they start, not for the writer to stop
  t.true((await fs.stat('/busy')).file!.length >= CHUNK)
  t.true(writes < 400, `stat returned only when the writer stopped (${writes} writes)`)
  t.true((await fs.fsync(wfd.handle)).file!.length > CHUNK)
  t.true(writes < 400, `fsync returned only when the writer stopped (${writes} writes)`)
  readerDone = true
  await writer
  t.deepEqual(riov.buf, patternBytes(CHUNK, 8))
  await deregFd(wfd)
  await deregFd(rfd)
})

test.serial('iovs: a size beyond the largest Buffer and memory that is not bytes are INVALID_ARGUMENT; a forged iov larger than its memory is -EINVAL', async (t) => {
  for (const size of [0, -1, 1.5, 2 ** 33]) {
    const e = t.throws(() => createIov(size), undefined, String(size))
    t.is((e as { code?: string }).code, 'INVALID_ARGUMENT', String(size))
  }
  const e = t.throws(() => wrapIov('abc' as unknown as Uint8Array))
  t.is((e as { code?: string }).code, 'INVALID_ARGUMENT')
  await fs.writeFile('/f', 'x'.repeat(100))
  const fd = await regFd('/f', fs)
  const ior = createIor({ entries: 4, forRead: true })
  const forged = { ...wrapIov(new Uint8Array(16)), size: 1 << 20 }
  t.is(prepIo(ior, forged, true, 8, fd, 0, 100), -EINVAL)
  await deregFd(fd)
})

test.serial('a ring write after buffered write() bytes of the same range wins, as the later write', async (t) => {
  const fh = await fs.open('/order', 'w')
  await fs.write(fh, Buffer.alloc(100, 0x41), 0)
  const fd = regFd(fh)
  const iov = createIov(100)
  iov.buf.fill(0x42)
  const ior = createIor({ entries: 2, forRead: false })
  t.true(prepIo(ior, iov, false, 0, fd, 0, 100, 'b') >= 0)
  t.is((await reap(ior, 1)).get('b'), 100)
  await deregFd(fd)
  await fs.close(fh)
  t.deepEqual(await fs.readFile('/order'), Buffer.alloc(100, 0x42))
})

test.serial('ioDepth < 0 larger than the ring is a cap that is never reached (3FS takes it), > 0 is refused (no batch could ever start)', async (t) => {
  await fs.writeFile('/neg', patternBytes(1000, 9))
  const fd = await regFd('/neg', fs)
  const iov = createIov(1000)
  const ior = createIor({ entries: 4, forRead: true, ioDepth: -100 })
  for (let i = 0; i < 4; i++) t.true(prepIo(ior, iov, true, i * 250, fd, i * 250, 250, i) >= 0)
  const r = await reap(ior, 4)
  t.deepEqual([...r.values()], [250, 250, 250, 250])
  t.deepEqual(iov.buf, patternBytes(1000, 9))
  const e = t.throws(() => createIor({ entries: 4, forRead: true, ioDepth: 5 }))
  t.is((e as { code?: string }).code, 'INVALID_ARGUMENT')
  await deregFd(fd)
})

test.serial('the maximum file size: a ring write across it is short, one at it EFBIG, as write(2); reads out there are 0', async (t) => {
  const max = maxFileSize(CHUNK)
  const fd = await regFd('/huge', fs, 'w+')
  const iov = createIov(100)
  const wior = createIor({ entries: 4, forRead: false })
  t.true(prepIo(wior, iov, false, 0, fd, max - 10, 100, 'across') >= 0)
  t.true(prepIo(wior, iov, false, 0, fd, max, 100, 'at') >= 0)
  t.true(prepIo(wior, iov, false, 0, fd, Number.MAX_SAFE_INTEGER - 50, 100, 'unsafe') >= 0)
  const w = await reap(wior, 3)
  t.deepEqual(Object.fromEntries(w), { across: 10, at: -EFBIG, unsafe: -EFBIG })
  const rior = createIor({ entries: 4, forRead: true })
  t.true(prepIo(rior, iov, true, 0, fd, max + 1000, 100, 'past') >= 0)
  t.true(prepIo(rior, iov, true, 0, fd, Number.MAX_SAFE_INTEGER - 50, 100, 'unsafe') >= 0)
  const r = await reap(rior, 2)
  t.deepEqual(Object.fromEntries(r), { past: 0, unsafe: 0 })
  await deregFd(fd)
  t.is((await fs.stat('/huge')).file!.length, max)
})

test.serial('regFd(path) without a FileSystem rejects its promise with INVALID_ARGUMENT (it threw synchronously)', async (t) => {
  let p: Promise<unknown> | undefined
  t.notThrows(() => {
    p = regFd('/x', undefined as unknown as FileSystem)
  })
  const e = await t.throwsAsync(p!)
  t.is((e as { code?: string }).code, 'INVALID_ARGUMENT')
  const e2 = await t.throwsAsync(regFd('/x', {} as FileSystem))
  t.is((e2 as { code?: string }).code, 'INVALID_ARGUMENT')
})
