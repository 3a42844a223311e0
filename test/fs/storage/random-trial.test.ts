// Randomized trial: for several seeds, random writes on two chains while
// random storage processes are SIGKILLed and restarted. Afterwards every
// acknowledged write reads back and replicas are equal.
import test from 'ava'
import { startTestCluster } from '../../helpers/procs.js'
import { compareReplicas } from '../../helpers/replicas.js'
import { StorageClient } from '../../../fs/client/index.js'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'

const CHUNK = 65536
const SEEDS = (process.env.STRATA_TRIAL_SEEDS ?? '1,2,3').split(',').map(Number)
const DURATION_MS = Number(process.env.STRATA_TRIAL_MS ?? 5000)

function prng(seed: number): () => number {
  // mulberry32: small, seedable, good enough to pick operations
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let x = a
    x = Math.imul(x ^ (x >>> 15), x | 1)
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61)
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296
  }
}

for (const seed of SEEDS) {
  test.serial(`seed ${seed}: acknowledged writes survive random SIGKILLs and restarts`, async (t) => {
    const rnd = prng(seed)
    const c = await startTestCluster(t, { chains: 2, nodes: 3 })
    const sc = new StorageClient({ mgmtd: c.mgmtd, rpc: c.rpc })
    t.teardown(() => sc.close())
    const chains = c.chains.map((x) => x.chainId)
    // model: chain → chunk index → bytes; each writer owns its chunks
    const model = new Map<string, Buffer>()
    const end = Date.now() + DURATION_MS
    let acked = 0
    const writers = [0, 1, 2, 3].map(async (w) => {
      const r = prng(seed * 100 + w)
      while (Date.now() < end) {
        const chainId = chains[Math.floor(r() * chains.length)]!
        const idx = Math.floor(r() * 8) * 4 + w
        const key = `${chainId}:${idx}`
        const cur = model.get(key) ?? Buffer.alloc(0)
        const off = Math.floor(r() * 15) * 4096
        const len = 4096 * (1 + Math.floor(r() * 4))
        const data = Buffer.alloc(Math.min(len, CHUNK - off))
        for (let i = 0; i < data.length; i += 4) data.writeUInt32BE((seed * 7919 + acked * 31 + i) >>> 0, i)
        await sc.write(chainId, chunkIdOf(BigInt(0x10000 + seed), idx), off, data, CHUNK)
        const next = Buffer.alloc(Math.max(cur.length, off + data.length))
        cur.copy(next)
        data.copy(next, off)
        model.set(key, next)
        acked++
      }
    })
    const chaos = (async () => {
      const names = ['storage-1', 'storage-2', 'storage-3']
      const down = new Set<string>()
      while (Date.now() < end) {
        await new Promise((r) => setTimeout(r, 300 + rnd() * 900))
        if (Date.now() >= end) break
        const name = names[Math.floor(rnd() * names.length)]!
        if (down.has(name)) {
          c.start(name)
          down.delete(name)
        } else if (down.size < 1 || rnd() < 0.3) {
          // sometimes two nodes are down at once: chains fall back to one serving replica
          if (down.size < 2) {
            await c.kill(name)
            down.add(name)
          }
        }
      }
      for (const name of down) c.start(name)
    })()
    await Promise.all([...writers, chaos])
    t.true(acked >= 5, `${acked} writes acknowledged`)
    await c.waitAllServing(60000)
    let checked = 0
    for (const [key, expect] of model) {
      const [chainId, idx] = key.split(':').map(Number) as [number, number]
      const got = await sc.read(chainId, chunkIdOf(BigInt(0x10000 + seed), idx), 0, CHUNK)
      if (!got.equals(expect)) t.fail(`chunk ${key} differs from the acknowledged model`)
      checked++
    }
    t.true(checked > 0)
    const rep = await compareReplicas(c)
    t.true(rep.ok, rep.problems.join('\n'))
    t.log(`seed ${seed}: ${acked} writes, ${checked} chunks checked, ${rep.chunks} chunks on each replica set`)
  })
}
