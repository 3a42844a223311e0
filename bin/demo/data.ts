// Stage 2: the data path through StorageClient. Bulk: N × 1 MiB chunks
// spread round-robin over the chains of the chain table (as a file's stripe
// would place them), written with several in flight, read back in batches
// and compared byte for byte. Small: bursts of 4 KiB writes, first one at a
// time (latency), then many in flight (IOPS), read back and compared too.
//
// Chunk contents are an AES-CTR keystream keyed by (inode, chunk index), so
// any chunk can be regenerated for verification without keeping the data
// around (the demo may write gigabytes).

import { createCipheriv } from 'node:crypto'
import { chunkIdOf } from '../../fs/common/chunk-id.js'
import type { DemoCluster } from './cluster.js'
import { runPool, summarize, type LatencySummary } from './latency.js'

export const BULK_INODE = 0x5354_5241_0001n
export const SMALL_INODE = 0x5354_5241_0002n
export const SMALL_BLOCK = 4096

const KEY = Buffer.from('strata-demo-key!')
const ZEROS = new Map<number, Buffer>()

/** Deterministic pseudo-random bytes [0, length) of chunk `index` of `inode`. */
export function pattern(inode: bigint, index: number, length: number): Buffer {
  const iv = Buffer.alloc(16)
  iv.writeBigUInt64BE(inode, 0)
  iv.writeUInt32BE(index, 8)
  let zeros = ZEROS.get(length)
  if (!zeros) ZEROS.set(length, (zeros = Buffer.alloc(length)))
  const c = createCipheriv('aes-128-ctr', KEY, iv)
  return Buffer.concat([c.update(zeros), c.final()])
}

/** Chunk i of a file goes to chain i mod chains (a stripe over the whole table). */
export function chainFor(chains: number[], index: number): number {
  return chains[index % chains.length]!
}

export const BULK_WRITE_PARALLEL = 8
const READ_BATCH = 4
const READ_PARALLEL = 4

/** Writes `chunks` full chunks; returns elapsed ms. */
export async function writeBulk(c: DemoCluster, chunks: number, update: (d: string) => void): Promise<number> {
  let done = 0
  const t0 = performance.now()
  await runPool(chunks, BULK_WRITE_PARALLEL, async (i) => {
    const data = pattern(BULK_INODE, i, c.chunkSize)
    await c.client.write(chainFor(c.chains, i), chunkIdOf(BULK_INODE, i), 0, data, c.chunkSize)
    if (++done % 4 === 0 || done === chunks) update(`${done}/${chunks} chunks`)
  })
  return performance.now() - t0
}

/** Reads every bulk chunk back (batched per call) and compares it; returns elapsed ms and mismatches. */
export async function readBulk(c: DemoCluster, chunks: number, update: (d: string) => void): Promise<{ ms: number; mismatched: number[] }> {
  const mismatched: number[] = []
  let done = 0
  const batches = Math.ceil(chunks / READ_BATCH)
  const t0 = performance.now()
  await runPool(batches, READ_PARALLEL, async (b) => {
    const idx = Array.from({ length: Math.min(READ_BATCH, chunks - b * READ_BATCH) }, (_, k) => b * READ_BATCH + k)
    const res = await c.client.batchRead(idx.map((i) => ({ chainId: chainFor(c.chains, i), chunkId: chunkIdOf(BULK_INODE, i), offset: 0, length: c.chunkSize })))
    res.forEach((r, k) => {
      const i = idx[k]!
      if (!r.ok) throw new Error(`reading bulk chunk ${i} failed: ${r.error.message}`)
      if (!r.data.equals(pattern(BULK_INODE, i, c.chunkSize))) mismatched.push(i)
    })
    done += idx.length
    update(`${done}/${chunks} chunks read and compared`)
  })
  return { ms: performance.now() - t0, mismatched }
}

export interface SmallBurst {
  writes: number
  parallel: number
  ms: number
  iops: number
  latency: LatencySummary
}

export interface BurstPlan {
  /** at most this many writes… */
  writes: number
  /** …and no new ones after this long */
  maxMs: number
  parallel: number
  firstChunk: number
  nChunks: number
}

/**
 * Up to `writes` 4 KiB writes over chunks [firstChunk, firstChunk + nChunks)
 * of the small-writes file: write i lands in chunk firstChunk + i mod nChunks
 * at block ⌊i / nChunks⌋, so every chunk fills from its start and any prefix
 * of the writes leaves each chunk with a contiguous run of blocks.
 */
export async function smallBurst(c: DemoCluster, o: BurstPlan, update: (d: string) => void): Promise<SmallBurst> {
  const perChunk = c.chunkSize / SMALL_BLOCK
  if (o.writes > o.nChunks * perChunk) throw new Error(`${o.writes} writes do not fit in ${o.nChunks} chunks`)
  const contents = new Map<number, Buffer>()
  const contentOf = (k: number) => {
    let b = contents.get(k)
    if (!b) contents.set(k, (b = pattern(SMALL_INODE, k, c.chunkSize)))
    return b
  }
  const lat: number[] = []
  const t0 = performance.now()
  const started = await runPool(
    o.writes,
    o.parallel,
    async (i) => {
      const k = o.firstChunk + (i % o.nChunks)
      const off = Math.floor(i / o.nChunks) * SMALL_BLOCK
      const data = contentOf(k).subarray(off, off + SMALL_BLOCK)
      const s = performance.now()
      await c.client.write(chainFor(c.chains, k), chunkIdOf(SMALL_INODE, k), off, data, c.chunkSize)
      lat.push(performance.now() - s)
      if (lat.length % 16 === 0) update(`${lat.length} writes`)
    },
    t0 + o.maxMs,
  )
  const ms = performance.now() - t0
  return { writes: started, parallel: o.parallel, ms, iops: started / (ms / 1000), latency: summarize(lat) }
}

/** Reads back the chunks a burst wrote and compares the written prefix of each. */
export async function verifySmall(c: DemoCluster, o: { writes: number; firstChunk: number; nChunks: number }): Promise<{ blocks: number; mismatched: number }> {
  const ios = Array.from({ length: o.nChunks }, (_, j) => {
    const k = o.firstChunk + j
    // chunk j received writes j, j + n, j + 2n, … < writes
    const blocks = Math.floor(o.writes / o.nChunks) + (j < o.writes % o.nChunks ? 1 : 0)
    return { k, blocks }
  })
  const res = await c.client.batchRead(ios.map(({ k, blocks }) => ({ chainId: chainFor(c.chains, k), chunkId: chunkIdOf(SMALL_INODE, k), offset: 0, length: blocks * SMALL_BLOCK })))
  let mismatched = 0
  let total = 0
  res.forEach((r, j) => {
    const { k, blocks } = ios[j]!
    if (!r.ok) throw new Error(`reading small-writes chunk ${k} failed: ${r.error.message}`)
    const want = pattern(SMALL_INODE, k, c.chunkSize)
    for (let b = 0; b < blocks; b++) {
      total++
      const off = b * SMALL_BLOCK
      if (!r.data.subarray(off, off + SMALL_BLOCK).equals(want.subarray(off, off + SMALL_BLOCK))) mismatched++
    }
  })
  return { blocks: total, mismatched }
}
