// `npm run demo`: Strata's storage core end to end on this machine, with what
// it measured. Brings up a local cluster through the same code as `strata
// cluster up`, pushes data through the chunk-level StorageClient, shows the
// replicas agree, SIGKILLs a storage node under a running writer, restarts
// it and watches it resync, then tears everything down and prints a summary.
// The stages live in bin/demo/; this file owns the process: options, Ctrl-C,
// teardown on every path, output and exit status.

import fs from 'node:fs'
import path from 'node:path'
import { clusterExists, formatTable, logTail, processAlive, readClusterFile, strataBin } from '../fs/admin/index.js'
import { prepareDir, removeDir, tearDown, type DemoCluster, type DemoDir } from './demo/cluster.js'
import { parseOptions, type DemoOptions } from './demo/options.js'
import { Reporter, fmtBytes, shortError } from './demo/report.js'
import { STAGES, runStages } from './demo/stages.js'
import { emptySummary, summaryJson, summaryRows, type Summary } from './demo/summary.js'

const EXIT_FAILED = 1
const EXIT_USAGE = 2
const EXIT_INTERRUPTED = 130

class Demo {
  readonly r: Reporter
  readonly s: Summary
  private readonly t0 = performance.now()
  private d: DemoDir | null = null
  private cluster: DemoCluster | null = null
  private stage = 'setup'
  private cleaning: Promise<{ ms: number; dirRemoved: boolean }> | null = null
  private interrupted = false

  constructor(readonly o: DemoOptions) {
    this.r = new Reporter({ stream: o.json ? process.stderr : process.stdout, details: !o.json })
    this.s = emptySummary(o.sizeMiB, o.keep)
  }

  async run(): Promise<number> {
    try {
      this.d = prepareDir(this.o.dir)
    } catch (e) {
      process.stderr.write(`strata demo: ${shortError(e)}\n`)
      return EXIT_USAGE
    }
    this.s.dir = this.d.dir
    this.r.say(this.r.bold(`Strata demo: ${fmtBytes(this.o.sizeMiB * 1024 * 1024)} through a local 3-node cluster, a node killed and resynced`))
    this.r.say(this.r.dim(`cluster directory ${this.d.dir} (${this.o.keep ? 'kept at the end' : 'removed at the end; --keep keeps it'})`))
    try {
      await runStages(this.d.dir, this.o.sizeMiB, this.r, this.s, {
        onCluster: (c) => (this.cluster = c),
        onStage: (name) => (this.stage = name),
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
      this.printLogTails()
      try {
        this.s.teardown = await this.cleanup()
      } catch (te) {
        this.s.error.message += `; teardown failed too: ${shortError(te)}`
      }
    }
    this.s.totalMs = performance.now() - this.t0
    this.output()
    return this.s.ok ? 0 : EXIT_FAILED
  }

  /** cluster down (always) and removal of the directory (unless --keep); runs once. */
  cleanup(): Promise<{ ms: number; dirRemoved: boolean }> {
    return (this.cleaning ??= (async () => {
      const t = performance.now()
      this.cluster?.close()
      if (!this.d) return { ms: 0, dirRemoved: false }
      await tearDown(this.d.dir)
      if (!this.o.keep) removeDir(this.d)
      return { ms: performance.now() - t, dirRemoved: !this.o.keep }
    })())
  }

  async onSignal(sig: NodeJS.Signals): Promise<void> {
    if (this.interrupted) {
      // second Ctrl-C: no more waiting
      this.killNow()
      process.exit(EXIT_INTERRUPTED)
    }
    this.interrupted = true
    this.s.interrupted = true
    this.r.abortLive('interrupted')
    process.stderr.write(`\nstrata demo: ${sig} during ${this.stage}; tearing the cluster down (again to force)\n`)
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
      r.say(`\nkept ${this.d.dir} (logs in ${path.join(this.d.dir, 'logs')}); start the cluster again with: node ${cli} cluster up --dir ${this.d.dir}`)
    }
    if (this.s.ok) {
      r.say(`\n${r.bold('PASSED')}: data verified, replicas equal, no acknowledged write lost across a node kill and resync.`)
    } else if (this.s.interrupted) {
      r.say(`\n${r.bold('INTERRUPTED')} during ${this.s.error?.stage}; the cluster was torn down${this.s.teardown?.dirRemoved ? ' and its directory removed' : ''}.`)
    } else {
      r.say(`\n${r.bold('FAILED')} in ${this.s.error?.stage}: ${this.s.error?.message}`)
    }
  }
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
