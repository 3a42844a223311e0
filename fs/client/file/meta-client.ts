// Client of the metadata service (3FS client/meta/MetaClient): one typed call
// per MetaSerde method. Every logical operation gets one request uuid that is
// reused by all of its retries, so a replay that reaches a server which
// already applied it is answered from the server's idempotency record instead
// of being applied twice. Servers come from routing info (META nodes that are
// HEARTBEAT_CONNECTED) or from explicit addresses; connection failures and
// timeouts fail over to another server, retryable codes back off and retry.
// The client also keeps its mgmtd client session alive, which is how meta
// servers tell live writers from dead ones when pruning file sessions.

import os from 'node:os'
import { randomUUID } from 'node:crypto'
import { RELEASE_VERSION } from '../../common/config.js'
import { ERRORS, StrataError, isErrorCode, toStrataError, type ErrorCode } from '../../common/errors.js'
import { MetaMethod, ServiceId } from '../../common/services.js'
import type { NodeInfo, NodeType, RoutingInfo } from '../../common/types.js'
import type { MgmtdClient } from '../../mgmtd/client.js'
import { RpcClient } from '../../rpc/index.js'
import { clusterGone, refusedAlongChain } from '../retry-policy.js'
import type {
  BatchStatReq,
  BatchStatRsp,
  CloseReq,
  CloseRsp,
  CreateReq,
  CreateRsp,
  GcListRsp,
  GetRealPathReq,
  GetRealPathRsp,
  HardLinkReq,
  HardLinkRsp,
  Inode,
  InodeId,
  ListReq,
  ListRsp,
  LockDirectoryReq,
  LockDirectoryRsp,
  MkdirsReq,
  MkdirsRsp,
  OpenReq,
  OpenRsp,
  PruneSessionReq,
  RemoveReq,
  RenameReq,
  RenameRsp,
  ReqBase,
  SetAttrReq,
  SetAttrRsp,
  StatFsRsp,
  StatReq,
  StatRsp,
  SymlinkReq,
  SymlinkRsp,
  SyncReq,
  SyncRsp,
  UserInfo,
  BatchStatByPathReq,
  BatchStatByPathRsp,
  GcListReq,
  ListSessionsReq,
  ListSessionsRsp,
  DumpInodesReq,
  DumpInodesRsp,
  RemoveRsp,
  PruneSessionRsp,
  AbandonReq,
  AbandonRsp,
} from '../../meta/protocol.js'

/** Request body without the ReqBase fields the client fills in. */
export type Body<T> = Omit<T, keyof ReqBase>

// Shapes of methods protocol.ts does not spell out (deprecated or unused in 3FS).
export interface TruncateReq extends ReqBase {
  inode: InodeId
  length: number
}
export interface TruncateRsp {
  stat: Inode
}
export interface DropUserCacheReq extends ReqBase {
  uid?: number
  dropAll?: boolean
}
export interface AuthenticateRsp {
  user: UserInfo
}

export interface MetaRetryPolicy {
  /**
   * How long one meta server gets to answer before the same request (same
   * uuid) also goes to another one; the first server stays in the race.
   * At most a quarter of the call's budget (attemptTimeoutFor). Default 5 s:
   * a meta server that works answers an ordinary request within its own
   * operationTimeoutMs (5 s), with the result or TIMEOUT.
   */
  attemptTimeoutMs: number
  /** longest wait for one server's answer to one request (capped by what is left of the budget) */
  rpcTimeoutMs: number
  /** overall budget of one logical operation, retries included */
  totalMs: number
  initialDelayMs: number
  maxDelayMs: number
  /** delay after META_BUSY and friends (3FS retry_fast) */
  fastDelayMs: number
  /** give up with CLUSTER_UNREACHABLE once no meta server is reachable and mgmtd has refused connections this long (retry-policy.ts clusterGone); 0: never */
  orphanTimeoutMs: number
}

export const DEFAULT_META_RETRY: MetaRetryPolicy = {
  attemptTimeoutMs: 5_000,
  // a slow answer counts until the budget ends (hung servers are left behind by attemptTimeoutMs)
  rpcTimeoutMs: 60_000,
  totalMs: 60_000,
  initialDelayMs: 50,
  maxDelayMs: 1_000,
  fastDelayMs: 10,
  orphanTimeoutMs: 0,
}

export interface MetaClientOptions {
  /** routing info source (META nodes) and where the client session is extended */
  mgmtd?: MgmtdClient
  rpc?: RpcClient
  /** fixed meta server addresses; when given, routing info is not consulted */
  addresses?: string[]
  /** used only when routing info lists no connected META node (e.g. a cluster.json's meta processes) */
  fallbackAddresses?: string[]
  /** default identity of requests; uid/gid default to the process's */
  user?: Partial<UserInfo>
  /** client id: the mgmtd session id and ReqBase.client.uuid */
  clientId?: string
  hostname?: string
  /** mgmtd session type (default CLIENT; the FUSE daemon says FUSE) */
  nodeType?: NodeType
  description?: string
  retry?: Partial<MetaRetryPolicy>
  /** extendClientSession period; 0 turns it off (default 1000 ms) */
  sessionExtendIntervalMs?: number
  random?: () => number
}

export interface MetaCallOptions {
  /** request as this user instead of the client's default */
  user?: UserInfo
  /** reuse a request id (a background close retried later must replay the same request) */
  uuid?: string
  signal?: AbortSignal
  /** overall budget of this call */
  totalMs?: number
}

const TRANSPORT = new Set<ErrorCode>(['RPC_CONNECT_FAILED', 'RPC_SEND_FAILED', 'RPC_CONNECTION_CLOSED', 'TIMEOUT', 'RPC_UNKNOWN_SERVICE'])
const FAST = new Set<ErrorCode>(['META_BUSY', 'KV_CONFLICT', 'RPC_SEND_FAILED'])
/** the request may have reached the server, which did not answer */
const SENT_UNANSWERED = new Set<ErrorCode>(['TIMEOUT', 'RPC_CONNECTION_CLOSED', 'RPC_SEND_FAILED', 'KV_COMMIT_UNKNOWN'])
/** methods that change nothing (a lost answer leaves nothing behind) */
const READ_ONLY = new Set<number>([
  MetaMethod.statFs,
  MetaMethod.stat,
  MetaMethod.list,
  MetaMethod.getRealPath,
  MetaMethod.authenticate,
  MetaMethod.batchStat,
  MetaMethod.batchStatByPath,
  MetaMethod.gcList,
  MetaMethod.listSessions,
  MetaMethod.dumpInodes,
])

/** errors of mutation calls that gave up with a request sent and unanswered (see mayHaveBeenApplied) */
const UNSETTLED = new WeakSet<object>()

/**
 * Did this error end a mutation call whose request went out and was never
 * answered (a timeout, a connection lost after sending, a hedged attempt
 * still in flight when another server refused it)? Then a server may have
 * applied it, or still hold it and apply it later: the caller that needs to
 * know withdraws it with `abandon` (same request uuid).
 */
export function mayHaveBeenApplied(e: unknown): boolean {
  return typeof e === 'object' && e !== null && UNSETTLED.has(e)
}

type Attempt<Rsp> = { address: string; ok: true; rsp: Rsp } | { address: string; ok: false; err: StrataError }

/** The first of `attempts` to settle, or null after `ms` (Infinity: no timer). */
function firstOf<T>(attempts: Promise<T>[], ms: number): Promise<T | null> {
  if (!(ms < Infinity)) return Promise.race(attempts)
  let timer: NodeJS.Timeout | undefined
  const wake = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), Math.max(0, ms))
  })
  return Promise.race([...attempts, wake]).finally(() => clearTimeout(timer))
}

function formatMs(ms: number): string {
  return ms >= 1000 ? `${Math.round(ms / 100) / 10} s` : `${Math.round(ms)} ms`
}

export interface MetaClientStats {
  calls: number
  retries: number
  failovers: number
  /** requests sent to a further server because the one working on them had not answered within the attempt timeout */
  hedges: number
  failures: number
  sessionExtends: number
  sessionExtendFailures: number
}

function defaultUser(u?: Partial<UserInfo>): UserInfo {
  const uid = u?.uid ?? (typeof process.getuid === 'function' ? process.getuid() : 0)
  const gid = u?.gid ?? (typeof process.getgid === 'function' ? process.getgid() : 0)
  const groups = u?.groups ?? (typeof process.getgroups === 'function' ? process.getgroups().filter((g) => g !== gid) : [])
  return { uid, gid, groups }
}

export class MetaClient {
  readonly clientId: string
  readonly hostname: string
  readonly user: UserInfo
  readonly rpc: RpcClient
  readonly mgmtd: MgmtdClient | undefined
  readonly policy: MetaRetryPolicy
  private readonly ownsRpc: boolean
  private readonly explicit: string[] | undefined
  private readonly fallback: string[]
  private readonly random: () => number
  private readonly nodeType: NodeType
  private readonly description: string
  /** when this client started (ms): list-clients' ClientStart */
  private readonly startedAt = Date.now()
  /** address → ms (monotonic) until which it is avoided */
  private readonly failed = new Map<string, number>()
  private preferred: string | undefined
  private sessionTimer: NodeJS.Timeout | null = null
  private closed = false
  private readonly closeCtl = new AbortController()
  readonly counters: MetaClientStats = { calls: 0, retries: 0, failovers: 0, hedges: 0, failures: 0, sessionExtends: 0, sessionExtendFailures: 0 }

  constructor(opts: MetaClientOptions) {
    if (!opts.mgmtd && !opts.addresses?.length) throw new StrataError('INVALID_ARGUMENT', 'MetaClient needs a MgmtdClient or meta server addresses')
    this.mgmtd = opts.mgmtd
    this.rpc = opts.rpc ?? opts.mgmtd?.rpc ?? new RpcClient()
    this.ownsRpc = !opts.rpc && !opts.mgmtd
    this.explicit = opts.addresses?.length ? [...opts.addresses] : undefined
    this.fallback = [...(opts.fallbackAddresses ?? [])]
    this.user = defaultUser(opts.user)
    this.clientId = opts.clientId ?? randomUUID()
    this.hostname = opts.hostname ?? os.hostname()
    this.nodeType = opts.nodeType ?? 'CLIENT'
    this.description = opts.description ?? `strata file client pid ${process.pid}`
    this.random = opts.random ?? Math.random
    this.policy = { ...DEFAULT_META_RETRY }
    for (const [k, v] of Object.entries(opts.retry ?? {})) {
      if (v === undefined) continue
      if (!(k in DEFAULT_META_RETRY) || typeof v !== 'number' || !(v >= 0)) throw new StrataError('INVALID_ARGUMENT', `bad meta retry option ${k}=${String(v)}`)
      ;(this.policy as unknown as Record<string, number>)[k] = v
    }
    const interval = opts.sessionExtendIntervalMs ?? 1000
    if (this.mgmtd && interval > 0) this.startSessionExtension(interval)
  }

  // --- client session with mgmtd

  private startSessionExtension(intervalMs: number): void {
    const tick = async () => {
      await this.extendSession()
      if (!this.closed) {
        this.sessionTimer = setTimeout(tick, intervalMs)
        this.sessionTimer.unref()
      }
    }
    this.sessionTimer = setTimeout(tick, 0)
    this.sessionTimer.unref()
  }

  /** Tells mgmtd this client is alive (also done periodically). Never throws. */
  async extendSession(): Promise<boolean> {
    if (!this.mgmtd || this.closed) return false
    try {
      await this.mgmtd.extendClientSession({
        clientId: this.clientId,
        nodeType: this.nodeType,
        hostname: this.hostname,
        pid: process.pid,
        description: this.description,
        clientStart: this.startedAt,
        releaseVersion: RELEASE_VERSION,
      })
      this.counters.sessionExtends++
      return true
    } catch {
      this.counters.sessionExtendFailures++
      return false
    }
  }

  // --- server choice

  /** Candidate meta server addresses, best first. */
  async servers(refresh = false): Promise<string[]> {
    let list: string[]
    if (this.explicit) list = this.explicit
    else {
      let ri: RoutingInfo | null = null
      try {
        ri = refresh ? await this.mgmtd!.refresh() : await this.mgmtd!.routing()
      } catch {
        ri = this.mgmtd!.cachedRouting
      }
      list = ri ? metaServersOf(ri) : []
      if (list.length === 0 && !refresh && ri) {
        try {
          list = metaServersOf(await this.mgmtd!.refresh())
        } catch {
          // keep the empty list
        }
      }
      if (list.length === 0) list = this.fallback
    }
    const now = performance.now()
    const ok = list.filter((a) => (this.failed.get(a) ?? 0) <= now)
    const bad = list.filter((a) => (this.failed.get(a) ?? 0) > now)
    if (this.preferred && ok.includes(this.preferred)) return [this.preferred, ...ok.filter((a) => a !== this.preferred), ...bad]
    if (ok.length > 0) {
      this.preferred = ok[Math.min(ok.length - 1, Math.floor(this.random() * ok.length))]
      return [this.preferred!, ...ok.filter((a) => a !== this.preferred), ...bad]
    }
    return bad
  }

  private markFailed(address: string): void {
    this.failed.set(address, performance.now() + Math.max(1000, this.policy.maxDelayMs))
    if (this.preferred === address) this.preferred = undefined
    this.counters.failovers++
  }

  // --- the retry loop

  /**
   * How long one server gets to answer a call with this budget before the
   * same request also goes to another server: attemptTimeoutMs, but at most
   * a quarter of the budget, so a small budget still leaves room for the
   * other servers.
   */
  attemptTimeoutFor(budgetMs: number): number {
    return Math.max(1, Math.min(this.policy.attemptTimeoutMs, Math.floor(budgetMs / 4)))
  }

  /**
   * Fills ReqBase (one request uuid for every attempt) and runs the call with
   * failover and retries. An attempt that has not been answered after
   * attemptTimeoutFor(budget) is not abandoned: the same request (same uuid)
   * also goes to the next server, and the first answer wins. A hung server
   * (SIGSTOP, a stuck host: its connections stay open, nothing answers) thus
   * costs one attempt timeout, not the budget, and a server that is merely
   * slow still answers. Both may execute it; the idempotency records (and
   * the natural idempotency of reads, open, sync and close) make that one
   * application. The losing attempts are cancelled once an answer is in.
   */
  async call<Rsp>(method: number, body: object, opts: MetaCallOptions = {}): Promise<Rsp> {
    if (this.closed) throw new StrataError('CLOSED', 'meta client closed')
    const req: ReqBase & Record<string, unknown> = {
      ...(body as Record<string, unknown>),
      user: opts.user ?? this.user,
      client: { uuid: this.clientId, hostname: this.hostname },
      uuid: opts.uuid ?? randomUUID(),
    }
    this.counters.calls++
    const budgetMs = opts.totalMs ?? this.policy.totalMs
    const deadline = performance.now() + budgetMs
    const hedgeMs = this.attemptTimeoutFor(budgetMs)
    // aborts the attempts still in flight when the call is over (and follows the caller's signal)
    const ctl = new AbortController()
    const onAbort = () => ctl.abort(opts.signal!.reason)
    if (opts.signal) {
      if (opts.signal.aborted) throw new StrataError('CANCELLED', 'meta call cancelled', { cause: opts.signal.reason })
      opts.signal.addEventListener('abort', onAbort, { once: true })
    }
    const inflight = new Map<string, Promise<Attempt<Rsp>>>()
    let attempts = 0
    let failed = 0
    let serverCount = 0
    let serverList: readonly string[] = []
    // servers whose last attempt in this call was refused outright (nothing listens there)
    const refusedBy = new Set<string>()
    let lastErr: StrataError | undefined
    // a request went out and its answer never came: it may have been applied
    let unanswered = false
    let refresh = false
    let nextStart = 0
    const fail = (err: StrataError): never => {
      this.counters.failures++
      throw err
    }
    try {
      for (;;) {
        if (this.closed) throw new StrataError('CLOSED', 'meta client closed')
        if (opts.signal?.aborted) throw new StrataError('CANCELLED', 'meta call cancelled', { cause: opts.signal.reason })
        let now = performance.now()
        if (now >= nextStart && now < deadline) {
          const servers = await this.servers(refresh)
          refresh = false
          serverCount = servers.length
          serverList = servers
          const address = servers.find((a) => !inflight.has(a))
          now = performance.now()
          if (address) {
            if (inflight.size > 0) {
              // hedge: the servers working on it stay in the race, but later calls avoid them for a while
              this.counters.hedges++
              for (const slow of inflight.keys()) this.markFailed(slow)
            }
            attempts++
            const timeoutMs = Math.max(1, Math.round(Math.min(this.policy.rpcTimeoutMs, deadline - now)))
            inflight.set(address, this.attempt<Rsp>(address, method, req, timeoutMs, ctl.signal))
            nextStart = now + hedgeMs
          } else if (inflight.size === 0) {
            lastErr = new StrataError('RPC_CONNECT_FAILED', 'no meta server known (routing info lists no connected META node)')
            refresh = true
            failed++
            nextStart = now + this.backoff(lastErr, failed, serverCount)
          } else {
            // every server known is working on it already: look again later
            nextStart = now + hedgeMs
          }
        }
        if (inflight.size === 0) {
          if (nextStart >= deadline || now >= deadline) break
          if (attempts > 0 || failed > 0) this.counters.retries++
          await this.sleep(nextStart - now, opts.signal)
          continue
        }
        // wait for an answer, or until the next attempt is due (none after the deadline:
        // the attempts in flight end by then on their own timeouts)
        const wakeAt = nextStart < deadline && now < deadline ? nextStart : Infinity
        const outcome = await firstOf([...inflight.values()], wakeAt - performance.now())
        if (!outcome) continue
        inflight.delete(outcome.address)
        if (outcome.ok) {
          this.failed.delete(outcome.address)
          this.preferred = outcome.address
          return outcome.rsp
        }
        const err = outcome.err
        if (err.code === 'CANCELLED' || err.code === 'CLOSED') throw err
        if (SENT_UNANSWERED.has(err.code)) unanswered = true
        if (TRANSPORT.has(err.code)) {
          this.markFailed(outcome.address)
          refresh = !this.explicit
        }
        lastErr = err
        const retryable = TRANSPORT.has(err.code) || (isErrorCode(err.code) && ERRORS[err.code].retryable)
        if (!retryable) fail(err)
        failed++
        if (refusedAlongChain(err)) refusedBy.add(outcome.address)
        else refusedBy.delete(outcome.address)
        // with mgmtd gone, another meta server may still answer: give up only once every one
        // refused this call (one that timed out or dropped the connection is there, if busy)
        const everyOneRefused = serverList.length > 0 && serverList.every((a) => refusedBy.has(a))
        const gone = everyOneRefused && inflight.size === 0 ? clusterGone(err, this.mgmtd, this.policy.orphanTimeoutMs, `meta ${methodNameOf(method)}`) : null
        if (gone) fail(gone)
        nextStart = Math.min(nextStart, performance.now() + this.backoff(err, failed, serverCount))
      }
      const err = lastErr ?? new StrataError('TIMEOUT', `no meta server answered within ${budgetMs} ms`)
      const applied = unanswered && !READ_ONLY.has(method) ? '; a server received the request and did not answer, so it may have been applied' : ''
      return fail(
        new StrataError(err.code, `${err.reason} (meta ${methodNameOf(method)}: gave up after ${attempts} attempt${attempts === 1 ? '' : 's'} in ${formatMs(budgetMs)}${applied})`, {
          cause: err,
          ...(err.detail ? { detail: err.detail } : {}),
        }),
      )
    } catch (e) {
      if (!READ_ONLY.has(method) && (unanswered || inflight.size > 0) && typeof e === 'object' && e !== null) UNSETTLED.add(e)
      throw e
    } finally {
      opts.signal?.removeEventListener('abort', onAbort)
      // answered (or given up): the attempts still in flight are of no use any more
      if (inflight.size > 0) ctl.abort(new StrataError('CANCELLED', 'answered by another meta server'))
    }
  }

  /** One RPC to one server; never rejects. */
  private attempt<Rsp>(address: string, method: number, req: object, timeoutMs: number, signal: AbortSignal): Promise<Attempt<Rsp>> {
    return this.rpc.call<Rsp>(address, ServiceId.Meta, method, req, { timeoutMs, signal }).then(
      (rsp) => ({ address, ok: true as const, rsp }),
      (e) => ({ address, ok: false as const, err: toStrataError(e) }),
    )
  }

  /** Delay before the next attempt after the `failed`-th failure. */
  private backoff(err: StrataError, failed: number, serverCount: number): number {
    const fast = FAST.has(err.code) || (TRANSPORT.has(err.code) && serverCount > 1 && failed <= serverCount)
    const base = fast ? this.policy.fastDelayMs : Math.min(this.policy.maxDelayMs, this.policy.initialDelayMs * 2 ** Math.min(failed - 1, 20))
    return base * (0.5 + this.random() * 0.5)
  }

  private sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t)
        this.closeCtl.signal.removeEventListener('abort', done)
        signal?.removeEventListener('abort', done)
        resolve()
      }
      const t = setTimeout(done, ms)
      this.closeCtl.signal.addEventListener('abort', done, { once: true })
      signal?.addEventListener('abort', done, { once: true })
    })
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.closeCtl.abort()
    if (this.sessionTimer) clearTimeout(this.sessionTimer)
    if (this.ownsRpc) this.rpc.close()
  }

  get isClosed(): boolean {
    return this.closed
  }

  // --- typed calls (one per MetaMethod)

  statFs(o?: MetaCallOptions): Promise<StatFsRsp> {
    return this.call(MetaMethod.statFs, {}, o)
  }
  stat(b: Body<StatReq>, o?: MetaCallOptions): Promise<StatRsp> {
    return this.call(MetaMethod.stat, b, o)
  }
  create(b: Body<CreateReq>, o?: MetaCallOptions): Promise<CreateRsp> {
    return this.call(MetaMethod.create, b, o)
  }
  mkdirs(b: Body<MkdirsReq>, o?: MetaCallOptions): Promise<MkdirsRsp> {
    return this.call(MetaMethod.mkdirs, b, o)
  }
  symlink(b: Body<SymlinkReq>, o?: MetaCallOptions): Promise<SymlinkRsp> {
    return this.call(MetaMethod.symlink, b, o)
  }
  hardLink(b: Body<HardLinkReq>, o?: MetaCallOptions): Promise<HardLinkRsp> {
    return this.call(MetaMethod.hardLink, b, o)
  }
  remove(b: Body<RemoveReq>, o?: MetaCallOptions): Promise<RemoveRsp> {
    return this.call(MetaMethod.remove, b, o)
  }
  open(b: Body<OpenReq>, o?: MetaCallOptions): Promise<OpenRsp> {
    return this.call(MetaMethod.open, b, o)
  }
  sync(b: Body<SyncReq>, o?: MetaCallOptions): Promise<SyncRsp> {
    return this.call(MetaMethod.sync, b, o)
  }
  /** meta `close` (named closeFile because close() shuts the client down) */
  closeFile(b: Body<CloseReq>, o?: MetaCallOptions): Promise<CloseRsp> {
    return this.call(MetaMethod.close, b, o)
  }
  rename(b: Body<RenameReq>, o?: MetaCallOptions): Promise<RenameRsp> {
    return this.call(MetaMethod.rename, b, o)
  }
  list(b: Body<ListReq>, o?: MetaCallOptions): Promise<ListRsp> {
    return this.call(MetaMethod.list, b, o)
  }
  /** deprecated in 3FS (clients truncate themselves, see FileSystem.truncate); kept for completeness */
  truncate(b: Body<TruncateReq>, o?: MetaCallOptions): Promise<TruncateRsp> {
    return this.call(MetaMethod.truncate, b, o)
  }
  getRealPath(b: Body<GetRealPathReq>, o?: MetaCallOptions): Promise<GetRealPathRsp> {
    return this.call(MetaMethod.getRealPath, b, o)
  }
  setAttr(b: Body<SetAttrReq>, o?: MetaCallOptions): Promise<SetAttrRsp> {
    return this.call(MetaMethod.setAttr, b, o)
  }
  /** withdraws request `b.request` of this client, which it gave up on (see mayHaveBeenApplied) */
  abandon(b: Body<AbandonReq>, o?: MetaCallOptions): Promise<AbandonRsp> {
    return this.call(MetaMethod.abandon, b, o)
  }
  pruneSession(b: Body<PruneSessionReq>, o?: MetaCallOptions): Promise<PruneSessionRsp> {
    return this.call(MetaMethod.pruneSession, b, o)
  }
  dropUserCache(b: Body<DropUserCacheReq> = {}, o?: MetaCallOptions): Promise<unknown> {
    return this.call(MetaMethod.dropUserCache, b, o)
  }
  authenticate(o?: MetaCallOptions): Promise<AuthenticateRsp> {
    return this.call(MetaMethod.authenticate, {}, o)
  }
  lockDirectory(b: Body<LockDirectoryReq>, o?: MetaCallOptions): Promise<LockDirectoryRsp> {
    return this.call(MetaMethod.lockDirectory, b, o)
  }
  batchStat(b: Body<BatchStatReq>, o?: MetaCallOptions): Promise<BatchStatRsp> {
    return this.call(MetaMethod.batchStat, b, o)
  }
  batchStatByPath(b: Body<BatchStatByPathReq>, o?: MetaCallOptions): Promise<BatchStatByPathRsp> {
    return this.call(MetaMethod.batchStatByPath, b, o)
  }
  gcList(b: Body<GcListReq> = {}, o?: MetaCallOptions): Promise<GcListRsp> {
    return this.call(MetaMethod.gcList, b, o)
  }
  listSessions(b: Body<ListSessionsReq> = {}, o?: MetaCallOptions): Promise<ListSessionsRsp> {
    return this.call(MetaMethod.listSessions, b, o)
  }
  dumpInodes(b: Body<DumpInodesReq> = {}, o?: MetaCallOptions): Promise<DumpInodesRsp> {
    return this.call(MetaMethod.dumpInodes, b, o)
  }
}

/** Addresses of META nodes mgmtd reports connected, lowest node id first. */
export function metaServersOf(ri: RoutingInfo): string[] {
  return Object.values(ri.nodes)
    .filter((n: NodeInfo) => n.type === 'META' && n.status === 'HEARTBEAT_CONNECTED' && !!n.address)
    .sort((a, b) => a.nodeId - b.nodeId)
    .map((n) => n.address)
}

function methodNameOf(method: number): string {
  for (const [k, v] of Object.entries(MetaMethod)) if (v === method) return k
  return String(method)
}
