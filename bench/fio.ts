// fuse-fio: the same fio jobs through the cluster's FUSE mount (DIR/mnt of
// `cluster up`) and on a local directory of the filesystem the cluster's data
// lives on, one after the other for each phase:
//
//   seqwrite   1 MiB sequential writes of one new file, end_fsync=1 (the
//              fsync is inside the measured time on both sides)
//   seqread    1 MiB sequential reads of that file, twice:
//     .warm    after the write, nothing dropped: on the local side the
//              file is in the page cache; through FUSE fio drops the mount's
//              client-side cache of the file first (see below), so the bytes come
//              from the storage daemons, whose chunk files are in *their*
//              page cache (storage writes chunk data with O_DIRECT, so one
//              unmeasured read of the file through the mount, and a read of
//              every replica's chunk files, put them there): the
//              transport-bound figure
//     (cold)   after `echo 3 > drop_caches` (both sides): from the disk
//   randread   4 KiB random reads, 1 in flight (psync), time based, after
//              drop_caches; fio's random map visits every block at most once
//
// direct=0 everywhere (FUSE here has no direct_io). Cache behaviour of the
// mount: the daemon runs libfuse 2 with auto_cache (since session 19), so the
// kernel keeps an unchanged file's pages across opens, and a second read of
// it through the mount is a page-cache read on the client, which says nothing
// about the DFS. So the warm phase of the FUSE side runs with fio's
// `invalidate=1` (posix_fadvise DONTNEED of the file on the mount: only the
// client's pages of that file go, the storage daemons' chunk files stay
// cached), the local side with `invalidate=0`; the cold phases with 1 and
// drop_caches on both sides. The daemon keeps no data cache (it caches
// attributes for 1 s). Both
// sequential read phases run seqReadTrials times, the sides alternating; the
// best run is the figure and the median is shown beside it (batch-io.ts).
//
// CPU per MiB counts fio (from its JSON: usr+sys over the runtime) plus, on
// the FUSE side, every cluster process (FUSE daemon, meta, storage, mgmtd).

import fs from 'node:fs'
import path from 'node:path'
import { execFile } from 'node:child_process'
import type { BenchContext, Metric } from './lib/types.js'
import { fmtBytes, fmtMs, fmtRate, median, bestTrial, trialsNote } from './lib/stats.js'
import { warmChunkFiles } from './lib/page-cache.js'

const MiB = 1024 * 1024

interface FioDir {
  bytes: number
  bwBytes: number
  iops: number
  runtimeMs: number
  p50Ms: number
  p99Ms: number
  meanMs: number
}

export interface FioResult {
  read: FioDir
  write: FioDir
  cpuSeconds: number
  version: string
}

function dirOf(j: Record<string, unknown>): FioDir {
  const clat = (j.clat_ns ?? {}) as { percentile?: Record<string, number>; mean?: number }
  const pct = clat.percentile ?? {}
  const ns = (k: string) => (typeof pct[k] === 'number' ? pct[k]! / 1e6 : NaN)
  return {
    bytes: Number(j.io_bytes ?? 0),
    bwBytes: Number(j.bw_bytes ?? 0),
    iops: Number(j.iops ?? 0),
    runtimeMs: Number(j.runtime ?? 0),
    p50Ms: ns('50.000000'),
    p99Ms: ns('99.000000'),
    meanMs: typeof clat.mean === 'number' ? clat.mean / 1e6 : NaN,
  }
}

/** Runs one fio job (a child process) and parses its --output-format=json. */
export async function runFio(args: string[], timeoutMs: number): Promise<FioResult> {
  const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
    execFile('fio', [...args, '--output-format=json'], { timeout: timeoutMs, maxBuffer: 64 * MiB }, (err, stdout, stderr) => {
      if (err) reject(new Error(`fio ${args.join(' ')} failed: ${err.message}\n${stderr}`))
      else resolve({ stdout, stderr })
    })
  })
  const start = stdout.indexOf('{')
  if (start < 0) throw new Error(`fio printed no JSON: ${stdout.slice(0, 500)} ${stderr.slice(0, 500)}`)
  const out = JSON.parse(stdout.slice(start)) as { 'fio version'?: string; jobs: Array<Record<string, unknown>> }
  const job = out.jobs[0]
  if (!job) throw new Error('fio JSON has no job')
  if (Number(job.error ?? 0) !== 0) throw new Error(`fio job error ${String(job.error)}: ${stderr}`)
  const read = dirOf(job.read as Record<string, unknown>)
  const write = dirOf(job.write as Record<string, unknown>)
  const runtimeS = Math.max(read.runtimeMs, write.runtimeMs, Number(job.job_runtime ?? 0)) / 1000
  const cpuSeconds = ((Number(job.usr_cpu ?? 0) + Number(job.sys_cpu ?? 0)) / 100) * runtimeS
  return { read, write, cpuSeconds, version: out['fio version'] ?? 'fio' }
}

type Phase = 'seqwrite' | 'seqread.warm' | 'seqread' | 'randread4k'

interface Side {
  key: 'fuse' | 'local'
  name: string
  dir: string
}

/**
 * Reads a file once through the mount (unmeasured: the daemons' JIT compiles that path) and every
 * replica's chunk files once, so the storage daemons' page cache holds every copy of its chunks.
 */
async function warmStorageCache(file: string, clusterDir: string): Promise<void> {
  const fh = await fs.promises.open(file, 'r')
  try {
    const buf = Buffer.allocUnsafe(MiB)
    while ((await fh.read(buf, 0, buf.length, null)).bytesRead > 0);
  } finally {
    await fh.close()
  }
  await warmChunkFiles(clusterDir)
}

export async function runFuseFio(ctx: BenchContext): Promise<Metric[]> {
  const { ioFileBytes: size, ioSeqBlock: seqBs, ioRandBlock: randBs, randReadSeconds } = ctx.sizes
  const ns = await ctx.fixtures.getNamespaceCluster()
  const fuseDir = path.join(ns.mnt, 'fio')
  await fs.promises.mkdir(fuseDir, { recursive: true })
  const sides: Side[] = [
    { key: 'local', name: 'local disk', dir: ctx.fixtures.scratch('fio-local') },
    { key: 'fuse', name: 'Strata FUSE', dir: fuseDir },
  ]
  const common = (s: Side) => [`--filename=${path.join(s.dir, 'fio.dat')}`, `--size=${size}`, '--ioengine=psync', '--iodepth=1', '--numjobs=1', '--direct=0', '--fallocate=none']
  // the FUSE write of 1 GiB runs at tens of MB/s here; generous timeouts, never a hang
  const timeoutMs = Math.max(600_000, (size / MiB) * 2_000)
  const jobs: Record<Phase, { args: string[]; dir: 'read' | 'write'; cold: boolean }> = {
    seqwrite: { args: ['--name=seqwrite', '--rw=write', `--bs=${seqBs}`, '--end_fsync=1'], dir: 'write', cold: false },
    'seqread.warm': { args: ['--name=seqread-warm', '--rw=read', `--bs=${seqBs}`, '--invalidate=0'], dir: 'read', cold: false },
    seqread: { args: ['--name=seqread', '--rw=read', `--bs=${seqBs}`, '--invalidate=1'], dir: 'read', cold: true },
    randread4k: { args: ['--name=randread', '--rw=randread', `--bs=${randBs}`, '--time_based', `--runtime=${randReadSeconds}`, '--invalidate=1'], dir: 'read', cold: true },
  }
  const metrics: Metric[] = []
  let version = ''
  for (const phase of Object.keys(jobs) as Phase[]) {
    const job = jobs[phase]
    // sequential reads: several trials, the sides alternating (see batch-io.ts): the best is the figure
    const trials = phase === 'seqread' || phase === 'seqread.warm' ? ctx.sizes.seqReadTrials : 1
    const runs: Record<Side['key'], Array<{ r: FioResult; cpuMs: number; dropped: boolean | null }>> = { local: [], fuse: [] }
    for (let t = 0; t < trials; t++) {
      for (const s of sides) {
        let dropped: boolean | null = null
        if (job.cold) dropped = await ctx.fixtures.dropCaches()
        else {
          if (t === 0 && phase === 'seqread.warm' && s.key === 'fuse') await warmStorageCache(path.join(s.dir, 'fio.dat'), ns.dir)
          await ctx.fixtures.settle()
        }
        const clusterCpu0 = s.key === 'fuse' ? ctx.fixtures.cpuSeconds() : 0
        // the mount's own page cache of the file is not the transport (see the top of the file)
        const args = phase === 'seqread.warm' && s.key === 'fuse' ? job.args.map((a) => (a === '--invalidate=0' ? '--invalidate=1' : a)) : job.args
        const r = await runFio([...common(s), ...args], timeoutMs)
        version = r.version
        const d = r[job.dir]
        // the cluster's idle background over the job's runtime is not the job's work
        const clusterCpu = s.key === 'fuse' ? Math.max(0, ctx.fixtures.cpuSeconds() - clusterCpu0 - ns.idleCpuPerSec * (d.runtimeMs / 1000)) : 0
        runs[s.key].push({ r, cpuMs: (r.cpuSeconds + clusterCpu) * 1000, dropped })
      }
    }
    for (const s of sides) {
      const rates = runs[s.key].map((x) => x.r[job.dir].bwBytes)
      const { r, cpuMs, dropped } = runs[s.key][bestTrial(rates)]!
      const d = r[job.dir]
      const cpuMsPerMiB = cpuMs / (d.bytes / MiB)
      const cpuMsPerOp = cpuMs / Math.max(1, d.bytes / (job.dir === 'read' && phase === 'randread4k' ? randBs : seqBs))
      const cache = job.cold ? (dropped ? 'page cache dropped first' : 'page cache NOT dropped (not root?)') : phase === 'seqwrite' ? 'end_fsync=1' : s.key === 'fuse' ? 'storage page cache warm, the client\'s pages of the file dropped first (invalidate=1)' : 'file in page cache'
      const what =
        phase === 'seqwrite'
          ? `sequential write ${fmtBytes(seqBs)}`
          : phase === 'randread4k'
            ? `random read ${fmtBytes(randBs)}, 1 in flight`
            : `sequential read ${fmtBytes(seqBs)}, ${phase === 'seqread' ? 'cold' : 'warm'}`
      const isRand = phase === 'randread4k'
      const cpuText = isRand ? `${cpuMsPerOp.toFixed(2)} ms CPU per read` : `${cpuMsPerMiB.toFixed(2)} ms CPU per MiB`
      const ofTrials = trials > 1 ? `${trialsNote(rates, 'runs')}: ` : ''
      ctx.log(`fio ${s.name} ${what}: ${isRand ? `${d.iops.toFixed(0)} IOPS, p50 ${fmtMs(d.p50Ms)}, p99 ${fmtMs(d.p99Ms)}` : fmtRate(d.bwBytes)} (${cpuText})${trials > 1 ? `, ${ofTrials.slice(0, -2)}` : ''}`)
      metrics.push({
        key: `fio.${s.key}.${phase}`,
        label: `fio ${what} — ${s.name}`,
        value: isRand ? d.iops : d.bwBytes,
        unit: isRand ? 'ops/s' : 'B/s',
        detail:
          `${ofTrials}${fmtBytes(d.bytes)} in ${(d.runtimeMs / 1000).toFixed(1)} s (${isRand ? `${fmtRate(d.bwBytes)}, time based` : `${fmtBytes(size)} file`}), psync, direct=0, ${cache}; ` +
          `per I/O p50 ${fmtMs(d.p50Ms)}, p99 ${fmtMs(d.p99Ms)}; ${cpuText} (${s.key === 'fuse' ? 'fio + all cluster processes, net of their idle background' : 'fio'})`,
        extra: { bytes: d.bytes, seconds: d.runtimeMs / 1000, iops: d.iops, p50Ms: d.p50Ms, p99Ms: d.p99Ms, meanMs: d.meanMs, cpuMsPerMiB, cpuMsPerOp, fio: version, ...(trials > 1 ? { medianRate: median(rates), trials } : {}) },
      })
    }
  }
  fs.rmSync(sides[0]!.dir, { recursive: true, force: true })
  await fs.promises.rm(fuseDir, { recursive: true, force: true })
  return metrics
}
