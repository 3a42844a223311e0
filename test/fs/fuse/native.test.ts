// fuse-native runs on Strata's build of its addon (native/fuse), whose fix
// is that libfuse worker threads which come and go reuse thread-locals blocks
// (each with a uv_async handle on the daemon's loop) instead of leaking one
// per thread ever started.
import fs from 'node:fs'
import test from 'ava'
import { fuseSkipReason, ok, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

/** Thread ids of a process right now. */
function threadIds(pid: number): string[] {
  try {
    return fs.readdirSync(`/proc/${pid}/task`)
  } catch {
    return []
  }
}

t('parallel readers make libfuse start and end worker threads; thread-locals blocks stay as many as threads alive at once', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'threads' })
  // the daemon maps Strata's addon, not fuse-native's prebuilt one
  const maps = fs.readFileSync(`/proc/${a.pid}/maps`, 'utf8')
  t.regex(maps, /build\/Release\/fuse_native\.node/)
  t.notRegex(maps, /prebuilds\/linux-x64\/node\.napi\.node/)

  ok(t, await sh(`dd if=/dev/urandom of=${a.mnt}/f bs=1M count=8 status=none && sync`), 'write the file')
  // sample the daemon's threads while bursts of 16 readers read the file: libfuse starts a
  // worker whenever none is idle and ends workers while more than 10 are idle
  const seen = new Set<string>()
  let most = 0
  const sampler = setInterval(() => {
    const ids = threadIds(a.pid)
    most = Math.max(most, ids.length)
    for (const id of ids) seen.add(id)
  }, 5)
  try {
    for (let round = 0; round < 12; round++) {
      const r = await sh(`for i in $(seq 16); do dd if=${a.mnt}/f of=/dev/null bs=128k status=none & done; wait`, { timeoutMs: 120_000 })
      ok(t, r, `readers, round ${round}`)
    }
  } finally {
    clearInterval(sampler)
  }
  t.is(await a.stop(), 0, a.log())
  const line = a.log().split('\n').find((l) => l.includes('unmounting'))
  const blocks = Number(/threadBlocks=(\d+)/.exec(line ?? '')?.[1])
  t.log(`threads seen ${seen.size}, at most ${most} at once; thread-locals blocks ${blocks}`)
  t.true(Number.isInteger(blocks) && blocks > 0, line)
  // threads did come and go (what leaked a block each before the fix)...
  t.true(seen.size - most >= 20, `only ${seen.size - most} threads came and went`)
  // ...and the blocks are no more than the threads alive at once (an upper bound: V8's and libuv's count too)
  t.true(blocks <= most, `${blocks} blocks for at most ${most} threads alive at once (${seen.size} seen)`)
})
