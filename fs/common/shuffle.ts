// The seeded shuffle that places a file's stripe over its chains. 3FS feeds
// std::mt19937_64(seed) into libstdc++'s std::shuffle, so the permutation is
// part of the on-disk format: a file's chunks live on whichever chains the
// shuffle picked when the file was written. We therefore reproduce libstdc++
// bit for bit, including its two historical ways of scaling a 64-bit draw down
// to a range (GCC <= 10 and GCC >= 11), and only ever hand out seeds on which
// both agree, exactly as 3FS does.

import { randomBytes } from 'node:crypto'
import { StrataError } from './errors.js'

const U64_MAX = (1n << 64n) - 1n

/** Which libstdc++ uniform_int_distribution downscaling to emulate. */
export type ShuffleVariant = 'gcc11' | 'gcc10'

// ---------------------------------------------------------------------------
// mt19937_64

const NN = 312
const MM = 156
const MATRIX_A = 0xb5026f5aa96619e9n
const UPPER_MASK = 0xffffffff80000000n
const LOWER_MASK = 0x7fffffffn
const INIT_MULT = 6364136223846793005n

/** A stream of u64 draws: the generator, or a replay of one (isSafeSeed). */
export interface U64Source {
  next(): bigint
}

/**
 * std::mt19937_64. BigInt throughout: correctness over speed. The state is
 * built and twisted lazily, entry by entry, in the reference order: a
 * shuffle of a stripe draws a handful of numbers, and output k of the first
 * block needs only state entries up to k + 157, so a layout's seed search
 * (two shuffles per candidate seed, one per create) skips most of the 624
 * BigInt steps an eager generator takes before its first output.
 */
export class Mt19937_64 implements U64Source {
  // BigUint64Array stores modulo 2^64, which does the u64 wrap for us.
  private readonly mt = new BigUint64Array(NN)
  /** entries of the seeded state computed so far */
  private seeded = 1
  /** entries of the current block already twisted (NN: the block is complete) */
  private twisted = NN
  private mti = NN

  constructor(seed: bigint = 5489n) {
    if (typeof seed !== 'bigint' || seed < 0n || seed > U64_MAX) {
      throw new StrataError('INVALID_ARGUMENT', `mt19937_64 seed must be a u64 bigint, got ${String(seed)}`)
    }
    this.mt[0] = seed
  }

  /** Seeds state entries up to index `i` (the recurrence is sequential). */
  private seedTo(i: number): void {
    const mt = this.mt
    for (let k = this.seeded; k <= i; k++) {
      const prev = mt[k - 1]!
      mt[k] = INIT_MULT * (prev ^ (prev >> 62n)) + BigInt(k)
    }
    if (i >= this.seeded) this.seeded = i + 1
  }

  /** Twists entries up to `k` of the current block, in place and in order, as the reference loop does. */
  private twistTo(k: number): void {
    const mt = this.mt
    // entry i reads i+1 and i+MM before they are twisted (i+MM wraps onto twisted ones past NN-MM)
    if (this.seeded < NN) this.seedTo(Math.min(NN - 1, k + MM + 1))
    for (let i = this.twisted; i <= k; i++) {
      const y = (mt[i]! & UPPER_MASK) | (mt[(i + 1) % NN]! & LOWER_MASK)
      mt[i] = mt[(i + MM) % NN]! ^ (y >> 1n) ^ (y & 1n ? MATRIX_A : 0n)
    }
    this.twisted = k + 1
  }

  /** Next 64-bit output, in [0, 2^64). */
  next(): bigint {
    if (this.mti >= NN) {
      // a new block: its entries are twisted as they are drawn
      if (this.twisted < NN) this.twistTo(NN - 1)
      this.twisted = 0
      this.mti = 0
    }
    if (this.mti >= this.twisted) this.twistTo(this.mti)
    let x = this.mt[this.mti++]!
    x ^= (x >> 29n) & 0x5555555555555555n
    x ^= (x << 17n) & 0x71d67fffeda60000n
    x ^= (x << 37n) & 0xfff7eee000000000n
    x ^= x >> 43n
    return x
  }
}

/** Replays one generator's draws to several readers, each from the start (both variants of one seed). */
class SharedDraws {
  private readonly drawn: bigint[] = []
  constructor(private readonly g: U64Source) {}

  reader(): U64Source {
    let i = 0
    return {
      next: () => {
        while (this.drawn.length <= i) this.drawn.push(this.g.next())
        return this.drawn[i++]!
      },
    }
  }
}

// ---------------------------------------------------------------------------
// libstdc++ uniform_int_distribution<uint64_t> over mt19937_64

// GCC >= 11: Lemire's multiply-and-take-high-word with rejection of the
// biased low words.
function lemire(g: U64Source, range: bigint): bigint {
  let product = g.next() * range
  let low = product & U64_MAX
  if (low < range) {
    const threshold = ((1n << 64n) - range) % range
    while (low < threshold) {
      product = g.next() * range
      low = product & U64_MAX
    }
  }
  return product >> 64n
}

// GCC <= 10: reject draws past the largest multiple of the scaled range, then
// divide.
function divideAndReject(g: U64Source, range: bigint): bigint {
  const scaling = U64_MAX / range
  const past = range * scaling
  let ret: bigint
  do {
    ret = g.next()
  } while (ret >= past)
  return ret / scaling
}

/** Uniform integer in [a, b] the way libstdc++ of the given era draws it. */
export function uniformInt(g: U64Source, a: bigint, b: bigint, variant: ShuffleVariant): bigint {
  const urange = b - a
  // The engine's range is the full u64, so downscaling is needed unless the
  // caller asks for every u64 value.
  if (urange === U64_MAX) return g.next() + a
  const uerange = urange + 1n
  return (variant === 'gcc11' ? lemire(g, uerange) : divideAndReject(g, uerange)) + a
}

// ---------------------------------------------------------------------------
// std::shuffle

function swap<T>(v: T[], i: number, j: number): void {
  const t = v[i]!
  v[i] = v[j]!
  v[j] = t
}

/** Shuffles `v` in place exactly like libstdc++ std::shuffle(v, mt19937_64(seed)). */
export function gccShuffleInPlace<T>(v: T[], seed: bigint, variant: ShuffleVariant = 'gcc11'): T[] {
  return shuffleWith(v, v.length === 0 ? null : new Mt19937_64(seed), variant)
}

/** std::shuffle over the draws of `g` (null only for an empty `v`). */
function shuffleWith<T>(v: T[], g: U64Source | null, variant: ShuffleVariant): T[] {
  const n = v.length
  if (n === 0 || g === null) return v
  const un = BigInt(n)
  if (U64_MAX / un >= un) {
    // libstdc++ fast path: one draw yields two swap positions. With an even
    // length the number of positions to fill is odd, so one is done alone.
    let i = 1
    if (n % 2 === 0) {
      swap(v, i, Number(uniformInt(g, 0n, 1n, variant)))
      i++
    }
    while (i !== n) {
      const b0 = BigInt(i + 1)
      const b1 = b0 + 1n
      const x = uniformInt(g, 0n, b0 * b1 - 1n, variant)
      swap(v, i, Number(x / b1))
      i++
      swap(v, i, Number(x % b1))
      i++
    }
    return v
  }
  // Only lengths beyond 2^32 get here, which JS arrays cannot have; kept so
  // the function is libstdc++'s for every length it accepts.
  for (let i = 1; i < n; i++) swap(v, i, Number(uniformInt(g, 0n, BigInt(i), variant)))
  return v
}

// Permutations are recomputed for every chunk lookup of every file, so keep
// the most recent ones. Map iteration order is insertion order, which gives
// a cheap LRU: re-insert on hit, evict the first key when full.
const CACHE_LIMIT = 4096
const cache = new Map<string, readonly number[]>()

function cached(key: string, make: () => number[]): readonly number[] {
  const hit = cache.get(key)
  if (hit !== undefined) {
    cache.delete(key)
    cache.set(key, hit)
    return hit
  }
  const value = Object.freeze(make())
  cache.set(key, value)
  if (cache.size > CACHE_LIMIT) cache.delete(cache.keys().next().value!)
  return value
}

function checkArgs(seed: bigint, n: number): void {
  if (typeof seed !== 'bigint' || seed < 0n || seed > U64_MAX) {
    throw new StrataError('INVALID_ARGUMENT', `shuffle seed must be a u64 bigint, got ${String(seed)}`)
  }
  if (!Number.isInteger(n) || n < 0 || n > 0xffffffff) {
    throw new StrataError('INVALID_ARGUMENT', `shuffle length must be a u32, got ${n}`)
  }
}

/** The read-only cached permutation; callers must not mutate it. */
export function shufflePermutationShared(seed: bigint, n: number, variant: ShuffleVariant = 'gcc11'): readonly number[] {
  checkArgs(seed, n)
  return cached(`${variant}:${n}:${seed}`, () =>
    gccShuffleInPlace(
      Array.from({ length: n }, (_, i) => i),
      seed,
      variant,
    ),
  )
}

/**
 * Where each slot's element comes from after shuffling [0..n-1] with
 * mt19937_64(seed): `perm[j]` is the original index now at position j. To
 * shuffle `[base..base+n-1]`, take `base + perm[j]`.
 */
export function shufflePermutation(seed: bigint, n: number, variant: ShuffleVariant = 'gcc11'): number[] {
  return shufflePermutationShared(seed, n, variant).slice()
}

/** True when both libstdc++ eras produce the same permutation for this seed (3FS `safe_shuffle_seed`). */
export function isSafeSeed(seed: bigint, n: number): boolean {
  checkArgs(seed, n)
  // Both eras read the same draws; computed once, and not cached: a seed
  // search tries fresh random seeds, which would only evict the permutations
  // that chunk lookups reuse.
  const draws = new SharedDraws(new Mt19937_64(seed))
  const identity = () => Array.from({ length: n }, (_, i) => i)
  const a = shuffleWith(identity(), draws.reader(), 'gcc11')
  const b = shuffleWith(identity(), draws.reader(), 'gcc10')
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

/** A uniformly random u64. */
export function randomU64(): bigint {
  return randomBytes(8).readBigUInt64BE(0)
}

/**
 * Draws random seeds until one is safe for length `n`; 3FS gives up after
 * 1000 tries, and so do we (returns undefined). Unsafe seeds are rare enough
 * that giving up means the random source is broken.
 */
export function findSafeSeed(n: number, rng: () => bigint = randomU64): bigint | undefined {
  for (let i = 0; i < 1000; i++) {
    const seed = BigInt.asUintN(64, rng())
    if (isSafeSeed(seed, n)) return seed
  }
  return undefined
}
