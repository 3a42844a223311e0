// The DFS core under load: replicated (×3, CRAQ) chunk writes and reads
// through StorageClient against a real local cluster of 3 storage processes,
// and 4 KiB write latency. Everything goes through the client's public API
// with its defaults (CRC32C computed on write, verified on read; reads spread
// over all SERVING replicas).
//
// Besides wall-clock rates, every throughput figure carries the CPU time all
// processes involved spent per MiB (client + mgmtd + storage daemons, all
// threads). On a shared 2-core machine that number moves much less with
// whatever else runs than the rate does.

import type { BenchContext, Metric } from './lib/types.js'
import { warmChunkFiles } from './lib/page-cache.js'
import { chunkVariant, fmtBytes, fmtMs, fmtRate, runConcurrent, summarize } from './lib/stats.js'
import { logThreadCpu } from './lib/fixtures.js'

/** STRATA_BENCH_THREADS=1: log each measurement's CPU by process and thread. */
const THREADS = process.env.STRATA_BENCH_THREADS === '1'

const MiB = 1024 * 1024

/** Replicated write throughput: each chunk written once, whole, to a fresh chunk. */
export async function dfsWrite(ctx: BenchContext, fsync: boolean, chunkBytes = ctx.sizes.chunkBytes): Promise<Metric> {
  const { writeBytes, writeConcurrency, warmupBytes } = ctx.sizes
  const writeChunks = writeBytes / chunkBytes
  const warmupChunks = warmupBytes / chunkBytes
  const v = chunkVariant(ctx.sizes, chunkBytes)
  const c = await ctx.fixtures.getCluster(fsync)
  const pool = ctx.fixtures.pool(chunkBytes)
  const write = (inode: bigint, i: number) => c.client.write(c.chains[i % c.chains.length]!, ctx.fixtures.chunkId(inode, i), 0, pool[i % pool.length]!, chunkBytes)
  // warm-up on chunks of their own: connections, JIT, lmdb maps, buffer pools
  const warm = ctx.fixtures.inode()
  await runConcurrent(warmupChunks, writeConcurrency, (i) => write(warm, i))
  const inode = ctx.fixtures.inode()
  await ctx.fixtures.settle()
  const cpu0 = ctx.fixtures.cpuSeconds()
  const threads0 = THREADS ? ctx.fixtures.threadCpu() : null
  const t0 = performance.now()
  const lat = await runConcurrent(writeChunks, writeConcurrency, (i) => write(inode, i))
  const secs = (performance.now() - t0) / 1000
  if (threads0) logThreadCpu(ctx.log, threads0, ctx.fixtures.threadCpu(), (writeChunks * chunkBytes) / MiB)
  const cpuMsPerMiB = ((ctx.fixtures.cpuSeconds() - cpu0) * 1000) / ((writeChunks * chunkBytes) / MiB)
  const bytes = writeChunks * chunkBytes
  ctx.fixtures.datasets.set(chunkBytes, { inode, chunks: writeChunks })
  const l = summarize(lat)
  ctx.log(`dfs write, ${fmtBytes(chunkBytes)} chunks, storage fsync ${fsync ? 'on' : 'off'}: ${fmtRate(bytes / secs)} (p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}; ${cpuMsPerMiB.toFixed(1)} ms CPU/MiB)`)
  return {
    key: `dfs.write.${fsync ? 'fsync' : 'nosync'}${v.suffix}`,
    label: `replicated ×3 chunk write (${v.label}), storage fsync ${fsync ? 'on (default)' : 'off'}`,
    value: bytes / secs,
    unit: 'B/s',
    detail: `${writeChunks} chunks × ${fmtBytes(chunkBytes)} over ${c.chains.length} chains, ${writeConcurrency} in flight (after ${warmupChunks} warm-up); per write p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}; ${cpuMsPerMiB.toFixed(1)} ms CPU per MiB (all processes)`,
    extra: { bytes, seconds: secs, p50Ms: l.p50, p99Ms: l.p99, cpuMsPerMiB },
  }
}

/**
 * Read throughput over the chunks dfsWrite left (written first, unmeasured,
 * when it did not run). `into`: each reader reuses its own buffer
 * (ReadRequest.into, the data is received there by the socket read), as a
 * USRBIO client reads into its registered iov; otherwise every read returns
 * a fresh buffer.
 */
export async function dfsRead(ctx: BenchContext, into = true, chunkBytes = ctx.sizes.chunkBytes): Promise<Metric> {
  const { writeBytes, readPasses, readConcurrency, writeConcurrency } = ctx.sizes
  const writeChunks = writeBytes / chunkBytes
  const v = chunkVariant(ctx.sizes, chunkBytes)
  const c = await ctx.fixtures.getCluster(ctx.fixtures.runningFsync ?? true)
  let ds = ctx.fixtures.datasets.get(chunkBytes)
  const pool = ctx.fixtures.pool(chunkBytes)
  if (!ds) {
    ctx.log(`writing the read data set of ${fmtBytes(chunkBytes)} chunks first (not measured)`)
    const inode = ctx.fixtures.inode()
    await runConcurrent(writeChunks, writeConcurrency, (i) => c.client.write(c.chains[i % c.chains.length]!, ctx.fixtures.chunkId(inode, i), 0, pool[i % pool.length]!, chunkBytes))
    ds = { inode, chunks: writeChunks }
    ctx.fixtures.datasets.set(chunkBytes, ds)
  }
  const { inode, chunks } = ds
  const ids = Array.from({ length: chunks }, (_, i) => ctx.fixtures.chunkId(inode, i))
  const chainOf = (i: number) => c.chains[i % c.chains.length]!
  const bufs = into ? Array.from({ length: readConcurrency }, () => Buffer.alloc(chunkBytes)) : []
  // one unmeasured pass, the same way as the measured ones (so the JIT has compiled that path), checks the bytes, not just the lengths
  await runConcurrent(chunks, readConcurrency, async (i, slot) => {
    const d = await c.client.read(chainOf(i), ids[i]!, 0, chunkBytes, into ? { strict: true, into: bufs[slot]! } : { strict: true })
    if (!d.equals(pool[i % pool.length]!)) throw new Error(`chunk ${i} read back different bytes`)
  })
  // Chunk writes bypass the page cache (O_DIRECT) and that pass read each chunk from one replica only;
  // a load-balanced read may go to any, so every replica's files are read once to make "warm" hold.
  await warmChunkFiles(c.dir)
  const total = chunks * readPasses
  await ctx.fixtures.settle()
  const cpu0 = ctx.fixtures.cpuSeconds()
  const threads0 = THREADS ? ctx.fixtures.threadCpu() : null
  ctx.log(`measuring: ${total} reads of ${fmtBytes(chunkBytes)}, ${readConcurrency} in flight`)
  const t0 = performance.now()
  const lat = await runConcurrent(total, readConcurrency, async (k, slot) => {
    const i = k % chunks
    const d = await c.client.read(chainOf(i), ids[i]!, 0, chunkBytes, into ? { strict: true, into: bufs[slot]! } : { strict: true })
    if (d.length !== chunkBytes) throw new Error(`chunk ${i}: read ${d.length} of ${chunkBytes} bytes`)
  })
  const secs = (performance.now() - t0) / 1000
  const bytes = total * chunkBytes
  if (threads0) logThreadCpu(ctx.log, threads0, ctx.fixtures.threadCpu(), bytes / MiB)
  const cpuMsPerMiB = ((ctx.fixtures.cpuSeconds() - cpu0) * 1000) / (bytes / MiB)
  const l = summarize(lat)
  ctx.log(`dfs read, ${fmtBytes(chunkBytes)} chunks${into ? '' : ' (fresh buffers)'}: ${fmtRate(bytes / secs)} (p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}; ${cpuMsPerMiB.toFixed(2)} ms CPU/MiB)`)
  return {
    key: (into ? 'dfs.read' : 'dfs.read.fresh') + v.suffix,
    label: into ? `replicated chunk read (${v.label}; any replica, CRC32C verified)` : `the same reads (${v.label}), each into a fresh buffer (no \`into\`)`,
    value: bytes / secs,
    unit: 'B/s',
    detail: `${total} reads × ${fmtBytes(chunkBytes)} (${readPasses} passes over ${chunks} chunks, page cache warm), ${readConcurrency} in flight, ${into ? "each received into its reader's reused buffer" : 'each returning a new buffer'}; per read p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}; ${cpuMsPerMiB.toFixed(2)} ms CPU per MiB (all processes)`,
    extra: { bytes, seconds: secs, p50Ms: l.p50, p99Ms: l.p99, cpuMsPerMiB },
  }
}

/**
 * 4 KiB writes appended into 64 KiB chunks. With `concurrency` writes in
 * flight, the in-flight ones always target different chunks (a chunk's
 * writes are serialized by the head anyway) and each chunk is filled in
 * order, so every write is an append as a sequential writer would do.
 */
export async function dfsLatency(ctx: BenchContext, fsync: boolean, concurrency: number): Promise<Metric> {
  const { latencyChunkBytes: chunkSize, latencyIoBytes: io, latencySamples, latencyWarmup } = ctx.sizes
  const c = await ctx.fixtures.getCluster(fsync)
  const inode = ctx.fixtures.inode()
  const perChunk = chunkSize / io
  const data = ctx.fixtures.pool(io)
  const n = latencyWarmup + latencySamples * (concurrency > 1 ? 4 : 1)
  const place = (i: number) => {
    const slot = Math.floor(i / concurrency)
    return { chunk: (i % concurrency) + concurrency * Math.floor(slot / perChunk), offset: (slot % perChunk) * io }
  }
  await ctx.fixtures.settle()
  const t0 = performance.now()
  const lat = await runConcurrent(n, concurrency, (i) => {
    const { chunk, offset } = place(i)
    return c.client.write(c.chains[chunk % c.chains.length]!, ctx.fixtures.chunkId(inode, chunk), offset, data[i % data.length]!, chunkSize)
  })
  const secs = (performance.now() - t0) / 1000
  const l = summarize(lat.slice(latencyWarmup))
  const tag = `${fsync ? 'fsync' : 'nosync'}.qd${concurrency}`
  ctx.log(`dfs 4 KiB write latency, fsync ${fsync ? 'on' : 'off'}, ${concurrency} in flight: p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}`)
  return {
    key: `dfs.lat4k.${tag}`,
    label: `4 KiB write latency, ${concurrency} in flight, storage fsync ${fsync ? 'on' : 'off'}`,
    value: l.p50,
    unit: 'ms',
    detail: `${l.n} writes of ${fmtBytes(io)} appended into ${fmtBytes(chunkSize)} chunks (after ${latencyWarmup} warm-up); p90 ${fmtMs(l.p90)}, max ${fmtMs(l.max)}; ${Math.round(n / secs)} writes/s`,
    extra: { p50Ms: l.p50, p90Ms: l.p90, p99Ms: l.p99, maxMs: l.max, meanMs: l.mean, samples: l.n, opsPerSec: n / secs },
  }
}

