// The embedded single-node cluster: checked for, brought up and torn down
// through the same fs/admin functions as `strata cluster up` / `cluster
// down`, with the sandbox daemon role registered as the CLI registers it.
// Also the handles the later stages share: a DFS file client (the demo
// publishes through it, never through the FUSE mount), the image store on
// it, the SDK client of the node daemon, and the FUSE daemon's counters.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  clusterDown,
  clusterExists,
  clusterUp,
  processAlive,
  readClusterFile,
  registerClusterRole,
  stopProcesses,
  type ClusterFile,
  type ClusterProcess,
  type ProgressEvent,
} from '../../fs/admin/index.js'
import { metaAddressesOf } from '../../fs/admin/fs-ops.js'
import { FileSystem } from '../../fs/client/index.js'
import { fuseUsable } from '../../fs/fuse/index.js'
import { RpcClient } from '../../fs/rpc/index.js'
import { SANDBOX_ROLE, sandboxClusterRole } from '../../sandbox/daemon/index.js'
import { ImageStore } from '../../sandbox/image/store.js'
import { mountsUnder, unmountTree } from '../../sandbox/rootfs/mounts.js'
import { Strata } from '../../sandbox/sdk/index.js'
import type { Reporter, StepHandle } from './report.js'

// what `strata cluster up` starts for the sandbox role; the CLI registers it in bin/cli.ts
registerClusterRole(sandboxClusterRole)

export const STORAGE_NODES = 1
export const TARGETS_PER_NODE = 2
export const REPLICAS = 1
export const CHUNK_SIZE = 1024 * 1024
/** cluster up on a loaded 2-core machine: meta, FUSE and the sandbox daemon start after the storage bootstrap */
const UP_TIMEOUT_MS = 180_000

export interface DemoDir {
  dir: string
  /** true when the demo created it (then it removes the whole directory) */
  created: boolean
}

/** The cluster directory: --dir (must be empty or absent) or a fresh temp dir. */
export function prepareDir(explicit: string | null): DemoDir {
  if (!explicit) return { dir: fs.mkdtempSync(path.join(os.tmpdir(), 'strata-demo-')), created: true }
  const dir = path.resolve(explicit)
  if (fs.existsSync(dir)) {
    if (!fs.statSync(dir).isDirectory()) throw new Error(`--dir ${dir} exists and is not a directory`)
    if (fs.readdirSync(dir).length > 0) throw new Error(`--dir ${dir} is not empty; the demo needs a fresh directory (it deletes what it creates there)`)
    return { dir, created: false }
  }
  fs.mkdirSync(dir, { recursive: true })
  return { dir, created: true }
}

/**
 * Removes what the demo put in the directory (the directory too when the
 * demo made it) — never through a mount: a leftover FUSE mount or dataset
 * bind below it would let the rm reach into the DFS (or hang on a dead
 * mount). Whatever is still mounted is unmounted first; if that fails the
 * directory stays and the error says why.
 */
export async function removeDir(d: DemoDir): Promise<void> {
  if (mountsUnder(d.dir).length) await unmountTree(d.dir)
  const left = mountsUnder(d.dir)
  if (left.length) throw new Error(`not removing ${d.dir}: still mounted below it: ${left.map((m) => m.mountpoint).join(', ')}`)
  if (d.created) {
    fs.rmSync(d.dir, { recursive: true, force: true })
    return
  }
  for (const name of fs.readdirSync(d.dir)) fs.rmSync(path.join(d.dir, name), { recursive: true, force: true })
}

function onPath(bin: string): boolean {
  return (process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin').split(':').some((dir) => {
    try {
      fs.accessSync(path.join(dir, bin), fs.constants.X_OK)
      return true
    } catch {
      return false
    }
  })
}

/** What the demo cannot run without, as messages (empty: good to go). */
export function missingPrerequisites(): string[] {
  const out: string[] = []
  if (process.getuid?.() !== 0) out.push('root (mounts, cgroups and runc need it): run it as root')
  if (!fuseUsable()) out.push('a usable FUSE (/dev/fuse and libfuse2 for fuse-native): the sandboxes read their layers through the cluster\'s FUSE mount')
  if (!onPath('runc')) out.push('runc on PATH (apt-get install runc; scripts/setup.sh does)')
  if (!onPath('mkfs.erofs')) out.push('mkfs.erofs on PATH (apt-get install erofs-utils; scripts/setup.sh does)')
  return out
}

/** What every stage after the bring-up works with. */
export interface DemoCluster {
  dir: string
  file: ClusterFile
  /** DFS file client (meta for names, storage for bytes) */
  fs: FileSystem
  /** the DFS image store, on `fs` */
  store: ImageStore
  /** SDK client of the node's sandbox daemon */
  strata: Strata
  fuse: ClusterProcess
  sandboxDaemon: ClusterProcess
  upMs: number
  /** bytes the FUSE daemon (the node's mount, which the sandboxes read through) read from the DFS so far */
  fuseBytesRead(): Promise<number>
  close(): Promise<void>
}

/** `strata cluster up` in-process, its stages shown as demo steps. */
export async function bringUp(dir: string, r: Reporter): Promise<DemoCluster> {
  let step: StepHandle | null = null
  const progress = (e: ProgressEvent) => {
    if (e.state === 'start') step = r.begin(e.stage)
    else if (e.state === 'update') step?.update(e.detail ?? '')
    else if (e.state === 'done') step?.done(e.detail)
    else step?.fail(e.detail)
  }
  const up = await clusterUp({
    dir,
    name: 'strata-demo',
    storageNodes: STORAGE_NODES,
    targetsPerNode: TARGETS_PER_NODE,
    replicas: REPLICAS,
    chunkSize: CHUNK_SIZE,
    mount: true,
    sandbox: true,
    timers: 'local',
    timeoutMs: UP_TIMEOUT_MS,
    progress,
  })
  const file = up.cluster
  const fuse = file.processes.find((p) => p.role === 'fuse')
  const sandboxDaemon = file.processes.find((p) => p.role === SANDBOX_ROLE)
  if (!fuse) throw new Error('cluster up started no FUSE daemon (no usable /dev/fuse?)')
  if (!sandboxDaemon) throw new Error('cluster up started no sandbox daemon (runc missing from PATH, or no FUSE mount)')
  const fsys = new FileSystem({
    mgmtdAddresses: file.mgmtdAddresses,
    metaFallbackAddresses: metaAddressesOf(file),
    // the demo closes every file it writes: close carries the lengths
    periodicSyncMs: 0,
    metaRetry: { totalMs: 60_000 },
    storageRetry: { deadlineMs: 60_000, readDeadlineMs: 60_000 },
  })
  const store = new ImageStore(fsys)
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 10_000, maxBackoffMs: 200 })
  let strata: Strata | null = null
  try {
    await store.open()
    // endpoint and token from the cluster directory, as `new Strata()` finds a local cluster's
    strata = new Strata({ cluster: dir, timeoutMs: 300_000 })
  } catch (e) {
    await store.close().catch(() => undefined)
    await fsys.shutdown().catch(() => undefined)
    rpc.close()
    throw e
  }
  let closed = false
  return {
    dir,
    file,
    fs: fsys,
    store,
    strata,
    fuse,
    sandboxDaemon,
    upMs: up.elapsedMs,
    async fuseBytesRead() {
      const st = (await rpc.stats(fuse.address)) as { fs?: { bytesRead?: number } }
      const n = st.fs?.bytesRead
      if (typeof n !== 'number') throw new Error(`${fuse.name} reported no fs.bytesRead in its stats`)
      return n
    },
    async close() {
      if (closed) return
      closed = true
      strata?.close()
      rpc.close()
      await store.close().catch(() => undefined)
      await fsys.shutdown().catch(() => undefined)
    },
  }
}

/**
 * `strata cluster down` (which first has the sandbox daemon remove every
 * sandbox), repeated until nothing of the cluster runs: a Ctrl-C during
 * `cluster up` may race with a process being launched, and the second pass
 * catches it. Falls back to SIGKILL by pid.
 */
export async function tearDown(dir: string): Promise<{ stopped: string[] }> {
  if (!clusterExists(dir)) return { stopped: [] }
  const stopped = new Set<string>()
  for (let pass = 0; pass < 3; pass++) {
    try {
      for (const n of (await clusterDown({ dir, graceMs: 10_000 })).stopped) stopped.add(n)
    } catch {
      try {
        await stopProcesses(readClusterFile(dir).processes.filter(processAlive), 500)
      } catch {
        // best effort; checked below
      }
    }
    await sleep(100)
    if (!readClusterFile(dir).processes.some(processAlive)) break
  }
  const left = readClusterFile(dir).processes.filter(processAlive)
  if (left.length) throw new Error(`could not stop ${left.map((p) => `${p.name} (pid ${p.pid})`).join(', ')}`)
  return { stopped: [...stopped] }
}
