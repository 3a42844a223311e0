// The one CRC32C every chunk checksum goes through. On x86-64 with SSE4.2 it
// is the native addon's three-stream hardware loop (17 GiB/s on the benchmark
// VM); elsewhere, or if the addon is missing, @node-rs/crc32 (3.1 GiB/s here:
// one dependent chain of CRC32 instructions). Both give identical results;
// the test suite checks them against each other.
import { crc32c as portableCrc32c } from '@node-rs/crc32'
import { native } from './native.js'

type Crc32c = (data: Uint8Array, initial?: number) => number

let impl: Crc32c | null = null
let implName: 'sse4.2' | 'portable' = 'portable'

function resolve(): Crc32c {
  let hw: Crc32c | undefined
  try {
    hw = native().crc32c
  } catch {
    hw = undefined
  }
  if (hw) {
    implName = 'sse4.2'
    return hw
  }
  implName = 'portable'
  return (data, initial = 0) => portableCrc32c(data as Buffer, initial) >>> 0
}

/** CRC32C (Castagnoli) of `data`, continuing a stream whose CRC so far is `initial`; an unsigned 32-bit number. */
export function crc32c(data: Uint8Array, initial = 0): number {
  return (impl ??= resolve())(data, initial)
}

/** Which implementation `crc32c` uses in this process (asserted by the tests on x86-64). */
export function crc32cImplementation(): 'sse4.2' | 'portable' {
  impl ??= resolve()
  return implName
}
