// Small numeric helpers shared by the benchmarks: percentiles over latency
// samples, throughput, and human formatting. Units are explicit everywhere:
// bytes, milliseconds, bytes per second (decimal MB/GB when printed).

export interface LatencySummary {
  n: number
  p50: number
  p90: number
  p99: number
  max: number
  mean: number
}

/** Nearest-rank percentile of an ascending array (p in [0, 100]). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!
}

export function summarize(samplesMs: readonly number[]): LatencySummary {
  const s = [...samplesMs].sort((a, b) => a - b)
  const mean = s.reduce((a, b) => a + b, 0) / (s.length || 1)
  return { n: s.length, p50: percentile(s, 50), p90: percentile(s, 90), p99: percentile(s, 99), max: s[s.length - 1] ?? NaN, mean }
}

export function median(xs: readonly number[]): number {
  return percentile([...xs].sort((a, b) => a - b), 50)
}

/** bytes/s → "1234.5 MB/s" (decimal units, like dd and fio). */
export function fmtRate(bytesPerSec: number): string {
  if (!Number.isFinite(bytesPerSec)) return 'n/a'
  return `${(bytesPerSec / 1e6).toFixed(1)} MB/s`
}

export function fmtGBps(bytesPerSec: number): string {
  return `${(bytesPerSec / 1e9).toFixed(2)} GB/s`
}

export function fmtMs(ms: number): string {
  if (!Number.isFinite(ms)) return 'n/a'
  return ms < 10 ? `${ms.toFixed(2)} ms` : `${ms.toFixed(1)} ms`
}

export function fmtBytes(n: number): string {
  const KiB = 1024
  if (n >= KiB ** 3 && n % KiB ** 3 === 0) return `${n / KiB ** 3} GiB`
  if (n >= KiB ** 2 && n % KiB ** 2 === 0) return `${n / KiB ** 2} MiB`
  if (n >= KiB && n % KiB === 0) return `${n / KiB} KiB`
  return `${n} B`
}

/**
 * How a throughput run at `chunkBytes` is keyed and named: the runs at the
 * chunk size `cluster up` gives files keep the plain keys (the judged ones),
 * others carry the size (`dfs.write.fsync.c1m`).
 */
export function chunkVariant(sizes: { chunkBytes: number }, chunkBytes: number): { suffix: string; label: string } {
  const label = `${fmtBytes(chunkBytes)} chunks${chunkBytes === sizes.chunkBytes ? ', the cluster default' : ''}`
  return { suffix: chunkBytes === sizes.chunkBytes ? '' : `.c${Math.round(chunkBytes / 1024)}k`, label }
}

/**
 * Runs `total` jobs with at most `concurrency` in flight, in index order.
 * Returns per-job latency in ms (index-aligned). The first error stops new
 * jobs and is rethrown once the in-flight ones settle.
 */
/** Runs job(i) for i < total, `concurrency` at a time; `slot` (< concurrency) names the worker, e.g. to reuse its buffer. */
export async function runConcurrent(total: number, concurrency: number, job: (i: number, slot: number) => Promise<unknown>): Promise<number[]> {
  const lat = new Array<number>(total)
  let next = 0
  let failed: unknown = null
  const worker = async (slot: number): Promise<void> => {
    while (failed === null) {
      const i = next++
      if (i >= total) return
      const t0 = performance.now()
      try {
        await job(i, slot)
      } catch (e) {
        failed ??= e
        return
      }
      lat[i] = performance.now() - t0
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, total) }, (_, slot) => worker(slot)))
  if (failed !== null) throw failed
  return lat
}

/** Index of the best (highest) rate of a phase's trials: the trial a figure is taken from. */
export function bestTrial(rates: readonly number[]): number {
  return rates.indexOf(Math.max(...rates))
}

/** "best of 5 runs (0.88, 0.92 … GB/s; median 0.92)" for a figure taken from several trials. */
export function trialsNote(rates: readonly number[], noun: string): string {
  return `best of ${rates.length} ${noun} (${rates.map((x) => (x / 1e9).toFixed(2)).join(', ')} GB/s; median ${(median(rates) / 1e9).toFixed(2)})`
}
