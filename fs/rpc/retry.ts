// Retry with exponential backoff and jitter on retryable error codes, bounded
// by an overall deadline. Used by clients for 3FS's "fast retry" codes
// (routing version mismatch, chunk not committed) and transient transport
// failures.

import { StrataError, isRetryable, toStrataError } from '../common/errors.js'

export interface RetryOptions {
  /** give up after this long (ms) */
  deadlineMs?: number
  initialDelayMs?: number
  maxDelayMs?: number
  maxAttempts?: number
  signal?: AbortSignal
  /** called before each retry; e.g. refresh routing info */
  onRetry?: (err: StrataError, attempt: number) => void | Promise<void>
  /** override which errors are retried */
  shouldRetry?: (err: StrataError) => boolean
}

export async function withRetry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const deadline = performance.now() + (opts.deadlineMs ?? 30000)
  const initial = opts.initialDelayMs ?? 10
  const max = opts.maxDelayMs ?? 1000
  const maxAttempts = opts.maxAttempts ?? Infinity
  const should = opts.shouldRetry ?? isRetryable
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt)
    } catch (e) {
      const err = toStrataError(e)
      if (!should(err) || attempt >= maxAttempts || opts.signal?.aborted) throw err
      const delay = Math.min(max, initial * 2 ** Math.min(attempt - 1, 20)) * (0.5 + Math.random() * 0.5)
      if (performance.now() + delay > deadline) {
        throw new StrataError(err.code, `${err.reason} (gave up after ${attempt} attempts)`, { cause: err, ...(err.detail ? { detail: err.detail } : {}) })
      }
      await new Promise((r) => setTimeout(r, delay))
      if (opts.onRetry) await opts.onRetry(err, attempt)
    }
  }
}
