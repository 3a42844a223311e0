// Sandbox benchmarks (issue 5), one image for all of them: the Debian
// bookworm minbase tree with python3, pip and git that the image benchmarks
// use (sandbox/image/debootstrap.ts, cached after the first build), imported
// into the DFS image store of the namespace cluster as one EROFS layer
// (importPath of the directory: a 'dir' import). Every sandbox runs the same
// command, `python3 -c 'print(1)'`, and must print 1.
//
// - sandbox-start: create → first exec returns → delete, `iters` times at
//   concurrency 1 and 8, p50/p99 per cycle and sustained creates/s, for
//     strata  in-process LayerMounts + RootfsBuilder + ContainerBackend, what
//             the node daemon does (strataCycle); the node holds the layer
//             mounted (a warm node: a pin, as when any sandbox of the image runs)
//     podman  `podman run --rm` of the same tree (`podman import` of its tar),
//             in a private podman store under the scratch directory
//     runc    bare `runc run` of a bundle whose rootfs was copied once before;
//             our OCI config (ociSpec) with the command as the process and no
//             agent; each run its own container id and config.json
//     eager   untar the image tar into a fresh directory, `runc run` as above,
//             remove the directory
//   All four get the same limits (1 CPU, 512 MiB, 256 pids) and no network.
// - sandbox-density: N idle strata sandboxes created one after another (N
//   from the sizes, 1000 when the memory is there), stopping early when
//   MemAvailable falls under a reserve; how many were alive at once (the
//   agent of each answers a ping), memory per sandbox (MemAvailable drop and
//   the sandboxes' memory cgroups), time per create; then every sandbox is
//   deleted and nothing may be left (mounts, cgroups, state dirs, leases).
// - sandbox-cold: a fresh FUSE daemon (`cluster kill` + `cluster start` of
//   the node's fuse process), dropped page caches and a new LayerMounts: the
//   bytes the FUSE daemon read from the DFS (its stats RPC) until the first
//   exec returned, against the size of the layer.
//
// Sizes: `--quick` shrinks them; STRATA_BENCH_SANDBOX_ITERS (cycles per path
// and concurrency), STRATA_BENCH_SANDBOX_DENSITY (sandboxes; 0 = 1000 when the
// memory is there), STRATA_BENCH_SANDBOX_COLD_TRIALS override them, and
// STRATA_BENCH_SANDBOX_PATHS (e.g. `strata,runc`) runs a subset of the paths.
//
// Everything is torn down at the end, also on failure: sandboxes deleted,
// mounts removed, runc containers deleted, podman containers and images
// removed with their store. A Ctrl-C runs a synchronous emergency cleanup
// (runc delete, lazy unmounts) before the runner destroys the cluster.

import fs from 'node:fs'
import path from 'node:path'
import { execFile, execFileSync } from 'node:child_process'
import { promisify } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { clusterKill, clusterStart, readClusterFile } from '../fs/admin/index.js'
import { FileSystem } from '../fs/client/index.js'
import { MNT, native } from '../fs/common/native.js'
import { readMounts } from '../fs/fuse/mounts.js'
import { RpcClient } from '../fs/rpc/index.js'
import { AGENT_PATH_IN_SANDBOX, ContainerBackend, ociSpec } from '../sandbox/backends/container/index.js'
import type { SandboxHandle, SandboxResources } from '../sandbox/backends/types.js'
import { ImageStore, ensureDebianRootfs, importPath } from '../sandbox/image/index.js'
import { LayerMounts, RootfsBuilder, type LayerMount, type Rootfs } from '../sandbox/rootfs/index.js'
import { mountsUnder, unmountTree } from '../sandbox/rootfs/mounts.js'
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
/** unmeasured cycles per path before its first measured run */
const WARMUP = 2
const IMAGE_NAME = 'bench/sandbox'
const IMAGE_TAG = 'debian'
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

export type StartPath = 'strata' | 'podman' | 'runc' | 'eager'
const ALL_PATHS: StartPath[] = ['strata', 'runc', 'eager', 'podman']

export const PATH_LABELS: Record<StartPath, string> = {
  strata: 'Strata: overlay on the lazily mounted EROFS layer + runc + agent; create → exec → delete',
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
 * returns (and printed 1) → delete. The SDK over HTTP replaces this function
 * once the node daemon exists.
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

/** What is left of the node's sandboxes and layers: [] when nothing. */
async function leftovers(node: StrataNode, ids: Iterable<string>): Promise<string[]> {
  const left: string[] = []
  const ms = mountsUnder(node.dir)
  if (ms.length) left.push(`${ms.length} mount(s) under ${node.dir} (${ms.slice(0, 3).map((m) => m.mountpoint).join(', ')}…)`)
  if (node.layers.list().length) left.push(`layer holds: ${node.layers.list().map((l) => l.digest.slice(0, 19)).join(', ')}`)
  const sbs = fs.readdirSync(path.join(node.dir, 'sb'))
  if (sbs.length) left.push(`${sbs.length} sandbox state dir(s) under ${node.dir}/sb`)
  const layerDirs = fs.existsSync(node.layers.dir) ? fs.readdirSync(node.layers.dir) : []
  if (layerDirs.length) left.push(`${layerDirs.length} layer mountpoint(s) under ${node.layers.dir}`)
  const cg = cgroupsLeft('strata', new Set(ids))
  if (cg.length) left.push(`${cg.length} cgroup(s): ${cg.slice(0, 3).join(', ')}…`)
  const leases = (await node.store.listLeases()).filter((l) => l.holder === node.nodeId)
  if (leases.length) left.push(`${leases.length} lease(s) held by ${node.nodeId}`)
  return left
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
    close: async () => {
      runcDeleteAllSync('runc', root)
      drop()
      const cg = cgroupsLeft('strata', ids)
      fs.rmSync(dir, { recursive: true, force: true })
      if (cg.length) throw new Error(`runc baseline left ${cg.length} cgroup(s): ${cg.slice(0, 3).join(', ')}`)
    },
  }
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
    close: async () => {
      runcDeleteAllSync('runc', root)
      drop()
      const cg = cgroupsLeft('strata', ids)
      fs.rmSync(dir, { recursive: true, force: true })
      if (cg.length) throw new Error(`eager baseline left ${cg.length} cgroup(s): ${cg.slice(0, 3).join(', ')}`)
    },
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

interface StartResult {
  path: StartPath
  concurrency: number
  samples: number[]
  wallMs: number
  phases?: StrataPhases[] | undefined
}

/** The eager path untars the whole image per cycle; STRATA_BENCH_SANDBOX_EAGER_ITERS, else at most 16 cycles. */
export function eagerIterations(iters: number): number {
  return envInt('STRATA_BENCH_SANDBOX_EAGER_ITERS') ?? Math.min(iters, 16)
}

function phaseExtra(ph: StrataPhases[] | undefined): Record<string, number> {
  if (!ph?.length) return {}
  const p50 = (k: keyof StrataPhases) => summarize(ph.map((x) => x[k])).p50
  return {
    firstExecP50Ms: p50('firstExec'), rootfsP50Ms: p50('rootfs'), containerP50Ms: p50('container'), execP50Ms: p50('exec'),
    deleteP50Ms: p50('delete'), deleteContainerP50Ms: p50('deleteContainer'), destroyRootfsP50Ms: p50('destroyRootfs'),
  }
}

function phasesText(ph: StrataPhases[]): string {
  const p50 = (k: keyof StrataPhases) => fmtMs(summarize(ph.map((x) => x[k])).p50)
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
      detail: `${s.n} cycles, mean ${fmtMs(s.mean)}, max ${fmtMs(s.max)}${r.phases?.length ? `; ${phasesText(r.phases)}` : ''}`,
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
  ctx.log(`sandbox-start: ${iters} cycles (eager: ${eagerIters}) per path and concurrency (${START_CONCURRENCY.join(', ')}); every sandbox runs ${SANDBOX_CMD_TEXT}; paths ${paths.join(', ')}`)
  const cycles = new Map<StartPath, (id: string) => Promise<void>>()
  const closers: Array<() => Promise<void>> = []
  const out: Metric[] = []
  let failed: unknown = null
  let strataNode: StrataNode | null = null
  try {
    for (const p of paths) {
      if (p === 'strata') {
        // a warm node: the layer stays mounted between cycles, as while any sandbox of the image runs
        const node = await openNode(ctx, img, { pin: true })
        closers.push(() => closeNode(node))
        strataNode = node
        cycles.set(p, (id) => strataCycle(node, id))
      } else {
        const b = p === 'runc' ? await runcBaseline(ctx, img) : p === 'eager' ? await eagerBaseline(ctx, img) : await podmanBaseline(ctx, img)
        closers.push(b.close)
        cycles.set(p, b.cycle)
      }
    }
    const prefix: Record<StartPath, string> = { strata: 'bst', podman: 'bpm', runc: 'brc', eager: 'beg' }
    for (const p of paths) {
      ctx.log(`${p}: ${WARMUP} warm-up cycles`)
      for (let i = 0; i < WARMUP; i++) await cycles.get(p)!(newId(prefix[p]))
    }
    for (const c of START_CONCURRENCY) {
      for (const p of paths) {
        await ctx.fixtures.settle()
        const cycle = cycles.get(p)!
        const n = p === 'eager' ? eagerIters : iters
        if (strataNode) strataNode.phases = p === 'strata' ? [] : null
        const t0 = performance.now()
        const samples = await runConcurrent(n, c, () => cycle(newId(prefix[p])))
        const r: StartResult = { path: p, concurrency: c, samples, wallMs: performance.now() - t0, phases: p === 'strata' ? (strataNode?.phases ?? undefined) : undefined }
        const s = summarize(samples)
        ctx.log(`${p}, ${c} at a time: p50 ${fmtMs(s.p50)}, p99 ${fmtMs(s.p99)}, ${(samples.length / (r.wallMs / 1000)).toFixed(1)} creates/s${r.phases ? ` (${phasesText(r.phases)})` : ''}`)
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

/** Memory charged to one sandbox's cgroup: usage (with page cache) and anonymous memory. */
function cgroupMemory(h: { dir: string; v2: boolean }, id: string): { usage: number; anon: number } | null {
  const d = path.join(h.dir, 'strata', id)
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
  ctx.log(`sandbox-density: up to ${asked} idle sandboxes, one at a time; stops when MemAvailable < ${(reserve / GiB).toFixed(1)} GiB`)
  const node = await openNode(ctx, img, { pin: false })
  const ids: string[] = []
  /** (sandboxes alive, MemAvailable) before every create */
  const memPoints: Array<[number, number]> = []
  const createMs: number[] = []
  const deleteMs: number[] = []
  let stopReason = `all ${asked} created`
  let alive = 0
  let memAfter = mem0
  let memBefore = mem0
  let cg = { n: 0, usage: 0, anon: 0 }
  let failed: unknown = null
  let left: string[] = []
  const memH = memoryHierarchy()
  try {
    // the layer mount itself is not a sandbox's cost: mounted before the baseline reading
    node.pin.push(...(await Promise.all(img.layers.map((d) => node.layers.acquire(d, 'bench-pin')))))
    // one unmeasured create warms the caches (runc, the agent binary)
    await strataDelete(node, await strataCreate(node, newId('bdn')))
    await sleep(500)
    memBefore = meminfo()
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
      const id = newId('bdn')
      const c0 = performance.now()
      try {
        await strataCreate(node, id)
      } catch (e) {
        stopReason = `stopped at ${i}: create failed: ${(e as Error).message}`
        break
      }
      createMs.push(performance.now() - c0)
      ids.push(id)
      if ((i + 1) % 100 === 0) ctx.log(`  ${i + 1} alive, MemAvailable ${(m.available / GiB).toFixed(2)} GiB, last create ${fmtMs(createMs[createMs.length - 1]!)}`)
    }
    ctx.log(`density: ${stopReason}`)
    await sleep(1000)
    memAfter = meminfo()
    memPoints.push([ids.length, memAfter.available])
    // alive at once: every agent answers a ping with all of them up
    const pongs = await Promise.all(ids.map(async (id, i) => {
      await sleep(Math.floor(i / 32) * 2) // spread the connects a little
      return node.live.get(id)!.handle!.agent.ping({ timeoutMs: 10_000 }).then(() => true, () => false)
    }))
    alive = pongs.filter(Boolean).length
    if (memH) {
      for (const id of ids) {
        const x = cgroupMemory(memH, id)
        if (!x) continue
        cg.n++
        cg.usage += x.usage
        cg.anon += x.anon
      }
    }
    ctx.log(`density: ${alive} of ${ids.length} alive at once; MemAvailable ${(memBefore.available / GiB).toFixed(2)} → ${(memAfter.available / GiB).toFixed(2)} GiB`)
    // delete all, one at a time (time per delete)
    for (const id of ids) {
      const d0 = performance.now()
      await strataDelete(node, node.live.get(id)!)
      deleteMs.push(performance.now() - d0)
    }
    for (const p of node.pin.splice(0)) await p.release()
    left = await leftovers(node, [...ids, ...node.live.keys()])
  } catch (e) {
    failed = e
  } finally {
    await closeNode(node).catch((e: unknown) => {
      ctx.log(`teardown: ${(e as Error).message}`)
      failed ??= e
    })
  }
  if (failed) throw failed
  if (left.length) throw new Error(`after deleting every sandbox something is left: ${left.join('; ')}`)
  ctx.log('density: after deleting every sandbox nothing is left (mounts, layer holds, state dirs, cgroups, leases)')
  const n = ids.length
  const memPer = n ? (memBefore.available - memAfter.available) / n : NaN
  const slopePer = -slope(memPoints)
  const c = summarize(createMs)
  const d = summarize(deleteMs)
  // how create time moves as the node fills up
  const k = Math.min(100, Math.floor(createMs.length / 4))
  const trend = k >= 2 ? `; first ${k} p50 ${fmtMs(summarize(createMs.slice(0, k)).p50)}, last ${k} p50 ${fmtMs(summarize(createMs.slice(-k)).p50)}` : ''
  const met = alive >= DENSITY_TARGET ? 'met' : asked < DENSITY_TARGET ? `not tested (${asked} asked)` : 'not met'
  return [
    {
      key: 'sandbox.density.alive',
      label: 'idle Strata sandboxes alive at once (each agent answered a ping)',
      value: alive,
      unit: 'count',
      detail: `${asked} asked, ${n} created; ${stopReason}; target ≥ ${DENSITY_TARGET}: ${met}`,
      extra: { asked, created: n, alive, target: DENSITY_TARGET, stopReason, memTotal: mem0.total, reserve },
    },
    {
      key: 'sandbox.density.mem',
      label: 'memory per idle sandbox: MemAvailable against sandboxes alive (least-squares slope; kernel objects, mounts, agent)',
      value: wholeKiB(slopePer),
      unit: 'B',
      detail:
        `MemAvailable ${(memBefore.available / GiB).toFixed(2)} → ${(memAfter.available / GiB).toFixed(2)} GiB for ${n} sandboxes = ${fmtKiB(memPer)} each end to end` +
        (!(slopePer > 0) || !(memPer > 0) || Math.abs(slopePer - memPer) > 0.5 * Math.abs(slopePer) ? '; NOISY: other work on the machine moved MemAvailable as much as the sandboxes did' : ''),
      extra: { memBefore: memBefore.available, memAfter: memAfter.available, endToEndPer: memPer, slopePer },
    },
    {
      key: 'sandbox.density.cgroup',
      label: 'memory per idle sandbox charged to its memory cgroup (usage; anon in details)',
      value: cg.n ? wholeKiB(cg.usage / cg.n) : NaN,
      unit: 'B',
      detail: cg.n ? `${cg.n} cgroups, anon ${fmtKiB(cg.anon / cg.n)} each` : 'no memory cgroups found',
      extra: { cgroups: cg.n, usagePer: cg.n ? cg.usage / cg.n : NaN, anonPer: cg.n ? cg.anon / cg.n : NaN },
    },
    {
      key: 'sandbox.density.create',
      label: 'create of an idle sandbox while the others stay up (rootfs + container + agent ping)',
      value: c.p50,
      unit: 'ms',
      detail: `${c.n} creates, one at a time${trend}`,
      extra: { p50Ms: c.p50, p99Ms: c.p99, meanMs: c.mean, n: c.n },
    },
    {
      key: 'sandbox.density.delete',
      label: 'delete of an idle sandbox (container, rootfs, state dir)',
      value: d.p50,
      unit: 'ms',
      detail: `${d.n} deletes, one at a time`,
      extra: { p50Ms: d.p50, p99Ms: d.p99, meanMs: d.mean, n: d.n },
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
  const samples: Array<{ bytes: number; ms: number; createMs: number }> = []
  try {
    for (let t = 0; t < trials; t++) {
      // a cold node: a fresh FUSE daemon (its counters start at 0, nothing cached in it), empty page caches, new layer mounts
      ctx.log(`cold trial ${t + 1}/${trials}: restarting ${fuse.name}, dropping caches`)
      await clusterKill({ dir: img.ns.dir, node: fuse.name, signal: 'TERM' })
      await clusterStart({ dir: img.ns.dir, node: fuse.name, timeoutMs: 60_000 })
      if (!(await ctx.fixtures.dropCaches())) throw new Error('cannot drop the page cache (needs root): a cold start cannot be measured')
      const node = await openNode(ctx, img, { pin: false })
      try {
        const before = await fuseBytesRead(rpc, fuse.address)
        const id = newId('bcd')
        const t0 = performance.now()
        const sb = await strataCreate(node, id)
        const t1 = performance.now()
        const r = await sb.handle!.agent.exec([...SANDBOX_CMD], { timeoutMs: 120_000 })
        const t2 = performance.now()
        checkOutput(`cold sandbox ${id}`, r.stdout, r.exitCode)
        const after = await fuseBytesRead(rpc, fuse.address)
        samples.push({ bytes: after - before, ms: t2 - t0, createMs: t1 - t0 })
        ctx.log(`  ${((after - before) / 1e6).toFixed(2)} MB read from the DFS before the first exec returned (${(((after - before) / img.layerBytes) * 100).toFixed(2)}% of the ${(img.layerBytes / 1e6).toFixed(0)} MB layer); create ${fmtMs(t1 - t0)}, first exec ${fmtMs(t2 - t1)}`)
        await strataDelete(node, sb)
      } finally {
        await closeNode(node)
      }
    }
  } finally {
    rpc.close()
  }
  const bytes = summarize(samples.map((s) => s.bytes))
  const ms = summarize(samples.map((s) => s.ms))
  const create = summarize(samples.map((s) => s.createMs))
  return [
    {
      key: 'sandbox.cold.bytes',
      label: 'cold node: bytes the FUSE daemon read from the DFS until the first exec returned',
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
      label: 'cold node: create → first exec returned',
      value: ms.p50,
      unit: 'ms',
      detail: `median of ${samples.length}; create alone (layer mount, overlay, container, agent) ${fmtMs(create.p50)}`,
      extra: { p50Ms: ms.p50, p99Ms: ms.p99, createP50Ms: create.p50, n: samples.length },
    },
  ]
}
