// `npm run demo`: Strata's main job end to end on this machine (issue 5).
// Brings up the embedded single-node cluster (mgmtd, storage, meta, FUSE
// mount, sandbox daemon) through the same code as `strata cluster up`,
// builds a Debian base image from Debian packages (debootstrap, cached) and a
// toolkit layer and imports both into the DFS image store, publishes a
// dataset into the DFS, creates a batch of container sandboxes with the
// dataset mounted read-only, runs a Python program in each that checks the
// dataset against the host's numbers and tries to write to it, deletes the
// sandboxes, tears the cluster down and prints what it measured. The stages
// live in bin/demo/; this file owns the process: options, Ctrl-C, teardown
// on every path, output and exit status.

import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { clusterExists, formatTable, logTail, processAlive, readClusterFile, strataBin } from '../fs/admin/index.js'
import { isStrataError } from '../fs/common/errors.js'
import { unmountTree } from '../sandbox/rootfs/mounts.js'
import type { Sandbox } from '../sandbox/sdk/index.js'
import { missingPrerequisites, prepareDir, removeDir, tearDown, type DemoCluster, type DemoDir } from './demo/cluster.js'
import { rootfsScratchDirs } from './demo/images.js'
import { parseOptions, type DemoOptions } from './demo/options.js'
import { Reporter, fmtBytes, shortError } from './demo/report.js'
import { RUN_LABEL } from './demo/sandboxes.js'
import { STAGES, runStages } from './demo/stages.js'
import { emptySummary, summaryJson, summaryRows, type Summary } from './demo/summary.js'

const EXIT_FAILED = 1
const EXIT_USAGE = 2
const EXIT_INTERRUPTED = 130

class Demo {
  readonly r: Reporter
  readonly s: Summary
  private readonly t0 = performance.now()
  private readonly abort = new AbortController()
  private d: DemoDir | null = null
  private cluster: DemoCluster | null = null
  /** sandboxes created and not yet deleted by the delete stage */
  private readonly sandboxes = new Map<string, Sandbox>()
  private rootfsBuild: Promise<unknown> | null = null
  private stage = 'setup'
  private cleaning: Promise<NonNullable<Summary['teardown']>> | null = null
  private interrupted = false

  constructor(readonly o: DemoOptions) {
    this.r = new Reporter({ stream: o.json ? process.stderr : process.stdout, details: !o.json })
    this.s = emptySummary(o)
  }

  async run(): Promise<number> {
    try {
      this.d = prepareDir(this.o.dir)
    } catch (e) {
      process.stderr.write(`strata demo: ${shortError(e)}\n`)
      return EXIT_USAGE
    }
    const missing = missingPrerequisites()
    if (missing.length) {
      process.stderr.write(`strata demo: this machine lacks what the demo needs:\n${missing.map((m) => `  - ${m}\n`).join('')}`)
      await removeDir(this.d).catch(() => undefined)
      return EXIT_USAGE
    }
    this.s.dir = this.d.dir
    this.r.say(this.r.bold(`Strata demo: ${this.o.sandboxes} sandboxes on a Debian image from the DFS, a ${fmtBytes(this.o.sizeMiB * 1024 * 1024)} dataset mounted read-only`))
    this.r.say(this.r.dim(`cluster directory ${this.d.dir} (${this.o.keep ? 'kept at the end' : 'removed at the end; --keep keeps it'})`))
    try {
      await runStages({ dir: this.d.dir, sandboxes: this.o.sandboxes, sizeMiB: this.o.sizeMiB }, this.r, this.s, {
        onCluster: (c) => (this.cluster = c),
        onStage: (name) => (this.stage = name),
        onSandbox: (sb) => this.sandboxes.set(sb.id, sb),
        onDeleted: (id) => this.sandboxes.delete(id),
        onRootfsBuild: (p) => {
          this.rootfsBuild = p
          p.then(() => (this.rootfsBuild = null), () => (this.rootfsBuild = null))
        },
        signal: this.abort.signal,
      })
      this.stage = 'teardown'
      this.r.section(STAGES, STAGES, `Teardown: cluster down${this.o.keep ? '' : ', remove the directory'}`)
      this.s.teardown = await this.r.step(`cluster down${this.o.keep ? '' : ` + rm -r ${this.d.dir}`}`, () => this.cleanup())
      this.s.ok = true
    } catch (e) {
      // Ctrl-C: the signal handler tears down and exits
      if (this.interrupted) return new Promise<number>(() => {})
      this.r.abortLive(shortError(e))
      this.s.error = { stage: this.stage, message: (e as Error)?.message ?? String(e) }
      const dead = this.deadProcesses()
      if (dead.length) {
        this.s.error.notRunning = dead
        process.stderr.write(`\nstrata demo: cluster processes not running at the failure: ${dead.join(', ')}\n`)
      }
      // the cluster's logs help unless the failure was the image build on this host and every process still runs
      if (dead.length || !isStrataError(e, ['IMAGE_BUILD_FAILED', 'IMAGE_NEEDS_ROOT'])) this.printLogTails()
      try {
        process.stderr.write(`strata demo: tearing down (sandboxes, cluster${this.o.keep ? '' : ', directory'})\n`)
        this.s.teardown = await this.cleanup()
      } catch (te) {
        this.s.error.message += `; teardown failed too: ${shortError(te)}`
      }
    }
    this.s.totalMs = performance.now() - this.t0
    this.output()
    return this.s.ok ? 0 : EXIT_FAILED
  }

  /**
   * Deletes the sandboxes still there, stops the cluster (whose sandbox
   * daemon reclaims anything a create in flight made), lets a debootstrap in
   * flight clean up, removes the directory (unless --keep). Runs once.
   */
  cleanup(): Promise<NonNullable<Summary['teardown']>> {
    return (this.cleaning ??= (async () => {
      const t = performance.now()
      this.abort.abort()
      let sandboxesDeleted = 0
      const c = this.cluster
      if (c) {
        const left = new Map(this.sandboxes)
        try {
          for (const sb of await c.strata.sandboxes.list({ labels: { app: RUN_LABEL } })) if (sb.info.state !== 'creating') left.set(sb.id, sb)
        } catch {
          // the daemon is gone: cluster down cleans up offline
        }
        const results = await Promise.allSettled([...left.values()].map((sb) => Promise.race([sb.delete(), sleep(60_000).then(() => Promise.reject(new Error('timeout')))])))
        sandboxesDeleted = results.filter((x) => x.status === 'fulfilled').length
        await c.close()
      }
      if (!this.d) return { ms: 0, dirRemoved: false, sandboxesDeleted }
      await tearDown(this.d.dir)
      await this.settleRootfsBuild()
      if (!this.o.keep) await removeDir(this.d)
      return { ms: performance.now() - t, dirRemoved: !this.o.keep, sandboxesDeleted }
    })())
  }

  /**
   * A debootstrap cut short: stop it and what it runs (our own descendants,
   * by pid), let ensureDebianRootfs remove its scratch tree, and remove it
   * ourselves if that did not happen — never through a mount debootstrap
   * left in it (its chroot's /proc and /sys).
   */
  private async settleRootfsBuild(): Promise<void> {
    const build = this.rootfsBuild
    if (!build) return
    for (const pid of descendants(childPids('debootstrap'))) {
      try {
        process.kill(pid, 'SIGTERM')
      } catch {
        // already gone
      }
    }
    await Promise.race([build.catch(() => undefined), sleep(30_000)])
    for (const dir of rootfsScratchDirs()) {
      try {
        await unmountTree(dir)
        fs.rmSync(dir, { recursive: true, force: true })
      } catch (e) {
        process.stderr.write(`strata demo: left ${dir} behind: ${shortError(e)}\n`)
      }
    }
  }

  async onSignal(sig: NodeJS.Signals): Promise<void> {
    if (this.interrupted) {
      // second Ctrl-C: no more waiting
      this.killNow()
      process.exit(EXIT_INTERRUPTED)
    }
    this.interrupted = true
    this.s.interrupted = true
    this.abort.abort()
    this.r.abortLive('interrupted')
    process.stderr.write(`\nstrata demo: ${sig} during ${this.stage}; deleting the sandboxes and tearing the cluster down (again to force)\n`)
    this.s.error = { stage: this.stage, message: `interrupted by ${sig}` }
    try {
      this.s.teardown = await this.cleanup()
    } catch (e) {
      process.stderr.write(`strata demo: teardown failed: ${shortError(e)}\n`)
      this.killNow()
    }
    this.s.totalMs = performance.now() - this.t0
    this.output()
    process.exit(EXIT_INTERRUPTED)
  }

  /** SIGKILL every process of the cluster that still runs (by the pids in cluster.json). */
  private killNow(): void {
    if (!this.d || !clusterExists(this.d.dir)) return
    try {
      for (const p of readClusterFile(this.d.dir).processes) if (processAlive(p)) process.kill(p.pid!, 'SIGKILL')
    } catch {
      // best effort
    }
  }

  /** Processes of the cluster that were started and are no longer running. */
  private deadProcesses(): string[] {
    if (!this.d || !clusterExists(this.d.dir)) return []
    try {
      return readClusterFile(this.d.dir)
        .processes.filter((p) => p.pid && !processAlive(p))
        .map((p) => `${p.name} (pid ${p.pid})`)
    } catch {
      return []
    }
  }

  /** On failure: the end of every process log, before the directory goes away. */
  private printLogTails(): void {
    if (!this.d) return
    const logs = path.join(this.d.dir, 'logs')
    if (!fs.existsSync(logs)) return
    let text = ''
    for (const f of fs.readdirSync(logs).sort()) {
      const tail = logTail(path.join(logs, f), 8)
      if (tail) text += `--- last lines of logs/${f}\n${tail}\n`
    }
    if (!text) return
    process.stderr.write(`\n${text}${this.o.keep ? '' : `(the logs are removed with the directory; rerun with --keep to inspect them)\n`}`)
  }

  private output(): void {
    if (this.o.json) {
      process.stdout.write(JSON.stringify(summaryJson(this.s), null, 2) + '\n')
      if (!this.s.ok) process.stderr.write(`strata demo: FAILED in ${this.s.error?.stage}: ${this.s.error?.message}\n`)
      return
    }
    const r = this.r
    r.say(`\n${r.bold('Summary')}`)
    r.block(formatTable(summaryRows(this.s)))
    if (this.o.keep && this.d) {
      const cli = path.relative(process.cwd(), strataBin()) || strataBin()
      r.say(`\nkept ${this.d.dir} (logs in ${path.join(this.d.dir, 'logs')}); start the cluster again with: node ${cli} cluster up --dir ${this.d.dir}; remove it with: node ${cli} cluster destroy --dir ${this.d.dir}`)
    }
    if (this.s.ok) {
      const e = this.s.exec!
      r.say(`\n${r.bold('PASSED')}: ${e.runs.length} sandboxes read the DFS dataset and matched the host's summary, writes to it failed with EROFS, everything deleted.`)
    } else if (this.s.interrupted) {
      r.say(`\n${r.bold('INTERRUPTED')} during ${this.s.error?.stage}; sandboxes deleted and the cluster torn down${this.s.teardown?.dirRemoved ? ', its directory removed' : ''}.`)
    } else {
      r.say(`\n${r.bold('FAILED')} in ${this.s.error?.stage}: ${this.s.error?.message}`)
    }
  }
}

/** pid → [comm, ppid] of every process (from /proc). */
function processTable(): Map<number, [string, number]> {
  const out = new Map<number, [string, number]>()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const m = /^\d+ \((.*)\) \S+ (\d+)/.exec(fs.readFileSync(`/proc/${name}/stat`, 'utf8'))
      if (m) out.set(Number(name), [m[1]!, Number(m[2])])
    } catch {
      // gone meanwhile
    }
  }
  return out
}

/** Pids of this process's children named `comm`. */
function childPids(comm: string): number[] {
  return [...processTable()].filter(([, [c, ppid]]) => c === comm && ppid === process.pid).map(([pid]) => pid)
}

/** `roots` and all their descendants, parents first. */
function descendants(roots: number[]): number[] {
  const table = processTable()
  const out: number[] = []
  const todo = [...roots]
  while (todo.length) {
    const pid = todo.shift()!
    out.push(pid)
    for (const [child, [, ppid]] of table) if (ppid === pid) todo.push(child)
  }
  return out
}

async function main(): Promise<void> {
  // a closed pipe (`npm run demo | head`) must not skip the teardown
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined)
  const opts = parseOptions(process.argv.slice(2))
  const demo = new Demo(opts)
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => void demo.onSignal(sig))
  process.on('unhandledRejection', (e) => {
    process.stderr.write(`strata demo: unexpected error: ${(e as Error)?.stack ?? String(e)}\n`)
    void demo
      .cleanup()
      .catch(() => undefined)
      .finally(() => process.exit(EXIT_FAILED))
  })
  const code = await demo.run()
  // daemons are detached; nothing of ours must keep the event loop alive
  process.exit(code)
}

void main()
