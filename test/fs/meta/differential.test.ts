// Differential test of the metadata service against POSIX: seeded random
// namespace operations applied one at a time to a Strata cluster (through the
// file client) and to a local directory (node:fs on the host's filesystem),
// comparing success or errno, attributes, link targets and listings after
// every operation and the whole trees every few operations; then the KV
// invariant checker (fs/meta/fsck.ts) over the cluster's namespace.
// A mismatch fails with the seed and the operations up to the first
// difference. Local runs: STRATA_DIFF_SEEDS=N adds N random seeds of
// STRATA_DIFF_OPS (default 1000) operations; STRATA_DIFF_SURVEY=1,2,…
// prints the first mismatch of each seed listed instead of failing;
// STRATA_DIFF_SHRINK=1,2,… prints each failing seed's sequence shrunk to
// the few operations that still fail (what REGRESSIONS below keeps).
// The unprivileged run (uid 1000 on both sides; the local side is a child
// process of that uid) takes its seeds from STRATA_DIFF_USER_SEEDS=1,2,…
// (with STRATA_DIFF_SHRINK=1: shrink each failing one instead).

import test, { type ExecutionContext } from 'ava'
import { spawn } from 'node:child_process'
import readline from 'node:readline'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { FileSystem } from '../../../fs/client/index.js'
import { applyLocal, applyStrata, generateOps, localTree, strataTree, type Op, type Outcome } from '../../helpers/ns-ops.js'
import { fsckCluster } from '../../helpers/fsck.js'
import { sharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { until } from '../../helpers/procs.js'

/**
 * Documented differences between Strata and Linux, each with where it is
 * documented; returns true when (strata, local) differ only by one of them.
 */
function documentedDifference(op: Op, s: Outcome, l: Outcome): boolean {
  // docs/meta.md, path resolution: `a/b/` means `a/b/.`, so a create, symlink or link whose new name ends
  // in a slash names `.` and is META_INVALID_ARGUMENT (3FS); Linux walks it first (ENOENT, ENOTDIR, EISDIR, EEXIST).
  // Over FUSE the kernel resolves the path and meta never sees the slash.
  const newName = op.op === 'create' || op.op === 'symlink' ? op.p : op.op === 'link' ? op.q : ''
  if (newName.endsWith('/') && !s.ok && s.errno === 'EINVAL' && !l.ok) return true
  return false
}

/**
 * docs/meta.md, create / open (3FS OpenOp): a write open by anyone but the
 * owner — root too — clears set-user-id, set-group-id and sticky on the file,
 * where Linux clears set-user-id (and set-group-id with group exec) on write
 * or truncate by anyone but root, the owner too. (Over FUSE the kernel does
 * Linux's part itself.) The model does what meta does: returns the local file
 * and the permission it has after `op` opens an existing file for writing.
 */
function setIdBitsClearedByOpen(local: string, op: Op, uid: number): { path: string; perm: number } | null {
  const writeOpen = (op.op === 'create' && !op.excl) || op.op === 'write' || op.op === 'truncate'
  if (!writeOpen) return null
  try {
    const p = `${local}/${op.p}`
    const st = fs.statSync(p)
    const sbits = 0o7000
    if (!st.isFile() || !(st.mode & sbits)) return null
    // Linux also clears set-user-id (and group-executable set-group-id) when anyone without
    // CAP_FSETID truncates or writes, the owner too; meta keeps them for the owner: put them back
    if (st.uid === uid) return uid === 0 ? null : { path: p, perm: st.mode & 0o7777 }
    return { path: p, perm: st.mode & 0o777 }
  } catch {
    return null
  }
}

/**
 * docs/meta.md, remove: a recursive remove moves the tree into GC whole, and
 * its files keep their links until GC takes it apart, so another name of a
 * file in it shows the old nlink until then. The model waits for GC after
 * every recursive remove (the test cluster's directory delay is 0).
 */
let settleGc: (() => Promise<void>) | undefined

function same(op: Op, s: Outcome, l: Outcome): boolean {
  if (s.ok !== l.ok) return documentedDifference(op, s, l)
  if (!s.ok && !l.ok) return s.errno === l.errno || documentedDifference(op, s, l)
  return isDeepStrictEqual((s as { value?: unknown }).value, (l as { value?: unknown }).value) || documentedDifference(op, s, l)
}

const show = (o: Outcome) => JSON.stringify(o, (_k, v: unknown) => (typeof v === 'number' && _k === 'perm' ? `0o${v.toString(8)}` : v))

/**
 * Runs the ops of one seed; on the first mismatch throws with the seed and the
 * prefix of operations that shows it (the ops up to and including the one
 * that differed).
 */
/** Who runs the ops: a FileSystem of that user and a local process of the same uid (default: root, this process). */
export interface Actor {
  f: FileSystem
  uid: number
  gid: number
  local: (root: string, op: Op) => Promise<Outcome>
}

export async function runSeed(f: FileSystem, seed: number, ops: Op[], opts: { treeEvery?: number; actor?: Actor } = {}): Promise<void> {
  const settle = settleGc
  const actor: Actor = opts.actor ?? { f, uid: 0, gid: 0, local: applyLocal }
  const local = fs.mkdtempSync(path.join(os.tmpdir(), `strata-diff-${seed}-`))
  const root = `/diff-${seed}-${Date.now()}`
  try {
    await f.mkdir(root)
    await f.chown(root, actor.uid, actor.gid)
    fs.chownSync(local, actor.uid, actor.gid)
    fs.chmodSync(local, 0o755)
    const every = opts.treeEvery ?? 10
    for (let i = 0; i < ops.length; i++) {
      const op = ops[i]!
      let s = await applyStrata(actor.f, root, op)
      const clear = setIdBitsClearedByOpen(local, op, actor.uid)
      let l = await actor.local(local, op)
      if (l.ok && clear) fs.chmodSync(clear.path, clear.perm)
      // docs/meta.md, remove: a recursive remove needs the remover to own the tree's top with rwx and
      // checks every directory below (3FS recursiveCheckRmPerm), an empty one too, where rm -r only
      // needs write and search on each directory it empties. The model then removes the tree as root.
      if (op.op === 'rmr' && !s.ok && (s.errno === 'EACCES' || s.errno === 'EPERM') && l.ok) {
        await f.rm(`${root}/${op.p}`, { recursive: true })
        s = l
      }
      // docs/meta.md, remove (and FileSystem.rm): a recursive remove is one atomic transaction, where rm -r
      // removes entry by entry and stops at the first it may not remove, leaving the rest half removed.
      // When both refuse, the model removes what is left on both sides as root.
      if (op.op === 'rmr' && !s.ok && !l.ok && s.errno === l.errno && (s.errno === 'EACCES' || s.errno === 'EPERM')) {
        // (or the path itself was not searchable, and there is nothing to remove)
        await f.rm(`${root}/${op.p}`, { recursive: true }).catch(() => undefined)
        try {
          fs.rmSync(`${local}/${op.p}`, { recursive: true, force: true })
        } catch {
          // as above
        }
        s = l = { ok: true }
      }
      if (op.op === 'rmr' && s.ok) await settle?.()
      const fail = (what: string) =>
        new Error(`seed ${seed}: ${what} after op ${i}\nfailing prefix (${i + 1} ops):\n${ops.slice(0, i + 1).map((o) => JSON.stringify(o)).join('\n')}`)
      if (!same(op, s, l)) throw fail(`${JSON.stringify(op)}: strata ${show(s)}, linux ${show(l)}`)
      if ((i + 1) % every === 0 || i === ops.length - 1) {
        const st = await strataTree(f, root)
        const lt = localTree(local)
        if (!isDeepStrictEqual(st, lt)) {
          throw fail(`trees differ:\nstrata ${JSON.stringify(st)}\nlinux  ${JSON.stringify(lt)}`)
        }
      }
    }
  } finally {
    fs.rmSync(local, { recursive: true, force: true })
  }
}

/** Whether the ops fail (on a fresh directory), as runSeed reports it. */
async function fails(f: FileSystem, ops: Op[], actor?: Actor): Promise<boolean> {
  return runSeed(f, 0, ops, { treeEvery: 1, ...(actor ? { actor } : {}) }).then(
    () => false,
    () => true,
  )
}

/** Greedy shrink of a failing sequence: drop chunks, then single ops, while it still fails. */
export async function shrink(f: FileSystem, ops: Op[], actor?: Actor): Promise<Op[]> {
  let cur = ops
  for (let chunk = Math.max(1, cur.length >> 1); chunk >= 1; chunk >>= 1) {
    for (let i = 0; i < cur.length; ) {
      const cand = [...cur.slice(0, i), ...cur.slice(i + chunk)]
      if (cand.length && (await fails(f, cand, actor))) cur = cand
      else i += chunk
    }
  }
  return cur
}

/**
 * Sequences that once differed from Linux (shrunk from failing seeds with
 * shrink()), each named after the defect; they run before the random seeds.
 */
const REGRESSIONS: Record<string, Op[]> = {
  // link(2) resolves the old path first: its ENOENT/ENOTDIR/ELOOP came after the new path's EEXIST or errors
  'link: old path missing, new name exists': [{ op: 'create', p: 'a', excl: false, trunc: true }, { op: 'link', p: 'b', q: 'a' }],
  'link: old path through a file, new name exists': [{ op: 'create', p: 'a', excl: true, trunc: true }, { op: 'link', p: 'a/a/c', q: 'a' }],
  'link: old path missing, new parent missing': [{ op: 'create', p: 'c', excl: true, trunc: true }, { op: 'link', p: 'b', q: 'c/c/a' }],
  'link: old name missing below a dir, new name a dir': [{ op: 'mkdir', p: 'a', mode: 0o777 }, { op: 'link', p: 'a/c', q: 'a' }],
  // rename(2) walks the source's path, then the destination's: the two walks raced
  'rename: both paths bad': [
    { op: 'create', p: 'c', excl: false, trunc: false },
    { op: 'mkdir', p: 'a', mode: 0o777 },
    { op: 'rename', p: 'a/c/b', q: 'c/b/a' },
  ],
  'rename: source path missing, destination through a file': [
    { op: 'create', p: 'c', excl: false, trunc: false },
    { op: 'mkdir', p: 'b', mode: 0o777 },
    { op: 'rename', p: 'b/c/c', q: 'c/a/b' },
  ],
  // a directory moved into its own subtree is EINVAL before the destination's type or emptiness counts
  'rename: into own subtree over a file': [
    { op: 'create', p: 'b', excl: false, trunc: false },
    { op: 'mkdir', p: 'c', mode: 0o777 },
    { op: 'rename', p: 'b', q: 'c/c' },
    { op: 'rename', p: 'c', q: 'c/c/' },
  ],
  'rename: into own subtree over a non-empty directory': [
    { op: 'mkdir', p: 'a', mode: 0o777 },
    { op: 'mkdir', p: 'a/b', mode: 0o777 },
    { op: 'create', p: 'a/b/c', excl: false, trunc: false },
    { op: 'rename', p: 'a', q: 'a/b' },
  ],
  // a non-directory renamed over its own ancestor: ENOTEMPTY (Linux), not EISDIR
  'rename: file over its ancestor': [
    { op: 'mkdir', p: 'c', mode: 0o777 },
    { op: 'create', p: 'c/a', excl: false, trunc: false },
    { op: 'rename', p: 'c/a', q: 'c' },
  ],
  // mkdir("x/") of an existing x of any type is EEXIST: it walked into x (ENOTDIR, ELOOP, ENOENT)
  'mkdir: trailing slash on a file': [{ op: 'create', p: 'a', excl: false, trunc: false }, { op: 'mkdir', p: 'a/', mode: 0o755 }],
  'mkdir: trailing slash on a symlink loop': [{ op: 'symlink', target: 'b', p: 'b' }, { op: 'mkdir', p: 'b/', mode: 0o755 }],
  'mkdir: trailing slash on a dangling symlink': [
    { op: 'mkdir', p: 'c', mode: 0o777 },
    { op: 'symlink', target: 'a', p: 'c/c' },
    { op: 'mkdir', p: 'c/c/', mode: 0o755 },
  ],
  // chown(2) clears set-user-id, and set-group-id with group execute, even for root; meta kept them
  'chown of a set-user-id file': [
    { op: 'create', p: 'a', excl: false, trunc: false },
    { op: 'chmod', p: 'a', mode: 0o4755 },
    { op: 'chown', p: 'a', uid: 0, gid: 0 },
  ],
  'chown of a set-group-id file': [
    { op: 'create', p: 'b', excl: false, trunc: false },
    { op: 'chmod', p: 'b', mode: 0o2750 },
    { op: 'chown', p: 'b', uid: 1000, gid: 100 },
    { op: 'create', p: 'c', excl: false, trunc: false },
    { op: 'chmod', p: 'c', mode: 0o2740 },
    { op: 'chown', p: 'c', uid: 1000, gid: 100 },
  ],
  // not a defect: the links of a file in a recursively removed tree go when GC takes the tree apart (settleGc)
  'rm -r of a tree holding a hard link': [
    { op: 'mkdir', p: 'b', mode: 0o755 },
    { op: 'mkdir', p: 'a', mode: 0o700 },
    { op: 'create', p: 'b/c', excl: false, trunc: true },
    { op: 'link', p: 'b/c', q: 'a/c' },
    { op: 'rmr', p: 'b' },
  ],
  // a symlink replaced by a rename kept its inode at nlink 0 for ever (fsck: UNREACHABLE)
  'rename over a symlink: its inode goes': [
    { op: 'symlink', target: 'b', p: 'a' },
    { op: 'create', p: 'c', excl: false, trunc: false },
    { op: 'rename', p: 'c', q: 'a' },
  ],
}

// one cluster for the file's tests (each test works in directories of its own)
let m!: MetaCluster
let f!: FileSystem
let stop: (() => Promise<void>) | undefined
test.before(async () => {
  const s = await sharedMetaCluster({ nodes: 1, chains: 1, replicas: 1, meta: { gcDirectoryDelayMs: 0 } })
  stop = s.close
  m = s.m
  f = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], routingRefreshMs: 200, metaRetry: { totalMs: 20_000 } })
  const admin = m.client()
  settleGc = async () => {
    await until(async () => !(await admin.gcList()).some((e) => e.type === 'Directory'), 30_000, 'GC took removed trees apart')
  }
})
test.after.always(async () => {
  await f?.shutdown().catch(() => undefined)
  await stop?.()
})

/** The same, run by uid 1000 (permission checks). */
const USER_REGRESSIONS: Record<string, Op[]> = {
  // `d/` was resolved as `d/.`, which needs search permission on d: stat/open of `d/` said EACCES
  'trailing slash on a directory without search permission': [
    { op: 'mkdir', p: 'a', mode: 0o755 },
    { op: 'chmod', p: 'a', mode: 0o644 },
    { op: 'stat', p: 'a/', follow: false },
    { op: 'write', p: 'a/', off: 3, n: 2 },
    { op: 'truncate', p: 'a/', len: 5 },
  ],
}

test.serial('regressions: sequences that once differed from Linux, then fsck', async (t) => {
  const failed: string[] = []
  for (const [name, ops] of Object.entries(REGRESSIONS)) {
    await runSeed(f, 0, ops, { treeEvery: 1 }).catch((e: Error) => failed.push(`${name}: ${e.message.split('\n')[0]}`))
  }
  t.deepEqual(failed, [])
  t.deepEqual((await fsckCluster(m)).violations, [])
})

const LOCAL_WORKER = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../helpers/ns-local-worker.js')
const SEEDS = [1, 2, 3, 4]
const OPS = 250
// local runs (header): more seeds, longer sequences, a survey of many seeds, shrinking
const env = process.env
const extra = Number(env.STRATA_DIFF_SEEDS ?? 0)
const localOps = Number(env.STRATA_DIFF_OPS ?? 1000)
const seedList = (v: string) => v.split(',').map(Number)

test.serial('random namespace operations agree with Linux; the KV namespace is consistent afterwards', async (t) => {
  if (env.STRATA_DIFF_SHRINK || env.STRATA_DIFF_SURVEY) {
    for (const seed of seedList(env.STRATA_DIFF_SHRINK ?? '')) {
      if (!seed) continue
      const ops = generateOps(seed, localOps)
      if (await fails(f, ops)) console.log(`seed ${seed} shrunk:\n${(await shrink(f, ops)).map((o) => JSON.stringify(o)).join(',\n')}`)
    }
    for (const seed of seedList(env.STRATA_DIFF_SURVEY ?? '')) {
      if (seed) await runSeed(f, seed, generateOps(seed, localOps)).catch((e: Error) => console.log(e.message))
    }
    t.pass('local run: see the output')
    return
  }
  for (const seed of SEEDS) await runSeed(f, seed, generateOps(seed, OPS))
  for (let k = 0; k < extra; k++) {
    const seed = 1000 + Math.floor(Math.random() * 1e9)
    t.log(`extra seed ${seed}`)
    await runSeed(f, seed, generateOps(seed, localOps))
  }
  t.deepEqual((await fsckCluster(m)).violations, [])
})

/** A local process running as `uid`:`gid` that applies ops for an Actor (ns-local-worker.ts); killed at teardown. */
function localAs(t: ExecutionContext, uid: number, gid: number): (root: string, op: Op) => Promise<Outcome> {
  const child = spawn(process.execPath, [LOCAL_WORKER], { uid, gid, stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => void child.kill('SIGKILL'))
  const lines = readline.createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  return async (root, op) => {
    child.stdin!.write(`${JSON.stringify({ root, op })}\n`)
    const r = await lines.next()
    if (r.done) throw new Error('local worker exited')
    return JSON.parse(r.value) as Outcome
  }
}

test.serial('as an unprivileged user: random namespace operations agree with Linux (permission checks)', async (t) => {
  const user = { uid: 1000, gid: 1000, groups: [] }
  const uf = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], routingRefreshMs: 200, metaRetry: { totalMs: 20_000 }, user })
  t.teardown(() => uf.shutdown())
  const actor: Actor = { f: uf, uid: user.uid, gid: user.gid, local: localAs(t, user.uid, user.gid) }
  const seeds = env.STRATA_DIFF_USER_SEEDS ? seedList(env.STRATA_DIFF_USER_SEEDS) : [31, 32]
  const failed: string[] = []
  if (env.STRATA_DIFF_SHRINK) {
    for (const seed of seeds) {
      const ops = generateOps(seed, localOps)
      if (await fails(f, ops, actor)) console.log(`seed ${seed} shrunk:\n${(await shrink(f, ops, actor)).map((o) => JSON.stringify(o)).join(',\n')}`)
    }
    t.pass('local run: see the output')
    return
  }
  for (const [name, ops] of Object.entries(USER_REGRESSIONS)) {
    await runSeed(f, 0, ops, { treeEvery: 1, actor }).catch((e: Error) => failed.push(`${name}: ${e.message.split('\n')[0]}`))
  }
  for (const seed of seeds) {
    await runSeed(f, seed, generateOps(seed, env.STRATA_DIFF_USER_SEEDS ? localOps : OPS), { actor }).catch((e: Error) => failed.push(env.STRATA_DIFF_FULL ? e.message : e.message.split('\n')[0]!))
  }
  t.deepEqual(failed, [])
})
