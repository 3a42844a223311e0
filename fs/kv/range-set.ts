// A set of half-open key ranges [begin, end) over order-preserving key
// strings (see keys.ts), kept sorted and coalesced so membership and
// intersection are binary searches.

export class RangeSet {
  private readonly begins: string[] = []
  private readonly ends: string[] = []

  get size(): number {
    return this.begins.length
  }

  /** Adds [b, e); empty or inverted ranges are ignored. Overlapping and adjacent ranges merge. */
  add(b: string, e: string): void {
    if (!(b < e)) return
    const n = this.begins.length
    // first range whose end reaches b (overlapping or adjacent)
    let lo = 0
    let hi = n
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.ends[mid]! < b) lo = mid + 1
      else hi = mid
    }
    let i = lo
    let nb = b
    let ne = e
    while (i < n && this.begins[i]! <= e) {
      if (this.begins[i]! < nb) nb = this.begins[i]!
      if (this.ends[i]! > ne) ne = this.ends[i]!
      i++
    }
    this.begins.splice(lo, i - lo, nb)
    this.ends.splice(lo, i - lo, ne)
  }

  /** Is `k` inside one of the ranges? */
  contains(k: string): boolean {
    const n = this.begins.length
    if (n === 0) return false
    // last range with begin <= k
    let lo = 0
    let hi = n
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.begins[mid]! <= k) lo = mid + 1
      else hi = mid
    }
    return lo > 0 && k < this.ends[lo - 1]!
  }

  /** Does [b, e) overlap one of the ranges? */
  intersects(b: string, e: string): boolean {
    const n = this.begins.length
    if (n === 0 || !(b < e)) return false
    // first range whose end is beyond b
    let lo = 0
    let hi = n
    while (lo < hi) {
      const mid = (lo + hi) >>> 1
      if (this.ends[mid]! <= b) lo = mid + 1
      else hi = mid
    }
    return lo < n && this.begins[lo]! < e
  }

  *[Symbol.iterator](): IterableIterator<[string, string]> {
    for (let i = 0; i < this.begins.length; i++) yield [this.begins[i]!, this.ends[i]!]
  }
}

/** Is any element of the sorted array `sorted` inside [b, e)? */
export function anyInRange(sorted: readonly string[], b: string, e: string): boolean {
  let lo = 0
  let hi = sorted.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (sorted[mid]! < b) lo = mid + 1
    else hi = mid
  }
  return lo < sorted.length && sorted[lo]! < e
}
