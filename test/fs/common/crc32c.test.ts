// The hardware CRC32C against an independent implementation (@node-rs/crc32)
// over the lengths and alignments where the six- and three-stream loops can
// go wrong: block boundaries, unaligned starts, continued streams.
import test from 'ava'
import { randomBytes } from 'node:crypto'
import { crc32c as reference } from '@node-rs/crc32'
import { crc32c, crc32cImplementation } from '../../../fs/common/index.js'

test('this x86-64 machine uses the SSE4.2 implementation', (t) => {
  t.is(crc32cImplementation(), 'sse4.2')
})

test('the standard check value, and an empty input returns the running CRC', (t) => {
  t.is(crc32c(Buffer.from('123456789')), 0xe3069283)
  t.is(crc32c(Buffer.alloc(0)), 0)
  t.is(crc32c(Buffer.alloc(0), 0xdeadbeef), 0xdeadbeef)
})

test('equals the reference for every length around the block boundaries, at every alignment, continuing any CRC', (t) => {
  const data = randomBytes(2 * 6 * 8192 + 3 * 8192 + 4096)
  const lengths = new Set<number>()
  // (six streams of 8 KiB blocks, then three, then three of 256 bytes)
  for (const edge of [0, 8, 3 * 256, 3 * 8192, 6 * 8192, 6 * 8192 + 3 * 8192, 6 * 8192 + 3 * 256, 2 * 6 * 8192, 2 * 6 * 8192 + 3 * 8192]) {
    for (let d = -9; d <= 9; d++) if (edge + d >= 0) lengths.add(edge + d)
  }
  for (let n = 0; n < 64; n++) lengths.add(n)
  for (let i = 0; i < 200; i++) lengths.add(Math.floor(Math.random() * (data.length - 8)))
  let checked = 0
  for (const n of lengths) {
    for (let off = 0; off < 8; off++) {
      if (off + n > data.length) continue
      const piece = data.subarray(off, off + n)
      const initial = (Math.random() * 2 ** 32) >>> 0
      if (crc32c(piece, initial) !== reference(piece, initial) >>> 0) {
        t.fail(`length ${n} at offset ${off} from ${initial.toString(16)}`)
        return
      }
      checked++
    }
  }
  t.true(checked > 1000)
  // a whole 4 MiB chunk (most of it in six-stream rounds), aligned and not
  const chunk = randomBytes(4 * 1024 * 1024 + 13)
  for (const off of [0, 3]) t.is(crc32c(chunk.subarray(off)), reference(chunk.subarray(off)) >>> 0, `chunk at offset ${off}`)
})

test('a stream split anywhere gives the CRC of the whole; other views hash their bytes', (t) => {
  const data = randomBytes(100_000)
  const whole = crc32c(data)
  for (const cut of [1, 255, 4096, 24_575, 24_576, 50_001, 99_999]) {
    t.is(crc32c(data.subarray(cut), crc32c(data.subarray(0, cut))), whole)
  }
  const words = new Uint32Array(data.buffer, data.byteOffset, 1000)
  t.is(crc32c(words as unknown as Uint8Array), reference(data.subarray(0, 4000)) >>> 0)
  t.is(crc32c(new DataView(data.buffer, data.byteOffset + 3, 500) as unknown as Uint8Array), reference(data.subarray(3, 503)) >>> 0)
})

test('bad arguments are type errors, not crashes', (t) => {
  t.throws(() => crc32c('text' as unknown as Uint8Array), { instanceOf: TypeError })
  t.throws(() => crc32c(Buffer.from('x'), 'y' as unknown as number), { instanceOf: TypeError })
})
