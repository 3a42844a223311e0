// Process lifecycle shared by every daemon: start, SIGTERM/SIGINT → orderly
// close → exit 0 for SIGTERM (the way launchers and `cluster down` stop a
// daemon: a clean stop is success) and 130 for SIGINT (Ctrl-C of a daemon in
// the foreground, as every other command reports an interrupt, 128 + 2);
// a second signal or a close that hangs exits hard. Unhandled
// errors are logged and end the process with a non-zero code so the launcher
// sees the crash instead of a half-alive node.

import fs from 'node:fs'
import path from 'node:path'
import type { Logger } from './log.js'

export interface Closable {
  close(): Promise<void>
}

export interface RunDaemonOptions {
  closeTimeoutMs?: number
  /**
   * A start that fails rejects runDaemon instead of being logged (with its
   * stack) and exiting 1: a command run by hand (`strata serve`) prints it
   * as `strata: CODE: message` like any other command.
   */
  throwStartError?: boolean
}

/** Exit code after a clean stop on SIGINT: 128 + 2, as a shell reports Ctrl-C. */
export const SIGINT_EXIT = 130

export async function runDaemon(log: Logger, start: () => Promise<Closable>, opts: RunDaemonOptions = {}): Promise<void> {
  let daemon: Closable | null = null
  let stopping = false
  const stop = async (why: 'SIGTERM' | 'SIGINT') => {
    if (stopping) {
      log.warn('second stop request; exiting now', { why })
      process.exit(1)
    }
    stopping = true
    log.info('stopping', { why })
    const hard = setTimeout(() => {
      log.error('close did not finish in time; exiting')
      process.exit(1)
    }, opts.closeTimeoutMs ?? 10_000)
    hard.unref()
    try {
      await daemon?.close()
      log.info('stopped')
      process.exit(why === 'SIGINT' ? SIGINT_EXIT : 0)
    } catch (e) {
      log.error('close failed', { err: e })
      process.exit(1)
    }
  }
  // Others write to stderr too (lmdb-js reports a failed commit with console.error); on a full
  // disk under the log file that write fails, and an unhandled stream error would end the daemon.
  // The CLI's closed-pipe handlers (bin/commands/output.ts) rethrow every error but EPIPE, which
  // ended the daemon all the same (exit 70): they are replaced. A reader of stdout that went away
  // still ends the process as SIGPIPE would (exit 141), as it did.
  process.stdout.removeAllListeners('error')
  process.stderr.removeAllListeners('error')
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(128 + 13)
  })
  process.stderr.on('error', () => {})
  process.on('SIGTERM', () => void stop('SIGTERM'))
  process.on('SIGINT', () => void stop('SIGINT'))
  process.on('uncaughtException', (e) => {
    log.error('uncaught exception', { err: e, stack: e.stack })
    process.exit(70)
  })
  process.on('unhandledRejection', (e) => {
    if (isLmdbBatchFailure(e)) {
      // lmdb-js rejects promises of its own when a write batch fails (a full disk); each
      // transaction of the batch gets the failure through its own promise, so none is lost
      log.warn('lmdb write batch failed', { err: e })
      return
    }
    log.error('unhandled rejection', { err: e, stack: (e as Error)?.stack })
    process.exit(70)
  })
  try {
    daemon = await start()
  } catch (e) {
    if (opts.throwStartError) throw e
    log.error('failed to start', { err: e, stack: (e as Error)?.stack })
    process.exit(1)
  }
  if (!stopping) log.info('started', { pid: process.pid })
}

/** Runs fn every intervalMs without overlapping runs; errors go to the logger. */
export function every(intervalMs: number, log: Logger, name: string, fn: () => Promise<void> | void): { stop(): void; kick(): void } {
  let timer: NodeJS.Timeout | null = null
  let running = false
  let stopped = false
  let again = false
  const tick = async () => {
    timer = null
    if (stopped) return
    if (running) {
      again = true
      return
    }
    running = true
    try {
      await fn()
    } catch (e) {
      log.warn(`${name} failed`, { err: e })
    } finally {
      running = false
    }
    if (stopped) return
    if (again) {
      again = false
      timer = setTimeout(tick, 0)
    } else timer = setTimeout(tick, intervalMs)
  }
  timer = setTimeout(tick, intervalMs)
  return {
    stop() {
      stopped = true
      if (timer) clearTimeout(timer)
    },
    kick() {
      if (stopped) return
      if (running) again = true
      else {
        if (timer) clearTimeout(timer)
        timer = setTimeout(tick, 0)
      }
    },
  }
}

/** Polls until `alive` is false for every item or `timeoutMs` passed; returns the ones still alive then (processes after a signal). */
export async function waitUntilGone<T>(items: readonly T[], alive: (item: T) => boolean, timeoutMs: number): Promise<T[]> {
  const end = Date.now() + timeoutMs
  let left = items.filter(alive)
  while (left.length && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 50))
    left = left.filter(alive)
  }
  return left
}

/** The one-letter state of `pid` from /proc (R, S, Z …), undefined when there is no such process or no /proc. */
export function procState(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
  } catch {
    return undefined
  }
}

/** True when `pid` runs: signal 0 reaches it (or is refused: someone else's) and it is not a zombie. */
export function pidAlive(pid: number | null | undefined): boolean {
  if (!pid || pid <= 0) return false
  try {
    process.kill(pid, 0)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  if (!fs.existsSync('/proc/self')) return true
  const s = procState(pid)
  return s !== undefined && s !== 'Z' && s !== 'X'
}

/** A `strata daemon ROLE --config F` process as its command line shows it. */
export interface DaemonProcessScan {
  pid: number
  role: string
  /** F, made absolute against the process's working directory */
  configFile: string
  /** its `--name`, when given */
  name?: string
}

/**
 * Every `strata daemon ROLE --config F` process on this machine but this one
 * (from /proc: its command line and working directory). Liveness beyond
 * being listed (zombies, a recycled pid) is the caller's to check.
 */
export function scanDaemonProcesses(): DaemonProcessScan[] {
  const out: DaemonProcessScan[] = []
  let pids: string[]
  try {
    pids = fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))
  } catch {
    return out
  }
  for (const d of pids) {
    const pid = Number(d)
    if (pid === process.pid) continue
    let argv: string[]
    try {
      argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
    } catch {
      continue
    }
    const i = argv.indexOf('daemon')
    const role = i >= 0 ? argv[i + 1] : undefined
    if (!role || role.startsWith('-')) continue
    // `--flag value` or `--flag=value`, after the role
    const after = (flag: string) => {
      const j = argv.indexOf(flag, i)
      if (j >= 0) return argv[j + 1]
      return argv.find((a, k) => k > i && a.startsWith(`${flag}=`))?.slice(flag.length + 1)
    }
    const given = after('--config')
    if (!given) continue
    let configFile: string
    try {
      configFile = path.isAbsolute(given) ? path.resolve(given) : path.resolve(fs.readlinkSync(`/proc/${pid}/cwd`), given)
    } catch {
      continue
    }
    const name = after('--name')
    out.push({ pid, role, configFile, ...(name ? { name } : {}) })
  }
  return out
}

/** lmdb-js's "Commit failed" error: it carries the cause as a promise in `commitError`. */
function isLmdbBatchFailure(e: unknown): boolean {
  return e instanceof Error && e.message.startsWith('Commit failed') && typeof (e as { commitError?: { then?: unknown } }).commitError?.then === 'function'
}
