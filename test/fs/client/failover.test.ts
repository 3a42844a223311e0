// Storage failover seen from the client: a node dying under a steady write
// and read load shows up as latency, never as an error.

import test from 'ava'
import { randomBytes } from 'node:crypto'
import { StorageClient, type ReadMode } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { MgmtdClient } from '../../../fs/mgmtd/index.js'
import { startCluster, until } from './cluster-helper.js'

const CHUNK_SIZE = 16 * 1024

test('writes and reads ride through the loss of the head node, then of the tail node', async (t) => {
  const cluster = await startCluster([1, 2])
  const mgmtd = new MgmtdClient({ addresses: [cluster.mgmtd.address] })
  const sc = new StorageClient({ mgmtd, retry: { attemptTimeoutMs: 2000 } })
  t.teardown(async () => {
    sc.close()
    mgmtd.close()
    await cluster.close()
  })

  const latest = new Map<string, { chainId: number; chunkId: Buffer; data: Buffer }>()
  let stop = false
  let writes = 0
  let reads = 0
  let slowest = 0
  const errors: unknown[] = []
  const writer = async (w: number) => {
    for (let i = 0; !stop; i++) {
      const chainId = 1 + (i % 2)
      const chunkId = chunkIdOf(2000n + BigInt(w), i % 6)
      const data = randomBytes(1024 + (i % 7) * 512)
      const start = performance.now()
      try {
        await sc.write(chainId, chunkId, 0, data, CHUNK_SIZE)
        // a shorter write leaves the old tail in place; track exactly what the chunk holds
        const key = `${chainId}:${chunkId.toString('hex')}`
        const prev = latest.get(key)?.data ?? Buffer.alloc(0)
        const merged = Buffer.concat([data, prev.subarray(data.length)])
        latest.set(key, { chainId, chunkId, data: merged })
        writes++
      } catch (e) {
        errors.push(e)
      }
      slowest = Math.max(slowest, performance.now() - start)
    }
  }
  const reader = async () => {
    while (!stop) {
      const entries = [...latest.values()]
      if (entries.length === 0) {
        await new Promise((r) => setTimeout(r, 10))
        continue
      }
      const res = await sc.batchRead(entries.map((e) => ({ chainId: e.chainId, chunkId: e.chunkId, offset: 0, length: CHUNK_SIZE })))
      for (const r of res) if (!r.ok) errors.push(r.error)
      reads += res.length
    }
  }
  const load = Promise.all([writer(0), writer(1), writer(2), reader()])

  const before = await mgmtd.refresh()
  const headTarget = before.chains['1']!.targets[0]!.targetId
  const headNode = before.targets[String(headTarget)]!.nodeId
  await until('some writes', () => writes > 20)

  // 1. the node hosting the heads dies
  const victim1 = cluster.storages.findIndex((s) => s.address === before.nodes[String(headNode)]!.address)
  await cluster.storages[victim1]!.close()
  await until('head moved', async () => {
    const ri = await mgmtd.refresh()
    return ri.chains['1']!.targets[0]!.targetId !== headTarget && ri
  })
  const w1 = writes
  await until('writes continue after head failover', () => writes > w1 + 20)

  // 2. the node hosting the tails dies; one replica is left
  const mid = await mgmtd.refresh()
  const serving = mid.chains['1']!.targets.filter((x) => x.publicState === 'SERVING')
  const tailTarget = serving.at(-1)!.targetId
  const tailAddr = mid.nodes[String(mid.targets[String(tailTarget)]!.nodeId)]!.address
  const victim2 = cluster.storages.findIndex((s) => s.address === tailAddr)
  t.not(victim2, victim1)
  await cluster.storages[victim2]!.close()
  await until('tail out of the chain', async () => {
    const ri = await mgmtd.refresh()
    return ri.chains['1']!.targets.filter((x) => x.publicState === 'SERVING').length === 1 && ri
  })
  const w2 = writes
  await until('writes continue on the last replica', () => writes > w2 + 20)

  stop = true
  await load
  t.deepEqual(errors, [])
  t.true(reads > 0)
  t.log(`writes=${writes} reads=${reads} slowest=${Math.round(slowest)}ms retries=${JSON.stringify(sc.stats().retries)}`)

  // whatever was acknowledged last is what every remaining replica returns
  for (const mode of ['head', 'tail', 'loadBalance'] as ReadMode[]) {
    for (const e of latest.values()) t.deepEqual(await sc.read(e.chainId, e.chunkId, 0, CHUNK_SIZE, { mode }), e.data)
  }
  const after = await mgmtd.refresh()
  t.true(after.chains['1']!.chainVersion > before.chains['1']!.chainVersion)
})
