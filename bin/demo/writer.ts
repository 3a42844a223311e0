// The writer that keeps running while a storage node is killed and while it
// resyncs. Several loops, each appending fixed-size blocks to chunks of its
// own (so acknowledgement order is apply order and the expected content of
// every chunk is known exactly), paced to a steady rate. Every write is
// recorded (start, end, ok); verify() reads every chunk back and checks each
// acknowledged block.

import { setTimeout as sleep } from 'node:timers/promises'
import { chunkIdOf, formatChunkId } from '../../fs/common/chunk-id.js'
import type { DemoCluster } from './cluster.js'
import { chainFor, pattern } from './data.js'

export const WRITER_INODE = 0x5354_5241_0003n

export interface WriteRecord {
  loop: number
  /** performance.now() at issue and at completion */
  start: number
  end: number
  ok: boolean
  error?: string
}

export interface WriterOptions {
  loops: number
  blockSize: number
  /** total writes per second over all loops (each loop paced at rate/loops) */
  ratePerSec: number
}

interface Tracked {
  index: number
  chainId: number
  chunkId: Buffer
  /** per block: 0 never written, 1 acknowledged, 2 failed (content unknown) */
  blocks: Uint8Array
}

export interface VerifyResult {
  chunks: number
  acknowledged: number
  intact: number
  lost: number
  /** first few lost blocks */
  examples: string[]
}

export class BackgroundWriter {
  readonly records: WriteRecord[] = []
  private readonly tracked = new Map<number, Tracked>()
  /** per loop: next chunk round and block */
  private readonly cursor: Array<{ round: number; block: number }>
  private running: Promise<void>[] = []
  private stopping = false
  private readonly blocksPerChunk: number

  constructor(
    private readonly c: DemoCluster,
    readonly o: WriterOptions,
  ) {
    if (c.chunkSize % o.blockSize !== 0) throw new Error('block size must divide the chunk size')
    this.blocksPerChunk = c.chunkSize / o.blockSize
    this.cursor = Array.from({ length: o.loops }, () => ({ round: 0, block: 0 }))
  }

  get isRunning(): boolean {
    return this.running.length > 0
  }

  start(): void {
    if (this.running.length) return
    this.stopping = false
    this.running = Array.from({ length: this.o.loops }, (_, w) => this.loop(w))
  }

  /** Stops issuing writes and waits for the ones in flight. */
  async stop(): Promise<void> {
    this.stopping = true
    await Promise.all(this.running)
    this.running = []
  }

  private chunk(loop: number, round: number): Tracked {
    // loop w owns chunks w, w + loops, w + 2·loops, …; consecutive loops alternate chains
    const index = round * this.o.loops + loop
    let t = this.tracked.get(index)
    if (!t) {
      t = { index, chainId: chainFor(this.c.chains, index), chunkId: chunkIdOf(WRITER_INODE, index), blocks: new Uint8Array(this.blocksPerChunk) }
      this.tracked.set(index, t)
    }
    return t
  }

  private async loop(w: number): Promise<void> {
    const interval = (1000 * this.o.loops) / this.o.ratePerSec
    // spread the loops over one interval so they do not fire together
    let next = performance.now() + (interval * w) / this.o.loops
    let contentIndex = -1
    let content: Buffer = Buffer.alloc(0)
    while (!this.stopping) {
      const wait = next - performance.now()
      if (wait > 0) await sleep(wait)
      if (this.stopping) break
      next = Math.max(next + interval, performance.now())
      const cur = this.cursor[w]!
      const t = this.chunk(w, cur.round)
      const off = cur.block * this.o.blockSize
      if (contentIndex !== t.index) {
        contentIndex = t.index
        content = pattern(WRITER_INODE, t.index, this.c.chunkSize)
      }
      const data = content.subarray(off, off + this.o.blockSize)
      const rec: WriteRecord = { loop: w, start: performance.now(), end: 0, ok: false }
      try {
        await this.c.client.write(t.chainId, t.chunkId, off, data, this.c.chunkSize)
        rec.ok = true
        t.blocks[cur.block] = 1
      } catch (e) {
        rec.error = (e as Error).message
        t.blocks[cur.block] = 2
      }
      rec.end = performance.now()
      this.records.push(rec)
      if (++cur.block === this.blocksPerChunk) {
        cur.block = 0
        cur.round++
      }
    }
  }

  acknowledged(): number {
    return this.records.filter((r) => r.ok).length
  }

  /** Reads every chunk written so far and checks every acknowledged block. */
  async verify(): Promise<VerifyResult> {
    const chunks = [...this.tracked.values()].sort((a, b) => a.index - b.index)
    let acknowledged = 0
    let intact = 0
    const examples: string[] = []
    const BATCH = 8
    for (let i = 0; i < chunks.length; i += BATCH) {
      const group = chunks.slice(i, i + BATCH)
      const res = await this.c.client.batchRead(group.map((t) => ({ chainId: t.chainId, chunkId: t.chunkId, offset: 0, length: this.c.chunkSize })))
      res.forEach((r, k) => {
        const t = group[k]!
        if (!r.ok) throw new Error(`reading chunk ${formatChunkId(t.chunkId)} of chain ${t.chainId} failed: ${r.error.message}`)
        const want = pattern(WRITER_INODE, t.index, this.c.chunkSize)
        for (let b = 0; b < t.blocks.length; b++) {
          if (t.blocks[b] !== 1) continue
          acknowledged++
          const off = b * this.o.blockSize
          const got = r.data.subarray(off, off + this.o.blockSize)
          if (got.equals(want.subarray(off, off + this.o.blockSize))) intact++
          else if (examples.length < 5) examples.push(`chunk ${formatChunkId(t.chunkId)} (chain ${t.chainId}) block ${b}: ${got.length ? 'different bytes' : 'missing'}`)
        }
      })
    }
    return { chunks: chunks.length, acknowledged, intact, lost: acknowledged - intact, examples }
  }
}

export interface WindowStats {
  /** writes in flight at some point of the window (issued before its end, finished after its start) */
  writes: number
  acknowledged: number
  failed: number
  maxLatencyMs: number
  p50Ms: number
  /** longest time in the window during which no write was acknowledged */
  maxAckGapMs: number
}

/** Statistics of the writes that overlap [from, to) (performance.now() times). */
export function windowStats(records: readonly WriteRecord[], from: number, to: number): WindowStats {
  const inWindow = records.filter((r) => r.start < to && r.end >= from)
  const lat = inWindow.map((r) => r.end - r.start).sort((a, b) => a - b)
  const acks = inWindow
    .filter((r) => r.ok)
    .map((r) => r.end)
    .sort((a, b) => a - b)
  let gap = 0
  let prev = from
  for (const a of acks) {
    gap = Math.max(gap, a - prev)
    prev = a
  }
  gap = Math.max(gap, to - prev)
  return {
    writes: inWindow.length,
    acknowledged: inWindow.filter((r) => r.ok).length,
    failed: inWindow.filter((r) => !r.ok).length,
    maxLatencyMs: lat.length ? lat[lat.length - 1]! : 0,
    p50Ms: lat.length ? lat[Math.max(0, Math.ceil(lat.length / 2) - 1)]! : 0,
    maxAckGapMs: gap,
  }
}
