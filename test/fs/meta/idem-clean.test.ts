// The idempotency-record clean of the first meta server (fs/meta/service.ts)
// must reach every expired record, however many younger ones sort before
// them: records are keyed by random request uuids, and a clean reads a
// bounded number of them. Small pages make "more young records than one clean
// reads" a handful of keys.

import test from 'ava'
import { randomUUID } from 'node:crypto'
import { encodeValue } from '../../../fs/meta/codec.js'
import { PREFIX_IDEM, idemKey, prefixEnd } from '../../../fs/meta/keys.js'
import { firstMeta } from '../../../fs/meta/sessions.js'
import { startMetaCluster } from '../../helpers/meta-cluster.js'
import { until } from '../../helpers/procs.js'

const PAGE = 4
const PAGES = 2
/** records younger than idemExpireMs: more than one clean reads (PAGE × PAGES) */
const YOUNG = 40

test('expired idempotency records are all cleaned: as many left after N and 2N expired ones (the young ones)', async (t) => {
  const m = await startMetaCluster(t, {
    inProcess: true,
    // the loop itself never runs here: the test runs the cleans
    meta: { idemCleanIntervalMs: 3_600_000, idemCleanPageSize: PAGE, idemCleanPages: PAGES },
  })
  const kv = m.kv!
  const svc = m.daemons[0]!.service
  await until(() => firstMeta(svc.mgmtd.cachedRouting) === 101, 15_000, 'meta 101 listed as the first meta')

  const put = (n: number, timestamp: number) =>
    kv.transact(async (txn) => {
      for (let i = 0; i < n; i++) {
        const clientId = randomUUID()
        const requestId = randomUUID()
        txn.set(idemKey(requestId, clientId), encodeValue({ clientId, requestId, timestamp, ok: true, result: null }))
      }
    })
  const count = () => kv.readOnly(async (txn) => (await txn.getRange(PREFIX_IDEM, prefixEnd(PREFIX_IDEM), { limit: 100_000 })).length)
  // enough cleans to read every record once, were they read in turn
  const cleanAll = async () => {
    const rounds = Math.ceil((await count()) / (PAGE * PAGES)) + 2
    for (let i = 0; i < rounds; i++) await svc.cleanIdempotent()
  }

  await put(YOUNG, Date.now() * 1000)
  const N = 60
  await put(N, 1) // µs since the epoch: long expired
  await cleanAll()
  const afterN = await count()
  await put(N, 1)
  await cleanAll()
  const after2N = await count()
  t.is(afterN, YOUNG, 'left after N expired records')
  t.is(after2N, YOUNG, 'left after 2N expired records')
})
