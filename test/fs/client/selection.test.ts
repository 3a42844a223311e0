import test from 'ava'
import { ChannelAllocator, TargetSelector, drainRange, groupByNode, headOf, normalizeRange, resolveChain, backoffDelay, DEFAULT_RETRY_POLICY } from '../../../fs/client/index.js'
import type { SlimTarget } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { isStrataError } from '../../../fs/common/errors.js'
import type { PublicTargetState, RoutingInfo } from '../../../fs/common/types.js'

/** Routing info with nodes 1..3 (address n<i>:7000) and chains of the given target states; target t of chain c is (i+1)*100+c on node i+1. */
function routing(chains: Record<number, PublicTargetState[]>, version = 5): RoutingInfo {
  const ri: RoutingInfo = { routingInfoVersion: version, bootstrapping: false, nodes: {}, chainTables: {}, chains: {}, targets: {} }
  for (let n = 1; n <= 3; n++) {
    ri.nodes[n] = { nodeId: n, type: 'STORAGE', status: 'HEARTBEAT_CONNECTED', hostname: 'h', pid: 1, address: `n${n}:7000`, tags: [], lastHeartbeatTime: 0, configVersion: 0, releaseVersion: 't' }
  }
  for (const [c, states] of Object.entries(chains)) {
    const chainId = Number(c)
    ri.chains[chainId] = {
      chainId,
      chainVersion: 3,
      preferredTargetOrder: [],
      targets: states.map((s, i) => ({ targetId: (i + 1) * 100 + chainId, publicState: s })),
    }
    states.forEach((s, i) => {
      const targetId = (i + 1) * 100 + chainId
      ri.targets[targetId] = { targetId, publicState: s, localState: 'UPTODATE', chainId, nodeId: i + 1, diskIndex: 0, usedSize: 0 }
    })
  }
  return ri
}

function seq(values: number[]): () => number {
  let i = 0
  return () => values[i++ % values.length]!
}

test('resolveChain keeps the SERVING prefix in chain order and resolves node addresses', (t) => {
  const ri = routing({ 1: ['SERVING', 'SERVING', 'SERVING'], 2: ['SERVING', 'SYNCING', 'SERVING'], 3: ['LASTSRV', 'OFFLINE', 'OFFLINE'] })
  const c1 = resolveChain(ri, 1)
  t.deepEqual(
    c1.serving.map((x) => [x.targetId, x.nodeId, x.address]),
    [
      [101, 1, 'n1:7000'],
      [201, 2, 'n2:7000'],
      [301, 3, 'n3:7000'],
    ],
  )
  t.is(c1.chainVersion, 3)
  t.is(c1.routingInfoVersion, 5)
  t.is(c1.totalTargets, 3)
  // a SERVING target behind a non-serving one is not part of the serving chain
  t.deepEqual(resolveChain(ri, 2).serving.map((x) => x.targetId), [102])
  t.deepEqual(resolveChain(ri, 3).serving, [])
  t.true(isStrataError(t.throws(() => headOf(resolveChain(ri, 3))), 'CHAIN_UNAVAILABLE'))
  t.true(isStrataError(t.throws(() => resolveChain(ri, 9)), 'ROUTING_ERROR'))
  t.is(headOf(c1).targetId, 101)
})

test('resolveChain stops at a target whose node is unknown', (t) => {
  const ri = routing({ 1: ['SERVING', 'SERVING', 'SERVING'] })
  delete ri.nodes[2]
  t.deepEqual(resolveChain(ri, 1).serving.map((x) => x.targetId), [101])
})

test('head and tail modes name the first and last SERVING target', (t) => {
  const ri = routing({ 1: ['SERVING', 'SERVING', 'SYNCING'] })
  const c = resolveChain(ri, 1)
  const s = new TargetSelector()
  for (let i = 0; i < 5; i++) {
    t.is(s.select(c, 'head')!.targetId, 101)
    t.is(s.select(c, 'tail')!.targetId, 201)
  }
  // head/tail are not steered away by soft avoidance, only by hard exclusion
  t.is(s.select(c, 'head', { avoid: new Set([101]) })!.targetId, 101)
  t.is(s.select(c, 'head', { exclude: new Set([101]) }), undefined)
})

test('no mode ever picks a non-SERVING target', (t) => {
  const ri = routing({ 1: ['SERVING', 'SERVING', 'SYNCING'], 2: ['SERVING', 'WAITING', 'OFFLINE'] })
  const s = new TargetSelector()
  for (const mode of ['loadBalance', 'roundRobin', 'random', 'head', 'tail'] as const) {
    for (let i = 0; i < 50; i++) {
      t.true([101, 201].includes(s.select(resolveChain(ri, 1), mode)!.targetId), mode)
      t.is(s.select(resolveChain(ri, 2), mode)!.targetId, 102, mode)
    }
  }
})

test('roundRobin cycles through the replicas, per chain', (t) => {
  const ri = routing({ 1: ['SERVING', 'SERVING', 'SERVING'], 2: ['SERVING', 'SERVING', 'SERVING'] })
  const s = new TargetSelector()
  const c1 = resolveChain(ri, 1)
  const c2 = resolveChain(ri, 2)
  t.deepEqual([0, 1, 2, 3].map(() => s.select(c1, 'roundRobin')!.targetId), [101, 201, 301, 101])
  t.is(s.select(c2, 'roundRobin')!.targetId, 102)
  t.is(s.select(c1, 'roundRobin')!.targetId, 201)
})

test('random mode follows the random source', (t) => {
  const c = resolveChain(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] }), 1)
  const s = new TargetSelector(seq([0, 0.5, 0.99, 0.34]))
  t.deepEqual([0, 1, 2, 3].map(() => s.select(c, 'random')!.targetId), [101, 201, 301, 201])
})

test('loadBalance picks the least loaded node and breaks ties at random', (t) => {
  const c = resolveChain(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] }), 1)
  const load = new Map([
    [1, 4],
    [2, 1],
    [3, 2],
  ])
  const s = new TargetSelector(seq([0.9]))
  t.is(s.select(c, 'loadBalance', { load: (n) => load.get(n)! })!.targetId, 201)
  load.set(3, 1)
  // tie between nodes 2 and 3: random 0.9 → the second of them
  t.is(s.select(c, 'loadBalance', { load: (n) => load.get(n)! })!.targetId, 301)
  const s0 = new TargetSelector(seq([0]))
  t.is(s0.select(c, 'loadBalance', { load: (n) => load.get(n)! })!.targetId, 201)
  // with no load information every replica is a candidate
  const seen = new Set<number>()
  const sr = new TargetSelector()
  for (let i = 0; i < 200; i++) seen.add(sr.select(c, 'loadBalance')!.targetId)
  t.deepEqual([...seen].sort(), [101, 201, 301])
})

test('loadBalance spreads a batch evenly when load counts the IOs assigned so far', (t) => {
  const c = resolveChain(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] }), 1)
  const s = new TargetSelector()
  const assigned = new Map<number, number>()
  for (let i = 0; i < 30; i++) {
    const x = s.select(c, 'loadBalance', { load: (n) => assigned.get(n) ?? 0 })!
    assigned.set(x.nodeId, (assigned.get(x.nodeId) ?? 0) + 1)
  }
  t.deepEqual([...assigned.values()], [10, 10, 10])
})

test('avoided targets are skipped while another is left; excluded ones always', (t) => {
  const c = resolveChain(routing({ 1: ['SERVING', 'SERVING', 'SERVING'] }), 1)
  const s = new TargetSelector()
  for (let i = 0; i < 30; i++) {
    t.is(s.select(c, 'random', { avoid: new Set([101, 201]) })!.targetId, 301)
    t.true([101, 201, 301].includes(s.select(c, 'random', { avoid: new Set([101, 201, 301]) })!.targetId))
    t.is(s.select(c, 'roundRobin', { exclude: new Set([101, 301]) })!.targetId, 201)
  }
  t.is(s.select(c, 'loadBalance', { exclude: new Set([101, 201, 301]) }), undefined)
})

test('groupByNode makes one batch per node unless a limit is exceeded', (t) => {
  const tg = (n: number): SlimTarget => ({ targetId: n * 100, nodeId: n, address: `n${n}:7000` })
  const items = [
    { target: tg(1), bytes: 10, item: 'a' },
    { target: tg(2), bytes: 10, item: 'b' },
    { target: tg(1), bytes: 10, item: 'c' },
    { target: tg(3), bytes: 10, item: 'd' },
    { target: tg(2), bytes: 10, item: 'e' },
    { target: tg(1), bytes: 10, item: 'f' },
  ]
  t.deepEqual(
    groupByNode(items).map((b) => [b.nodeId, b.address, b.items]),
    [
      [1, 'n1:7000', ['a', 'c', 'f']],
      [2, 'n2:7000', ['b', 'e']],
      [3, 'n3:7000', ['d']],
    ],
  )
  t.deepEqual(
    groupByNode(items, 2).map((b) => [b.nodeId, b.items]),
    [
      [1, ['a', 'c']],
      [2, ['b', 'e']],
      [3, ['d']],
      [1, ['f']],
    ],
  )
  t.deepEqual(
    groupByNode(items, Infinity, 25).map((b) => [b.nodeId, b.items]),
    [
      [1, ['a', 'c']],
      [2, ['b', 'e']],
      [3, ['d']],
      [1, ['f']],
    ],
  )
  // an IO bigger than the byte limit still travels, alone
  const big = [
    { target: tg(1), bytes: 100, item: 'x' },
    { target: tg(1), bytes: 1, item: 'y' },
  ]
  t.deepEqual(groupByNode(big, Infinity, 50).map((b) => b.items), [['x'], ['y']])
  t.deepEqual(groupByNode([]), [])
})

test('channels: unique ids while held, seqnums grow across all channels, low ids reused first', (t) => {
  const a = new ChannelAllocator(3)
  const c1 = a.tryAllocate()!
  const c2 = a.tryAllocate()!
  const c3 = a.tryAllocate()!
  t.deepEqual([c1.id, c2.id, c3.id], [1, 2, 3])
  t.deepEqual([c1.seqnum, c2.seqnum, c3.seqnum], [1, 2, 3])
  t.is(a.tryAllocate(), undefined)
  t.is(a.inUse, 3)
  a.release(c2)
  const c4 = a.tryAllocate()!
  t.is(c4.id, 2)
  t.is(c4.seqnum, 4) // higher than anything channel 2 carried before
  // removeChunks reserves several seqnums
  a.release(c1)
  const c5 = a.tryAllocate(10)!
  t.deepEqual(c5, { id: 1, seqnum: 5 })
  t.deepEqual(a.reseq(c5, 2), { id: 1, seqnum: 15 })
  a.release(c5)
  t.deepEqual(a.tryAllocate(), { id: 1, seqnum: 17 })
  a.release({ id: 1, seqnum: 17 })
  t.true(isStrataError(t.throws(() => a.release({ id: 1, seqnum: 17 })), 'INTERNAL'))
  t.true(isStrataError(t.throws(() => a.reseq({ id: 9, seqnum: 0 })), 'INTERNAL'))
})

test('channels: waiters are served FIFO with fresh seqnums; abort and close reject them', async (t) => {
  const a = new ChannelAllocator(1)
  const held = a.tryAllocate()!
  const order: number[] = []
  const w1 = a.allocate().then((c) => (order.push(1), c))
  const w2 = a.allocate().then((c) => (order.push(2), c))
  const ctl = new AbortController()
  const w3 = a.allocate(1, ctl.signal)
  t.is(a.waiting, 3)
  t.is(a.tryAllocate(), undefined) // no queue jumping
  ctl.abort()
  t.true(isStrataError(await t.throwsAsync(w3), 'CANCELLED'))
  a.release(held)
  const c1 = await w1
  t.is(c1.id, 1)
  t.true(c1.seqnum > held.seqnum)
  a.release(c1)
  const c2 = await w2
  t.true(c2.seqnum > c1.seqnum)
  t.deepEqual(order, [1, 2])
  const w4 = a.allocate()
  a.close()
  t.true(isStrataError(await t.throwsAsync(w4), 'CLOSED'))
  a.close()
})

test('normalizeRange validates bounds and fills the per-request chunk limit', (t) => {
  const b = chunkIdOf(7n, 0)
  const e = chunkIdOf(7n, 0, 1)
  t.deepEqual(normalizeRange({ begin: b, end: e }, 32), { begin: b, end: e, maxNumChunkIdsToProcess: 32 })
  t.is(normalizeRange({ begin: b, end: e, maxNumChunkIdsToProcess: 3 }, 32).maxNumChunkIdsToProcess, 3)
  t.true(isStrataError(t.throws(() => normalizeRange({ begin: e, end: b }, 1)), 'INVALID_ARGUMENT'))
  t.true(isStrataError(t.throws(() => normalizeRange({ begin: b, end: e, maxNumChunkIdsToProcess: 0 }, 1)), 'INVALID_ARGUMENT'))
  t.true(isStrataError(t.throws(() => normalizeRange({ begin: Buffer.alloc(3), end: e }, 1)), 'INVALID_ARGUMENT'))
})

test('drainRange repeats until the server reports nothing more, and refuses to spin', async (t) => {
  const answers = [
    { numChunksRemoved: 4, moreChunksInRange: true },
    { numChunksRemoved: 4, moreChunksInRange: true },
    { numChunksRemoved: 1, moreChunksInRange: false },
  ]
  let i = 0
  t.deepEqual(await drainRange(async () => answers[i++]!), { numChunksRemoved: 9, steps: 3 })
  t.deepEqual(await drainRange(async () => ({ numChunksRemoved: 0, moreChunksInRange: false })), { numChunksRemoved: 0, steps: 1 })
  const stuck = drainRange(async () => ({ numChunksRemoved: 0, moreChunksInRange: true }))
  t.true(isStrataError(await t.throwsAsync(stuck), 'INTERNAL'))
})

test('backoff grows exponentially with jitter and is capped; fast codes use the short scale', (t) => {
  const p = DEFAULT_RETRY_POLICY
  const one = () => 1
  t.is(backoffDelay(p, 1, false, one), p.initialDelayMs)
  t.is(backoffDelay(p, 3, false, one), p.initialDelayMs * 4)
  t.is(backoffDelay(p, 50, false, one), p.maxDelayMs)
  t.is(backoffDelay(p, 50, true, one), p.fastMaxDelayMs)
  t.is(backoffDelay(p, 1, false, () => 0), p.initialDelayMs / 2)
})
