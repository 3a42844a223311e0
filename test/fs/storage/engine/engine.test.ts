// ChunkEngine: version algebra on disk, commit, reads, remove/truncate/extend,
// range queries, persistence, maintenance operations.
import test, { type ExecutionContext } from 'ava'
import fs, { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { randomBytes } from 'node:crypto'
import { isStrataError } from '../../../../fs/common/errors.js'
import { native } from '../../../../fs/common/native.js'
import { ChunkEngine } from '../../../../fs/storage/engine/index.js'
import { CHUNK, chunkFiles, cid, client, crc, forwarded, opIO, pattern, setup, syncing, writeCommit, writeIO } from './helpers.js'

function code(t: ExecutionContext, e: unknown): string {
  if (isStrataError(e)) return e.code
  t.fail(`not a StrataError: ${String(e)}`)
  return ''
}

async function rejectsWith(t: ExecutionContext, p: Promise<unknown>, expected: string): Promise<void> {
  const e = await t.throwsAsync(p)
  t.is(code(t, e), expected, e?.message)
}

// ---------------------------------------------------------------- updates and versions

test('client write creates the chunk pending; commit makes it readable', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  const data = pattern(1000, 1)
  const r = await engine.applyUpdate(writeIO(id, 0, data), client())
  t.like(r, { lengthInfo: 1000, commitVer: 0, updateVer: 1, checksum: crc(data), commitChainVer: 1, size: 1000, state: 'CLEAN' })
  t.like(engine.getMeta(id), { commitVer: 0, updateVer: 1, state: 'CLEAN', size: 1000, chunkSize: CHUNK, recycleState: 'NORMAL', lastClientId: 'client-1', lastRequestId: 7 })

  await rejectsWith(t, engine.read(id, 0, 1000), 'CHUNK_NOT_COMMIT')
  const pending = await engine.read(id, 0, 1000, { allowUncommitted: true })
  t.deepEqual(pending.data, data)
  t.like(pending, { commitVer: 0, updateVer: 1, checksum: crc(data) })

  const c = await engine.commit(id, 1, 1)
  t.like(c, { commitVer: 1, updateVer: 1, state: 'COMMIT', stale: false, removed: false, checksum: crc(data), size: 1000 })
  const rd = await engine.read(id, 0, 1000)
  t.deepEqual(rd.data, data)
  t.like(rd, { commitVer: 1, updateVer: 1, commitChainVer: 1, chunkLength: 1000, chunkChecksum: crc(data) })
})

test('client update while one is pending is CHUNK_ADVANCE_UPDATE and changes nothing', async (t) => {
  const { engine, dir } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(100, 1))
  await engine.applyUpdate(writeIO(id, 100, pattern(50, 2)), client())
  const before = engine.getMeta(id)
  const files = await chunkFiles(dir, id)
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 3)), client()), 'CHUNK_ADVANCE_UPDATE')
  t.deepEqual(engine.getMeta(id), before)
  t.deepEqual(await chunkFiles(dir, id), files)
})

test('forwarded updates: committed, stale, missing, and replacing a pending update', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  // v = u = 2
  for (const [w, seed] of [
    [1, 1],
    [2, 2],
  ] as const) {
    const r = await engine.applyUpdate(writeIO(id, 0, pattern(100, seed), { updateVer: w }), forwarded())
    t.is(r.updateVer, w)
    await engine.commit(id, w, 1)
  }
  const committed = engine.getMeta(id)
  t.like(committed, { commitVer: 2, updateVer: 2, state: 'COMMIT' })

  for (const w of [1, 2]) {
    const e = await t.throwsAsync(engine.applyUpdate(writeIO(id, 0, pattern(10, 9), { updateVer: w }), forwarded()))
    t.is(code(t, e), 'CHUNK_COMMITTED_UPDATE')
    t.like((e as { detail?: object }).detail, { commitVer: 2, updateVer: 2, checksum: crc(pattern(100, 2)) })
  }
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 9), { updateVer: 4 }), forwarded()), 'CHUNK_MISSING_UPDATE')
  t.deepEqual(engine.getMeta(id), committed)

  // pending u = 3
  await engine.applyUpdate(writeIO(id, 100, pattern(20, 3), { updateVer: 3 }), forwarded())
  const pending = engine.getMeta(id)
  t.like(pending, { commitVer: 2, updateVer: 3, size: 120 })
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 9), { updateVer: 3 }), forwarded()), 'CHUNK_STALE_UPDATE')
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 9), { updateVer: 5 }), forwarded()), 'CHUNK_MISSING_UPDATE')
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 9), { updateVer: 2 }), forwarded()), 'CHUNK_COMMITTED_UPDATE')
  t.deepEqual(engine.getMeta(id), pending)

  // w = u + 1 lands on top of the pending content
  const r4 = await engine.applyUpdate(writeIO(id, 120, pattern(5, 4), { updateVer: 4 }), forwarded())
  t.like(r4, { commitVer: 2, updateVer: 4, size: 125 })
  const expected = Buffer.concat([pattern(100, 2), pattern(20, 3), pattern(5, 4)])
  t.is(r4.checksum, crc(expected))
  await engine.commit(id, 4, 1)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, expected)
})

test('a forwarded update that skips the first version of a new chunk is missing and creates nothing', async (t) => {
  const { engine } = await setup(t)
  await rejectsWith(t, engine.applyUpdate(writeIO(cid(1), 0, pattern(10, 1), { updateVer: 2 }), forwarded()), 'CHUNK_MISSING_UPDATE')
  t.is(engine.getMeta(cid(1)), null)
  t.is(engine.chunkCount(), 0)
})

test('refused updates leave metadata and files unchanged', async (t) => {
  const { engine, dir } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(4096, 1), 5)
  const before = engine.getMeta(id)
  const files = await chunkFiles(dir, id)
  const cases: Array<[string, Promise<unknown>]> = [
    ['CHUNK_INVALID_RANGE', engine.applyUpdate(writeIO(id, CHUNK, pattern(1, 1)), client(5))],
    ['CHUNK_INVALID_RANGE', engine.applyUpdate(writeIO(id, CHUNK - 10, pattern(11, 1)), client(5))],
    ['CHUNK_INVALID_RANGE', engine.applyUpdate(opIO(id, 'TRUNCATE', CHUNK + 1), client(5))],
    ['CHUNK_SIZE_MISMATCH', engine.applyUpdate(writeIO(id, 0, pattern(10, 1), { chunkSize: CHUNK * 2 }), client(5))],
    ['CHECKSUM_MISMATCH', engine.applyUpdate(writeIO(id, 0, pattern(10, 1), { checksum: 12345 }), client(5))],
    ['CHUNK_VERSION_FENCED', engine.applyUpdate(writeIO(id, 0, pattern(10, 1)), client(4))],
    ['CHUNK_COMMITTED_UPDATE', engine.applyUpdate(writeIO(id, 0, pattern(10, 1), { updateVer: 1 }), forwarded(5))],
    ['INVALID_ARGUMENT', engine.applyUpdate({ ...writeIO(id, 0, pattern(10, 1)), data: pattern(5, 1) }, client(5))],
    ['INVALID_ARGUMENT', engine.applyUpdate(opIO(id, 'TRUNCATE', 10), syncing(5))],
    ['INVALID_ARGUMENT', engine.applyUpdate({ ...writeIO(id, 0, pattern(10, 1)), key: { chainId: 1, chainVer: 1, chunkId: Buffer.alloc(8) } }, client(5))],
  ]
  for (const [expected, p] of cases) await rejectsWith(t, p, expected)
  t.deepEqual(engine.getMeta(id), before)
  t.deepEqual(await chunkFiles(dir, id), files)
  // a refused update of a chunk that does not exist does not create it
  await rejectsWith(t, engine.applyUpdate(writeIO(cid(2), 0, pattern(10, 1), { checksum: 1 }), client()), 'CHECKSUM_MISMATCH')
  t.is(engine.getMeta(cid(2)), null)
})

test('chain version fence applies to committed chunks and to commits', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(10, 1), 3)
  t.is(engine.getMeta(id)!.chainVer, 3)
  // a newer chain version is fine and is recorded
  const r = await engine.applyUpdate(writeIO(id, 0, pattern(10, 2)), client(4))
  t.is(r.commitChainVer, 4)
  await rejectsWith(t, engine.commit(id, r.updateVer, 3), 'CHUNK_VERSION_FENCED')
  const c = await engine.commit(id, r.updateVer, 6)
  t.like(c, { commitChainVer: 6, state: 'COMMIT' })
  await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 3)), client(5)), 'CHUNK_VERSION_FENCED')
})

test('syncing write replaces the chunk whatever its versions and size', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(5000, 1))
  await writeCommit(engine, id, 5000, pattern(5000, 2))
  const full = pattern(3000, 3)
  const r = await engine.applyUpdate(writeIO(id, 0, full, { updateVer: 9 }), syncing(2))
  t.like(r, { commitVer: 8, updateVer: 9, size: 3000, checksum: crc(full), state: 'CLEAN' })
  await engine.commit(id, 9, 2)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, full)
  t.like(engine.getMeta(id), { commitVer: 9, updateVer: 9, size: 3000, state: 'COMMIT', chainVer: 2 })

  // a successor that is ahead is set back to the predecessor's version
  const older = pattern(100, 4)
  const r2 = await engine.applyUpdate(writeIO(id, 0, older, { updateVer: 4 }), syncing(2))
  t.like(r2, { commitVer: 3, updateVer: 4, size: 100 })
  await engine.commit(id, 4, 2)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, older)

  // an empty chunk syncs as a zero-length write
  const r3 = await engine.applyUpdate({ ...writeIO(id, 0, Buffer.alloc(0), { updateVer: 5 }) }, syncing(2))
  t.like(r3, { size: 0, checksum: 0, updateVer: 5 })
  await engine.commit(id, 5, 2)
  t.is((await engine.read(id, 0, 10)).data.length, 0)
})

// ---------------------------------------------------------------- commit

test('commit semantics: stale, beyond updateVer, partial, missing chunk', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  await rejectsWith(t, engine.commit(id, 1, 1), 'CHUNK_NOT_FOUND')
  t.like(await engine.commit(id, 3, 1, { isRemove: true }), { removed: true, commitVer: 3, updateVer: 3, state: null })

  await writeCommit(engine, id, 0, pattern(10, 1))
  const before = engine.getMeta(id)
  const stale = await engine.commit(id, 1, 1)
  t.like(stale, { stale: true, commitVer: 1, updateVer: 1, state: 'COMMIT' })
  t.like(await engine.commit(id, 0, 1), { stale: true })
  t.deepEqual(engine.getMeta(id), before)
  await rejectsWith(t, engine.commit(id, 2, 1), 'CHUNK_MISSING_UPDATE')

  // u runs two ahead through a replaced pending update; committing the middle version keeps it CLEAN
  await engine.applyUpdate(writeIO(id, 0, pattern(10, 2), { updateVer: 2 }), forwarded())
  await engine.applyUpdate(writeIO(id, 0, pattern(10, 3), { updateVer: 3 }), forwarded())
  const mid = await engine.commit(id, 2, 1)
  t.like(mid, { commitVer: 2, updateVer: 3, state: 'CLEAN', stale: false })
  await rejectsWith(t, engine.read(id, 0, 10), 'CHUNK_NOT_COMMIT')
  t.like(await engine.commit(id, 3, 1), { commitVer: 3, state: 'COMMIT' })
  t.deepEqual((await engine.read(id, 0, 10)).data, pattern(10, 3))
})

test('at most the committed and the pending version have files; commit reclaims the old one', async (t) => {
  const { engine, dir } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(1000, 1))
  t.is((await chunkFiles(dir, id)).length, 1)
  // partial overwrite: copy-on-write next to the committed file
  await engine.applyUpdate(writeIO(id, 10, pattern(10, 2)), client())
  t.is((await chunkFiles(dir, id)).length, 2)
  await engine.commit(id, 2, 1)
  t.is((await chunkFiles(dir, id)).length, 1)
  // replacing a pending update does not accumulate files
  await engine.applyUpdate(writeIO(id, 0, pattern(20, 3), { updateVer: 3 }), forwarded())
  await engine.applyUpdate(writeIO(id, 5, pattern(20, 4), { updateVer: 4 }), forwarded())
  await engine.applyUpdate(writeIO(id, 7, pattern(20, 5), { updateVer: 5 }), forwarded())
  t.true((await chunkFiles(dir, id)).length <= 2)
  await engine.commit(id, 5, 1)
  t.is((await chunkFiles(dir, id)).length, 1)
})

// ---------------------------------------------------------------- reads

test('reads: not found, short read, read past the end, checksum verification', async (t) => {
  const { engine } = await setup(t)
  await rejectsWith(t, engine.read(cid(9), 0, 10), 'CHUNK_NOT_FOUND')
  const id = cid(1)
  const data = randomBytes(3000)
  await writeCommit(engine, id, 0, data)
  const short = await engine.read(id, 2000, 4096)
  t.deepEqual(short.data, data.subarray(2000))
  t.is(short.checksum, crc(data.subarray(2000)))
  t.is(short.chunkLength, 3000)
  t.is((await engine.read(id, 5000, 10)).data.length, 0)
  t.is((await engine.read(id, 100, 0)).data.length, 0)
  const verified = await engine.read(id, 10, 20, { verifyChecksum: true })
  t.deepEqual(verified.data, data.subarray(10, 30))
})

test('a read racing with updates never returns a torn mix', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  const a = Buffer.alloc(CHUNK, 0xaa)
  const b = Buffer.alloc(CHUNK, 0xbb)
  await writeCommit(engine, id, 0, a)
  let stop = false
  const writer = (async () => {
    let i = 0
    while (!stop) {
      await writeCommit(engine, id, 0, i++ % 2 ? a : b)
      // leave committed windows so some reads can succeed
      if (i % 3 === 0) await new Promise((r) => setTimeout(r, 5))
    }
  })()
  let ok = 0
  let notCommit = 0
  const deadline = Date.now() + 10_000
  while (ok < 50 && Date.now() < deadline) {
    try {
      const r = await engine.read(id, 0, CHUNK)
      if (!(r.data.equals(a) || r.data.equals(b))) t.fail('torn read')
      t.is(r.checksum, crc(r.data))
      ok++
    } catch (e) {
      t.is(code(t, e), 'CHUNK_NOT_COMMIT')
      notCommit++
      // a client would back off before retrying
      await new Promise((r) => setImmediate(r))
    }
  }
  stop = true
  await writer
  t.true(ok > 0)
  t.log(`reads ok ${ok}, not committed ${notCommit}`)
})

test('a whole-chunk read can hand out its file range (sendfile); while leased, later versions never write into that file, so the range keeps its bytes', async (t) => {
  const { engine, dir } = await setup(t)
  const id = cid(1)
  const a = randomBytes(CHUNK)
  await writeCommit(engine, id, 0, a)
  const r = await engine.read(id, 0, CHUNK, { leaseFrom: 1 })
  t.truthy(r.file)
  t.is(r.data.length, 0)
  t.is(r.checksum, crc(a))
  const lease = r.file!
  t.deepEqual([lease.offset, lease.length], [0, CHUNK])
  const filesBefore = await chunkFiles(dir, id)
  // truncate (metadata only: same file) then append: an append would go into that same file in place
  await engine.applyUpdate(opIO(id, 'TRUNCATE', CHUNK / 4), client()).then((u) => engine.commit(id, u.updateVer, 1))
  const b = randomBytes(CHUNK / 4)
  await writeCommit(engine, id, CHUNK / 4, b)
  const held = Buffer.alloc(CHUNK)
  t.is(fs.readSync(lease.fd, held, 0, CHUNK, 0), CHUNK)
  t.true(held.equals(a), 'the leased range still holds the version that was read')
  t.notDeepEqual(await chunkFiles(dir, id), filesBefore, 'the append went to a new file')
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, Buffer.concat([a.subarray(0, CHUNK / 4), b]))
  lease.release()
  lease.release() // idempotent
  // released: appends go in place again
  const files = await chunkFiles(dir, id)
  await writeCommit(engine, id, CHUNK / 2, randomBytes(CHUNK / 4))
  t.deepEqual(await chunkFiles(dir, id), files)
  // only whole contents of at least leaseFrom bytes are leased
  t.falsy((await engine.read(id, 1, CHUNK, { leaseFrom: 1 })).file)
  t.falsy((await engine.read(id, 0, CHUNK, { leaseFrom: CHUNK })).file)
  t.falsy((await engine.read(id, 0, CHUNK, { leaseFrom: 1, verifyChecksum: true })).file)
  const again = await engine.read(id, 0, CHUNK, { leaseFrom: 1 })
  t.is(again.file?.length, (3 * CHUNK) / 4)
  again.file!.release()
})

// ---------------------------------------------------------------- data paths

test('write paths: gap zero-fill, append, overwrite inside, full overwrite', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  const model = Buffer.alloc(CHUNK)
  let size = 0
  const step = async (off: number, data: Buffer) => {
    await writeCommit(engine, id, off, data)
    data.copy(model, off)
    size = Math.max(size, off + data.length)
    const m = engine.getMeta(id)!
    t.is(m.size, size)
    t.is(m.checksum, crc(model.subarray(0, size)))
    t.deepEqual((await engine.read(id, 0, CHUNK, { verifyChecksum: true })).data, model.subarray(0, size))
  }
  await step(100, pattern(50, 1)) // gap on a new chunk
  await step(150, pattern(200, 2)) // append
  await step(1000, pattern(10, 3)) // append after a gap
  await step(120, pattern(40, 4)) // inside
  await step(1005, pattern(100, 5)) // straddles the end
  await step(0, pattern(2000, 6)) // full overwrite
  await step(0, pattern(10, 7)) // short overwrite at 0 keeps the tail
})

test('truncate and extend', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  const data = randomBytes(5000)
  await writeCommit(engine, id, 0, data)

  const tr = await engine.applyUpdate(opIO(id, 'TRUNCATE', 1200), client())
  t.like(tr, { lengthInfo: 1200, size: 1200, checksum: crc(data.subarray(0, 1200)) })
  await engine.commit(id, tr.updateVer, 1)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, data.subarray(0, 1200))

  // EXTEND never shrinks
  const ex0 = await engine.applyUpdate(opIO(id, 'EXTEND', 100), client())
  t.like(ex0, { lengthInfo: 1200, size: 1200 })
  await engine.commit(id, ex0.updateVer, 1)

  const ex = await engine.applyUpdate(opIO(id, 'EXTEND', 3000), client())
  const extended = Buffer.concat([data.subarray(0, 1200), Buffer.alloc(1800)])
  t.like(ex, { lengthInfo: 3000, size: 3000, checksum: crc(extended) })
  await engine.commit(id, ex.updateVer, 1)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, extended)

  // TRUNCATE to a larger length zero-fills too (3FS)
  const tr2 = await engine.applyUpdate(opIO(id, 'TRUNCATE', 4000), client())
  await engine.commit(id, tr2.updateVer, 1)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, Buffer.concat([extended, Buffer.alloc(1000)]))

  // truncation to zero, then writing again past the old end reads zeros in between
  const tr0 = await engine.applyUpdate(opIO(id, 'TRUNCATE', 0), client())
  t.like(tr0, { size: 0, checksum: 0 })
  await engine.commit(id, tr0.updateVer, 1)
  await writeCommit(engine, id, 2000, pattern(10, 1))
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, Buffer.concat([Buffer.alloc(2000), pattern(10, 1)]))

  // the protocol.ts convention (length in `offset`) reaches the same length
  const tr3 = await engine.applyUpdate({ ...opIO(id, 'TRUNCATE', 0), offset: 500 }, client())
  t.is(tr3.size, 500)
  await engine.commit(id, tr3.updateVer, 1)

  // truncate creates a missing chunk
  const fresh = await engine.applyUpdate(opIO(cid(2), 'TRUNCATE', 300), client())
  await engine.commit(cid(2), fresh.updateVer, 1)
  t.deepEqual((await engine.read(cid(2), 0, CHUNK)).data, Buffer.alloc(300))
})

test('truncate then append while the truncation is pending does not disturb committed bytes', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  const data = randomBytes(4000)
  await writeCommit(engine, id, 0, data)
  await engine.applyUpdate(opIO(id, 'TRUNCATE', 1000, { updateVer: 2 }), forwarded())
  await engine.applyUpdate(writeIO(id, 1000, pattern(100, 1), { updateVer: 3 }), forwarded())
  // the committed version is still whole
  const committed = await engine.readWholeChunk(id, { includePending: false })
  t.deepEqual(committed.data, data)
  t.is(committed.checksum, crc(data))
  await engine.commit(id, 3, 1)
  t.deepEqual((await engine.read(id, 0, CHUNK)).data, Buffer.concat([data.subarray(0, 1000), pattern(100, 1)]))
})

test('remove marks the chunk, commit deletes it with its files', async (t) => {
  const { engine, dir } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(100, 1))
  const r = await engine.applyUpdate(opIO(id, 'REMOVE', 0, { chunkSize: 0 }), client())
  t.like(r, { updateVer: 2, commitVer: 1, lengthInfo: 0, state: 'CLEAN' })
  t.is(engine.getMeta(id)!.recycleState, 'REMOVAL_IN_PROGRESS')
  t.is(engine.queryLastChunk(null, null).totalNumChunks, 0)
  const c = await engine.commit(id, 2, 1)
  t.like(c, { removed: true, state: null })
  t.is(engine.getMeta(id), null)
  t.deepEqual(await chunkFiles(dir, id), [])
  await rejectsWith(t, engine.read(id, 0, 10), 'CHUNK_NOT_FOUND')
  // removing what is not there succeeds without creating anything
  const again = await engine.applyUpdate(opIO(id, 'REMOVE', 0), client())
  t.like(again, { state: null, lengthInfo: 0 })
  t.is(engine.getMeta(id), null)
  // and it can be written again from scratch
  await writeCommit(engine, id, 0, pattern(10, 2))
  t.like(engine.getMeta(id), { commitVer: 1, updateVer: 1, size: 10 })
})

test('a write replacing a pending remove revives the chunk', async (t) => {
  const { engine } = await setup(t)
  const id = cid(1)
  await writeCommit(engine, id, 0, pattern(100, 1))
  await engine.applyUpdate(opIO(id, 'REMOVE', 0, { updateVer: 2 }), forwarded())
  await engine.applyUpdate(writeIO(id, 100, pattern(10, 2), { updateVer: 3 }), forwarded())
  t.is(engine.getMeta(id)!.recycleState, 'NORMAL')
  const c = await engine.commit(id, 3, 1)
  t.false(c.removed)
  t.is((await engine.read(id, 0, CHUNK)).data.length, 110)
})

// ---------------------------------------------------------------- range queries

test('queryLastChunk, queryChunks and listChunkIds over ranges', async (t) => {
  const { engine } = await setup(t)
  const sizes = new Map<number, number>()
  for (let i = 1; i <= 10; i++) {
    sizes.set(i, i * 100)
    await writeCommit(engine, cid(i, 0xa), 0, pattern(i * 100, i))
  }
  await writeCommit(engine, cid(1, 0xb), 0, pattern(7, 1))
  await writeCommit(engine, cid(1, 0x9), 0, pattern(9, 1))
  const all = engine.queryLastChunk(cid(0, 0xa), cid(0, 0xb))
  t.deepEqual(all.lastChunkId, cid(10, 0xa))
  t.is(all.lastChunkLen, 1000)
  t.is(all.totalNumChunks, 10)
  t.is(all.totalChunkLen, 5500)
  t.false(all.moreChunksInRange)

  const limited = engine.queryLastChunk(cid(0, 0xa), cid(0, 0xb), 3)
  t.deepEqual(limited.lastChunkId, cid(10, 0xa))
  t.is(limited.totalNumChunks, 3)
  t.is(limited.totalChunkLen, 1000 + 900 + 800)
  t.true(limited.moreChunksInRange)
  t.false(engine.queryLastChunk(cid(0, 0xa), cid(0, 0xb), 10).moreChunksInRange)

  // end is exclusive, begin inclusive
  const mid = engine.queryLastChunk(cid(3, 0xa), cid(7, 0xa))
  t.deepEqual(mid.lastChunkId, cid(6, 0xa))
  t.is(mid.totalNumChunks, 4)

  // a chunk being removed is skipped
  await engine.applyUpdate(opIO(cid(10, 0xa), 'REMOVE', 0), client())
  const afterRm = engine.queryLastChunk(cid(0, 0xa), cid(0, 0xb))
  t.deepEqual(afterRm.lastChunkId, cid(9, 0xa))
  t.is(afterRm.totalNumChunks, 9)
  t.is(engine.queryChunks(cid(0, 0xa), cid(0, 0xb)).length, 10)

  const empty = engine.queryLastChunk(cid(0, 0xc), cid(0, 0xd))
  t.deepEqual(empty, { lastChunkId: null, lastChunkLen: 0, totalChunkLen: 0, totalNumChunks: 0, moreChunksInRange: false })

  const desc = engine.queryChunks(cid(0, 0xa), cid(0, 0xb), 4).map((m) => m.chunkId.readUInt32BE(12))
  t.deepEqual(desc, [10, 9, 8, 7])
  const asc = engine.listChunkIds(cid(0, 0xa), cid(0, 0xb), 4).map((b) => b.readUInt32BE(12))
  t.deepEqual(asc, [1, 2, 3, 4])
  t.is(engine.listChunkIds(null, null).length, 12)
  t.is(engine.getAllMetadata().length, 12)
  t.deepEqual(engine.getAllMetadata()[0]!.chunkId, cid(1, 0x9))
})

// ---------------------------------------------------------------- persistence and maintenance

test('everything survives a reopen; target identity is checked', async (t) => {
  const fx = await setup(t, { fsync: true })
  const e1 = fx.engine
  await writeCommit(e1, cid(1), 0, pattern(500, 1))
  await writeCommit(e1, cid(2), 0, pattern(700, 2))
  await e1.applyUpdate(writeIO(cid(2), 700, pattern(10, 3)), client())
  await e1.setChainId(42)
  await e1.setEverUptodate(true)
  const metas = e1.getAllMetadata()
  const e2 = await fx.reopen()
  t.deepEqual(e2.getAllMetadata(), metas)
  t.deepEqual((await e2.read(cid(1), 0, CHUNK)).data, pattern(500, 1))
  await rejectsWith(t, e2.read(cid(2), 0, CHUNK), 'CHUNK_NOT_COMMIT')
  t.deepEqual((await e2.read(cid(2), 0, CHUNK, { allowUncommitted: true })).data, Buffer.concat([pattern(700, 2), pattern(10, 3)]))
  t.is(e2.chainId, 42)
  t.true(e2.everUptodate)
  t.like(e2.recovery, { chunks: 2, dirtyChunks: 0, uncommittedChunks: 1 })
  t.is(e2.usedBytes(), 500 + 710)
  await e2.commit(cid(2), 2, 1)
  await e2.close()
  const err = await t.throwsAsync(ChunkEngine.open({ dir: fx.dir, targetId: 999 }))
  t.is(code(t, err), 'BAD_CONFIG')
  await fx.reopen()
})

test('resetUncommitted force-commits pending chunks and completes pending removals', async (t) => {
  const { engine } = await setup(t)
  await writeCommit(engine, cid(1), 0, pattern(100, 1))
  await engine.applyUpdate(writeIO(cid(1), 100, pattern(100, 2)), client())
  await writeCommit(engine, cid(2), 0, pattern(100, 3))
  await engine.applyUpdate(opIO(cid(2), 'REMOVE', 0), client())
  await writeCommit(engine, cid(3), 0, pattern(100, 4))
  t.is(await engine.resetUncommitted(7), 2)
  t.like(engine.getMeta(cid(1)), { commitVer: 2, updateVer: 2, state: 'COMMIT', chainVer: 7, size: 200 })
  t.deepEqual((await engine.read(cid(1), 0, CHUNK)).data, Buffer.concat([pattern(100, 1), pattern(100, 2)]))
  t.is(engine.getMeta(cid(2)), null)
  t.like(engine.getMeta(cid(3)), { commitVer: 1, chainVer: 1 })
  t.is(await engine.resetUncommitted(7), 0)
})

test('spaceInfo, removeAll, collectGarbage', async (t) => {
  const { engine, dir } = await setup(t)
  await writeCommit(engine, cid(1), 0, pattern(1000, 1))
  await writeCommit(engine, cid(2), 0, pattern(3000, 2))
  const si = await engine.spaceInfo()
  t.like(si, { targetId: 101, used: 4000, chunkCount: 2 })
  t.true(si.capacity > 0 && si.free > 0 && si.free <= si.capacity)

  // a planted orphan (e.g. left by a machine crash) is collected; live files are not
  const [live] = await chunkFiles(dir, cid(1))
  const livePath = (await findFile(dir, live!))!
  await fsp.writeFile(path.join(path.dirname(livePath), `${cid(1).toString('hex')}.99`), 'junk')
  await fsp.writeFile(path.join(path.dirname(livePath), `not-a-chunk-file`), 'keep')
  t.is(await engine.collectGarbage(), 1)
  t.deepEqual((await engine.read(cid(1), 0, CHUNK)).data, pattern(1000, 1))

  t.is(await engine.removeAll(), 2)
  t.deepEqual(engine.getAllMetadata(), [])
  t.like(await engine.spaceInfo(), { used: 0, chunkCount: 0 })
  t.deepEqual(await chunkFiles(dir, cid(1)), [])
  await writeCommit(engine, cid(1), 0, pattern(10, 1))
  t.is(engine.chunkCount(), 1)
})

async function findFile(dir: string, name: string): Promise<string | undefined> {
  const root = path.join(dir, 'chunks')
  for (const sub of await fsp.readdir(root)) {
    if ((await fsp.readdir(path.join(root, sub))).includes(name)) return path.join(root, sub, name)
  }
  return undefined
}

test('withChunkLock serializes per chunk and not across chunks', async (t) => {
  const { engine } = await setup(t)
  const events: string[] = []
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
  const job = (id: Buffer, name: string, ms: number) =>
    engine.withChunkLock(id, async () => {
      events.push(`${name}+`)
      await sleep(ms)
      events.push(`${name}-`)
    })
  await Promise.all([job(cid(1), 'a', 30), job(cid(1), 'b', 1), job(cid(2), 'c', 1)])
  t.deepEqual(events.slice().sort(), ['a+', 'a-', 'b+', 'b-', 'c+', 'c-'])
  t.true(events.indexOf('a-') < events.indexOf('b+'), 'same chunk waits')
  t.true(events.indexOf('c-') < events.indexOf('a-'), 'other chunk does not')
  t.false(engine.isChunkLocked(cid(1)))
  // engine calls inside the lock do not deadlock
  await engine.withChunkLock(cid(3), () => writeCommit(engine, cid(3), 0, pattern(10, 1)))
  t.is(engine.getMeta(cid(3))!.commitVer, 1)
})

test('close is idempotent and later calls fail with CLOSED', async (t) => {
  const { engine } = await setup(t)
  const w = engine.applyUpdate(writeIO(cid(1), 0, pattern(10, 1)), client())
  const c1 = engine.close()
  const c2 = engine.close()
  await Promise.all([c1, c2])
  await t.notThrowsAsync(w) // admitted before close, allowed to finish
  await rejectsWith(t, engine.applyUpdate(writeIO(cid(1), 0, pattern(10, 1)), client()), 'CLOSED')
  await rejectsWith(t, engine.read(cid(1), 0, 10), 'CLOSED')
  t.throws(() => engine.getMeta(cid(1)), { message: /CLOSED/ })
})

// ---------------------------------------------------------------- model check

test('random updates match an in-memory model (content, size, checksum, versions)', async (t) => {
  const fx = await setup(t)
  let engine = fx.engine
  const SIZE = 16 * 1024
  const ids = [cid(1), cid(2), cid(3)]
  type M = { committed: Buffer; latest: Buffer; v: number; u: number }
  const model = new Map<string, M>()
  let seed = 12345
  const rnd = (n: number) => {
    // xorshift32: the low bits of a power-of-two LCG cycle too fast for small moduli
    seed ^= seed << 13
    seed ^= seed >>> 17
    seed ^= seed << 5
    return (seed >>> 0) % n
  }
  for (let step = 0; step < 600; step++) {
    const id = ids[rnd(ids.length)]!
    const key = id.toString('hex')
    const m = model.get(key)
    const pending = m && m.v !== m.u
    const roll = rnd(100)
    if (pending && roll < 50) {
      await engine.commit(id, m.u, 1)
      m.committed = m.latest
      m.v = m.u
    } else if (roll < 60 && step % 7 === 0) {
      engine = await fx.reopen()
    } else {
      // forwarded so a pending update can be replaced (w = u + 1)
      const u = (m?.u ?? 0) + 1
      const cur = m?.latest ?? Buffer.alloc(0)
      let next: Buffer
      const kind = rnd(10)
      if (kind < 6) {
        const off = [0, cur.length, rnd(SIZE), Math.max(0, cur.length - rnd(100))][rnd(4)]!
        const len = Math.min(SIZE - off, 1 + rnd(kind < 2 ? SIZE : 3000))
        if (len <= 0 || off >= SIZE) continue
        const data = randomBytes(len)
        await engine.applyUpdate(writeIO(id, off, data, { updateVer: u, chunkSize: SIZE }), forwarded())
        next = Buffer.alloc(Math.max(cur.length, off + len))
        cur.copy(next)
        data.copy(next, off)
      } else if (kind < 8) {
        const len = rnd(SIZE + 1)
        await engine.applyUpdate(opIO(id, 'TRUNCATE', len, { updateVer: u, chunkSize: SIZE }), forwarded())
        next = Buffer.alloc(len)
        cur.copy(next, 0, 0, Math.min(len, cur.length))
      } else {
        const len = rnd(SIZE + 1)
        await engine.applyUpdate(opIO(id, 'EXTEND', len, { updateVer: u, chunkSize: SIZE }), forwarded())
        next = Buffer.alloc(Math.max(len, cur.length))
        cur.copy(next)
      }
      model.set(key, { committed: m?.committed ?? Buffer.alloc(0), latest: next, v: m?.v ?? 0, u })
    }
    // check every chunk after every step
    for (const cidb of ids) {
      const mm = model.get(cidb.toString('hex'))
      const meta = engine.getMeta(cidb)
      if (!mm) {
        t.is(meta, null)
        continue
      }
      t.like(meta, { commitVer: mm.v, updateVer: mm.u, size: mm.latest.length, checksum: crc(mm.latest) }, `step ${step}`)
      const latest = await engine.readWholeChunk(cidb, { includePending: true })
      if (!latest.data.equals(mm.latest)) t.fail(`step ${step}: latest content differs`)
      if (mm.v === mm.u) {
        const r = await engine.read(cidb, 0, SIZE, { verifyChecksum: true })
        if (!r.data.equals(mm.latest)) t.fail(`step ${step}: committed read differs`)
      } else {
        const committed = await engine.readWholeChunk(cidb, { includePending: false })
        if (committed.checksum !== crc(committed.data)) t.fail(`step ${step}: committed checksum`)
      }
    }
  }
  // file count bound: committed + pending
  for (const id of ids) t.true((await chunkFiles(fx.dir, id)).length <= 2)
})

test('chunk data writes of 64 KiB and more at 4 KiB alignment go past the page cache (O_DIRECT); the rest, and a filesystem refusing it, stay buffered', async (t) => {
  const MiB = 1024 * 1024
  const fx = await setup(t)
  const models = new Map<number, Buffer>()
  // what the chunk's data file gets written is what counts: a write into a
  // committed chunk may become a whole-chunk rewrite (copy on write)
  const put = async (n: number, offset: number, data: Buffer, expect: { direct: number; buffered: number }, what: string) => {
    const id = cid(900 + n)
    const r = await fx.engine.applyUpdate(writeIO(id, offset, data, { chunkSize: MiB }), client())
    await fx.engine.commit(id, r.updateVer, 1)
    const old = models.get(n) ?? Buffer.alloc(0)
    const m = Buffer.alloc(Math.max(old.length, offset + data.length))
    old.copy(m)
    data.copy(m, offset)
    models.set(n, m)
    t.true((await fx.engine.read(id, 0, m.length)).data.equals(m), `${what}: content`)
    t.deepEqual(fx.engine.dataWrites, expect, `${what}: how it was written`)
  }
  await put(1, 0, randomBytes(MiB), { direct: 1, buffered: 0 }, 'new whole chunk')
  await put(1, 256 * 1024, randomBytes(128 * 1024), { direct: 2, buffered: 0 }, 'aligned 128 KiB into it')
  await put(2, 0, randomBytes(100 * 1024 + 5), { direct: 2, buffered: 1 }, 'length off the alignment')
  await put(3, 4000, randomBytes(64 * 1024), { direct: 2, buffered: 2 }, 'offset off the alignment')
  await put(4, 0, randomBytes(4096), { direct: 2, buffered: 3 }, 'below 64 KiB')
  await put(4, 4096, randomBytes(MiB / 2), { direct: 3, buffered: 3 }, 'aligned append')
  fx.engine.faults.refuseDirect = true
  await put(5, 0, randomBytes(MiB), { direct: 3, buffered: 4 }, 'O_DIRECT refused')
  fx.engine.faults.refuseDirect = false
  await put(6, 0, randomBytes(MiB), { direct: 3, buffered: 5 }, 'after a refusal writes stay buffered')
  const again = await fx.reopen()
  for (const [n, m] of models) t.true((await again.read(cid(900 + n), 0, m.length)).data.equals(m), `chunk ${n} after reopen`)

  const off = await setup(t, { directWrites: false })
  const data = models.get(1)!
  const r = await off.engine.applyUpdate(writeIO(cid(1), 0, data, { chunkSize: MiB }), client())
  await off.engine.commit(cid(1), r.updateVer, 1)
  t.deepEqual(off.engine.dataWrites, { direct: 0, buffered: 1 }, 'directWrites: false')
  t.true((await off.engine.read(cid(1), 0, MiB)).data.equals(data))

  // data already in aligned memory goes to the disk as it is; anywhere else it is copied first
  const { engine } = await setup(t)
  const aligned = native().alignedBuffer(MiB, 4096)
  randomBytes(MiB).copy(aligned)
  const unaligned = Buffer.concat([Buffer.alloc(1), aligned]).subarray(1)
  for (const [n, buf, copies] of [[1, aligned, 0], [2, unaligned, 1]] as const) {
    const u = await engine.applyUpdate(writeIO(cid(n), 0, buf, { chunkSize: MiB }), client())
    await engine.commit(cid(n), u.updateVer, 1)
    t.true((await engine.read(cid(n), 0, MiB)).data.equals(aligned))
    t.is(engine.directCopies, copies, n === 1 ? 'no copy for aligned memory' : 'one copy for unaligned memory')
  }
  t.deepEqual(engine.dataWrites, { direct: 2, buffered: 0 })
})
