// Ctrl-C and SIGTERM during a command that starts things it must undo
// (`cluster up` starting daemons, `fs put` writing a temporary file): the
// signal does not end the process where it lands; it aborts an AbortSignal the
// command watches, the command undoes what it started, and the interruption is
// reported as CANCELLED with the signal in its detail (the CLI exits 128+n, as
// a shell reports a process a signal ended). A second signal while the command
// cleans up ends the process at once.

import { StrataError, isStrataError } from '../common/errors.js'

const SIGNAL_NUMBERS = { SIGINT: 2, SIGTERM: 15 } as const
type HandledSignal = keyof typeof SIGNAL_NUMBERS

/**
 * Runs `fn` with a signal that aborts (reason: CANCELLED) on SIGINT or
 * SIGTERM. With `cleanupMs`, a command still running that long after the
 * signal ends the process (a cleanup must not wait forever on a call that
 * never returns, such as a hung local filesystem).
 */
export async function interruptible<T>(what: string, fn: (signal: AbortSignal) => Promise<T>, opts: { cleanupMs?: number } = {}): Promise<T> {
  const ctl = new AbortController()
  const handlers = (Object.keys(SIGNAL_NUMBERS) as HandledSignal[]).map((sig) => {
    const h = () => {
      if (ctl.signal.aborted) {
        process.stderr.write(`strata: ${sig} again: exiting without cleaning up\n`)
        process.exit(128 + SIGNAL_NUMBERS[sig])
      }
      ctl.abort(new StrataError('CANCELLED', `${what} interrupted by ${sig}`, { detail: { signal: sig } }))
      if (opts.cleanupMs !== undefined) {
        setTimeout(() => {
          process.stderr.write(`strata: CANCELLED: ${what} interrupted by ${sig}; cleanup did not finish within ${Math.round(opts.cleanupMs! / 1000)} s, exiting\n`)
          process.exit(128 + SIGNAL_NUMBERS[sig])
        }, opts.cleanupMs).unref()
      }
    }
    process.on(sig, h)
    return [sig, h] as const
  })
  try {
    return await fn(ctl.signal)
  } catch (e) {
    throw ctl.signal.aborted ? asInterruption(e, ctl.signal.reason as StrataError) : e
  } finally {
    for (const [sig, h] of handlers) process.off(sig, h)
  }
}

/**
 * Whatever an interrupted command ends with is reported as the interruption:
 * a pipeline aborted by the signal rejects with Node's bare AbortError, and a
 * command's own CANCELLED ("run it again to resume") does not know the signal
 * that sets the exit code.
 */
function asInterruption(e: unknown, reason: StrataError): StrataError {
  if (interruptExitCode(e) !== null) return e as StrataError
  if (isStrataError(e) && e.code === 'CANCELLED') return new StrataError('CANCELLED', e.message.slice('CANCELLED: '.length), { cause: e.cause, detail: { ...(e.detail ?? {}), ...reason.detail } })
  return new StrataError('CANCELLED', reason.message.slice('CANCELLED: '.length), { cause: e, ...(reason.detail ? { detail: reason.detail } : {}) })
}

/** Settles like `p`, or rejects with the signal's reason as soon as it aborts (`p` goes on unobserved). */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p
  if (signal.aborted) {
    p.catch(() => {})
    return Promise.reject(signal.reason)
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => {
      p.catch(() => {})
      reject(signal.reason)
    }
    signal.addEventListener('abort', onAbort, { once: true })
    p.then(
      (v) => {
        signal.removeEventListener('abort', onAbort)
        resolve(v)
      },
      (e) => {
        signal.removeEventListener('abort', onAbort)
        reject(e)
      },
    )
  })
}

/** The exit code for an error that reports an interruption by a signal (128+n), else null. */
export function interruptExitCode(e: unknown): number | null {
  if (!isStrataError(e) || e.code !== 'CANCELLED') return null
  const sig = e.detail?.signal
  return typeof sig === 'string' && sig in SIGNAL_NUMBERS ? 128 + SIGNAL_NUMBERS[sig as HandledSignal] : null
}
