// The embedded engine: FoundationDB-style optimistic transactions on ONE lmdb
// environment that every metadata process on the host opens.
//
//  - Read version: a transaction opens an lmdb read snapshot and reads the
//    global commit version stored in the same snapshot. All its reads come
//    from that snapshot (snapshot isolation), merged with its own buffered
//    writes.
//  - Commit: one lmdb write transaction (lmdb serializes writers across
//    processes with a robust mutex; a writer that dies is rolled back). Inside
//    it: compare the read-conflict set with the write sets of every commit
//    after our read version (the commit log, in the env), abort with
//    KV_CONFLICT on overlap; otherwise apply the writes, take the next commit
//    version, fill versionstamps, append our write set to the log, prune old
//    log records. With commitMode 'batched' (the default for synced
//    durabilities) the commits of one process in the same event-loop turn
//    share one lmdb transaction and one fsync (group commit) on lmdb-js's
//    write thread, each in its own lmdb child transaction, so a failure in
//    one never leaves half of it behind; 'sync' commits in a synchronous lmdb
//    transaction on the event loop; 'auto' (default for 'nosync') picks 'sync'
//    when only one transaction is running in the process.
//  - Opening the env and committing to it are mutually exclusive host-wide
//    (OpenGate below): lmdb-js's mdb_env_open resets the shared "last
//    committed txnid" to what it read at open, so an open overlapping a
//    commit of another process rolls it back and corrupts the env.
//  - A full disk: a commit run with `frees` (it frees space) that fails for
//    want of room spends the env's space reserve (reserve.ts) and is retried
//    once; other commits fail NO_SPACE. A new env is only created where there
//    is room for it (lmdb would die of SIGBUS).
//  - The log is kept for `logRetentionMs` (and at most `maxLogEntries`
//    records); a transaction whose read version is older than the oldest
//    record it would need fails with KV_TXN_TOO_OLD (retryable), like FDB's
//    5 s MVCC window.
//
// Layout inside the env (three named databases, binary keys and values):
//   kv.data  user key -> user value
//   kv.log   u64 BE commit version -> encoded write set (write-set.ts)
//   kv.sys   "state" -> u64 BE last commit version | u64 BE pruned-through version
//            "format" -> "strata-kv/1", "sync" -> "sync" | "nosync"

import fs from 'node:fs'
import path from 'node:path'
import { open, type Database, type RangeOptions as LmdbRangeOptions, type RootDatabase } from 'lmdb'
import { StrataError, isStrataError, toStrataError } from '../common/errors.js'
import { native } from '../common/native.js'
import { makeVersionstamp, readU64, u64Key, writeU64, kb } from './keys.js'
import { DEFAULT_BACKOFF, withRetries, type BackoffOptions } from './retry.js'
import { BufferedTxn, type SnapshotReader } from './txn.js'
import type { CommitInfo, KeyValue, KvEngine, ReadOnlyTxn, ReadWriteTxn, TransactOptions } from './types.js'
import { ReadConflicts, encodeWriteSet, writeSetTime } from './write-set.js'
import { SpaceReserve } from './reserve.js'

/**
 * When `transact` resolves:
 *  - 'flushed' (default): after the commit is fsynced — survives power loss.
 *  - 'committed': once committed and visible to every process; survives any
 *    process crash; an OS crash may lose the last commits (lmdb's overlapping
 *    sync keeps the file consistent).
 *  - 'nosync': lmdb `noSync` — no fsync at all (benchmarks, tests). An OS
 *    crash may lose recent commits. All processes sharing an env must agree
 *    on 'nosync' vs the other two (checked at open).
 */
export type KvDurability = 'flushed' | 'committed' | 'nosync'

export interface LmdbKvTestHooks {
  /**
   * Runs synchronously inside the lmdb write transaction: once after the
   * conflict check ('checked', 0) and after each buffered write is applied
   * ('write', n). Blocking here holds the host-wide write lock (tests use it
   * to SIGKILL a process mid-commit).
   */
  onApply?: (stage: 'checked' | 'write', n: number) => void
}

export interface LmdbKvOptions {
  /** directory of the lmdb environment (created if missing) */
  path: string
  durability?: KvDurability
  /** keep commit-log records this long (default 5000 ms, FDB's MVCC window) */
  logRetentionMs?: number
  /** and never more than this many (default 200 000) */
  maxLogEntries?: number
  /** largest value accepted (default 100 000 bytes, FDB's limit) */
  maxValueBytes?: number
  /** largest key accepted (default and maximum: lmdb's limit, 1978 bytes) */
  maxKeyBytes?: number
  /** lmdb map size: the largest the file may grow (default 64 GiB; address space only) */
  mapSizeBytes?: number
  /**
   * Room kept in the env directory for commits that free space when the
   * filesystem is full (`TransactOptions.frees`; see reserve.ts). Default
   * DEFAULT_RESERVE_BYTES; 0: none. The first process to open the env in this
   * process decides.
   */
  reserveBytes?: number
  /** lmdb reader slots shared by all processes (default 1024) */
  maxReaders?: number
  /**
   * How commits reach lmdb. 'batched': through lmdb-js's write thread, where
   * the commits of one process in the same event-loop turn share one lmdb
   * transaction and one fsync (group commit). 'sync': a synchronous lmdb
   * write transaction on the event loop — no thread hand-offs, so the lowest
   * latency for one caller at a time, but the event loop blocks while another
   * process holds the write lock, and with a synced durability every commit
   * fsyncs on the event loop. 'auto': 'sync' while this is the only
   * transaction running in the process, 'batched' when others run alongside.
   * Default: 'auto' for durability 'nosync', 'batched' otherwise.
   */
  commitMode?: 'batched' | 'sync' | 'auto'
  /** retry backoff (default 1 ms doubling to 100 ms, full jitter) */
  backoff?: BackoffOptions
  testHooks?: LmdbKvTestHooks
}

export interface LmdbKvStats {
  /** last commit version in the env */
  commitVersion: bigint
  /** commit-log records currently kept */
  logEntries: number
  /** versions <= this have been pruned from the log */
  prunedThrough: bigint
  /** commits, conflicts and too-old aborts seen by this handle */
  commits: number
  conflicts: number
  tooOld: number
}

export interface LmdbKvEngine extends KvEngine {
  readonly path: string
  readonly maxKeyBytes: number
  readonly maxValueBytes: number
  stats(): LmdbKvStats
}

const STATE = Buffer.from('state')
const FORMAT_KEY = Buffer.from('format')
const SYNC_KEY = Buffer.from('sync')
const FORMAT = 'strata-kv/1'
const ZERO_KEY = Buffer.from([0])
/** lmdb-js's key size limit with the default page size */
const LMDB_MAX_KEY = 1978
const CONFLICT = -1
const TOO_OLD = -2
const PRUNE_BATCH = 64
const READER_CHECK_MS = 10_000
/** how long closing waits for the open gate before closing without it (see releaseEnv) */
const CLOSE_GATE_MS = 5_000

// flock(2) operations (sys/file.h)
const LOCK_SH = 1
const LOCK_EX = 2
const LOCK_NB = 4
const LOCK_UN = 8
type Flock = (fd: number, operation: number) => boolean

function flockFn(): Flock {
  const addon = native() as unknown as { flock?: Flock }
  if (typeof addon.flock !== 'function') throw new StrataError('NOT_IMPLEMENTED', 'the native addon has no flock: rebuild it (npm run build)')
  return (fd, op) => addon.flock!(fd, op)
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

/**
 * Host-wide gate between opening (or closing) the env and committing to it.
 *
 * WHY: lmdb-js 3.5.6's LMDB fork stores, in mdb_env_open, the txnid it read
 * from the meta pages into the lock file's shared "last committed txnid"
 * (stock LMDB does this only for MDB_PREVSNAPSHOT, which needs an exclusive
 * open). That store happens without LMDB's write mutex, so when another
 * process commits between the opener's meta read and its store, the shared
 * txnid goes backwards. The next write transaction on the host then starts
 * from an old snapshot with a reused txnid: it overwrites newer commits (lost
 * updates), and LMDB takes pages committed later as its own dirty pages —
 * writing into the read-only map (SIGSEGV in mdb_cursor_put, or in
 * mdb_txn_commit merging a child's dirty list), or failing with
 * "mdb_page_touch no parent" / MDB_BAD_TXN. No lmdb option avoids it, so opens
 * and commits are kept apart here:
 *
 *  - two flock(2) files in the env directory: `strata-kv.gate` is held shared
 *    by every process with a commit in flight and exclusively by an opener or
 *    closer; `strata-kv.turn` is a turnstile held exclusively by an opener
 *    while it waits for the gate, so a process with a steady stream of commits
 *    cannot starve it (new commits wait; those in flight finish).
 *  - flock locks belong to the open file description, so unlike fcntl locks
 *    they are not dropped when lmdb (or anyone) closes another descriptor of
 *    the file, and the kernel releases them when a process dies (a SIGKILLed
 *    committer never wedges the gate).
 *  - lock order is always gate (outer) then LMDB's write mutex (inner).
 *
 * All waits poll with LOCK_NB, so the event loop is never blocked (a batched
 * commit in flight needs it to finish).
 */
class OpenGate {
  /** commits of this process in flight (they share one shared lock on the gate) */
  private writers = 0
  private exclusiveHeld = false
  private closed = false

  private constructor(
    private readonly turnFd: number,
    private readonly gateFd: number,
    private readonly flock: Flock,
  ) {}

  static open(dir: string): OpenGate {
    const flock = flockFn()
    const turnFd = fs.openSync(path.join(dir, 'strata-kv.turn'), 'a')
    try {
      return new OpenGate(turnFd, fs.openSync(path.join(dir, 'strata-kv.gate'), 'a'), flock)
    } catch (e) {
      fs.closeSync(turnFd)
      throw e
    }
  }

  /** Waits until no commit runs anywhere on the host and none can start; false if `deadline` passed first. */
  async exclusive(deadline = Infinity): Promise<boolean> {
    if (this.closed) throw new StrataError('CLOSED', 'the KV engine was closed')
    let delay = 1
    const pause = async (): Promise<boolean> => {
      if (Date.now() > deadline) return false
      await sleep(delay)
      delay = Math.min(delay * 2, 50)
      return true
    }
    while (!this.flock(this.turnFd, LOCK_EX | LOCK_NB)) if (!(await pause())) return false
    while (!this.flock(this.gateFd, LOCK_EX | LOCK_NB)) {
      if (!(await pause())) {
        this.flock(this.turnFd, LOCK_UN)
        return false
      }
    }
    this.exclusiveHeld = true
    return true
  }

  releaseExclusive(): void {
    if (!this.exclusiveHeld) return
    this.exclusiveHeld = false
    this.flock(this.gateFd, LOCK_UN)
    this.flock(this.turnFd, LOCK_UN)
  }

  /** Call before a commit, and exit() after it settled. `true` when entered at once, else a promise. */
  enter(deadline: number): true | Promise<void> {
    if (this.tryEnter()) return true
    return (async () => {
      for (let delay = 1; !this.tryEnter(); delay = Math.min(delay * 2, 20)) {
        if (Date.now() > deadline) throw new StrataError('TIMEOUT', 'the transaction ran past its deadline waiting for another process to open the KV')
        await sleep(delay)
      }
    })()
  }

  private tryEnter(): boolean {
    if (this.closed) throw new StrataError('CLOSED', 'the KV engine was closed')
    // the turnstile is only passed through: while an opener holds it, no commit starts
    if (!this.flock(this.turnFd, LOCK_SH | LOCK_NB)) return false
    try {
      // holding the turnstile shared, no opener holds the gate: this does not wait
      if (this.writers === 0 && !this.flock(this.gateFd, LOCK_SH | LOCK_NB)) return false
      this.writers++
      return true
    } finally {
      this.flock(this.turnFd, LOCK_UN)
    }
  }

  exit(): void {
    if (--this.writers === 0 && !this.closed) this.flock(this.gateFd, LOCK_UN)
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    fs.closeSync(this.gateFd) // releases any lock still held
    fs.closeSync(this.turnFd)
  }
}

interface SharedEnv {
  dir: string
  root: RootDatabase<Buffer, Buffer>
  data: Database<Buffer, Buffer>
  log: Database<Buffer, Buffer>
  sys: Database<Buffer, Buffer>
  nosync: boolean
  refs: number
  closed: boolean
  /** transaction attempts running in this process on this env (for commitMode 'auto') */
  running: number
  readerTimer: NodeJS.Timeout
  gate: OpenGate
  reserve: SpaceReserve
}

/** One lmdb root per env directory per process, shared by every engine handle on it. */
const envs = new Map<string, Promise<SharedEnv>>()

function state(version: number, pruned: number): Buffer {
  const b = Buffer.allocUnsafe(16)
  writeU64(b, 0, version)
  writeU64(b, 8, pruned)
  return b
}

async function acquireEnv(dir: string, opts: LmdbKvOptions): Promise<SharedEnv> {
  const nosync = opts.durability === 'nosync'
  for (;;) {
    let p = envs.get(dir)
    if (!p) {
      const created = createEnv(dir, nosync, opts)
      p = created
      envs.set(dir, created)
      created.catch(() => {
        if (envs.get(dir) === created) envs.delete(dir)
      })
    }
    const sh = await p
    if (sh.closed) continue // released to zero while we waited: open afresh
    if (sh.nosync !== nosync)
      throw new StrataError('BAD_CONFIG', `${dir} is already open in this process with durability ${sh.nosync ? "'nosync'" : "'flushed'/'committed'"}`)
    sh.refs++
    return sh
  }
}

async function createEnv(dir: string, nosync: boolean, opts: LmdbKvOptions): Promise<SharedEnv> {
  let gate: OpenGate
  try {
    fs.mkdirSync(dir, { recursive: true })
    gate = OpenGate.open(dir)
  } catch (e) {
    throw isStrataError(e) ? e : toStrataError(e, 'IO_ERROR')
  }
  try {
    // no commit may run anywhere on the host while lmdb opens the env (OpenGate says why); held
    // until the named databases exist and the format is checked (both may write)
    await gate.exclusive()
    let sh: SharedEnv
    try {
      sh = await openEnvGated(dir, nosync, opts, gate)
    } finally {
      gate.releaseExclusive()
    }
    // outside the gate: writing it must not hold up other processes' commits
    sh.reserve.sweep()
    await sh.reserve.replenish()
    return sh
  } catch (e) {
    gate.close()
    throw e
  }
}

/**
 * lmdb writes a new env's lock file through a shared mapping of a sparse
 * file: on a full filesystem the first store into it is SIGBUS, which ends
 * the process before any error can be handled. So a new env (or one whose
 * lock file never got a block) is only made where there is room for it.
 */
async function assertRoomToOpen(dir: string): Promise<void> {
  const blocks = (f: string): number => {
    try {
      return fs.statSync(path.join(dir, f)).blocks
    } catch {
      return 0
    }
  }
  if (blocks('data.mdb') > 0 && blocks('lock.mdb') > 0) return
  const free = await freeBytes(dir)
  if (free !== null && free < OPEN_ROOM_BYTES)
    throw new StrataError('NO_SPACE', `cannot create the KV at ${dir}: its filesystem has ${free} bytes free (at least ${OPEN_ROOM_BYTES} needed)`)
}

async function openEnvGated(dir: string, nosync: boolean, opts: LmdbKvOptions, gate: OpenGate): Promise<SharedEnv> {
  await assertRoomToOpen(dir)
  let root: RootDatabase<Buffer, Buffer>
  try {
    root = open<Buffer, Buffer>({
      path: dir,
      noSubdir: false, // always a directory, even when the name has a dot in it
      keyEncoding: 'binary',
      encoding: 'binary',
      compression: false,
      maxDbs: 8,
      mapSize: opts.mapSizeBytes ?? 64 * 1024 ** 3,
      maxReaders: opts.maxReaders ?? 1024,
      // overlappingSync (lmdb-js 3's default) is off: with several processes
      // sharing the env, a writer SIGKILLed mid-commit has left the env
      // unopenable for the next writer (MDB_PROBLEM: mdb_page_touch no parent)
      overlappingSync: false,
      ...(nosync ? { noSync: true } : {}),
    })
  } catch (e) {
    throw await spaceOr(dir, toStrataError(e, 'IO_ERROR'), 'could not open', e)
  }
  const dbOpts = { keyEncoding: 'binary' as const, encoding: 'binary' as const, compression: false }
  const syncMode = nosync ? 'nosync' : 'sync'
  let data: Database<Buffer, Buffer>, log: Database<Buffer, Buffer>, sys: Database<Buffer, Buffer>
  try {
    // creating the named databases writes (a synchronous lmdb transaction): inside the try
    data = root.openDB<Buffer, Buffer>({ name: 'kv.data', ...dbOpts })
    log = root.openDB<Buffer, Buffer>({ name: 'kv.log', ...dbOpts })
    sys = root.openDB<Buffer, Buffer>({ name: 'kv.sys', ...dbOpts })
    const child = root.childTransaction(() => {
      const f = sys.get(FORMAT_KEY)
      if (f === undefined) {
        sys.put(FORMAT_KEY, Buffer.from(FORMAT))
        sys.put(SYNC_KEY, Buffer.from(syncMode))
        sys.put(STATE, state(0, 0))
        return ''
      }
      if (f.toString() !== FORMAT) return `${dir} holds ${f.toString()}, not ${FORMAT}`
      const s = sys.get(SYNC_KEY)?.toString()
      if (s !== syncMode) return `${dir} is used with ${s === 'nosync' ? "durability 'nosync'" : 'a synced durability'}; every process must agree`
      return ''
    })
    // a failed batch also rejects these, which nobody else awaits (see commit): an unhandled rejection ends a daemon
    root.committed.then(undefined, () => undefined)
    const err = await child
    if (err) throw new StrataError('BAD_CONFIG', err)
  } catch (e) {
    ;(e as { commitError?: Promise<unknown> })?.commitError?.then(undefined, () => undefined)
    root.committed.then(undefined, () => undefined)
    await root.close().catch(() => {})
    throw isStrataError(e) ? e : await spaceOr(dir, toStrataError(e, 'IO_ERROR'), 'could not open', e)
  }
  // readers left behind by processes that died pin old pages; clear them now and then
  const readerTimer = setInterval(() => {
    try {
      root.readerCheck()
    } catch {
      // closed or busy: next time
    }
  }, READER_CHECK_MS)
  readerTimer.unref()
  const reserve = new SpaceReserve(dir, Math.max(0, opts.reserveBytes ?? DEFAULT_RESERVE_BYTES), freeBytes)
  return { dir, root, data, log, sys, nosync, refs: 0, closed: false, running: 0, readerTimer, gate, reserve }
}

async function releaseEnv(sh: SharedEnv): Promise<void> {
  if (--sh.refs > 0) return
  sh.closed = true
  envs.delete(sh.dir)
  clearInterval(sh.readerTimer)
  // The last process to close an lmdb env destroys its mutexes; a process opening it at that moment
  // would attach to the destroyed ones. So close under the gate too. If the gate stays busy, commits
  // (or an open waiting for them) are in progress elsewhere, so others have the env open and this
  // close is not the last: closing without the gate is then safe.
  let gated = false
  try {
    gated = await sh.gate.exclusive(Date.now() + CLOSE_GATE_MS)
  } catch {
    // the gate files are unusable: close anyway
  }
  try {
    await sh.root.close()
  } finally {
    if (gated) sh.gate.releaseExclusive()
    sh.gate.close()
  }
}

/** lmdb range options for [b, e), with bounds longer than the key limit folded into inclusive/exclusive flags. */
function lmdbRange(b: Buffer, e: Buffer, reverse: boolean, maxKey: number): LmdbRangeOptions {
  if (!reverse) {
    const o: LmdbRangeOptions = {}
    if (b.length > maxKey) Object.assign(o, { start: b.subarray(0, maxKey), exclusiveStart: true })
    else o.start = b.length > 0 ? b : ZERO_KEY
    if (e.length > maxKey) Object.assign(o, { end: e.subarray(0, maxKey), inclusiveEnd: true })
    else o.end = e
    return o
  }
  const o: LmdbRangeOptions = { reverse: true }
  if (e.length > maxKey) o.start = e.subarray(0, maxKey)
  else Object.assign(o, { start: e, exclusiveStart: true })
  if (b.length > maxKey) o.end = b.subarray(0, maxKey)
  else Object.assign(o, { end: b.length > 0 ? b : ZERO_KEY, inclusiveEnd: true })
  return o
}

function ownBuffer(v: Buffer): Buffer {
  // lmdb-js returns copies for 'binary' values; guard against views of shared memory anyway
  return v.buffer instanceof SharedArrayBuffer ? Buffer.from(v) : v
}

class LmdbEngine implements LmdbKvEngine {
  readonly path: string
  readonly maxKeyBytes: number
  readonly maxValueBytes: number
  private closed = false
  private closing: Promise<void> | undefined
  private readonly inflight = new Set<Promise<unknown>>()
  private readonly retentionMs: number
  private readonly maxLogEntries: number
  private readonly durability: KvDurability
  private readonly commitMode: 'batched' | 'sync' | 'auto'
  private readonly backoff: BackoffOptions
  private readonly hooks: LmdbKvTestHooks | undefined
  private counters = { commits: 0, conflicts: 0, tooOld: 0 }
  private readonly assertOpen = (): void => {
    if (this.closed) throw new StrataError('CLOSED', 'the KV engine was closed')
  }

  constructor(
    private readonly sh: SharedEnv,
    opts: LmdbKvOptions,
  ) {
    this.path = sh.dir
    this.maxKeyBytes = Math.min(opts.maxKeyBytes ?? LMDB_MAX_KEY, LMDB_MAX_KEY)
    this.maxValueBytes = opts.maxValueBytes ?? 100_000
    this.retentionMs = opts.logRetentionMs ?? 5000
    this.maxLogEntries = Math.max(1, opts.maxLogEntries ?? 200_000)
    this.durability = opts.durability ?? 'flushed'
    this.commitMode = opts.commitMode ?? (this.durability === 'nosync' ? 'auto' : 'batched')
    this.backoff = opts.backoff ?? DEFAULT_BACKOFF
    this.hooks = opts.testHooks
  }

  // ---- public API

  async readOnly<T>(fn: (txn: ReadOnlyTxn) => Promise<T>): Promise<T> {
    this.assertOpen()
    const { txn, release } = this.begin(false, Infinity)
    try {
      return await fn(txn)
    } finally {
      txn.finish()
      release()
    }
  }

  async transact<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts?: TransactOptions): Promise<T> {
    return (await this.transactWithInfo(fn, opts)).result
  }

  async transactWithInfo<T>(fn: (txn: ReadWriteTxn) => Promise<T>, opts?: TransactOptions): Promise<{ result: T; info: CommitInfo }> {
    this.assertOpen()
    const frees = opts?.frees === true
    return withRetries((deadline) => this.attempt(fn, deadline, frees), opts, this.backoff)
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true
      await Promise.allSettled([...this.inflight])
      await releaseEnv(this.sh)
    })()
    return this.closing
  }

  stats(): LmdbKvStats {
    this.assertOpen()
    const { root, sys } = this.sh
    root.resetReadTxn()
    const st = sys.get(STATE)!
    const version = readU64(st, 0)
    const pruned = readU64(st, 8)
    return {
      commitVersion: BigInt(version),
      logEntries: version - pruned,
      prunedThrough: BigInt(pruned),
      ...this.counters,
    }
  }

  // ---- one attempt

  private begin(writable: boolean, deadline: number): { txn: BufferedTxn; release: () => void } {
    const { root, data, sys } = this.sh
    let rtx: ReturnType<RootDatabase['useReadTransaction']>
    let version: number
    try {
      // a fresh snapshot: commits of other processes (and our own just now) must be visible
      root.resetReadTxn()
      rtx = root.useReadTransaction()
    } catch (e) {
      throw this.mapError(e)
    }
    let released = false
    const release = (): void => {
      if (released) return
      released = true
      try {
        rtx.done()
      } catch {
        // env already closed
      }
    }
    try {
      version = readU64(sys.get(STATE, { transaction: rtx })!, 0)
    } catch (e) {
      release()
      throw this.mapError(e)
    }
    const maxKey = this.maxKeyBytes
    const mapError = (e: unknown): StrataError => this.mapError(e)
    const src: SnapshotReader = {
      get(key: Buffer): Buffer | undefined {
        try {
          const v = data.get(key, { transaction: rtx })
          return v === undefined ? undefined : ownBuffer(v)
        } catch (e) {
          throw mapError(e)
        }
      },
      range(b: Buffer, e: Buffer, reverse: boolean): Iterable<KeyValue> {
        try {
          return data.getRange({ ...lmdbRange(b, e, reverse, LMDB_MAX_KEY), transaction: rtx }) as Iterable<KeyValue>
        } catch (err) {
          throw mapError(err)
        }
      },
    }
    const txn = new BufferedTxn(src, BigInt(version), { maxKeyBytes: maxKey, maxValueBytes: this.maxValueBytes }, deadline, this.assertOpen, writable)
    return { txn, release }
  }

  private async attempt<T>(fn: (txn: ReadWriteTxn) => Promise<T>, deadline: number, frees: boolean): Promise<{ result: T; info: CommitInfo }> {
    this.assertOpen()
    const { txn, release } = this.begin(true, deadline)
    this.sh.running++
    try {
      let result: T
      try {
        result = await fn(txn)
      } finally {
        txn.finish()
        release()
      }
      if (Date.now() > deadline) throw new StrataError('TIMEOUT', 'the transaction ran past its deadline')
      if (!txn.hasWrites()) return { result, info: { versionstamps: [] } }
      this.assertOpen()
      // close() waits for it (including a wait at the gate, which must not outlive the env)
      const c = this.commit(txn, deadline, frees)
      this.inflight.add(c)
      try {
        return { result, info: await c }
      } finally {
        this.inflight.delete(c)
      }
    } finally {
      this.sh.running--
    }
  }

  private async commit(txn: BufferedTxn, deadline: number, frees: boolean): Promise<CommitInfo> {
    const { gate } = this.sh
    try {
      const entered = gate.enter(deadline) // waits only while another process opens the env
      if (entered !== true) await entered
    } catch (e) {
      throw this.mapError(e)
    }
    let version: number
    try {
      try {
        if (this.commitMode === 'sync' || (this.commitMode === 'auto' && this.sh.running <= 1)) {
          version = this.sh.root.transactionSync(() => this.applyCommit(txn))
        } else {
          const child = this.sh.root.childTransaction(() => this.applyCommit(txn))
          // When lmdb cannot write the batch (a full disk), it also rejects the
          // batch's own commit promise and the error's `commitError`; nobody else
          // waits for those, and an unhandled rejection ends a daemon (every meta
          // server on the host at once). The failure reaches us through `child`.
          this.sh.root.committed.then(undefined, () => undefined)
          version = await child
        }
      } catch (e) {
        ;(e as { commitError?: Promise<unknown> })?.commitError?.then(undefined, () => undefined)
        this.sh.root.committed.then(undefined, () => undefined)
        const err = await this.mapCommitError(e)
        if (err.code !== 'NO_SPACE' || !frees) throw err
        version = await this.commitOnReserve(txn, err)
      }
    } finally {
      gate.exit()
    }
    if (version !== CONFLICT && version !== TOO_OLD) void this.sh.reserve.replenish()
    if (version === CONFLICT) {
      this.counters.conflicts++
      throw new StrataError('KV_CONFLICT', 'a key or range this transaction read was written by a later commit')
    }
    if (version === TOO_OLD) {
      this.counters.tooOld++
      throw new StrataError('KV_TXN_TOO_OLD', `read version ${txn.readVersion} is older than the retained commit log`)
    }
    this.counters.commits++
    if (this.durability === 'flushed') await this.sh.root.flushed
    const versionstamps: Buffer[] = []
    for (let i = 0; i < txn.versionstampCount; i++) versionstamps.push(makeVersionstamp(version, i))
    return { commitVersion: BigInt(version), versionstamps }
  }

  /**
   * The second try of a commit that frees space and failed for want of it:
   * the reserve is released from inside the lmdb write transaction, i.e.
   * while this process holds lmdb's host-wide write lock, so no other
   * process's commit can take the room first (commits of this process in the
   * same batch may share it). Another process may have released the reserve
   * already; then the room it gave back is tried all the same. (A batch, not
   * a synchronous transaction: lmdb-js 3.5.6 has been seen to corrupt its
   * heap when a synchronous commit fails on a full disk.)
   */
  private async commitOnReserve(txn: BufferedTxn, first: StrataError): Promise<number> {
    const { root, reserve } = this.sh
    try {
      const child = root.childTransaction(() => {
        const version = this.applyCommit(txn)
        if (version >= 0) reserve.release()
        return version
      })
      root.committed.then(undefined, () => undefined)
      return await child
    } catch (e) {
      ;(e as { commitError?: Promise<unknown> })?.commitError?.then(undefined, () => undefined)
      root.committed.then(undefined, () => undefined)
      const err = await this.mapCommitError(e)
      if (err.code !== 'NO_SPACE') throw err
      throw new StrataError('NO_SPACE', `${first.reason}; nor with the KV's space reserve (${reserve.bytes} bytes) given back`, { cause: e })
    }
  }

  /** Runs inside the lmdb (child) write transaction; synchronous. Returns the commit version or CONFLICT / TOO_OLD. */
  private applyCommit(txn: BufferedTxn): number {
    const { data, log, sys } = this.sh
    const st = sys.get(STATE)!
    const current = readU64(st, 0)
    let pruned = readU64(st, 8)
    const readVersion = Number(txn.readVersion)

    if (current > readVersion && txn.hasReadConflicts()) {
      if (readVersion < pruned) return TOO_OLD
      const rc = new ReadConflicts(txn.readPoints, txn.readRanges)
      for (const { value } of log.getRange({ start: u64Key(readVersion + 1) })) {
        if (rc.hits(value)) return CONFLICT
      }
    }
    const hooks = this.hooks
    hooks?.onApply?.('checked', 0)

    const version = current + 1
    const now = Date.now()
    const points: Buffer[] = []
    const ranges: Array<[Buffer, Buffer]> = []
    let n = 0
    for (const [bs, es] of txn.cleared) {
      const b = kb(bs)
      const e = kb(es)
      ranges.push([b, e])
      const doomed = [...data.getKeys(lmdbRange(b, e, false, LMDB_MAX_KEY))] as Buffer[]
      for (const k of doomed) data.remove(k)
    }
    for (const w of txn.writes.values()) {
      points.push(w.key)
      if (w.value === null) data.remove(w.key)
      else if (Buffer.isBuffer(w.value)) data.put(w.key, w.value)
      else data.put(w.key, Buffer.concat([w.value.prefix, makeVersionstamp(version, w.value.index)]))
      hooks?.onApply?.('write', ++n)
    }
    for (const vk of txn.versionstampedKeys) {
      const k = Buffer.concat([vk.prefix, makeVersionstamp(version, vk.index)])
      points.push(k)
      data.put(k, vk.value)
      hooks?.onApply?.('write', ++n)
    }
    log.put(u64Key(version), encodeWriteSet(now, points, ranges))
    pruned = this.prune(version, pruned, now)
    sys.put(STATE, state(version, pruned))
    return version
  }

  /** Drops log records older than the retention window or beyond maxLogEntries, a bounded number per commit. */
  private prune(version: number, pruned: number, now: number): number {
    const { log } = this.sh
    const horizon = now - this.retentionMs
    let p = pruned
    for (let i = 0; i < PRUNE_BATCH && p + 1 < version; i++) {
      const k = u64Key(p + 1)
      const rec = log.get(k)
      if (rec !== undefined) {
        if (version - (p + 1) < this.maxLogEntries && writeSetTime(rec) >= horizon) break
        log.remove(k)
      }
      p++
    }
    return p
  }

  /**
   * A failed lmdb write says EIO whatever the cause (lmdb-js reports the
   * status of its write thread, errno 5, also when the disk is full), so a
   * commit failure on a filesystem with next to no room left is NO_SPACE:
   * the error a writer can act on, and what 3FS answers.
   */
  private async mapCommitError(e: unknown): Promise<StrataError> {
    return spaceOr(this.sh.dir, this.mapError(e), 'could not commit', e)
  }

  private mapError(e: unknown): StrataError {
    if (isStrataError(e)) return e
    if (this.closed) return new StrataError('CLOSED', 'the KV engine was closed', { cause: e })
    return toStrataError(e, 'IO_ERROR')
  }
}

/** A commit that fails while its filesystem has less room than this failed for want of space. */
const NO_SPACE_BELOW = 16 * 1024 * 1024

/** Free room needed to create an env (its first pages and the lock file's first page, with margin). */
const OPEN_ROOM_BYTES = 1024 * 1024

/**
 * The reserve's default size. A commit that frees space copies, in each lmdb
 * tree it changes (kv.data, kv.log, kv.sys, the main tree and lmdb's free
 * list), the path from every changed leaf to the root (4 pages deep for
 * millions of keys). The largest freeing transaction meta runs, a GC batch of
 * 32 directory entries (entry, inode and lock of each, ~100 leaves at worst),
 * with its commit-log record, needs about 100 × 4 × 4 KiB ≈ 1.6 MiB; twice
 * that, rounded up. Small beside any real disk; removals after the first
 * mostly reuse the pages earlier removals freed.
 */
export const DEFAULT_RESERVE_BYTES = 4 * 1024 * 1024

/** `err` as NO_SPACE when it is a failed lmdb write (lmdb says EIO whatever the cause) on a filesystem with next to no room. */
async function spaceOr(dir: string, err: StrataError, what: string, cause: unknown): Promise<StrataError> {
  if (err.code !== 'IO_ERROR') return err
  const free = await freeBytes(dir)
  if (free === null || free >= NO_SPACE_BELOW) return err
  return new StrataError('NO_SPACE', `the KV at ${dir} ${what}: its filesystem has ${free} bytes free (${err.reason})`, { cause })
}

/** Bytes this process may still write on the filesystem of `dir` (root may use the reserved blocks); null if unknown. */
async function freeBytes(dir: string): Promise<number | null> {
  try {
    const st = await fs.promises.statfs(dir)
    return (process.getuid?.() === 0 ? st.bfree : st.bavail) * st.bsize
  } catch {
    return null
  }
}

/**
 * Opens (creating if needed) the lmdb-backed transactional KV at `opts.path`.
 * Any number of processes on the host may open the same path at once; they
 * share data, versions and conflict detection. Within one process, handles on
 * the same path share one lmdb environment.
 */
export async function openLmdbKv(opts: LmdbKvOptions): Promise<LmdbKvEngine> {
  if (!opts || typeof opts.path !== 'string' || opts.path === '') throw new StrataError('BAD_CONFIG', 'openLmdbKv: path is required')
  const dir = path.resolve(opts.path)
  const sh = await acquireEnv(dir, opts)
  return new LmdbEngine(sh, opts)
}
