// A really full disk under one replica (a size-limited tmpfs as one storage
// node's data directory), not an injected fault: the head applies a write,
// the successor's disk refuses it. The writer must get NO_SPACE at once,
// not wait out its deadline while the head retries, and the chain must take
// writes again as soon as space is freed.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { startTestCluster } from '../../helpers/procs.js'
import { fillDisk, smallTmpfs } from '../../helpers/small-disk.js'
import { compareReplicas } from '../../helpers/replicas.js'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'

const CHUNK = 1024 * 1024


test.serial('a successor whose disk is full: the write fails with NO_SPACE before its deadline, the chain writes again once space is freed', async (t) => {
  if (process.getuid?.() !== 0) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const small = smallTmpfs(t, '24m')
  // one chain storage-1 → storage-2 → storage-3; storage-2 (the head's successor) on the small disk
  const c = await startTestCluster(t, { chains: 1, chunkSize: CHUNK, storageDir: (i) => (i === 2 ? path.join(small, 'storage-2') : undefined) })
  const chainId = c.chains[0]!.chainId
  const ri = await c.routing()
  t.is(c.targetNode.get(ri.chains[chainId]!.targets[1]!.targetId), 'storage-2')
  const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc })
  t.teardown(() => sc.close())
  const a = Buffer.alloc(CHUNK, 0xa)
  const b = Buffer.alloc(CHUNK, 0xb)
  await sc.write(chainId, chunkIdOf(0xf00n, 0), 0, a, CHUNK)

  const filler = fillDisk(small)
  // the deadline is long: the old head retried the forward until then, and the writer saw CHANNEL_IS_LOCKED or TIMEOUT
  const opts = { deadlineMs: 120_000 }
  const over = await t.throwsAsync(sc.write(chainId, chunkIdOf(0xf00n, 0), 0, b, CHUNK, opts))
  t.is((over as { code?: string }).code, 'NO_SPACE', String(over))
  // names the replica whose disk is full, once
  t.regex(String(over), new RegExp(`NO_SPACE: target ${ri.chains[chainId]!.targets[1]!.targetId} of chain ${chainId}: `))
  const fresh = await t.throwsAsync(sc.write(chainId, chunkIdOf(0xf00n, 1), 0, b, CHUNK, opts))
  t.is((fresh as { code?: string }).code, 'NO_SPACE', String(fresh))
  // what was written before the disk filled is intact, on every replica, and no update is left pending
  t.deepEqual(await sc.read(chainId, chunkIdOf(0xf00n, 0), 0, CHUNK), a)
  t.deepEqual((await compareReplicas(c)).problems, [])

  fs.rmSync(filler)
  await sc.write(chainId, chunkIdOf(0xf00n, 0), 0, b, CHUNK, opts)
  await sc.write(chainId, chunkIdOf(0xf00n, 1), 0, a, CHUNK, opts)
  t.deepEqual(await sc.read(chainId, chunkIdOf(0xf00n, 0), 0, CHUNK), b)
  t.deepEqual(await sc.read(chainId, chunkIdOf(0xf00n, 1), 0, CHUNK), a)
  const report = await compareReplicas(c)
  t.deepEqual(report.problems, [])
  t.is(report.chunks, 2)
  // nobody left the chain, every process is alive
  const after = await c.waitAllServing()
  t.deepEqual(after.chains[chainId]!.targets.map((x) => x.publicState), ['SERVING', 'SERVING', 'SERVING'])
  for (const n of ['storage-1', 'storage-2', 'storage-3']) t.truthy(await c.rpc.echo(c.address(n)))
})
