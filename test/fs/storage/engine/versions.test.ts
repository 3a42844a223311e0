// The version algebra as a pure table, and the CRC helpers it relies on.
import test from 'ava'
import { randomBytes } from 'node:crypto'
import { crc32c } from '@node-rs/crc32'
import type { ErrorCode } from '../../../../fs/common/errors.js'
import { crc32cCombine, crc32cZeros, nextVersions } from '../../../../fs/storage/engine/index.js'

type Row = [label: string, v: number, u: number, w: number, syncing: boolean, expect: ErrorCode | [number, number]]

// expect: [commitVer, updateVer] after the update, or the error code
const table: Row[] = [
  ['client on a fresh chunk', 0, 0, 0, false, [0, 1]],
  ['client on a committed chunk', 4, 4, 0, false, [4, 5]],
  ['client while an update is pending', 4, 5, 0, false, 'CHUNK_ADVANCE_UPDATE'],
  ['forwarded next version', 4, 4, 5, false, [4, 5]],
  ['forwarded replaces a pending one', 4, 5, 6, false, [4, 6]],
  ['forwarded below commitVer', 4, 4, 3, false, 'CHUNK_COMMITTED_UPDATE'],
  ['forwarded equal to commitVer', 4, 4, 4, false, 'CHUNK_COMMITTED_UPDATE'],
  ['forwarded equal to pending updateVer', 4, 5, 5, false, 'CHUNK_STALE_UPDATE'],
  ['forwarded skipping a version', 4, 4, 6, false, 'CHUNK_MISSING_UPDATE'],
  ['forwarded far ahead of a pending one', 4, 5, 9, false, 'CHUNK_MISSING_UPDATE'],
  ['forwarded first version of a new chunk', 0, 0, 1, false, [0, 1]],
  ['forwarded second version of a new chunk', 0, 0, 2, false, 'CHUNK_MISSING_UPDATE'],
  ['syncing ahead', 2, 2, 9, true, [8, 9]],
  ['syncing behind (successor had more)', 7, 8, 3, true, [2, 3]],
  ['syncing equal to local', 5, 5, 5, true, [4, 5]],
  ['syncing with version 0', 0, 0, 0, true, 'INVALID_ARGUMENT'],
]

for (const [label, v, u, w, syncing, expect] of table) {
  test(`nextVersions: ${label}`, (t) => {
    const d = nextVersions({ commitVer: v, updateVer: u }, w, syncing)
    if (typeof expect === 'string') {
      t.false(d.ok)
      if (!d.ok) t.is(d.code, expect)
    } else {
      t.deepEqual(d, { ok: true, commitVer: expect[0], updateVer: expect[1] })
    }
  })
}

test('crc32cCombine equals the CRC of the concatenation', (t) => {
  for (const [la, lb] of [
    [0, 0],
    [1, 0],
    [0, 5],
    [1, 1],
    [3, 17],
    [1000, 4096],
    [65536, 131072],
    [7, 1 << 20],
  ] as const) {
    const a = randomBytes(la)
    const b = randomBytes(lb)
    t.is(crc32cCombine(crc32c(a), crc32c(b), lb), crc32c(Buffer.concat([a, b])) >>> 0, `${la}+${lb}`)
  }
})

test('crc32cZeros equals the CRC of appended zero bytes', (t) => {
  const a = randomBytes(100)
  for (const n of [0, 1, 255, 262144, 262145, 700000]) {
    t.is(crc32cZeros(n, crc32c(a)), crc32c(Buffer.concat([a, Buffer.alloc(n)])) >>> 0)
  }
})
