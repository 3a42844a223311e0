// Scenario 15 (ref/3fs.md §9): a 64 MiB file with 64 KiB chunks striped over
// 2 chains and a 1 MiB hole in the middle (made by seeking past it), read at
// 2000 random offsets/lengths crossing chunk boundaries and the end of the
// file, compared with a local reference file; then 1000 reads through the
// USRBIO-shaped batch API with ioDepth 64.

import test from 'ava'
import fsp from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { createIor, createIov, deregFd, prepIo, regFd, submitIos, waitForIos, IOR_FORBID_READ_HOLES, EIO } from '../../../../fs/client/index.js'
import { startFsCluster, patternBytes, rng } from './helpers.js'

const MiB = 1024 * 1024
const SIZE = 64 * MiB
const HOLE_START = 31 * MiB + 12345
const HOLE_END = HOLE_START + MiB

test('64 MiB file with a hole: 2000 random reads and 1000 batch reads match the local reference', async (t) => {
  t.timeout(10 * 60_000)
  const c = await startFsCluster(t, { chunkSize: 65536, stripeSize: 2 })
  const fs = c.fs()
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'strata-ref-'))
  t.teardown(() => fsp.rm(dir, { recursive: true, force: true }))

  // the reference: same bytes written the same way into a sparse local file
  const before = patternBytes(HOLE_START, 11)
  const after = patternBytes(SIZE - HOLE_END, 12)
  const refPath = path.join(dir, 'ref')
  const ref = await fsp.open(refPath, 'w+')
  await ref.write(before, 0, before.length, 0)
  await ref.write(after, 0, after.length, HOLE_END)
  await ref.close()
  const reference = await fsp.readFile(refPath)
  t.is(reference.length, SIZE)

  const t0 = Date.now()
  const fh = await fs.open('/big', 'w', 0o644, { layout: { tableId: 1, tableVersion: 0, chunkSize: 65536, stripeSize: 2, chains: { type: 'Empty' } } })
  t.is(fh.layout.chunkSize, 65536)
  t.is(fh.layout.stripeSize, 2)
  // write in uneven pieces to go through the buffer, seek over the hole
  const w = rng(5)
  for (let off = 0; off < before.length; ) {
    const n = Math.min(before.length - off, 1 + Math.floor(w() * 3 * MiB))
    await fs.write(fh, before.subarray(off, off + n), off)
    off += n
  }
  for (let off = 0; off < after.length; ) {
    const n = Math.min(after.length - off, 1 + Math.floor(w() * 3 * MiB))
    await fs.write(fh, after.subarray(off, off + n), HOLE_END + off)
    off += n
  }
  await fs.close(fh)
  t.log(`wrote 63 MiB in ${Date.now() - t0} ms`)
  t.is((await fs.stat('/big')).file!.length, SIZE)

  // chunks inside the hole were never written
  const holeChunk = Math.floor(HOLE_START / 65536) + 2
  const st = await fs.stat('/big')
  const stripe = await fs.io.stripe(st.file!.layout)
  const { chunkIdOf } = await import('../../../../fs/common/chunk-id.js')
  t.is((await c.m.storage.read(stripe[holeChunk % 2]!, chunkIdOf(st.id, holeChunk), 0, 10)).length, 0)

  // 2000 random reads through the file API
  const r = await fs.open('/big', 'r')
  const g = rng(77)
  const t1 = Date.now()
  for (let i = 0; i < 2000; i++) {
    let off: number
    const kind = g()
    if (kind < 0.1) off = SIZE - Math.floor(g() * 200_000) // around and past EOF
    else if (kind < 0.2) off = HOLE_START - 70_000 + Math.floor(g() * (MiB + 140_000)) // around the hole
    else if (kind < 0.3) off = SIZE + Math.floor(g() * 1000) // beyond EOF
    else off = Math.floor(g() * SIZE)
    const len = 1 + Math.floor(g() * (g() < 0.5 ? 3 * 65536 : 4096))
    const got = await fs.read(r, len, off)
    const want = reference.subarray(Math.min(off, SIZE), Math.min(off + len, SIZE))
    if (got.bytesRead !== want.length || !got.buffer.equals(want)) {
      t.fail(`read ${i} [${off}, +${len}) returned ${got.bytesRead} bytes, expected ${want.length}`)
      break
    }
  }
  t.log(`2000 random reads in ${Date.now() - t1} ms`)
  await fs.close(r)

  // 1000 reads via the batch API, ioDepth 64
  const fd = await regFd('/big', fs)
  const iov = createIov(1000 * 200_000 > 256 * MiB ? 256 * MiB : 1000 * 200_000)
  const ior = createIor({ entries: 1024, forRead: true, ioDepth: 64 })
  const reqs: Array<{ off: number; len: number; bufOff: number }> = []
  let bufOff = 0
  for (let i = 0; i < 1000; i++) {
    const off = g() < 0.1 ? SIZE - Math.floor(g() * 100_000) : Math.floor(g() * SIZE)
    const len = 1 + Math.floor(g() * 150_000)
    reqs.push({ off, len, bufOff })
    t.is(prepIo(ior, iov, true, bufOff, fd, off, len, { i }), i)
    bufOff += len
  }
  const t2 = Date.now()
  submitIos(ior)
  const cqes = []
  while (cqes.length < 1000) cqes.push(...(await waitForIos(ior, 1000, 1, 30_000)))
  t.log(`1000 batch reads in ${Date.now() - t2} ms, batches ${ior.stats.batches}, max concurrent ${ior.stats.maxConcurrentBatches}`)
  t.is(cqes.length, 1000)
  const seen = new Set<number>()
  for (const cqe of cqes) {
    const i = (cqe.userdata as { i: number }).i
    t.false(seen.has(i))
    seen.add(i)
    t.is(cqe.index, i)
    const q = reqs[i]!
    const want = reference.subarray(Math.min(q.off, SIZE), Math.min(q.off + q.len, SIZE))
    if (cqe.result !== want.length || !iov.buf.subarray(q.bufOff, q.bufOff + cqe.result).equals(want)) {
      t.fail(`batch read ${i} [${q.off}, +${q.len}) result ${cqe.result}, expected ${want.length}`)
      break
    }
  }
  t.is(seen.size, 1000)
  t.deepEqual(ior.stats.batchSizes.slice(0, 15), Array(15).fill(64))

  // FORBID_READ_HOLES: a read across the hole fails, one inside data succeeds
  const strict = createIor({ entries: 4, forRead: true, flags: IOR_FORBID_READ_HOLES })
  prepIo(strict, iov, true, 0, fd, HOLE_START - 10, 2 * MiB, 'across')
  prepIo(strict, iov, true, 0, fd, 0, 100_000, 'data')
  submitIos(strict)
  const res = Object.fromEntries((await waitForIos(strict, 4, 2, 30_000)).map((x) => [x.userdata, x.result]))
  t.deepEqual(res, { across: -EIO, data: 100_000 })
  await deregFd(fd)
})
