// Baseline (b): local-disk write throughput of the same bytes the DFS write
// benchmark sends (as many files of the chunk size as it writes chunks, from the same
// buffers, with the same number of writes in flight), on the filesystem the
// cluster's data directories live on.
//
// Durability, stated exactly. Per file, "fsync on" does what a storage target
// does to a new chunk's data file with fsync on (the storage default;
// fs/storage/engine/files.ts materialize 'fresh'): open(O_CREAT|O_TRUNC),
// write, fdatasync, close, then fsync of its directory (one of 256 fan-out
// directories, as the engine uses). The engine additionally commits its lmdb
// metadata (a synced transaction) before acknowledging; the baseline has no
// metadata, so it is the cheaper side. "fsync off" is open, write, close:
// page cache only, like a storage daemon started with fsync false.

import fs from 'node:fs'
import { promises as fsp } from 'node:fs'
import path from 'node:path'
import type { BenchContext, Metric } from './lib/types.js'
import { chunkVariant, fmtBytes, fmtRate, runConcurrent, summarize } from './lib/stats.js'

const FANOUT = 256

async function writeFile(file: string, data: Buffer, durable: boolean): Promise<void> {
  const fh = await fsp.open(file, 'w')
  try {
    let done = 0
    while (done < data.length) done += (await fh.write(data, done, data.length - done, done)).bytesWritten
    if (durable) await fh.datasync()
  } finally {
    await fh.close()
  }
  if (durable) {
    const dh = await fsp.open(path.dirname(file), 'r')
    try {
      await dh.sync()
    } finally {
      await dh.close()
    }
  }
}

export async function diskWrite(ctx: BenchContext, durable: boolean, chunkBytes = ctx.sizes.chunkBytes): Promise<Metric> {
  const { writeBytes, writeConcurrency, warmupBytes } = ctx.sizes
  const writeChunks = writeBytes / chunkBytes
  const warmupChunks = warmupBytes / chunkBytes
  const v = chunkVariant(ctx.sizes, chunkBytes)
  const pool = ctx.fixtures.pool(chunkBytes)
  const dir = ctx.fixtures.scratch(`disk-${durable ? 'fsync' : 'nosync'}${v.suffix}`)
  for (let i = 0; i < FANOUT; i++) fs.mkdirSync(path.join(dir, i.toString(16).padStart(2, '0')))
  const fileOf = (i: number) => path.join(dir, (i % FANOUT).toString(16).padStart(2, '0'), `chunk-${i}`)
  // same warm-up as the DFS write gets, on files of their own
  await runConcurrent(warmupChunks, writeConcurrency, (i) => writeFile(fileOf(writeChunks + i), pool[i % pool.length]!, durable))
  // Then the measured files once, unmeasured, and gone again: this VM hands
  // free memory back to its host, so the first pass of a run into new page
  // cache pays a fault per page (3.5–4.2 ms CPU per MiB against 0.8–1.1 on a
  // second pass), which made the baseline swing 365–980 MB/s between runs.
  // The DFS side writes past the page cache (O_DIRECT) and pays none of it.
  await runConcurrent(writeChunks, writeConcurrency, (i) => writeFile(fileOf(i), pool[i % pool.length]!, durable))
  for (let i = 0; i < writeChunks; i++) fs.rmSync(fileOf(i))
  await ctx.fixtures.settle()
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  const lat = await runConcurrent(writeChunks, writeConcurrency, (i) => writeFile(fileOf(i), pool[i % pool.length]!, durable))
  const secs = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  const bytes = writeChunks * chunkBytes
  const cpuMsPerMiB = (cpu.user + cpu.system) / 1000 / (bytes / (1024 * 1024))
  const l = summarize(lat)
  ctx.log(`disk write, ${fmtBytes(chunkBytes)} files, fsync ${durable ? 'on' : 'off'}: ${fmtRate(bytes / secs)} (${cpuMsPerMiB.toFixed(2)} ms CPU/MiB)`)
  fs.rmSync(dir, { recursive: true, force: true })
  return {
    key: `disk.write.${durable ? 'fsync' : 'nosync'}${v.suffix}`,
    label: `local disk write of ${fmtBytes(chunkBytes)} files, fsync ${durable ? 'on (fdatasync + dir fsync per file)' : 'off (page cache)'}`,
    value: bytes / secs,
    unit: 'B/s',
    detail: `${writeChunks} files × ${fmtBytes(chunkBytes)}, ${writeConcurrency} in flight (after ${warmupChunks} warm-up and an unmeasured pass of the same files); per file p50 ${l.p50.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms; ${cpuMsPerMiB.toFixed(2)} ms CPU per MiB`,
    extra: { bytes, seconds: secs, p50Ms: l.p50, p99Ms: l.p99, cpuMsPerMiB },
  }
}

export async function runDisk(ctx: BenchContext): Promise<Metric[]> {
  return [await diskWrite(ctx, true), await diskWrite(ctx, false), await diskWrite(ctx, true, ctx.sizes.altChunkBytes)]
}
