// StorageClient and abort listeners: many reads in flight that share one
// caller signal (what a CLI command passes down), and many retries sleeping
// at once, must not pile listeners onto one AbortSignal. Before the fan-out
// each RPC and each retry sleep added its own, and past 10 Node printed a
// MaxListenersExceededWarning. Cancellation still reaches every read.

import test, { type ExecutionContext } from 'ava'
import { randomBytes } from 'node:crypto'
import { getEventListeners } from 'node:events'
import { StorageClient } from '../../../fs/client/index.js'
import type { RetryPolicy } from '../../../fs/client/retry-policy.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { ServiceId, StorageMethod } from '../../../fs/common/services.js'
import { MgmtdClient } from '../../../fs/mgmtd/index.js'
import { startCluster, until, type Cluster } from './cluster-helper.js'

const CHUNK_SIZE = 64 * 1024
const READS = 64
let cluster: Cluster
let mgmtd: MgmtdClient
const ids = Array.from({ length: READS }, (_, i) => chunkIdOf(7001n, i))
const data = ids.map(() => randomBytes(4096))

test.before(async () => {
  cluster = await startCluster([1, 2])
  mgmtd = new MgmtdClient({ addresses: [cluster.mgmtd.address] })
  const sc = new StorageClient({ mgmtd })
  for (const [i, id] of ids.entries()) await sc.write(1 + (i % 2), id, 0, data[i]!, CHUNK_SIZE)
  sc.close()
})

test.after.always(async () => {
  mgmtd?.close()
  await cluster?.close()
})

/** A fresh client (Node warns once per signal, so each test needs its own) closed at teardown. */
function client(t: ExecutionContext, retry: Partial<RetryPolicy> = {}): StorageClient {
  const sc = new StorageClient({ mgmtd, retry: { deadlineMs: 20_000, readDeadlineMs: 20_000, ...retry } })
  t.teardown(() => sc.close())
  return sc
}

/** Collects MaxListenersExceededWarning until teardown. */
function listenerWarnings(t: ExecutionContext): Error[] {
  const seen: Error[] = []
  const on = (w: Error) => {
    if (w.name === 'MaxListenersExceededWarning') seen.push(w)
  }
  process.on('warning', on)
  t.teardown(() => void process.off('warning', on))
  return seen
}

/** Every storage node answers batchRead as `spec` says (cleared at teardown). */
async function faultReads(t: ExecutionContext, spec: { kind: 'delay'; delayMs: number } | { kind: 'fail'; code: string; count: number }): Promise<void> {
  for (const s of cluster.storages) await cluster.rpc.setFault(s.address, { service: ServiceId.Storage, method: StorageMethod.batchRead, ...spec })
  t.teardown(async () => {
    for (const s of cluster.storages) await cluster.rpc.clearFaults(s.address)
  })
}

function readAll(sc: StorageClient, signal?: AbortSignal): Promise<Buffer[]> {
  return Promise.all(ids.map((id, i) => sc.read(1 + (i % 2), id, 0, 4096, signal ? { signal } : {})))
}

/** IOs queued or in flight over the three storage nodes (node ids 11-13, see cluster-helper). */
function inFlight(sc: StorageClient): number {
  return [11, 12, 13].reduce((n, node) => n + sc.nodeLoad(node), 0)
}

// warnings are emitted on the next tick
const tick = () => new Promise((r) => setImmediate(r))

test.serial('64 reads in flight sharing one signal: one abort listener on it, none left after, no warning', async (t) => {
  const warnings = listenerWarnings(t)
  const sc = client(t)
  await faultReads(t, { kind: 'delay', delayMs: 300 })
  const ac = new AbortController()
  const reads = readAll(sc, ac.signal)
  await until('every read in flight', () => inFlight(sc) === READS)
  t.is(getEventListeners(ac.signal, 'abort').length, 1)
  t.deepEqual(await reads, data)
  t.is(getEventListeners(ac.signal, 'abort').length, 0)
  await tick()
  t.deepEqual(warnings.map((w) => w.message), [])
})

test.serial('64 reads sleeping between retries at once (with and without a caller signal): no warning', async (t) => {
  const warnings = listenerWarnings(t)
  const sc = client(t)
  // the first rounds fail on every node, so the reads back off together
  await faultReads(t, { kind: 'fail', code: 'CHUNK_NOT_COMMIT', count: READS })
  t.deepEqual(await readAll(sc), data)
  t.true((sc.stats().retries.CHUNK_NOT_COMMIT ?? 0) >= 11, 'more than 10 reads retried')
  await faultReads(t, { kind: 'fail', code: 'CHUNK_NOT_COMMIT', count: READS })
  const ac = new AbortController()
  t.deepEqual(await readAll(sc, ac.signal), data)
  t.is(getEventListeners(ac.signal, 'abort').length, 0)
  await tick()
  t.deepEqual(warnings.map((w) => w.message), [])
})

test.serial('aborting the shared signal cancels every read in flight; close() wakes reads sleeping between retries', async (t) => {
  const sc = client(t)
  await faultReads(t, { kind: 'delay', delayMs: 60_000 })
  const ac = new AbortController()
  const reads = ids.map((id, i) => sc.read(1 + (i % 2), id, 0, 4096, { signal: ac.signal }).then(() => 'ok', (e: { code?: string }) => e.code))
  await until('every read in flight', () => inFlight(sc) === READS)
  const t0 = performance.now()
  ac.abort(new Error('stop'))
  t.deepEqual(new Set(await Promise.all(reads)), new Set(['CANCELLED']))
  t.log(`cancelled after ${Math.round(performance.now() - t0)} ms`)
  // a hang guard, not timing: the answers are delayed 60 s
  t.true(performance.now() - t0 < 30_000, 'cancelled without waiting for the delayed answers')
  t.is(getEventListeners(ac.signal, 'abort').length, 0)

  // an already aborted signal stops a read before any RPC
  const rpcs = sc.stats().rpcs
  await t.throwsAsync(sc.read(1, ids[0]!, 0, 4096, { signal: ac.signal }), { code: 'CANCELLED' })
  t.deepEqual(sc.stats().rpcs, rpcs)

  // backoffs of 10 min (within a 20 min deadline): a sleep close() does not wake is never waited out here
  const slowRetry = { initialDelayMs: 600_000, maxDelayMs: 600_000, fastInitialDelayMs: 600_000, fastMaxDelayMs: 600_000 }
  const sleeper = client(t, { ...slowRetry, deadlineMs: 1_200_000, readDeadlineMs: 1_200_000 })
  for (const s of cluster.storages) await cluster.rpc.clearFaults(s.address)
  await faultReads(t, { kind: 'fail', code: 'CHUNK_NOT_COMMIT', count: 1_000 })
  const pending = sleeper.read(1, ids[0]!, 0, 4096).then(() => 'ok', (e: { code?: string }) => e.code)
  await until('a retry', () => (sleeper.stats().retries.CHUNK_NOT_COMMIT ?? 0) > 0)
  const t1 = performance.now()
  sleeper.close()
  t.is(await pending, 'CLOSED')
  t.log(`closed after ${Math.round(performance.now() - t1)} ms`)
  t.true(performance.now() - t1 < 60_000, 'woken at once, not after the 10 min backoff')
})
