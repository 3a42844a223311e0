// batch-io: the fuse-fio workloads through the USRBIO-shaped batch API of the
// file client (fs/client/file/usrbio.ts: createIov, createIor, regFd, prepIo,
// submitIos, waitForIos) in the runner process, against the namespace cluster
// (no FUSE in the path); and the same workloads on a local file with node fs
// (FileHandle.read/write at explicit positions, the same number in flight).
//
// Both sides keep `batchQueueDepth` requests outstanding. On the DFS the ring
// is created with ioDepth = -batchRingDepth and no timeout: whatever is
// queued at a submit goes at once, in batches of at most batchRingDepth
// requests; each batch is one StorageClient.batchRead (one RPC per storage
// node) or parallel chunk writes. Reads land in the iov; writes are sent from
// it. node fs runs its calls on libuv's thread pool (4 threads by default),
// so at most 4 of the local side's requests are in the kernel at once.
//
// Phases, as fuse-fio: seqwrite (1 MiB, then fsync; the fsync is timed),
// seqread.warm (nothing dropped; on the DFS side after one unmeasured read
// pass and every replica's chunk files read once, since storage writes chunk
// data with O_DIRECT), seqread (after drop_caches),
// randread4k with 1 in flight and with batchQueueDepth in flight (each after
// drop_caches, time based, blocks in a random permutation so none is read
// twice). 4 KiB latencies are from prepIo to the completion reaped by
// waitForIos (local: call to resolution). Each sequential read phase runs
// seqReadTrials times, local and DFS alternating: the best trial is the
// figure (the loopback ceiling it is compared with is the best of its own
// trials; a single short trial in one of this VM's slow minutes would be
// set against a ceiling from its fast ones), the median is kept beside it.

import fs from 'node:fs'
import { promises as fsp } from 'node:fs'
import path from 'node:path'
import { FileSystem, createIor, createIov, deregFd, destroyIor, prepIo, regFd, submitIos, waitForIos, type Iov, type RegisteredFd } from '../fs/client/file/index.js'
import type { BenchContext, Metric } from './lib/types.js'
import { fmtBytes, fmtMs, fmtRate, bestTrial, median, summarize, trialsNote } from './lib/stats.js'
import { warmChunkFiles } from './lib/page-cache.js'

const MiB = 1024 * 1024


/** One request of a run: where in the file and how long. */
interface Plan {
  /** more requests to issue? (count or time based) */
  more(i: number): boolean
  offset(i: number): number
  len: number
}

interface RunStats {
  ops: number
  bytes: number
  seconds: number
  lat: number[]
}

/** Deterministic random permutation of [0, n) (xorshift32 Fisher–Yates): the same order on both sides. */
function permutation(n: number, seed = 0x9e3779b9): Uint32Array {
  const a = new Uint32Array(n)
  for (let i = 0; i < n; i++) a[i] = i
  let x = seed >>> 0 || 1
  for (let i = n - 1; i > 0; i--) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    const j = x % (i + 1)
    const t = a[i]!
    a[i] = a[j]!
    a[j] = t
  }
  return a
}

/**
 * Drives one ring with `qd` requests outstanding: prepIo as many as there
 * are free slots, submitIos, reap what finished with waitForIos, repeat.
 * Reads go to slot k of the iov; writes come from `writeOff(i)` of the iov
 * (several writes may send the same bytes at once).
 */
async function ringRun(iov: Iov, fd: RegisteredFd, read: boolean, qd: number, ringDepth: number, plan: Plan, writeOff?: (i: number) => number): Promise<RunStats> {
  const ior = createIor({ entries: qd, forRead: read, ioDepth: -Math.min(ringDepth, qd), timeoutMs: 0 })
  const free = Array.from({ length: qd }, (_, k) => qd - 1 - k)
  const lat: number[] = []
  let next = 0
  let outstanding = 0
  let bytes = 0
  const t0 = performance.now()
  try {
    for (;;) {
      let prepped = 0
      while (outstanding < qd && plan.more(next)) {
        const slot = free.pop()!
        const bufOff = read ? slot * plan.len : writeOff!(next)
        const idx = prepIo(ior, iov, read, bufOff, fd, plan.offset(next), plan.len, { slot, t: performance.now() })
        if (idx < 0) throw new Error(`prepIo failed: ${idx}`)
        outstanding++
        next++
        prepped++
      }
      if (prepped) submitIos(ior)
      if (outstanding === 0) break
      const cqes = await waitForIos(ior, qd, 1)
      const now = performance.now()
      for (const c of cqes) {
        const u = c.userdata as { slot: number; t: number }
        if (c.result < 0) throw new Error(`batch ${read ? 'read' : 'write'} failed: errno ${-c.result}`)
        if (c.result !== plan.len) throw new Error(`short ${read ? 'read' : 'write'}: ${c.result} of ${plan.len} bytes`)
        bytes += c.result
        lat.push(now - u.t)
        free.push(u.slot)
        outstanding--
      }
    }
  } finally {
    destroyIor(ior)
  }
  return { ops: lat.length, bytes, seconds: (performance.now() - t0) / 1000, lat }
}

/** The same with node fs: `qd` positional calls in flight. */
async function localRun(fh: fsp.FileHandle, bufs: Buffer[], read: boolean, qd: number, plan: Plan, writeBuf?: (i: number) => Buffer): Promise<RunStats> {
  const lat: number[] = []
  let next = 0
  let bytes = 0
  const t0 = performance.now()
  const worker = async (slot: number): Promise<void> => {
    while (plan.more(next)) {
      const i = next++
      const t = performance.now()
      const r = read ? await fh.read(bufs[slot]!, 0, plan.len, plan.offset(i)) : await fh.write(writeBuf!(i), 0, plan.len, plan.offset(i))
      const n = 'bytesRead' in r ? r.bytesRead : r.bytesWritten
      if (n !== plan.len) throw new Error(`short local ${read ? 'read' : 'write'}: ${n} of ${plan.len} bytes`)
      bytes += n
      lat.push(performance.now() - t)
    }
  }
  await Promise.all(Array.from({ length: qd }, (_, k) => worker(k)))
  return { ops: lat.length, bytes, seconds: (performance.now() - t0) / 1000, lat }
}

export async function runBatchIo(ctx: BenchContext): Promise<Metric[]> {
  const { ioFileBytes: size, ioSeqBlock: seqBs, ioRandBlock: randBs, randReadSeconds, batchQueueDepth: qd, batchRingDepth: ringDepth, batchAltQueueDepth: altQd } = ctx.sizes
  const ns = await ctx.fixtures.getNamespaceCluster()
  const pool = ctx.fixtures.pool(seqBs)
  const seqBlocks = Math.floor(size / seqBs)
  const randBlocks = Math.floor(size / randBs)
  const perm = permutation(randBlocks)
  const seqPlan: Plan = { more: (i) => i < seqBlocks, offset: (i) => i * seqBs, len: seqBs }
  const randPlan = (): Plan => {
    const deadline = performance.now() + randReadSeconds * 1000
    return { more: (i) => i < randBlocks && performance.now() < deadline, offset: (i) => perm[i]! * randBs, len: randBs }
  }
  // metric key suffix, what it is; sequential reads at both depths, warm first (the write left the file cached)
  const seqRead = (q: number, cold: boolean) => ({ key: `seqread.${cold ? '' : 'warm.'}qd${q}`, read: true, cold, qd: q, rand: false, plan: () => seqPlan, what: `sequential read ${fmtBytes(seqBs)}, ${cold ? 'cold' : 'warm'}, ${q} in flight` })
  const phases: Array<{ key: string; read: boolean; cold: boolean; qd: number; rand: boolean; plan: () => Plan; what: string }> = [
    { key: 'seqwrite', read: false, cold: false, qd, rand: false, plan: () => seqPlan, what: `sequential write ${fmtBytes(seqBs)}, ${qd} in flight` },
    seqRead(qd, false),
    seqRead(altQd, false),
    seqRead(qd, true),
    seqRead(altQd, true),
    { key: 'randread4k.qd1', read: true, cold: true, qd: 1, rand: true, plan: randPlan, what: `random read ${fmtBytes(randBs)}, 1 in flight` },
    { key: `randread4k.qd${qd}`, read: true, cold: true, qd, rand: true, plan: randPlan, what: `random read ${fmtBytes(randBs)}, ${qd} in flight` },
  ]

  // DFS side: a FileSystem client in this process, talking to meta and storage directly
  const dfs = new FileSystem({ mgmtdAddresses: ns.mgmtdAddresses, metaFallbackAddresses: ns.metaAddresses })
  const dfsPath = '/batch-io.dat'
  const writeIov = createIov(pool.length * seqBs)
  pool.forEach((b, k) => b.copy(writeIov.buf, k * seqBs))
  const readIov = createIov(Math.max(qd, altQd) * seqBs)
  // local side
  const localDir = ctx.fixtures.scratch('batch-local')
  const localFile = path.join(localDir, 'batch-io.dat')
  const localBufs = Array.from({ length: Math.max(qd, altQd) }, () => Buffer.alloc(seqBs))

  const metrics: Metric[] = []
  let dfsWriter: Awaited<ReturnType<FileSystem['create']>> | null = null
  let dfsFd: RegisteredFd | null = null
  let localFh: fsp.FileHandle | null = null
  try {
    await dfs.stat('/')
    for (const p of phases) {
      // sequential reads: several trials, the sides alternating, so that both sample the same minutes of this VM
      const trials = p.read && !p.rand ? ctx.sizes.seqReadTrials : 1
      const runs: Record<'local' | 'dfs', Array<{ r: RunStats; cpuSeconds: number; dropped: boolean | null }>> = { local: [], dfs: [] }
      for (let t = 0; t < trials; t++) {
        for (const side of ['local', 'dfs'] as const) {
          let dropped: boolean | null = null
          if (p.cold) dropped = await ctx.fixtures.dropCaches()
          else await ctx.fixtures.settle()
          const cpu0 = side === 'dfs' ? ctx.fixtures.cpuSeconds() : 0
          const own0 = process.cpuUsage()
          let r: RunStats
          if (side === 'dfs') {
            if (!p.read) {
              dfsWriter = await dfs.create(dfsPath, { trunc: true })
              dfsFd = regFd(dfsWriter)
              const t0 = performance.now()
              r = await ringRun(writeIov, dfsFd, false, p.qd, ringDepth, p.plan(), (i) => (i % pool.length) * seqBs)
              await dfs.fsync(dfsWriter)
              r.seconds = (performance.now() - t0) / 1000
              await deregFd(dfsFd)
              await dfsWriter.close()
              dfsWriter = null
              dfsFd = await regFd(dfsPath, dfs, 'r')
              const len = dfsFd.handle.inode.file?.length
              if (len !== seqBlocks * seqBs) throw new Error(`DFS file length ${len} after fsync, expected ${seqBlocks * seqBs}`)
              // one unmeasured read pass (the JIT compiles that path); and storage writes chunk data
              // past its page cache (O_DIRECT), so every replica's files are read into it, as the
              // local side's file is in the page cache after writing
              await ringRun(readIov, dfsFd, true, qd, ringDepth, seqPlan)
              await warmChunkFiles(ns.dir)
            } else {
              r = await ringRun(readIov, dfsFd!, true, p.qd, ringDepth, p.plan())
            }
          } else {
            if (!p.read) {
              const fh = await fsp.open(localFile, 'w')
              const t0 = performance.now()
              r = await localRun(fh, localBufs, false, p.qd, p.plan(), (i) => pool[i % pool.length]!)
              await fh.sync()
              r.seconds = (performance.now() - t0) / 1000
              await fh.close()
              localFh = await fsp.open(localFile, 'r')
            } else {
              r = await localRun(localFh!, localBufs, true, p.qd, p.plan())
            }
          }
          const own = process.cpuUsage(own0)
          // the cluster's idle background over the phase is not the phase's work
          const cpuSeconds = side === 'dfs' ? Math.max(0, ctx.fixtures.cpuSeconds() - cpu0 - ns.idleCpuPerSec * r.seconds) : (own.user + own.system) / 1e6
          runs[side].push({ r, cpuSeconds, dropped })
        }
      }
      for (const side of ['local', 'dfs'] as const) {
        const rates = runs[side].map((x) => x.r.bytes / x.r.seconds)
        const best = bestTrial(rates)
        const { r, cpuSeconds, dropped } = runs[side][best]!
        const cpuMsPerMiB = (cpuSeconds * 1000) / (r.bytes / MiB)
        const cpuMsPerOp = (cpuSeconds * 1000) / Math.max(1, r.ops)
        const l = summarize(r.lat)
        const rate = r.bytes / r.seconds
        const iops = r.ops / r.seconds
        const isRand = p.rand
        const name = side === 'dfs' ? 'Strata batch API' : 'local disk (node fs)'
        const cache = p.cold ? (dropped ? 'page cache dropped first' : 'page cache NOT dropped') : p.read ? (side === 'dfs' ? 'storage page cache warm' : 'file in page cache') : 'fsync at the end, timed'
        const cpuText = isRand ? `${cpuMsPerOp.toFixed(2)} ms CPU per read` : `${cpuMsPerMiB.toFixed(2)} ms CPU per MiB`
        const ofTrials = trials > 1 ? `${trialsNote(rates, 'trials')}: ` : ''
        ctx.log(`batch ${name} ${p.what}: ${isRand ? `${iops.toFixed(0)} IOPS, p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}` : fmtRate(rate)} (${cpuText})${trials > 1 ? `, ${ofTrials.slice(0, -2)}` : ''}`)
        metrics.push({
          key: `batch.${side}.${p.key}`,
          label: `${p.what} — ${name}`,
          value: isRand ? iops : rate,
          unit: isRand ? 'ops/s' : 'B/s',
          detail:
            `${ofTrials}${r.ops} × ${fmtBytes(isRand ? randBs : seqBs)} in ${r.seconds.toFixed(1)} s${isRand ? ` (${fmtRate(rate)})` : ''}, ${p.qd} in flight` +
            `${side === 'dfs' ? `, batches ≤ ${Math.min(ringDepth, p.qd)}` : ''}, ${cache}; per request p50 ${fmtMs(l.p50)}, p99 ${fmtMs(l.p99)}; ` +
            `${cpuText} (${side === 'dfs' ? 'this process + all cluster processes, net of their idle background' : 'this process'})`,
          extra: { bytes: r.bytes, seconds: r.seconds, ops: r.ops, iops, p50Ms: l.p50, p99Ms: l.p99, meanMs: l.mean, cpuMsPerMiB, cpuMsPerOp, ...(trials > 1 ? { medianRate: median(rates), trials } : {}) },
        })
      }
    }
    // unmeasured: the bytes are right, not just the lengths (first and last blocks, both sides)
    const check = [0, 1, seqBlocks - 1]
    const got = await ringRun(readIov, dfsFd!, true, check.length, ringDepth, { more: (i) => i < check.length, offset: (i) => check[i]! * seqBs, len: seqBs })
    if (got.ops !== check.length) throw new Error('verification read incomplete')
    for (let k = 0; k < check.length; k++) {
      // ringRun hands out slots from the top of its free list: request k used slot k
      const want = pool[check[k]! % pool.length]!
      if (!readIov.buf.subarray(k * seqBs, (k + 1) * seqBs).equals(want)) throw new Error(`DFS block ${check[k]} read back different bytes`)
      const lb = Buffer.alloc(seqBs)
      await localFh!.read(lb, 0, seqBs, check[k]! * seqBs)
      if (!lb.equals(want)) throw new Error(`local block ${check[k]} read back different bytes`)
    }
  } finally {
    if (dfsFd) await deregFd(dfsFd).catch(() => undefined)
    if (dfsWriter) await dfsWriter.close().catch(() => undefined)
    await localFh?.close().catch(() => undefined)
    await dfs.unlink(dfsPath).catch(() => undefined)
    await dfs.shutdown().catch(() => undefined)
    fs.rmSync(localDir, { recursive: true, force: true })
  }
  return metrics
}
