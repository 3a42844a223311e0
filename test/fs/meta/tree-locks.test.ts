// A recursive remove and the directory locks below it, at the moment the
// remove commits: meta servers in this process over the in-memory KV, whose
// beforeCommit hook runs another client's request between the remove's reads
// and its commit (no timing involved). A lock taken, or a locked directory
// moved, into the tree in that window must make the remove fail
// META_NO_LOCK; lock changes elsewhere must not make it retry.

import test from 'ava'
import { inodeKey } from '../../../fs/meta/keys.js'
import type { InodeId } from '../../../fs/meta/protocol.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { ROOT_USER, codeOf } from '../../helpers/meta-client.js'

let m!: MetaCluster
useSharedMetaCluster(test, { inProcess: true }, (c) => (m = c))

/**
 * Runs `during` once, between the reads and the commit of the first
 * transaction that writes `tree`'s inode (the remove: nlink 0), and counts
 * the commit attempts of such transactions.
 */
function whenRemoveCommits(tree: InodeId, during: () => Promise<void>): { attempts: () => number; fired: () => boolean } {
  const key = inodeKey(tree).toString('hex')
  let attempts = 0
  let fired = false
  m.kv!.beforeCommit = async ({ writes }) => {
    if (!writes.includes(key)) return
    attempts++
    if (fired) return
    fired = true
    await during()
  }
  return { attempts: () => attempts, fired: () => fired }
}

test.afterEach.always(() => {
  if (m?.kv) m.kv.beforeCommit = null
})

const clients = () => {
  const root = m.client()
  return { root, holder: root.as(ROOT_USER, 'tree-locks-holder'), remover: root.as(ROOT_USER, 'tree-locks-remover') }
}

test.serial('a lock taken inside a tree while its remove commits: the remove fails META_NO_LOCK and the locked directory stays', async (t) => {
  const { root, holder, remover } = clients()
  await root.mkdirs('/r1/t/a/b', { recursive: true })
  await root.create('/r1/t/a/b/f', { flags: { access: 'r', create: true } })
  const tree = (await root.stat('/r1/t')).id
  const b = (await root.stat('/r1/t/a/b')).id
  const hook = whenRemoveCommits(tree, async () => {
    await holder.lock(b, 'try_lock')
  })
  t.is(await codeOf(remover.remove('/r1/t', { recursive: true })), 'META_NO_LOCK')
  t.true(hook.fired())
  t.is((await root.stat('/r1/t/a/b')).directory!.lock!.client, holder.clientId)
  t.is((await root.stat('/r1/t/a/b/f')).type, 'File')
  await holder.lock(b, 'unlock')
})

test.serial('a directory holding a lock moved into a tree while its remove commits: the remove fails META_NO_LOCK', async (t) => {
  const { root, holder, remover } = clients()
  await root.mkdirs('/r2/t/a', { recursive: true })
  await root.mkdirs('/r2/x/y', { recursive: true })
  await root.mkdirs('/r2/p/q', { recursive: true })
  const tree = (await root.stat('/r2/t')).id
  const y = (await root.stat('/r2/x/y')).id
  const q = (await root.stat('/r2/p/q')).id
  // locked before the remove reads, moved in during its commit
  await holder.lock(y, 'try_lock')
  whenRemoveCommits(tree, async () => {
    await root.rename('/r2/x', '/r2/t/a/x')
  })
  t.is(await codeOf(remover.remove('/r2/t', { recursive: true })), 'META_NO_LOCK')
  t.is((await root.stat('/r2/t/a/x/y')).id, y)
  // locked and moved in, both during the commit
  whenRemoveCommits(tree, async () => {
    await holder.lock(q, 'try_lock')
    await root.rename('/r2/p', '/r2/t/p')
  })
  await holder.lock(y, 'unlock')
  t.is(await codeOf(remover.remove('/r2/t', { recursive: true })), 'META_NO_LOCK')
  t.is((await root.stat('/r2/t/p/q')).directory!.lock!.client, holder.clientId)
  await holder.lock(q, 'unlock')
})

test.serial('locks taken and released elsewhere while a remove commits do not make it retry', async (t) => {
  const { root, holder, remover } = clients()
  await root.mkdirs('/r3/t/a/b', { recursive: true })
  await root.mkdirs('/r3/u/v', { recursive: true })
  await root.mkdirs('/r3/w', { recursive: true })
  const tree = (await root.stat('/r3/t')).id
  const u = (await root.stat('/r3/u')).id
  const v = (await root.stat('/r3/u/v')).id
  const w = (await root.stat('/r3/w')).id
  // a lock held elsewhere all along: looked at (not in the tree), never conflicts
  await holder.lock(w, 'try_lock')
  const hook = whenRemoveCommits(tree, async () => {
    await holder.lock(u, 'try_lock')
    await holder.lock(v, 'try_lock')
    await holder.lock(u, 'unlock')
    await holder.lock(w, 'unlock')
    await holder.lock(w, 'preempt_lock')
  })
  await remover.remove('/r3/t', { recursive: true })
  t.true(hook.fired())
  // one attempt: the lock changes elsewhere did not conflict with the remove (a read of the whole lock index did)
  t.is(hook.attempts(), 1)
  t.is(await codeOf(root.stat('/r3/t')), 'META_NOT_FOUND')
  await holder.lock(v, 'unlock')
  await holder.lock(w, 'unlock')
})

test.serial('a lock whose directory moves into a tree before the lock commits, while the tree is being removed: the lock marks its new place and the remove fails META_NO_LOCK', async (t) => {
  const { root, holder, remover } = clients()
  await root.mkdirs('/r4/t/a', { recursive: true })
  await root.mkdirs('/r4/x/d', { recursive: true })
  const tree = inodeKey((await root.stat('/r4/t')).id).toString('hex')
  const d = (await root.stat('/r4/x/d')).id
  const lockKey = inodeKey(d).toString('hex')
  // the order forced: the lock reads (d under /r4/x); x moves into the tree; the remove reads (d in
  // the tree, not locked yet); the lock commits; the remove commits
  let removeReady!: () => void
  const removeRead = new Promise<void>((r) => (removeReady = r))
  let lockSettled!: () => void
  const lockDone = new Promise<void>((r) => (lockSettled = r))
  let removal: Promise<string> | undefined
  let lockHeld = false
  let removeHeld = false
  m.kv!.beforeCommit = async ({ writes }) => {
    if (writes.includes(lockKey) && !lockHeld) {
      lockHeld = true
      await root.rename('/r4/x', '/r4/t/a/x')
      removal = codeOf(remover.remove('/r4/t', { recursive: true }))
      await removeRead
    } else if (writes.includes(tree) && !removeHeld) {
      removeHeld = true
      removeReady()
      await lockDone
    }
  }
  const lock = holder.lock(d, 'try_lock')
  void lock.finally(lockSettled).catch(() => {})
  await lock
  t.true(lockHeld && removeHeld)
  t.is(await removal, 'META_NO_LOCK')
  t.is((await root.stat('/r4/t/a/x/d')).directory!.lock!.client, holder.clientId)
  await holder.lock(d, 'unlock')
})
