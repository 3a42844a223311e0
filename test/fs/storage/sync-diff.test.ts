import test from 'ava'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import type { ChunkMeta } from '../../../fs/storage/protocol.js'
import { classifySync, diffChunkSets, syncDecision, type SyncAction, type SyncReason } from '../../../fs/storage/sync-diff.js'

const CUR = 10

function meta(over: Partial<ChunkMeta> & { i?: number } = {}): ChunkMeta {
  const { i = 0, ...rest } = over
  return {
    chunkId: chunkIdOf(0x1000n, i),
    commitVer: 3,
    updateVer: 3,
    chainVer: 8,
    size: 4096,
    chunkSize: 1 << 20,
    state: 'COMMIT',
    recycleState: 'NORMAL',
    checksum: 0xdeadbeef,
    lastClientId: 'c',
    lastRequestId: 1,
    timestamp: 0,
    ...rest,
  }
}

// One row per rule, in the order the rules are tried.
const RULES: [string, ChunkMeta | undefined, ChunkMeta | undefined, SyncAction, SyncReason, ('none' | 'light' | 'heavy')?][] = [
  ['neither side has it', undefined, undefined, 'skip', 'absent'],
  ['only on the successor: remove it', undefined, meta(), 'remove', 'remote-only'],
  ['only on the predecessor: send it', meta(), undefined, 'transfer', 'local-only'],
  ['only local, even while being removed: still sent', meta({ recycleState: 'REMOVAL_IN_PROGRESS' }), undefined, 'transfer', 'local-only'],
  ['local being removed: skip (the removal is forwarded)', meta({ recycleState: 'REMOVAL_IN_PROGRESS', chainVer: 9 }), meta({ chainVer: 5 }), 'skip', 'local-recycling'],
  ['successor committed under an older chain version: send', meta({ chainVer: 9 }), meta({ chainVer: 8 }), 'transfer', 'remote-chain-ver-low'],
  ['successor older even with identical versions/checksum: send', meta({ chainVer: 9 }), meta({ chainVer: 2, updateVer: 5, commitVer: 4, state: 'DIRTY' }), 'transfer', 'remote-chain-ver-low'],
  ['successor has a pending update (updateVer != commitVer): send', meta(), meta({ updateVer: 4 }), 'transfer', 'remote-uncommitted'],
  ['successor chunk not COMMIT: send', meta(), meta({ state: 'DIRTY' }), 'transfer', 'remote-uncommitted'],
  ['successor chunk CLEAN but not COMMIT: send', meta(), meta({ state: 'CLEAN' }), 'transfer', 'remote-uncommitted'],
  ['successor uncommitted beats its higher chain version: send', meta({ chainVer: 8 }), meta({ chainVer: 9, updateVer: 4 }), 'transfer', 'remote-uncommitted'],
  ['successor committed under a newer chain version than our committed copy: fatal', meta({ chainVer: 8 }), meta({ chainVer: 9 }), 'fatal', 'remote-chain-ver-high'],
  ['ditto but our copy has a write in flight: skip', meta({ chainVer: 8, state: 'DIRTY', updateVer: 4 }), meta({ chainVer: 9 }), 'skip', 'local-uncommitted'],
  ['ditto, local CLEAN (written, not committed): skip', meta({ chainVer: 8, state: 'CLEAN' }), meta({ chainVer: 9 }), 'skip', 'local-uncommitted'],
  ['same chain version, versions differ, our commit is from an older chain version: fatal', meta({ updateVer: 4, commitVer: 4 }), meta(), 'fatal', 'commit-ver-mismatch'],
  ['same chain version, versions differ, we committed under the current chain version: skip', meta({ chainVer: CUR, updateVer: 4, commitVer: 4 }), meta({ chainVer: CUR }), 'skip', 'chain-writing'],
  ['same chain version, versions differ, write in flight locally: skip', meta({ updateVer: 4, state: 'DIRTY' }), meta(), 'skip', 'chain-writing'],
  ['successor ahead of our updateVer under the same chain version, ours committed long ago: fatal', meta({ updateVer: 3 }), meta({ updateVer: 5, commitVer: 5 }), 'fatal', 'commit-ver-mismatch'],
  ['heavy full sync resends everything consistent', meta(), meta(), 'transfer', 'full-sync-heavy', 'heavy'],
  ['heavy full sync still honours the consistency checks', meta({ chainVer: 8 }), meta({ chainVer: 9 }), 'fatal', 'remote-chain-ver-high', 'heavy'],
  ['checksums differ with equal versions from an older chain version: fatal', meta(), meta({ checksum: 1 }), 'fatal', 'checksum-mismatch'],
  ['checksums differ under the current chain version (write in flight): skip', meta({ chainVer: CUR }), meta({ chainVer: CUR, checksum: 1 }), 'skip', 'checksum-mismatch-writing'],
  ['checksums are compared at light level too', meta(), meta({ checksum: 1 }), 'fatal', 'checksum-mismatch', 'light'],
  ['identical: skip', meta(), meta(), 'skip', 'equal'],
  ['identical at light level: skip', meta(), meta(), 'skip', 'equal', 'light'],
  ['identical under the current chain version: skip', meta({ chainVer: CUR }), meta({ chainVer: CUR }), 'skip', 'equal'],
  ['size and timestamps are not compared', meta({ size: 1, timestamp: 5 }), meta({ size: 2, timestamp: 9 }), 'skip', 'equal'],
]

for (const [name, local, remote, action, reason, level] of RULES) {
  test(`rule: ${name}`, (t) => {
    t.deepEqual(classifySync(local, remote, CUR, level), { action, reason })
    t.is(syncDecision(local, remote, CUR, level), action)
  })
}

test('diffChunkSets sorts every chunk into its bucket', (t) => {
  const local = [
    meta({ i: 0 }), // equal -> skip
    meta({ i: 1, chainVer: 9 }), // remote older -> transfer
    meta({ i: 2 }), // local only -> transfer
    meta({ i: 4, recycleState: 'REMOVAL_IN_PROGRESS' }), // recycling -> skip
    meta({ i: 5, chainVer: CUR, updateVer: 4, state: 'DIRTY' }), // writing -> skip
  ]
  const remote = [meta({ i: 3 }), meta({ i: 1 }), meta({ i: 0 }), meta({ i: 4 }), meta({ i: 5, chainVer: CUR }), meta({ i: 6 })]
  const d = diffChunkSets(local, remote, CUR)
  t.deepEqual(d.transfer, [chunkIdOf(0x1000n, 1), chunkIdOf(0x1000n, 2)])
  t.deepEqual(d.remove, [chunkIdOf(0x1000n, 3), chunkIdOf(0x1000n, 6)])
  t.deepEqual(d.skip, [chunkIdOf(0x1000n, 0), chunkIdOf(0x1000n, 4), chunkIdOf(0x1000n, 5)])
  t.deepEqual(d.fatal, [])
  t.deepEqual(d.counts, { 'remote-only': 2, 'remote-chain-ver-low': 1, equal: 1, 'local-recycling': 1, 'chain-writing': 1, 'local-only': 1 })
})

test('diffChunkSets reports every fatal chunk with both metas', (t) => {
  const local = [meta({ i: 0 }), meta({ i: 1 }), meta({ i: 2 })]
  const remote = [meta({ i: 0, chainVer: 9 }), meta({ i: 1 }), meta({ i: 2, checksum: 7 })]
  const d = diffChunkSets(local, remote, CUR)
  t.deepEqual(
    d.fatal.map((f) => [f.chunkId, f.reason]),
    [
      [chunkIdOf(0x1000n, 0), 'remote-chain-ver-high'],
      [chunkIdOf(0x1000n, 2), 'checksum-mismatch'],
    ],
  )
  t.is(d.fatal[0]!.local, local[0])
  t.is(d.fatal[0]!.remote, remote[0])
})

test('diffChunkSets: heavy level, empty sets, duplicate remote ids, equal-content Buffers from different objects', (t) => {
  t.deepEqual(diffChunkSets([], [], CUR), { transfer: [], remove: [], skip: [], fatal: [], counts: {} })
  const local = [meta({ i: 0 }), meta({ i: 1 })]
  const remote = [meta({ i: 0 }), meta({ i: 1 }), meta({ i: 1 })]
  t.deepEqual(diffChunkSets(local, remote, CUR, 'heavy').transfer, [chunkIdOf(0x1000n, 0), chunkIdOf(0x1000n, 1)])
  const all = diffChunkSets(local, remote, CUR)
  t.is(all.skip.length, 2)
  t.is(all.transfer.length + all.remove.length + all.fatal.length, 0)
})

test('diffChunkSets accepts any iterable (e.g. a Map of metas)', (t) => {
  const m = new Map([['a', meta({ i: 9 })]])
  t.deepEqual(diffChunkSets(m.values(), [], CUR).transfer, [chunkIdOf(0x1000n, 9)])
})
