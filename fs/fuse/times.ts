// How times cross between the daemon and Strata's build of the fuse-native
// addon (native/fuse/fuse-native.c, change 6). fuse-native carries each time
// as one JavaScript number split into two uint32s, and used ms since the
// epoch: that dropped sub-ms precision, could not carry a time before 1970
// (the split wraps a negative number), turned a time of 0 into "now"
// (fuse-native's stat conversion reads a falsy time as Date.now()), and made
// utimens's UTIME_NOW (tv_sec 0, tv_nsec 2^30 − 1) indistinguishable from
// the real times 0 s and 1 s. The number is now µs since the epoch plus
// 2^52, which every time from 1827 to 2112 fits exactly and positively, with
// two sentinels above that range for UTIME_OMIT and UTIME_NOW.

/** added to µs since the epoch; the C side subtracts it (STRATA_TIME_BIAS) */
export const TIME_BIAS = 2 ** 52
/** utimens: leave this time as it is (UTIME_OMIT) */
export const TIME_OMIT = Number.MAX_SAFE_INTEGER
/** utimens: set this time to the server's clock (UTIME_NOW) */
export const TIME_NOW = Number.MAX_SAFE_INTEGER - 1
/** the largest and smallest µs a wire time holds (later and earlier times are clamped) */
export const TIME_MAX_US = TIME_NOW - 1 - TIME_BIAS
export const TIME_MIN_US = 1 - TIME_BIAS

/** µs since the epoch (meta's unit) → the wire number, clamped into range (never 0, which fuse-native reads as "now"). */
export function usToWire(us: number): number {
  if (!Number.isFinite(us)) return TIME_BIAS
  return Math.round(Math.min(TIME_MAX_US, Math.max(TIME_MIN_US, us))) + TIME_BIAS
}

/** ms since the epoch → the wire number. */
export function msToWire(ms: number): number {
  return usToWire(ms * 1000)
}

/** The meta setattr sentinel for "now" (fs/meta SETATTR_TIME_NOW). */
const SETATTR_NOW = -1

/**
 * A utimens time from the addon → meta µs: undefined for UTIME_OMIT (leave
 * it), meta's "now" for UTIME_NOW, else the exact µs. The one real time that
 * is meta's sentinel (−1 µs, 1969-12-31T23:59:59.999999Z) becomes −2 µs.
 */
export function wireToSetattrUs(v: number): number | undefined {
  if (v === TIME_OMIT) return undefined
  if (v === TIME_NOW || !Number.isFinite(v)) return SETATTR_NOW
  const us = v - TIME_BIAS
  return us === SETATTR_NOW ? SETATTR_NOW - 1 : us
}
