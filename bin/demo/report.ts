// Progress and result output of `npm run demo`.
//
// On a TTY each running step is one live line (elapsed time ticking, detail
// rewritten in place) that turns into `✓ step: detail (1.2s)` when it ends.
// Elsewhere (pipes, CI logs, --json) nothing is rewritten: a step prints one
// `ok`/`FAIL` line when it ends, and a `...` line with its detail every 10 s
// while it runs (when the detail changed; every minute regardless). Result lines (tables, figures) go to the same
// stream, except with --json where only progress is printed (on stderr) and
// stdout is left to the JSON summary.

import { formatTable } from '../../fs/admin/index.js'

export interface StepHandle {
  update(detail: string): void
  done(detail?: string): void
  fail(detail?: string): void
}

export interface ReporterOptions {
  /** where progress goes */
  stream: NodeJS.WriteStream
  /** print result lines (tables, figures); false with --json */
  details: boolean
}

interface LiveStep {
  label: string
  detail: string
  t0: number
}

const TICK_MS = 200
/** off a TTY: a progress line for a running step at most this often … */
const HEARTBEAT_MS = 10_000
/** … and at least this often */
const HEARTBEAT_IDLE_MS = 60_000

export class Reporter {
  readonly tty: boolean
  private readonly color: boolean
  private readonly stream: NodeJS.WriteStream
  private readonly details: boolean
  private live: LiveStep | null = null
  private ticker: NodeJS.Timeout | null = null

  constructor(o: ReporterOptions) {
    this.stream = o.stream
    this.details = o.details
    this.tty = !!o.stream.isTTY
    this.color = this.tty && !process.env.NO_COLOR && process.env.TERM !== 'dumb'
  }

  /** A stage heading: `[2/6] Data path` (blank line before). */
  section(index: number, total: number, title: string): void {
    this.write(`\n${this.bold(`[${index}/${total}] ${title}`)}\n`)
  }

  /** A result line, indented under the current stage. */
  line(text = ''): void {
    if (!this.details) return
    this.write(text === '' ? '\n' : `  ${text}\n`)
  }

  /** Several result lines (e.g. a table), each indented. */
  block(text: string): void {
    if (!this.details) return
    for (const l of text.replace(/\n$/, '').split('\n')) this.write(`    ${l}\n`)
  }

  /** A table in 3FS's column format, indented. */
  table(rows: string[][]): void {
    this.block(formatTable(rows))
  }

  /** Text printed whatever the mode (headers, the final verdict). */
  say(text: string): void {
    this.write(text.endsWith('\n') ? text : `${text}\n`)
  }

  /** Starts a step; the caller ends it with done() or fail(). One live step at a time. */
  begin(label: string): StepHandle {
    if (this.live) this.finish('done')
    const step: LiveStep = { label, detail: '', t0: performance.now() }
    this.live = step
    if (this.tty) {
      this.render()
      this.ticker = setInterval(() => this.render(), TICK_MS)
      this.ticker.unref()
    } else {
      // a long step still shows it is alive: its detail when it changed, at least every minute
      let shown = ''
      let lastAt = performance.now()
      this.ticker = setInterval(() => {
        const now = performance.now()
        if (step.detail === shown && now - lastAt < HEARTBEAT_IDLE_MS) return
        shown = step.detail
        lastAt = now
        this.stream.write(`  ...  ${step.label}${step.detail ? `: ${step.detail}` : ''} (${fmtSecs(now - step.t0)})\n`)
      }, HEARTBEAT_MS)
      this.ticker.unref()
    }
    let ended = false
    return {
      update: (detail) => {
        if (ended || this.live !== step) return
        step.detail = detail
        if (this.tty) this.render()
      },
      done: (detail) => {
        if (ended) return
        ended = true
        if (this.live === step) this.finish('done', detail)
      },
      fail: (detail) => {
        if (ended) return
        ended = true
        if (this.live === step) this.finish('fail', detail)
      },
    }
  }

  /** Runs fn as a step; `done` turns its result into the step's final detail. */
  async step<T>(label: string, fn: (update: (detail: string) => void) => Promise<T>, done?: (v: T) => string | undefined): Promise<T> {
    const h = this.begin(label)
    try {
      const v = await fn((d) => h.update(d))
      h.done(done?.(v))
      return v
    } catch (e) {
      h.fail(shortError(e))
      throw e
    }
  }

  /** Ends whatever step is live (used on Ctrl-C and fatal errors). */
  abortLive(detail: string): void {
    if (this.live) this.finish('fail', detail)
  }

  private finish(how: 'done' | 'fail', detail?: string): void {
    const step = this.live!
    this.live = null
    if (this.ticker) clearInterval(this.ticker)
    this.ticker = null
    const secs = `(${fmtSecs(performance.now() - step.t0)})`
    const text = `${step.label}${detail ? `: ${detail}` : ''}`
    if (this.tty) {
      const mark = how === 'done' ? this.paint('32', '✓') : this.paint('31', '✗')
      this.stream.write(`\r\x1b[K  ${mark} ${text} ${this.dim(secs)}\n`)
    } else {
      this.stream.write(`  ${how === 'done' ? 'ok  ' : 'FAIL'} ${text} ${secs}\n`)
    }
  }

  private render(): void {
    const s = this.live
    if (!s) return
    const cols = this.stream.columns || 120
    let text = `  … ${s.label}${s.detail ? `: ${s.detail}` : ''} (${fmtSecs(performance.now() - s.t0)})`
    if (text.length > cols - 1) text = text.slice(0, cols - 2) + '…'
    this.stream.write(`\r\x1b[K${text}`)
  }

  /** Writes text above the live line (which is redrawn after). */
  private write(text: string): void {
    if (this.tty && this.live) {
      this.stream.write(`\r\x1b[K${text}`)
      this.render()
    } else {
      this.stream.write(text)
    }
  }

  private paint(code: string, s: string): string {
    return this.color ? `\x1b[${code}m${s}\x1b[0m` : s
  }

  bold(s: string): string {
    return this.paint('1', s)
  }

  dim(s: string): string {
    return this.paint('2', s)
  }
}

// --- number formatting shared by the stages and the summary

export function fmtSecs(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`
}

export function fmtMs(ms: number): string {
  if (ms >= 100) return `${Math.round(ms)} ms`
  if (ms >= 10) return `${ms.toFixed(1)} ms`
  return `${ms.toFixed(2)} ms`
}

/** Decimal megabytes per second. */
export function mbps(bytes: number, ms: number): number {
  return ms > 0 ? bytes / 1e6 / (ms / 1000) : 0
}

export function fmtMBps(v: number): string {
  return `${v.toFixed(1)} MB/s`
}

export function fmtBytes(n: number): string {
  if (n >= 1024 * 1024) return `${(n / (1024 * 1024)).toFixed(n % (1024 * 1024) === 0 ? 0 : 1)} MiB`
  if (n >= 1024) return `${(n / 1024).toFixed(n % 1024 === 0 ? 0 : 1)} KiB`
  return `${n} B`
}

/** `+3.12s` relative to a stage's time zero. */
export function fmtOffset(ms: number): string {
  return `+${(ms / 1000).toFixed(2)}s`
}

export function round(v: number, digits = 2): number {
  const f = 10 ** digits
  return Math.round(v * f) / f
}

export function shortError(e: unknown): string {
  const err = e as { code?: unknown; message?: unknown }
  const msg = typeof err?.message === 'string' ? err.message : String(e)
  const first = msg.split('\n')[0]!
  return first.length > 160 ? first.slice(0, 157) + '...' : first
}
