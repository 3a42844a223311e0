// A resync that finds diverged chunks on the SYNCING successor (it holds
// committed data the predecessor cannot explain: written alone by an older
// Strata, or a corrupted disk). As in 3FS, the predecessor takes the
// successor offline, and it stays OFFLINE with the reason visible until the
// operator replaces its copy (docs/cli.md, "A resync that cannot finish").
import test from 'ava'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { startTestCluster, until, type TestCluster } from '../../helpers/procs.js'
import { compareReplicas } from '../../helpers/replicas.js'
import { divergeChunk } from '../../helpers/diverge.js'
import { ok } from '../../bin/helpers.js'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf, formatChunkIdHex } from '../../../fs/common/chunk-id.js'
import { ServiceId, StorageMethod } from '../../../fs/common/services.js'
import { summarizeChains } from '../../../fs/admin/cluster.js'
import type { QueryChunkRsp } from '../../../fs/storage/protocol.js'

const CHUNK = 65536

async function chunkOn(c: TestCluster, chainId: number, targetId: number, chunkId: Buffer): Promise<QueryChunkRsp> {
  return c.rpc.call<QueryChunkRsp>(c.address(c.targetNode.get(targetId)!), ServiceId.Storage, StorageMethod.queryChunk, { chainId, chunkId, withData: true })
}

test.serial('a successor with diverged chunks is taken offline once, with the reason shown; remove-target + create-target brings the chain back whole', async (t) => {
  const c = await startTestCluster(t, { chains: 1 })
  const chainId = c.chains[0]!.chainId
  const [, b, tail] = c.chains[0]!.targets as [number, number, number]
  const tailNode = c.targetNode.get(tail)!
  const nodeId = c.procs.get(tailNode)!.spec.config.nodeId as number
  const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc })
  t.teardown(() => sc.close())
  const model = new Map<string, Buffer>()
  const put = async (index: number) => {
    const id = chunkIdOf(0x7000n, index)
    const data = randomBytes(CHUNK)
    await sc.write(chainId, id, 0, data, CHUNK)
    model.set(id.toString('hex'), data)
  }
  for (let i = 0; i < 4; i++) await put(i)

  await c.kill(tailNode)
  await until(async () => (await c.routing()).chains[chainId]!.targets.find((x) => x.targetId === tail)?.publicState === 'OFFLINE', 20000, 'tail OFFLINE')
  await put(4) // written while the tail is away: the resync has something to send
  const high = chunkIdOf(0x7000n, 0)
  const same = chunkIdOf(0x7000n, 1)
  const tailDir = path.join(c.dir, tailNode, 'targets', String(tail))
  await divergeChunk(tailDir, tail, high, 'chain-ver-high')
  await divergeChunk(tailDir, tail, same, 'checksum')
  c.start(tailNode)

  // bounded outcome: the predecessor offlines the tail, which says why
  const ri = await until(
    async () => {
      const r = await c.routing()
      const ti = r.targets[tail]
      return ti?.publicState === 'OFFLINE' && ti.localState === 'OFFLINE' && ti.offlineReason ? r : undefined
    },
    20000,
    'diverged tail OFFLINE with a reason',
  )
  const reason = ri.targets[tail]!.offlineReason!
  t.regex(reason, /resync from target \d+ found 2 diverged chunk/)
  t.true(reason.includes(formatChunkIdHex(high)) && reason.includes('remote-chain-ver-high'), reason)
  t.true(reason.includes(formatChunkIdHex(same)) && reason.includes('checksum-mismatch'), reason)

  // it stays so: no round after the first (several resync gaps later)
  await sleep(1500)
  const still = (await c.routing()).targets[tail]!
  t.is(still.publicState, 'OFFLINE')
  t.is(still.localState, 'OFFLINE')
  const predecessorLog = c.log(c.targetNode.get(b)!)
  const lines = predecessorLog.split('\n').filter((l) => l.includes('resync found diverged chunks'))
  t.is(lines.length, 1, lines.join('\n'))
  t.true(lines[0]!.includes(String(tail)) && lines[0]!.includes(formatChunkIdHex(high)) && lines[0]!.includes('docs/cli.md'), lines[0])

  // what the operator sees: list-targets and cluster status's chain summary
  const A = ['admin', '--mgmtd-address', c.mgmtdAddress]
  const row = JSON.parse(await ok(t, [...A, 'list-targets', '--json'])).find((r: { targetId: number }) => r.targetId === tail)
  t.like(row, { publicState: 'OFFLINE', localState: 'OFFLINE', offlineReason: reason })
  // an offline-target now (a habit, or 3FS's longer procedure) keeps the reason
  await ok(t, [...A, 'offline-target', '--target-id', String(tail)])
  t.is((await c.routing()).targets[tail]!.offlineReason, reason)
  const summary = summarizeChains(ri)
  t.is(summary.degraded, 1)
  t.deepEqual(summary.problems, [{ chainId, targetId: tail, publicState: 'OFFLINE', localState: 'OFFLINE', reason }])

  // the recovery: drop the target's copy and create it again; it resyncs whole from the predecessor
  await ok(t, [...A, 'remove-target', '--node-id', String(nodeId), '--target-id', String(tail)])
  await ok(t, [...A, 'create-target', '--node-id', String(nodeId), '--disk-index', '0', '--target-id', String(tail), '--chain-id', String(chainId)])
  const back = await c.waitAllServing(30000)
  t.is(back.targets[tail]!.offlineReason, undefined)
  t.deepEqual(summarizeChains(back).problems, [])
  for (const [k, data] of model) {
    const got = await chunkOn(c, chainId, tail, Buffer.from(k, 'hex'))
    t.true(got.data?.equals(data), `chunk ${k} on the recreated tail holds the predecessor's bytes`)
    t.true((await sc.read(chainId, Buffer.from(k, 'hex'), 0, CHUNK)).equals(data))
  }
  const rep = await compareReplicas(c)
  t.true(rep.ok, rep.problems.join('\n'))
  t.is(rep.chunks, 5)
})
