// CRC32C helpers on top of fs/common/crc32c (hardware-accelerated). The chunk
// checksum is CRC32C of the whole chunk, maintained incrementally so an append
// never has to re-read what is already on disk.

import { crc32c } from '../../common/crc32c.js'

/** Reflected CRC32C (Castagnoli) polynomial. */
const POLY = 0x82f63b78

function gf2Times(mat: Uint32Array, vec: number): number {
  let sum = 0
  let i = 0
  let v = vec >>> 0
  while (v !== 0) {
    if (v & 1) sum ^= mat[i]!
    v >>>= 1
    i++
  }
  return sum >>> 0
}

function gf2Square(out: Uint32Array, mat: Uint32Array): void {
  for (let n = 0; n < 32; n++) out[n] = gf2Times(mat, mat[n]!)
}

/**
 * CRC32C of A‖B given crc(A), crc(B) and |B|, in O(log |B|) 32×32 GF(2)
 * matrix steps: appending |B| zero bytes to A's register is a linear map,
 * built by repeated squaring of the one-zero-bit operator.
 */
export function crc32cCombine(crcA: number, crcB: number, lenB: number): number {
  if (lenB <= 0) return crcA >>> 0
  const odd = new Uint32Array(32)
  const even = new Uint32Array(32)
  odd[0] = POLY
  let row = 1
  for (let n = 1; n < 32; n++) {
    odd[n] = row
    row = (row << 1) >>> 0
  }
  gf2Square(even, odd) // two zero bits
  gf2Square(odd, even) // four zero bits
  let crc = crcA >>> 0
  let len = lenB
  for (;;) {
    gf2Square(even, odd)
    if (len % 2 === 1) crc = gf2Times(even, crc)
    len = Math.floor(len / 2)
    if (len === 0) break
    gf2Square(odd, even)
    if (len % 2 === 1) crc = gf2Times(odd, crc)
    len = Math.floor(len / 2)
    if (len === 0) break
  }
  return (crc ^ crcB) >>> 0
}

const ZEROS = Buffer.alloc(256 * 1024)

/** CRC32C after appending `n` zero bytes to a stream whose CRC so far is `initial`. */
export function crc32cZeros(n: number, initial: number): number {
  let crc = initial >>> 0
  while (n > 0) {
    const k = Math.min(n, ZEROS.length)
    crc = crc32c(ZEROS.subarray(0, k), crc)
    n -= k
  }
  return crc >>> 0
}

export function crc32cOf(data: Uint8Array, initial = 0): number {
  return crc32c(data, initial) >>> 0
}
