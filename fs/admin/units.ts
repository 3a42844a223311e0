// Byte sizes and small integers as operators type them: `65536`, `64K`,
// `64KiB`, `1M`, `1MB`, `1MiB`, `2G`. Like 3FS's Size parser every suffix is a
// power of 1024 (3FS prints 1MB for 1048576, so reading it back must agree).

import { StrataError } from '../common/errors.js'

const UNITS: Record<string, number> = {
  '': 1,
  B: 1,
  K: 1024,
  KB: 1024,
  KIB: 1024,
  M: 1024 ** 2,
  MB: 1024 ** 2,
  MIB: 1024 ** 2,
  G: 1024 ** 3,
  GB: 1024 ** 3,
  GIB: 1024 ** 3,
  T: 1024 ** 4,
  TB: 1024 ** 4,
  TIB: 1024 ** 4,
}

/** Parses a byte size with an optional binary suffix; throws INVALID_ARGUMENT. */
export function parseSize(text: string | number, what = 'size'): number {
  if (typeof text === 'number') {
    if (Number.isSafeInteger(text) && text >= 0) return text
    throw new StrataError('INVALID_ARGUMENT', `${what} must be a non-negative integer, got ${text}`)
  }
  const m = /^\s*(\d+)\s*([a-zA-Z]*)\s*$/.exec(String(text))
  const mult = m ? UNITS[m[2]!.toUpperCase()] : undefined
  if (!m || mult === undefined) {
    throw new StrataError('INVALID_ARGUMENT', `${what}: cannot parse "${text}" (expected a number with an optional K, M, G or T suffix)`)
  }
  const v = Number(m[1]) * mult
  if (!Number.isSafeInteger(v)) throw new StrataError('INVALID_ARGUMENT', `${what} ${text} is too large`)
  return v
}

/** Renders a byte count the short way when it is a whole number of units (1M, 64K), else as bytes. */
export function formatSize(n: number): string {
  for (const [suffix, mult] of [
    ['T', 1024 ** 4],
    ['G', 1024 ** 3],
    ['M', 1024 ** 2],
    ['K', 1024],
  ] as const) {
    if (n >= mult && n % mult === 0) return `${n / mult}${suffix}`
  }
  return String(n)
}

/** A non-negative decimal integer (ids, counts); anything else is refused. */
/** `hex`: 0x… is accepted too (flag words, which stat prints in hex). */
export function parseUint(text: string | number, what: string, opts: { min?: number; max?: number; hex?: boolean } = {}): number {
  const s = String(text).trim()
  const min = opts.min ?? 0
  const isHex = !!opts.hex && /^0x[0-9a-f]+$/i.test(s)
  if (!isHex && !/^\d+$/.test(s)) {
    throw new StrataError('INVALID_ARGUMENT', `${what} must be ${min > 0 ? `an integer ≥ ${min}` : 'a non-negative integer'}${opts.hex ? ' (decimal or 0x hex)' : ''}, got "${text}"`)
  }
  const v = Number(s)
  const max = opts.max ?? Number.MAX_SAFE_INTEGER
  if (!Number.isSafeInteger(v) || v < min || v > max) throw new StrataError('INVALID_ARGUMENT', `${what} must be in [${min}, ${max}], got ${s}`)
  return v
}

export function isPowerOfTwo(n: number): boolean {
  return Number.isSafeInteger(n) && n > 0 && Number.isInteger(Math.log2(n))
}
