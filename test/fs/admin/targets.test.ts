import test from 'ava'
import { removeRefusal } from '../../../fs/admin/targets.js'
import type { RoutingInfo } from '../../../fs/common/types.js'

const ri = (targets: Array<[number, 'SERVING' | 'LASTSRV' | 'OFFLINE' | 'SYNCING' | 'WAITING']>): RoutingInfo =>
  ({
    routingInfoVersion: 1,
    bootstrapping: false,
    nodes: {},
    chainTables: {},
    chains: { 5: { chainId: 5, chainVersion: 1, targets: targets.map(([targetId, publicState]) => ({ targetId, publicState })), preferredTargetOrder: [] } },
    targets: {},
  }) as unknown as RoutingInfo

test('remove-target refusal: the LASTSRV sole target of a chain says only --force works', (t) => {
  const m = removeRefusal(ri([[401, 'LASTSRV']]), 401, 5, 'LASTSRV')
  t.regex(m, /only target/)
  t.regex(m, /--force/)
  t.notRegex(m, /offline it/, 'it is already offline: no advice that leads nowhere')
})

test('remove-target refusal: LASTSRV with other targets points at rotate-lastsrv; SERVING at offline-target / update-chain remove', (t) => {
  t.regex(removeRefusal(ri([[1, 'LASTSRV'], [2, 'OFFLINE']]), 1, 5, 'LASTSRV'), /rotate-lastsrv 5/)
  const m = removeRefusal(ri([[1, 'SERVING'], [2, 'SERVING']]), 2, 5, 'SERVING')
  t.regex(m, /offline-target --target-id 2/)
  t.regex(m, /update-chain 5 2 -m remove/)
})
