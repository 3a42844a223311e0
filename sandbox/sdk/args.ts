// Local checks of the SDK's own arguments (option objects, callbacks,
// signals, data), so that a misspelt option or a wrong type fails with
// INVALID_ARGUMENT naming the field instead of being dropped or surfacing as
// a TypeError from deep inside a call. What the daemon takes (create specs,
// exec bodies, list filters) is checked with the daemon's own validators.
import { StrataError } from '../../fs/common/errors.js'

export type Check = (v: unknown, name: string) => void

function bad(msg: string): never {
  throw new StrataError('INVALID_ARGUMENT', msg)
}

/**
 * Checks an options argument: undefined, or an object whose keys are all in
 * `checks` and whose defined values pass them. Returns it as a record.
 */
export function options(o: unknown, what: string, checks: Record<string, Check>): Record<string, unknown> {
  if (o === undefined) return {}
  if (typeof o !== 'object' || o === null || Array.isArray(o)) bad(`${what}: the options must be an object`)
  const rec = o as Record<string, unknown>
  for (const [k, v] of Object.entries(rec)) {
    const c = checks[k]
    if (!c) bad(`${what}: unknown option ${JSON.stringify(k)} (known: ${Object.keys(checks).join(', ')})`)
    if (v !== undefined) c(v, `${what}: ${k}`)
  }
  return rec
}

export const isString: Check = (v, n) => {
  if (typeof v !== 'string' || v.length === 0 || v.includes('\0')) bad(`${n} must be a non-empty string without NUL`)
}

/** A user inside the sandbox: a name or uid, as the daemon's `user` field takes it. */
export const isUser: Check = (v, n) => {
  if (typeof v !== 'string' || v.length === 0 || v.length > 64 || v.includes('\0')) bad(`${n} must be a user name or uid (1 to 64 characters)`)
}

export const isBool: Check = (v, n) => {
  if (typeof v !== 'boolean') bad(`${n} must be true or false`)
}

export const isFunction: Check = (v, n) => {
  if (typeof v !== 'function') bad(`${n} must be a function`)
}

export const isAbortSignal: Check = (v, n) => {
  if (!(v instanceof AbortSignal)) bad(`${n} must be an AbortSignal`)
}

export function intIn(min: number, max: number): Check {
  return (v, n) => {
    if (!Number.isSafeInteger(v) || (v as number) < min || (v as number) > max) bad(`${n} must be an integer in [${min}, ${max}]`)
  }
}

/** Anything the daemon checks itself (passed on as is). */
export const passThrough: Check = () => undefined

/** Bytes to send: a string, bytes, or an async iterable of bytes (a Readable is one). */
export function checkData(v: unknown, n: string): void {
  if (typeof v === 'string' || v instanceof Uint8Array) return
  if (v !== null && typeof v === 'object' && typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function') return
  bad(`${n} must be a string, a Uint8Array or an async iterable of Uint8Array (e.g. a Readable), not ${v === null ? 'null' : typeof v}`)
}

/** A command: a shell string or a non-empty array of strings (the daemon checks lengths and NULs). */
export function checkCmd(v: unknown, n: string): void {
  if (typeof v === 'string') return
  if (Array.isArray(v) && v.every((a) => typeof a === 'string')) return
  bad(`${n} must be a shell string or an array of argument strings, not ${Array.isArray(v) ? 'an array with a non-string' : v === null ? 'null' : typeof v}`)
}

/** What setTimeout can wait (larger values fire at once). */
export const MAX_TIMER_MS = 2 ** 31 - 1
