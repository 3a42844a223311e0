// `strata cluster …`: an all-in-one local cluster made of background daemons
// under one directory, bootstrapped through the same RPCs an operator uses
// with 3FS's deploy guide (init-cluster, create-target on every storage node,
// upload-chains, upload-chain-table), then waited on until every chain is
// SERVING with every target UPTODATE.

import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { StrataError, isStrataError, toStrataError } from '../common/errors.js'
import { LOCAL_TIMERS, PRODUCTION_TIMERS, type Timers } from '../common/config.js'
import { MAX_CHUNK_SIZE, MIN_CHUNK_SIZE } from '../common/layout.js'
import { chainStatus, type RoutingInfo } from '../common/types.js'
import { RpcClient } from '../rpc/index.js'
import { uploadChainRows, uploadChainTableIds } from './chains.js'
import { formatChainTableCsv, formatChainsCsv } from './csv.js'
import {
  clusterExists,
  findProcess,
  readClusterFile,
  resolveClusterDir,
  writeClusterFile,
  type ClusterFile,
  type ClusterProcess,
  type ClusterSettings,
  type TimerProfile,
} from './cluster-file.js'
import { raceAbort } from './interrupt.js'
import { initCluster } from './nodes.js'
import { defaultStripeSize, planLayout, type ClusterLayout } from './placement.js'
import { pickFreePorts, portFree } from './ports.js'
import { daemonsUnder, isAlive, logTail, processAlive, signalProcess, spawnDaemon, stopProcesses, waitExit } from './process.js'
import { fetchRouting, listOrphanTargets, openAdminSession, type AdminSession } from './session.js'
import { createTargets } from './targets.js'
import { isPowerOfTwo } from './units.js'
import { fuseClusterRole } from '../fuse/cluster-role.js'
import { detachAllUnder } from '../fuse/mounts.js'
import { MOUNTS_DIR, listClusterMounts, stopClusterMounts, type MountRecordStatus } from '../fuse/cluster-mounts.js'
import { metaClusterRole } from '../meta/cluster-role.js'

export const MGMTD_NODE_ID = 1
export const STORAGE_NODE_ID_BASE = 10000
export const LISTEN_HOST = '127.0.0.1'
/**
 * The root layout's chunk size when `cluster up` is not told one: 4 MiB, the
 * object size of Ceph and the block size of JuiceFS (3FS's deploy guide uses
 * 1 MiB). Every chunk write pays a fixed cost on each replica (a data sync,
 * metadata commits, a hop of the chain) and every read a fixed RPC cost;
 * measured here (bench/RESULTS.md) they are ~6 ms of CPU per replicated write
 * and ~0.45 ms per read, more than moving a MiB, so 1 MiB chunks halve what a
 * replicated write achieves on this class of machine. The price is paid by
 * overwrites inside a committed chunk, which copy the whole chunk.
 */
export const DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024

export const TIMER_PROFILES: Record<TimerProfile, Timers> = { local: LOCAL_TIMERS, production: PRODUCTION_TIMERS }

export type ProgressEvent = { stage: string; state: 'start' | 'update' | 'done' | 'fail'; detail?: string }
export type ProgressSink = (e: ProgressEvent) => void

/** Context a role's config builder gets. */
export interface RoleConfigContext {
  dir: string
  name: string
  nodeId: number
  /** host:port the process must listen on */
  listen: string
  dataDir: string
  mgmtdAddresses: string[]
  timers: Timers
  settings: ClusterSettings
}

/**
 * A process role `cluster up` starts after the storage bootstrap (meta, fuse,
 * sandbox daemon…). Later parts register theirs with registerClusterRole.
 */
export interface ClusterRoleSpec {
  role: string
  /** start order among extra roles (lower first); they stop in reverse */
  order: number
  /** how many processes for these settings (0: none, e.g. fuse with --no-mount) */
  count(settings: ClusterSettings): number
  /** node id of the i-th process (1-based) */
  nodeId(i: number): number
  /** process name of the i-th process (default `<role>-<i>`) */
  name?(i: number): string
  /** the JSON config `strata daemon <role> --config` reads */
  config(ctx: RoleConfigContext): Record<string, unknown>
  /** checks, before `cluster up` starts or writes anything, that the process can start with this config (e.g. a usable mount point) */
  preflight?(config: Record<string, unknown>): void
  /** waits until the process is usable (default: it answers RPC echo) */
  ready?(p: ClusterProcess, s: AdminSession, deadline: number): Promise<void>
  /** `cluster down`, while every process still runs: wind down what the process serves (e.g. sandboxes) */
  beforeStop?(p: ClusterProcess): Promise<void>
  /** after `cluster down`/`destroy` stopped it (or found it dead): release what it held (e.g. a FUSE mount) */
  cleanup?(p: ClusterProcess): Promise<void>
  /** files and empty directories the role keeps directly in the cluster directory; `cluster destroy` removes them */
  files?: string[]
}

const extraRoles = new Map<string, ClusterRoleSpec>()

export function registerClusterRole(spec: ClusterRoleSpec): void {
  extraRoles.set(spec.role, spec)
}

export function clusterRoles(): ClusterRoleSpec[] {
  return [...extraRoles.values()].sort((a, b) => a.order - b.order)
}

export interface ClusterUpOptions {
  dir?: string | null
  name?: string
  storageNodes?: number
  targetsPerNode?: number
  replicas?: number
  chunkSize?: number
  /** default min(chains, 16) */
  stripeSize?: number
  chainTableId?: number
  /** mgmtd gets this port, storage-i port+i, later roles the ports after */
  basePort?: number | null
  mount?: boolean
  sandbox?: boolean
  /** warm pools of the sandbox daemon */
  warmPool?: Array<{ image: string; count: number }>
  timers?: TimerProfile
  /** false: start the processes but leave init-cluster, targets and chains to the operator */
  bootstrap?: boolean
  /** overall deadline for the bootstrap (default 60 s local, 300 s production) */
  timeoutMs?: number
  /** leave processes running when the bootstrap fails (default: stop them) */
  keepOnFailure?: boolean
  /** aborting it (SIGINT/SIGTERM in the CLI) stops the bootstrap and what it started; the error is CANCELLED */
  signal?: AbortSignal
  progress?: ProgressSink
}

export interface ClusterUpResult {
  cluster: ClusterFile
  /** true when an existing, stopped cluster was started again instead of created */
  restarted: boolean
  elapsedMs: number
  /** restart only: chain targets their node holds offline (a diverged resync, a disk error), which the restart did not wait for */
  heldOffline?: ChainProblem[]
}

function check(cond: boolean, msg: string): void {
  if (!cond) throw new StrataError('INVALID_ARGUMENT', msg)
}

/** Settings with defaults applied and validated. */
export function clusterSettings(o: ClusterUpOptions): { settings: ClusterSettings; layout: ClusterLayout } {
  const storageNodes = o.storageNodes ?? 3
  const targetsPerNode = o.targetsPerNode ?? 2
  const replicas = o.replicas ?? 3
  const chunkSize = o.chunkSize ?? DEFAULT_CHUNK_SIZE
  const chainTableId = o.chainTableId ?? 1
  check(Number.isInteger(storageNodes) && storageNodes >= 1 && storageNodes <= 999, `--storage-nodes must be in [1, 999], got ${storageNodes}`)
  check(isPowerOfTwo(chunkSize) && chunkSize >= MIN_CHUNK_SIZE && chunkSize <= MAX_CHUNK_SIZE, `--chunk-size must be a power of two from 4K to 2G, got ${chunkSize}`)
  check(Number.isInteger(chainTableId) && chainTableId > 0 && chainTableId <= 0xffffffff, `--chain-table-id must be an integer in [1, 4294967295] (3FS chain table ids are u32), got ${chainTableId}`)
  const nodeIds = Array.from({ length: storageNodes }, (_, i) => STORAGE_NODE_ID_BASE + i + 1)
  const layout = planLayout({ nodeIds, targetsPerNode, replicas })
  const stripeSize = o.stripeSize ?? defaultStripeSize(layout.chains.length)
  check(Number.isInteger(stripeSize) && stripeSize >= 1, `--stripe-size must be a positive integer, got ${stripeSize}`)
  check(stripeSize <= layout.chains.length, `--stripe-size ${stripeSize} exceeds the ${layout.chains.length} chains of the table`)
  const basePort = o.basePort ?? null
  if (basePort !== null) check(Number.isInteger(basePort) && basePort > 0 && basePort < 65536, `--base-port must be a TCP port, got ${basePort}`)
  const timers = o.timers ?? 'local'
  check(timers === 'local' || timers === 'production', `--timers must be local or production, got ${timers}`)
  return {
    settings: { storageNodes, targetsPerNode, replicas, chunkSize, stripeSize, chainTableId, basePort, mount: o.mount ?? true, sandbox: o.sandbox ?? true, ...(o.warmPool?.length ? { warmPool: o.warmPool } : {}), timers, bootstrap: o.bootstrap ?? true },
    layout,
  }
}

interface PlannedProcess {
  proc: ClusterProcess
  config: Record<string, unknown>
  spec?: ClusterRoleSpec
}

/** Runs the roles' preflight checks; a failure names the process it is about. */
function preflight(items: Array<{ proc: ClusterProcess; config: () => Record<string, unknown> | undefined }>): void {
  for (const { proc, config } of items) {
    const spec = extraRoles.get(proc.role)
    if (!spec?.preflight) continue
    const c = config()
    if (!c) continue
    try {
      spec.preflight(c)
    } catch (e) {
      const se = toStrataError(e)
      throw new StrataError(se.code, `cannot start ${proc.name}: ${se.reason}`, { cause: e })
    }
  }
}

function readConfig(p: ClusterProcess): Record<string, unknown> | undefined {
  try {
    return JSON.parse(fs.readFileSync(p.configFile, 'utf8')) as Record<string, unknown>
  } catch {
    // a missing config fails at start, with the process's log
    return undefined
  }
}

async function choosePorts(count: number, basePort: number | null): Promise<number[]> {
  if (basePort === null) return pickFreePorts(count, LISTEN_HOST)
  const ports = Array.from({ length: count }, (_, i) => basePort + i)
  if (ports[ports.length - 1]! > 65535) throw new StrataError('INVALID_ARGUMENT', `--base-port ${basePort} leaves no room for ${count} ports`)
  for (const p of ports) if (!(await portFree(p, LISTEN_HOST))) throw new StrataError('INVALID_ARGUMENT', `port ${p} (from --base-port ${basePort}) is in use`)
  return ports
}

async function planProcesses(dir: string, settings: ClusterSettings): Promise<PlannedProcess[]> {
  const timers = TIMER_PROFILES[settings.timers]
  type Slot = { name: string; role: string; nodeId: number; spec?: ClusterRoleSpec }
  const slots: Slot[] = [{ name: 'mgmtd', role: 'mgmtd', nodeId: MGMTD_NODE_ID }]
  for (let i = 1; i <= settings.storageNodes; i++) slots.push({ name: `storage-${i}`, role: 'storage', nodeId: STORAGE_NODE_ID_BASE + i })
  for (const spec of clusterRoles()) {
    const n = spec.count(settings)
    for (let i = 1; i <= n; i++) slots.push({ name: spec.name?.(i) ?? `${spec.role}-${i}`, role: spec.role, nodeId: spec.nodeId(i), spec })
  }
  const ports = await choosePorts(slots.length, settings.basePort)
  const mgmtdAddresses = [`${LISTEN_HOST}:${ports[0]}`]
  return slots.map((s, i) => {
    const listen = `${LISTEN_HOST}:${ports[i]}`
    const proc: ClusterProcess = {
      name: s.name,
      role: s.role,
      nodeId: s.nodeId,
      address: listen,
      pid: null,
      configFile: path.join(dir, 'config', `${s.name}.json`),
      logFile: path.join(dir, 'logs', `${s.name}.log`),
      dataDir: path.join(dir, 'data', s.name),
    }
    let config: Record<string, unknown>
    if (s.role === 'mgmtd') config = { nodeId: s.nodeId, dataDir: proc.dataDir, listen, timers }
    else if (s.role === 'storage') config = { nodeId: s.nodeId, dataDir: proc.dataDir, listen, mgmtdAddresses, timers }
    else config = s.spec!.config({ dir, name: s.name, nodeId: s.nodeId, listen, dataDir: proc.dataDir, mgmtdAddresses, timers, settings })
    return { proc, config, ...(s.spec ? { spec: s.spec } : {}) }
  })
}

/** Error for a process that failed to come up, with the end of its log. */
export function processError(code: 'TIMEOUT' | 'INTERNAL', p: ClusterProcess, what: string): StrataError {
  const tail = logTail(p.logFile, 20)
  return new StrataError(code, `${what}\n--- last lines of ${p.logFile}:\n${tail || '(log is empty)'}`)
}

function remaining(deadline: number): number {
  return Math.max(0, deadline - Date.now())
}

/** Waits until the process answers RPC echo; fails fast if it exits. */
export async function waitProcessReady(p: ClusterProcess, rpc: RpcClient, deadline: number): Promise<void> {
  for (;;) {
    if (!processAlive(p)) throw processError('INTERNAL', p, `${p.name} (pid ${p.pid}) exited during startup`)
    try {
      await rpc.echo(p.address, null, { timeoutMs: Math.max(200, Math.min(1000, remaining(deadline))) })
      return
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw processError('TIMEOUT', p, `${p.name} did not answer on ${p.address} in time`)
    await sleep(100)
  }
}

function assertAllAlive(ps: ClusterProcess[]): void {
  for (const p of ps) if (p.pid && !processAlive(p)) throw processError('INTERNAL', p, `${p.name} (pid ${p.pid}) exited`)
}

/** Polls routing info until `pred` holds; `describe` says what is missing (for progress and the timeout error). */
async function waitRouting(
  s: AdminSession,
  ps: ClusterProcess[],
  deadline: number,
  pred: (ri: RoutingInfo) => boolean,
  describe: (ri: RoutingInfo | null) => { detail: string; culprit?: ClusterProcess },
  onUpdate?: (detail: string) => void,
): Promise<RoutingInfo> {
  let last: RoutingInfo | null = null
  let lastDetail = ''
  for (;;) {
    assertAllAlive(ps)
    try {
      last = await fetchRouting(s)
      if (pred(last)) return last
    } catch (e) {
      if (!isStrataError(e) || !e.retryable) throw e
    }
    const d = describe(last)
    if (d.detail !== lastDetail) onUpdate?.((lastDetail = d.detail))
    if (Date.now() > deadline) {
      const culprit = d.culprit ?? ps.find((p) => p.role === 'mgmtd')!
      throw processError('TIMEOUT', culprit, `timed out waiting: ${d.detail}`)
    }
    await sleep(150)
  }
}

function storageOf(ps: ClusterProcess[], nodeId: number): ClusterProcess | undefined {
  return ps.find((p) => p.nodeId === nodeId)
}

/**
 * Every chain (or the given ones) SERVING with every target UPTODATE. With
 * `heldOffline`, a target its node holds offline (it says why) is not waited
 * for, as long as its chain serves from the others: it comes back only when
 * the operator acts (docs/cli.md, "A resync that cannot finish").
 */
export function chainsReady(ri: RoutingInfo, chainIds?: number[], o: { heldOffline?: boolean } = {}): boolean {
  const chains = chainIds ? chainIds.map((id) => ri.chains[String(id)]) : Object.values(ri.chains)
  if (chains.length === 0) return false
  const serving = (t: { targetId: number; publicState: string }) => t.publicState === 'SERVING' && ri.targets[String(t.targetId)]?.localState === 'UPTODATE'
  const held = (t: { targetId: number; publicState: string }) => !!o.heldOffline && t.publicState === 'OFFLINE' && !!ri.targets[String(t.targetId)]?.offlineReason
  return chains.every((c) => !!c && c.targets.some(serving) && c.targets.every((t) => serving(t) || held(t)))
}

function describeChains(ps: ClusterProcess[], chainIds: number[] | undefined) {
  return (ri: RoutingInfo | null): { detail: string; culprit?: ClusterProcess } => {
    if (!ri) return { detail: 'mgmtd not answering' }
    const chains = chainIds ? chainIds.map((id) => ri.chains[String(id)]) : Object.values(ri.chains)
    const ok = chains.filter((c) => c && c.targets.every((t) => t.publicState === 'SERVING' && ri.targets[String(t.targetId)]?.localState === 'UPTODATE'))
    for (const c of chains) {
      if (!c) continue
      const bad = c.targets.find((t) => t.publicState !== 'SERVING' || ri.targets[String(t.targetId)]?.localState !== 'UPTODATE')
      if (bad) {
        const ti = ri.targets[String(bad.targetId)]
        const culprit = ti ? storageOf(ps, ti.nodeId) : undefined
        return {
          detail: `${ok.length}/${chains.length} chains serving; chain ${c.chainId} is ${chainStatus(c)}, target ${bad.targetId} ${bad.publicState}-${ti?.localState ?? 'OFFLINE'}${ti?.offlineReason ? ` (held offline by its node: ${ti.offlineReason})` : ''}`,
          ...(culprit ? { culprit } : {}),
        }
      }
    }
    return { detail: `${ok.length}/${chains.length} chains serving` }
  }
}

function nodesConnected(ps: ClusterProcess[]) {
  return (ri: RoutingInfo) => ps.every((p) => ri.nodes[String(p.nodeId)]?.status === 'HEARTBEAT_CONNECTED')
}

function describeNodes(ps: ClusterProcess[]) {
  return (ri: RoutingInfo | null) => {
    if (!ri) return { detail: 'mgmtd not answering' }
    const missing = ps.filter((p) => ri.nodes[String(p.nodeId)]?.status !== 'HEARTBEAT_CONNECTED')
    return {
      detail: `${ps.length - missing.length}/${ps.length} nodes connected${missing.length ? `; waiting for ${missing.map((p) => `${p.name} (${ri.nodes[String(p.nodeId)]?.status ?? 'unknown'})`).join(', ')}` : ''}`,
      ...(missing[0] ? { culprit: missing[0] } : {}),
    }
  }
}

class Stages {
  /** the stage running now (what an interruption reports) */
  current: string | undefined
  private stopped = false
  constructor(private readonly sink?: ProgressSink) {}
  private emit(e: ProgressEvent): void {
    if (!this.stopped) this.sink?.(e)
  }
  async run<T>(stage: string, fn: (update: (detail: string) => void) => Promise<T>, done?: (v: T) => string | undefined): Promise<T> {
    this.current = stage
    this.emit({ stage, state: 'start' })
    let v: T
    try {
      v = await fn((detail) => this.emit({ stage, state: 'update', detail }))
    } catch (e) {
      this.emit({ stage, state: 'fail', detail: toStrataError(e).code })
      throw e
    }
    const d = done?.(v)
    this.emit({ stage, state: 'done', ...(d ? { detail: d } : {}) })
    if (this.current === stage) this.current = undefined
    return v
  }
  /** An interruption ends the stage running now; what it still does in the background is not reported. */
  interrupt(): void {
    if (this.current) this.emit({ stage: this.current, state: 'fail', detail: 'CANCELLED' })
    this.stopped = true
  }
}

/**
 * The error of an interrupted `up` (the signal's CANCELLED, with the stage it
 * hit and what was stopped), or `e` itself when the command was not interrupted.
 */
function interruptedUp(e: unknown, signal: AbortSignal | undefined, stages: Stages, stopped: string[] | null): unknown {
  if (!signal?.aborted) return e
  const reason = toStrataError(signal.reason)
  const during = stages.current ? ` while ${stages.current}` : ''
  const what = stopped === null ? 'the processes it started are left running (--keep-on-failure)' : stopped.length ? `stopped ${stopped.join(', ')}` : 'nothing had been started'
  return new StrataError('CANCELLED', `${reason.reason}${during}; ${what}`, { cause: e, ...(reason.detail ? { detail: reason.detail } : {}) })
}

function writeConfig(p: ClusterProcess, config: Record<string, unknown>): void {
  fs.mkdirSync(path.dirname(p.configFile), { recursive: true })
  fs.mkdirSync(p.dataDir, { recursive: true })
  fs.writeFileSync(p.configFile, JSON.stringify(config, null, 2) + '\n')
}

/** DIR/config/chains.csv and chain-table.csv: the planned layout in upload-chains / upload-chain-table form. */
function writeLayoutFiles(dir: string, layout: ClusterLayout): void {
  fs.writeFileSync(path.join(dir, 'config', 'chains.csv'), formatChainsCsv(layout.chains))
  fs.writeFileSync(path.join(dir, 'config', 'chain-table.csv'), formatChainTableCsv(layout.chains.map((c) => c.chainId)))
  const cmds = layout.targets.map((t) => `create-target --node-id ${t.nodeId} --disk-index ${t.diskIndex} --target-id ${t.targetId} --chain-id ${t.chainId}`)
  fs.writeFileSync(path.join(dir, 'config', 'create_target_cmd.txt'), cmds.join('\n') + '\n')
}

function anyAlive(c: ClusterFile): ClusterProcess[] {
  return c.processes.filter(processAlive)
}

/** Records the dead processes of `c` as stopped: their old pids must not be checked again. */
function forgetPids(dir: string, c: ClusterFile): void {
  for (const p of c.processes) if (!processAlive(p)) p.pid = null
  writeClusterFile(dir, c)
}

/**
 * After a failed or interrupted `up`: stops whatever it started (later roles first), releases what
 * the roles held (a FUSE mount) and records the processes as stopped, as `cluster down` does.
 */
async function stopStarted(dir: string, c: ClusterFile): Promise<string[]> {
  const alive = [...c.processes].reverse().filter(processAlive)
  await stopProcesses(alive, 3000).catch(() => [])
  await cleanupRoles(c)
  forgetPids(dir, c)
  return alive.map((p) => p.name)
}

/** Starts a process of the cluster with its saved config and records its pid. */
function launch(dir: string, c: ClusterFile, p: ClusterProcess, signal?: AbortSignal): void {
  // an interrupted `up` stops what it started: nothing may start after that
  signal?.throwIfAborted()
  p.pid = spawnDaemon(p)
  p.startedAt = Date.now()
  writeClusterFile(dir, c)
}

/**
 * `cluster up`: creates and bootstraps a new cluster in `dir`, or starts a
 * stopped one again with its saved configs (ports and data kept). Refuses a
 * directory where any process of the cluster still runs (CLUSTER_RUNNING).
 */
/** mkdir -p DIR; a file in the way is named as such, not as mkdir's EEXIST or ENOTDIR. */
function makeClusterDir(dir: string): string | undefined {
  try {
    return fs.mkdirSync(dir, { recursive: true })
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === 'EEXIST' || code === 'ENOTDIR') {
      throw new StrataError('INVALID_ARGUMENT', `cluster directory ${dir} ${code === 'EEXIST' ? 'is a file, not a directory' : 'has a file, not a directory, in its path'}`)
    }
    throw e
  }
}

export async function clusterUp(o: ClusterUpOptions = {}): Promise<ClusterUpResult> {
  const t0 = Date.now()
  const dir = resolveClusterDir(o.dir)
  if (clusterExists(dir)) {
    const c = readClusterFile(dir)
    const alive = anyAlive(c)
    if (alive.length) {
      throw new StrataError('CLUSTER_RUNNING', `cluster in ${dir} is running (${alive.map((p) => `${p.name} pid ${p.pid}`).join(', ')}); stop it with: strata cluster down --dir ${dir}`)
    }
    if (c.state !== 'creating') return restartCluster(dir, c, o, t0)
    // an earlier `cluster up` failed half way: start over
    await clusterDestroy({ dir })
  }
  const { settings, layout } = clusterSettings(o)
  const timeoutMs = o.timeoutMs ?? (settings.timers === 'production' ? 300_000 : 60_000)
  const deadline = t0 + timeoutMs
  const stages = new Stages(o.progress)
  // the topmost directory this call creates (undefined when DIR existed)
  const madeDir = makeClusterDir(dir)
  let planned: Awaited<ReturnType<typeof planProcesses>>
  try {
    planned = await stages.run('planning', async () => {
      const ps = await planProcesses(dir, settings)
      preflight(ps.map((p) => ({ proc: p.proc, config: () => p.config })))
      return ps
    }, (ps) => `${ps.length} processes, ${layout.chains.length} chains`)
  } catch (e) {
    // refused before anything was written or started (ports, preflight): leave no empty DIR behind,
    // but only a directory this call made — an existing DIR is the caller's
    if (madeDir) fs.rmSync(madeDir, { recursive: true, force: true })
    throw e
  }
  const cluster: ClusterFile = {
    version: 1,
    name: o.name ?? path.basename(dir),
    created: new Date().toISOString(),
    dir,
    settings,
    processes: planned.map((p) => p.proc),
    mgmtdAddresses: [planned[0]!.proc.address],
    layout,
    state: 'creating',
  }
  for (const p of planned) writeConfig(p.proc, p.config)
  writeLayoutFiles(dir, layout)
  fs.mkdirSync(path.join(dir, 'logs'), { recursive: true })
  writeClusterFile(dir, cluster)

  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 5000, maxBackoffMs: 100 })
  const s = openAdminSession({ mgmtdAddresses: cluster.mgmtdAddresses, clusterDir: dir, timeoutMs: 5000 })
  s.cluster = cluster
  const ready = (): ClusterUpResult => {
    cluster.state = 'ready'
    writeClusterFile(dir, cluster)
    return { cluster, restarted: false, elapsedMs: Date.now() - t0 }
  }
  // raced against the signal: an interrupted `up` stops what it started at once, while a
  // wait or RPC of the bootstrap may still be under way (launch refuses to start more)
  const work = async (): Promise<ClusterUpResult> => {
    const mgmtd = planned[0]!.proc
    const storage = planned.filter((p) => p.proc.role === 'storage').map((p) => p.proc)
    const extras = planned.filter((p) => p.spec)
    await stages.run('starting mgmtd', async () => {
      launch(dir, cluster, mgmtd, o.signal)
      await waitProcessReady(mgmtd, rpc, deadline)
    }, () => mgmtd.address)
    if (settings.bootstrap) {
      await stages.run('init-cluster', () => initCluster(s, { chainTableId: settings.chainTableId, chunkSize: settings.chunkSize, stripeSize: settings.stripeSize }), () => `table ${settings.chainTableId}, chunk ${settings.chunkSize}, stripe ${settings.stripeSize}`)
    }
    await stages.run(`starting ${storage.length} storage nodes`, async (update) => {
      for (const p of storage) launch(dir, cluster, p, o.signal)
      let n = 0
      for (const p of storage) {
        await waitProcessReady(p, rpc, deadline)
        update(`${++n}/${storage.length} listening`)
      }
      await waitRouting(s, [mgmtd, ...storage], deadline, nodesConnected(storage), describeNodes(storage), update)
    })
    if (!settings.bootstrap) return ready()
    await stages.run('creating targets', async (update) => {
      let n = 0
      for (const p of storage) {
        const r = await createTargets(s, { nodeId: p.nodeId })
        n += r.result.targets.length
        update(`${n}/${layout.targets.length} created`)
      }
      await waitTargetsReported(s, [mgmtd, ...storage], layout, deadline)
    }, () => `${layout.targets.length} targets`)
    await stages.run('uploading chains', async () => {
      await uploadChainRows(s, layout.chains.map((c, i) => ({ chainId: c.chainId, targets: c.targets, line: i + 2 })), { source: 'cluster layout' })
      await uploadChainTableIds(s, settings.chainTableId, layout.chains.map((c) => c.chainId), { desc: `strata cluster up: ${settings.replicas} replicas`, source: 'cluster layout' })
    }, () => `${layout.chains.length} chains, table ${settings.chainTableId}`)
    await stages.run('waiting for chains to serve', (update) =>
      waitRouting(s, [mgmtd, ...storage], deadline, (ri) => chainsReady(ri, layout.chains.map((c) => c.chainId)), describeChains(storage, layout.chains.map((c) => c.chainId)), update),
    )
    await startExtras(dir, cluster, extras.map((e) => ({ proc: e.proc, spec: e.spec! })), s, rpc, deadline, stages, o.signal)
    return ready()
  }
  try {
    return await raceAbort(work(), o.signal)
  } catch (e) {
    if (o.signal?.aborted) stages.interrupt()
    const stopped = o.keepOnFailure ? null : await stopStarted(dir, cluster)
    throw interruptedUp(e, o.signal, stages, stopped)
  } finally {
    s.close()
    rpc.close()
  }
}

async function waitTargetsReported(s: AdminSession, ps: ClusterProcess[], layout: ClusterLayout, deadline: number): Promise<void> {
  const want = layout.targets.map((t) => t.targetId)
  for (;;) {
    assertAllAlive(ps)
    const ri = await fetchRouting(s)
    const known = new Set([...Object.keys(ri.targets).map(Number), ...(await listOrphanTargets(s)).map((t) => t.targetId)])
    const missing = want.filter((t) => !known.has(t))
    if (missing.length === 0) return
    if (Date.now() > deadline) {
      const t = layout.targets.find((x) => x.targetId === missing[0])!
      throw processError('TIMEOUT', storageOf(ps, t.nodeId) ?? ps[0]!, `timed out waiting for storage nodes to report targets ${missing.join(', ')}`)
    }
    await sleep(150)
  }
}

async function startExtras(
  dir: string,
  cluster: ClusterFile,
  extras: Array<{ proc: ClusterProcess; spec: ClusterRoleSpec }>,
  s: AdminSession,
  rpc: RpcClient,
  deadline: number,
  stages: Stages,
  signal: AbortSignal | undefined,
): Promise<void> {
  for (const e of extras) {
    await stages.run(`starting ${e.proc.name}`, async () => {
      launch(dir, cluster, e.proc, signal)
      if (e.spec.ready) await e.spec.ready(e.proc, s, deadline)
      else await waitProcessReady(e.proc, rpc, deadline)
    }, () => e.proc.address)
  }
}

async function restartCluster(dir: string, c: ClusterFile, o: ClusterUpOptions, t0: number): Promise<ClusterUpResult> {
  const timeoutMs = o.timeoutMs ?? (c.settings.timers === 'production' ? 300_000 : 60_000)
  const deadline = t0 + timeoutMs
  const stages = new Stages(o.progress)
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 5000, maxBackoffMs: 100 })
  const s = openAdminSession({ mgmtdAddresses: c.mgmtdAddresses, clusterDir: dir, timeoutMs: 5000 })
  const mgmtd = c.processes.filter((p) => p.role === 'mgmtd')
  const storage = c.processes.filter((p) => p.role === 'storage')
  const others = c.processes.filter((p) => p.role !== 'mgmtd' && p.role !== 'storage')
  // Every recorded process is dead (clusterUp checked), but processes that died without
  // `cluster down` still carry their old pids: forget them, or the liveness checks below
  // would take a not-yet-restarted process for one that exited during startup.
  forgetPids(dir, c)
  preflight(c.processes.map((p) => ({ proc: p, config: () => readConfig(p) })))
  const work = async (): Promise<ClusterUpResult> => {
    await stages.run('starting mgmtd', async () => {
      for (const p of mgmtd) launch(dir, c, p, o.signal)
      for (const p of mgmtd) await waitProcessReady(p, rpc, deadline)
    })
    await stages.run(`starting ${storage.length} storage nodes`, async (update) => {
      for (const p of storage) launch(dir, c, p, o.signal)
      for (const p of storage) await waitProcessReady(p, rpc, deadline)
      await waitRouting(s, [...mgmtd, ...storage], deadline, nodesConnected(storage), describeNodes(storage), update)
    })
    // only the chains that exist: a --no-bootstrap cluster may have none yet
    const existing = Object.keys((await fetchRouting(s)).chains).map(Number)
    let heldOffline: ChainProblem[] = []
    if (existing.length) {
      // a target held offline stays so across restarts: waiting for it would time out and stop everything
      const ri = await stages.run('waiting for chains to serve', (update) =>
        waitRouting(s, [...mgmtd, ...storage], deadline, (r) => chainsReady(r, existing, { heldOffline: true }), describeChains(storage, existing), update),
      )
      heldOffline = summarizeChains(ri).problems
    }
    for (const p of others) {
      await stages.run(`starting ${p.name}`, async () => {
        launch(dir, c, p, o.signal)
        const spec = extraRoles.get(p.role)
        if (spec?.ready) await spec.ready(p, s, deadline)
        else await waitProcessReady(p, rpc, deadline)
      })
    }
    return { cluster: c, restarted: true, elapsedMs: Date.now() - t0, heldOffline }
  }
  try {
    return await raceAbort(work(), o.signal)
  } catch (e) {
    if (o.signal?.aborted) stages.interrupt()
    const stopped = o.keepOnFailure ? null : await stopStarted(dir, c)
    throw interruptedUp(e, o.signal, stages, stopped)
  } finally {
    s.close()
    rpc.close()
  }
}

export interface ClusterDownResult {
  dir: string
  stopped: string[]
  /** processes that ignored SIGTERM and got SIGKILL */
  killed: string[]
  /** `strata fs mount` mounts of this cluster that were stopped (their daemons got SIGTERM) or, left dead, cleared */
  unmounted: string[]
}

/**
 * `cluster down`: first the `fs mount` daemons recorded in DIR/mounts (they
 * flush and unmount while meta and storage still serve them), then SIGTERM
 * every process (later roles first, mgmtd last), SIGKILL stragglers. Data is kept.
 */
export async function clusterDown(o: { dir?: string | null; graceMs?: number } = {}): Promise<ClusterDownResult> {
  const dir = resolveClusterDir(o.dir)
  const c = readClusterFile(dir)
  const mounts = await stopClusterMounts(dir, { graceMs: o.graceMs ?? 10_000 })
  const order = [...c.processes].reverse()
  const running = order.filter(processAlive)
  // stop the clients of storage first, then storage, then mgmtd, so nobody
  // sees its servers vanish while it still has work
  // (later roles first: the fuse daemon flushes through meta before meta stops)
  const extraRoleNames = [...new Set(running.filter((p) => p.role !== 'storage' && p.role !== 'mgmtd').map((p) => p.role))]
  extraRoleNames.sort((a, b) => (extraRoles.get(b)?.order ?? 0) - (extraRoles.get(a)?.order ?? 0))
  const groups = [...extraRoleNames.map((r) => running.filter((p) => p.role === r)), running.filter((p) => p.role === 'storage'), running.filter((p) => p.role === 'mgmtd')]
  for (const r of extraRoleNames) {
    const spec = extraRoles.get(r)
    if (!spec?.beforeStop) continue
    for (const p of running.filter((x) => x.role === r)) await spec.beforeStop(p).catch(() => {})
  }
  const killed: string[] = []
  for (const g of groups) if (g.length) killed.push(...(await stopProcesses(g, o.graceMs ?? 10_000)))
  await cleanupRoles(c)
  for (const p of c.processes) p.pid = null
  writeClusterFile(dir, c)
  return { dir, stopped: running.map((p) => p.name), killed: [...mounts.killed, ...killed], unmounted: [...mounts.stopped, ...mounts.cleared] }
}

/** Runs every role's cleanup hook for its processes (dead ones included). */
async function cleanupRoles(c: ClusterFile): Promise<void> {
  for (const p of c.processes) {
    const spec = extraRoles.get(p.role)
    if (spec?.cleanup && !processAlive(p)) await spec.cleanup(p).catch(() => {})
  }
}

export interface ProcessStatus extends ClusterProcess {
  alive: boolean
  /** the node's status in mgmtd (when mgmtd answers) */
  nodeStatus?: string
}

export interface ChainSummary {
  total: number
  serving: number
  syncing: number
  degraded: number
  unavailable: number
  chains: Array<{ chainId: number; chainVersion: number; status: string; targets: string[] }>
  /** chain targets their storage node holds offline, and why (offline-target, a disk error, a diverged resync) */
  problems: ChainProblem[]
}

export interface ChainProblem {
  chainId: number
  targetId: number
  publicState: string
  localState: string
  reason: string
}

/** `cluster status`'s chain summary of routing info. */
export function summarizeChains(ri: RoutingInfo): ChainSummary {
  const list = Object.values(ri.chains).sort((a, b) => a.chainId - b.chainId)
  const statuses = list.map((ch) => chainStatus(ch))
  const problems: ChainProblem[] = []
  for (const ch of list) {
    for (const t of ch.targets) {
      const ti = ri.targets[String(t.targetId)]
      if (ti?.offlineReason) problems.push({ chainId: ch.chainId, targetId: t.targetId, publicState: t.publicState, localState: ti.localState, reason: ti.offlineReason })
    }
  }
  return {
    total: list.length,
    serving: statuses.filter((x) => x === 'SERVING').length,
    syncing: statuses.filter((x) => x === 'SYNCING').length,
    degraded: statuses.filter((x) => x.startsWith('SERVING(')).length,
    unavailable: statuses.filter((x) => x === 'UNAVAILABLE').length,
    chains: list.map((ch, i) => ({
      chainId: ch.chainId,
      chainVersion: ch.chainVersion,
      status: statuses[i]!,
      targets: ch.targets.map((t) => `${t.targetId}(${t.publicState}-${ri.targets[String(t.targetId)]?.localState ?? 'OFFLINE'})`),
    })),
    problems,
  }
}

export interface ClusterStatus {
  name: string
  dir: string
  created: string
  settings: ClusterSettings
  running: boolean
  processes: ProcessStatus[]
  mgmtd: { reachable: boolean; routingInfoVersion?: number; error?: string }
  chains: ChainSummary | null
  /** `strata fs mount … --cluster DIR` mounts (DIR/mounts); the cluster's own fuse-1 is in processes */
  mounts: MountRecordStatus[]
}

/** `cluster status`: every process (alive from the pid and /proc) and, if mgmtd answers, node states and chains. */
export async function clusterStatus(o: { dir?: string | null; timeoutMs?: number } = {}): Promise<ClusterStatus> {
  const dir = resolveClusterDir(o.dir)
  const c = readClusterFile(dir)
  const processes: ProcessStatus[] = c.processes.map((p) => ({ ...p, alive: processAlive(p) }))
  let mgmtd: ClusterStatus['mgmtd'] = { reachable: false }
  let chains: ChainSummary | null = null
  if (processes.some((p) => p.role === 'mgmtd' && p.alive)) {
    const s = openAdminSession({ mgmtdAddresses: c.mgmtdAddresses, timeoutMs: o.timeoutMs ?? 2000 })
    try {
      const ri = await fetchRouting(s)
      mgmtd = { reachable: true, routingInfoVersion: ri.routingInfoVersion }
      for (const p of processes) {
        const n = ri.nodes[String(p.nodeId)]
        if (n) p.nodeStatus = n.status
      }
      chains = summarizeChains(ri)
    } catch (e) {
      mgmtd = { reachable: false, error: toStrataError(e).message }
    } finally {
      s.close()
    }
  }
  return { name: c.name, dir, created: c.created, settings: c.settings, running: processes.some((p) => p.alive), processes, mgmtd, chains, mounts: listClusterMounts(dir, { prune: true }) }
}

const SIGNALS = new Set(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGSTOP', 'SIGCONT', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'])

export function parseSignal(s: string): NodeJS.Signals {
  const up = s.toUpperCase()
  const name = /^\d+$/.test(up) ? ({ '9': 'SIGKILL', '15': 'SIGTERM', '2': 'SIGINT', '19': 'SIGSTOP', '18': 'SIGCONT', '1': 'SIGHUP' } as Record<string, string>)[up] : up.startsWith('SIG') ? up : `SIG${up}`
  if (!name || !SIGNALS.has(name)) throw new StrataError('INVALID_ARGUMENT', `unsupported signal "${s}" (KILL, TERM, INT, STOP, CONT, HUP, QUIT, USR1, USR2)`)
  return name as NodeJS.Signals
}

/** `cluster kill --node NAME [--signal KILL]`: signals one process; waits for it to exit for KILL/TERM/INT. */
export async function clusterKill(o: { dir?: string | null; node: string; signal?: string; timeoutMs?: number }): Promise<{ name: string; pid: number; signal: NodeJS.Signals; exited: boolean }> {
  const dir = resolveClusterDir(o.dir)
  const c = readClusterFile(dir)
  const p = findProcess(c, o.node)
  const signal = parseSignal(o.signal ?? 'KILL')
  if (!processAlive(p)) throw new StrataError('NOT_FOUND', `${p.name} is not running`)
  const pid = p.pid!
  signalProcess(p, signal)
  let exited = false
  if (signal === 'SIGKILL' || signal === 'SIGTERM' || signal === 'SIGINT') {
    const left = await waitExit([p], o.timeoutMs ?? 15_000)
    if (left.length) throw new StrataError('TIMEOUT', `${p.name} (pid ${pid}) still runs after ${signal}`)
    exited = true
  }
  return { name: p.name, pid, signal, exited }
}

/**
 * `cluster start --node NAME`: starts one stopped process again with its
 * saved config (same port, same data) and waits until it answers; storage and
 * later roles also until mgmtd sees them connected.
 */
export async function clusterStart(o: { dir?: string | null; node: string; timeoutMs?: number }): Promise<{ name: string; pid: number; address: string }> {
  const dir = resolveClusterDir(o.dir)
  const c = readClusterFile(dir)
  const p = findProcess(c, o.node)
  if (processAlive(p)) throw new StrataError('CLUSTER_RUNNING', `${p.name} is already running (pid ${p.pid})`)
  const deadline = Date.now() + (o.timeoutMs ?? 30_000)
  launch(dir, c, p)
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 5000, maxBackoffMs: 100 })
  try {
    const spec = extraRoles.get(p.role)
    if (spec?.ready) {
      // a role that knows when it is usable (the fuse role is a client, never a connected node)
      const s = openAdminSession({ mgmtdAddresses: c.mgmtdAddresses, timeoutMs: 3000 })
      try {
        await spec.ready(p, s, deadline)
      } finally {
        s.close()
      }
      return { name: p.name, pid: p.pid!, address: p.address }
    }
    await waitProcessReady(p, rpc, deadline)
    const mgmtdUp = c.processes.some((x) => x.role === 'mgmtd' && processAlive(x))
    if (p.role !== 'mgmtd' && mgmtdUp) {
      const s = openAdminSession({ mgmtdAddresses: c.mgmtdAddresses, timeoutMs: 3000 })
      try {
        await waitRouting(s, [p], deadline, nodesConnected([p]), describeNodes([p]))
      } finally {
        s.close()
      }
    }
  } finally {
    rpc.close()
  }
  return { name: p.name, pid: p.pid!, address: p.address }
}

export interface ClusterDestroyResult {
  dir: string
  stopped: string[]
  /**
   * Set when DIR/cluster.json could not be read (why) and --force cleaned up
   * without it: the processes were found by their config files under DIR.
   */
  unreadableDescription?: string
}

/**
 * `cluster destroy`: removes the cluster directory's contents; refuses a
 * running cluster unless forced (then stops it first). Forced, a directory
 * whose cluster.json is corrupt is cleaned up without it: its `fs mount`
 * daemons (DIR/mounts), then every `strata daemon … --config F` with F inside
 * DIR are stopped, whatever is mounted below DIR is detached, and the
 * directory goes. Nothing outside DIR is touched.
 */
export async function clusterDestroy(o: { dir?: string | null; force?: boolean }): Promise<ClusterDestroyResult> {
  const dir = resolveClusterDir(o.dir)
  let c: ClusterFile
  try {
    c = readClusterFile(dir)
  } catch (e) {
    if (o.force && isStrataError(e, 'BAD_CONFIG')) return destroyUndescribed(dir, e)
    throw e
  }
  const alive = anyAlive(c)
  let stopped: string[] = []
  const mounts = listClusterMounts(dir, { prune: true }).filter((m) => m.alive)
  if (alive.length || mounts.length) {
    const what = [...alive.map((p) => p.name), ...mounts.map((m) => `fs mount ${m.mountpoint} (pid ${m.pid})`)]
    if (!o.force) throw new StrataError('CLUSTER_RUNNING', `cluster in ${dir} is running (${what.join(', ')}); stop it first or pass --force`)
  }
  if (alive.length) {
    const r = await clusterDown({ dir, graceMs: 5000 })
    stopped = [...r.unmounted, ...r.stopped]
  } else {
    // a stopped cluster may still have `fs mount` daemons (or their dead mounts) left
    const r = await stopClusterMounts(dir, { graceMs: 5000 })
    stopped = [...r.stopped, ...r.cleared]
    await cleanupRoles(c)
  }
  removeClusterTree(dir, c.processes.map((p) => p.dataDir))
  return { dir, stopped }
}

/**
 * `destroy --force` of a directory whose cluster.json is corrupt: the
 * processes are found without it, by their command lines (daemonsUnder), and
 * stopped later roles first, storage, then mgmtd, as `cluster down` does.
 */
async function destroyUndescribed(dir: string, why: StrataError): Promise<ClusterDestroyResult> {
  // a cluster.json of some other tool (DIR is not a Strata cluster at all, say a --dir typo) must not
  // have DIR/data, config and logs removed: `cluster up` writes config/mgmtd.json before cluster.json,
  // and a cluster that ran has its daemons or mount records there
  const found = daemonsUnder(dir)
  if (!found.length && !looksLikeClusterDir(dir)) {
    throw new StrataError(
      'BAD_CONFIG',
      `${why.reason.replace(/; restore it, or .*$/, '')}; and ${dir} does not look like a Strata cluster directory (no ${path.join('config', 'mgmtd.json')}, no daemon or mount of it runs): nothing was stopped or removed`,
      { cause: why },
    )
  }
  const mounts = await stopClusterMounts(dir, { graceMs: 5000 })
  const rank = (p: ClusterProcess) => (p.role === 'mgmtd' ? 2 : p.role === 'storage' ? 1 : 0)
  const extra = found.filter((p) => rank(p) === 0)
  const roles = [...new Set(extra.map((p) => p.role))].sort((a, b) => (extraRoles.get(b)?.order ?? 1e9) - (extraRoles.get(a)?.order ?? 1e9))
  const groups = [...roles.map((r) => extra.filter((p) => p.role === r)), found.filter((p) => rank(p) === 1), found.filter((p) => rank(p) === 2)]
  for (const g of groups) if (g.length) await stopProcesses(g, 5000)
  // what a role holds beyond its process (a FUSE mount, sandboxes' cgroups), from its config under DIR
  for (const p of found) {
    const spec = extraRoles.get(p.role)
    if (spec?.cleanup && !processAlive(p)) await spec.cleanup(p).catch(() => {})
  }
  removeClusterTree(dir, [])
  return {
    dir,
    stopped: [...mounts.stopped, ...mounts.cleared, ...found.map((p) => `${p.name} (pid ${p.pid})`)],
    unreadableDescription: (why.cause as Error | undefined)?.message ?? why.reason,
  }
}

/** Whether `dir` holds what `cluster up` writes before cluster.json: config/mgmtd.json, a mgmtd config (or any mount record). */
function looksLikeClusterDir(dir: string): boolean {
  try {
    const c = JSON.parse(fs.readFileSync(path.join(dir, 'config', 'mgmtd.json'), 'utf8')) as { listen?: unknown; dataDir?: unknown }
    if (c && typeof c.listen === 'string' && typeof c.dataDir === 'string') return true
  } catch {
    // missing or not a mgmtd config
  }
  return listClusterMounts(dir).length > 0
}

/** Removes what a cluster keeps in `dir` (and data dirs inside it), after detaching every mount below it; `dir` itself if then empty. */
function removeClusterTree(dir: string, dataDirs: string[]): void {
  // Whatever is still mounted below the directory (layer mounts of a `strata serve` daemon whose state
  // dir is under DIR/data, a FUSE mount of a killed daemon) is detached first: removing the tree must
  // never reach into a mount.
  const still = detachAllUnder(dir)
  if (still.length) throw new StrataError('CLUSTER_RUNNING', `mounts below ${dir} could not be detached: ${still.join(', ')}`)
  for (const sub of ['data', 'config', 'logs', MOUNTS_DIR]) fs.rmSync(path.join(dir, sub), { recursive: true, force: true })
  for (const d of dataDirs) {
    // data dirs placed elsewhere by hand-edited descriptions
    if (!d.startsWith(dir + path.sep)) continue
    fs.rmSync(d, { recursive: true, force: true })
  }
  for (const spec of extraRoles.values()) {
    for (const f of spec.files ?? []) {
      const p = path.join(dir, f)
      // an empty directory (a mount point) goes with rmdir, which never reaches into a live mount
      try {
        if (fs.lstatSync(p).isDirectory()) fs.rmdirSync(p)
        else fs.rmSync(p)
      } catch {
        // absent, or a directory someone filled: theirs
      }
    }
  }
  fs.rmSync(path.join(dir, 'cluster.json'), { force: true })
  try {
    fs.rmdirSync(dir)
  } catch {
    // not empty: the operator keeps other files there
  }
}

export { isAlive }

// meta-1 and meta-2 (node ids 101, 102) over one KV at DIR/data/kv, after the storage bootstrap.
registerClusterRole(metaClusterRole)

// The FUSE mount at DIR/mnt (needs a meta role to be registered; --no-mount skips it).
registerClusterRole(fuseClusterRole(() => extraRoles.has('meta')))
