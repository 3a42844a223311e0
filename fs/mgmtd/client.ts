// Client of the cluster manager used by storage nodes, file clients and the
// operator CLI: typed calls, failover across mgmtd addresses, and a routing
// info cache refreshed on a timer and whenever a caller saw a newer version.

import { StrataError, isStrataError } from '../common/errors.js'
import { MgmtdMethod, ServiceId } from '../common/services.js'
import type { RoutingInfo } from '../common/types.js'
import { RpcClient, connectRefused, type CallOptions } from '../rpc/index.js'
import type {
  ClientSession,
  ExtendClientSessionReq,
  GetClusterInfoRsp,
  GetConfigRsp,
  GetRoutingInfoRsp,
  HeartbeatReq,
  HeartbeatRsp,
  NodeIdReq,
  RegisterNodeReq,
  RotateLastSrvReq,
  SetChainTableReq,
  SetChainsReq,
  SetConfigReq,
  SetNodeTagsReq,
  UpdateChainReq,
} from './protocol.js'
import type { ChainInfo, NodeType } from '../common/types.js'

export interface MgmtdClientOptions {
  addresses: string[]
  rpc?: RpcClient
  timeoutMs?: number
}

export class MgmtdClient {
  readonly rpc: RpcClient
  private readonly ownsRpc: boolean
  private readonly addresses: string[]
  private current = 0
  private cached: RoutingInfo | null = null
  private refreshing: Promise<RoutingInfo> | null = null
  private readonly listeners = new Set<(ri: RoutingInfo) => void>()
  private timer: NodeJS.Timeout | null = null
  private closed = false
  private readonly timeoutMs: number
  /** monotonic ms of the first call of the current run in which every address refused the connection; null once one answers */
  private refusedSince: number | null = null

  constructor(opts: MgmtdClientOptions) {
    if (opts.addresses.length === 0) throw new StrataError('INVALID_ARGUMENT', 'no mgmtd address given')
    this.addresses = [...opts.addresses]
    this.rpc = opts.rpc ?? new RpcClient()
    this.ownsRpc = !opts.rpc
    this.timeoutMs = opts.timeoutMs ?? 5000
  }

  /** Calls the primary mgmtd, trying the others when it is unreachable or not primary. */
  async call<T>(method: number, payload: unknown, options: CallOptions = {}): Promise<T> {
    let lastErr: unknown
    let refused = 0
    for (let i = 0; i < this.addresses.length; i++) {
      const idx = (this.current + i) % this.addresses.length
      try {
        const r = await this.rpc.call<T>(this.addresses[idx]!, ServiceId.Mgmtd, method, payload, { timeoutMs: this.timeoutMs, ...options })
        this.current = idx
        this.refusedSince = null
        return r
      } catch (e) {
        lastErr = e
        // only a refusal says nothing listens; a connect that timed out is a busy mgmtd
        if (connectRefused(e)) refused++
        if (!isStrataError(e, ['RPC_CONNECT_FAILED', 'RPC_CONNECTION_CLOSED', 'MGMTD_NOT_PRIMARY', 'TIMEOUT'])) {
          // it answered, if only with an error: it is there
          this.refusedSince = null
          throw e
        }
      }
    }
    if (refused === this.addresses.length) this.refusedSince ??= performance.now()
    throw lastErr
  }

  /**
   * How long (ms) every mgmtd address has been refusing connections: 0 while
   * the last call got an answer. Only connection failures count (a busy
   * mgmtd that times out is still there). Clients take a long run of these
   * as "the cluster is stopped", since no failover completes without mgmtd.
   */
  unreachableForMs(): number {
    return this.refusedSince === null ? 0 : performance.now() - this.refusedSince
  }

  // --- routing info cache

  /** Cached routing info; fetches it the first time. */
  async routing(): Promise<RoutingInfo> {
    return this.cached ?? this.refresh()
  }

  get cachedRouting(): RoutingInfo | null {
    return this.cached
  }

  /**
   * Fetches routing info if mgmtd has a newer version than the cache (or if
   * `minVersion` says the caller already saw a newer one). Concurrent callers
   * share one request.
   */
  refresh(minVersion?: number): Promise<RoutingInfo> {
    if (this.cached && minVersion !== undefined && this.cached.routingInfoVersion >= minVersion) return Promise.resolve(this.cached)
    if (!this.refreshing) {
      this.refreshing = (async () => {
        try {
          const known = this.cached?.routingInfoVersion
          const rsp = await this.call<GetRoutingInfoRsp>(MgmtdMethod.getRoutingInfo, known === undefined ? {} : { knownVersion: known })
          if (rsp.info && (!this.cached || rsp.info.routingInfoVersion >= this.cached.routingInfoVersion)) {
            const changed = !this.cached || rsp.info.routingInfoVersion !== this.cached.routingInfoVersion
            this.cached = rsp.info
            if (changed) for (const l of this.listeners) l(rsp.info)
          }
          if (!this.cached) throw new StrataError('INTERNAL', 'mgmtd returned no routing info')
          return this.cached
        } finally {
          this.refreshing = null
        }
      })()
    }
    return this.refreshing
  }

  /** Polls routing info every intervalMs and calls onChange on every new version. */
  watch(intervalMs: number, onChange?: (ri: RoutingInfo) => void): () => void {
    if (onChange) this.listeners.add(onChange)
    if (!this.timer && !this.closed) {
      const tick = () => {
        this.refresh()
          .catch(() => {})
          .finally(() => {
            if (!this.closed) this.timer = setTimeout(tick, intervalMs)
          })
      }
      this.timer = setTimeout(tick, 0)
    }
    return () => {
      if (onChange) this.listeners.delete(onChange)
    }
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    if (this.timer) clearTimeout(this.timer)
    this.listeners.clear()
    if (this.ownsRpc) this.rpc.close()
  }

  // --- typed calls

  heartbeat(req: HeartbeatReq): Promise<HeartbeatRsp> {
    return this.call(MgmtdMethod.heartbeat, req)
  }
  registerNode(req: RegisterNodeReq): Promise<unknown> {
    return this.call(MgmtdMethod.registerNode, req)
  }
  unregisterNode(req: NodeIdReq): Promise<unknown> {
    return this.call(MgmtdMethod.unregisterNode, req)
  }
  enableNode(req: NodeIdReq): Promise<unknown> {
    return this.call(MgmtdMethod.enableNode, req)
  }
  disableNode(req: NodeIdReq): Promise<unknown> {
    return this.call(MgmtdMethod.disableNode, req)
  }
  setNodeTags(req: SetNodeTagsReq): Promise<unknown> {
    return this.call(MgmtdMethod.setNodeTags, req)
  }
  setChains(req: SetChainsReq): Promise<{ routingInfoVersion: number }> {
    return this.call(MgmtdMethod.setChains, req)
  }
  setChainTable(req: SetChainTableReq): Promise<{ chainTableVersion: number }> {
    return this.call(MgmtdMethod.setChainTable, req)
  }
  /** `chain`: the chain as the update committed it (3FS UpdateChainRsp), before the chain updater moves its states on */
  updateChain(req: UpdateChainReq): Promise<{ chainVersion: number; chain?: ChainInfo }> {
    return this.call(MgmtdMethod.updateChain, req)
  }
  rotateLastSrv(req: RotateLastSrvReq): Promise<{ chainVersion: number; chain?: ChainInfo }> {
    return this.call(MgmtdMethod.rotateLastSrv, req)
  }
  setConfig(req: SetConfigReq): Promise<{ configVersion: number }> {
    return this.call(MgmtdMethod.setConfig, req)
  }
  getConfig(nodeType: NodeType): Promise<GetConfigRsp> {
    return this.call(MgmtdMethod.getConfig, { nodeType })
  }
  initCluster(req: { chainTableId: number; chunkSize: number; stripeSize: number; allowExisted?: boolean }): Promise<unknown> {
    return this.call(MgmtdMethod.initCluster, req)
  }
  clusterInfo(): Promise<GetClusterInfoRsp> {
    return this.call(MgmtdMethod.getClusterInfo, {})
  }
  extendClientSession(req: ExtendClientSessionReq): Promise<unknown> {
    return this.call(MgmtdMethod.extendClientSession, req)
  }
  listClientSessions(): Promise<{ sessions: ClientSession[] }> {
    return this.call(MgmtdMethod.listClientSessions, {})
  }
}
