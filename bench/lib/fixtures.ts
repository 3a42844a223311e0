// Shared state of one benchmark run: the scratch directory (cluster data and
// the disk baseline live on the same filesystem), the data written by every
// throughput benchmark, and the local cluster. The cluster is started through
// the fs/admin cluster functions (what `strata cluster up` runs) and torn
// down with `cluster destroy` when the run ends, also on Ctrl-C.

import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { clusterDestroy, clusterDown, clusterKill, clusterUp, processAlive, readClusterFile } from '../../fs/admin/index.js'
import { chunkIdOf } from '../../fs/common/chunk-id.js'
import { MgmtdClient } from '../../fs/mgmtd/index.js'
import { StorageClient } from '../../fs/client/index.js'

/** Storage processes and chains of the benchmark cluster. */
export const STORAGE_NODES = 3
export const REPLICAS = 3
/** 3 targets per node → 3 chains whose heads land on 3 different nodes */
export const TARGETS_PER_NODE = 3
/** The DFS core: the only roles the benchmarks use. */
const CORE_ROLES = new Set(['mgmtd', 'storage'])
/** Distinct random buffers the throughput benchmarks cycle through. */
const POOL_SIZE = 8

export interface BenchCluster {
  dir: string
  /** what the storage daemons were started with */
  fsync: boolean
  chains: number[]
  mgmtd: MgmtdClient
  client: StorageClient
}

export class Fixtures {
  private cluster: BenchCluster | null = null
  private clusterDir: string
  private pools = new Map<number, Buffer[]>()
  private nextInode = 1n
  /** chunks of `chunkBytes` already written (and committed) on the running cluster, for reads */
  dataset: { inode: bigint; chunks: number; chunkBytes: number } | null = null

  constructor(
    readonly root: string,
    private readonly log: (msg: string) => void,
  ) {
    this.clusterDir = path.join(root, 'cluster')
  }

  /** POOL_SIZE random buffers of `bytes` each, made once per size. */
  pool(bytes: number): Buffer[] {
    let p = this.pools.get(bytes)
    if (!p) this.pools.set(bytes, (p = Array.from({ length: POOL_SIZE }, () => randomBytes(bytes))))
    return p
  }

  /** A fresh inode number, so every benchmark writes chunks nobody wrote before. */
  inode(): bigint {
    return this.nextInode++
  }

  chunkId(inode: bigint, index: number): Buffer {
    return chunkIdOf(inode, index)
  }

  /** fsync setting of the running cluster, null when none runs */
  get runningFsync(): boolean | null {
    return this.cluster?.fsync ?? null
  }

  /**
   * Flushes dirty pages left by an earlier step (a page-cache-only baseline,
   * say) so their writeback does not land inside the next measurement.
   */
  async settle(): Promise<void> {
    await promisify(execFile)('sync').catch(() => undefined)
    await sleep(200)
  }

  /** Scratch directory for a baseline, on the same filesystem as the cluster data. */
  scratch(name: string): string {
    const d = path.join(this.root, name)
    fs.rmSync(d, { recursive: true, force: true })
    fs.mkdirSync(d, { recursive: true })
    return d
  }

  /**
   * The running cluster with storage `fsync` as asked. The first call runs
   * `cluster up`; switching fsync stops the cluster, flips `fsync` in every
   * storage config and starts it again with its data (the restart path of
   * `cluster up`), so chains, targets and ports stay the same.
   */
  async getCluster(fsync: boolean): Promise<BenchCluster> {
    if (this.cluster?.fsync === fsync) return this.cluster
    if (!this.cluster) {
      this.log(`starting cluster: ${STORAGE_NODES} storage processes, ${TARGETS_PER_NODE} targets each, chains of ${REPLICAS} in ${this.clusterDir}`)
      await clusterUp({
        dir: this.clusterDir,
        storageNodes: STORAGE_NODES,
        targetsPerNode: TARGETS_PER_NODE,
        replicas: REPLICAS,
        chunkSize: 1024 * 1024,
        mount: false,
        sandbox: false,
        timers: 'local',
        timeoutMs: 120_000,
      })
      // storage's own default is fsync on; an explicit `fsync: true` changes nothing
      this.setStorageFsync(true)
      if (!fsync) await this.restart(false)
      else await this.stopExtraRoles()
    } else {
      this.closeClients()
      await this.restart(fsync)
    }
    const c = readClusterFile(this.clusterDir)
    const mgmtd = new MgmtdClient({ addresses: c.mgmtdAddresses })
    const client = new StorageClient({ mgmtd })
    await mgmtd.refresh()
    this.cluster = { dir: this.clusterDir, fsync, chains: c.layout.chains.map((x) => x.chainId), mgmtd, client }
    return this.cluster
  }

  private async restart(fsync: boolean): Promise<void> {
    this.log(`restarting cluster with storage fsync ${fsync ? 'on' : 'off'}`)
    await clusterDown({ dir: this.clusterDir })
    this.setStorageFsync(fsync)
    await clusterUp({ dir: this.clusterDir, timeoutMs: 120_000 })
    await this.stopExtraRoles()
  }

  /**
   * `cluster up` also starts roles above the DFS core (the metadata servers).
   * Nothing here talks to them, so they are stopped: on 2 cores their
   * background work would otherwise take CPU from the data path and show up
   * in the CPU-per-MiB figures.
   */
  private async stopExtraRoles(): Promise<void> {
    for (const p of readClusterFile(this.clusterDir).processes) {
      if (CORE_ROLES.has(p.role) || !processAlive(p)) continue
      this.log(`stopping ${p.name} (${p.role}): not part of the DFS core`)
      await clusterKill({ dir: this.clusterDir, node: p.name, signal: 'TERM' })
    }
  }

  private setStorageFsync(fsync: boolean): void {
    const c = readClusterFile(this.clusterDir)
    for (const p of c.processes) {
      if (p.role !== 'storage') continue
      const cfg = JSON.parse(fs.readFileSync(p.configFile, 'utf8')) as Record<string, unknown>
      cfg.fsync = fsync
      fs.writeFileSync(p.configFile, JSON.stringify(cfg, null, 2) + '\n')
    }
  }

  private closeClients(): void {
    this.cluster?.client.close()
    this.cluster?.mgmtd.close()
    this.cluster = null
  }

  /**
   * CPU seconds used so far by this process and every running cluster process. The
   * difference across a measurement is the work it cost, which unlike wall
   * time does not depend on what else the machine is running.
   */
  cpuSeconds(): number {
    const own = process.cpuUsage()
    let total = (own.user + own.system) / 1e6
    if (this.cluster) for (const p of readClusterFile(this.clusterDir).processes) if (processAlive(p)) total += procCpuSeconds(p.pid!)
    return total
  }

  /** Stops the cluster and removes the scratch directory. Idempotent. */
  async close(): Promise<void> {
    this.closeClients()
    if (fs.existsSync(path.join(this.clusterDir, 'cluster.json'))) {
      await clusterDestroy({ dir: this.clusterDir, force: true }).catch((e: unknown) => this.log(`cluster destroy failed: ${(e as Error).message}`))
    }
    fs.rmSync(this.root, { recursive: true, force: true })
  }
}

const CLK_TCK = 100

/** user+system CPU seconds of a process (all its threads), from /proc; 0 when unreadable. */
export function procCpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    // fields 14 and 15 (utime, stime) are at 11 and 12 after the state field
    return (Number(f[11]) + Number(f[12])) / CLK_TCK
  } catch {
    return 0
  }
}
