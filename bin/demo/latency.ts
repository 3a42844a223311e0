// Latency samples and the percentiles the demo prints.

export interface LatencySummary {
  count: number
  p50Ms: number
  p99Ms: number
  maxMs: number
  meanMs: number
}

/** Nearest-rank percentile of ascending-sorted samples (q in [0, 1]). */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return 0
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(q * sorted.length)))
  return sorted[rank - 1]!
}

export function summarize(samples: readonly number[]): LatencySummary {
  const s = [...samples].sort((a, b) => a - b)
  const sum = s.reduce((a, b) => a + b, 0)
  return {
    count: s.length,
    p50Ms: percentile(s, 0.5),
    p99Ms: percentile(s, 0.99),
    maxMs: s.length ? s[s.length - 1]! : 0,
    meanMs: s.length ? sum / s.length : 0,
  }
}

/**
 * Runs tasks 0, 1, 2, … with at most `parallel` in flight until `total` were
 * started or (with `until`, a performance.now() time) time is up; resolves
 * with how many were started once they all finished. The first error rejects,
 * after the tasks in flight settled.
 */
export async function runPool(total: number, parallel: number, task: (i: number) => Promise<void>, until = Infinity): Promise<number> {
  let next = 0
  let firstError: unknown = null
  const lane = async () => {
    while (next < total && firstError === null && performance.now() < until) {
      const i = next++
      try {
        await task(i)
      } catch (e) {
        firstError ??= e
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(parallel, total)) }, lane))
  if (firstError !== null) throw firstError
  return next
}
