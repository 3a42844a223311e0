// Baseline (a): raw loopback TCP throughput of a minimal Node socket pair in
// two processes (bench/loopback-peer.ts): one receives and only counts bytes,
// the other sends one reused buffer in a loop; each on a CPU of its own.
// Timed from the first received byte to the last; the best of several trials,
// taken before and (in a run with other benchmarks) again after the rest.

import os from 'node:os'
import { spawn, spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import type { BenchContext, Metric } from './lib/types.js'
import { bestTrial, fmtBytes, fmtGBps, median } from './lib/stats.js'

const MiB = 1024 * 1024

const PEER = fileURLToPath(new URL('./loopback-peer.js', import.meta.url))

/**
 * CPUs for the two processes: one each when there are two or more and
 * `taskset` exists. On this VM two processes that share a CPU pay a
 * hypervisor round trip per switch (0.2 GB/s pinned together against 3+
 * apart), and the scheduler puts them together for minutes at a time; the
 * ceiling is the pair on separate CPUs.
 */
let pins: [string[], string[]] | null = null
function pinning(): [string[], string[]] {
  if (!pins) {
    const can = os.availableParallelism() >= 2 && spawnSync('taskset', ['-c', '0', 'true']).status === 0
    pins = can ? [['taskset', '-c', '0'], ['taskset', '-c', '1']] : [[], []]
  }
  return pins
}

function runPeer(prefix: string[], args: string[], onLine?: (msg: Record<string, number>) => void): Promise<Record<string, number>> {
  const argv = [...prefix, process.execPath, PEER, ...args]
  const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  let last: Record<string, number> = {}
  child.stdout.on('data', (d: Buffer) => {
    out += d.toString()
    let nl: number
    while ((nl = out.indexOf('\n')) >= 0) {
      last = JSON.parse(out.slice(0, nl)) as Record<string, number>
      out = out.slice(nl + 1)
      onLine?.(last)
    }
  })
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => (code === 0 ? resolve(last) : reject(new Error(`loopback peer (${args[0]}) exited with ${code}`))))
    child.on('error', reject)
  })
}

/** One trial: `total` bytes from a sender process to a receiver process; bytes/s and CPU seconds of both. */
export async function loopbackTrial(total: number, bufSize: number): Promise<{ rate: number; cpuSeconds: number; pinned: boolean }> {
  const [recvCpu, sendCpu] = pinning()
  let sender: Promise<Record<string, number>> | null = null
  const receiver = runPeer(recvCpu, ['recv', String(total)], (msg) => {
    if (msg.port !== undefined) sender = runPeer(sendCpu, ['send', String(msg.port), String(total), String(bufSize)])
  })
  const got = await receiver
  if (!sender) throw new Error('loopback: the receiver never listened')
  const sent = await (sender as Promise<Record<string, number>>)
  return { rate: got.rate!, cpuSeconds: got.cpuSeconds! + (sent.cpuSeconds ?? 0), pinned: recvCpu.length > 0 }
}

interface Trials {
  rates: number[]
  cpuPerMiB: number[]
  pinned: boolean
}

/** Trials run so far in this process; a second round (after the DFS runs) adds to them. */
const rounds: Trials[] = []

async function runTrials(ctx: BenchContext): Promise<Trials> {
  const { loopbackBytes: total, loopbackTrials: trials, loopbackBufBytes: bufSize } = ctx.sizes
  const t: Trials = { rates: [], cpuPerMiB: [], pinned: false }
  for (let i = 0; i < trials; i++) {
    const r = await loopbackTrial(total, bufSize)
    t.rates.push(r.rate)
    t.pinned = r.pinned
    t.cpuPerMiB.push((r.cpuSeconds * 1000) / (total / MiB))
    ctx.log(`loopback trial ${i + 1}/${trials}: ${fmtGBps(r.rate)}, ${t.cpuPerMiB[i]!.toFixed(2)} ms CPU per MiB`)
  }
  rounds.push(t)
  return t
}

export async function runLoopback(ctx: BenchContext): Promise<Metric[]> {
  rounds.length = 0
  await runTrials(ctx)
  return [loopbackMetric(ctx)]
}

/**
 * Another round of trials once the other benchmarks are done, folded into
 * the same metric. This VM has slow minutes for memory copies (see
 * RESULTS.md), and a ceiling caught in one alone would flatter every ratio
 * against it; the best trial of both rounds is the ceiling.
 */
export async function runLoopbackAgain(ctx: BenchContext): Promise<Metric> {
  await runTrials(ctx)
  return loopbackMetric(ctx)
}

function loopbackMetric(ctx: BenchContext): Metric {
  const { loopbackBytes: total, loopbackBufBytes: bufSize } = ctx.sizes
  const rates = rounds.flatMap((r) => r.rates)
  const cpuPerMiB = rounds.flatMap((r) => r.cpuPerMiB)
  // The best trial is the ceiling: on this shared VM memory copies (what a
  // socket pair spends its time on) run up to 5× slower in some minutes, and a
  // baseline caught in such a minute would flatter every ratio against it.
  const best = bestTrial(rates)
  const gbps = (rs: number[]) => rs.map((r) => (r / 1e9).toFixed(2)).join(', ')
  const which =
    rounds.length === 1
      ? `best of ${rates.length} (${gbps(rates)} GB/s; median ${(median(rates) / 1e9).toFixed(2)})`
      : `best of ${rates.length}: ${rounds.map((r, i) => `${i === 0 ? 'before the other benchmarks' : 'after them'} ${gbps(r.rates)}`).join('; ')} GB/s; median ${(median(rates) / 1e9).toFixed(2)}`
  return {
    key: 'loopback.tcp',
    label: 'raw loopback TCP, 1 socket pair, 2 processes',
    value: rates[best]!,
    unit: 'B/s',
    detail: `${fmtBytes(total)} per trial in ${fmtBytes(bufSize)} writes${rounds.every((r) => r.pinned) ? ', receiver and sender pinned to CPUs 0 and 1' : ''}, ${which}; ${cpuPerMiB[best]!.toFixed(2)} ms CPU per MiB (both processes) in the best trial`,
    extra: { cpuMsPerMiB: cpuPerMiB[best]!, medianRate: median(rates) },
  }
}
