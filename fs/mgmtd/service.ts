// The cluster manager: membership through heartbeats, routing info with a
// monotonically increasing version, chain tables, and the chain updater that
// applies 3FS's target state machine (chain-state.ts) to every chain whose
// targets changed. State is persisted in lmdb before it is published.

import os from 'node:os'
import { StrataError } from '../common/errors.js'
import { checkChunkSize } from '../common/layout.js'
import { MgmtdMethod, ServiceId } from '../common/services.js'
import type { Logger } from '../common/log.js'
import { every } from '../common/daemon.js'
import { RELEASE_VERSION, type Timers } from '../common/config.js'
import {
  NODE_TYPES,
  type ChainInfo,
  type ChainTable,
  type LocalTargetState,
  type NodeInfo,
  type NodeType,
  type RoutingInfo,
  type TargetInfo,
} from '../common/types.js'
import type { RpcServer } from '../rpc/index.js'
import { chainChanged, generateNewChain, rotateLastSrv } from './chain-state.js'
import { MgmtdStore, type Mutation, type StoredConfig, type StoredTarget } from './store.js'
import { MAX_OFFLINE_REASON } from './protocol.js'
import type {
  ClientSession,
  ClusterInit,
  ExtendClientSessionReq,
  GetClusterInfoRsp,
  GetConfigReq,
  GetConfigRsp,
  GetRoutingInfoReq,
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

export interface MgmtdOptions {
  nodeId: number
  dataDir: string
  timers: Timers
  /** accept heartbeats from nodes nobody registered (3FS allow_heartbeat_from_unregistered) */
  allowHeartbeatFromUnregistered: boolean
  log: Logger
}

interface NodeRuntime {
  info: NodeInfo
  lastHbVersion: number
  /** monotonic ms of the last accepted heartbeat (or of registration/mgmtd start: the failure check counts from there) */
  lastSeen: number
  /** monotonic ms of the last heartbeat actually accepted from the node; null if none since mgmtd started */
  lastHeartbeat: number | null
}

interface TargetRuntime {
  stored: StoredTarget
  localState: LocalTargetState
  usedSize: number
  /** monotonic ms of the last report; drives the per-target failure check */
  lastSeen: number
  /** false until reported once since mgmtd started */
  reported: boolean
  /** the node's reason for holding the target offline, as last reported */
  offlineReason?: string
}

const now = () => performance.now()

export class MgmtdService {
  private readonly store: MgmtdStore
  private version: number
  private init: ClusterInit | null
  private readonly nodes = new Map<number, NodeRuntime>()
  private readonly chainTables = new Map<string, ChainTable>()
  private readonly chains = new Map<number, ChainInfo>()
  private readonly chainCreatedAt = new Map<number, number>()
  private readonly targets = new Map<number, TargetRuntime>()
  private readonly configs = new Map<NodeType, StoredConfig>()
  private readonly sessions = new Map<string, ClientSession>()
  private readonly startedAt = now()
  private readonly startedWall = Date.now()
  /** chains whose target local states changed since the last updater pass */
  private readonly dirtyChains = new Set<number>()
  private bootstrapping = true
  private snapshot: RoutingInfo | null = null
  private loops: Array<{ stop(): void; kick(): void }> = []
  private address = ''
  private closed = false

  constructor(private readonly opts: MgmtdOptions) {
    this.store = MgmtdStore.open(`${opts.dataDir}/mgmtd.lmdb`)
    const s = this.store.load()
    this.version = s.routingInfoVersion
    this.init = s.init
    const t0 = now()
    for (const n of s.nodes) {
      // Until it heartbeats again a node is CONNECTING; the failure check
      // counts from mgmtd's start, so a restart does not fail healthy nodes.
      const info: NodeInfo = n.status === 'DISABLED' ? n : { ...n, status: n.nodeId === opts.nodeId ? 'PRIMARY_MGMTD' : 'HEARTBEAT_CONNECTING' }
      this.nodes.set(n.nodeId, { info, lastHbVersion: 0, lastSeen: t0, lastHeartbeat: null })
    }
    for (const t of s.chainTables) this.chainTables.set(`${t.chainTableId}:${t.chainTableVersion}`, t)
    for (const c of s.chains) this.chains.set(c.chainId, c)
    for (const [k, v] of Object.entries(s.chainCreatedAt)) this.chainCreatedAt.set(Number(k), v)
    for (const t of s.targets) {
      const pub = this.publicStateOf(t.targetId)
      // Assume the state the chain implies until the node reports; nothing is
      // demoted before heartbeatFailInterval has passed without a report.
      const assumed: LocalTargetState = pub === 'SERVING' ? 'UPTODATE' : pub === 'SYNCING' ? 'ONLINE' : 'OFFLINE'
      this.targets.set(t.targetId, { stored: t, localState: assumed, usedSize: 0, lastSeen: t0, reported: false })
    }
    for (const c of s.configs) this.configs.set(c.nodeType, c)
    for (const cs of s.sessions) this.sessions.set(cs.clientId, { ...cs, lastExtend: Date.now() })
  }

  get log(): Logger {
    return this.opts.log
  }

  /** Registers the mgmtd service on the server and starts background loops. */
  start(server: RpcServer): void {
    this.address = server.address
    const self: NodeInfo = {
      nodeId: this.opts.nodeId,
      type: 'MGMTD',
      status: 'PRIMARY_MGMTD',
      hostname: os.hostname(),
      pid: process.pid,
      address: this.address,
      tags: [],
      // mgmtd does not heartbeat to itself: as in 3FS (its own entry carries no heartbeat time), list-nodes shows N/A
      lastHeartbeatTime: 0,
      configVersion: this.configs.get('MGMTD')?.configVersion ?? 0,
      releaseVersion: RELEASE_VERSION,
    }
    this.nodes.set(self.nodeId, { info: self, lastHbVersion: 0, lastSeen: now(), lastHeartbeat: now() })
    this.commit([{ kind: 'node', value: self }], true)

    const M = MgmtdMethod
    server.addService(ServiceId.Mgmtd, {
      [M.getPrimaryMgmtd]: () => ({ nodeId: this.opts.nodeId, address: this.address }),
      [M.heartbeat]: (p: HeartbeatReq) => this.heartbeat(p),
      [M.registerNode]: (p: RegisterNodeReq) => this.registerNode(p),
      [M.unregisterNode]: (p: NodeIdReq) => this.unregisterNode(p),
      [M.enableNode]: (p: NodeIdReq) => this.setNodeDisabled(p, false),
      [M.disableNode]: (p: NodeIdReq) => this.setNodeDisabled(p, true),
      [M.setNodeTags]: (p: SetNodeTagsReq) => this.setNodeTags(p),
      [M.getRoutingInfo]: (p: GetRoutingInfoReq) => this.getRoutingInfo(p),
      [M.setChains]: (p: SetChainsReq) => this.setChains(p),
      [M.setChainTable]: (p: SetChainTableReq) => this.setChainTable(p),
      [M.updateChain]: (p: UpdateChainReq) => this.updateChain(p),
      [M.rotateLastSrv]: (p: RotateLastSrvReq) => this.rotateLastSrv(p),
      [M.setConfig]: (p: SetConfigReq) => this.setConfig(p),
      [M.getConfig]: (p: GetConfigReq) => this.getConfig(p),
      [M.getConfigVersions]: () => ({ versions: Object.fromEntries([...this.configs].map(([k, v]) => [k, v.configVersion])) }),
      [M.extendClientSession]: (p: ExtendClientSessionReq) => this.extendClientSession(p),
      [M.listClientSessions]: () => ({ sessions: [...this.sessions.values()], bootstrapping: this.bootstrapping }),
      [M.getClientSession]: (p: { clientId: string }) => {
        const s = this.sessions.get(p?.clientId)
        if (!s) throw new StrataError('MGMTD_CLIENT_SESSION_NOT_FOUND', `no session for client ${p?.clientId}`)
        return s
      },
      [M.listOrphanTargets]: () => ({ targets: this.orphanTargets() }),
      [M.initCluster]: (p: { chainTableId: number; chunkSize: number; stripeSize: number; allowExisted?: boolean }) => this.initCluster(p),
      [M.getClusterInfo]: (): GetClusterInfoRsp => ({
        init: this.init,
        primary: { nodeId: this.opts.nodeId, address: this.address },
        routingInfoVersion: this.version,
      }),
    })

    const T = this.opts.timers
    this.loops.push(every(Math.max(50, Math.min(T.heartbeatIntervalMs, T.heartbeatFailIntervalMs / 4)), this.log, 'heartbeat checker', () => this.checkHeartbeats()))
    this.loops.push(every(T.chainUpdateIntervalMs, this.log, 'chain updater', () => this.updateChains()))
    this.loops.push(every(Math.max(100, T.clientSessionTimeoutMs / 4), this.log, 'session checker', () => this.checkSessions()))
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    for (const l of this.loops) l.stop()
    await this.store.close()
  }

  // --- publication

  /** Persists mutations, then bumps the routing version if the change is visible in routing info. */
  private commit(mutations: Mutation[], bumpVersion: boolean): void {
    if (bumpVersion) {
      this.version++
      mutations = [...mutations, { kind: 'version', value: this.version }]
      this.snapshot = null
    }
    this.store.apply(mutations, (id) => this.chainCreatedAt.get(id) ?? Date.now())
  }

  private publicStateOf(targetId: number) {
    for (const c of this.chains.values()) {
      const t = c.targets.find((x) => x.targetId === targetId)
      if (t) return t.publicState
    }
    return 'OFFLINE' as const
  }

  routingInfo(): RoutingInfo {
    if (this.snapshot) return this.snapshot
    const nodes: Record<string, NodeInfo> = {}
    for (const [id, n] of this.nodes) nodes[id] = { ...n.info }
    const chainTables: RoutingInfo['chainTables'] = {}
    for (const t of this.chainTables.values()) {
      ;(chainTables[t.chainTableId] ??= {})[t.chainTableVersion] = t
    }
    const chains: RoutingInfo['chains'] = {}
    const targets: RoutingInfo['targets'] = {}
    for (const c of this.chains.values()) {
      chains[c.chainId] = c
      for (const ct of c.targets) {
        const rt = this.targets.get(ct.targetId)
        const ti: TargetInfo = {
          targetId: ct.targetId,
          publicState: ct.publicState,
          localState: rt?.localState ?? 'OFFLINE',
          chainId: c.chainId,
          nodeId: rt?.stored.nodeId ?? 0,
          diskIndex: rt?.stored.diskIndex ?? 0,
          usedSize: rt?.usedSize ?? 0,
          ...(rt?.offlineReason ? { offlineReason: rt.offlineReason } : {}),
        }
        targets[ct.targetId] = ti
      }
    }
    this.snapshot = { routingInfoVersion: this.version, bootstrapping: this.bootstrapping, nodes, chainTables, chains, targets }
    return this.snapshot
  }

  getRoutingInfo(p: GetRoutingInfoReq | null): GetRoutingInfoRsp {
    if (p?.knownVersion !== undefined && p.knownVersion === this.version) return { info: null }
    return { info: this.routingInfo() }
  }

  // --- membership

  heartbeat(p: HeartbeatReq): HeartbeatRsp {
    if (!p || !Number.isInteger(p.nodeId) || p.nodeId <= 0) throw new StrataError('INVALID_ARGUMENT', 'heartbeat needs a positive nodeId')
    if (p.nodeId === this.opts.nodeId) throw new StrataError('INVALID_ARGUMENT', `node id ${p.nodeId} is mgmtd's own`)
    if (!NODE_TYPES.includes(p.type)) throw new StrataError('INVALID_ARGUMENT', `unknown node type ${String(p.type)}`)
    const skew = Math.abs(Date.now() - p.timestamp)
    if (skew > this.opts.timers.maxClockSkewMs) throw new StrataError('MGMTD_CLOCK_SKEW', `clock differs by ${skew} ms`)
    const old = this.nodes.get(p.nodeId)
    if (!old && !this.opts.allowHeartbeatFromUnregistered) throw new StrataError('MGMTD_NODE_NOT_FOUND', `node ${p.nodeId} is not registered`)
    if (old) {
      if (old.info.type !== p.type) throw new StrataError('INVALID_ARGUMENT', `node ${p.nodeId} registered as ${old.info.type}, heartbeat says ${p.type}`)
      if (old.info.status === 'DISABLED') throw new StrataError('MGMTD_NODE_DISABLED', `node ${p.nodeId} is disabled`)
      if (p.hbVersion <= old.lastHbVersion) throw new StrataError('MGMTD_STALE_HEARTBEAT', `last ${old.lastHbVersion}, got ${p.hbVersion}`)
    }
    const seenIds = new Set<number>()
    if (p.targets) {
      const seen = seenIds
      for (const t of p.targets) {
        if (seen.has(t.targetId)) throw new StrataError('INVALID_ARGUMENT', `duplicated target ${t.targetId} in heartbeat`)
        seen.add(t.targetId)
        if (!['UPTODATE', 'ONLINE', 'OFFLINE'].includes(t.localState)) throw new StrataError('INVALID_ARGUMENT', `invalid local state for ${t.targetId}`)
        if (t.offlineReason !== undefined && (typeof t.offlineReason !== 'string' || t.offlineReason.length > MAX_OFFLINE_REASON)) {
          throw new StrataError('INVALID_ARGUMENT', `offlineReason of ${t.targetId} must be a string of at most ${MAX_OFFLINE_REASON} characters`)
        }
      }
    }
    const info: NodeInfo = {
      nodeId: p.nodeId,
      type: p.type,
      status: 'HEARTBEAT_CONNECTED',
      hostname: p.hostname,
      pid: p.pid,
      address: p.address,
      tags: old?.info.tags ?? [],
      lastHeartbeatTime: Date.now(),
      configVersion: p.configVersion,
      releaseVersion: p.releaseVersion,
    }
    const t = now()
    const mutations: Mutation[] = []
    let visible = false
    const persistentChanged =
      !old || old.info.status !== info.status || old.info.address !== info.address || old.info.pid !== info.pid || old.info.hostname !== info.hostname
    if (persistentChanged) {
      mutations.push({ kind: 'node', value: info })
      visible = true
    }
    this.nodes.set(p.nodeId, { info, lastHbVersion: p.hbVersion, lastSeen: t, lastHeartbeat: t })
    if (!persistentChanged) this.snapshot = null // lastHeartbeatTime moved; same version

    for (const ht of p.targets ?? []) {
      let rt = this.targets.get(ht.targetId)
      const stored: StoredTarget = { targetId: ht.targetId, chainId: ht.chainId, nodeId: p.nodeId, diskIndex: ht.diskIndex }
      if (!rt) {
        rt = { stored, localState: ht.localState, usedSize: ht.usedSize, lastSeen: t, reported: true, ...(ht.offlineReason ? { offlineReason: ht.offlineReason } : {}) }
        this.targets.set(ht.targetId, rt)
        mutations.push({ kind: 'target', value: stored })
        visible = true
        if (this.chains.has(ht.chainId)) this.dirtyChains.add(ht.chainId)
        continue
      }
      if (rt.stored.nodeId !== p.nodeId || rt.stored.diskIndex !== ht.diskIndex || rt.stored.chainId !== ht.chainId) {
        rt.stored = stored
        mutations.push({ kind: 'target', value: stored })
        visible = true
      }
      if (rt.localState !== ht.localState || !rt.reported) {
        if (rt.localState !== ht.localState) visible = true
        rt.localState = ht.localState
        this.dirtyChains.add(rt.stored.chainId)
      }
      if ((rt.offlineReason ?? '') !== (ht.offlineReason ?? '')) {
        visible = true
        if (ht.offlineReason) rt.offlineReason = ht.offlineReason
        else delete rt.offlineReason
      }
      rt.usedSize = ht.usedSize
      rt.lastSeen = t
      rt.reported = true
    }
    if (p.targets && p.type === 'STORAGE') {
      // A storage node reports all of its targets in every heartbeat, so one
      // it used to report and no longer does was removed (remove-target, or
      // its disk is gone). Out of a chain it is forgotten at once, so it
      // neither stays listed as an orphan nor can be added to a chain; in a
      // chain it is OFFLINE at once (the chain keeps its id until
      // update-chain remove).
      for (const [tid, rt] of this.targets) {
        if (rt.stored.nodeId !== p.nodeId || seenIds.has(tid)) continue
        if (!this.inAnyChain(tid)) {
          this.targets.delete(tid)
          mutations.push({ kind: 'delTarget', targetId: tid })
          visible = true
          this.log.info('target no longer reported by its node: forgotten', { targetId: tid, nodeId: p.nodeId })
        } else if (rt.localState !== 'OFFLINE' || !rt.reported || rt.offlineReason) {
          rt.localState = 'OFFLINE'
          rt.usedSize = 0
          rt.reported = true
          delete rt.offlineReason
          this.dirtyChains.add(rt.stored.chainId)
          visible = true
        }
      }
    }
    if (mutations.length || visible) this.commit(mutations, visible)
    this.maybeEndBootstrap()
    if (this.dirtyChains.size) this.kickUpdater()
    return { routingInfoVersion: this.version, configVersion: this.configs.get(p.type)?.configVersion ?? 0 }
  }

  private kickUpdater(): void {
    this.loops[1]?.kick()
  }

  /** Bootstrapping ends once every known storage node reported, or after the fail interval. */
  private maybeEndBootstrap(): void {
    if (!this.bootstrapping) return
    const waited = now() - this.startedAt
    const allReported = [...this.targets.values()].every((t) => t.reported || !this.chains.has(t.stored.chainId))
    if (allReported || waited >= this.opts.timers.heartbeatFailIntervalMs) {
      this.bootstrapping = false
      this.snapshot = null
      this.log.info('bootstrap finished', { waitedMs: Math.round(waited), allReported })
    }
  }

  private checkHeartbeats(): void {
    this.maybeEndBootstrap()
    const t = now()
    const fail = this.opts.timers.heartbeatFailIntervalMs
    const mutations: Mutation[] = []
    for (const n of this.nodes.values()) {
      if (n.info.status === 'DISABLED' || n.info.status === 'HEARTBEAT_FAILED' || n.info.status === 'PRIMARY_MGMTD') continue
      if (n.lastSeen + fail < t) {
        n.info = { ...n.info, status: 'HEARTBEAT_FAILED' }
        mutations.push({ kind: 'node', value: n.info })
        this.log.warn('node heartbeat failed', { nodeId: n.info.nodeId, type: n.info.type })
      }
    }
    let targetsChanged = false
    for (const rt of this.targets.values()) {
      if (rt.localState !== 'OFFLINE' && rt.lastSeen + fail < t) {
        rt.localState = 'OFFLINE'
        rt.reported = true
        this.dirtyChains.add(rt.stored.chainId)
        targetsChanged = true
      }
    }
    if (mutations.length || targetsChanged) {
      this.commit(mutations, true)
      this.kickUpdater()
    }
  }

  private updateChains(): void {
    if (this.bootstrapping || this.dirtyChains.size === 0) return
    const mutations: Mutation[] = []
    const wall = Date.now()
    for (const chainId of [...this.dirtyChains]) {
      const chain = this.chains.get(chainId)
      this.dirtyChains.delete(chainId)
      if (!chain) continue
      const created = this.chainCreatedAt.get(chainId) ?? 0
      const unreported = chain.targets.some((ct) => !this.targets.get(ct.targetId)?.reported)
      // A new chain whose targets have not all reported yet is left alone for
      // a while, so it is not demoted before its storage nodes come up.
      if (unreported && wall - created < this.opts.timers.newChainBootstrapMs) {
        this.dirtyChains.add(chainId) // look again later
        continue
      }
      const input = chain.targets.map((ct) => ({
        targetId: ct.targetId,
        publicState: ct.publicState,
        localState: this.targets.get(ct.targetId)?.localState ?? ('OFFLINE' as LocalTargetState),
      }))
      const out = generateNewChain(input)
      const changed = out.length !== chain.targets.length || out.some((t, i) => t.targetId !== chain.targets[i]!.targetId || t.publicState !== chain.targets[i]!.publicState)
      if (!changed) continue
      const next: ChainInfo = {
        ...chain,
        chainVersion: chain.chainVersion + 1,
        targets: out.map((t) => ({ targetId: t.targetId, publicState: t.publicState })),
      }
      this.chains.set(chainId, next)
      mutations.push({ kind: 'chain', value: next })
      this.log.info('chain updated', {
        chainId,
        chainVersion: next.chainVersion,
        targets: next.targets.map((t) => `${t.targetId}(${t.publicState}-${this.targets.get(t.targetId)?.localState ?? 'OFFLINE'})`).join(','),
      })
    }
    if (mutations.length) this.commit(mutations, true)
  }

  private checkSessions(): void {
    const cutoff = Date.now() - this.opts.timers.clientSessionTimeoutMs
    const mutations: Mutation[] = []
    for (const [id, s] of this.sessions) {
      if (s.lastExtend < cutoff) {
        this.sessions.delete(id)
        mutations.push({ kind: 'delSession', clientId: id })
      }
    }
    if (mutations.length) this.commit(mutations, false)
  }

  // --- admin operations

  registerNode(p: RegisterNodeReq): { nodeId: number } {
    if (!p || !Number.isInteger(p.nodeId) || p.nodeId <= 0) throw new StrataError('INVALID_ARGUMENT', 'registerNode needs a positive nodeId')
    if (!NODE_TYPES.includes(p.type)) throw new StrataError('INVALID_ARGUMENT', `unknown node type ${String(p.type)}`)
    const existing = this.nodes.get(p.nodeId)
    if (existing) {
      // 3FS RegisterNodeOperation answers a duplicated id with MgmtdCode::kRegisterFail
      const e = existing.info
      throw new StrataError(
        'MGMTD_REGISTER_FAIL',
        `node id ${p.nodeId} is already registered (type ${e.type}, status ${e.status}${e.hostname ? `, host ${e.hostname}` : ''}); pick another id, or unregister-node ${p.nodeId} first once it is HEARTBEAT_FAILED`,
      )
    }
    const info: NodeInfo = {
      nodeId: p.nodeId,
      type: p.type,
      status: 'HEARTBEAT_CONNECTING',
      hostname: '',
      pid: 0,
      address: '',
      tags: [],
      lastHeartbeatTime: 0,
      configVersion: 0,
      releaseVersion: '',
    }
    this.nodes.set(p.nodeId, { info, lastHbVersion: 0, lastSeen: now(), lastHeartbeat: null })
    this.commit([{ kind: 'node', value: info }], true)
    return { nodeId: p.nodeId }
  }

  unregisterNode(p: NodeIdReq): { ok: true } {
    const n = this.nodes.get(p?.nodeId)
    if (!n) throw new StrataError('MGMTD_NODE_NOT_FOUND', `node ${p?.nodeId} is not registered`)
    // A live node is never forgotten: mgmtd itself (it is answering this
    // request), and any node that is CONNECTED or heartbeated within the
    // failure interval (e.g. one disabled a moment ago).
    if (p.nodeId === this.opts.nodeId || n.info.status === 'PRIMARY_MGMTD') {
      throw new StrataError('MGMTD_REFUSED', `node ${p.nodeId} is the primary mgmtd (the node answering this request); it cannot be unregistered`)
    }
    const alive = n.info.status === 'HEARTBEAT_CONNECTED' || (n.lastHeartbeat !== null && now() - n.lastHeartbeat < this.opts.timers.heartbeatFailIntervalMs)
    if (alive) throw new StrataError('MGMTD_REFUSED', `node ${p.nodeId} is still heartbeating; stop it and wait until list-nodes shows HEARTBEAT_FAILED`)
    // 3FS: a storage node whose targets chains still list stays (its targets would lose their node)
    for (const c of this.chains.values()) {
      for (const ct of c.targets) {
        if (this.targets.get(ct.targetId)?.stored.nodeId === p.nodeId) {
          throw new StrataError(
            'MGMTD_REFUSED',
            `node ${p.nodeId} holds target ${ct.targetId} of chain ${c.chainId}; take its targets out of their chains first (update-chain ${c.chainId} ${ct.targetId} -m remove)`,
          )
        }
      }
    }
    this.nodes.delete(p.nodeId)
    this.commit([{ kind: 'delNode', nodeId: p.nodeId }], true)
    return { ok: true }
  }

  setNodeDisabled(p: NodeIdReq, disabled: boolean): { ok: true } {
    const n = this.nodes.get(p?.nodeId)
    if (!n) throw new StrataError('MGMTD_NODE_NOT_FOUND', `node ${p?.nodeId} is not registered`)
    n.info = { ...n.info, status: disabled ? 'DISABLED' : 'HEARTBEAT_CONNECTING' }
    n.lastSeen = now()
    this.commit([{ kind: 'node', value: n.info }], true)
    return { ok: true }
  }

  setNodeTags(p: SetNodeTagsReq): { ok: true } {
    const n = this.nodes.get(p?.nodeId)
    if (!n) throw new StrataError('MGMTD_NODE_NOT_FOUND', `node ${p?.nodeId} is not registered`)
    if (!Array.isArray(p.tags) || p.tags.some((t) => typeof t !== 'string')) throw new StrataError('INVALID_ARGUMENT', 'tags must be strings')
    n.info = { ...n.info, tags: [...p.tags] }
    this.commit([{ kind: 'node', value: n.info }], true)
    return { ok: true }
  }

  initCluster(p: { chainTableId: number; chunkSize: number; stripeSize: number; allowExisted?: boolean }): ClusterInit {
    if (!p || !Number.isInteger(p.chainTableId) || p.chainTableId <= 0) throw new StrataError('INVALID_ARGUMENT', 'chainTableId must be a positive integer')
    // the root layout is every new file's default: the rule of a new layout (the bit test this was took 2^32 for a power of two)
    checkChunkSize(p.chunkSize, 'chunkSize')
    if (!Number.isInteger(p.stripeSize) || p.stripeSize <= 0) throw new StrataError('INVALID_ARGUMENT', 'stripeSize must be a positive integer')
    if (this.init && !p.allowExisted) throw new StrataError('MGMTD_ALREADY_INITIALIZED', 'cluster already initialized')
    // The first init normally comes before any chain table exists (3FS
    // deploy order), and a deploy script run again repeats it as it was; a
    // re-init that moves the root layout to another table must name one that
    // exists (a typo would otherwise be stored), and no layout may stripe over
    // more chains than its table has.
    let table: ChainTable | undefined
    for (const t of this.chainTables.values()) if (t.chainTableId === p.chainTableId && (!table || t.chainTableVersion > table.chainTableVersion)) table = t
    if (!table && this.init && this.init.chainTableId !== p.chainTableId) {
      throw new StrataError('MGMTD_CHAIN_TABLE_NOT_FOUND', `chain table ${p.chainTableId} does not exist (upload it first: upload-chain-table)`)
    }
    if (table && p.stripeSize > table.chains.length) {
      throw new StrataError('INVALID_ARGUMENT', `stripe size ${p.stripeSize} exceeds the ${table.chains.length} chains of table ${p.chainTableId}`)
    }
    this.init = { chainTableId: p.chainTableId, chunkSize: p.chunkSize, stripeSize: p.stripeSize, initializedAt: Date.now() }
    this.commit([{ kind: 'init', value: this.init }], false)
    return this.init
  }

  setChains(p: SetChainsReq): { routingInfoVersion: number; created: number[] } {
    if (!p || !Array.isArray(p.chains) || p.chains.length === 0) throw new StrataError('MGMTD_INVALID_CHAIN', 'no chains given')
    const fresh: ChainInfo[] = []
    const newTargets = new Set<number>()
    const inChains = new Set<number>()
    for (const c of this.chains.values()) for (const t of c.targets) inChains.add(t.targetId)
    for (const spec of p.chains) {
      if (!Number.isInteger(spec.chainId) || spec.chainId <= 0) throw new StrataError('MGMTD_INVALID_CHAIN', `invalid chain id ${spec.chainId}`)
      if (!Array.isArray(spec.targets) || spec.targets.length === 0) throw new StrataError('MGMTD_INVALID_CHAIN', `chain ${spec.chainId} has no targets`)
      const old = this.chains.get(spec.chainId)
      if (old) {
        const a = old.targets.map((t) => t.targetId).sort((x, y) => x - y)
        const b = [...spec.targets].sort((x, y) => x - y)
        if (a.length !== b.length || a.some((v, i) => v !== b[i])) {
          throw new StrataError('MGMTD_INVALID_CHAIN', `chain ${spec.chainId} exists with targets [${a}]; got [${b}]`)
        }
        continue
      }
      for (const tid of spec.targets) {
        if (!Number.isInteger(tid) || tid <= 0) throw new StrataError('MGMTD_INVALID_CHAIN', `invalid target id ${tid} in chain ${spec.chainId}`)
        if (inChains.has(tid) || newTargets.has(tid)) throw new StrataError('MGMTD_INVALID_CHAIN', `target ${tid} duplicated (chain ${spec.chainId})`)
        newTargets.add(tid)
      }
      fresh.push({
        chainId: spec.chainId,
        chainVersion: 1,
        targets: spec.targets.map((targetId) => ({ targetId, publicState: 'SERVING' as const })),
        preferredTargetOrder: p.setPreferredTargetOrder ? [...spec.targets] : [],
      })
    }
    if (fresh.length === 0) return { routingInfoVersion: this.version, created: [] }
    const wall = Date.now()
    const mutations: Mutation[] = []
    for (const c of fresh) {
      this.chains.set(c.chainId, c)
      this.chainCreatedAt.set(c.chainId, wall)
      mutations.push({ kind: 'chain', value: c, createdAt: wall })
      for (const ct of c.targets) {
        const rt = this.targets.get(ct.targetId)
        if (rt && rt.stored.chainId !== c.chainId) {
          rt.stored = { ...rt.stored, chainId: c.chainId }
          mutations.push({ kind: 'target', value: rt.stored })
        }
      }
      this.dirtyChains.add(c.chainId)
    }
    this.commit(mutations, true)
    return { routingInfoVersion: this.version, created: fresh.map((c) => c.chainId) }
  }

  setChainTable(p: SetChainTableReq): { chainTableVersion: number } {
    if (!p || !Number.isInteger(p.chainTableId) || p.chainTableId <= 0) throw new StrataError('INVALID_ARGUMENT', 'chainTableId must be a positive integer')
    if (!Array.isArray(p.chains) || p.chains.length === 0) throw new StrataError('MGMTD_INVALID_CHAIN', 'chain table needs chains')
    const seen = new Set<number>()
    for (const c of p.chains) {
      if (!this.chains.has(c)) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${c} does not exist`)
      if (seen.has(c)) throw new StrataError('MGMTD_INVALID_CHAIN', `chain ${c} listed twice`)
      seen.add(c)
    }
    let latest = 0
    let latestTable: ChainTable | undefined
    for (const t of this.chainTables.values()) {
      if (t.chainTableId === p.chainTableId && t.chainTableVersion > latest) {
        latest = t.chainTableVersion
        latestTable = t
      }
    }
    if (latestTable && latestTable.chains.length === p.chains.length && latestTable.chains.every((c, i) => c === p.chains[i])) {
      return { chainTableVersion: latest } // same content: no new version
    }
    const table: ChainTable = { chainTableId: p.chainTableId, chainTableVersion: latest + 1, chains: [...p.chains], desc: p.desc ?? '' }
    this.chainTables.set(`${table.chainTableId}:${table.chainTableVersion}`, table)
    this.commit([{ kind: 'chainTable', value: table }], true)
    return { chainTableVersion: table.chainTableVersion }
  }

  updateChain(p: UpdateChainReq): { chainVersion: number; chain: ChainInfo } {
    const chain = this.chains.get(p?.chainId)
    if (!chain) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${p?.chainId} does not exist`)
    let targets = chain.targets
    if (p.mode === 'add') {
      for (const c of this.chains.values()) {
        if (c.targets.some((t) => t.targetId === p.targetId)) throw new StrataError('MGMTD_TARGET_EXISTED', `target ${p.targetId} is in chain ${c.chainId}`)
      }
      // a target no storage node ever reported would sit in the chain OFFLINE for good
      const known = this.targets.get(p.targetId)
      if (!known) {
        throw new StrataError('MGMTD_TARGET_NOT_FOUND', `target ${p.targetId} is unknown to mgmtd: create it on its storage node first (create-target); once reported it is listed by list-targets --orphan`)
      }
      // known from mgmtd's store only: no storage node has reported it since mgmtd started
      if (!known.reported) {
        throw new StrataError('MGMTD_TARGET_NOT_FOUND', `target ${p.targetId} is not reported by any storage node (node ${known.stored.nodeId} has not reported it since mgmtd started); start the node, or create the target on it (create-target)`)
      }
      targets = [...targets, { targetId: p.targetId, publicState: 'OFFLINE' }]
    } else if (p.mode === 'remove') {
      const t = targets.find((x) => x.targetId === p.targetId)
      if (!t) throw new StrataError('MGMTD_TARGET_NOT_FOUND', `target ${p.targetId} is not in chain ${p.chainId}`)
      if (targets.length === 1) throw new StrataError('MGMTD_REFUSED', 'cannot remove the only target of a chain')
      if (t.publicState === 'SERVING' && targets.filter((x) => x.publicState === 'SERVING').length === 1) {
        throw new StrataError('MGMTD_REFUSED', `target ${p.targetId} is the last serving target of chain ${p.chainId}`)
      }
      targets = targets.filter((x) => x.targetId !== p.targetId)
    } else throw new StrataError('INVALID_ARGUMENT', `mode must be add or remove`)
    const next: ChainInfo = { ...chain, chainVersion: chain.chainVersion + 1, targets }
    this.chains.set(chain.chainId, next)
    const mutations: Mutation[] = [{ kind: 'chain', value: next }]
    if (p.mode === 'add') {
      const rt = this.targets.get(p.targetId)
      if (rt) {
        rt.stored = { ...rt.stored, chainId: chain.chainId }
        mutations.push({ kind: 'target', value: rt.stored })
      }
    }
    this.dirtyChains.add(chain.chainId)
    this.commit(mutations, true)
    this.kickUpdater()
    // as 3FS's UpdateChainRsp: the chain as committed (an added target OFFLINE), not as the updater moves it on
    return { chainVersion: next.chainVersion, chain: structuredClone(next) }
  }

  /** Admin rescue when the LASTSRV target's disk is lost: make the next target LASTSRV. */
  rotateLastSrv(p: RotateLastSrvReq): { chainVersion: number; chain: ChainInfo } {
    const chain = this.chains.get(p?.chainId)
    if (!chain) throw new StrataError('MGMTD_CHAIN_NOT_FOUND', `chain ${p?.chainId} does not exist`)
    // 3FS RotateLastSrvOperation: a chain whose head is not LASTSRV (or that has one target) is left as it is, and that is no error
    const targets = rotateLastSrv(chain.targets)
    if (!chainChanged(chain.targets, targets)) return { chainVersion: chain.chainVersion, chain: structuredClone(chain) }
    const next: ChainInfo = { ...chain, chainVersion: chain.chainVersion + 1, targets }
    this.chains.set(chain.chainId, next)
    this.dirtyChains.add(chain.chainId)
    this.commit([{ kind: 'chain', value: next }], true)
    this.kickUpdater()
    return { chainVersion: next.chainVersion, chain: structuredClone(next) }
  }

  setConfig(p: SetConfigReq): { configVersion: number } {
    if (!p || !NODE_TYPES.includes(p.nodeType)) throw new StrataError('INVALID_ARGUMENT', `unknown node type ${String(p?.nodeType)}`)
    if (typeof p.content !== 'string') throw new StrataError('INVALID_ARGUMENT', 'config content must be a string')
    const old = this.configs.get(p.nodeType)
    const cfg: StoredConfig = { nodeType: p.nodeType, configVersion: (old?.configVersion ?? 0) + 1, content: p.content, desc: p.desc ?? '' }
    this.configs.set(p.nodeType, cfg)
    this.commit([{ kind: 'config', value: cfg }], false)
    return { configVersion: cfg.configVersion }
  }

  getConfig(p: GetConfigReq): GetConfigRsp {
    if (!p || !NODE_TYPES.includes(p.nodeType)) throw new StrataError('INVALID_ARGUMENT', `unknown node type ${String(p?.nodeType)}`)
    const c = this.configs.get(p.nodeType)
    return { nodeType: p.nodeType, configVersion: c?.configVersion ?? 0, content: c?.content ?? '', desc: c?.desc ?? '' }
  }

  extendClientSession(p: ExtendClientSessionReq): { ok: true } {
    if (!p || typeof p.clientId !== 'string' || !p.clientId) throw new StrataError('INVALID_ARGUMENT', 'clientId required')
    const old = this.sessions.get(p.clientId)
    const s: ClientSession = {
      clientId: p.clientId,
      nodeType: p.nodeType,
      hostname: p.hostname,
      pid: p.pid,
      start: old?.start ?? Date.now(),
      lastExtend: Date.now(),
      description: p.description ?? '',
      ...(typeof p.clientStart === 'number' && Number.isFinite(p.clientStart) ? { clientStart: p.clientStart } : {}),
      ...(typeof p.releaseVersion === 'string' ? { releaseVersion: p.releaseVersion } : {}),
      ...(typeof p.configVersion === 'number' && Number.isInteger(p.configVersion) ? { configVersion: p.configVersion } : {}),
    }
    this.sessions.set(p.clientId, s)
    if (!old) this.commit([{ kind: 'session', value: s }], false)
    return { ok: true }
  }

  private inAnyChain(targetId: number): boolean {
    for (const c of this.chains.values()) if (c.targets.some((t) => t.targetId === targetId)) return true
    return false
  }

  private orphanTargets(): TargetInfo[] {
    const inChain = new Set<number>()
    for (const c of this.chains.values()) for (const t of c.targets) inChain.add(t.targetId)
    return [...this.targets.values()]
      .filter((t) => !inChain.has(t.stored.targetId))
      .map((t) => ({
        targetId: t.stored.targetId,
        publicState: 'OFFLINE' as const,
        localState: t.localState,
        chainId: t.stored.chainId,
        nodeId: t.stored.nodeId,
        diskIndex: t.stored.diskIndex,
        usedSize: t.usedSize,
        ...(t.offlineReason ? { offlineReason: t.offlineReason } : {}),
      }))
  }

  /** Test and status helper: how long this mgmtd has been up. */
  uptimeMs(): number {
    return Date.now() - this.startedWall
  }
}
