// Options shared by registry push and pull.
import type { ProgressSink } from '../progress.js'
import type { RegistryClientOptions } from './client.js'

export interface RegistryOptions {
  /** http instead of https (default: http for localhost, 127.x and ::1 only) */
  insecure?: boolean
  /** credentials; else STRATA_REGISTRY_USER/STRATA_REGISTRY_PASSWORD, else $REGISTRY_AUTH_FILE or ~/.docker/config.json. A half missing here is taken from that environment; missing there too, INVALID_ARGUMENT (never an empty password) */
  username?: string
  password?: string
  /** one task per blob transferred */
  onProgress?: ProgressSink
  /** the same as onProgress (the name `strata image push|pull` passes) */
  progress?: ProgressSink
  /** cancels the transfer: CANCELLED */
  signal?: AbortSignal
  /** bytes per PATCH of a chunked upload (default 8 MiB) */
  chunkSize?: number
  /** retries of an idempotent request or a whole blob upload (default 4) */
  retries?: number
  /** first retry delay, doubled each time (default 250 ms) */
  retryDelayMs?: number
  /** how long the registry may leave a request without an answer or a body without new bytes before the transfer fails, not retried (default 60 s; `--timeout`) */
  timeoutMs?: number
}

export function progressOf(o: RegistryOptions): ProgressSink | undefined {
  return o.onProgress ?? o.progress
}

export function clientOptions(o: RegistryOptions): RegistryClientOptions {
  const c: RegistryClientOptions = {}
  if (o.insecure !== undefined) c.insecure = o.insecure
  if (o.username !== undefined) c.username = o.username
  if (o.password !== undefined) c.password = o.password
  if (o.chunkSize !== undefined) c.chunkSize = o.chunkSize
  if (o.retries !== undefined) c.retries = o.retries
  if (o.retryDelayMs !== undefined) c.retryDelayMs = o.retryDelayMs
  if (o.timeoutMs !== undefined) c.timeoutMs = o.timeoutMs
  if (o.signal !== undefined) c.signal = o.signal
  return c
}

/** `sha256:0123456789ab…` → `0123456789ab` (for progress labels). */
export function shortDigest(d: string): string {
  return d.slice(7, 19)
}
