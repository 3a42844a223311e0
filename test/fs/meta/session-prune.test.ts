// An explicit pruneSession (behind `strata admin session-prune`) may not take
// the write sessions of a live client: they are what keeps GC from removing
// the chunks of a file unlinked while that client still writes it (scenario
// 17). Before, any user could prune any client's sessions, GC then removed the
// chunks under the open writer, and its later flush wrote chunks for an inode
// that no longer existed. Now only root may prune, and only the sessions of a
// client mgmtd no longer lists as alive.

import test from 'ava'
import { chunkIdOf, fileChunkRange } from '../../../fs/common/chunk-id.js'
import { MetaMethod } from '../../../fs/common/services.js'
import { stripeChainIds } from '../../../fs/meta/chains.js'
import type { Inode } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { until } from '../../helpers/procs.js'

const CHUNK = 65536
const NOBODY = { uid: 65534, gid: 65534, groups: [] }

let m!: MetaCluster
// no background session scan (it would prune the crashed client's sessions before the test
// does); GC is due at once and retries a busy file every 300 ms; meta takes a client whose mgmtd
// session was not extended for 1.5 s as dead
useSharedMetaCluster(test, { meta: { sessionScanIntervalMs: 3_600_000, gcFileDelayMs: 0, gcRetryDelayMs: 300, sessionTimeoutMs: 1500 } }, (c) => (m = c))

async function chunksLeft(inode: Inode): Promise<number> {
  const chains = stripeChainIds(await m.c.mgmtd.routing(), inode.file!.layout)
  let n = 0
  for (const chain of new Set(chains)) n += (await m.storage.queryLastChunk(chain, { ...fileChunkRange(inode.id), maxNumChunkIdsToProcess: 1000 })).totalNumChunks
  return n
}

/** code and message of a failed call ('OK' when it succeeded) */
async function outcome(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'OK'
  } catch (e) {
    return `${(e as { code: string }).code}: ${(e as { reason: string }).reason}`
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

test.serial('pruneSession: root only, never the sessions of a live client; a dead client\'s are pruned and GC goes on', async (t) => {
  const root = m.client()
  const writer = m.client()
  const f = (await writer.create('/open-w', { flags: { access: 'w', create: true }, session: 'sw' })).stat
  const chains = stripeChainIds(await m.c.mgmtd.routing(), f.file!.layout)
  for (const i of [0, 1]) await m.storage.write(chains[i % chains.length]!, chunkIdOf(f.id, i), 0, Buffer.alloc(CHUNK, i + 1), CHUNK)
  await root.remove('/open-w')

  const prune = (user: typeof NOBODY | undefined, sessions: string[]) =>
    root.call<{ pruned: number }>(MetaMethod.pruneSession, { clientId: writer.clientId, sessions }, { once: true, ...(user ? { user } : {}) })
  // an unprivileged user may not prune anybody's sessions
  t.is(await outcome(prune(NOBODY, [])), 'META_NOT_PERMITTED: only root may prune write sessions (uid 65534)')
  t.is(await outcome(prune(NOBODY, ['sw'])), 'META_NOT_PERMITTED: only root may prune write sessions (uid 65534)')
  // root may not prune a live client's, all of them or some
  const alive = /^META_CLIENT_ALIVE: client [0-9a-f-]+ is alive \(mgmtd lists its client session\)/
  t.regex(await outcome(prune(undefined, [])), alive)
  t.regex(await outcome(prune(undefined, ['sw'])), alive)
  // the writer's session holds the chunks, well past GC's first tries
  await sleep(1500)
  t.is((await root.sessions({ inode: f.id })).length, 1)
  t.is(await chunksLeft(f), 2)

  // the writer dies: once meta no longer counts it alive, root prunes its session and GC collects the file
  m.crash(writer.clientId)
  t.is(await outcome(prune(NOBODY, [])), 'META_NOT_PERMITTED: only root may prune write sessions (uid 65534)', 'dead or alive, not by uid 65534')
  // (polled every 25 ms: an unexpected answer is kept and ends the wait as the result)
  const answer = await until(async () => {
    const r = await outcome(prune(undefined, ['sw']))
    return alive.test(r) ? undefined : r
  }, 15_000, 'the crashed writer counted dead')
  t.is(answer, 'OK')
  t.is((await root.sessions({ inode: f.id })).length, 0)
  await until(async () => (await chunksLeft(f)) === 0, 15_000, 'chunks of the unlinked file removed')
  await until(async () => !(await root.gcList()).some((e) => e.inode === f.id), 15_000, 'GC entry gone')
})
