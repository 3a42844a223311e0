// Whole-chunk read-ahead of the FUSE daemon (fs/fuse/read-ahead.ts) against
// an in-memory file: what it serves equals the file, it engages only for a
// streaming reader, and it never serves beyond what it fetched, past its
// budget, after clear/close, or after a failed fetch.
import test from 'ava'
import crypto from 'node:crypto'
import { StrataError } from '../../../fs/common/errors.js'
import { READ_AHEAD_DEFAULTS, ReadAhead, ReadAheadBudget, type ReadAheadOptions, type ReadAheadStats } from '../../../fs/fuse/read-ahead.js'
import type { NativeChunkTable } from '../../../fs/fuse/fast-reads.js'

const KiB = 1024
const MiB = 1024 * KiB
const REQ = 128 * KiB

interface Fixture {
  file: { data: Buffer }
  ra: ReadAhead
  budget: ReadAheadBudget
  stats: ReadAheadStats
  fetched: Array<[number, number]>
  fail: { next: boolean; with?: Error }
}

// Chunks age out after maxAgeMs (1 s by default). On a loaded CI machine this
// process can stall longer than that between a fetch and its use, and the
// chunk is fetched again: the fixtures use a bound no stall reaches, except
// where aging itself is what a test checks (it passes its own).
const TEST_MAX_AGE_MS = 10 * 60_000

function fixture(size: number, opts: Partial<ReadAheadOptions> = {}, chunkSize = MiB): Fixture {
  const file = { data: crypto.randomBytes(size) }
  const fetched: Array<[number, number]> = []
  const fail: Fixture['fail'] = { next: false }
  const stats: ReadAheadStats = { hits: 0, fetches: 0, direct: 0 }
  const o = { ...READ_AHEAD_DEFAULTS, maxAgeMs: TEST_MAX_AGE_MS, ...opts }
  const budget = new ReadAheadBudget(o.budgetBytes)
  const ra = new ReadAhead(chunkSize, async (pos, len) => {
    fetched.push([pos, len])
    await new Promise((r) => setImmediate(r))
    if (fail.next) {
      fail.next = false
      throw fail.with ?? new Error('storage down')
    }
    return Buffer.from(file.data.subarray(pos, Math.min(pos + len, file.data.length)))
  }, budget, o, stats, () => file.data.length)
  return { file, ra, budget, stats, fetched, fail }
}

/** What the FUSE op does: what read-ahead serves, the rest from the file itself (the direct read). */
async function read(f: Fixture, pos: number, len: number): Promise<{ bytes: Buffer; fromRa: boolean; served: number }> {
  const dst = Buffer.alloc(len)
  const served = await f.ra.read(pos, dst)
  const rest = Buffer.from(f.file.data.subarray(Math.min(pos + served, f.file.data.length), Math.min(pos + len, f.file.data.length)))
  rest.copy(dst, served)
  return { bytes: dst.subarray(0, served + rest.length), fromRa: served > 0, served }
}

test('a streaming reader is served from whole-chunk fetches, byte for byte, with a chunk fetched ahead', async (t) => {
  const size = 5 * MiB + 12345
  const f = fixture(size)
  const out: Buffer[] = []
  for (let pos = 0; pos < size; pos += REQ) out.push((await read(f, pos, REQ)).bytes)
  t.true(Buffer.concat(out).equals(f.file.data))
  // the first request goes to storage; with the second the reader streams, and a few fetches cover the rest instead of ~40 requests
  t.true(f.stats.hits >= 30, JSON.stringify(f.stats))
  t.true(f.fetched.length <= 7, JSON.stringify(f.fetched))
  // nothing fetched twice, nothing before the reader's position
  const starts = f.fetched.map(([p]) => p)
  t.deepEqual(starts, [...new Set(starts)].sort((a, b) => a - b))
  t.true(f.fetched.every(([p, l]) => p >= REQ && (p + l) % MiB === 0), JSON.stringify(f.fetched))
})

test('requests of one streaming reader that arrive out of order are still served from the fetched data', async (t) => {
  const size = 4 * MiB
  const f = fixture(size)
  for (let pos = 0; pos < MiB; pos += REQ) await read(f, pos, REQ)
  // the kernel sends several at once: the next chunk's requests in a shuffled order, concurrently
  const order = [5, 2, 7, 0, 1, 6, 3, 4].map((i) => MiB + i * REQ)
  const results = await Promise.all(order.map((pos) => read(f, pos, REQ)))
  for (const [i, pos] of order.entries()) t.true(results[i]!.bytes.equals(f.file.data.subarray(pos, pos + REQ)), `at ${pos}`)
  t.true(results.filter((r) => r.fromRa).length >= 6, 'most served from read-ahead')
})

test('a deep kernel readahead (12 requests in flight, shuffled): each chunk is fetched once, whole, and every request is served from it', async (t) => {
  const size = 24 * MiB
  const f = fixture(size)
  const out = Buffer.alloc(size)
  // the kernel's readahead starts small: the first 2 MiB one request at a time
  const warm = 2 * MiB
  for (let pos = 0; pos < warm; pos += REQ) (await read(f, pos, REQ)).bytes.copy(out, pos)
  const before = { ...f.stats }
  const fetchedBefore = f.fetched.length
  // then up to 12 READs in flight, which libfuse threads hand over in any order
  const reqs: number[] = []
  for (let pos = warm; pos < size; pos += REQ) reqs.push(pos)
  for (let i = 0; i < reqs.length; i += 12) {
    const batch = reqs.slice(i, i + 12).sort(() => Math.random() - 0.5)
    await Promise.all(batch.map(async (pos) => (await read(f, pos, REQ)).bytes.copy(out, pos)))
  }
  t.true(out.equals(f.file.data))
  t.is(f.stats.direct, before.direct, JSON.stringify({ before, after: f.stats }))
  t.is(f.stats.hits - before.hits, reqs.length)
  const perChunk = new Map<number, number>()
  for (const [p, l] of f.fetched) {
    t.is((p + l) % MiB, 0)
    perChunk.set(Math.floor(p / MiB), (perChunk.get(Math.floor(p / MiB)) ?? 0) + 1)
  }
  t.true([...perChunk.values()].every((n) => n === 1), JSON.stringify(f.fetched))
  t.true(f.fetched.slice(fetchedBefore).every(([p, l]) => p % MiB === 0 && l === MiB), 'later chunks are fetched whole')
  t.true(f.fetched.every(([p, l]) => p + l <= size), 'nothing fetched past the end of the file')
  // wholly served chunks give their memory back; the run's first chunk, partly read from storage, may linger until it ages out
  t.true(f.budget.used <= MiB, `${f.budget.used} bytes still held`)
})

test('random readers and short runs go to storage; nothing is fetched for them', async (t) => {
  const f = fixture(64 * MiB)
  for (let i = 0; i < 200; i++) {
    const pos = crypto.randomInt(0, 64 * MiB / (4 * KiB)) * 4 * KiB
    const r = await read(f, pos, 4 * KiB)
    t.false(r.fromRa)
    t.true(r.bytes.equals(f.file.data.subarray(pos, pos + 4 * KiB)))
  }
  // runs of 128 KiB scattered over the file (a file-backed EROFS layer read by the kernel)
  for (let i = 0; i < 50; i++) {
    const pos = ((i * 7) % 50) * MiB + ((i * 3) % 7) * REQ
    await read(f, pos, REQ)
  }
  t.deepEqual(f.fetched, [])
})

test('the end of the file: served up to what was fetched; a file that grew later is read from storage', async (t) => {
  const size = MiB + 200 * KiB
  const f = fixture(size)
  const out: Buffer[] = []
  for (let pos = 0; pos < size; pos += REQ) out.push((await read(f, pos, REQ)).bytes)
  t.true(Buffer.concat(out).equals(f.file.data))
  // the file grows after the last chunk was fetched: the part beyond is not served from the old data
  const more = crypto.randomBytes(300 * KiB)
  f.file.data = Buffer.concat([f.file.data, more])
  const pos = Math.floor(size / REQ) * REQ
  const r = await read(f, pos, REQ)
  t.true(r.bytes.equals(f.file.data.subarray(pos, pos + r.bytes.length)))
  // wholly served chunks are let go, so the re-read above fetched again: what lies beyond is the new data
  const beyond = await read(f, size, REQ)
  t.true(beyond.bytes.equals(more.subarray(0, REQ)))
})

test('budget, age, clear, close and a failed fetch: the read goes to storage', async (t) => {
  // no budget: never served from read-ahead
  const poor = fixture(4 * MiB, { budgetBytes: 64 * KiB })
  for (let pos = 0; pos < 4 * MiB; pos += REQ) t.false((await read(poor, pos, REQ)).fromRa)
  t.is(poor.budget.used, 0)

  // expired data is fetched again
  const f = fixture(8 * MiB, { maxAgeMs: 1 })
  for (let pos = 0; pos < 512 * KiB; pos += REQ) await read(f, pos, REQ)
  const before = f.fetched.length
  await new Promise((r) => setTimeout(r, 20))
  const r = await read(f, 512 * KiB, REQ)
  t.true(r.bytes.equals(f.file.data.subarray(512 * KiB, 640 * KiB)))
  t.true(f.fetched.length > before, 'fetched again after maxAgeMs')

  // clear: the file changed; the next read sees the new bytes
  const g = fixture(4 * MiB)
  for (let pos = 0; pos < 512 * KiB; pos += REQ) await read(g, pos, REQ)
  g.file.data = crypto.randomBytes(4 * MiB)
  g.ra.clear()
  t.is(g.budget.used, 0)
  const after = await read(g, 512 * KiB, REQ)
  t.true(after.bytes.equals(g.file.data.subarray(512 * KiB, 640 * KiB)))

  // a fetch that fails: that request goes to storage, the next one may fetch again
  const h = fixture(4 * MiB)
  await read(h, 0, REQ)
  h.fail.next = true
  const failed = await read(h, REQ, REQ)
  t.false(failed.fromRa)
  t.true(failed.bytes.equals(h.file.data.subarray(REQ, 2 * REQ)))
  t.is(h.fetched.length, 1, 'the second request started a fetch, which failed')
  const again = await read(h, 2 * REQ, REQ)
  t.true(again.fromRa)
  t.true(again.bytes.equals(h.file.data.subarray(2 * REQ, 3 * REQ)))

  // closed: nothing served, nothing held
  h.ra.close()
  t.false((await read(h, 512 * KiB, REQ)).fromRa)
  t.is(h.budget.used, 0)
})

test('chunks smaller than a request (64 KiB chunks, 128 KiB requests): every request is answered whole, spanning chunks', async (t) => {
  const size = 3 * MiB + 777
  const f = fixture(size, {}, 64 * KiB)
  const out: Buffer[] = []
  for (let pos = 0; pos < size; pos += REQ) {
    const r = await read(f, pos, REQ)
    t.is(r.bytes.length, Math.min(REQ, size - pos), `a whole answer at ${pos}`)
    out.push(r.bytes)
  }
  t.true(Buffer.concat(out).equals(f.file.data))
  t.true(f.stats.hits > 10)
  // random long reads over the same file (scenario 15 of the FUSE tests does this through the kernel)
  for (let i = 0; i < 100; i++) {
    const pos = crypto.randomInt(0, size)
    const len = crypto.randomInt(1, 2 * MiB)
    const parts: Buffer[] = []
    for (let p = pos; p < Math.min(pos + len, size); p += REQ) parts.push((await read(f, p, Math.min(REQ, pos + len - p))).bytes)
    t.true(Buffer.concat(parts).equals(f.file.data.subarray(pos, Math.min(pos + len, size))), `read [${pos}, +${len})`)
  }
})

test('a fetch the storage client gave up on (a retryable code after its whole budget) fails the read instead of waiting again', async (t) => {
  const f = fixture(4 * MiB)
  await read(f, 0, REQ)
  f.fail.next = true
  f.fail.with = new StrataError('CHAIN_UNAVAILABLE', 'chain 1 has no serving target (gave up after 60 attempts)')
  const e = await t.throwsAsync(f.ra.read(REQ, Buffer.alloc(REQ)))
  t.is((e as StrataError).code, 'CHAIN_UNAVAILABLE')
  t.is(f.fetched.length, 1)
  // storage back: the next request fetches again
  const again = await read(f, 2 * REQ, REQ)
  t.true(again.fromRa)
  t.true(again.bytes.equals(f.file.data.subarray(2 * REQ, 3 * REQ)))
})

/**
 * A model of the addon's chunk table (native/fuse/fuse-native.c, change 2):
 * `serve` is what a libfuse thread does with a READ before it asks
 * JavaScript; progress is announced after a chunk's first and last bytes,
 * later (coalesced), as the addon's async notification is.
 */
class FakeTable implements NativeChunkTable {
  readonly slots = new Map<number, { fh: number; start: number; data: Buffer; expires: number; served: number; need: number; onProgress: () => void }>()
  readonly ttls: number[] = []
  taken = 0
  #next = 0
  constructor(readonly capacity = 256) {}
  put(fh: number, start: number, data: Buffer, ttlMs: number, need: number, onProgress: () => void): number {
    if (this.slots.size >= this.capacity) return -1
    const slot = this.#next++
    this.ttls.push(ttlMs)
    this.slots.set(slot, { fh, start, data, expires: performance.now() + ttlMs, served: 0, need, onProgress })
    return slot
  }
  take(slot: number): number {
    const s = this.slots.get(slot)
    if (!s) return 0
    this.slots.delete(slot)
    this.taken++
    return s.served
  }
  setNeed(slot: number, need: number): void {
    const s = this.slots.get(slot)
    if (s) s.need = need
  }
  served(slot: number): number {
    return this.slots.get(slot)?.served ?? 0
  }
  /** A libfuse thread: bytes served into dst from a slot wholly covering the request, or -1. */
  serve(fh: number, pos: number, dst: Buffer): number {
    for (const s of this.slots.values()) {
      if (s.fh !== fh || pos < s.start || pos + dst.length > s.start + s.data.length) continue
      if (performance.now() >= s.expires) return -1
      s.data.copy(dst, 0, pos - s.start, pos - s.start + dst.length)
      const before = s.served
      s.served += dst.length
      if (before === 0 || (before < s.need && s.served >= s.need)) setImmediate(s.onProgress)
      return dst.length
    }
    return -1
  }
}

function nativeFixture(size: number, table: FakeTable, opts: Partial<ReadAheadOptions> = {}, chunkSize = MiB) {
  const file = { data: crypto.randomBytes(size) }
  const fetched: Array<[number, number]> = []
  const released: Buffer[] = []
  const stats: ReadAheadStats = { hits: 0, fetches: 0, direct: 0 }
  const o = { ...READ_AHEAD_DEFAULTS, maxAgeMs: TEST_MAX_AGE_MS, ...opts }
  const budget = new ReadAheadBudget(o.budgetBytes)
  const ra = new ReadAhead(
    chunkSize,
    async (pos, len) => {
      fetched.push([pos, len])
      await new Promise((r) => setImmediate(r))
      return Buffer.from(file.data.subarray(pos, Math.min(pos + len, file.data.length)))
    },
    budget,
    o,
    stats,
    () => file.data.length,
    (b) => {
      // a buffer goes back to its pool only once no thread can copy from it
      for (const s of table.slots.values()) if (s.data === b) throw new Error('released while still in the native table')
      released.push(b)
    },
    { table, fh: 7 },
  )
  let native = 0
  const readOne = async (pos: number, len: number): Promise<Buffer> => {
    const dst = Buffer.alloc(len)
    if (table.serve(7, pos, dst) === len) {
      native++
      return dst
    }
    const served = await ra.read(pos, dst)
    Buffer.from(file.data.subarray(pos + served, Math.min(pos + len, file.data.length))).copy(dst, served)
    return dst.subarray(0, Math.min(len, file.data.length - pos))
  }
  return { file, ra, budget, stats, fetched, released, readOne, native: () => native }
}

test('chunks in the native table: libfuse threads serve most of a stream, its progress opens the window, every slot is taken back before its buffer is reused', async (t) => {
  const table = new FakeTable()
  const size = 12 * MiB + 4321
  const f = nativeFixture(size, table)
  const out: Buffer[] = []
  for (let pos = 0; pos < size; pos += REQ) {
    out.push(await f.readOne(pos, REQ))
    // the addon's notifications run between READs, as on the event loop
    await new Promise((r) => setImmediate(r))
  }
  t.true(Buffer.concat(out).equals(f.file.data))
  const reqs = Math.ceil(size / REQ)
  // all but the first requests of the stream and each chunk's first (before its fetch was registered) are native
  t.true(f.native() >= reqs - 20, `${f.native()} of ${reqs} served natively; stats ${JSON.stringify(f.stats)}`)
  // each chunk fetched once, whole after the first, although JavaScript saw few requests
  const starts = f.fetched.map(([p]) => p)
  t.deepEqual(starts, [...new Set(starts)].sort((a, b) => a - b))
  t.true(f.fetched.length <= 13, JSON.stringify(f.fetched))
  // wholly served chunks were let go as the stream went on: only the tail's may still be held
  t.true(table.slots.size <= 2, `${table.slots.size} slots still held`)
  // the table is told how long each chunk may be served: never longer than maxAgeMs
  t.true(table.ttls.length > 0 && table.ttls.every((ms) => ms > 0 && ms <= TEST_MAX_AGE_MS), JSON.stringify(table.ttls))
  f.ra.close()
  t.is(table.slots.size, 0)
  t.is(f.budget.used, 0)
  await new Promise((r) => setImmediate(r))
  t.true(f.released.length >= f.fetched.length - 1)
})

test('clear() takes every chunk out of the native table at once: the next READ reaches JavaScript and sees the new bytes', async (t) => {
  const table = new FakeTable()
  const f = nativeFixture(8 * MiB, table)
  for (let pos = 0; pos < 2 * MiB; pos += REQ) {
    await f.readOne(pos, REQ)
    await new Promise((r) => setImmediate(r))
  }
  t.true(table.slots.size > 0, 'chunks ahead were registered')
  f.file.data = crypto.randomBytes(8 * MiB)
  f.ra.clear()
  t.is(table.slots.size, 0)
  const dst = Buffer.alloc(REQ)
  t.is(table.serve(7, 3 * MiB, dst), -1, 'nothing is served natively after clear')
  t.true((await f.readOne(3 * MiB, REQ)).equals(f.file.data.subarray(3 * MiB, 3 * MiB + REQ)))
  f.ra.close()
})

test('a full native table leaves chunks to JavaScript; an expired registration is not served', async (t) => {
  const full = new FakeTable(0)
  const f = nativeFixture(6 * MiB, full)
  const out: Buffer[] = []
  for (let pos = 0; pos < 6 * MiB; pos += REQ) out.push(await f.readOne(pos, REQ))
  t.true(Buffer.concat(out).equals(f.file.data))
  t.is(f.native(), 0)
  t.true(f.stats.hits > 30, 'JavaScript served the stream from read-ahead')
  f.ra.close()

  const table = new FakeTable()
  const g = nativeFixture(6 * MiB, table, { maxAgeMs: 30 })
  for (let pos = 0; pos < 2 * MiB; pos += REQ) {
    await g.readOne(pos, REQ)
    await new Promise((r) => setImmediate(r))
  }
  await new Promise((r) => setTimeout(r, 50))
  const dst = Buffer.alloc(REQ)
  t.is(table.serve(7, 3 * MiB, dst), -1, 'past its freshness a chunk is not served natively')
  t.true((await g.readOne(3 * MiB, REQ)).equals(g.file.data.subarray(3 * MiB, 3 * MiB + REQ)))
  g.ra.close()
  t.is(table.slots.size, 0)
})

test('READs not aligned to chunks (every chunk ends in a request that spans two): the window keeps opening on native progress, nothing is read piecemeal', async (t) => {
  const table = new FakeTable()
  const size = 16 * MiB
  const f = nativeFixture(size, table, {}, 4 * MiB)
  const out: Buffer[] = []
  // a kernel whose cached pages shifted its READs by 16 KiB
  out.push(await f.readOne(0, 16 * KiB))
  for (let pos = 16 * KiB; pos < size; pos += REQ) {
    out.push(await f.readOne(pos, Math.min(REQ, size - pos)))
    await new Promise((r) => setImmediate(r))
  }
  t.true(Buffer.concat(out).equals(f.file.data))
  // the run's first requests and the spanning ones reach JavaScript; none of them goes to storage piece by piece
  t.true(f.stats.direct <= 3, JSON.stringify([f.stats, f.fetched]))
  t.true(f.fetched.length <= 5, JSON.stringify(f.fetched))
  f.ra.close()
  t.is(table.slots.size, 0)
})

test('a short run in a big chunk (768 KiB of 4 MiB, as a cold sandbox start reads its layer): pieces that double with the run, nothing past the chunk', async (t) => {
  const table = new FakeTable()
  const f = nativeFixture(16 * MiB, table, {}, 4 * MiB)
  for (let pos = 0; pos < 768 * KiB; pos += REQ) {
    await f.readOne(pos, REQ)
    await new Promise((r) => setImmediate(r))
  }
  t.true(f.native() > 0, 'some READs were served natively')
  // from the reader's position once the run is 256 KiB: 512 KiB, then twice the run so far (1.5 MiB)
  t.deepEqual(f.fetched, [
    [REQ, 512 * KiB],
    [640 * KiB, 1536 * KiB],
  ])
  const bytes = f.fetched.reduce((n, [, len]) => n + len, 0)
  t.true(bytes < 4 * MiB - REQ, 'less than the rest of the chunk, which a whole-chunk fetch would have read')
  f.ra.close()
  t.is(table.slots.size, 0)
})
