// A write open that the file client gives up on (its budget spent with the
// request sent and unanswered) may be applied by a meta server that had it
// queued, after the client stopped listening: a write session nobody closes,
// and for a file removed meanwhile chunks GC must keep. FileSystem.open
// withdraws such a request (meta `abandon`, same request uuid): applied →
// its session is closed; not yet → the late execution answers
// META_REQUEST_ABANDONED and applies nothing. The open still fails with its
// error, which says which of the two happened. Real meta processes (over one
// lmdb KV) made slow with the RPC delay hook, or SIGKILLed; the production
// MetaClient and FileSystem.

import test, { type ExecutionContext } from 'ava'
import { FileSystem, MetaClient } from '../../../../fs/client/index.js'
import { isStrataError } from '../../../../fs/common/errors.js'
import { CoreMethod, MetaMethod, ServiceId, methodName } from '../../../../fs/common/services.js'
import { useSharedMetaCluster, type MetaCluster } from '../../../helpers/meta-cluster.js'
import { until } from '../../../helpers/procs.js'

let m!: MetaCluster
useSharedMetaCluster(test, { metas: 2 }, (c) => (m = c))

/** A FileSystem whose meta calls give up after `totalMs`, trying meta-1 first; alive in mgmtd (its sessions are never pruned as a dead client's). */
function fileSystem(t: ExecutionContext, totalMs: number): FileSystem {
  const meta = new MetaClient({ addresses: [...m.metaAddresses], mgmtd: m.c.mgmtd, random: () => 0, retry: { totalMs } })
  const fsys = new FileSystem({ mgmtd: m.c.mgmtd, meta, periodicSyncMs: 0, storageRetry: { deadlineMs: 20_000, readDeadlineMs: 20_000 } })
  t.teardown(async () => {
    await fsys.shutdown().catch(() => undefined)
    meta.close()
  })
  return fsys
}

/** Holds the next `method` request on every meta server listed for `delayMs` before handling it. */
async function slow(t: ExecutionContext, method: number, delayMs: number, addresses = m.metaAddresses): Promise<void> {
  for (const a of addresses) {
    const f = await m.rpc.setFault(a, { service: ServiceId.Meta, method, kind: 'delay', delayMs, count: 1 })
    t.teardown(() => m.rpc.clearFaults(a, f.id).catch(() => undefined))
  }
}

interface Counters {
  idemReplays: number
  abandons: number
  abandonsClosed: number
}

async function counters(addresses = m.metaAddresses): Promise<Counters> {
  const sum: Counters = { idemReplays: 0, abandons: 0, abandonsClosed: 0 }
  for (const a of addresses) {
    const st = ((await m.rpc.stats(a).catch(() => ({}))) as { idempotency?: Partial<Counters> }).idempotency ?? {}
    for (const k of Object.keys(sum) as Array<keyof Counters>) sum[k] += st[k] ?? 0
  }
  return sum
}

/** requests of `method` the meta servers have finished handling (answered or not) */
async function handled(method: number, addresses = m.metaAddresses): Promise<number> {
  let n = 0
  for (const a of addresses) {
    const st = (await m.rpc.stats(a)) as { methods?: Record<string, { calls: number }> }
    n += st.methods?.[methodName(ServiceId.Meta, method)]?.calls ?? 0
  }
  return n
}

async function sessionsOf(fsys: FileSystem) {
  return (await fsys.meta.listSessions({ clientId: fsys.meta.clientId })).sessions
}

test.serial('a create that times out is withdrawn: the late executions apply nothing, no session, no file', async (t) => {
  const fsys = fileSystem(t, 1200)
  const before = await counters()
  const creates = await handled(MetaMethod.create)
  await slow(t, MetaMethod.create, 2500)
  const err = await t.throwsAsync(fsys.open('/late-create', 'w'))
  // both servers run their held copy of the create now: each finds the abandon's record
  await until(async () => (await handled(MetaMethod.create)) >= creates + 2, 15_000, 'both held creates ran')
  t.deepEqual(await sessionsOf(fsys), [], 'no session left by the late creates')
  t.true(isStrataError(await t.throwsAsync(fsys.stat('/late-create')), 'META_NOT_FOUND'))
  t.is((await counters()).idemReplays, before.idemReplays + 2)
  t.true(isStrataError(err, 'TIMEOUT'), String(err))
  t.regex(err!.message, /meta create: gave up after 2 attempts in 1\.2 s; a server received the request and did not answer, so it may have been applied\); abandoned: it was not applied and never will be$/)
  // the name is free: a new open creates it
  await fsys.writeFile('/late-create', 'now')
  t.is((await fsys.readFile('/late-create')).toString(), 'now')
})

test.serial('an open for write applied after its client gave up: the abandon closes its session, the data stays, the removed file is collected', async (t) => {
  const writer = fileSystem(t, 20_000)
  await writer.writeFile('/late-open', 'bytes written before')
  const st = await writer.stat('/late-open')
  const fsys = fileSystem(t, 500)
  const before = await counters()
  const opens = await handled(MetaMethod.open)
  // the open is applied at 0.8 s, after the client gave up (0.5 s); the first abandon is held longer, so the
  // client's retry of it (queued, once a second) finds the open's record
  await slow(t, MetaMethod.open, 800)
  await slow(t, MetaMethod.abandon, 2500)
  const err = await t.throwsAsync(fsys.open('/late-open', 'r+'))
  t.true(isStrataError(err, 'TIMEOUT'), String(err))
  await until(async () => (await handled(MetaMethod.open)) >= opens + 2, 15_000, 'both held opens ran')
  await until(async () => (await sessionsOf(fsys)).length === 0, 15_000, 'no session left by the late open')
  t.true((await counters()).abandonsClosed >= before.abandonsClosed + 1, 'an abandon found the open applied and closed its session')
  t.deepEqual((await writer.meta.listSessions({ inode: st.id })).sessions, [])
  t.is((await writer.readFile('/late-open')).toString(), 'bytes written before')
  t.is((await writer.stat('/late-open')).file?.length, 20)
  // no session keeps GC off the file once it is removed
  await writer.unlink('/late-open')
  await until(async () => !(await writer.meta.gcList({})).entries.some((e) => e.inode === st.id), 15_000, 'GC of the removed file')
  t.true(isStrataError(await t.throwsAsync(writer.meta.stat({ path: { parent: st.id } })), 'META_NOT_FOUND'))
})

test.serial('a refusal from meta-2 while meta-1 still holds the create: withdrawn too, meta-1 applies nothing after the refusal stopped being true', async (t) => {
  const [a1] = m.metaAddresses as [string]
  const writer = fileSystem(t, 20_000)
  const fsys = fileSystem(t, 4000)
  const creates = await handled(MetaMethod.create, [a1])
  await slow(t, MetaMethod.create, 2500, [a1])
  // meta-1 holds it; after the attempt timeout (1 s) meta-2 refuses it: no such directory
  const err = await t.throwsAsync(fsys.open('/made-later/f', 'w'))
  t.true(isStrataError(err, 'META_NOT_FOUND'), String(err))
  // the directory comes before meta-1 runs its copy, which would now succeed
  await writer.mkdir('/made-later')
  await until(async () => (await handled(MetaMethod.create, [a1])) > creates, 15_000, 'meta-1 ran its held copy of the create')
  t.deepEqual(await sessionsOf(fsys), [], 'no session left by the late create')
  t.deepEqual((await writer.readdirAll('/made-later')).entries, [])
  t.regex(err!.message, /; abandoned: it was not applied and never will be$/)
})

// last: meta-1 stays down
test.serial('meta-1 SIGKILLed holding the create: the abandon goes to meta-2, whose late copy applies nothing', async (t) => {
  const [a1, a2] = m.metaAddresses as [string, string]
  const fsys = fileSystem(t, 2000)
  await fsys.stat('/')
  await slow(t, MetaMethod.create, 60_000, [a1])
  await slow(t, MetaMethod.create, 4000, [a2])
  const before = await counters([a2])
  const creates = await handled(MetaMethod.create, [a2])
  const opening = fsys.open('/killed', 'wx')
  opening.catch(() => undefined)
  // meta-1 holds the create: kill it
  await until(async () => (await m.rpc.call<{ faults: unknown[] }>(a1, ServiceId.Core, CoreMethod.listFaults, null)).faults.length === 0, 5000, 'meta-1 received the create')
  await m.c.kill('meta-1', 'SIGKILL')
  const err = await t.throwsAsync(opening)
  await until(async () => (await handled(MetaMethod.create, [a2])) > creates, 15_000, 'meta-2 ran its held copy of the create')
  t.deepEqual(await sessionsOf(fsys), [], 'no session left by the late create')
  t.true(isStrataError(await t.throwsAsync(fsys.stat('/killed')), 'META_NOT_FOUND'))
  const after = await counters([a2])
  t.is(after.abandons, before.abandons + 1, 'meta-2 answered the abandon')
  t.is(after.idemReplays, before.idemReplays + 1, 'the late create replayed the abandon')
  t.regex(err!.message, /meta create: gave up after .*; abandoned: it was not applied and never will be$/)
})
