// The node's sandbox service: everything the HTTP API does, in-process.
//
// A sandbox on this node is three things, undone in reverse order:
//   <root>/sb/<id>/fs   its rootfs (sandbox/rootfs: overlay of the shared layer mounts + dataset binds)
//   <root>/sb/<id>/rt   its container (sandbox/backends: bundle, runtime state, agent socket)
//   registry `sb:<id>`  its record (lmdb under <root>/registry)
// The record is written before anything is built (state 'creating'), so a
// daemon killed mid-create finds the half-built sandbox at restart and undoes
// it. A running sandbox's init (the agent) is watched through /proc; when it
// dies the sandbox is reported stopped with its reason (exited, oom) and its
// rootfs and container are released; the record stays for `inspect` until it
// is deleted or ages out.
//
// Sandboxes outlive the daemon: close() leaves them running and a new daemon
// on the same root re-adopts them (open()). reclaimAll() is what `cluster
// down` uses to stop everything.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { StrataError, isStrataError, toStrataError } from '../../fs/common/errors.js'
import type { Logger } from '../../fs/common/log.js'
import { pidAlive } from '../../fs/fuse/index.js'
import { ContainerBackend, type NetworkMode, type SandboxHandle, type SandboxSpec } from '../backends/index.js'
import { DEFAULT_TAG, composeLayers, parseImageRef, type ImageConfig, type ImageStore, type LayerRef } from '../image/index.js'
import { LayerMounts, Rootfs, RootfsBuilder, unmountTree } from '../rootfs/index.js'
import { checkCapacity, checkQuota, nodeCapacity, type AdmissionLimits } from './admission.js'
import { Registry } from './registry.js'
import type { CreateManyResult, CreateSandboxRequest, ListFilter, NodeInfo, ResourceSpec, SandboxInfo, StopReason, WarmPoolSpec } from './types.js'
import { checkSandboxId, poolEligible, validateCreate, validateWarmPool } from './validate.js'

export interface SandboxServiceOptions {
  /** local directory for the registry, layer mounts and sandboxes (short: unix socket paths live below it) */
  stateDir: string
  /** the node's FUSE mount of the DFS */
  fuseMnt: string
  /** opened image store on the DFS */
  store: ImageStore
  /** lease holder and node name */
  nodeId: string
  log: Logger
  /** OCI runtime binary. Default 'runc'. */
  runtime?: string
  /** cgroup parent of the sandboxes. Default '/strata/<nodeId>'. */
  cgroupParent?: string
  limits?: Partial<AdmissionLimits>
  /** what a create without resources gets */
  defaultResources?: { cpu?: number; memoryMiB?: number; pids?: number }
  /** applied when a create gives no lifetime */
  defaultLifetime?: { idleTtlSec?: number; maxLifetimeSec?: number }
  /** how often the reaper looks at sandboxes. Default 1000 ms. */
  reapIntervalMs?: number
  /** how long stopped sandboxes stay listed. Default 3600 s. */
  retainStoppedSec?: number
  /** creates run at most this many at once (more wait). Default 16. */
  maxConcurrentCreates?: number
  /** keep a layer mounted this long after its last sandbox went. Default 60000 ms. */
  layerLingerMs?: number
  /** sandboxes started ahead of the creates that take them (types.ts WarmPoolSpec) */
  warmPool?: WarmPoolSpec[]
}

export const DEFAULT_LIMITS = (memTotalMiB: number): AdmissionLimits => ({
  reserveMemoryMiB: Math.min(2048, Math.max(256, Math.floor(memTotalMiB * 0.05))),
  reserveDiskMiB: 1024,
  reservePids: 4096,
  maxSandboxes: 4096,
  maxMemoryMiB: memTotalMiB,
  maxPids: 65536,
  maxCpu: 1024,
})

interface Live {
  info: SandboxInfo
  handle?: SandboxHandle
  rootfs?: Rootfs
  /** API calls in flight (exec, files, process streams): an idle TTL never fires while > 0 */
  active: number
  /** a stop in progress */
  stopping?: Promise<void>
  /**
   * Why the first stop was asked for. A stop whose teardown failed after it had killed the init is
   * retried by the reaper, which then finds the init dead; the reason reported stays this one.
   */
  stopCause?: { reason: StopReason; message: string }
}

/** One warm pool (WarmPoolSpec) and its started sandboxes. */
interface Pool {
  spec: WarmPoolSpec
  /** the spec's resources over the node's defaults: what a matching create asks for */
  resources: ResourceSpec
  network: NetworkMode
  /** started, never handed out; their registry records stay 'creating' so a restart removes them */
  ready: Live[]
  building: number
  claims: number
  lastError?: string
  /** no refill before this (after a failure) */
  retryAt: number
}

/** How long a pool waits after a failed refill. */
const POOL_RETRY_MS = 5000
/**
 * Refills of one pool running at once: half the CPUs, so that a refill never
 * takes every core from the sandboxes it serves (a start is CPU-bound: runc
 * and the agent's first answer).
 */
const POOL_PARALLEL_BUILDS = Math.max(1, Math.floor(os.availableParallelism() / 2))

const SUN_PATH_MAX = 107
/** How long a call whose agent connection broke waits for the init's exit to show (see explain). */
const INIT_EXIT_WAIT_MS = 2000

export class SandboxService {
  readonly stateDir: string
  readonly nodeId: string
  readonly limits: AdmissionLimits
  readonly layers: LayerMounts
  readonly builder: RootfsBuilder
  readonly backend: ContainerBackend
  readonly store: ImageStore
  readonly #log: Logger
  readonly #registry: Registry
  readonly #live = new Map<string, Live>()
  readonly #idemInFlight = new Map<string, { hash: string; p: Promise<{ info: SandboxInfo; replay: boolean }> }>()
  readonly #opts: SandboxServiceOptions
  /** image reference → the digest its tag held when the tag file had inode `version` */
  readonly #tagCache = new Map<string, { digest: string; version: string }>()
  readonly #manifestCache = new Map<string, { layers: LayerRef[]; config: ImageConfig }>()
  #creating = 0
  /** creates past admission whose record is not in #live yet */
  #admitted = 0
  /** deletions releasing resources */
  readonly #deleting = new Set<Promise<void>>()
  readonly #createQueue: Array<() => void> = []
  #reaper: NodeJS.Timeout | null = null
  #reaping = false
  #closed = false
  readonly #pools: Pool[]
  /** set by reclaimAll: the pools are emptied and not refilled again */
  #poolsStopped = false
  /** reclaimAll calls running: creates are refused meanwhile */
  #reclaiming = 0

  private constructor(opts: SandboxServiceOptions, registry: Registry) {
    this.#opts = opts
    this.stateDir = path.resolve(opts.stateDir)
    this.nodeId = opts.nodeId
    this.store = opts.store
    this.#log = opts.log
    this.#registry = registry
    const memTotal = nodeCapacity(this.stateDir).memTotalMiB
    this.limits = { ...DEFAULT_LIMITS(memTotal), ...opts.limits }
    this.layers = new LayerMounts({ fuseMnt: opts.fuseMnt, stateDir: this.stateDir, store: opts.store, nodeId: opts.nodeId, lingerMs: opts.layerLingerMs ?? 60_000 })
    this.builder = new RootfsBuilder({ layers: this.layers })
    this.backend = new ContainerBackend({
      ...(opts.runtime ? { runtime: opts.runtime } : {}),
      cgroupParent: opts.cgroupParent ?? `/strata/${opts.nodeId}`,
    })
    this.#pools = validateWarmPool(opts.warmPool).map((spec) => ({
      spec, resources: { ...opts.defaultResources, ...spec.resources }, network: spec.network ?? 'none', ready: [], building: 0, claims: 0, retryAt: 0,
    }))
  }

  /** Opens the registry and re-adopts what an earlier daemon left (see the file comment). */
  static async open(opts: SandboxServiceOptions): Promise<SandboxService> {
    const root = path.resolve(opts.stateDir)
    fs.mkdirSync(path.join(root, 'sb'), { recursive: true, mode: 0o700 })
    const longest = path.join(root, 'sb', 'sb-xxxxxxxxxxxx', 'rt', 'agent.sock')
    if (Buffer.byteLength(longest) > SUN_PATH_MAX) {
      throw new StrataError('BAD_CONFIG', `sandbox stateDir ${root} is too long: agent sockets below it would exceed ${SUN_PATH_MAX} bytes (${longest})`)
    }
    const registry = Registry.open(path.join(root, 'registry'))
    const svc = new SandboxService(opts, registry)
    try {
      await svc.#recover()
    } catch (e) {
      await registry.close()
      throw e
    }
    svc.#reaper = setInterval(() => void svc.#reap(), opts.reapIntervalMs ?? 1000)
    svc.#reaper.unref()
    svc.#fillPools()
    return svc
  }

  #dirs(id: string): { dir: string; fs: string; rt: string } {
    const dir = path.join(this.stateDir, 'sb', id)
    return { dir, fs: path.join(dir, 'fs'), rt: path.join(dir, 'rt') }
  }

  // ---------------------------------------------------------------- recovery

  async #recover(): Promise<void> {
    const known = new Set<string>()
    let adopted = 0
    for (const info of this.#registry.all()) {
      known.add(info.id)
      const d = this.#dirs(info.id)
      if (info.deleted) {
        // deleted while its resources were being released: finish the job
        await this.#teardown(info.id, undefined, undefined).catch((e) => this.#log.warn('finishing a deletion failed', { id: info.id, err: e }))
        await this.#registry.remove(info.id)
        continue
      }
      if (info.state === 'creating') {
        // the create never returned, or a warm-pool sandbox nobody took: undo it and forget it
        // (its idempotency key was never recorded)
        await this.#teardown(info.id, undefined, undefined).catch((e) => this.#log.warn('undoing a half-built sandbox failed', { id: info.id, err: e }))
        await this.#registry.remove(info.id)
        continue
      }
      if (info.state === 'stopped') {
        await this.#teardown(info.id, undefined, undefined).catch(() => undefined)
        this.#live.set(info.id, { info, active: 0 })
        continue
      }
      let handle: SandboxHandle | undefined
      let rootfs: Rootfs | undefined
      try {
        handle = await this.backend.adopt(info.id, d.rt)
        const st = await handle.status()
        if (st.state !== 'running') throw new StrataError('SANDBOX_GONE', `sandbox ${info.id} stopped while the daemon was away`)
        rootfs = await this.builder.adopt({ sandboxId: info.id, layers: info.layers.map((l) => l.digest), datasets: info.mounts, stateDir: d.fs })
        // activity is kept in memory only (the record holds the value of its start), and nobody
        // could reach the sandbox while no daemon ran: the idle TTL counts afresh from re-adoption,
        // so a sandbox in use before a restart is not reclaimed as idle right after it
        this.#live.set(info.id, { info: { ...info, pid: handle.pid, lastActivityAt: new Date().toISOString() }, handle, rootfs, active: 0 })
        adopted++
      } catch (e) {
        const oomKills = handle ? (await handle.status().catch(() => ({ oomKills: 0 }))).oomKills : 0
        const reason: StopReason = oomKills > 0 ? 'oom' : handle ? 'exited' : 'lost'
        this.#log.warn('sandbox not re-adopted', { id: info.id, reason, err: (e as Error).message })
        await this.#teardown(info.id, handle, rootfs).catch(() => undefined)
        const stopped = this.#stoppedInfo(info, reason, `found stopped when the daemon started: ${(e as Error).message}`, oomKills)
        await this.#registry.put(stopped)
        this.#live.set(info.id, { info: stopped, active: 0 })
      }
    }
    // directories nobody knows: a create killed before its record was written, or a deleted record
    for (const name of fs.readdirSync(path.join(this.stateDir, 'sb'))) {
      if (!known.has(name)) await this.#teardown(name, undefined, undefined).catch((e) => this.#log.warn('removing an unknown sandbox dir failed', { name, err: e }))
    }
    const swept = await this.layers.sweep()
    if (adopted || swept.length) this.#log.info('recovered', { adopted, sweptLayers: swept.length })
  }

  /**
   * Stops and removes whatever is left of a sandbox: its container (through
   * the handle, or adopted from disk, or by the runtime directly), its rootfs
   * mounts, its directory. Works on any half-built state.
   */
  async #teardown(id: string, handle: SandboxHandle | undefined, rootfs: Rootfs | undefined): Promise<void> {
    const d = this.#dirs(id)
    if (!handle && fs.existsSync(path.join(d.rt, 'sandbox.json'))) {
      // not adoptable: the runtime no longer knows it, so nothing of it runs
      handle = await this.backend.adopt(id, d.rt).catch(() => undefined)
    }
    if (handle) await handle.delete()
    fs.rmSync(d.rt, { recursive: true, force: true })
    // the rootfs goes only after the container: its processes held the mounts
    await (rootfs ?? new Rootfs(id, d.fs)).destroy()
    fs.rmSync(d.dir, { recursive: true, force: true })
  }

  // ---------------------------------------------------------------- create

  /** Creates a sandbox (or returns the one its idempotency key made). `replay` is true for the latter. */
  async create(body: unknown): Promise<{ info: SandboxInfo; replay: boolean }> {
    this.#checkOpen()
    return this.#createChecked(validateCreate(body))
  }

  async #createChecked(req: CreateSandboxRequest): Promise<{ info: SandboxInfo; replay: boolean }> {
    const key = req.idempotencyKey
    if (key === undefined) return { info: await this.#create(req), replay: false }
    const hash = requestHash(req)
    const inFlight = this.#idemInFlight.get(key)
    if (inFlight) {
      if (inFlight.hash !== hash) throw mismatch(key)
      return { info: (await inFlight.p).info, replay: true }
    }
    const p = (async () => {
      const prior = this.#registry.getIdempotency(key)
      if (prior) {
        if (prior.requestHash !== hash) throw mismatch(key)
        const info = this.#live.get(prior.id)?.info ?? this.#registry.get(prior.id)
        if (info) return { info, replay: true }
        throw new StrataError('SANDBOX_GONE', `the sandbox idempotency key ${JSON.stringify(key)} created (${prior.id}) was deleted`)
      }
      const info = await this.#create(req)
      await this.#registry.putIdempotency(key, { id: info.id, requestHash: hash, at: Date.now() })
      return { info, replay: false }
    })()
    this.#idemInFlight.set(key, { hash, p })
    try {
      return await p
    } finally {
      this.#idemInFlight.delete(key)
    }
  }

  /** `count` sandboxes from one request; each item succeeds or fails on its own. */
  async createMany(body: unknown, count: number): Promise<CreateManyResult> {
    this.#checkOpen()
    if (!Number.isSafeInteger(count) || count < 1 || count > 1024) throw new StrataError('INVALID_ARGUMENT', 'count must be an integer in [1, 1024]')
    const req = validateCreate(body)
    const results = await Promise.all(Array.from({ length: count }, async (_, i) => {
      try {
        const one = req.idempotencyKey === undefined ? req : { ...req, idempotencyKey: `${req.idempotencyKey}#${i}` }
        // item keys derive from a checked key: not checked again (KEY#i may pass the length limit)
        return { ok: true as const, sandbox: (await this.#createChecked(one)).info }
      } catch (e) {
        const se = toStrataError(e)
        return { ok: false as const, error: { code: se.code, message: se.reason } }
      }
    }))
    return { results }
  }

  async #slot(): Promise<() => void> {
    const max = this.#opts.maxConcurrentCreates ?? 16
    if (this.#creating >= max) await new Promise<void>((r) => this.#createQueue.push(r))
    this.#creating++
    return () => {
      this.#creating--
      this.#createQueue.shift()?.()
    }
  }

  async #create(req: CreateSandboxRequest): Promise<SandboxInfo> {
    const t0 = Date.now()
    const resources = { ...this.#opts.defaultResources, ...req.resources }
    const lifetime = { ...this.#opts.defaultLifetime, ...req.lifetime }
    checkQuota(this.limits, this.#countLive(), resources)
    const claimed = await this.#claim(req, resources, lifetime, t0)
    if (claimed) return claimed
    const release = await this.#slot()
    // admitted creates count against the limits from here on, before their record exists
    let admitted = false
    try {
      this.#checkOpen()
      if (this.#reclaiming) throw new StrataError('CLOSED', 'the node is reclaiming its sandboxes (cluster down); create again once it is done')
      checkQuota(this.limits, this.#countLive() + this.#admitted, resources)
      checkCapacity(this.limits, nodeCapacity(this.stateDir), this.#admitted)
      this.#admitted++
      admitted = true
      const live = await this.#build(req, resources, lifetime, t0, () => {
        this.#admitted--
        admitted = false
      })
      return { ...live.info }
    } finally {
      if (admitted) this.#admitted--
      release()
    }
  }

  /**
   * Builds and starts one sandbox. A create's sandbox (`listed`) is in the
   * live map from its record on, so list and inspect show it 'creating';
   * `onListed` runs then. A warm-pool sandbox (`listed` null) is kept out of
   * the map and its record stays 'creating' until a create takes it.
   */
  async #build(req: CreateSandboxRequest, resources: ResourceSpec, lifetime: SandboxInfo['lifetime'], t0: number, onListed: (() => void) | null): Promise<Live> {
    let live: Live | undefined
    try {
      const { layers, config, image, composedOf } = await this.#resolveLayers(req)
      const id = newId()
      const env: Record<string, string> = {}
      for (const kv of config.env) {
        const eq = kv.indexOf('=')
        if (eq > 0) env[kv.slice(0, eq)] = kv.slice(eq + 1)
      }
      Object.assign(env, req.env)
      const now = new Date().toISOString()
      const info: SandboxInfo = {
        id,
        backend: 'container',
        state: 'creating',
        createdAt: now,
        lastActivityAt: now,
        labels: req.labels ?? {},
        ...(image ? { image } : {}),
        ...(composedOf ? { composedOf } : {}),
        layers: layers.map((l) => ({ digest: l.digest, kind: l.kind, size: l.size })),
        mounts: req.mounts ?? [],
        resources,
        lifetime,
        env,
        workdir: req.workdir ?? (config.workdir || '/'),
        user: req.user ?? (config.user || 'root'),
        network: req.network ?? 'none',
        hostname: req.hostname ?? id,
        oomKills: 0,
        ...(req.idempotencyKey !== undefined ? { idempotencyKey: req.idempotencyKey } : {}),
      }
      live = { info, active: 0 }
      if (onListed) {
        this.#live.set(id, live)
        onListed()
      }
      // not awaited (lmdb applies writes in order): if the daemon dies before this commits, the
      // restart finds the directory without a record and removes it, which is what the record would do
      void this.#registry.put({ ...info }).catch((e) => this.#log.warn('registry', { id, err: e }))
      const d = this.#dirs(id)
      fs.mkdirSync(d.dir, { mode: 0o700 })
      const tResolved = Date.now()
      live.rootfs = await this.builder.create({ sandboxId: id, layers: info.layers.map((l) => l.digest), datasets: info.mounts, stateDir: d.fs })
      const spec: SandboxSpec = {
        id, rootfsDir: live.rootfs.dir, env, workdir: info.workdir, user: info.user, resources, network: info.network,
        hostname: info.hostname, stateDir: d.rt,
      }
      const tRootfs = Date.now()
      live.handle = await this.backend.create(spec)
      this.#log.debug('sandbox created', { id, pooled: !onListed, resolveMs: tResolved - t0, rootfsMs: tRootfs - tResolved, startMs: Date.now() - tRootfs })
      info.state = 'running'
      info.pid = live.handle.pid
      info.startedAt = new Date().toISOString()
      info.createMs = Date.now() - t0
      info.lastActivityAt = info.startedAt
      if (onListed) await this.#registry.put(info)
      return live
    } catch (e) {
      if (live) {
        this.#live.delete(live.info.id)
        await this.#teardown(live.info.id, live.handle, live.rootfs).catch((err) => this.#log.warn('undoing a failed create', { id: live!.info.id, err }))
        await this.#registry.remove(live.info.id).catch(() => undefined)
      }
      throw e
    }
  }

  // ---------------------------------------------------------------- warm pools

  /** Hands out a started sandbox of a matching warm pool, or null (see WarmPoolSpec). */
  async #claim(req: CreateSandboxRequest, resources: ResourceSpec, lifetime: SandboxInfo['lifetime'], t0: number): Promise<SandboxInfo | null> {
    if (this.#pools.length === 0 || !poolEligible(req)) return null
    const network = req.network ?? 'none'
    const wanted = JSON.stringify(canonical(resources))
    const pools = this.#pools.filter((p) => p.network === network && JSON.stringify(canonical(p.resources)) === wanted)
    if (!pools.some((p) => p.ready.length)) return null
    // the digest the request means now: a sandbox started from an older tag target is not it
    const { image } = await this.#resolveLayers(req)
    this.#checkOpen()
    for (const p of pools) {
      const i = p.ready.findIndex((l) => l.info.image?.digest === image!.digest && pidAlive(l.handle!.pid))
      if (i < 0) continue
      checkQuota(this.limits, this.#countLive() + this.#admitted, resources)
      const [l] = p.ready.splice(i, 1)
      const info = l!.info
      const now = new Date().toISOString()
      info.createdAt = now
      info.startedAt = now
      info.lastActivityAt = now
      info.labels = req.labels ?? {}
      info.lifetime = lifetime
      info.image = image!
      info.pooled = true
      if (req.idempotencyKey !== undefined) info.idempotencyKey = req.idempotencyKey
      info.createMs = Date.now() - t0
      this.#live.set(info.id, l!)
      p.claims++
      await this.#registry.put(info)
      this.#fillPools()
      return { ...info }
    }
    return null
  }

  /** Starts refills where a pool is short (a few at a time; failures back off). */
  #fillPools(): void {
    if (this.#closed || this.#poolsStopped) return
    const now = Date.now()
    for (const p of this.#pools) {
      while (p.building < POOL_PARALLEL_BUILDS && p.ready.length + p.building < p.spec.count && now >= p.retryAt) {
        p.building++
        void this.#fillOne(p)
      }
    }
  }

  async #fillOne(p: Pool): Promise<void> {
    let ok = false
    const release = await this.#slot()
    try {
      if (this.#closed || this.#poolsStopped) return
      // user creates go first: a pool never takes the node's last capacity (admitted creates count)
      checkCapacity(this.limits, nodeCapacity(this.stateDir), this.#admitted + 1)
      const req: CreateSandboxRequest = { image: p.spec.image, network: p.network, ...(p.spec.resources ? { resources: p.spec.resources } : {}) }
      const live = await this.#build(req, p.resources, {}, Date.now(), null)
      if (this.#closed || this.#poolsStopped) {
        await this.#discardPooled(live)
        return
      }
      p.ready.push(live)
      p.lastError = undefined
      ok = true
    } catch (e) {
      const msg = `${toStrataError(e).code}: ${toStrataError(e).reason}`
      // once per distinct failure: a pool whose image is not imported yet retries every few seconds
      if (msg !== p.lastError) this.#log.warn('warm pool refill failed; retrying', { image: p.spec.image, err: msg })
      p.lastError = msg
      p.retryAt = Date.now() + POOL_RETRY_MS
    } finally {
      p.building--
      release()
      if (ok) this.#fillPools()
    }
  }

  /** Removes a warm-pool sandbox nobody took. */
  async #discardPooled(l: Live): Promise<void> {
    await this.#teardown(l.info.id, l.handle, l.rootfs).catch((e) => this.#log.warn('removing a warm-pool sandbox', { id: l.info.id, err: e }))
    await this.#registry.remove(l.info.id).catch(() => undefined)
  }

  /** Pool upkeep on each reaper pass: dead sandboxes and ones of an image the tag no longer names go. */
  async #tendPools(): Promise<void> {
    for (const p of this.#pools) {
      if (p.ready.length === 0) continue
      let digest: string | undefined
      try {
        digest = (await this.#resolveLayers({ image: p.spec.image })).image?.digest
      } catch { /* the image went: its sandboxes stay until it is back or the daemon stops */ }
      const stale = p.ready.filter((l) => !pidAlive(l.handle!.pid) || (digest !== undefined && l.info.image?.digest !== digest))
      if (stale.length === 0) continue
      p.ready = p.ready.filter((l) => !stale.includes(l))
      await Promise.all(stale.map((l) => this.#discardPooled(l)))
    }
    this.#fillPools()
  }

  /** Empties every pool (waiting for refills under way). */
  async #drainPools(): Promise<void> {
    while (this.#pools.some((p) => p.building > 0)) await new Promise((r) => setTimeout(r, 20))
    await Promise.all(this.#pools.flatMap((p) => p.ready.splice(0)).map((l) => this.#discardPooled(l)))
  }

  #countLive(): number {
    // a sandbox being deleted still holds its resources
    let n = this.#deleting.size
    for (const l of this.#live.values()) if (l.info.state !== 'stopped') n++
    return n
  }

  async #resolveLayers(req: CreateSandboxRequest): Promise<{ layers: LayerRef[]; config: ImageConfig; image?: { ref: string; digest: string }; composedOf?: SandboxInfo['composedOf'] }> {
    if (req.image !== undefined) {
      const digest = await this.#tagDigest(req.image)
      let m = this.#manifestCache.get(digest)
      if (!m) {
        const r = await this.store.getManifest(digest)
        m = { layers: r.manifest.layers, config: r.manifest.config }
        this.#manifestCache.set(digest, m)
      }
      return { ...m, image: { ref: req.image, digest } }
    }
    const c = await composeLayers(this.store, { base: req.base!, ...(req.workspace ? { workspace: req.workspace } : {}), ...(req.toolkits ? { toolkits: req.toolkits } : {}) })
    return { layers: c.layers, config: c.config, composedOf: c.parts.map((p) => ({ kind: p.kind, ref: p.ref, digest: p.digest })) }
  }

  /**
   * A tag's manifest digest, as of this create: the tag file is looked up
   * (one metadata RPC) and read again only when it was replaced since the
   * last create (setTag renames a new file into place), so a create right
   * after `image import --name x` or `image tag` gets the new image and one
   * after `image rm` fails. A digest reference is exact and immutable.
   */
  async #tagDigest(ref: string): Promise<string> {
    const r = parseImageRef(ref)
    if (r.digest !== undefined) return r.digest
    const tag = r.tag ?? DEFAULT_TAG
    const version = await this.store.tagVersion(r.name, tag)
    if (version === null) {
      this.#tagCache.delete(ref)
      throw new StrataError('IMAGE_NOT_FOUND', `no image ${r.name}:${tag}`)
    }
    const c = this.#tagCache.get(ref)
    if (c && c.version === version) return c.digest
    const read = await this.store.resolve(ref)
    if (!this.#manifestCache.has(read.digest)) this.#manifestCache.set(read.digest, { layers: read.manifest.layers, config: read.manifest.config })
    // the version read before the content: a tag moved in between is read again by the next create
    this.#tagCache.set(ref, { digest: read.digest, version })
    return read.digest
  }

  // ---------------------------------------------------------------- access

  #get(id: string): Live {
    checkSandboxId(id)
    const l = this.#live.get(id)
    if (!l) throw new StrataError('SANDBOX_NOT_FOUND', `no sandbox ${id} on this node`)
    return l
  }

  /** The record, with a fresh OOM count for a running sandbox. */
  async inspect(id: string): Promise<SandboxInfo> {
    const l = this.#get(id)
    if (l.info.state === 'running' && l.handle) {
      const st = await l.handle.status().catch(() => undefined)
      if (st) l.info.oomKills = st.oomKills
    }
    return { ...l.info }
  }

  list(filter: ListFilter = {}): SandboxInfo[] {
    const out: SandboxInfo[] = []
    for (const l of this.#live.values()) {
      if (filter.state && l.info.state !== filter.state) continue
      if (filter.labels && !Object.entries(filter.labels).every(([k, v]) => l.info.labels[k] === v)) continue
      out.push({ ...l.info })
    }
    return out.sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id))
  }

  /** The record as it stands, without asking the runtime (cheap; SANDBOX_NOT_FOUND if unknown). */
  peek(id: string): SandboxInfo {
    return this.#get(id).info
  }

  /**
   * Runs `fn` with the running sandbox's handle, counting it as activity for
   * the idle TTL (for as long as `fn` runs: a long exec is not idle).
   */
  async use<T>(id: string, fn: (h: SandboxHandle, info: SandboxInfo) => Promise<T>): Promise<T> {
    const l = this.#get(id)
    const handle = l.handle
    if (l.info.state !== 'running' || !handle || l.stopping) throw this.#goneError(id, l)
    l.active++
    this.#touch(l)
    try {
      return await fn(handle, l.info)
    } catch (e) {
      throw await this.explain(id, e)
    } finally {
      l.active--
      this.#touch(l)
    }
  }

  /**
   * A failure of a call into a sandbox, restated as SANDBOX_GONE when the
   * sandbox stopped or is stopping (the agent's connection broke because the
   * sandbox went, not the other way round).
   */
  async explain(id: string, e: unknown): Promise<unknown> {
    const l = this.#live.get(id)
    // The agent's connection closes while its process exits, which for a pid namespace's init
    // lasts until every other process in it is dead: wait that out before saying it still runs.
    if (l?.handle && l.info.state === 'running' && !l.stopping && isStrataError(e, ['SANDBOX_AGENT_UNREACHABLE', 'SANDBOX_GONE'])) {
      const end = Date.now() + INIT_EXIT_WAIT_MS
      while (pidAlive(l.handle.pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 10))
    }
    const gone = !l || l.stopping !== undefined || l.info.state !== 'running' || !l.handle || !pidAlive(l.handle.pid)
    // a SANDBOX_GONE of the agent client (its socket went) says nothing of why; ours carry `detail.state`
    if (gone && !(isStrataError(e, 'SANDBOX_GONE') && (e as StrataError).detail?.state !== undefined)) {
      return l ? this.#goneError(id, l, e) : new StrataError('SANDBOX_GONE', `sandbox ${id} was deleted during the call`, { cause: e })
    }
    return e
  }

  #goneError(id: string, l: Live, cause?: unknown): StrataError {
    const opt = cause !== undefined ? { cause } : {}
    if (l.info.state === 'running' && l.handle && !pidAlive(l.handle.pid)) {
      // The init is dead, so the sandbox has stopped though its record may not say so yet: report
      // why (the stop asked for, or what the reaper will find) and record it now, not on its next pass.
      const oomKills = l.handle.oomKills()
      if (!l.stopCause) {
        const dead = deadInit(oomKills)
        void this.#stop(l, dead.reason, dead.message).catch((e) => this.#log.warn('stopping a sandbox whose init died', { id, err: e }))
      }
      const why = l.stopCause ?? deadInit(oomKills)
      const stop = { reason: why.reason, at: new Date().toISOString(), message: why.message, oomKills }
      return new StrataError('SANDBOX_GONE', `sandbox ${id} stopped (${stop.reason}: ${stop.message})`, { ...opt, detail: { state: 'stopped', stop } })
    }
    const why = l.info.stop ?? (l.stopping ? l.stopCause : undefined)
    // one wording for a stopped sandbox, whether or not the reaper has recorded its stop yet (above)
    const state = l.stopping ? 'is stopping' : l.info.state === 'stopped' ? 'stopped' : `is ${l.info.state}`
    return new StrataError('SANDBOX_GONE', `sandbox ${id} ${state}${why ? ` (${why.reason}: ${why.message})` : ''}`,
      { ...opt, detail: { state: l.info.state, ...(l.info.stop ? { stop: l.info.stop } : {}) } })
  }

  /** Marks API activity without a call (keepalive). */
  touch(id: string): SandboxInfo {
    const l = this.#get(id)
    if (l.info.state !== 'running') throw new StrataError('SANDBOX_GONE', `sandbox ${id} is ${l.info.state}`)
    this.#touch(l)
    return { ...l.info }
  }

  #touch(l: Live): void {
    l.info.lastActivityAt = new Date().toISOString()
  }

  // ---------------------------------------------------------------- stop / delete

  /** Stops the sandbox and releases everything but its record. Idempotent on a stopped sandbox. */
  async kill(id: string): Promise<SandboxInfo> {
    const l = this.#get(id)
    if (l.info.state === 'creating') throw new StrataError('SANDBOX_GONE', `sandbox ${id} is still being created`)
    await this.#stop(l, 'killed', 'killed through the API')
    return { ...l.info }
  }

  /**
   * Stops the sandbox and forgets it. With `wait: false` it returns once
   * every process of the sandbox is killed and the deletion is recorded; the
   * mounts, cgroups and directories go in the background (a daemon restarted
   * meanwhile finishes the job). The sandbox is gone from the API either way.
   */
  async delete(id: string, opts: { wait?: boolean } = {}): Promise<void> {
    const l = this.#get(id)
    if (l.info.state === 'creating') throw new StrataError('SANDBOX_GONE', `sandbox ${id} is still being created; delete it once create returns`)
    this.#live.delete(id)
    const work = (async () => {
      await this.#stop(l, 'killed', 'deleted through the API', false)
      await this.#registry.remove(id)
    })()
    this.#deleting.add(work)
    void work.catch((e) => this.#log.warn('delete', { id, err: e })).finally(() => this.#deleting.delete(work))
    if (opts.wait !== false) return work
    // the sandbox's init is pid 1 of its pid namespace: killing it kills every process in it
    if (l.handle && l.info.state === 'running') {
      try {
        process.kill(l.handle.pid, 'SIGKILL')
      } catch { /* already gone */ }
    }
    await this.#registry.put({ ...l.info, deleted: true })
  }

  /** Deletions still releasing resources in the background. */
  get pendingDeletes(): number {
    return this.#deleting.size
  }

  /** Resolves when no deletion is in progress. */
  async settled(): Promise<void> {
    while (this.#deleting.size) await Promise.allSettled([...this.#deleting])
  }

  /** `keep`: the record stays (kill, reaper) and gets the final OOM count; a delete skips both. */
  #stop(l: Live, reason: StopReason, message: string, keep = true): Promise<void> {
    if (l.info.state === 'stopped') return Promise.resolve()
    l.stopCause ??= { reason, message }
    const cause = l.stopCause
    l.stopping ??= (async () => {
      let oomKills = l.info.oomKills
      if (l.handle && keep) oomKills = (await l.handle.status().catch(() => ({ oomKills }))).oomKills
      await this.#teardown(l.info.id, l.handle, l.rootfs)
      l.handle = undefined
      l.rootfs = undefined
      l.info = this.#stoppedInfo(l.info, cause.reason, cause.message, oomKills)
      if (keep) await this.#registry.put(l.info)
      this.#log.info('sandbox stopped', { id: l.info.id, reason: cause.reason, oomKills })
    })().finally(() => {
      l.stopping = undefined
    })
    return l.stopping
  }

  #stoppedInfo(info: SandboxInfo, reason: StopReason, message: string, oomKills: number): SandboxInfo {
    const { pid: _pid, ...rest } = info
    return { ...rest, state: 'stopped', oomKills, stop: { reason, at: new Date().toISOString(), message, oomKills } }
  }

  // ---------------------------------------------------------------- reaper

  /** One pass: dead inits, idle TTLs, maximum lifetimes, aged-out stopped records. */
  async #reap(): Promise<void> {
    if (this.#reaping || this.#closed) return
    this.#reaping = true
    try {
      const now = Date.now()
      const retainMs = (this.#opts.retainStoppedSec ?? 3600) * 1000
      const work: Promise<void>[] = []
      for (const l of this.#live.values()) {
        const i = l.info
        if (i.state === 'stopped') {
          if (now - Date.parse(i.stop!.at) > retainMs) {
            this.#live.delete(i.id)
            work.push(this.#registry.remove(i.id))
          }
          continue
        }
        if (i.state !== 'running' || !l.handle || l.stopping) continue
        if (!pidAlive(l.handle.pid)) {
          const handle = l.handle
          work.push((async () => {
            const st = await handle.status().catch(() => ({ oomKills: 0 }))
            const dead = deadInit(st.oomKills)
            await this.#stop(l, dead.reason, dead.message)
          })())
          continue
        }
        if (i.lifetime.maxLifetimeSec !== undefined && now - Date.parse(i.createdAt) > i.lifetime.maxLifetimeSec * 1000) {
          work.push(this.#stop(l, 'max_lifetime', `reached its maximum lifetime of ${i.lifetime.maxLifetimeSec} s`))
        } else if (i.lifetime.idleTtlSec !== undefined && l.active === 0 && now - Date.parse(i.lastActivityAt) > i.lifetime.idleTtlSec * 1000) {
          work.push(this.#stop(l, 'idle_ttl', `idle for more than ${i.lifetime.idleTtlSec} s`))
        }
      }
      work.push(this.#tendPools())
      const results = await Promise.allSettled(work)
      for (const r of results) if (r.status === 'rejected') this.#log.warn('reaper', { err: r.reason })
      if (now % 60_000 < (this.#opts.reapIntervalMs ?? 1000)) await this.#registry.expireIdempotency()
    } finally {
      this.#reaping = false
    }
  }

  /** Runs one reaper pass now (tests and `kick`). */
  reapNow(): Promise<void> {
    return this.#reap()
  }

  // ---------------------------------------------------------------- node

  nodeInfo(version: string): NodeInfo {
    const cap = nodeCapacity(this.stateDir)
    const counts = { running: 0, stopped: 0, creating: 0, deleting: this.#deleting.size }
    for (const l of this.#live.values()) counts[l.info.state]++
    return {
      version,
      nodeId: this.nodeId,
      sandboxes: counts,
      capacity: {
        memAvailableMiB: cap.memAvailableMiB, memTotalMiB: cap.memTotalMiB, reserveMemoryMiB: this.limits.reserveMemoryMiB,
        threads: cap.threads, threadsMax: cap.threadsMax, diskFreeMiB: cap.diskFreeMiB, reserveDiskMiB: this.limits.reserveDiskMiB,
        maxSandboxes: this.limits.maxSandboxes,
      },
      layers: this.layers.list().map((m) => ({ digest: m.digest, users: Object.keys(m.users).length })),
      pool: this.#pools.map((p) => ({
        image: p.spec.image, resources: p.resources, network: p.network, target: p.spec.count, ready: p.ready.length, building: p.building,
        claims: p.claims, digest: p.ready.at(-1)?.info.image?.digest ?? null, ...(p.lastError ? { lastError: p.lastError } : {}),
      })),
    }
  }

  /** Stops and removes every sandbox on the node (cluster down). */
  async reclaimAll(): Promise<number> {
    this.#poolsStopped = true
    // creates that are building now finish and are reclaimed with the rest (skipped, they would
    // outlive `cluster down`: close() waits for them and leaves them running); no new one starts
    this.#reclaiming++
    try {
      while (this.#creating > 0) await new Promise((r) => setTimeout(r, 20))
      return await this.#reclaimNow()
    } finally {
      this.#reclaiming--
    }
  }

  async #reclaimNow(): Promise<number> {
    await this.#drainPools()
    const ids = [...this.#live.keys()].filter((id) => this.#live.get(id)?.info.state !== 'creating')
    // a full node holds ~10^3 sandboxes: several deletions at once (each mostly waits on runc and umount)
    let next = 0
    const worker = async () => {
      while (next < ids.length) {
        const id = ids[next++]!
        if (this.#live.has(id)) await this.delete(id).catch((e) => this.#log.warn('reclaim', { id, err: e }))
      }
    }
    await Promise.all(Array.from({ length: 8 }, worker))
    await this.settled()
    await this.layers.dropIdle()
    await this.layers.sweep()
    this.backend.removeEmptyCgroupParent()
    return ids.length
  }

  #checkOpen(): void {
    if (this.#closed) throw new StrataError('CLOSED', 'the sandbox service is shutting down')
  }

  /** Leaves every sandbox running (a new daemon re-adopts them); idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    if (this.#reaper) clearInterval(this.#reaper)
    while (this.#reaping || this.#creating > 0) await new Promise((r) => setTimeout(r, 20))
    // nobody took them, so nothing is lost; a restart would remove them anyway
    await this.#drainPools()
    await this.settled()
    // lingering layers no sandbox uses, and the cgroup parent if no sandbox is left: a stopped
    // daemon leaves behind only what its running sandboxes hold
    await this.layers.dropIdle().catch((e) => this.#log.warn('unmounting idle layers', { err: e }))
    this.backend.removeEmptyCgroupParent()
    for (const l of this.#live.values()) l.handle?.agent.close()
    await this.#registry.close()
  }
}

/**
 * Removes every sandbox under a node's state dir without a daemon or the
 * DFS (after `cluster down` found the daemon dead): runtime state, rootfs
 * mounts, layer mounts, directories. The registry is emptied of them too.
 * Image-store leases of the layers stay until the store's stale-lease rules
 * drop them.
 */
export async function reclaimOffline(stateDir: string, opts: { runtime?: string; cgroupParent?: string } = {}): Promise<number> {
  const root = path.resolve(stateDir)
  const sbDir = path.join(root, 'sb')
  if (!fs.existsSync(sbDir)) return 0
  const backend = new ContainerBackend({ ...(opts.runtime ? { runtime: opts.runtime } : {}), ...(opts.cgroupParent ? { cgroupParent: opts.cgroupParent } : {}) })
  let n = 0
  for (const id of fs.readdirSync(sbDir)) {
    const dir = path.join(sbDir, id)
    const rt = path.join(dir, 'rt')
    if (fs.existsSync(path.join(rt, 'sandbox.json'))) {
      const h = await backend.adopt(id, rt).catch(() => undefined)
      if (h) await h.delete()
    }
    fs.rmSync(rt, { recursive: true, force: true })
    await new Rootfs(id, path.join(dir, 'fs')).destroy()
    fs.rmSync(dir, { recursive: true, force: true })
    n++
  }
  await unmountTree(path.join(root, 'layers'))
  if (opts.cgroupParent) backend.removeEmptyCgroupParent()
  const reg = Registry.open(path.join(root, 'registry'))
  try {
    for (const info of reg.all()) await reg.remove(info.id)
  } finally {
    await reg.close()
  }
  return n
}

/** Why a sandbox whose init is dead stopped, from its cgroup's OOM kill count. */
function deadInit(oomKills: number): { reason: StopReason; message: string; oomKills: number } {
  return oomKills > 0
    ? { reason: 'oom', message: `the OOM killer killed the sandbox's init (${oomKills} kill(s))`, oomKills }
    : { reason: 'exited', message: `the sandbox's init exited`, oomKills }
}

function newId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789'
  const b = crypto.randomBytes(12)
  let s = 'sb-'
  for (const x of b) s += alphabet[x % 36]
  return s
}

function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical)
  if (v && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical((v as Record<string, unknown>)[k])]))
  return v
}

function requestHash(req: CreateSandboxRequest): string {
  const { idempotencyKey: _k, ...rest } = req
  return crypto.createHash('sha256').update(JSON.stringify(canonical(rest))).digest('hex')
}

function mismatch(key: string): StrataError {
  return new StrataError('IDEMPOTENCY_MISMATCH', `idempotency key ${JSON.stringify(key)} was used before with a different request`)
}
