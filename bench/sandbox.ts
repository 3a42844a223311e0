// Sandbox benchmarks (issue 5), one image for all of them: the Debian
// bookworm minbase tree with python3, pip and git that the image benchmarks
// use (sandbox/image/debootstrap.ts, cached after the first build), imported
// into the DFS image store of the namespace cluster as one EROFS layer
// (importPath of the directory: a 'dir' import) and tagged bench/debian:1.
// Every sandbox runs the same command, `python3 -c 'print(1)'`, and must
// print 1.
//
// What users get is the node daemon over HTTP, so the Strata path the
// targets are judged on is that: a real `strata daemon sandbox --config FILE`
// process (as `cluster up` starts it, on the namespace cluster's FUSE mount,
// layerLingerMs at its default) driven through the SDK.
//
// - sandbox-start: create → first exec returns → delete, `iters` times at
//   concurrency 1 and 8, p50/p99 per cycle and sustained creates/s, for
//     strata         the node daemon over HTTP: SDK sandboxes.create({image:
//                    'bench/debian:1', resources, network: 'none'}) →
//                    sb.exec(argv) → sb.delete() (daemonCycle); the daemon's
//                    own create time (SandboxInfo.createMs) is kept per cycle
//     strata-pool    the same daemon and SDK calls with a warm pool of
//                    POOL_SIZE sandboxes of the image (config warmPool, the
//                    same resources and network as the request), full when
//                    each measured run starts; creates take a started sandbox
//                    while one is ready, else start their own. The issue
//                    allows a warm pool "on top, reported separately": its
//                    ratios are listed apart from the targets
//     strata-inproc  the same sandbox plane in this process, no daemon and no
//                    HTTP: LayerMounts + RootfsBuilder + ContainerBackend
//                    (strataCycle), with its phase breakdown; the node holds
//                    the layer mounted (a pin, as when any sandbox of the
//                    image runs). Reported without targets
//     podman         `podman run --rm` of the same tree (`podman import` of its
//                    tar), in a private podman store under the scratch directory
//     runc           bare `runc run` of a bundle whose rootfs was copied once
//                    before; our OCI config (ociSpec) with the command as the
//                    process and no agent; each run its own container id and config.json
//     eager          untar the image tar into a fresh directory, `runc run` as
//                    above, remove the directory
//   All get the same limits (1 CPU, 512 MiB, 256 pids) and no network. Every
//   measured run (path × concurrency) follows 2 unmeasured cycles of its own,
//   so the daemon's layer mount (it lingers 60 s after its last sandbox) is
//   up, as on a node that keeps creating sandboxes of the image.
// - sandbox-density: a fresh node daemon; N idle sandboxes created through
//   the API one after another (N from the sizes, 1000 when the memory is
//   there), stopping early when MemAvailable falls under a reserve or the
//   daemon refuses; how many were alive at once (each ran `true` through the
//   API with all of them up), memory per sandbox (MemAvailable slope and the
//   sandboxes' memory cgroups under /strata/<nodeId>), the daemon's RSS, time
//   per create; then every sandbox is deleted through the API and nothing may
//   be left (mounts, cgroups, state dirs, layer leases).
// - sandbox-cold: a fresh FUSE daemon (`cluster kill` + `cluster start` of
//   the node's fuse process), a freshly started node daemon (no layer
//   mounted), dropped page caches: the bytes the FUSE daemon read from the
//   DFS (its stats RPC) from the create request until the first exec
//   returned, against the size of the layer.
//
// Sizes: `--quick` shrinks them; STRATA_BENCH_SANDBOX_ITERS (cycles per path
// and concurrency), STRATA_BENCH_SANDBOX_DENSITY (sandboxes; 0 = 1000 when the
// memory is there), STRATA_BENCH_SANDBOX_COLD_TRIALS override them, and
// STRATA_BENCH_SANDBOX_PATHS (e.g. `strata,runc`) runs a subset of the paths.
//
// Everything is torn down at the end, also on failure: sandboxes deleted,
// node daemons asked to reclaim everything (POST /v1/node/reclaim) and
// stopped (SIGTERM), then reclaimOffline of their state dirs and their
// cgroup parents removed; mounts removed, runc containers deleted, podman
// containers and images removed with their store. A Ctrl-C runs a
// synchronous emergency cleanup (daemons SIGKILLed, runc delete, lazy
// unmounts) before the runner destroys the cluster.

import fs from 'node:fs'
import path from 'node:path'
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { promisify } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { clusterKill, clusterStart, readClusterFile } from '../fs/admin/index.js'
import { strataBin } from '../fs/admin/process.js'
import { FileSystem } from '../fs/client/index.js'
import { MNT, native } from '../fs/common/native.js'
import { readMounts } from '../fs/fuse/mounts.js'
import { RpcClient } from '../fs/rpc/index.js'
import { AGENT_PATH_IN_SANDBOX, ContainerBackend, ociSpec } from '../sandbox/backends/container/index.js'
import type { SandboxHandle, SandboxResources } from '../sandbox/backends/types.js'
import { reclaimOffline, type NodeInfo, type SandboxDaemonConfig } from '../sandbox/daemon/index.js'
import { ImageStore, ensureDebianRootfs, importPath } from '../sandbox/image/index.js'
import { LayerMounts, RootfsBuilder, type LayerMount, type Rootfs } from '../sandbox/rootfs/index.js'
import { mountsUnder, unmountTree } from '../sandbox/rootfs/mounts.js'
import { Strata, type Sandbox } from '../sandbox/sdk/index.js'
import { BENCH_IMAGE_PACKAGES } from './images.js'
import type { NamespaceCluster } from './lib/fixtures.js'
import { fmtMs, runConcurrent, summarize } from './lib/stats.js'
import type { BenchContext, Metric } from './lib/types.js'

const exec = promisify(execFile)
const MiB = 1024 * 1024
const GiB = 1024 * MiB

/** What every sandbox of every path runs; it must print "1". */
export const SANDBOX_CMD = ['python3', '-c', 'print(1)'] as const
export const SANDBOX_CMD_TEXT = `python3 -c 'print(1)'`
/** The same limits on every path. */
export const SANDBOX_RESOURCES: Required<SandboxResources> = { cpu: 1, memoryMiB: 512, pids: 256 }
export const START_CONCURRENCY = [1, 8] as const
/** unmeasured cycles of a path before each of its measured runs */
const WARMUP = 2
const IMAGE_NAME = 'bench/debian'
const IMAGE_TAG = '1'
/** what the SDK creates by */
export const IMAGE_REF = `${IMAGE_NAME}:${IMAGE_TAG}`
/** exec deadline of every command a benchmark runs in a sandbox */
const EXEC_TIMEOUT_MS = 60_000
const PODMAN_IMAGE = 'localhost/strata-bench/debian:sandbox'
/** density stops when MemAvailable would fall under this (the larger of the two) */
const DENSITY_RESERVE_BYTES = 2 * GiB
const DENSITY_RESERVE_FRACTION = 0.1
/** density asks for this many when nothing says otherwise and the memory is there */
const DENSITY_DEFAULT = 1000
/** assumed memory per idle sandbox when sizing the default density run */
const DENSITY_ASSUMED_BYTES = 8 * MiB
/** the issue's density target */
export const DENSITY_TARGET = 1000
/** density stops creating after this long */
const DENSITY_MAX_MS = 30 * 60_000

export type StartPath = 'strata' | 'strata-pool' | 'strata-inproc' | 'podman' | 'runc' | 'eager'
export const ALL_PATHS: StartPath[] = ['strata', 'strata-pool', 'strata-inproc', 'runc', 'eager', 'podman']
/** sandboxes the strata-pool daemon keeps started */
export const POOL_SIZE = 8

export const PATH_LABELS: Record<StartPath, string> = {
  strata: 'Strata node daemon over HTTP (SDK create → exec → delete; overlay on the lazily mounted EROFS layer + runc + agent)',
  'strata-pool': `Strata node daemon with a warm pool of ${POOL_SIZE} (reported separately; the same SDK calls, create takes a started sandbox while the pool has one)`,
  'strata-inproc': 'Strata in-process, no daemon or HTTP (LayerMounts + RootfsBuilder + ContainerBackend; no target)',
  podman: 'podman run --rm (same tree, podman import of its tar)',
  runc: 'bare runc run of a pre-extracted bundle (rootfs copied once)',
  eager: 'eager: untar the image into a fresh dir, runc run, rm -rf',
}

function envInt(name: string): number | undefined {
  const v = process.env[name]
  if (v === undefined || v === '') return undefined
  const n = Number(v)
  if (!Number.isInteger(n) || n < 0) throw new Error(`${name}=${v}: expected a non-negative integer`)
  return n
}

/** Sizes of the sandbox benchmarks (sizesFor in run.ts puts them into Sizes). */
export function sandboxSizes(quick: boolean): { sandboxIters: number; sandboxDensity: number; sandboxColdTrials: number } {
  return {
    sandboxIters: envInt('STRATA_BENCH_SANDBOX_ITERS') ?? (quick ? 8 : 40),
    sandboxDensity: envInt('STRATA_BENCH_SANDBOX_DENSITY') ?? (quick ? 50 : 0),
    sandboxColdTrials: envInt('STRATA_BENCH_SANDBOX_COLD_TRIALS') ?? (quick ? 1 : 3),
  }
}

function selectedPaths(): StartPath[] {
  const v = process.env.STRATA_BENCH_SANDBOX_PATHS
  if (!v) return ALL_PATHS
  const want = v.split(',').map((s) => s.trim()).filter(Boolean)
  for (const w of want) if (!ALL_PATHS.includes(w as StartPath)) throw new Error(`STRATA_BENCH_SANDBOX_PATHS: unknown path ${w} (${ALL_PATHS.join(', ')})`)
  return ALL_PATHS.filter((p) => want.includes(p))
}

function checkOutput(what: string, stdout: string | Buffer, exitCode: number | null = 0): void {
  const out = stdout.toString()
  if (exitCode !== 0 || out !== '1\n') throw new Error(`${what}: ${SANDBOX_CMD_TEXT} exited ${exitCode} with ${JSON.stringify(out.slice(0, 200))}`)
}

let idSeq = 0
function newId(prefix: string): string {
  return `${prefix}-${process.pid.toString(36)}-${++idSeq}`
}

// ------------------------------------------------------------------ emergency cleanup

/**
 * Synchronous cleanups of what is running now, run on SIGINT/SIGTERM before
 * the runner's own handler destroys the cluster and removes the scratch
 * directory (which would otherwise cut the layer mounts off their FUSE
 * daemon and delete runc's state from under live containers).
 */
const emergency = new Set<() => void>()
let signalHook: ((sig: NodeJS.Signals) => void) | null = null

function onEmergency(fn: () => void): () => void {
  emergency.add(fn)
  if (!signalHook) {
    signalHook = () => {
      for (const f of [...emergency].reverse()) {
        try {
          f()
        } catch {
          // best effort
        }
      }
      emergency.clear()
    }
    process.prependListener('SIGINT', signalHook)
    process.prependListener('SIGTERM', signalHook)
  }
  return () => {
    emergency.delete(fn)
    if (emergency.size === 0 && signalHook) {
      process.off('SIGINT', signalHook)
      process.off('SIGTERM', signalHook)
      signalHook = null
    }
  }
}

function detachAllSync(dir: string): void {
  for (const m of mountsUnder(dir)) {
    try {
      native().umount2(m.mountpoint, MNT.DETACH)
    } catch {
      // gone already
    }
  }
}

function runcDeleteAllSync(runtime: string, root: string): void {
  let ids: string[] = []
  try {
    ids = execFileSync(runtime, ['--root', root, 'list', '-q'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n').filter(Boolean)
  } catch {
    return
  }
  for (const id of ids) {
    try {
      execFileSync(runtime, ['--root', root, 'delete', '--force', id], { stdio: 'ignore' })
    } catch {
      // next
    }
  }
}

// ------------------------------------------------------------------ the image

interface SandboxImage {
  ns: NamespaceCluster
  /** the Debian tree (the image's content) */
  rootfsDir: string
  treeBytes: number
  /** layer digests, lowest first (one) */
  layers: string[]
  layerBytes: number
  importMs: number
}

let image: SandboxImage | null = null

/** The DFS image store of the namespace cluster (a FileSystem client of its own). */
async function openStore(ns: NamespaceCluster): Promise<{ store: ImageStore; close(): Promise<void> }> {
  const fsys = new FileSystem({ mgmtdAddresses: ns.mgmtdAddresses, metaFallbackAddresses: ns.metaAddresses, periodicSyncMs: 0 })
  const store = new ImageStore(fsys)
  await store.open()
  return {
    store,
    close: async () => {
      await store.close().catch(() => undefined)
      await fsys.shutdown().catch(() => undefined)
    },
  }
}

/** The Debian tree, imported once per run (and again when the cluster was replaced). */
async function sandboxImage(ctx: BenchContext): Promise<SandboxImage> {
  const ns = await ctx.fixtures.getNamespaceCluster()
  if (image && image.ns === ns) return image
  ctx.log('Debian rootfs: debootstrap minbase + python3, pip, git (the image benchmarks\' tree, cached after the first build)')
  const r = await ensureDebianRootfs({ include: BENCH_IMAGE_PACKAGES, onLine: (l) => ctx.log(`  debootstrap: ${l}`) })
  ctx.log(r.cached ? `  cached at ${r.dir}` : `  built in ${(r.buildMs / 1000).toFixed(0)} s at ${r.dir}`)
  const treeBytes = Number((await exec('du', ['-sb', r.dir])).stdout.split(/\s/)[0])
  const s = await openStore(ns)
  try {
    let digest = await s.store.getTag(IMAGE_NAME, IMAGE_TAG)
    let importMs = 0
    if (!digest) {
      ctx.log(`importing ${r.dir} into the DFS image store as ${IMAGE_NAME}:${IMAGE_TAG} (one EROFS layer)`)
      const t0 = performance.now()
      const imp = await importPath(s.store, r.dir, { name: IMAGE_NAME, tag: IMAGE_TAG, workDir: ctx.fixtures.scratch('sandbox-import') })
      importMs = performance.now() - t0
      digest = imp.digest
      fs.rmSync(path.join(ctx.fixtures.root, 'sandbox-import'), { recursive: true, force: true })
    }
    const m = (await s.store.getManifest(digest)).manifest
    const layers = m.layers.map((l) => l.digest)
    const layerBytes = m.layers.reduce((a, l) => a + l.size, 0)
    ctx.log(`image ${IMAGE_NAME}:${IMAGE_TAG}: ${(treeBytes / 1e6).toFixed(0)} MB tree, ${layers.length} layer(s) of ${(layerBytes / 1e6).toFixed(0)} MB${importMs ? `, imported in ${(importMs / 1000).toFixed(1)} s` : ''}`)
    image = { ns, rootfsDir: r.dir, treeBytes, layers, layerBytes, importMs }
    return image
  } finally {
    await s.close()
  }
}

/** The image tree as one tar (made once per run): podman import and the eager path read it. */
let imageTar: string | null = null
async function sandboxImageTar(ctx: BenchContext, img: SandboxImage): Promise<string> {
  if (imageTar && fs.existsSync(imageTar)) return imageTar
  const dir = ctx.fixtures.scratch('sandbox-tar')
  const file = path.join(dir, 'rootfs.tar')
  await exec('tar', ['--numeric-owner', '--xattrs', '--xattrs-include=*', '-C', img.rootfsDir, '-cf', file, '.'])
  imageTar = file
  return file
}

// ------------------------------------------------------------------ strata

/**
 * One node's sandbox plane, in process: the layer mounts (one EROFS mount
 * per layer, read through the cluster's FUSE mount), the rootfs builder and
 * the container backend, exactly as the node daemon composes them.
 */
export interface StrataNode {
  dir: string
  nodeId: string
  layers: LayerMounts
  builder: RootfsBuilder
  backend: ContainerBackend
  image: string[]
  store: ImageStore
  live: Map<string, StrataSandbox>
  pin: LayerMount[]
  /** per cycle, when set: where the time went */
  phases: StrataPhases[] | null
  closeStore(): Promise<void>
  dropEmergency(): void
}

export interface StrataSandbox {
  id: string
  dir: string
  rootfs: Rootfs
  handle: SandboxHandle | null
  /** ms spent building the rootfs and starting the container (through the agent's first pong) */
  rootfsMs: number
  containerMs: number
  /** ms spent deleting the container and destroying the rootfs */
  deleteContainerMs: number
  destroyRootfsMs: number
}

export interface StrataPhases {
  rootfs: number
  container: number
  exec: number
  /** create → first exec returned: rootfs + container + exec */
  firstExec: number
  /** container delete + rootfs destroy + directory removal */
  delete: number
  deleteContainer: number
  destroyRootfs: number
}

let nodeSeq = 0

async function openNode(ctx: BenchContext, img: SandboxImage, opts: { pin: boolean }): Promise<StrataNode> {
  // short: <dir>/sb/<id>/rt/agent.sock must fit a unix socket path
  const dir = ctx.fixtures.scratch(`sbn${++nodeSeq}`)
  const nodeId = `bench-node-${process.pid}-${nodeSeq}`
  const s = await openStore(img.ns)
  const layers = new LayerMounts({ fuseMnt: img.ns.mnt, stateDir: dir, store: s.store, nodeId })
  const node: StrataNode = {
    dir,
    nodeId,
    layers,
    builder: new RootfsBuilder({ layers }),
    backend: new ContainerBackend(),
    image: img.layers,
    store: s.store,
    live: new Map(),
    pin: [],
    phases: null,
    closeStore: s.close,
    dropEmergency: () => undefined,
  }
  fs.mkdirSync(path.join(dir, 'sb'))
  node.dropEmergency = onEmergency(() => {
    for (const sb of node.live.values()) {
      try {
        execFileSync(node.backend.runtime, ['--root', path.join(sb.dir, 'rt', 'runc'), 'delete', '--force', sb.id], { stdio: 'ignore' })
      } catch {
        // not running
      }
    }
    detachAllSync(dir)
  })
  try {
    if (opts.pin) for (const d of img.layers) node.pin.push(await layers.acquire(d, 'bench-pin'))
  } catch (e) {
    await closeNode(node).catch(() => undefined)
    throw e
  }
  return node
}

/** Creates a sandbox on the node: its rootfs, then the container (returns once the agent answers). */
export async function strataCreate(node: StrataNode, id: string): Promise<StrataSandbox> {
  // the daemon's layout (sandbox/daemon): sb/<id>/fs for the rootfs, sb/<id>/rt for the runtime
  const dir = path.join(node.dir, 'sb', id)
  await fs.promises.mkdir(dir, { mode: 0o700 })
  let rootfs: Rootfs
  const t0 = performance.now()
  try {
    rootfs = await node.builder.create({ sandboxId: id, layers: node.image, stateDir: path.join(dir, 'fs') })
  } catch (e) {
    // create undid its mounts
    await fs.promises.rm(dir, { recursive: true, force: true })
    throw e
  }
  const t1 = performance.now()
  const sb: StrataSandbox = { id, dir, rootfs, handle: null, rootfsMs: t1 - t0, containerMs: 0, deleteContainerMs: 0, destroyRootfsMs: 0 }
  node.live.set(id, sb)
  try {
    sb.handle = await node.backend.create({ id, rootfsDir: rootfs.dir, stateDir: path.join(dir, 'rt'), env: {}, network: 'none', resources: SANDBOX_RESOURCES })
    sb.containerMs = performance.now() - t1
  } catch (e) {
    await strataDelete(node, sb).catch(() => undefined)
    throw e
  }
  return sb
}

/** Deletes the container, then its rootfs, then its directory. */
export async function strataDelete(node: StrataNode, sb: StrataSandbox): Promise<void> {
  const t0 = performance.now()
  await sb.handle?.delete()
  const t1 = performance.now()
  // the rootfs goes only after the container: its processes held the mounts
  await sb.rootfs.destroy()
  sb.deleteContainerMs = t1 - t0
  sb.destroyRootfsMs = performance.now() - t1
  await fs.promises.rm(sb.dir, { recursive: true, force: true })
  node.live.delete(sb.id)
}

/**
 * One sandbox's life as the benchmark measures it: create → first exec
 * returns (and printed 1) → delete, in process (the `strata-inproc` path;
 * daemonCycle is the same through the node daemon and the SDK).
 */
export async function strataCycle(node: StrataNode, id: string): Promise<void> {
  const sb = await strataCreate(node, id)
  const t0 = performance.now()
  let t1 = t0
  try {
    const r = await sb.handle!.agent.exec([...SANDBOX_CMD], { timeoutMs: 60_000 })
    t1 = performance.now()
    checkOutput(`sandbox ${id}`, r.stdout, r.exitCode)
  } finally {
    await strataDelete(node, sb)
  }
  node.phases?.push({
    rootfs: sb.rootfsMs, container: sb.containerMs, exec: t1 - t0, firstExec: sb.rootfsMs + sb.containerMs + (t1 - t0),
    delete: performance.now() - t1, deleteContainer: sb.deleteContainerMs, destroyRootfs: sb.destroyRootfsMs,
  })
}

/** Cgroup directories `<hierarchy>/<parent>/<id>` that still exist for any of `ids`, in every mounted hierarchy. */
function cgroupsLeft(parent: string, ids: Set<string>): string[] {
  const out: string[] = []
  for (const h of cgroupHierarchies()) {
    let names: string[]
    try {
      names = fs.readdirSync(path.join(h, parent))
    } catch {
      continue
    }
    for (const n of names) if (ids.has(n)) out.push(path.join(h, parent, n))
  }
  return out
}

/** Mount points of the cgroup hierarchies (v1 controllers and the v2 tree). */
function cgroupHierarchies(): string[] {
  return readMounts().filter((m) => m.fstype === 'cgroup' || m.fstype === 'cgroup2').map((m) => m.mountpoint)
}

/** Deletes whatever still lives on the node, unpins, sweeps, unmounts; throws if something stays. */
async function closeNode(node: StrataNode): Promise<void> {
  const errors: string[] = []
  const live = [...node.live.values()]
  await runConcurrent(live.length, 4, async (i) => {
    await strataDelete(node, live[i]!).catch((e: unknown) => errors.push(`delete ${live[i]!.id}: ${(e as Error).message}`))
  }).catch(() => undefined)
  for (const p of node.pin.splice(0)) await p.release().catch((e: unknown) => errors.push(`unpin: ${(e as Error).message}`))
  await node.layers.sweep().catch((e: unknown) => errors.push(`sweep: ${(e as Error).message}`))
  await unmountTree(node.dir).catch((e: unknown) => errors.push((e as Error).message))
  await node.closeStore()
  if (mountsUnder(node.dir).length === 0) {
    fs.rmSync(node.dir, { recursive: true, force: true })
    node.dropEmergency()
  } else errors.push(`mounts remain under ${node.dir}; it is not removed`)
  if (errors.length) throw new Error(`tearing down ${node.dir}: ${errors.join('; ')}`)
}

// ------------------------------------------------------------------ strata: the node daemon over HTTP

/**
 * A node daemon process, `strata daemon sandbox --config FILE` as `cluster
 * up` starts it (the sandbox role's config: this node id, the cluster's
 * mgmtd, its FUSE mount, a state dir, a token file; layerLingerMs and every
 * other setting at its default), and an SDK client of it.
 */
export interface DaemonNode {
  /** scratch dir: config, log, token, endpoint file and the state dir */
  dir: string
  stateDir: string
  nodeId: string
  config: SandboxDaemonConfig
  configFile: string
  logFile: string
  child: ChildProcess
  pid: number
  endpoint: string
  token: string
  sdk: Strata
  exited: Promise<void>
  dropEmergency(): void
}

let daemonSeq = 0

function daemonAlive(d: DaemonNode): boolean {
  return d.child.exitCode === null && d.child.signalCode === null
}

/** The last lines of a daemon's log, for an error message. */
function logTail(file: string, lines = 20): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n')
  } catch {
    return '(no log)'
  }
}

/** runc delete --force of every container of a daemon's sandboxes (<stateDir>/sb/<id>/rt/runc), synchronously. */
function daemonRuncDeleteSync(stateDir: string): void {
  let ids: string[] = []
  try {
    ids = fs.readdirSync(path.join(stateDir, 'sb'))
  } catch {
    return
  }
  for (const id of ids) runcDeleteAllSync('runc', path.join(stateDir, 'sb', id, 'rt', 'runc'))
}

/** Starts a node daemon process and waits until GET /v1/health answers (like test/sandbox/daemon/helpers.ts). */
async function startDaemonNode(ctx: BenchContext, img: SandboxImage, extra: Partial<SandboxDaemonConfig> = {}): Promise<DaemonNode> {
  const seq = ++daemonSeq
  // short: <stateDir>/sb/sb-xxxxxxxxxxxx/rt/agent.sock must fit a unix socket path
  const dir = ctx.fixtures.scratch(`sbd${seq}`)
  const stateDir = path.join(dir, 's')
  const nodeId = `bench-${process.pid.toString(36)}-${seq}`
  const config: SandboxDaemonConfig = {
    nodeId,
    listen: '127.0.0.1:0',
    mgmtdAddresses: img.ns.mgmtdAddresses,
    fuseMnt: img.ns.mnt,
    stateDir,
    tokenFile: path.join(dir, 'token'),
    endpointFile: path.join(dir, 'endpoint'),
    ...extra,
  }
  const configFile = path.join(dir, 'config.json')
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2) + '\n')
  const logFile = path.join(dir, 'daemon.log')
  const fd = fs.openSync(logFile, 'a')
  let child: ChildProcess
  try {
    // STRATA_BIN (the profiling wrapper under --profile) like every daemon `cluster up` starts
    child = spawn(process.execPath, [strataBin(), 'daemon', 'sandbox', '--config', configFile, '--name', `sandbox-${seq}`], {
      stdio: ['ignore', fd, fd],
      cwd: dir,
      env: { ...process.env, STRATA_LOG_LEVEL: 'info' },
    })
  } finally {
    fs.closeSync(fd)
  }
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  const d: DaemonNode = {
    dir, stateDir, nodeId, config, configFile, logFile, child, pid: child.pid ?? -1, endpoint: '', token: '',
    sdk: null as unknown as Strata, exited, dropEmergency: () => undefined,
  }
  d.dropEmergency = onEmergency(() => {
    if (daemonAlive(d)) {
      try {
        process.kill(d.pid, 'SIGKILL')
      } catch {
        // gone
      }
    }
    daemonRuncDeleteSync(stateDir)
    detachAllSync(dir)
  })
  try {
    const end = Date.now() + 60_000
    for (;;) {
      if (!daemonAlive(d)) throw new Error(`the node daemon exited during startup:\n${logTail(logFile)}`)
      if (Date.now() > end) throw new Error(`the node daemon did not answer within 60 s:\n${logTail(logFile)}`)
      if (!d.endpoint && fs.existsSync(config.endpointFile!)) d.endpoint = fs.readFileSync(config.endpointFile!, 'utf8').trim()
      if (d.endpoint) {
        const ok = await fetch(`${d.endpoint}/v1/health`, { signal: AbortSignal.timeout(1000) }).then((r) => r.ok, () => false)
        if (ok) break
      }
      await sleep(50)
    }
    d.token = fs.readFileSync(config.tokenFile, 'utf8').trim()
    d.sdk = new Strata({ endpoint: d.endpoint, token: d.token })
  } catch (e) {
    await closeDaemonNode(d).catch(() => undefined)
    throw e
  }
  return d
}

/** POST /v1/node/reclaim: the daemon deletes every sandbox and unmounts its idle layers (dropping their leases). */
async function daemonReclaim(d: DaemonNode): Promise<number> {
  const r = await fetch(`${d.endpoint}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${d.token}` }, signal: AbortSignal.timeout(20 * 60_000) })
  const body = (await r.json().catch(() => ({}))) as { removed?: number; code?: string; message?: string }
  if (!r.ok) throw new Error(`POST /v1/node/reclaim: HTTP ${r.status} ${body.code ?? ''} ${body.message ?? ''}`)
  return body.removed ?? 0
}

/** SIGTERM (the sandboxes would stay for a next daemon), SIGKILL after 30 s. */
async function stopDaemonProcess(d: DaemonNode): Promise<void> {
  if (!daemonAlive(d)) return
  d.child.kill('SIGTERM')
  const t = setTimeout(() => d.child.kill('SIGKILL'), 30_000)
  await d.exited
  clearTimeout(t)
}

/**
 * Tears a node daemon down, also after a failure: reclaim through its API
 * while it runs, SIGTERM, then reclaimOffline of its state dir (whatever a
 * dead or stuck daemon left: runtime state, rootfs and layer mounts, dirs),
 * its cgroup parents, its directory. Throws if something could not be removed.
 */
async function closeDaemonNode(d: DaemonNode): Promise<void> {
  const errors: string[] = []
  d.sdk?.close()
  if (daemonAlive(d) && d.endpoint) {
    await daemonReclaim(d).catch((e: unknown) => errors.push(`reclaim: ${(e as Error).message}`))
  }
  await stopDaemonProcess(d)
  if (fs.existsSync(d.stateDir)) {
    const n = await reclaimOffline(d.stateDir, { cgroupParent: `/strata/${d.nodeId}` }).catch((e: unknown) => {
      errors.push(`reclaimOffline: ${(e as Error).message}`)
      return 0
    })
    if (n > 0) errors.push(`reclaimOffline removed ${n} sandbox(es) the daemon left behind`)
  }
  await unmountTree(d.dir).catch((e: unknown) => errors.push((e as Error).message))
  for (const c of cgroupParents(d.nodeId)) {
    try {
      fs.rmdirSync(c)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') errors.push(`cgroup ${c}: ${(e as Error).message}`)
    }
  }
  if (mountsUnder(d.dir).length === 0) {
    fs.rmSync(d.dir, { recursive: true, force: true })
    d.dropEmergency()
  } else errors.push(`mounts remain under ${d.dir}; it is not removed`)
  if (errors.length) throw new Error(`tearing down the node daemon in ${d.dir}: ${errors.join('; ')}`)
}

/** The daemon's cgroup parent /strata/<nodeId> in every mounted hierarchy. */
function cgroupParents(nodeId: string): string[] {
  return cgroupHierarchies().map((h) => path.join(h, 'strata', nodeId)).filter((p) => fs.existsSync(p))
}

export interface DaemonPhases {
  /** HTTP create returned (the agent answered) */
  create: number
  /** the daemon's own create time (SandboxInfo.createMs: resolve, rootfs, runtime, agent) */
  nodeCreate: number
  /** HTTP exec until its exit event */
  exec: number
  /** create → first exec returned */
  firstExec: number
  /** HTTP delete */
  delete: number
  /** 1 when the create took a warm-pool sandbox */
  pooled: number
}

/** Until every warm pool of the daemon holds its count of started sandboxes. */
async function waitPoolFull(d: DaemonNode): Promise<void> {
  const end = Date.now() + 120_000
  for (;;) {
    const n = await d.sdk.node()
    if (n.pool.every((p) => p.ready === p.target && p.building === 0)) return
    if (Date.now() > end) throw new Error(`the warm pool did not fill within 120 s: ${JSON.stringify(n.pool)}`)
    await sleep(100)
  }
}

async function daemonCreate(d: DaemonNode): Promise<Sandbox> {
  return d.sdk.sandboxes.create({ image: IMAGE_REF, resources: SANDBOX_RESOURCES, network: 'none' })
}

/**
 * One sandbox's life through the node daemon, as a user of the SDK lives
 * it: create → first exec returned (and printed 1) → delete.
 */
export async function daemonCycle(d: DaemonNode, phases: DaemonPhases[] | null): Promise<void> {
  const t0 = performance.now()
  const sb = await daemonCreate(d)
  const t1 = performance.now()
  let t2 = t1
  let failed: unknown = null
  try {
    const r = await sb.exec([...SANDBOX_CMD], { timeoutMs: EXEC_TIMEOUT_MS })
    t2 = performance.now()
    checkOutput(`sandbox ${sb.id}`, r.stdout, r.exitCode)
  } catch (e) {
    failed = e
  }
  try {
    await sb.delete()
  } catch (e) {
    failed ??= e
  }
  if (failed) throw failed
  phases?.push({ create: t1 - t0, nodeCreate: sb.info.createMs ?? NaN, exec: t2 - t1, firstExec: t2 - t0, delete: performance.now() - t2, pooled: sb.info.pooled ? 1 : 0 })
}

/** What is left on the node once every sandbox was deleted and the node reclaimed: [] when nothing. */
async function daemonLeftovers(d: DaemonNode, img: SandboxImage): Promise<string[]> {
  const left: string[] = []
  const info: NodeInfo = await d.sdk.node()
  const n = Object.values(info.sandboxes).reduce((a, x) => a + x, 0)
  if (n) left.push(`the daemon still lists ${n} sandbox(es) (${JSON.stringify(info.sandboxes)})`)
  if (info.layers.length) left.push(`the daemon still has ${info.layers.length} layer(s) mounted`)
  const ms = mountsUnder(d.stateDir)
  if (ms.length) left.push(`${ms.length} mount(s) under ${d.stateDir} (${ms.slice(0, 3).map((m) => m.mountpoint).join(', ')}…)`)
  const sbs = fs.existsSync(path.join(d.stateDir, 'sb')) ? fs.readdirSync(path.join(d.stateDir, 'sb')) : []
  if (sbs.length) left.push(`${sbs.length} sandbox state dir(s) under ${d.stateDir}/sb`)
  const layerDirs = fs.existsSync(path.join(d.stateDir, 'layers')) ? fs.readdirSync(path.join(d.stateDir, 'layers')) : []
  if (layerDirs.length) left.push(`${layerDirs.length} layer mountpoint(s) under ${d.stateDir}/layers`)
  const cg: string[] = []
  for (const parent of cgroupParents(d.nodeId)) {
    for (const e of fs.readdirSync(parent, { withFileTypes: true })) if (e.isDirectory()) cg.push(path.join(parent, e.name))
  }
  if (cg.length) left.push(`${cg.length} cgroup(s) under /strata/${d.nodeId}: ${cg.slice(0, 3).join(', ')}…`)
  const s = await openStore(img.ns)
  try {
    const leases = (await s.store.listLeases()).filter((l) => l.holder === d.nodeId)
    if (leases.length) left.push(`${leases.length} layer lease(s) held by ${d.nodeId}`)
  } finally {
    await s.close()
  }
  return left
}

/** Resident memory of a process (VmRSS), bytes; NaN when unreadable. */
function rssBytes(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))
    return m ? Number(m[1]) * 1024 : NaN
  } catch {
    return NaN
  }
}

// ------------------------------------------------------------------ baselines

/** Our OCI config with the command as the process (no agent, no agent mount), for the runc baselines. */
function baselineConfig(rootfsDir: string, id: string): Record<string, unknown> {
  const c = ociSpec({
    rootfsDir,
    agentBinary: '/nonexistent',
    agentArgs: [],
    env: {},
    workdir: '/',
    hostname: id.slice(0, 63),
    network: 'none',
    resources: SANDBOX_RESOURCES,
    cgroupsPath: `/strata/${id}`,
  }) as { process: { args: string[] }; mounts: Array<{ destination: string }> }
  c.process.args = [...SANDBOX_CMD]
  c.mounts = c.mounts.filter((m) => m.destination !== AGENT_PATH_IN_SANDBOX)
  return c as unknown as Record<string, unknown>
}

interface Baseline {
  cycle(id: string): Promise<void>
  close(): Promise<void>
}

async function runcRun(root: string, bundle: string, id: string): Promise<void> {
  const { stdout } = await exec('runc', ['--root', root, 'run', '--bundle', bundle, id], { maxBuffer: MiB })
  checkOutput(`runc ${id}`, stdout)
}

/** c) bare runc of a pre-extracted bundle: the rootfs copied once; per run a config.json and a container id. */
async function runcBaseline(ctx: BenchContext, img: SandboxImage): Promise<Baseline> {
  const dir = ctx.fixtures.scratch('sbx-runc')
  const root = path.join(dir, 'state')
  const rootfs = path.join(dir, 'rootfs')
  const bundles = path.join(dir, 'bundles')
  fs.mkdirSync(root)
  fs.mkdirSync(bundles)
  const drop = onEmergency(() => runcDeleteAllSync('runc', root))
  ctx.log('runc baseline: copying the tree once (cp -a)')
  await exec('cp', ['-a', img.rootfsDir, rootfs])
  const ids = new Set<string>()
  return {
    cycle: async (id) => {
      ids.add(id)
      const b = path.join(bundles, id)
      await fs.promises.mkdir(b)
      try {
        await fs.promises.writeFile(path.join(b, 'config.json'), JSON.stringify(baselineConfig(rootfs, id)))
        await runcRun(root, b, id)
      } finally {
        await fs.promises.rm(b, { recursive: true, force: true })
      }
    },
    close: async () => closeRuncBaseline('runc', root, dir, ids, drop),
  }
}

/** Teardown shared by the runc-based baselines: every container deleted, the directory removed, no cgroup left. */
function closeRuncBaseline(what: string, root: string, dir: string, ids: Set<string>, drop: () => void): void {
  runcDeleteAllSync('runc', root)
  drop()
  const cg = cgroupsLeft('strata', ids)
  fs.rmSync(dir, { recursive: true, force: true })
  if (cg.length) throw new Error(`${what} baseline left ${cg.length} cgroup(s): ${cg.slice(0, 3).join(', ')}`)
}

/** d) the eager path: untar the image tar into a fresh directory, runc run, remove the directory. */
async function eagerBaseline(ctx: BenchContext, img: SandboxImage): Promise<Baseline> {
  const tar = await sandboxImageTar(ctx, img)
  const dir = ctx.fixtures.scratch('sbx-eager')
  const root = path.join(dir, 'state')
  fs.mkdirSync(root)
  const drop = onEmergency(() => runcDeleteAllSync('runc', root))
  const ids = new Set<string>()
  return {
    cycle: async (id) => {
      ids.add(id)
      const b = path.join(dir, id)
      const rootfs = path.join(b, 'rootfs')
      await fs.promises.mkdir(rootfs, { recursive: true })
      try {
        await exec('tar', ['--numeric-owner', '--xattrs', '--xattrs-include=*', '-C', rootfs, '-xf', tar])
        await fs.promises.writeFile(path.join(b, 'config.json'), JSON.stringify(baselineConfig(rootfs, id)))
        await runcRun(root, b, id)
      } finally {
        await fs.promises.rm(b, { recursive: true, force: true })
      }
    },
    close: async () => closeRuncBaseline('eager', root, dir, ids, drop),
  }
}

/** b) podman run --rm, in a private store (root, runroot, tmpdir under the scratch dir). */
async function podmanBaseline(ctx: BenchContext, img: SandboxImage): Promise<Baseline> {
  const tar = await sandboxImageTar(ctx, img)
  const dir = ctx.fixtures.scratch('sbx-podman')
  const g = ['--root', path.join(dir, 'root'), '--runroot', path.join(dir, 'run'), '--tmpdir', path.join(dir, 'tmp')]
  const podmanSync = (args: string[]) => {
    try {
      execFileSync('podman', [...g, ...args], { stdio: 'ignore', timeout: 120_000 })
    } catch {
      // best effort
    }
  }
  const drop = onEmergency(() => {
    podmanSync(['rm', '-af', '-t', '0'])
    detachAllSync(dir)
  })
  const ulimits = ['--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024']
  const limits = ['--cpus', String(SANDBOX_RESOURCES.cpu), '--memory', `${SANDBOX_RESOURCES.memoryMiB}m`, '--memory-swap', `${SANDBOX_RESOURCES.memoryMiB}m`, '--pids-limit', String(SANDBOX_RESOURCES.pids)]
  // with cgroupfs podman puts containers and conmon under /libpod_parent and leaves it behind
  const libpodParents = cgroupHierarchies().map((h) => path.join(h, 'libpod_parent')).filter((d) => !fs.existsSync(d))
  const close = async () => {
    await exec('podman', [...g, 'rm', '-af', '-t', '0']).catch(() => undefined)
    await exec('podman', [...g, 'rmi', '-af']).catch(() => undefined)
    drop()
    // only the ones this run made; rmdir refuses a cgroup that still has processes or children
    for (const d of libpodParents) {
      for (const x of [path.join(d, 'conmon'), d]) {
        try {
          fs.rmdirSync(x)
        } catch {
          // in use, or gone
        }
      }
    }
    await unmountTree(dir).catch(() => undefined)
    const left = mountsUnder(dir)
    if (left.length) throw new Error(`podman left ${left.length} mount(s) under ${dir}`)
    fs.rmSync(dir, { recursive: true, force: true })
  }
  try {
    ctx.log(`podman: importing the tree's tar as ${PODMAN_IMAGE} (private store in ${dir})`)
    await exec('podman', [...g, 'import', '-q', tar, PODMAN_IMAGE])
  } catch (e) {
    await close().catch(() => undefined)
    throw e
  }
  return {
    cycle: async (id) => {
      const { stdout } = await exec('podman', [...g, 'run', '--rm', '--name', id, '--network', 'none', ...ulimits, ...limits, PODMAN_IMAGE, ...SANDBOX_CMD], { maxBuffer: MiB })
      checkOutput(`podman ${id}`, stdout)
    },
    close,
  }
}

// ------------------------------------------------------------------ sandbox-start

type Phases = StrataPhases[] | DaemonPhases[]

interface StartResult {
  path: StartPath
  concurrency: number
  samples: number[]
  wallMs: number
  phases?: Phases | undefined
}

/** The eager path untars the whole image per cycle; STRATA_BENCH_SANDBOX_EAGER_ITERS, else at most 16 cycles. */
export function eagerIterations(iters: number): number {
  return envInt('STRATA_BENCH_SANDBOX_EAGER_ITERS') ?? Math.min(iters, 16)
}

function phaseRows(ph: Phases): Array<Record<string, number>> {
  return ph as unknown as Array<Record<string, number>>
}

/** p50 of each phase, keys `<phase>P50Ms`. */
function phaseExtra(ph: Phases | undefined): Record<string, number> {
  if (!ph?.length) return {}
  const out: Record<string, number> = {}
  for (const k of Object.keys(ph[0]!)) {
    if (k === 'pooled') out.pooledShare = phaseRows(ph).reduce((a, x) => a + x[k]!, 0) / ph.length
    else out[`${k}P50Ms`] = summarize(phaseRows(ph).map((x) => x[k]!)).p50
  }
  return out
}

function phasesText(p: StartPath, ph: Phases): string {
  const p50 = (k: string) => fmtMs(summarize(phaseRows(ph).map((x) => x[k]!)).p50)
  if (p === 'strata' || p === 'strata-pool') {
    const rows = phaseRows(ph)
    const pooled = rows.filter((x) => x.pooled === 1).length
    return `p50 of each step: HTTP create ${p50('create')} (of which the daemon's own create ${p50('nodeCreate')}), HTTP exec ${p50('exec')}, HTTP delete ${p50('delete')}` +
      (p === 'strata-pool' ? `; ${pooled} of ${rows.length} creates took a pool sandbox` : '')
  }
  return `create → first exec returned p50 ${p50('firstExec')}; p50 of each step: rootfs ${p50('rootfs')}, container + agent ${p50('container')}, exec ${p50('exec')}, delete ${p50('delete')} (container ${p50('deleteContainer')}, rootfs ${p50('destroyRootfs')})`
}

function startMetrics(r: StartResult, img: SandboxImage): Metric[] {
  const s = summarize(r.samples)
  const rate = r.samples.length / (r.wallMs / 1000)
  const c = r.concurrency === 1 ? '1 at a time' : `${r.concurrency} at a time`
  return [
    {
      key: `sandbox.${r.path}.c${r.concurrency}`,
      label: `${PATH_LABELS[r.path]}, ${c}: latency`,
      value: s.p50,
      unit: 'ms',
      detail: `${s.n} cycles, mean ${fmtMs(s.mean)}, max ${fmtMs(s.max)}${r.phases?.length ? `; ${phasesText(r.path, r.phases)}` : ''}`,
      extra: { ...phaseExtra(r.phases), p50Ms: s.p50, p90Ms: s.p90, p99Ms: s.p99, meanMs: s.mean, maxMs: s.max, n: s.n, concurrency: r.concurrency, wallMs: r.wallMs, layerBytes: img.layerBytes, treeBytes: img.treeBytes },
    },
    {
      key: `sandbox.${r.path}.rate.c${r.concurrency}`,
      label: `${PATH_LABELS[r.path]}, ${c}: sustained creates/s`,
      value: rate,
      unit: 'ops/s',
      detail: `${r.samples.length} cycles in ${(r.wallMs / 1000).toFixed(1)} s`,
      extra: { n: r.samples.length, concurrency: r.concurrency, wallMs: r.wallMs },
    },
  ]
}

export async function sandboxStart(ctx: BenchContext): Promise<Metric[]> {
  const img = await sandboxImage(ctx)
  const iters = ctx.sizes.sandboxIters
  const eagerIters = eagerIterations(iters)
  const paths = selectedPaths()
  ctx.log(`sandbox-start: ${iters} cycles (eager: ${eagerIters}) per path and concurrency (${START_CONCURRENCY.join(', ')}), each run after ${WARMUP} unmeasured ones; every sandbox runs ${SANDBOX_CMD_TEXT}; paths ${paths.join(', ')}`)
  const cycles = new Map<StartPath, (id: string) => Promise<void>>()
  const closers: Array<() => Promise<void>> = []
  const out: Metric[] = []
  let failed: unknown = null
  /** where the strata paths put their per-cycle phases while they are measured */
  let inprocPhases: StrataPhases[] | null = null
  let daemonPhases: DaemonPhases[] | null = null
  const poolNodes = new Map<StartPath, DaemonNode>()
  try {
    for (const p of paths) {
      if (p === 'strata' || p === 'strata-pool') {
        const warmPool = p === 'strata-pool' ? [{ image: IMAGE_REF, count: POOL_SIZE, resources: SANDBOX_RESOURCES, network: 'none' as const }] : undefined
        const d = await startDaemonNode(ctx, img, warmPool ? { warmPool } : {})
        closers.push(() => closeDaemonNode(d))
        ctx.log(`${p}: node daemon pid ${d.pid} at ${d.endpoint} (state ${d.stateDir})${warmPool ? `, warm pool of ${POOL_SIZE}` : ''}; SDK create({ image: '${IMAGE_REF}' }) → exec → delete`)
        cycles.set(p, () => daemonCycle(d, daemonPhases))
        if (warmPool) poolNodes.set(p, d)
      } else if (p === 'strata-inproc') {
        // a warm node: the layer stays mounted between cycles, as while any sandbox of the image runs
        const node = await openNode(ctx, img, { pin: true })
        closers.push(() => closeNode(node))
        cycles.set(p, async (id) => {
          node.phases = inprocPhases
          await strataCycle(node, id)
        })
      } else {
        const b = p === 'runc' ? await runcBaseline(ctx, img) : p === 'eager' ? await eagerBaseline(ctx, img) : await podmanBaseline(ctx, img)
        closers.push(b.close)
        cycles.set(p, b.cycle)
      }
    }
    const prefix: Record<StartPath, string> = { strata: 'bsd', 'strata-pool': 'bsp', 'strata-inproc': 'bst', podman: 'bpm', runc: 'brc', eager: 'beg' }
    for (const c of START_CONCURRENCY) {
      for (const p of paths) {
        const cycle = cycles.get(p)!
        // unmeasured, before every run: caches, and the daemon's layer mount (it lingers 60 s after its last sandbox)
        inprocPhases = null
        daemonPhases = null
        for (let i = 0; i < WARMUP; i++) await cycle(newId(prefix[p]))
        // a measured run starts with a full pool, as on a node that was idle for a moment
        const pd = poolNodes.get(p)
        if (pd) await waitPoolFull(pd)
        await ctx.fixtures.settle()
        const n = p === 'eager' ? eagerIters : iters
        const phases: Phases | undefined = p === 'strata' || p === 'strata-pool' ? (daemonPhases = []) : p === 'strata-inproc' ? (inprocPhases = []) : undefined
        const t0 = performance.now()
        const samples = await runConcurrent(n, c, () => cycle(newId(prefix[p])))
        const r: StartResult = { path: p, concurrency: c, samples, wallMs: performance.now() - t0, phases }
        inprocPhases = null
        daemonPhases = null
        const s = summarize(samples)
        ctx.log(`${p}, ${c} at a time: p50 ${fmtMs(s.p50)}, p99 ${fmtMs(s.p99)}, ${(samples.length / (r.wallMs / 1000)).toFixed(1)} creates/s${r.phases ? ` (${phasesText(p, r.phases)})` : ''}`)
        out.push(...startMetrics(r, img))
      }
    }
  } catch (e) {
    failed = e
  } finally {
    for (const close of closers.reverse()) {
      await close().catch((e: unknown) => {
        ctx.log(`teardown: ${(e as Error).message}`)
        failed ??= e
      })
    }
    // the in-process node and the runc baselines put their cgroups under /strata: the parent goes when empty
    for (const h of cgroupHierarchies()) {
      try {
        fs.rmdirSync(path.join(h, 'strata'))
      } catch {
        // in use (another node), or gone
      }
    }
  }
  if (failed) throw failed
  return out
}

// ------------------------------------------------------------------ sandbox-density

function meminfo(): { total: number; available: number } {
  const s = fs.readFileSync('/proc/meminfo', 'utf8')
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? NaN) * 1024
  return { total: kb('MemTotal'), available: kb('MemAvailable') }
}

/** The memory controller's hierarchy (v1 memory, else v2 unified). */
function memoryHierarchy(): { dir: string; v2: boolean } | null {
  let v2: string | null = null
  for (const m of readMounts()) {
    if (m.fstype === 'cgroup' && fs.existsSync(path.join(m.mountpoint, 'memory.usage_in_bytes'))) return { dir: m.mountpoint, v2: false }
    if (m.fstype === 'cgroup2' && v2 === null) v2 = m.mountpoint
  }
  return v2 ? { dir: v2, v2: true } : null
}

/** Memory charged to one sandbox's cgroup (`rel`: its path below the hierarchy): usage (with page cache) and anonymous memory. */
function cgroupMemory(h: { dir: string; v2: boolean }, rel: string): { usage: number; anon: number } | null {
  const d = path.join(h.dir, rel)
  try {
    const usage = Number(fs.readFileSync(path.join(d, h.v2 ? 'memory.current' : 'memory.usage_in_bytes'), 'utf8').trim())
    const stat = fs.readFileSync(path.join(d, 'memory.stat'), 'utf8')
    const anon = Number(new RegExp(`^${h.v2 ? 'anon' : 'total_rss'} (\\d+)$`, 'm').exec(stat)?.[1] ?? NaN)
    return { usage, anon }
  } catch {
    return null
  }
}

export async function sandboxDensity(ctx: BenchContext): Promise<Metric[]> {
  const img = await sandboxImage(ctx)
  const mem0 = meminfo()
  const reserve = Math.max(DENSITY_RESERVE_BYTES, mem0.total * DENSITY_RESERVE_FRACTION)
  let asked = ctx.sizes.sandboxDensity
  if (asked === 0) {
    const fits = Math.floor((mem0.available - reserve) / DENSITY_ASSUMED_BYTES)
    asked = Math.max(1, Math.min(DENSITY_DEFAULT, fits))
    if (asked < DENSITY_DEFAULT) ctx.log(`density: ${(mem0.available / GiB).toFixed(1)} GiB available leaves room for about ${asked} sandboxes at ${DENSITY_ASSUMED_BYTES / MiB} MiB each; asking for ${asked}`)
  }
  ctx.log(`sandbox-density: up to ${asked} idle sandboxes through the node daemon, one at a time; stops when MemAvailable < ${(reserve / GiB).toFixed(1)} GiB or the daemon refuses`)
  const d = await startDaemonNode(ctx, img)
  ctx.log(`density: node daemon pid ${d.pid} at ${d.endpoint}, cgroup parent /strata/${d.nodeId}`)
  const sbs: Sandbox[] = []
  /** (sandboxes alive, MemAvailable) before every create */
  const memPoints: Array<[number, number]> = []
  const createMs: number[] = []
  const nodeCreateMs: number[] = []
  const deleteMs: number[] = []
  let stopReason = `all ${asked} created`
  let alive = 0
  let listed = 0
  let memAfter = mem0
  let memBefore = mem0
  let rssBefore = NaN
  let rssFull = NaN
  let rssAfter = NaN
  let cg = { n: 0, usage: 0, anon: 0 }
  let failed: unknown = null
  let left: string[] = []
  const memH = memoryHierarchy()
  try {
    // one unmeasured create warms the caches (runc, the agent binary) and mounts the layer,
    // which is not a sandbox's cost: it lingers (60 s) and every later create keeps it
    const w = await daemonCreate(d)
    await w.delete()
    await sleep(500)
    memBefore = meminfo()
    rssBefore = rssBytes(d.pid)
    const t0 = performance.now()
    for (let i = 0; i < asked; i++) {
      const m = meminfo()
      memPoints.push([i, m.available])
      if (m.available < reserve) {
        stopReason = `stopped at ${i}: MemAvailable ${(m.available / GiB).toFixed(2)} GiB < reserve ${(reserve / GiB).toFixed(1)} GiB`
        break
      }
      if (performance.now() - t0 > DENSITY_MAX_MS) {
        stopReason = `stopped at ${i}: creating took longer than ${DENSITY_MAX_MS / 60_000} min`
        break
      }
      const c0 = performance.now()
      let sb: Sandbox
      try {
        sb = await daemonCreate(d)
      } catch (e) {
        stopReason = `stopped at ${i}: create failed: ${(e as Error).message}`
        break
      }
      createMs.push(performance.now() - c0)
      nodeCreateMs.push(sb.info.createMs ?? NaN)
      sbs.push(sb)
      if ((i + 1) % 100 === 0) ctx.log(`  ${i + 1} alive, MemAvailable ${(m.available / GiB).toFixed(2)} GiB, daemon RSS ${(rssBytes(d.pid) / MiB).toFixed(0)} MiB, last create ${fmtMs(createMs[createMs.length - 1]!)}`)
    }
    ctx.log(`density: ${stopReason}`)
    await sleep(1000)
    memAfter = meminfo()
    rssFull = rssBytes(d.pid)
    memPoints.push([sbs.length, memAfter.available])
    if (memH) {
      for (const sb of sbs) {
        const x = cgroupMemory(memH, path.join('strata', d.nodeId, sb.id))
        if (!x) continue
        cg.n++
        cg.usage += x.usage
        cg.anon += x.anon
      }
    }
    // alive at once: with all of them up, the daemon lists each as running and each runs `true` through the API
    const running = new Set((await d.sdk.sandboxes.list({ state: 'running' })).map((x) => x.id))
    listed = sbs.filter((sb) => running.has(sb.id)).length
    let ran = 0
    await runConcurrent(sbs.length, 8, async (i) => {
      const r = await sbs[i]!.exec(['true'], { timeoutMs: EXEC_TIMEOUT_MS }).catch(() => null)
      if (r?.exitCode === 0) ran++
    })
    alive = Math.min(ran, listed)
    ctx.log(`density: ${alive} of ${sbs.length} alive at once (${listed} listed running, ${ran} ran \`true\`); MemAvailable ${(memBefore.available / GiB).toFixed(2)} → ${(memAfter.available / GiB).toFixed(2)} GiB; daemon RSS ${(rssBefore / MiB).toFixed(0)} → ${(rssFull / MiB).toFixed(0)} MiB`)
    // delete all through the API, one at a time (time per delete)
    for (const sb of sbs.splice(0)) {
      const d0 = performance.now()
      await sb.delete()
      deleteMs.push(performance.now() - d0)
    }
    rssAfter = rssBytes(d.pid)
    // the layer lingers after the last sandbox: reclaim drops it (and its lease), then nothing may be left
    await daemonReclaim(d)
    left = await daemonLeftovers(d, img)
  } catch (e) {
    failed = e
  } finally {
    await closeDaemonNode(d).catch((e: unknown) => {
      ctx.log(`teardown: ${(e as Error).message}`)
      failed ??= e
    })
  }
  if (failed) throw failed
  if (left.length) throw new Error(`after deleting every sandbox something is left: ${left.join('; ')}`)
  ctx.log('density: after deleting every sandbox and reclaiming the node nothing is left (sandboxes, mounts, layer mounts and leases, state dirs, cgroups)')
  const n = createMs.length
  const memPer = n ? (memBefore.available - memAfter.available) / n : NaN
  const slopePer = -slope(memPoints)
  const c = summarize(createMs)
  const nc = summarize(nodeCreateMs)
  const del = summarize(deleteMs)
  // how create time moves as the node fills up
  const k = Math.min(100, Math.floor(createMs.length / 4))
  const trend = k >= 2 ? `; first ${k} p50 ${fmtMs(summarize(createMs.slice(0, k)).p50)}, last ${k} p50 ${fmtMs(summarize(createMs.slice(-k)).p50)}` : ''
  const met = alive >= DENSITY_TARGET ? 'met' : asked < DENSITY_TARGET ? `not tested (${asked} asked)` : 'not met'
  const rssPer = n ? (rssFull - rssBefore) / n : NaN
  return [
    {
      key: 'sandbox.density.alive',
      label: 'idle sandboxes alive at once on one node daemon (listed running and each ran `true` through the API with all up)',
      value: alive,
      unit: 'count',
      detail: `${asked} asked, ${n} created; ${listed} listed running, ${alive} ran \`true\`; ${stopReason}; target ≥ ${DENSITY_TARGET}: ${met}`,
      extra: { asked, created: n, alive, listed, target: DENSITY_TARGET, stopReason, memTotal: mem0.total, reserve },
    },
    {
      key: 'sandbox.density.mem',
      label: 'memory per idle sandbox: MemAvailable against sandboxes alive (least-squares slope; kernel objects, mounts, agent, runtime state, daemon)',
      value: wholeKiB(slopePer),
      unit: 'B',
      detail:
        `MemAvailable ${(memBefore.available / GiB).toFixed(2)} → ${(memAfter.available / GiB).toFixed(2)} GiB for ${n} sandboxes = ${fmtKiB(memPer)} each end to end` +
        (!(slopePer > 0) || !(memPer > 0) || Math.abs(slopePer - memPer) > 0.5 * Math.abs(slopePer) ? '; NOISY: other work on the machine moved MemAvailable as much as the sandboxes did' : ''),
      extra: { memBefore: memBefore.available, memAfter: memAfter.available, endToEndPer: memPer, slopePer },
    },
    {
      key: 'sandbox.density.cgroup',
      label: 'memory per idle sandbox charged to its memory cgroup under /strata/<nodeId> (usage; anon in details)',
      value: cg.n ? wholeKiB(cg.usage / cg.n) : NaN,
      unit: 'B',
      detail: cg.n ? `${cg.n} cgroups, anon ${fmtKiB(cg.anon / cg.n)} each` : 'no memory cgroups found',
      extra: { cgroups: cg.n, usagePer: cg.n ? cg.usage / cg.n : NaN, anonPer: cg.n ? cg.anon / cg.n : NaN },
    },
    {
      key: 'sandbox.density.daemon',
      label: 'node daemon RSS with every sandbox up',
      value: wholeKiB(rssFull),
      unit: 'B',
      detail: `${(rssBefore / MiB).toFixed(1)} MiB before the first create, ${(rssFull / MiB).toFixed(1)} MiB with ${n} up (${fmtKiB(rssPer)} per sandbox), ${(rssAfter / MiB).toFixed(1)} MiB after deleting them`,
      extra: { rssBefore, rssFull, rssAfter, perSandbox: rssPer },
    },
    {
      key: 'sandbox.density.create',
      label: 'create of an idle sandbox through the API while the others stay up (rootfs + container + agent ping)',
      value: c.p50,
      unit: 'ms',
      detail: `${c.n} creates, one at a time${trend}; the daemon's own create time p50 ${fmtMs(nc.p50)}`,
      extra: { p50Ms: c.p50, p99Ms: c.p99, meanMs: c.mean, n: c.n, nodeCreateP50Ms: nc.p50 },
    },
    {
      key: 'sandbox.density.delete',
      label: 'delete of an idle sandbox through the API (container, rootfs, state dir, record)',
      value: del.p50,
      unit: 'ms',
      detail: `${del.n} deletes, one at a time`,
      extra: { p50Ms: del.p50, p99Ms: del.p99, meanMs: del.mean, n: del.n },
    },
  ]
}

/** Least-squares slope of y over x. */
function slope(points: Array<[number, number]>): number {
  const n = points.length
  if (n < 2) return NaN
  const mx = points.reduce((a, p) => a + p[0], 0) / n
  const my = points.reduce((a, p) => a + p[1], 0) / n
  let sxy = 0
  let sxx = 0
  for (const [x, y] of points) {
    sxy += (x - mx) * (y - my)
    sxx += (x - mx) ** 2
  }
  return sxx ? sxy / sxx : NaN
}

/** Rounded to whole KiB, so the report prints KiB rather than a long byte count. */
function wholeKiB(n: number): number {
  return Number.isFinite(n) ? Math.round(n / 1024) * 1024 : n
}

function fmtKiB(n: number): string {
  return Number.isFinite(n) ? `${(n / 1024).toFixed(0)} KiB` : 'n/a'
}

// ------------------------------------------------------------------ sandbox-cold

/** The FUSE daemon's bytes read from the DFS so far (its stats RPC), as the rootfs tests read them. */
async function fuseBytesRead(rpc: RpcClient, address: string): Promise<number> {
  const st = (await rpc.stats(address)) as { fs?: { bytesRead?: number } }
  return st.fs?.bytesRead ?? NaN
}

export async function sandboxCold(ctx: BenchContext): Promise<Metric[]> {
  const img = await sandboxImage(ctx)
  const fuse = readClusterFile(img.ns.dir).processes.find((p) => p.role === 'fuse')
  if (!fuse) throw new Error('the namespace cluster has no FUSE daemon')
  const trials = Math.max(1, ctx.sizes.sandboxColdTrials)
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 10_000, maxBackoffMs: 200 })
  const samples: Array<{ bytes: number; ms: number; createMs: number; nodeCreateMs: number; execMs: number }> = []
  try {
    for (let t = 0; t < trials; t++) {
      // a cold node: a fresh FUSE daemon (its counters start at 0, nothing cached in it), a freshly
      // started node daemon (no layer mounted, nothing cached), empty page caches
      ctx.log(`cold trial ${t + 1}/${trials}: restarting ${fuse.name}, starting a node daemon, dropping caches`)
      await clusterKill({ dir: img.ns.dir, node: fuse.name, signal: 'TERM' })
      await clusterStart({ dir: img.ns.dir, node: fuse.name, timeoutMs: 60_000 })
      const d = await startDaemonNode(ctx, img)
      try {
        const info = await d.sdk.node()
        if (info.layers.length) throw new Error(`the fresh node daemon has ${info.layers.length} layer(s) mounted already`)
        if (!(await ctx.fixtures.dropCaches())) throw new Error('cannot drop the page cache (needs root): a cold start cannot be measured')
        const before = await fuseBytesRead(rpc, fuse.address)
        const t0 = performance.now()
        const sb = await daemonCreate(d)
        const t1 = performance.now()
        const r = await sb.exec([...SANDBOX_CMD], { timeoutMs: 120_000 })
        const t2 = performance.now()
        const after = await fuseBytesRead(rpc, fuse.address)
        checkOutput(`cold sandbox ${sb.id}`, r.stdout, r.exitCode)
        samples.push({ bytes: after - before, ms: t2 - t0, createMs: t1 - t0, nodeCreateMs: sb.info.createMs ?? NaN, execMs: t2 - t1 })
        ctx.log(`  ${((after - before) / 1e6).toFixed(2)} MB read from the DFS before the first exec returned (${(((after - before) / img.layerBytes) * 100).toFixed(2)}% of the ${(img.layerBytes / 1e6).toFixed(0)} MB layer); create ${fmtMs(t1 - t0)} (daemon's own ${fmtMs(sb.info.createMs ?? NaN)}), first exec ${fmtMs(t2 - t1)}`)
        await sb.delete()
      } finally {
        await closeDaemonNode(d)
      }
    }
  } finally {
    rpc.close()
  }
  const bytes = summarize(samples.map((s) => s.bytes))
  const ms = summarize(samples.map((s) => s.ms))
  const create = summarize(samples.map((s) => s.createMs))
  const nodeCreate = summarize(samples.map((s) => s.nodeCreateMs))
  const execMs = summarize(samples.map((s) => s.execMs))
  return [
    {
      key: 'sandbox.cold.bytes',
      label: 'cold node: bytes the FUSE daemon read from the DFS from the create request until the first exec returned (node daemon over HTTP)',
      value: bytes.p50,
      unit: 'B',
      detail: `${(bytes.p50 / 1e6).toFixed(2)} MB (median of ${samples.length}; min ${(Math.min(...samples.map((s) => s.bytes)) / 1e6).toFixed(2)}, max ${(bytes.max / 1e6).toFixed(2)} MB)`,
      extra: { trials: samples.length, maxBytes: bytes.max },
    },
    {
      key: 'sandbox.cold.layer',
      label: 'the image: its one EROFS layer in the DFS',
      value: img.layerBytes,
      unit: 'B',
      detail: `${(img.layerBytes / 1e6).toFixed(1)} MB layer; the tree is ${(img.treeBytes / 1e6).toFixed(1)} MB`,
      extra: { treeBytes: img.treeBytes, layers: img.layers.length },
    },
    {
      key: 'sandbox.cold.start',
      label: 'cold node: create → first exec returned (node daemon over HTTP)',
      value: ms.p50,
      unit: 'ms',
      detail: `median of ${samples.length}; HTTP create (layer mount, overlay, container, agent) ${fmtMs(create.p50)}, of which the daemon's own ${fmtMs(nodeCreate.p50)}; first exec ${fmtMs(execMs.p50)}`,
      extra: { p50Ms: ms.p50, p99Ms: ms.p99, createP50Ms: create.p50, nodeCreateP50Ms: nodeCreate.p50, execP50Ms: execMs.p50, n: samples.length },
    },
  ]
}
