// Shapes shared by the runner and the benchmarks.

import type { Fixtures } from './fixtures.js'

/** Workload sizes; `--quick` shrinks them (see sizesFor in run.ts). */
export interface Sizes {
  /** raw loopback: bytes per trial, trials, size of each socket.write */
  loopbackBytes: number
  loopbackTrials: number
  loopbackBufBytes: number
  /**
   * throughput: the chunk size `cluster up` gives files (the judged runs), the
   * one 3FS's deploy guide uses (shown next to them), bytes written per run
   * (each chunk once), IOs in flight
   */
  chunkBytes: number
  altChunkBytes: number
  writeBytes: number
  writeConcurrency: number
  /** bytes written first and not measured (both the DFS and the disk baseline) */
  warmupBytes: number
  /** reads go over the written chunks this many times */
  readPasses: number
  readConcurrency: number
  /** 4 KiB latency: chunk size of the chunks written into, IO size, samples (after warm-up) */
  latencyChunkBytes: number
  latencyIoBytes: number
  latencySamples: number
  latencyWarmup: number
  /** the loaded-latency run keeps this many 4 KiB writes in flight */
  latencyConcurrency: number
  /** namespace I/O (fuse-fio, batch-io): size of the one file written and read, and the block sizes */
  ioFileBytes: number
  ioSeqBlock: number
  ioRandBlock: number
  /** how long each 4 KiB random read run lasts (time based, like fio --time_based) */
  randReadSeconds: number
  /** batch-io: requests outstanding, and how many of them at most form one batch (ring ioDepth) */
  batchQueueDepth: number
  batchRingDepth: number
  /** batch-io's sequential reads also run with this many outstanding (same batch limit) */
  batchAltQueueDepth: number
  /**
   * fuse-fio and batch-io: trials of each sequential read phase, the two sides
   * alternating; the best is the figure (as the loopback ceiling is the best
   * of its trials), the median is shown next to it
   */
  seqReadTrials: number
  /** mdtest: files in total, directories they are spread over, processes */
  mdFiles: number
  mdDirs: number
  mdProcs: number
  /** sandbox-start: create → exec → delete cycles per path and concurrency */
  sandboxIters: number
  /** sandbox-density: idle sandboxes asked for (0: 1000 when the memory is there) */
  sandboxDensity: number
  /** sandbox-cold: cold starts measured (each on a fresh FUSE daemon) */
  sandboxColdTrials: number
}

export interface BenchContext {
  quick: boolean
  sizes: Sizes
  /** progress line on stderr (never in --json output) */
  log: (msg: string) => void
  fixtures: Fixtures
}

export interface Metric {
  /** stable id used in comparisons and --json, e.g. "dfs.write.fsync" */
  key: string
  label: string
  /** B/s for throughput, ms for latency, count for how many */
  value: number
  unit: 'B/s' | 'ms' | 'ops/s' | 'B' | 'count'
  detail?: string
  /** latency percentiles and other numbers worth keeping in --json */
  extra?: Record<string, number | string>
}

/** A part of RESULTS.md with a generated block of its own. */
export type Section = 'core' | 'namespace' | 'images' | 'sandbox'

export interface Benchmark {
  name: string
  description: string
  /** the results block it belongs to */
  section: Section
  /** benchmarks whose metrics its ratios need (the runner adds them, in BENCHMARKS order) */
  requires?: string[]
  run(ctx: BenchContext): Promise<Metric[]>
}
