import test from 'ava'
import { chainIdOf, decodeTargetId, defaultStripeSize, planLayout, targetIdOf } from '../../../fs/admin/index.js'
import { isStrataError } from '../../../fs/common/errors.js'

test('target and chain ids follow 3FS gen_chain_table.py', (t) => {
  // ((prefix*1e6 + nodeId)*1e3 + disk+1)*100 + target+1
  t.is(targetIdOf(10001, 0, 0), 1001000100101)
  t.is(targetIdOf(10002, 1, 0), 1001000200201)
  t.is(targetIdOf(10001, 15, 5, 10), ((10 * 1e6 + 10001) * 1e3 + 16) * 100 + 6)
  t.is(targetIdOf(7, 2, 3, 0), ((0 + 7) * 1000 + 3) * 100 + 4)
  // (prefix*1e3 + disk+1)*1e5 + chainIndex
  t.is(chainIdOf(0, 1), 1000100001)
  t.is(chainIdOf(1, 1), 1000200001)
  t.is(chainIdOf(15, 42, 10), (10 * 1000 + 16) * 100000 + 42)
  t.deepEqual(decodeTargetId(1001000200201), { prefix: 10, nodeId: 10002, diskIndex: 1, targetIndex: 0 })
  t.deepEqual(decodeTargetId(targetIdOf(123456, 998, 98, 99)), { prefix: 99, nodeId: 123456, diskIndex: 998, targetIndex: 98 })
  t.is(decodeTargetId(100), undefined)
  for (const bad of [() => targetIdOf(0, 0), () => targetIdOf(1_000_000, 0), () => targetIdOf(1, 999), () => targetIdOf(1, 0, 99), () => chainIdOf(0, 0), () => chainIdOf(0, 100_000), () => chainIdOf(0, 1, 43)]) {
    t.true(isStrataError(t.throws(bad), 'INVALID_ARGUMENT'))
  }
})

test('the reference cluster: 3 nodes x 2 targets x 3 replicas → C1 = S1a,S2a,S3a and C2 = S2b,S3b,S1b', (t) => {
  const l = planLayout({ nodeIds: [10001, 10002, 10003], targetsPerNode: 2, replicas: 3 })
  t.deepEqual(l.chains, [
    { chainId: 1000100001, targets: [1001000100101, 1001000200101, 1001000300101] },
    { chainId: 1000200001, targets: [1001000200201, 1001000300201, 1001000100201] },
  ])
  t.is(l.targets.length, 6)
  t.deepEqual(
    l.targets.filter((x) => x.nodeId === 10001),
    [
      { targetId: 1001000100101, nodeId: 10001, diskIndex: 0, chainId: 1000100001 },
      { targetId: 1001000100201, nodeId: 10001, diskIndex: 1, chainId: 1000200001 },
    ],
  )
  t.is(defaultStripeSize(l.chains.length), 2)
  t.is(defaultStripeSize(100), 16)
})

test('layouts: replicas on distinct nodes, every node holds exactly M targets, ids unique, heads spread', (t) => {
  for (const [N, M, R] of [
    [1, 1, 1],
    [1, 4, 1],
    [2, 1, 2],
    [3, 1, 3],
    [4, 3, 2],
    [4, 3, 3],
    [5, 3, 3],
    [5, 6, 3],
    [6, 4, 3],
    [7, 3, 7],
  ] as const) {
    const nodeIds = Array.from({ length: N }, (_, i) => 10001 + i)
    const l = planLayout({ nodeIds, targetsPerNode: M, replicas: R })
    const label = `${N}x${M}x${R}`
    t.is(l.chains.length, (N * M) / R, label)
    t.is(new Set(l.chains.map((c) => c.chainId)).size, l.chains.length, `${label}: chain ids unique`)
    t.is(new Set(l.targets.map((x) => x.targetId)).size, N * M, `${label}: target ids unique`)
    const byId = new Map(l.targets.map((x) => [x.targetId, x]))
    for (const c of l.chains) {
      t.is(c.targets.length, R)
      t.is(new Set(c.targets.map((tid) => byId.get(tid)!.nodeId)).size, R, `${label}: chain ${c.chainId} on distinct nodes`)
      for (const tid of c.targets) t.is(byId.get(tid)!.chainId, c.chainId)
    }
    for (const n of nodeIds) t.is(l.targets.filter((x) => x.nodeId === n).length, M, `${label}: node ${n} has ${M} targets`)
    // heads: no node leads more than ceil(chains/N)+1 chains
    const heads = new Map<number, number>()
    for (const c of l.chains) heads.set(byId.get(c.targets[0]!)!.nodeId, (heads.get(byId.get(c.targets[0]!)!.nodeId) ?? 0) + 1)
    t.true(Math.max(...heads.values()) <= Math.ceil(l.chains.length / N) + 1, `${label}: heads spread ${[...heads.values()]}`)
  }
})

test('impossible layouts are refused', (t) => {
  const e1 = t.throws(() => planLayout({ nodeIds: [1, 2], targetsPerNode: 2, replicas: 3 }))
  t.regex(e1!.message, /3 replicas need at least 3 storage nodes/)
  const e2 = t.throws(() => planLayout({ nodeIds: [1, 2, 3, 4], targetsPerNode: 1, replicas: 3 }))
  t.regex(e2!.message, /cannot be split into chains of 3/)
  t.throws(() => planLayout({ nodeIds: [], targetsPerNode: 1, replicas: 1 }))
  t.throws(() => planLayout({ nodeIds: [1, 1], targetsPerNode: 1, replicas: 1 }))
})
