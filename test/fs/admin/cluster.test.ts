import test from 'ava'
import { chainsReady, summarizeChains } from '../../../fs/admin/cluster.js'
import type { LocalTargetState, PublicTargetState, RoutingInfo } from '../../../fs/common/types.js'

type T = [number, PublicTargetState, LocalTargetState, string?]

const ri = (...chains: T[][]): RoutingInfo => {
  const r = { routingInfoVersion: 1, bootstrapping: false, nodes: {}, chainTables: {}, chains: {}, targets: {} } as unknown as RoutingInfo
  chains.forEach((targets, i) => {
    const chainId = i + 1
    r.chains[chainId] = { chainId, chainVersion: 3, targets: targets.map(([targetId, publicState]) => ({ targetId, publicState })), preferredTargetOrder: [] }
    for (const [targetId, publicState, localState, offlineReason] of targets) {
      r.targets[targetId] = { targetId, publicState, localState, chainId, nodeId: 10001, diskIndex: 0, usedSize: 0, ...(offlineReason ? { offlineReason } : {}) }
    }
  })
  return r
}

const DIVERGED = 'resync from target 1 found 1 diverged chunk(s): …'

test('chainsReady: a target its node holds offline is waited for only without heldOffline; its chain must still serve', (t) => {
  const all = ri([[1, 'SERVING', 'UPTODATE'], [2, 'SERVING', 'UPTODATE']])
  t.true(chainsReady(all))
  t.true(chainsReady(all, undefined, { heldOffline: true }))
  const held = ri([[1, 'SERVING', 'UPTODATE'], [2, 'OFFLINE', 'OFFLINE', DIVERGED]])
  t.false(chainsReady(held))
  t.true(chainsReady(held, undefined, { heldOffline: true }))
  // offline without a reason (its node is down or still recovering): it will come back, so it is waited for
  t.false(chainsReady(ri([[1, 'SERVING', 'UPTODATE'], [2, 'OFFLINE', 'OFFLINE']]), undefined, { heldOffline: true }))
  t.false(chainsReady(ri([[1, 'SERVING', 'UPTODATE'], [2, 'SYNCING', 'ONLINE']]), undefined, { heldOffline: true }))
  // nothing serves: not ready, whatever holds the rest
  t.false(chainsReady(ri([[1, 'LASTSRV', 'OFFLINE'], [2, 'OFFLINE', 'OFFLINE', DIVERGED]]), undefined, { heldOffline: true }))
  // every chain counts
  t.false(chainsReady(ri([[1, 'SERVING', 'UPTODATE']], [[3, 'SERVING', 'UPTODATE'], [4, 'WAITING', 'ONLINE']]), undefined, { heldOffline: true }))
})

test("summarizeChains: problems list each chain target held offline with its node's reason", (t) => {
  const s = summarizeChains(ri([[1, 'SERVING', 'UPTODATE'], [2, 'OFFLINE', 'OFFLINE', DIVERGED]], [[3, 'SERVING', 'UPTODATE'], [4, 'OFFLINE', 'OFFLINE']]))
  t.like(s, { total: 2, serving: 0, degraded: 2, unavailable: 0 })
  t.deepEqual(s.problems, [{ chainId: 1, targetId: 2, publicState: 'OFFLINE', localState: 'OFFLINE', reason: DIVERGED }])
  t.deepEqual(s.chains[0]!.targets, ['1(SERVING-UPTODATE)', '2(OFFLINE-OFFLINE)'])
})
