// mdtest: a metadata benchmark in the style of mdtest (create, stat, remove
// of N files spread over D directories by P processes; every process works
// in every directory, one operation at a time, as mdtest without -u). The DFS
// side runs P processes, each with its own Strata FileSystem client (meta
// RPCs straight to the meta servers, no FUSE); the local side P processes
// with node's fs.promises on a directory of the filesystem the cluster data
// lives on. The phases run side by side (local, then DFS, for each phase);
// a phase's rate is the operations of all processes over the time from the
// parent's start message to the last process's reply.
//
// Nothing is dropped between phases (mdtest does not either): the local stat
// phase is served from the kernel's dentry/inode cache; the DFS client has no
// attribute cache, so every DFS stat is a meta RPC (meta reads lmdb through
// the page cache). Durability differs: each DFS create/remove is an lmdb
// commit fsync'ed before meta answers (group commit across concurrent
// requests); local ext4 creates are in its journal, committed every few
// seconds, with no fsync.

import fs from 'node:fs'
import path from 'node:path'
import { fork, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { FileSystem } from '../fs/client/file/index.js'
import type { BenchContext, Metric } from './lib/types.js'
import { fmtMs, summarize } from './lib/stats.js'
import { procCpuSeconds } from './lib/fixtures.js'
import type { MdInit, MdPhase, MdReply } from './mdtest-worker.js'

const WORKER = fileURLToPath(new URL('./mdtest-worker.js', import.meta.url))
const PHASES: MdPhase[] = ['create', 'stat', 'remove']

class Workers {
  private readonly procs: ChildProcess[] = []
  private readonly replies: Array<Array<(m: MdReply) => void>> = []

  constructor(n: number) {
    for (let i = 0; i < n; i++) {
      const cp = fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, STRATA_LOG_LEVEL: process.env.STRATA_LOG_LEVEL ?? 'error' } })
      const q: Array<(m: MdReply) => void> = []
      cp.on('message', (m: MdReply) => q.shift()?.(m))
      cp.on('exit', (code) => {
        for (const w of q.splice(0)) w({ phase: 'ready', ops: 0, seconds: 0, p50Ms: NaN, p99Ms: NaN, cpuSeconds: 0, error: `worker exited with ${code}` })
      })
      this.procs.push(cp)
      this.replies.push(q)
    }
  }

  get pids(): number[] {
    return this.procs.map((p) => p.pid!).filter(Boolean)
  }

  private ask(i: number, msg: unknown): Promise<MdReply> {
    return new Promise((resolve, reject) => {
      this.replies[i]!.push((m) => (m.error ? reject(new Error(`mdtest worker ${i}: ${m.error}`)) : resolve(m)))
      this.procs[i]!.send(msg as object)
    })
  }

  /** Sends every worker its message at once; resolves with all replies and the wall time until the last. */
  async all(msg: (i: number) => unknown): Promise<{ replies: MdReply[]; seconds: number }> {
    const t0 = performance.now()
    const replies = await Promise.all(this.procs.map((_, i) => this.ask(i, msg(i))))
    return { replies, seconds: (performance.now() - t0) / 1000 }
  }

  /** CPU seconds the workers used so far (from /proc, so it also counts their startup). */
  cpuSeconds(): number {
    return this.pids.reduce((a, pid) => a + procCpuSeconds(pid), 0)
  }

  async close(): Promise<void> {
    await Promise.all(
      this.procs.map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve()
            const t = setTimeout(() => p.kill('SIGKILL'), 10_000)
            p.once('exit', () => {
              clearTimeout(t)
              resolve()
            })
            try {
              p.send({ cmd: 'exit' })
            } catch {
              p.kill('SIGKILL')
            }
          }),
      ),
    )
  }
}

export async function runMdtest(ctx: BenchContext): Promise<Metric[]> {
  const { mdFiles, mdDirs: dirs, mdProcs: procs } = ctx.sizes
  const perRank = Math.floor(mdFiles / procs)
  const files = perRank * procs
  const ns = await ctx.fixtures.getNamespaceCluster()

  // the directory trees (not measured)
  const localRoot = path.join(ctx.fixtures.scratch('mdtest-local'), 'mdtest')
  for (let d = 0; d < dirs; d++) fs.mkdirSync(path.join(localRoot, `d${d}`), { recursive: true })
  const dfsRoot = '/mdtest'
  const admin = new FileSystem({ mgmtdAddresses: ns.mgmtdAddresses, metaFallbackAddresses: ns.metaAddresses, periodicSyncMs: 0 })
  const sides = {
    local: { name: 'local disk (node fs)', workers: null as Workers | null, root: localRoot },
    dfs: { name: 'Strata meta (FileSystem client)', workers: null as Workers | null, root: dfsRoot },
  }
  const metrics: Metric[] = []
  try {
    await admin.mkdir(dfsRoot)
    for (let d = 0; d < dirs; d++) await admin.mkdir(`${dfsRoot}/d${d}`)
    for (const key of ['local', 'dfs'] as const) {
      const s = sides[key]
      s.workers = new Workers(procs)
      const init = (i: number): MdInit => ({
        cmd: 'init',
        mode: key,
        root: s.root,
        rank: i,
        perRank,
        dirs,
        ...(key === 'dfs' ? { mgmtdAddresses: ns.mgmtdAddresses, metaAddresses: ns.metaAddresses } : {}),
      })
      await s.workers.all(init)
    }
    await ctx.fixtures.settle()
    for (const phase of PHASES) {
      for (const key of ['local', 'dfs'] as const) {
        const s = sides[key]
        const w = s.workers!
        const cpu0 = w.cpuSeconds() + (key === 'dfs' ? ctx.fixtures.cpuSeconds() : 0)
        const { replies, seconds } = await w.all(() => ({ cmd: 'phase', phase }))
        // the cluster's idle background over the phase is not the phase's work
        const cpu = Math.max(0, w.cpuSeconds() + (key === 'dfs' ? ctx.fixtures.cpuSeconds() - ns.idleCpuPerSec * seconds : 0) - cpu0)
        const ops = replies.reduce((a, r) => a + r.ops, 0)
        if (ops !== files) throw new Error(`mdtest ${key} ${phase}: ${ops} of ${files} operations`)
        const rate = ops / seconds
        // latency percentiles: the median of the processes' own (each process reports its p50/p99)
        const p50 = summarize(replies.map((r) => r.p50Ms)).p50
        const p99 = Math.max(...replies.map((r) => r.p99Ms))
        const cpuMsPerOp = (cpu * 1000) / ops
        ctx.log(`mdtest ${s.name} ${phase}: ${rate.toFixed(0)} ops/s (p50 ${fmtMs(p50)}, p99 ${fmtMs(p99)}; ${cpuMsPerOp.toFixed(2)} ms CPU/op)`)
        const what = phase === 'create' ? 'file create (creat + close)' : phase === 'stat' ? 'file stat' : 'file remove (unlink)'
        metrics.push({
          key: `mdtest.${key}.${phase}`,
          label: `mdtest ${what} — ${s.name}`,
          value: rate,
          unit: 'ops/s',
          detail:
            `${files} files in ${dirs} directories by ${procs} processes, 1 op in flight each, ${seconds.toFixed(1)} s; ` +
            `per op p50 ${fmtMs(p50)} (median of the processes), p99 ${fmtMs(p99)} (worst process); ${cpuMsPerOp.toFixed(2)} ms CPU per op (${key === 'dfs' ? 'workers + all cluster processes, net of their idle background' : 'workers'})`,
          extra: { ops, seconds, p50Ms: p50, p99Ms: p99, cpuMsPerOp, files, dirs, procs },
        })
      }
    }
  } finally {
    await Promise.all([sides.local.workers?.close(), sides.dfs.workers?.close()])
    await admin.rmdir(dfsRoot, { recursive: true }).catch(() => undefined)
    await admin.shutdown().catch(() => undefined)
    fs.rmSync(path.dirname(localRoot), { recursive: true, force: true })
  }
  return metrics
}
