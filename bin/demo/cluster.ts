// Stage 1 and 6: the embedded cluster, brought up and torn down through the
// same fs/admin functions as `strata cluster up` / `cluster down`, plus the
// handles every other stage shares (admin session, mgmtd client, storage
// client) and small routing helpers.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import {
  clusterDown,
  clusterExists,
  clusterUp,
  fetchRouting,
  formatListing,
  listChains,
  openAdminSession,
  processAlive,
  readClusterFile,
  stopProcesses,
  type AdminSession,
  type ChainRow,
  type ClusterFile,
  type ProgressEvent,
} from '../../fs/admin/index.js'
import { StorageClient } from '../../fs/client/index.js'
import { MgmtdClient } from '../../fs/mgmtd/index.js'
import { RpcClient } from '../../fs/rpc/index.js'
import { chainStatus, type RoutingInfo } from '../../fs/common/types.js'
import type { Reporter, StepHandle } from './report.js'

export const STORAGE_NODES = 3
export const TARGETS_PER_NODE = 2
export const REPLICAS = 3
export const CHUNK_SIZE = 1024 * 1024

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

/** Removes what the demo put in the directory (the directory too when the demo made it). */
export function removeDir(d: DemoDir): void {
  if (d.created) {
    fs.rmSync(d.dir, { recursive: true, force: true })
    return
  }
  for (const name of fs.readdirSync(d.dir)) fs.rmSync(path.join(d.dir, name), { recursive: true, force: true })
}

/** What every stage after the bring-up works with. */
export interface DemoCluster {
  dir: string
  file: ClusterFile
  /** operator session (mgmtd + raw RPC client for storage calls) */
  admin: AdminSession
  mgmtd: MgmtdClient
  client: StorageClient
  rpc: RpcClient
  /** chain ids of the chain table, in table order */
  chains: number[]
  chunkSize: number
  upMs: number
  close(): void
}

/** `strata cluster up` in-process, with its stages shown as demo steps. */
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
    mount: false,
    sandbox: false,
    timers: 'local',
    progress,
  })
  const file = up.cluster
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 10_000, maxBackoffMs: 200 })
  const admin = openAdminSession({ mgmtdAddresses: file.mgmtdAddresses, clusterDir: dir, timeoutMs: 5000 })
  const mgmtd = new MgmtdClient({ addresses: file.mgmtdAddresses, rpc })
  // routing watch: the client sees chain changes within a refresh period even without errors
  mgmtd.watch(file.settings.timers === 'local' ? 500 : 5000)
  const client = new StorageClient({ mgmtd, rpc, clientId: `strata-demo-${process.pid}` })
  const chains = file.layout.chains.map((c) => c.chainId)
  return {
    dir,
    file,
    admin,
    mgmtd,
    client,
    rpc,
    chains,
    chunkSize: file.settings.chunkSize,
    upMs: up.elapsedMs,
    close() {
      client.close()
      mgmtd.close()
      rpc.close()
      admin.close()
    },
  }
}

/**
 * `strata cluster down`, repeated until nothing of the cluster runs: a
 * Ctrl-C during `cluster up` may race with a process being launched, and the
 * second pass catches it. Falls back to SIGKILL by pid.
 */
export async function tearDown(dir: string): Promise<{ stopped: string[] }> {
  if (!clusterExists(dir)) return { stopped: [] }
  const stopped = new Set<string>()
  for (let pass = 0; pass < 3; pass++) {
    try {
      for (const n of (await clusterDown({ dir, graceMs: 5000 })).stopped) stopped.add(n)
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

// --- routing helpers

export function storageProcesses(c: DemoCluster): ClusterFile['processes'] {
  return c.file.processes.filter((p) => p.role === 'storage')
}

/** `admin list-chains` rows, formatted as the CLI prints them. */
export async function chainListing(c: DemoCluster): Promise<{ text: string; records: ChainRow[] }> {
  const l = await listChains(c.admin)
  return { text: formatListing(l), records: l.records }
}

/** Every chain SERVING with all its targets UPTODATE. */
export function allServing(ri: RoutingInfo, chains: number[]): boolean {
  return chains.every((id) => {
    const ch = ri.chains[String(id)]
    return !!ch && chainStatus(ch) === 'SERVING' && ch.targets.every((t) => ri.targets[String(t.targetId)]?.localState === 'UPTODATE')
  })
}

export async function routing(c: DemoCluster): Promise<RoutingInfo> {
  return fetchRouting(c.admin)
}

/** Polls `pred` on fresh routing info every `everyMs` until it holds or `timeoutMs` passes. */
export async function waitRouting(c: DemoCluster, what: string, pred: (ri: RoutingInfo) => boolean, timeoutMs: number, everyMs = 50): Promise<RoutingInfo> {
  const end = Date.now() + timeoutMs
  let last: RoutingInfo | null = null
  for (;;) {
    try {
      last = await routing(c)
      if (pred(last)) return last
    } catch {
      // mgmtd busy or restarting: try again
    }
    if (Date.now() > end) throw new Error(`timed out after ${Math.round(timeoutMs / 1000)}s waiting for ${what}`)
    await sleep(everyMs)
  }
}
