// The per-inode write buffer and the length-hint bookkeeping, with a
// recording fake in place of storage.

import test from 'ava'
import { randomBytes } from 'node:crypto'
import { WriteBuffer, bufferedWrite, InodeState, mergeHint, Mutex, MAX_CHUNK_WRITE_BUFFER } from '../../../../fs/client/index.js'
import type { Inode } from '../../../../fs/meta/protocol.js'

function recorder() {
  const flushes: Array<{ off: number; data: Buffer }> = []
  return {
    flushes,
    flush: async (off: number, data: Buffer) => {
      flushes.push({ off, data: Buffer.from(data) })
    },
  }
}

/** Applies flushes to a model file. */
function apply(flushes: Array<{ off: number; data: Buffer }>, size: number): Buffer {
  const f = Buffer.alloc(size)
  for (const { off, data } of flushes) data.copy(f, off)
  return f
}

test('contiguous small writes coalesce into one flush when the buffer fills', async (t) => {
  const wb = new WriteBuffer(1024)
  const r = recorder()
  for (let i = 0; i < 16; i++) await bufferedWrite(wb, i * 100, Buffer.alloc(100, i), r.flush)
  // 1600 bytes: one full flush of 1024, 576 still buffered
  t.is(r.flushes.length, 1)
  t.is(r.flushes[0]!.off, 0)
  t.is(r.flushes[0]!.data.length, 1024)
  t.is(wb.off, 1024)
  t.is(wb.len, 576)
  t.is(wb.end, 1600)
})

test('a non-contiguous write flushes first; a write spanning the buffer end splits at the boundary', async (t) => {
  const wb = new WriteBuffer(1000)
  const r = recorder()
  await bufferedWrite(wb, 0, Buffer.alloc(300, 1), r.flush)
  await bufferedWrite(wb, 5000, Buffer.alloc(10, 2), r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [[0, 300]],
  )
  t.is(wb.off, 5000)
  await bufferedWrite(wb, 5010, Buffer.alloc(1500, 3), r.flush)
  // 10 + 990 fill the buffer → flush [5000, 6000); the remaining 510 are buffered
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [
      [0, 300],
      [5000, 1000],
    ],
  )
  t.is(wb.off, 6000)
  t.is(wb.len, 510)
})

test('a large write into an empty buffer goes straight out in whole-buffer runs', async (t) => {
  const wb = new WriteBuffer(1000)
  const r = recorder()
  const data = randomBytes(3500)
  await bufferedWrite(wb, 10, data, r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [[10, 3000]],
  )
  t.is(wb.len, 500)
  t.is(wb.off, 3010)
  t.deepEqual(wb.view(), data.subarray(3000))
})

test('write-behind: a full buffer goes to flushBehind with its memory, later writes land in other memory, recycled memory comes back', async (t) => {
  // above half of Node's 8 KiB pool, so the buffer's memory is its own ArrayBuffer
  const cap = 8192
  const wb = new WriteBuffer(cap)
  const direct = recorder()
  const held: Array<{ off: number; data: Buffer; copy: Buffer }> = []
  const behind = async (off: number, data: Buffer) => {
    held.push({ off, data, copy: Buffer.from(data) })
  }
  const src = randomBytes(2.5 * cap)
  const piece = cap / 8
  for (let off = 0; off < src.length; off += piece) await bufferedWrite(wb, off, src.subarray(off, off + piece), direct.flush, behind)
  t.is(direct.flushes.length, 0, 'nothing flushed in place')
  t.deepEqual(held.map((h) => h.off), [0, cap])
  t.is(wb.off, 2 * cap)
  t.is(wb.len, cap / 2)
  // the flushes behind still own their bytes: the writes after them went elsewhere
  for (const h of held) {
    t.true(h.data.equals(h.copy))
    t.true(h.data.equals(src.subarray(h.off, h.off + cap)))
  }
  t.not(held[0]!.data.buffer, held[1]!.data.buffer)
  // once a flush is done its memory is reused for the next buffer
  wb.recycle(held[0]!.data)
  t.true(wb.detach().equals(src.subarray(2 * cap)))
  await bufferedWrite(wb, 5 * cap, Buffer.alloc(10, 7), direct.flush, behind)
  t.is(wb.view().buffer, held[0]!.data.buffer)
  // a large write into the empty buffer still goes straight out, in place
  wb.detach()
  await bufferedWrite(wb, 9 * cap, randomBytes(3 * cap), direct.flush, behind)
  t.is(direct.flushes.length, 1)
  t.is(direct.flushes[0]!.data.length, 3 * cap)
  t.is(held.length, 2)
})

test('write-through when the buffer size is 0; empty writes do nothing', async (t) => {
  const wb = new WriteBuffer(0)
  const r = recorder()
  await bufferedWrite(wb, 7, Buffer.from('abc'), r.flush)
  await bufferedWrite(wb, 10, Buffer.alloc(0), r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.toString()]),
    [[7, 'abc']],
  )
  t.true(wb.empty)
})

test('random write streams through the buffer equal the same writes applied directly', async (t) => {
  for (let round = 0; round < 20; round++) {
    const wb = new WriteBuffer(1 + Math.floor(Math.random() * 5000))
    const r = recorder()
    const model = Buffer.alloc(60_000)
    let pos = 0
    for (let i = 0; i < 60; i++) {
      if (Math.random() < 0.2) pos = Math.floor(Math.random() * 50_000)
      const len = Math.min(1 + Math.floor(Math.random() * 3000), 60_000 - pos)
      const d = randomBytes(len)
      d.copy(model, pos)
      await bufferedWrite(wb, pos, d, r.flush)
      pos += len
      if (pos >= 60_000) pos = 0
    }
    if (!wb.empty) await r.flush(wb.off, wb.view())
    t.deepEqual(apply(r.flushes, 60_000), model)
    // buffered flushes never exceed the capacity unless they are direct runs (multiples of it)
    for (const f of r.flushes) t.true(f.data.length <= wb.capacity || f.data.length % wb.capacity === 0)
  }
})

test('with a chunk size the buffer holds one whole chunk and its flushes end at chunk boundaries', async (t) => {
  const wb = new WriteBuffer(1000, 4000)
  t.is(wb.capacity, 4000)
  t.is(wb.align, 4000)
  const r = recorder()
  const src = randomBytes(12_000)
  // an unaligned start: the first flush runs to the first boundary only
  for (let off = 1500; off < 10_000; off += 500) await bufferedWrite(wb, off, src.subarray(off, off + 500), r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [
      [1500, 2500],
      [4000, 4000],
    ],
  )
  t.deepEqual([wb.off, wb.len], [8000, 2000])
  // a write across a boundary fills up to it, flushes, and buffers the rest
  await bufferedWrite(wb, 10_000, src.subarray(10_000, 12_000), r.flush)
  t.deepEqual(r.flushes.at(-1)!.off, 8000)
  t.is(r.flushes.at(-1)!.data.length, 4000)
  t.true(wb.empty)
  t.deepEqual(apply(r.flushes, 12_000).subarray(1500), src.subarray(1500))
})

test('chunks smaller than the buffer: a flush holds as many whole chunks as fit', async (t) => {
  const wb = new WriteBuffer(1000, 300)
  t.deepEqual([wb.capacity, wb.align], [1000, 900])
  const r = recorder()
  for (let off = 100; off < 2000; off += 100) await bufferedWrite(wb, off, Buffer.alloc(100, off / 100), r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [
      [100, 800],
      [900, 900],
    ],
  )
})

test('a large write into an empty chunk-aligned buffer goes straight out up to its last chunk boundary', async (t) => {
  const wb = new WriteBuffer(1000, 4000)
  const r = recorder()
  const data = randomBytes(9000)
  await bufferedWrite(wb, 500, data, r.flush)
  // [500, 8000) direct (ends at a boundary, more than a chunk), [8000, 9500) buffered
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [[500, 7500]],
  )
  t.deepEqual([wb.off, wb.len], [8000, 1500])
  // less than a chunk to the next boundary: buffered, not sent as a partial direct run
  wb.clear()
  await bufferedWrite(wb, 1000, randomBytes(5000), r.flush)
  t.deepEqual(
    r.flushes.map((f) => [f.off, f.data.length]),
    [
      [500, 7500],
      [1000, 3000],
    ],
  )
  t.deepEqual([wb.off, wb.len], [4000, 2000])
})

test('chunks larger than the buffer cap: whole-capacity flushes, and the first bytes take little memory', async (t) => {
  const wb = new WriteBuffer(1024 * 1024, 64 * 1024 * 1024)
  t.is(wb.capacity, MAX_CHUNK_WRITE_BUFFER)
  const r = recorder()
  await bufferedWrite(wb, 0, Buffer.alloc(10, 1), r.flush)
  t.true(wb.view().buffer.byteLength <= 1024 * 1024, 'a small file does not take a whole chunk of memory')
  const more = randomBytes(2 * 1024 * 1024)
  await bufferedWrite(wb, 10, more, r.flush)
  t.is(r.flushes.length, 0)
  t.deepEqual(wb.view().subarray(0, 10), Buffer.alloc(10, 1))
  t.true(wb.view().subarray(10).equals(more), 'growing keeps the buffered bytes')
  await bufferedWrite(wb, wb.end, Buffer.alloc(MAX_CHUNK_WRITE_BUFFER), r.flush)
  t.is(r.flushes[0]!.data.length, MAX_CHUNK_WRITE_BUFFER)
  t.throws(() => new WriteBuffer(1000, -1), { message: /chunk size/ })
})

test('random write streams through a chunk-aligned buffer: same bytes, and no buffered flush crosses a boundary', async (t) => {
  for (let round = 0; round < 20; round++) {
    const chunk = 1 + Math.floor(Math.random() * 4000)
    const wb = new WriteBuffer(1 + Math.floor(Math.random() * 3000), chunk)
    const log: Array<{ off: number; data: Buffer; direct: boolean }> = []
    const record = (direct: boolean) => async (off: number, data: Buffer) => void log.push({ off, data: Buffer.from(data), direct })
    const model = Buffer.alloc(60_000)
    let pos = 0
    for (let i = 0; i < 60; i++) {
      if (Math.random() < 0.2) pos = Math.floor(Math.random() * 50_000)
      const len = Math.min(1 + Math.floor(Math.random() * 6000), 60_000 - pos)
      const d = randomBytes(len)
      d.copy(model, pos)
      await bufferedWrite(wb, pos, d, record(false), undefined, record(true))
      pos += len
      if (pos >= 60_000) pos = 0
    }
    if (!wb.empty) await record(false)(wb.off, wb.view())
    t.deepEqual(apply(log, 60_000), model)
    t.true(wb.capacity >= Math.min(chunk, MAX_CHUNK_WRITE_BUFFER))
    for (const f of log) {
      if (f.direct) {
        t.is((f.off + f.data.length) % wb.align, 0, 'a direct run ends at a boundary')
        continue
      }
      t.true(f.data.length <= wb.capacity)
      t.is(Math.floor(f.off / wb.align), Math.floor((f.off + f.data.length - 1) / wb.align), `buffered flush [${f.off}, +${f.data.length}) crosses a ${wb.align} boundary`)
    }
  }
})

test('a failed flush empties the buffer and reports the error', async (t) => {
  const wb = new WriteBuffer(100)
  await bufferedWrite(wb, 0, Buffer.alloc(50), async () => undefined)
  const err = await t.throwsAsync(
    bufferedWrite(wb, 500, Buffer.alloc(10), async () => {
      throw new Error('boom')
    }),
  )
  t.is(err?.message, 'boom')
  t.true(wb.empty)
})

function fileInode(length = 0, truncateVer = 0): Inode {
  return {
    id: 77n,
    type: 'File',
    acl: { uid: 0, gid: 0, perm: 0o644, iflags: 0 },
    nlink: 1,
    atime: 0,
    ctime: 0,
    mtime: 0,
    file: { length, truncateVer, layout: { tableId: 1, tableVersion: 1, chunkSize: 4096, stripeSize: 1, chains: { type: 'ChainList', chainIndexes: [1] } }, flags: 0, dynStripe: 0 },
  }
}

test('length hints: max(offset+len) under the truncate version, poisoned by a failed write, reset after sync', (t) => {
  t.deepEqual(mergeHint({ length: 5, truncateVer: 1 }, { length: 9, truncateVer: 2 }), { length: 9, truncateVer: 2 })
  t.is(mergeHint(null, { length: 9, truncateVer: 2 }), null)
  const s = new InodeState(fileInode(100, 3), 1024)
  t.deepEqual(s.hint, { length: 0, truncateVer: 3 })
  t.is(s.beginWrite(), 3)
  s.finishWrite(3, 0, 1000)
  s.finishWrite(3, 5000, 10)
  s.finishWrite(3, 10, 10)
  t.deepEqual(s.hint, { length: 5010, truncateVer: 3 })
  t.is(s.written, 3)
  t.true(s.needsSync('periodic'))
  t.true(s.needsSync('fsync'))
  t.is(s.knownLength(), 5010)
  // a periodic sync acknowledged up to write 3: hint reset, exact length still owed
  s.update(fileInode(5010, 3), 3, false)
  t.false(s.needsSync('periodic'))
  t.true(s.needsSync('fsync'))
  t.deepEqual(s.hint, { length: 0, truncateVer: 0 })
  // a failed write poisons the hint
  s.finishWrite(3, 6000, -1)
  t.is(s.hint, null)
  t.true(s.needsSync('periodic'))
  // a truncate bumps the version future writes carry
  s.update(fileInode(100, 4), 4, true)
  t.is(s.beginWrite(), 4)
  t.false(s.needsSync('fsync'))
  t.true(s.needsSync('force'))
})

test('a stale inode (an open reply overtaken by a close) never takes the known length back; a truncate does', (t) => {
  const s = new InodeState(fileInode(100, 3), 1024)
  // another handle's close adopted 300 bytes
  s.update(fileInode(300, 3), 0, true)
  t.is(s.knownLength(), 300)
  // an open's reply that meta computed before that close arrives late
  const late = { ...fileInode(100, 3), mtime: 5 }
  s.update(late)
  t.is(s.knownLength(), 300, 'the next append goes after the bytes already synced')
  t.is(s.inode.file!.length, 300)
  t.is(s.inode.mtime, 5, 'the rest of the reply is taken')
  // an older truncate version is older whatever its length
  s.update(fileInode(9999, 2))
  t.is(s.knownLength(), 300)
  // a truncate (newer version, shorter) is adopted
  s.update(fileInode(10, 4))
  t.is(s.knownLength(), 10)
  t.is(s.beginWrite(), 4)
})

test('mutex serializes and tryRun skips while held', async (t) => {
  const m = new Mutex()
  const order: number[] = []
  const slow = m.run(async () => {
    await new Promise((r) => setTimeout(r, 30))
    order.push(1)
  })
  const tried = await m.tryRun(async () => order.push(99))
  t.false(tried.ran)
  await m.run(async () => order.push(2))
  await slow
  t.deepEqual(order, [1, 2])
  const ok = await m.tryRun(async () => 5)
  t.deepEqual(ok, { ran: true, value: 5 })
})
