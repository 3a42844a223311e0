// Deterministic pseudo-random data for tests (xorshift32), so failures reproduce.

/** Deterministic pseudo-random bytes. */
export function patternBytes(n: number, seed = 1): Buffer {
  const b = Buffer.allocUnsafe(n)
  let x = seed >>> 0 || 1
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    b[i] = x & 0xff
  }
  return b
}

export function rng(seed: number): () => number {
  let x = seed >>> 0 || 1
  return () => {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    return x / 0x100000000
  }
}
