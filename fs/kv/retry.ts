// The retry loop around one transaction attempt (FDB's `onError` loop, 3FS's
// `WithTransaction` + retry strategy): rerun the whole function on a fresh
// transaction after KV_CONFLICT / KV_TXN_TOO_OLD, with exponential backoff and
// full jitter, bounded by maxRetries and by a deadline for the whole call.

import { StrataError, isStrataError } from '../common/errors.js'
import type { TransactOptions } from './types.js'

export const DEFAULT_MAX_RETRIES = 100
export const DEFAULT_TIMEOUT_MS = 5000

/** errors after which the whole transaction function is rerun */
export const RETRY_CODES = ['KV_CONFLICT', 'KV_TXN_TOO_OLD'] as const

export interface BackoffOptions {
  /** first backoff cap in ms (doubles per retry) */
  baseMs: number
  /** largest backoff cap in ms */
  maxMs: number
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 1, maxMs: 100 }

/**
 * Runs `attempt(deadline)` until it succeeds, fails with a non-retryable
 * error, has been retried `maxRetries` times (the last KV_CONFLICT /
 * KV_TXN_TOO_OLD is thrown), or the deadline passes (TIMEOUT).
 */
export async function withRetries<R>(
  attempt: (deadline: number, attemptNo: number) => Promise<R>,
  opts: TransactOptions | undefined,
  backoff: BackoffOptions = DEFAULT_BACKOFF,
): Promise<R> {
  const maxRetries = opts?.maxRetries ?? DEFAULT_MAX_RETRIES
  const timeoutMs = opts?.timeoutMs ?? DEFAULT_TIMEOUT_MS
  const deadline = Date.now() + timeoutMs
  for (let retries = 0; ; retries++) {
    try {
      return await attempt(deadline, retries)
    } catch (e) {
      if (!isStrataError(e, RETRY_CODES)) throw e
      if (retries >= maxRetries) throw e
      const cap = Math.min(backoff.maxMs, backoff.baseMs * 2 ** Math.min(retries, 30))
      const delay = Math.random() * cap
      if (Date.now() + delay >= deadline)
        throw new StrataError('TIMEOUT', `transaction did not commit within ${timeoutMs} ms (${retries + 1} attempts, last: ${e.code})`, { cause: e })
      await new Promise((r) => setTimeout(r, delay))
    }
  }
}
