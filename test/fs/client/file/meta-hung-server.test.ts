// A HUNG meta server (SIGSTOP: its TCP connections stay open, the kernel
// still accepts connections for it, nothing answers) must not make the file
// client time out. After the attempt timeout (a quarter of a 10 s budget here,
// as `strata admin`'s default --timeout gives) the same request — the same
// request uuid — also goes to the other meta server, which applies it; when
// the stopped server resumes it executes the request it had queued, and its
// idempotency record answers that late execution (a replay, no META_EXISTS,
// nothing applied twice). Real meta processes over one lmdb KV, a real
// SIGSTOP/SIGCONT; the clients are the production MetaClient and FileSystem.

import test, { type ExecutionContext } from 'ava'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { FileSystem, MetaClient, type MetaRetryPolicy } from '../../../../fs/client/index.js'
import { isStrataError } from '../../../../fs/common/errors.js'
import { MetaMethod, ServiceId } from '../../../../fs/common/services.js'
import { MgmtdClient } from '../../../../fs/mgmtd/index.js'
import { lmdbKvAvailable, useSharedMetaCluster, type MetaCluster } from '../../../helpers/meta-cluster.js'
import { until } from '../../../helpers/procs.js'

const BUDGET_MS = 10_000
let m!: MetaCluster
useSharedMetaCluster(test, { metas: 2 }, (c) => (m = c))

const root = { parent: 0n }

/** A client that tries meta-1 first (addresses in node-id order, random() = 0), as half of all fresh CLI processes do. */
function client(t: ExecutionContext, retry: Partial<MetaRetryPolicy> = {}, addresses = m.metaAddresses): MetaClient {
  const mc = new MetaClient({ addresses: [...addresses], mgmtd: m.c.mgmtd, random: () => 0, sessionExtendIntervalMs: 0, retry: { totalMs: BUDGET_MS, ...retry } })
  t.teardown(() => mc.close())
  return mc
}

async function idemReplays(address: string): Promise<number> {
  const st = (await m.rpc.stats(address)) as { idempotency?: { idemReplays: number } }
  return st.idempotency?.idemReplays ?? 0
}

/**
 * SIGSTOPs meta-1 (SIGCONT at teardown at the latest). A process stopped in
 * the middle of a KV commit holds the host-wide write lock and stalls every
 * meta server's commits, which no client can route around (docs/meta.md):
 * when meta-2 cannot commit, meta-1 is resumed and stopped again.
 */
async function stopMeta1(t: ExecutionContext): Promise<() => void> {
  const child = m.c.procs.get('meta-1')!.child!
  const resume = () => void child.kill('SIGCONT')
  t.teardown(resume)
  const probe = client(t, { totalMs: 1500 }, [m.metaAddresses[1]!])
  for (let i = 0; ; i++) {
    child.kill('SIGSTOP')
    try {
      await probe.mkdirs({ path: { parent: 0n, path: `/probe-${randomUUID()}` }, perm: 0o755, recursive: false })
      return resume
    } catch (e) {
      if (i >= 5) throw e
      t.log(`meta-2 cannot commit while meta-1 is stopped (${String(e)}); stopping meta-1 again`)
      resume()
      await sleep(100)
    }
  }
}

test.serial('mkdirs and create complete on the other meta server while meta-1 is stopped; the late execution is a replay', async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built: needs meta child processes sharing one KV')
    t.pass()
    return
  }
  const [a1] = m.metaAddresses as [string]
  // a client that finds the servers in routing info (FUSE, `strata fs`, `strata admin`), fetched while
  // both were connected (mgmtd lists a stopped server until its heartbeat fails), connected to meta-1
  const mgmtd = new MgmtdClient({ addresses: [m.c.mgmtdAddress] })
  t.teardown(() => mgmtd.close())
  await mgmtd.refresh()
  const mc = new MetaClient({ mgmtd, random: () => 0, sessionExtendIntervalMs: 0, retry: { totalMs: BUDGET_MS } })
  t.teardown(() => mc.close())
  await mc.stat({ path: root })
  t.deepEqual((await mc.servers())[0], a1, 'meta-1 is tried first')
  const before = await idemReplays(a1)
  const resume = await stopMeta1(t)

  const uuid = randomUUID()
  let t0 = performance.now()
  const dir = await mc.mkdirs({ path: { parent: 0n, path: '/hung-d' }, perm: 0o755, recursive: false }, { uuid })
  const mkdirMs = performance.now() - t0
  // meta-1 is stopped, so the answer is meta-2's, asked once by one hedge within the budget
  t.log(`mkdirs answered after ${Math.round(mkdirMs)} ms`)
  t.is(mc.counters.hedges, 1, 'sent to meta-1, then after the attempt timeout to meta-2')
  t.is(mc.counters.retries, 0, 'answered by the hedge, not by a retry after the attempt failed')
  t.is(mc.counters.failures, 0)

  // create (O_EXCL) through FileSystem, with data and close
  const fsys = new FileSystem({ mgmtd: m.c.mgmtd, meta: client(t), periodicSyncMs: 0, storageRetry: { deadlineMs: 20_000, readDeadlineMs: 20_000 } })
  t.teardown(() => fsys.shutdown())
  t0 = performance.now()
  const fh = await fsys.open('/hung-d/f', 'wx')
  const createMs = performance.now() - t0
  t.log(`create answered after ${Math.round(createMs)} ms`)
  t.is(fsys.meta.counters.hedges, 1)
  t.is(fsys.meta.counters.retries, 0)
  t.is(fsys.meta.counters.failures, 0)
  await fsys.write(fh, Buffer.from('written while meta-1 was stopped'))
  await fsys.close(fh)

  // meta-2 answers everything now (the client avoids the server that did not answer)
  t.is((await fsys.stat('/hung-d/f')).file?.length, 32)

  // resume meta-1: it executes the two requests it had queued, and both are answered from the idempotency records
  resume()
  await until(async () => (await idemReplays(a1)) >= before + 2, 15_000, 'meta-1 replayed the mkdirs and the create')
  // nothing was applied twice: the same inode, one entry each, a new request still conflicts
  const on1 = client(t, {}, [a1])
  t.is((await on1.mkdirs({ path: { parent: 0n, path: '/hung-d' }, perm: 0o755, recursive: false }, { uuid })).stat.id, dir.stat.id, 'the replay answers the first result')
  const { entries } = await on1.list({ path: { parent: 0n, path: '/hung-d' }, prev: '', limit: 0, status: false })
  t.deepEqual(
    entries.map((e) => e.name),
    ['f'],
  )
  const again = await t.throwsAsync(on1.mkdirs({ path: { parent: 0n, path: '/hung-d' }, perm: 0o755, recursive: false }))
  t.true(isStrataError(again, 'META_EXISTS'))
  t.is((await on1.stat({ path: { parent: 0n, path: '/hung-d/f' } })).stat.file?.length, 32)
})

test.serial('a slow server is not abandoned: its answer after the attempt timeout still counts', async (t) => {
  const [a1, a2] = m.metaAddresses as [string, string]
  // both are slow; meta-1 answers after 3.5 s, meta-2 (asked at 2.5 s) not before 60 s more
  const f1 = await m.rpc.setFault(a1, { service: ServiceId.Meta, method: MetaMethod.stat, kind: 'delay', delayMs: 3500 })
  const f2 = await m.rpc.setFault(a2, { service: ServiceId.Meta, method: MetaMethod.stat, kind: 'delay', delayMs: 60_000 })
  t.teardown(async () => {
    await m.rpc.clearFaults(a1, f1.id).catch(() => {})
    await m.rpc.clearFaults(a2, f2.id).catch(() => {})
  })
  const mc = client(t)
  const t0 = performance.now()
  await mc.stat({ path: root })
  const ms = performance.now() - t0
  // causal bounds, not timing: meta-1's delay is 3.5 s, and meta-2 cannot answer before 62.5 s
  t.true(ms >= 3400 && ms < 60_000, `answered by meta-1 after ${Math.round(ms)} ms`)
  t.is(mc.counters.hedges, 1)
  t.is(mc.counters.failures, 0)
})

test.serial('a spent budget says a mutation may have been applied; after SIGCONT it has been', async (t) => {
  if (!lmdbKvAvailable()) {
    t.pass()
    return
  }
  const [a1] = m.metaAddresses as [string]
  const resume = await stopMeta1(t)
  const only1 = client(t, { totalMs: 2000 }, [a1])
  const t0 = performance.now()
  const err = await t.throwsAsync(only1.mkdirs({ path: { parent: 0n, path: '/maybe' }, perm: 0o755, recursive: false }))
  t.log(`failed after ${Math.round(performance.now() - t0)} ms`)
  // TIMEOUT after one attempt in the 2 s budget (the message below), not retried
  t.true(isStrataError(err, 'TIMEOUT'))
  t.regex(err!.message, /meta mkdirs: gave up after 1 attempt in 2 s; a server received the request and did not answer, so it may have been applied\)$/)
  // a read changes nothing: no such remark
  const read = await t.throwsAsync(only1.stat({ path: root }))
  t.regex(read!.message, /meta stat: gave up after 1 attempt in 2 s\)$/)
  resume()
  const on1 = client(t, {}, [a1])
  await until(async () => (await on1.stat({ path: { parent: 0n, path: '/maybe' } })).stat.type === 'Directory', 15_000, '/maybe applied once meta-1 resumed')
  t.pass()
})
