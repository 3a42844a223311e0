// The meta service of one server: MetaSerde (service 4) handlers over the
// shared KV, request validation, the idempotency driver, and the background
// loops (heartbeat as node type META, GC, session pruning, idempotency record
// cleaning, statFs cache, distributor map).
//
// Stateless: everything a request needs is in the KV, so any request can go
// to any meta server, and a request that committed is never lost when its
// server dies. A client that did not get an answer retries — possibly on
// another server — with the same request uuid; mutations record their result
// under IDEM|request|client in the transaction that applies them, and a
// replay answers from that record instead of applying twice.

import os from 'node:os'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { StrataError, toStrataError } from '../common/errors.js'
import { RELEASE_VERSION, type Timers } from '../common/config.js'
import { every } from '../common/daemon.js'
import type { Logger } from '../common/log.js'
import { MetaMethod, ServiceId } from '../common/services.js'
import { StorageClient } from '../client/index.js'
import type { KeyValue, KvEngine, RangeOptions, ReadWriteTxn } from '../kv/types.js'
import { MgmtdClient } from '../mgmtd/index.js'
import { RpcClient, type RpcServer } from '../rpc/index.js'
import { GC_ROOT_ACL, ROOT_ACL, isRoot } from './acl.js'
import { ChainAllocator } from './chains.js'
import { decodeDirEntry, decodeInode, decodeValue } from './codec.js'
import type { MetaSettings } from './config.js'
import { Distributor } from './distributor.js'
import { dumpSessions, parseDumpSessionsReq } from './dump-sessions.js'
import { abandonRequest, decodeIdemRecord, encodeIdemRecord, replay, type IdemRecord } from './idem.js'
import { FileHelper } from './file-helper.js'
import { GcManager, parseGcEntry } from './gc.js'
import { InodeIdAllocator } from './inode-alloc.js'
import { NULL_LAYOUT, castGranularity, newDirectory, nowUs } from './inode.js'
import {
  PREFIX_DENTRY,
  PREFIX_IDEM,
  PREFIX_INODE,
  idemKey,
  inodeKey,
  isZeroUuid,
  keyAfter,
  parseDentryKey,
  parseInodeKey,
  prefixEnd,
} from './keys.js'
import { MetaStore } from './ops.js'
import { SessionManager, firstMeta } from './sessions.js'
import { listDirEntries, loadInode, storeInode } from './store.js'
import {
  GC_ROOT_INODE,
  ROOT_INODE,
  type AtFlags,
  type BatchStatByPathReq,
  type CloseReq,
  type CreateReq,
  type DumpInodesReq,
  type DumpInodesRsp,
  type FileSessionRecord,
  type GcListReq,
  type GcListRsp,
  type GetRealPathReq,
  type HardLinkReq,
  type InodeId,
  type ListReq,
  type ListSessionsReq,
  type LockDirectoryReq,
  type MkdirsReq,
  type OpenFlags,
  type OpenReq,
  type PathAt,
  type PruneSessionReq,
  type AbandonReq,
  type AbandonRsp,
  type RemoveReq,
  type RenameReq,
  type ReqBase,
  type SetAttrReq,
  type StatReq,
  type SymlinkReq,
  type SyncReq,
  type UserInfo,
  type VersionedLength,
} from './protocol.js'

// --- request normalization

/** Admin operations that act on every user's files (or show them) are root's (EPERM otherwise, as chown). */
function requireRoot(u: UserInfo, what: string): void {
  if (!isRoot(u)) throw new StrataError('META_NOT_PERMITTED', `only root may ${what} (uid ${u.uid})`)
}

function bad(msg: string): StrataError {
  return new StrataError('META_INVALID_ARGUMENT', msg)
}

export function toInodeId(v: unknown, what = 'inode id'): InodeId {
  if (typeof v === 'bigint') {
    if (v < 0n || v > (1n << 64n) - 1n) throw bad(`${what} out of range`)
    return v
  }
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v)
  if (typeof v === 'string' && /^(0x[0-9a-fA-F]{1,16}|\d{1,20})$/.test(v)) return BigInt(v)
  throw bad(`${what} must be an unsigned 64-bit integer, got ${typeof v === 'object' ? JSON.stringify(v) : String(v)}`)
}

/** (uid_t)-1 / (gid_t)-1 */
const NO_ID = 0xffffffff

function u32(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) throw bad(`${what} must be a u32`)
  return v
}

function optU32(v: unknown, what: string): number | undefined {
  return v === undefined || v === null ? undefined : u32(v, what)
}

function optTime(v: unknown, what: string): number | undefined {
  if (v === undefined || v === null) return undefined
  // 3FS's UtcTime is signed µs: times before 1970 are times; -1 alone means "now" (SETATTR_TIME_NOW)
  if (typeof v !== 'number' || !Number.isSafeInteger(v)) throw bad(`${what} must be µs since the epoch (an integer) or -1 (now)`)
  return v
}

function user(p: unknown): UserInfo {
  const u = p as Partial<UserInfo> | undefined
  if (!u || typeof u !== 'object') throw bad('request needs user {uid, gid, groups}')
  const groups = Array.isArray(u.groups) ? u.groups.map((g, i) => u32(g, `user.groups[${i}]`)) : []
  return { uid: u32(u.uid, 'user.uid'), gid: u32(u.gid, 'user.gid'), groups }
}

function base<T extends ReqBase>(p: unknown): T {
  if (!p || typeof p !== 'object') throw bad('request payload must be an object')
  const r = p as Record<string, unknown>
  const client = r.client as { uuid?: unknown; hostname?: unknown } | undefined
  return {
    ...(r as object),
    user: user(r.user),
    client: { uuid: typeof client?.uuid === 'string' ? client.uuid : '', hostname: typeof client?.hostname === 'string' ? client.hostname : '' },
    uuid: typeof r.uuid === 'string' ? r.uuid : '',
  } as T
}

function pathAt(v: unknown, what = 'path'): PathAt {
  if (v === undefined || v === null) throw bad(`${what} is required`)
  if (typeof v === 'string') return { parent: ROOT_INODE, path: v }
  if (typeof v !== 'object') throw bad(`${what} must be {parent, path?}`)
  const o = v as { parent?: unknown; path?: unknown }
  const out: PathAt = { parent: o.parent === undefined || o.parent === null ? ROOT_INODE : toInodeId(o.parent, `${what}.parent`) }
  if (o.path !== undefined && o.path !== null) {
    if (typeof o.path !== 'string') throw bad(`${what}.path must be a string`)
    out.path = o.path
  }
  return out
}

function atFlags(v: unknown): AtFlags | undefined {
  if (v === undefined || v === null) return undefined
  if (typeof v !== 'object') throw bad('flags must be an object')
  const o = v as AtFlags
  const out: AtFlags = {}
  if (o.followLastSymlink !== undefined) out.followLastSymlink = !!o.followLastSymlink
  if (o.removeDir !== undefined) out.removeDir = !!o.removeDir
  return out
}

function openFlags(v: unknown): OpenFlags {
  if (!v || typeof v !== 'object') throw bad('open flags are required')
  const o = v as OpenFlags
  if (o.access !== 'r' && o.access !== 'w' && o.access !== 'rw') throw bad(`open access must be r, w or rw, got ${String(o.access)}`)
  return { access: o.access, create: !!o.create, excl: !!o.excl, trunc: !!o.trunc, append: !!o.append, directory: !!o.directory }
}

function session(v: unknown): { session: string } | undefined {
  if (v === undefined || v === null) return undefined
  const s = (v as { session?: unknown }).session
  if (typeof s !== 'string' || isZeroUuid(s)) throw bad('session.session must be a non-empty id')
  return { session: s }
}

function versionedLength(v: unknown, what: string): VersionedLength | undefined {
  if (v === undefined || v === null) return undefined
  const o = v as VersionedLength
  if (typeof o.length !== 'number' || !Number.isSafeInteger(o.length) || o.length < 0) throw bad(`${what}.length must be a non-negative integer`)
  if (typeof o.truncateVer !== 'number' || !Number.isSafeInteger(o.truncateVer) || o.truncateVer < 0) throw bad(`${what}.truncateVer must be a non-negative integer`)
  return { length: o.length, truncateVer: o.truncateVer }
}

function optInode(v: unknown, what: string): InodeId | undefined {
  return v === undefined || v === null ? undefined : toInodeId(v, what)
}

// --- write tracking (does an operation change anything?)

class TrackedTxn implements ReadWriteTxn {
  writes = 0
  constructor(private readonly t: ReadWriteTxn) {}
  get readVersion(): bigint {
    return this.t.readVersion
  }
  snapshotGet(k: Buffer) {
    return this.t.snapshotGet(k)
  }
  snapshotGetRange(b: Buffer, e: Buffer, o?: RangeOptions): Promise<KeyValue[]> {
    return this.t.snapshotGetRange(b, e, o)
  }
  get(k: Buffer) {
    return this.t.get(k)
  }
  getRange(b: Buffer, e: Buffer, o?: RangeOptions): Promise<KeyValue[]> {
    return this.t.getRange(b, e, o)
  }
  addReadConflict(k: Buffer): void {
    this.t.addReadConflict(k)
  }
  addReadConflictRange(b: Buffer, e: Buffer): void {
    this.t.addReadConflictRange(b, e)
  }
  set(k: Buffer, v: Buffer): void {
    this.writes++
    this.t.set(k, v)
  }
  clear(k: Buffer): void {
    this.writes++
    this.t.clear(k)
  }
  clearRange(b: Buffer, e: Buffer): void {
    this.writes++
    this.t.clearRange(b, e)
  }
  setVersionstampedKey(p: Buffer, v: Buffer): void {
    this.writes++
    this.t.setVersionstampedKey(p, v)
  }
  setVersionstampedValue(k: Buffer, p: Buffer): void {
    this.writes++
    this.t.setVersionstampedValue(k, p)
  }
}

/** The write session an open or create for write opens, named in its idempotency record (for an abandon). */
function writeSessionOf(req: OpenReq | CreateReq): ((rsp: { stat: { id: bigint } }) => IdemRecord['session']) | undefined {
  const s = req.session?.session
  if (req.flags.access === 'r' || !s) return undefined
  return (rsp) => ({ inode: rsp.stat.id, session: s })
}

/** codes whose answer is final for the request (recorded for remove/rename, as 3FS does) */
function isFinal(e: StrataError): boolean {
  return !e.retryable && (e.code.startsWith('META_') || e.code === 'INVALID_ARGUMENT')
}

export interface MetaServiceOptions {
  nodeId: number
  kv: KvEngine
  mgmtdAddresses: string[]
  settings: MetaSettings
  timers: Timers
  log: Logger
}

export class MetaService {
  readonly rpc: RpcClient
  readonly mgmtd: MgmtdClient
  readonly storage: StorageClient
  readonly ids: InodeIdAllocator
  readonly chains: ChainAllocator
  readonly files: FileHelper
  readonly gc: GcManager
  readonly sessions: SessionManager
  readonly distributor: Distributor
  readonly store: MetaStore
  /** abandons: requests withdrawn (abandon); abandonsClosed: of those, applied ones whose write session was closed */
  readonly counters = { idemReplays: 0, idemCleaned: 0, abandons: 0, abandonsClosed: 0 }
  private loops: Array<{ stop(): void; kick(): void }> = []
  private unwatch: (() => void) | null = null
  private readonly hbBase = Date.now() * 1000
  private hbSeq = 0
  private address = ''
  private closing = false

  constructor(private readonly o: MetaServiceOptions) {
    this.rpc = new RpcClient({ connectTimeoutMs: 1000 })
    this.mgmtd = new MgmtdClient({ addresses: o.mgmtdAddresses, rpc: this.rpc })
    this.storage = new StorageClient({ mgmtd: this.mgmtd, rpc: this.rpc, clientId: `meta-${o.nodeId}-${randomUUID()}` })
    this.ids = new InodeIdAllocator(o.kv)
    this.chains = new ChainAllocator(this.mgmtd)
    this.files = new FileHelper(this.mgmtd, this.storage, this.rpc, o.log.child('files'))
    this.gc = new GcManager({ kv: o.kv, nodeId: o.nodeId, settings: o.settings, ids: this.ids, files: this.files, log: o.log.child('gc') })
    this.store = new MetaStore({ settings: o.settings, ids: this.ids, chains: this.chains, files: this.files, gc: this.gc })
    this.sessions = new SessionManager({
      kv: o.kv,
      mgmtd: this.mgmtd,
      settings: o.settings,
      nodeId: o.nodeId,
      log: o.log.child('sessions'),
      closeSession: (s) => this.closeSession(s),
    })
    this.distributor = new Distributor(o.kv, o.nodeId, o.settings.distributorTimeoutMs, o.log.child('distributor'))
  }

  get kv(): KvEngine {
    return this.o.kv
  }

  get log(): Logger {
    return this.o.log
  }

  get settings(): MetaSettings {
    return this.o.settings
  }

  // --- start-up

  /** Creates the tree roots (first start of the cluster) and this server's GC directories. */
  async init(): Promise<void> {
    // each step is a KV transaction (a flush on a durable KV): on a saturated disk a start can
    // take long, and these lines show where it was
    await this.initFileSystem()
    await this.ids.refill()
    this.log.info('inode ids ready')
    await this.gc.init()
    this.log.info('GC directories ready')
    await this.distributor.update().catch((e: unknown) => this.log.warn('distributor update failed', { err: e }))
  }

  private async initFileSystem(): Promise<void> {
    const exists = await this.o.kv.readOnly(async (txn) => (await loadInode(txn, ROOT_INODE)) !== null && (await loadInode(txn, GC_ROOT_INODE)) !== null)
    if (exists) return
    let warned = 0
    for (;;) {
      if (this.closing) throw new StrataError('CLOSED', 'meta server closing')
      let init: Awaited<ReturnType<MgmtdClient['clusterInfo']>>['init'] | null = null
      try {
        init = (await this.mgmtd.clusterInfo()).init
      } catch (e) {
        if (Date.now() - warned > 5000) this.log.warn('mgmtd not reachable yet', { err: e })
        warned = Date.now()
      }
      if (init) {
        const layout = { tableId: init.chainTableId, tableVersion: 0, chunkSize: init.chunkSize, stripeSize: init.stripeSize, chains: { type: 'Empty' as const } }
        await this.chains.checkLayoutValid(layout)
        const now = castGranularity(nowUs(), 1000)
        await this.o.kv.transact(async (txn) => {
          if (!(await loadInode(txn, ROOT_INODE, false))) storeInode(txn, newDirectory(ROOT_INODE, ROOT_INODE, '/', { ...ROOT_ACL }, layout, now))
          if (!(await loadInode(txn, GC_ROOT_INODE, false))) storeInode(txn, newDirectory(GC_ROOT_INODE, GC_ROOT_INODE, '/', { ...GC_ROOT_ACL }, NULL_LAYOUT, now))
        })
        this.log.info('file system initialized', { tableId: init.chainTableId, chunkSize: init.chunkSize, stripeSize: init.stripeSize })
        return
      }
      if (Date.now() - warned > 5000) {
        this.log.warn('waiting for init-cluster before creating the root directory')
        warned = Date.now()
      }
      await sleep(300)
    }
  }

  start(server: RpcServer): void {
    this.address = server.address
    const M = MetaMethod
    server.addService(ServiceId.Meta, {
      [M.statFs]: (p: unknown) => this.statFs(p),
      [M.stat]: (p: unknown) => this.stat(p),
      [M.batchStat]: (p: unknown) => this.batchStat(p),
      [M.batchStatByPath]: (p: unknown) => this.batchStatByPath(p),
      [M.create]: (p: unknown) => this.create(p),
      [M.mkdirs]: (p: unknown) => this.mkdirs(p),
      [M.symlink]: (p: unknown) => this.symlink(p),
      [M.hardLink]: (p: unknown) => this.hardLink(p),
      [M.remove]: (p: unknown) => this.remove(p),
      [M.open]: (p: unknown) => this.open(p),
      [M.sync]: (p: unknown) => this.sync(p),
      [M.close]: (p: unknown) => this.close_(p),
      [M.rename]: (p: unknown) => this.rename(p),
      [M.list]: (p: unknown) => this.list(p),
      [M.truncate]: () => {
        throw new StrataError('NOT_IMPLEMENTED', 'truncate is deprecated (3FS): clients truncate chunks themselves and sync with truncated=true')
      },
      [M.getRealPath]: (p: unknown) => this.getRealPath(p),
      [M.setAttr]: (p: unknown) => this.setAttr(p),
      [M.pruneSession]: (p: unknown) => this.pruneSession(p),
      [M.abandon]: (p: unknown) => this.abandon(p),
      [M.dropUserCache]: () => ({ ok: true }),
      [M.authenticate]: (p: unknown) => ({ user: base<ReqBase>(p).user }),
      [M.lockDirectory]: (p: unknown) => this.lockDirectory(p),
      [M.gcList]: (p: unknown) => this.gcList(p),
      [M.listSessions]: (p: unknown) => this.listSessions(p),
      [M.dumpInodes]: (p: unknown) => this.dumpInodes(p),
      [M.dumpSessions]: (p: unknown) => {
        requireRoot(base<ReqBase>(p).user, 'list write sessions')
        return dumpSessions(this.o.kv, parseDumpSessionsReq(p, toInodeId))
      },
    })
    const T = this.o.timers
    const S = this.o.settings
    this.unwatch = this.mgmtd.watch(T.routingRefreshMs)
    const loop = (ms: number, name: string, fn: () => Promise<unknown>) => {
      const l = every(Math.max(10, ms), this.log, name, async () => {
        if (!this.closing) await fn()
      })
      this.loops.push(l)
      return l
    }
    loop(T.heartbeatIntervalMs, 'heartbeat', () => this.heartbeat()).kick()
    loop(S.gcScanIntervalMs, 'gc scan', () => this.gc.scan())
    loop(S.sessionScanIntervalMs, 'session scan', () => this.sessions.scan())
    loop(S.idemCleanIntervalMs, 'idempotency clean', () => this.cleanIdempotent())
    loop(S.statfsUpdateIntervalMs, 'statfs', () => this.files.refreshStatFs()).kick()
    loop(S.distributorUpdateIntervalMs, 'distributor', () => this.distributor.update())
  }

  private async heartbeat(): Promise<void> {
    const rsp = await this.mgmtd.heartbeat({
      nodeId: this.o.nodeId,
      type: 'META',
      hbVersion: this.hbBase + ++this.hbSeq,
      timestamp: Date.now(),
      address: this.address,
      hostname: os.hostname(),
      pid: process.pid,
      configVersion: 0,
      releaseVersion: RELEASE_VERSION,
    })
    const known = this.mgmtd.cachedRouting?.routingInfoVersion ?? -1
    if (rsp.routingInfoVersion !== known) await this.mgmtd.refresh(rsp.routingInfoVersion)
  }

  stats(): Record<string, unknown> {
    return {
      nodeId: this.o.nodeId,
      gc: { ...this.gc.stats, directories: this.gc.directories.map((d) => d.name) },
      sessions: this.sessions.stats,
      idempotency: this.counters,
      distributor: { active: this.distributor.activeServers },
      kv: this.kvCounters(),
    }
  }

  /** This process's commits and the attempts that conflicted (KV_CONFLICT, retried) or were too old, when the engine counts them. */
  private kvCounters(): { commits: number; conflicts: number; tooOld: number } | null {
    const kv = this.o.kv as { stats?: unknown }
    const st = typeof kv.stats === 'function' ? (kv.stats as () => Record<string, unknown>).call(kv) : kv.stats
    if (!st || typeof st !== 'object') return null
    const n = (k: string) => Number((st as Record<string, unknown>)[k] ?? 0)
    return { commits: n('commits'), conflicts: n('conflicts'), tooOld: n('tooOld') }
  }

  async close(): Promise<void> {
    if (this.closing) return
    this.closing = true
    for (const l of this.loops) l.stop()
    this.loops = []
    this.gc.stop()
    await Promise.race([this.gc.drained(), sleep(2000)])
    await this.distributor.update(true).catch(() => {})
    this.unwatch?.()
    this.storage.close()
    this.mgmtd.close()
    this.rpc.close()
  }

  // --- drivers

  /**
   * `frees`: the transaction frees space or is needed to free it (see
   * TransactOptions.frees): on a full disk the KV lets only these commit into
   * the room it keeps aside, so `rm` works where `mkdir` gets ENOSPC.
   */
  private txnOpts(long = false, frees = false) {
    return {
      timeoutMs: Math.max(1, long ? Math.max(this.o.settings.operationTimeoutMs, 30_000) : this.o.settings.operationTimeoutMs),
      ...(frees ? { frees } : {}),
    }
  }

  /**
   * Runs a mutation in one transaction. With idempotency, the IDEM record of
   * (request, client) is read first (a replay answers from it) and written in
   * the same transaction when the operation changed anything; with
   * `recordErrors` a final error is recorded too, in a transaction of its own
   * (3FS resets the transaction and stores the error).
   */
  private async mutate<T>(
    req: ReqBase,
    opts: { idem: boolean; recordErrors?: boolean; long?: boolean; frees?: boolean; session?: (result: T) => IdemRecord['session'] },
    fn: (txn: ReadWriteTxn) => Promise<T>,
  ): Promise<T> {
    const useIdem = opts.idem && !isZeroUuid(req.uuid) && !isZeroUuid(req.client.uuid)
    const key = useIdem ? idemKey(req.uuid, req.client.uuid) : null
    try {
      return await this.o.kv.transact(async (raw) => {
        if (key) {
          const rec = await raw.get(key)
          if (rec) {
            this.counters.idemReplays++
            return replay(decodeIdemRecord(rec)) as T
          }
        }
        const txn = new TrackedTxn(raw)
        const result = await fn(txn)
        if (key && txn.writes > 0) {
          const session = opts.session?.(result)
          raw.set(key, encodeIdemRecord(req.client.uuid, req.uuid, { ok: true, result, ...(session ? { session } : {}) }))
        }
        return result
      }, this.txnOpts(opts.long, opts.frees))
    } catch (e) {
      const err = toStrataError(e)
      if (key && opts.recordErrors && isFinal(err) && !/\(replayed\)$/.test(err.reason)) {
        const replayed = await this.o.kv.transact(async (txn) => {
          const rec = await txn.get(key)
          if (rec) return decodeIdemRecord(rec)
          txn.set(key, encodeIdemRecord(req.client.uuid, req.uuid, { ok: false, error: { code: err.code, message: err.reason } }))
          return null
        }, this.txnOpts())
        if (replayed) {
          this.counters.idemReplays++
          return replay(replayed) as T
        }
      }
      throw err
    }
  }

  private readOnly<T>(fn: (txn: Parameters<Parameters<KvEngine['readOnly']>[0]>[0]) => Promise<T>): Promise<T> {
    return this.o.kv.readOnly(fn)
  }

  // --- handlers

  private async statFs(p: unknown) {
    if (p && typeof p === 'object' && 'user' in (p as object)) base<ReqBase>(p)
    return this.files.statFs(this.o.settings.statfsCacheMs)
  }

  private async stat(p: unknown) {
    const r = base<StatReq>(p)
    const req: StatReq = { ...r, path: pathAt(r.path) }
    const flags = atFlags(r.flags)
    if (flags) req.flags = flags
    return { stat: await this.readOnly((txn) => this.store.stat(txn, req)) }
  }

  private async batchStat(p: unknown) {
    const r = base<ReqBase & { inodeIds: unknown[] }>(p)
    if (!Array.isArray(r.inodeIds)) throw bad('inodeIds must be an array')
    const ids = r.inodeIds.map((x, i) => toInodeId(x, `inodeIds[${i}]`))
    return { inodes: await this.readOnly((txn) => this.store.batchStat(txn, ids)) }
  }

  private async batchStatByPath(p: unknown) {
    const r = base<BatchStatByPathReq>(p)
    if (!Array.isArray(r.paths)) throw bad('paths must be an array')
    const req: BatchStatByPathReq = { ...r, paths: r.paths.map((x, i) => pathAt(x, `paths[${i}]`)) }
    const flags = atFlags(r.flags)
    if (flags) req.flags = flags
    return this.readOnly((txn) => this.store.batchStatByPath(txn, req))
  }

  private async create(p: unknown) {
    const r = base<CreateReq>(p)
    const req: CreateReq = { ...r, path: pathAt(r.path), flags: openFlags(r.flags), perm: u32(r.perm ?? 0o644, 'perm') }
    const s = session(r.session)
    if (s) req.session = s
    else delete req.session
    if (r.layout === null) delete req.layout
    return this.mutate(req, { idem: true, session: writeSessionOf(req) }, (txn) => this.store.create(txn, req))
  }

  private async mkdirs(p: unknown) {
    const r = base<MkdirsReq>(p)
    const req: MkdirsReq = { ...r, path: pathAt(r.path), perm: u32(r.perm ?? 0o755, 'perm'), recursive: !!r.recursive }
    if (r.layout === null) delete req.layout
    return { stat: await this.mutate(req, { idem: true }, (txn) => this.store.mkdirs(txn, req)) }
  }

  private async symlink(p: unknown) {
    const r = base<SymlinkReq>(p)
    const req: SymlinkReq = { ...r, path: pathAt(r.path), target: String(r.target ?? '') }
    return { stat: await this.mutate(req, { idem: true }, (txn) => this.store.symlink(txn, req)) }
  }

  private async hardLink(p: unknown) {
    const r = base<HardLinkReq>(p)
    const req: HardLinkReq = { ...r, oldPath: pathAt(r.oldPath, 'oldPath'), newPath: pathAt(r.newPath, 'newPath') }
    const flags = atFlags(r.flags)
    if (flags) req.flags = flags
    else delete req.flags
    return { stat: await this.mutate(req, { idem: true }, (txn) => this.store.hardLink(txn, req)) }
  }

  private async remove(p: unknown) {
    const r = base<RemoveReq>(p)
    const req: RemoveReq = { ...r, path: pathAt(r.path), recursive: !!r.recursive, checkType: !!r.checkType }
    const flags = atFlags(r.atFlags)
    if (flags) req.atFlags = flags
    else delete req.atFlags
    const inodeId = optInode(r.inodeId, 'inodeId')
    if (inodeId !== undefined) req.inodeId = inodeId
    else delete req.inodeId
    if (req.recursive && (isZeroUuid(req.uuid) || isZeroUuid(req.client.uuid))) throw bad('a recursive remove needs request and client uuids')
    await this.mutate(req, { idem: true, recordErrors: true, frees: true }, async (txn) => {
      await this.store.remove(txn, req)
      return { ok: true }
    })
    return { ok: true }
  }

  private async open(p: unknown) {
    const r = base<OpenReq>(p)
    const req: OpenReq = { ...r, path: pathAt(r.path), flags: openFlags(r.flags) }
    const s = session(r.session)
    if (s) req.session = s
    else delete req.session
    // a write open goes through the idempotency record as a create does: an abandoned one
    // (the client gave up on it) must find the abandon's record and not open a session
    // nobody will close; a read-only open changes nothing and needs none
    return this.mutate(req, { idem: req.flags.access !== 'r', session: writeSessionOf(req) }, (txn) => this.store.open(txn, req))
  }

  /** Withdraws a request its client gave up on (idem.ts); any user, for their client's requests only. */
  private async abandon(p: unknown): Promise<AbandonRsp> {
    const r = base<AbandonReq>(p)
    if (typeof r.request !== 'string' || isZeroUuid(r.request)) throw bad('request must be the uuid of the request to abandon')
    if (isZeroUuid(r.client.uuid)) throw bad('abandon needs a client uuid')
    // frees: closing a session lets GC take a removed file
    const rsp = await this.o.kv.transact((txn) => abandonRequest(txn, r.client.uuid, r.request), this.txnOpts(false, true))
    this.counters.abandons++
    this.counters.abandonsClosed += rsp.closed
    return rsp
  }

  private syncReq(p: unknown): SyncReq {
    const r = base<SyncReq>(p)
    const req: SyncReq = { ...r, inode: toInodeId(r.inode, 'inode'), updateLength: !!r.updateLength, truncated: !!r.truncated }
    return normalizeTimesAndHint(req, r)
  }

  private async sync(p: unknown) {
    const req = this.syncReq(p)
    return { stat: await this.o.kv.transact((txn) => this.store.sync(txn, req), this.txnOpts(true)) }
  }

  private closeReq(p: unknown): CloseReq {
    const r = base<CloseReq>(p)
    const req: CloseReq = { ...r, inode: toInodeId(r.inode, 'inode'), updateLength: !!r.updateLength }
    const s = session(r.session)
    if (s) req.session = s
    else delete req.session
    return normalizeTimesAndHint(req, r)
  }

  private async close_(p: unknown) {
    const req = this.closeReq(p)
    // frees: GC waits for a file's write sessions to close before it drops the file
    return { stat: await this.o.kv.transact((txn) => this.store.close(txn, req), this.txnOpts(true, true)) }
  }

  /** Closes a session of a dead client with a storage-queried length (session pruning). */
  private async closeSession(s: FileSessionRecord): Promise<void> {
    const req: CloseReq = {
      user: { uid: 0, gid: 0, groups: [] },
      client: { uuid: s.clientId, hostname: '' },
      uuid: '',
      inode: s.inode,
      session: { session: s.session },
      updateLength: true,
    }
    await this.o.kv.transact((txn) => this.store.close(txn, req), this.txnOpts(true, true))
  }

  private async rename(p: unknown) {
    const r = base<RenameReq>(p)
    const req: RenameReq = { ...r, src: pathAt(r.src, 'src'), dest: pathAt(r.dest, 'dest'), moveToTrash: !!r.moveToTrash }
    const inodeId = optInode(r.inodeId, 'inodeId')
    if (inodeId !== undefined) req.inodeId = inodeId
    else delete req.inodeId
    // frees: libfuse 2 unlinks an open file by renaming it to .fuse_hidden…, and a rename over a name drops that one
    return { stat: await this.mutate(req, { idem: true, recordErrors: true, frees: true }, (txn) => this.store.rename(txn, req)) }
  }

  private async list(p: unknown) {
    const r = base<ListReq>(p)
    const req: ListReq = { ...r, path: pathAt(r.path), prev: typeof r.prev === 'string' ? r.prev : '', limit: typeof r.limit === 'number' ? r.limit : -1, status: !!r.status }
    return this.readOnly((txn) => this.store.list(txn, req))
  }

  private async getRealPath(p: unknown) {
    const r = base<GetRealPathReq>(p)
    const req: GetRealPathReq = { ...r, path: pathAt(r.path), absolute: !!r.absolute }
    return { path: await this.readOnly((txn) => this.store.getRealPath(txn, req)) }
  }

  private async setAttr(p: unknown) {
    const r = base<SetAttrReq>(p)
    const req: SetAttrReq = { ...r, path: pathAt(r.path) }
    const flags = atFlags(r.flags)
    if (flags) req.flags = flags
    else delete req.flags
    for (const k of ['uid', 'gid', 'perm', 'iflags', 'dynStripe'] as const) {
      const v = optU32(r[k], k)
      // (uid_t)-1 is chown(2)'s "leave unchanged", never an owner: storing it would give the
      // inode an owner no process has (clients leave the field out to keep it unchanged)
      if ((k === 'uid' || k === 'gid') && v === NO_ID) throw bad(`${k} ${NO_ID} is (${k === 'uid' ? 'uid_t' : 'gid_t'})-1, chown's "unchanged" value, not a valid ${k === 'uid' ? 'owner' : 'group'}`)
      if (v !== undefined) req[k] = v
      else delete req[k]
    }
    for (const k of ['atime', 'mtime'] as const) {
      const v = optTime(r[k], k)
      if (v !== undefined) req[k] = v
      else delete req[k]
    }
    if (r.layout === null || r.layout === undefined) delete req.layout
    return { stat: await this.mutate(req, { idem: true }, (txn) => this.store.setAttr(txn, req)) }
  }

  private async pruneSession(p: unknown) {
    const r = base<PruneSessionReq>(p)
    // pruning drops what keeps GC off a file that is still written: an administrator's act
    requireRoot(r.user, 'prune write sessions')
    if (typeof r.clientId !== 'string' || !r.clientId) throw bad('clientId required')
    const only = Array.isArray(r.sessions) ? r.sessions.map(String) : []
    return { pruned: await this.sessions.pruneClient(r.clientId, only) }
  }

  private async lockDirectory(p: unknown) {
    const r = base<LockDirectoryReq>(p)
    const req: LockDirectoryReq = { ...r, inode: toInodeId(r.inode, 'inode') }
    if (isZeroUuid(req.client.uuid)) throw bad('lockDirectory needs a client uuid')
    return { stat: await this.mutate(req, { idem: true }, (txn) => this.store.lockDirectory(txn, req)) }
  }

  // --- admin helpers (ids ≥ 100)

  private async gcList(p: unknown): Promise<GcListRsp> {
    const r = base<GcListReq & ReqBase>(p)
    // the GC root is 0700 root: its entries (original paths of files removed from private
    // directories, their owners) are for root only, as a list of the GC directories is
    requireRoot(r.user, 'list the GC directories')
    const limit = typeof r.limit === 'number' && r.limit > 0 ? r.limit : 0
    let prevDir = ''
    let prevName = ''
    if (r.prev !== undefined && r.prev !== null && r.prev !== '') {
      const m = typeof r.prev === 'string' ? /^([^/]+)\/([^/]+)$/.exec(r.prev) : null
      if (!m) throw bad(`gc-list cursor ${JSON.stringify(r.prev)} is not <GcDir>/<Name> (the GcDir and Name of the last entry listed)`)
      prevDir = m[1]!
      prevName = m[2]!
    }
    const entries: GcListRsp['entries'] = []
    const dirs = await this.readOnly((txn) => listDirEntries(txn, GC_ROOT_INODE, '', 10_000))
    for (const dir of dirs.entries) {
      if (prevDir && dir.name < prevDir) continue
      let prev = prevDir === dir.name ? prevName : ''
      for (;;) {
        // one entry beyond the limit tells whether more follow
        const want = limit ? Math.min(1000, limit + 1 - entries.length) : 1000
        const page = await this.readOnly((txn) => listDirEntries(txn, dir.id, prev, want))
        for (const e of page.entries) {
          if (limit && entries.length >= limit) return { entries, more: true }
          entries.push({
            gcDir: dir.name,
            name: e.name,
            inode: e.id,
            type: e.type,
            origPath: e.gcInfo?.origPath ?? '',
            user: e.gcInfo?.user ?? 0,
            removedAt: e.removedAt ?? parseGcEntry(e.name)?.timestampUs ?? 0,
          })
        }
        if (!page.more || !page.entries.length) break
        prev = page.entries[page.entries.length - 1]!.name
      }
    }
    return { entries, more: false }
  }

  private async listSessions(p: unknown) {
    // which client has which file open for writing, for every user: root's, as gc-list and session-prune
    requireRoot(base<ListSessionsReq & ReqBase>(p).user, 'list write sessions')
    const r = (p ?? {}) as ListSessionsReq
    const limit = typeof r.limit === 'number' && r.limit > 0 ? r.limit : 0
    const inode = optInode(r.inode, 'inode')
    const client = typeof r.clientId === 'string' && r.clientId ? r.clientId : undefined
    const sessions = await this.sessions.listAll((s) => (inode === undefined || s.inode === inode) && (client === undefined || s.clientId === client), limit)
    // oldest first (the KV keeps them in key order)
    return { sessions: sessions.sort((a, b) => a.timestamp - b.timestamp) }
  }

  private async dumpInodes(p: unknown): Promise<DumpInodesRsp> {
    const r = (p ?? {}) as DumpInodesReq
    const limit = Math.min(10_000, typeof r.limit === 'number' && r.limit > 0 ? r.limit : 1000)
    const prefix = r.entries ? PREFIX_DENTRY : PREFIX_INODE
    let begin: Buffer = prefix
    if (typeof r.cursor === 'string' && r.cursor) begin = keyAfter(Buffer.from(r.cursor, 'hex'))
    else if (!r.entries && r.prev !== undefined && r.prev !== null) begin = keyAfter(inodeKey(toInodeId(r.prev, 'prev')))
    const kvs = await this.readOnly((txn) => txn.snapshotGetRange(begin, prefixEnd(prefix), { limit: limit + 1 }))
    const more = kvs.length > limit
    const page = more ? kvs.slice(0, limit) : kvs
    const rsp: DumpInodesRsp = { inodes: [], entries: [], more, cursor: more ? page[page.length - 1]!.key.toString('hex') : null }
    for (const kv of page) {
      if (r.entries) {
        const { parent, name } = parseDentryKey(kv.key)
        rsp.entries.push(decodeDirEntry(parent, name, kv.value))
      } else rsp.inodes.push(decodeInode(parseInodeKey(kv.key), kv.value))
    }
    return rsp
  }

  // --- idempotency record cleaning (first meta only, as 3FS)

  /**
   * Where the next clean goes on (null: from the start). A clean reads a
   * bounded number of records, and started at the first key every time: the
   * records are keyed by random request uuids, so once more records than one
   * clean reads were younger than idemExpireMs (a busy cluster: 1100
   * mutations a second with the defaults), the clean never got past those at
   * the front and expired ones behind them were kept for ever.
   */
  private idemCursor: Buffer | null = null

  /** One round of the idempotency clean loop (public for tests). */
  async cleanIdempotent(): Promise<void> {
    if (firstMeta(this.mgmtd.cachedRouting) !== this.o.nodeId) return
    const S = this.o.settings
    const expireUs = S.idemExpireMs * 1000
    const pageSize = Math.max(1, S.idemCleanPageSize)
    const end = prefixEnd(PREFIX_IDEM)
    for (let page = 0; page < S.idemCleanPages && !this.closing; page++) {
      const begin: Buffer = this.idemCursor ?? PREFIX_IDEM
      const now = nowUs()
      const { last, n, cleaned } = await this.o.kv.transact(async (txn) => {
        const kvs = await txn.getRange(begin, end, { limit: pageSize })
        let cleaned = 0
        for (const kv of kvs) {
          let ts = 0
          try {
            ts = decodeValue<IdemRecord>(kv.value, 'idempotency record').timestamp
          } catch {
            ts = 0
          }
          if (ts + expireUs < now) {
            txn.clear(kv.key)
            cleaned++
          }
        }
        return { last: kvs.length ? kvs[kvs.length - 1]!.key : null, n: kvs.length, cleaned }
      }, { frees: true })
      this.counters.idemCleaned += cleaned
      const wrapped = !last || n < pageSize
      this.idemCursor = wrapped ? null : keyAfter(last)
      // the end of the records: this clean is done (the next one starts again at the front)
      if (wrapped) break
    }
  }
}

/** sync and close carry the same optional atime/mtime/length hint: validate them once. */
function normalizeTimesAndHint<T extends { atime?: number; mtime?: number; lengthHint?: VersionedLength }>(req: T, raw: T): T {
  const at = optTime(raw.atime, 'atime')
  const mt = optTime(raw.mtime, 'mtime')
  const hint = versionedLength(raw.lengthHint, 'lengthHint')
  if (at !== undefined) req.atime = at
  else delete req.atime
  if (mt !== undefined) req.mtime = mt
  else delete req.mtime
  if (hint) req.lengthHint = hint
  else delete req.lengthHint
  return req
}
