// Chains churning under a live, slow node (what load does): a storage
// process is SIGSTOPped past the heartbeat timeout while chunk writes are in
// flight, then SIGCONTed, so mgmtd demotes targets that are alive and keep
// working. Every acknowledged write must read back once the chain settles.
import test from 'ava'
import { randomBytes } from 'node:crypto'
import { startTestCluster, until, type TestCluster } from '../../helpers/procs.js'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { ServiceId, StorageMethod } from '../../../fs/common/services.js'
import type { QueryChunkRsp } from '../../../fs/storage/protocol.js'

const CHUNK = 65536

function pause(c: TestCluster, name: string, sig: 'SIGSTOP' | 'SIGCONT'): void {
  c.procs.get(name)!.child?.kill(sig)
}

async function headNode(c: TestCluster, chainId: number): Promise<string> {
  const ri = await c.routing()
  const head = ri.chains[chainId]!.targets.find((x) => x.publicState === 'SERVING')
  return c.targetNode.get(head?.targetId ?? c.chains[0]!.targets[0]!)!
}

async function chunkOn(c: TestCluster, chainId: number, targetId: number, chunkId: Buffer): Promise<QueryChunkRsp> {
  return c.rpc.call<QueryChunkRsp>(c.address(c.targetNode.get(targetId)!), ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId, withData: true })
}

async function publicState(c: TestCluster, chainId: number, targetId: number): Promise<string | undefined> {
  return (await c.routing()).chains[chainId]!.targets.find((x) => x.targetId === targetId)?.publicState
}

// The interleaving the load produced, made deterministic: head A applies a
// client write and forwards it to B, which hangs (B stopped). A stops too,
// long enough for mgmtd to take both out; C alone serves. A resumes: its
// chain demoted it and takes it back as a SYNCING target after C, so A is
// now the chain's tail. When A's forward to B times out, A looked for its
// successor again, found none after itself, committed the write alone and
// acknowledged it. C never had it, and the resync from C removed it from A
// (C's copy is the truth): an acknowledged write gone from every replica.
test.serial('a head demoted to a SYNCING tail while its forward hangs does not acknowledge the write it applied alone', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const [a, b, cc] = c.chains[0]!.targets as [number, number, number]
  const nodeA = c.targetNode.get(a)!
  const nodeB = c.targetNode.get(b)!
  // one attempt outlives A's 10 s forward, so the answer the client gets is A's
  const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc, retry: { attemptTimeoutMs: 40_000 } })
  t.teardown(() => sc.close())
  const stopped = new Set<string>()
  t.teardown(() => {
    for (const n of stopped) pause(c, n, 'SIGCONT')
  })
  const stopNode = (n: string) => {
    pause(c, n, 'SIGSTOP')
    stopped.add(n)
  }
  const contNode = (n: string) => {
    pause(c, n, 'SIGCONT')
    stopped.delete(n)
  }
  await sc.write(chainId, chunkIdOf(0x6000n, 0), 0, randomBytes(CHUNK), CHUNK)

  stopNode(nodeB)
  const chunkId = chunkIdOf(0x6000n, 1)
  const data = randomBytes(CHUNK)
  const write = sc.write(chainId, chunkId, 0, data, CHUNK).then(
    () => 'acked' as const,
    (e: unknown) => e,
  )
  await until(async () => (await chunkOn(c, chainId, a, chunkId)).meta, 10000, 'A applied the write')
  stopNode(nodeA)
  await until(async () => ((await publicState(c, chainId, a)) === 'OFFLINE' && (await publicState(c, chainId, b)) === 'OFFLINE' ? true : undefined), 20000, 'A and B OFFLINE')
  contNode(nodeA)
  await until(async () => {
    const s = await publicState(c, chainId, a)
    return s === 'SYNCING' || s === 'SERVING' ? true : undefined
  }, 20000, 'A back after C')
  const outcome = await write
  contNode(nodeB)
  await c.waitAllServing(40000)
  if (outcome === 'acked') {
    for (const tid of [a, b, cc]) {
      const rsp = await chunkOn(c, chainId, tid, chunkId)
      t.true(rsp.data?.equals(data) ?? false, `acknowledged chunk on target ${tid}: ${rsp.meta ? 'differs' : 'missing'}`)
    }
  } else {
    t.fail(`the write failed: ${String(outcome)}`)
  }
})

test.serial('SIGSTOPped nodes churn the chain under in-flight writes: every acknowledged chunk survives on every replica', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc })
  t.teardown(() => sc.close())
  const stopped = new Set<string>()
  t.teardown(() => {
    for (const n of stopped) pause(c, n, 'SIGCONT')
  })
  const acked = new Map<number, Buffer>()
  let next = 0
  let stop = false
  const errors: unknown[] = []
  const writers = Array.from({ length: 6 }, async () => {
    while (!stop) {
      const i = next++
      const data = randomBytes(CHUNK)
      try {
        await sc.write(chainId, chunkIdOf(0x5000n, i), 0, data, CHUNK)
        acked.set(i, data)
      } catch (e) {
        errors.push(e)
      }
    }
  })
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
  await until(() => acked.size >= 20, 20000, 'writers warmed up')
  // the tail pauses first (it comes back SYNCING), then the head pauses
  // while it syncs its successor, twice: head LASTSRV, back SERVING
  const tail = c.targetNode.get(c.chains[0]!.targets[2]!)!
  for (const victim of [tail, 'HEAD', 'HEAD', 'HEAD']) {
    const name = victim === 'HEAD' ? await headNode(c, chainId) : victim
    pause(c, name, 'SIGSTOP')
    stopped.add(name)
    await sleep(2600)
    pause(c, name, 'SIGCONT')
    stopped.delete(name)
    await sleep(700)
  }
  stop = true
  await Promise.all(writers)
  t.log(`acked ${acked.size}, errors ${errors.length}`)
  await c.waitAllServing(40000).catch(() => undefined)
  const ri = await c.routing()
  const chain = ri.chains[chainId]!
  t.log(chain.targets.map((x) => `${x.targetId}:${x.publicState}`).join(' '))
  const lost: string[] = []
  for (const [i, data] of acked) {
    for (const tg of chain.targets) {
      const rsp = await c.rpc.call<QueryChunkRsp>(c.address(c.targetNode.get(tg.targetId)!), ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId: chunkIdOf(0x5000n, i), withData: true })
      if (!rsp.meta) lost.push(`chunk ${i} missing on ${tg.targetId} (${tg.publicState})`)
      else if (!rsp.data?.equals(data) && tg.publicState === 'SERVING') lost.push(`chunk ${i} differs on ${tg.targetId}`)
    }
  }
  t.deepEqual(lost.slice(0, 20), [])
})
