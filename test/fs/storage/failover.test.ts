// Failure scenarios with real storage processes killed by SIGKILL
// (ref/3fs.md §9 scenarios 4–8 and 13): no acknowledged write is lost,
// returning targets resync and end with replicas equal.
import test from 'ava'
import { randomBytes } from 'node:crypto'
import { startTestCluster, until, type TestCluster } from '../../helpers/procs.js'
import { compareReplicas } from '../../helpers/replicas.js'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'

const CHUNK = 65536
const REC = 4096
const PER_CHUNK = CHUNK / REC

function client(t: any, c: TestCluster): StorageClient {
  const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc })
  t.teardown(() => sc.close())
  return sc
}

function record(seq: number): Buffer {
  const b = Buffer.alloc(REC, seq & 0xff)
  b.writeUInt32BE(seq, 0)
  return b
}

/** Appends records to one chain until stopped; returns the last acknowledged seq. */
function appender(sc: StorageClient, chainId: number, inode: bigint) {
  let stop = false
  let acked = -1
  const errors: unknown[] = []
  const done = (async () => {
    for (let seq = 0; !stop; seq++) {
      const chunkId = chunkIdOf(inode, Math.floor(seq / PER_CHUNK))
      try {
        await sc.write(chainId, chunkId, (seq % PER_CHUNK) * REC, record(seq), CHUNK)
        acked = seq
      } catch (e) {
        errors.push(e)
        return
      }
    }
  })()
  return {
    get acked() {
      return acked
    },
    stop: async () => {
      stop = true
      await done
      return { acked, errors }
    },
  }
}

async function verifyRecords(t: any, sc: StorageClient, chainId: number, inode: bigint, upTo: number): Promise<void> {
  for (let ci = 0; ci <= Math.floor(upTo / PER_CHUNK); ci++) {
    const data = await sc.read(chainId, chunkIdOf(inode, ci), 0, CHUNK)
    for (let k = 0; k < PER_CHUNK; k++) {
      const seq = ci * PER_CHUNK + k
      if (seq > upTo) break
      if (!data.subarray(k * REC, (k + 1) * REC).equals(record(seq))) {
        t.fail(`record ${seq} lost or corrupt`)
        return
      }
    }
  }
  t.pass(`records 0..${upTo} intact`)
}

async function killRole(t: any, role: 'head' | 'tail' | 'middle') {
  const c = await startTestCluster(t, { chains: 1 })
  const sc = client(t, c)
  const chainId = c.chains[0]!.chainId
  const before = (await c.routing()).chains[chainId]!
  const victimTarget = role === 'head' ? before.targets[0]!.targetId : role === 'tail' ? before.targets.at(-1)!.targetId : before.targets[1]!.targetId
  const victim = c.targetNode.get(victimTarget)!
  const w = appender(sc, chainId, 0x4000n)
  await until(() => w.acked >= 40, 20000, 'writer warmed up')
  await c.kill(victim)
  const ri = await until(
    async () => {
      const r = await c.routing()
      const last = r.chains[chainId]!.targets.at(-1)!
      return last.targetId === victimTarget && last.publicState === 'OFFLINE' ? r : undefined
    },
    15000,
    'victim OFFLINE at chain end',
  )
  t.true(ri.chains[chainId]!.chainVersion > before.chainVersion)
  if (role === 'head') t.is(ri.chains[chainId]!.targets[0]!.targetId, before.targets[1]!.targetId, 'former middle is the new head')
  await new Promise((r) => setTimeout(r, 800))
  const { acked, errors } = await w.stop()
  t.deepEqual(errors, [], 'no write error surfaced to the writer')
  t.true(acked > 40, `writer made progress after the kill (${acked})`)
  await verifyRecords(t, sc, chainId, 0x4000n, acked)

  // restart: OFFLINE → SYNCING → SERVING, replicas equal
  c.start(victim)
  await c.waitAllServing(30000)
  const after = await c.routing()
  t.true(after.chains[chainId]!.chainVersion > ri.chains[chainId]!.chainVersion)
  const rep = await compareReplicas(c)
  t.true(rep.ok, rep.problems.join('\n'))
  await verifyRecords(t, sc, chainId, 0x4000n, acked)
  for (const mode of ['head', 'tail'] as const) {
    const d = await sc.read(chainId, chunkIdOf(0x4000n, 0), 0, CHUNK, { mode })
    t.is(d.readUInt32BE(0), 0)
  }
}

test.serial('kill the tail mid-write: no acknowledged write lost; restart resyncs', (t) => killRole(t, 'tail'))
test.serial('kill the head mid-write: the middle takes over; restart resyncs', (t) => killRole(t, 'head'))
test.serial('kill the middle mid-write', (t) => killRole(t, 'middle'))

test.serial('writes during sync are forwarded as full-chunk replaces; final content equals the model', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const sc = client(t, c)
  const chainId = c.chains[0]!.chainId
  const inode = 0x7000n
  const nchunks = 64 // 4 MiB
  const model: Buffer[] = []
  const victimTarget = (await c.routing()).chains[chainId]!.targets[1]!.targetId
  const victim = c.targetNode.get(victimTarget)!
  await c.kill(victim)
  await until(async () => ((await c.routing()).chains[chainId]!.targets.at(-1)!.publicState === 'OFFLINE' ? true : undefined), 15000)
  for (let i = 0; i < nchunks; i++) {
    model[i] = randomBytes(CHUNK)
    await sc.write(chainId, chunkIdOf(inode, i), 0, model[i]!, CHUNK)
  }
  c.start(victim)
  await until(async () => ((await c.routing()).chains[chainId]!.targets.some((x) => x.publicState === 'SYNCING') ? true : undefined), 15000, 'SYNCING')
  // overwrite random 4 KiB ranges while the target syncs
  const end = Date.now() + 2500
  let writes = 0
  // each worker owns every fourth chunk, so the model is exact
  const writers = [0, 1, 2, 3].map(async (w) => {
    while (Date.now() < end) {
      const i = Math.floor(Math.random() * (nchunks / 4)) * 4 + w
      const off = Math.floor(Math.random() * (CHUNK / REC)) * REC
      const d = randomBytes(REC)
      await sc.write(chainId, chunkIdOf(inode, i), off, d, CHUNK)
      d.copy(model[i]!, off)
      writes++
    }
  })
  await Promise.all(writers)
  t.true(writes > 10)
  await c.waitAllServing(30000)
  let same = 0
  for (let i = 0; i < nchunks; i++) if ((await sc.read(chainId, chunkIdOf(inode, i), 0, CHUNK, { mode: 'tail' })).equals(model[i]!)) same++
  t.is(same, nchunks, 'every chunk equals the model')
  const rep = await compareReplicas(c)
  t.true(rep.ok, rep.problems.join('\n'))
})

test.serial('LASTSRV: the last serving target keeps the data; a target that returns first waits', async (t) => {
  const c = await startTestCluster(t, { chains: 1, replicas: 2, nodes: 2 })
  const sc = client(t, c)
  const chainId = c.chains[0]!.chainId
  const data = randomBytes(CHUNK)
  await sc.write(chainId, chunkIdOf(0x8000n, 0), 0, data, CHUNK)
  const [t1, t2] = c.chains[0]!.targets as [number, number]
  const n1 = c.targetNode.get(t1)!
  const n2 = c.targetNode.get(t2)!
  await c.kill(n2)
  await until(async () => ((await c.routing()).chains[chainId]!.targets.find((x) => x.targetId === t2)!.publicState === 'OFFLINE' ? true : undefined), 15000)
  // a write acknowledged by T1 alone
  const data2 = randomBytes(CHUNK)
  await sc.write(chainId, chunkIdOf(0x8000n, 1), 0, data2, CHUNK)
  await c.kill(n1)
  const ri = await until(async () => {
    const r = await c.routing()
    const st = Object.fromEntries(r.chains[chainId]!.targets.map((x) => [x.targetId, x.publicState]))
    return st[t1] === 'LASTSRV' && st[t2] === 'OFFLINE' ? r : undefined
  }, 15000, 'T1 LASTSRV, T2 OFFLINE')
  t.truthy(ri)
  // reads fail while nothing serves
  await t.throwsAsync(sc.read(chainId, chunkIdOf(0x8000n, 0), 0, 10, { deadlineMs: 800 }))
  // T2 alone returns: it must wait, not serve stale data
  c.start(n2)
  await until(async () => ((await c.routing()).chains[chainId]!.targets.find((x) => x.targetId === t2)!.publicState === 'WAITING' ? true : undefined), 15000, 'T2 WAITING')
  await new Promise((r) => setTimeout(r, 1000))
  const still = await c.routing()
  t.is(still.chains[chainId]!.targets.find((x) => x.targetId === t2)!.publicState, 'WAITING', 'T2 stays WAITING')
  // T1 returns: SERVING; T2 syncs from it
  c.start(n1)
  await c.waitAllServing(30000)
  t.deepEqual(await sc.read(chainId, chunkIdOf(0x8000n, 1), 0, CHUNK, { mode: 'tail' }), data2)
  t.deepEqual(await sc.read(chainId, chunkIdOf(0x8000n, 0), 0, CHUNK, { mode: 'tail' }), data)
  const rep = await compareReplicas(c)
  t.true(rep.ok, rep.problems.join('\n'))
})

test.serial('concurrent writers on one chunk: versions advance by one per write; replicas equal', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const a = client(t, c)
  const b = client(t, c)
  const chainId = c.chains[0]!.chainId
  const chunkId = chunkIdOf(0x9000n, 0)
  const N = 150
  const half = CHUNK / 2
  const results = await Promise.all([
    (async () => {
      const vers: number[] = []
      for (let i = 0; i < N; i++) vers.push((await a.write(chainId, chunkId, 0, Buffer.alloc(half, i & 0xff), CHUNK)).updateVer)
      return vers
    })(),
    (async () => {
      const vers: number[] = []
      for (let i = 0; i < N; i++) vers.push((await b.write(chainId, chunkId, half, Buffer.alloc(half, 0x80 | (i & 0x7f)), CHUNK)).updateVer)
      return vers
    })(),
  ])
  const all = [...results[0], ...results[1]].sort((x, y) => x - y)
  t.deepEqual(all, Array.from({ length: 2 * N }, (_, i) => i + 1), 'every applied write got the next version')
  t.true((await compareReplicas(c)).ok)
  const final = randomBytes(CHUNK)
  const r = await a.write(chainId, chunkId, 0, final, CHUNK)
  t.is(r.updateVer, 2 * N + 1)
  t.deepEqual(await b.read(chainId, chunkId, 0, CHUNK), final)
  const rep = await compareReplicas(c)
  t.true(rep.ok, rep.problems.join('\n'))
})

test.serial('mgmtd SIGKILL and restart: routing version continues, no spurious OFFLINE, I/O goes on', async (t) => {
  // A fail interval with room for a loaded 2-core CI machine: the property is
  // that the restart itself demotes nothing, not how fast heartbeats are.
  const failMs = 6000
  const c = await startTestCluster(t, { chains: 2, timers: { heartbeatFailIntervalMs: failMs } })
  const sc = client(t, c)
  const chainId = c.chains[0]!.chainId
  const before = await c.routing()
  const w = appender(sc, chainId, 0xa000n)
  await until(() => w.acked >= 20, 20000, 'writer warmed up')
  await c.kill('mgmtd')
  await new Promise((r) => setTimeout(r, 300)) // well inside the heartbeat fail interval
  c.start('mgmtd')
  await until(() => c.mgmtd.clusterInfo().then(() => true), 20000, 'mgmtd back')
  const mark = w.acked
  await until(() => w.acked >= mark + 20, 20000, 'writes continue')
  // wait past the fail interval: nothing may have been demoted
  await new Promise((r) => setTimeout(r, failMs))
  const { acked, errors } = await w.stop()
  t.deepEqual(errors, [])
  const after = await c.routing()
  t.true(after.routingInfoVersion >= before.routingInfoVersion, 'version continues monotonically')
  for (const ch of c.chains) {
    t.deepEqual(after.chains[ch.chainId]!.targets, before.chains[ch.chainId]!.targets, 'no spurious transitions')
  }
  await verifyRecords(t, sc, chainId, 0xa000n, acked)
})

test.serial('a full disk is an error for that request; a failing disk takes its targets offline; no crash', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const sc = client(t, c)
  const chainId = c.chains[0]!.chainId
  const ri = await c.routing()
  const [headT, midT] = ri.chains[chainId]!.targets.map((x) => x.targetId) as [number, number]
  const headNode = c.targetNode.get(headT)!
  const midNode = c.targetNode.get(midT)!
  await sc.write(chainId, chunkIdOf(0xb000n, 0), 0, Buffer.alloc(REC, 1), CHUNK)
  // ENOSPC at the head: the write fails with NO_SPACE, nothing half-visible
  await c.rpc.call(c.address(headNode), 3, 100, { targetId: headT, fault: 'ENOSPC' })
  const e = await t.throwsAsync(sc.write(chainId, chunkIdOf(0xb000n, 0), 0, Buffer.alloc(REC, 2), CHUNK))
  t.is((e as { code?: string }).code, 'NO_SPACE')
  t.deepEqual(await sc.read(chainId, chunkIdOf(0xb000n, 0), 0, REC), Buffer.alloc(REC, 1))
  await c.rpc.call(c.address(headNode), 3, 100, { targetId: headT, fault: null })
  await sc.write(chainId, chunkIdOf(0xb000n, 0), 0, Buffer.alloc(REC, 3), CHUNK)
  // EIO on the middle: its targets go offline, the chain reconfigures, the write still succeeds
  await c.rpc.call(c.address(midNode), 3, 100, { targetId: midT, fault: 'EIO' })
  await sc.write(chainId, chunkIdOf(0xb000n, 1), 0, Buffer.alloc(REC, 4), CHUNK)
  const after = await until(async () => {
    const r = await c.routing()
    return r.chains[chainId]!.targets.at(-1)!.targetId === midT && r.chains[chainId]!.targets.at(-1)!.publicState === 'OFFLINE' ? r : undefined
  }, 15000, 'failing target OFFLINE')
  t.truthy(after)
  t.deepEqual(await sc.read(chainId, chunkIdOf(0xb000n, 1), 0, REC), Buffer.alloc(REC, 4))
  // both processes are alive
  t.truthy(await c.rpc.echo(c.address(headNode)))
  t.truthy(await c.rpc.echo(c.address(midNode)))
})
