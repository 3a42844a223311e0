// The helpers every benchmark reports through: percentiles, and which trial of
// several a figure is taken from and how that is said beside it.
import test from 'ava'
import { bestTrial, median, percentile, summarize, trialsNote } from '../../../bench/lib/stats.js'

test('percentile is nearest-rank and summarize reports p50/p99/max/mean', (t) => {
  const xs = Array.from({ length: 100 }, (_, i) => i + 1)
  t.is(percentile(xs, 50), 50)
  t.is(percentile(xs, 99), 99)
  t.is(percentile(xs, 100), 100)
  t.true(Number.isNaN(percentile([], 50)))
  const s = summarize([3, 1, 2])
  t.deepEqual([s.n, s.p50, s.max, s.mean], [3, 2, 3, 2])
})

test('bestTrial picks the highest rate, the first of equals', (t) => {
  t.is(bestTrial([1e9, 3e9, 2e9]), 1)
  t.is(bestTrial([2e9, 2e9]), 0)
})

test('trialsNote lists every trial and the median in GB/s', (t) => {
  const rates = [0.88e9, 1.5e9, 0.92e9]
  t.is(median(rates), 0.92e9)
  t.is(trialsNote(rates, 'runs'), 'best of 3 runs (0.88, 1.50, 0.92 GB/s; median 0.92)')
})
