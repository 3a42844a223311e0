// Shared state of one benchmark run: the scratch directory (cluster data and
// the disk baseline live on the same filesystem), the data written by every
// throughput benchmark, and the local clusters. A cluster is started through
// the fs/admin cluster functions (what `strata cluster up` runs) and torn
// down with `cluster destroy` when the run ends, also on Ctrl-C.
//
// Two clusters, never both at once: the DFS core one (mgmtd + storage only,
// 3 chains; getCluster) and the namespace one (`cluster up` as a user runs
// it: meta servers and the FUSE mount too; getNamespaceCluster). Asking for
// one destroys the other, so idle daemons of one never take CPU from the other.

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

/** The full `cluster up` (meta servers and the FUSE mount at DIR/mnt) for the namespace benchmarks. */
export interface NamespaceCluster {
  dir: string
  /** FUSE mount point */
  mnt: string
  mgmtdAddresses: string[]
  metaAddresses: string[]
  /** chains, replicas, chunk size, stripe as `cluster up` made them */
  summary: string
  /**
   * CPU seconds per second the idle cluster burns (heartbeats, routing
   * polls, meta's GC and session scans, FUSE periodic sync), measured over a
   * few seconds after startup with nothing else asked of it; subtracted
   * where a slow measurement would otherwise charge it to the operations
   */
  idleCpuPerSec: number
}

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
  private ns: NamespaceCluster | null = null
  /** what the namespace cluster was (kept after it is destroyed, for the report) */
  namespaceSummary: string | null = null
  private nsDir: string
  private pools = new Map<number, Buffer[]>()
  private nextInode = 1n
  /** chunks already written (and committed) on the running cluster, for reads, by chunk size */
  datasets = new Map<number, { inode: bigint; chunks: number }>()

  constructor(
    readonly root: string,
    private readonly log: (msg: string) => void,
  ) {
    this.clusterDir = path.join(root, 'cluster')
    this.nsDir = path.join(root, 'ns-cluster')
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

  /**
   * Writes back dirty pages and empties the kernel page cache, dentries and
   * inodes (`echo 3 > /proc/sys/vm/drop_caches`, needs root): what a cold
   * read phase starts from, on both sides. This also empties the page cache
   * under the storage daemons' chunk files. False when it could not.
   */
  async dropCaches(): Promise<boolean> {
    await promisify(execFile)('sync').catch(() => undefined)
    try {
      fs.writeFileSync('/proc/sys/vm/drop_caches', '3\n')
    } catch (e) {
      this.log(`could not drop the page cache: ${(e as Error).message}`)
      return false
    }
    await sleep(200)
    return true
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
    await this.destroyNamespaceCluster()
    if (!this.cluster) {
      this.log(`starting cluster: ${STORAGE_NODES} storage processes, ${TARGETS_PER_NODE} targets each, chains of ${REPLICAS} in ${this.clusterDir}`)
      await clusterUp({
        dir: this.clusterDir,
        storageNodes: STORAGE_NODES,
        targetsPerNode: TARGETS_PER_NODE,
        replicas: REPLICAS,
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

  /**
   * The namespace cluster: `cluster up` with its defaults (mgmtd, 3 storage
   * processes with 2 targets each = 2 chains of 3 replicas, 1 MiB chunks,
   * storage fsync on, 2 meta servers on one lmdb KV with fsync'ed commits,
   * FUSE daemon at DIR/mnt), local timers. Destroys the core cluster first.
   */
  async getNamespaceCluster(): Promise<NamespaceCluster> {
    if (this.ns) return this.ns
    if (fs.existsSync(path.join(this.clusterDir, 'cluster.json'))) {
      this.log('destroying the DFS core cluster (the namespace benchmarks run a cluster of their own)')
      this.closeClients()
      this.datasets.clear()
      await clusterDestroy({ dir: this.clusterDir, force: true })
    }
    this.log(`starting the namespace cluster (cluster up defaults: meta servers and FUSE mount) in ${this.nsDir}`)
    const r = await clusterUp({ dir: this.nsDir, mount: true, sandbox: false, timers: 'local', timeoutMs: 120_000 })
    const c = r.cluster
    const mnt = path.join(this.nsDir, 'mnt')
    if (!c.processes.some((p) => p.role === 'fuse')) {
      await clusterDestroy({ dir: this.nsDir, force: true }).catch(() => undefined)
      throw new Error('cluster up started no FUSE daemon (no /dev/fuse or libfuse2 on this machine?)')
    }
    const s = c.settings
    const cpuOf = () => readClusterFile(this.nsDir).processes.reduce((a, p) => a + (processAlive(p) ? procCpuSeconds(p.pid!) : 0), 0)
    await sleep(2000)
    const cpu0 = cpuOf()
    const t0 = performance.now()
    await sleep(5000)
    const idleCpuPerSec = (cpuOf() - cpu0) / ((performance.now() - t0) / 1000)
    this.log(`idle namespace cluster: ${(idleCpuPerSec * 1000).toFixed(0)} ms CPU per second`)
    this.ns = {
      dir: this.nsDir,
      mnt,
      mgmtdAddresses: c.mgmtdAddresses,
      metaAddresses: c.processes.filter((p) => p.role === 'meta').map((p) => p.address),
      idleCpuPerSec,
      summary: `${s.storageNodes} storage processes × ${s.targetsPerNode} targets = ${c.layout.chains.length} chains of ${s.replicas} replicas, ${s.chunkSize / 1024 / 1024} MiB chunks, stripe ${s.stripeSize}; ${c.processes.filter((p) => p.role === 'meta').length} meta servers; FUSE at DIR/mnt; idle it burns ${(idleCpuPerSec * 1000).toFixed(0)} ms CPU per second (subtracted from the CPU figures)`,
    }
    this.namespaceSummary = this.ns.summary
    return this.ns
  }

  private async destroyNamespaceCluster(): Promise<void> {
    if (!fs.existsSync(path.join(this.nsDir, 'cluster.json'))) return
    this.log('destroying the namespace cluster')
    this.ns = null
    await clusterDestroy({ dir: this.nsDir, force: true })
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
    if (this.ns) for (const p of readClusterFile(this.nsDir).processes) if (processAlive(p)) total += procCpuSeconds(p.pid!)
    return total
  }

  /**
   * Per-thread CPU of this process and of every cluster process, by process
   * name and thread name (libuv's pool threads, V8's workers, the main
   * thread…). `STRATA_BENCH_THREADS=1` makes the DFS benchmarks log the
   * difference of two snapshots: where a measurement's CPU went.
   */
  threadCpu(): Map<string, number> {
    const out = new Map<string, number>()
    const add = (proc: string, pid: number) => {
      for (const [thread, secs] of threadCpuSeconds(pid)) {
        const key = `${proc}/${thread}`
        out.set(key, (out.get(key) ?? 0) + secs)
      }
    }
    add('runner', process.pid)
    for (const dir of [this.cluster ? this.clusterDir : null, this.ns ? this.nsDir : null]) {
      if (dir) for (const p of readClusterFile(dir).processes) if (processAlive(p)) add(p.name, p.pid!)
    }
    return out
  }

  /** Stops the clusters and removes the scratch directory. Idempotent. */
  async close(): Promise<void> {
    this.closeClients()
    if (fs.existsSync(path.join(this.clusterDir, 'cluster.json'))) {
      await clusterDestroy({ dir: this.clusterDir, force: true }).catch((e: unknown) => this.log(`cluster destroy failed: ${(e as Error).message}`))
    }
    await this.destroyNamespaceCluster().catch((e: unknown) => this.log(`namespace cluster destroy failed: ${(e as Error).message}`))
    fs.rmSync(this.root, { recursive: true, force: true })
  }
}

const CLK_TCK = 100

/** user and system CPU seconds of the threads of a process, summed by thread name ('main' for the main thread). */
export function threadCpuSeconds(pid: number): Map<string, number> {
  const out = new Map<string, number>()
  let tids: string[]
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`)
  } catch {
    return out
  }
  for (const tid of tids) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8')
      const name = tid === String(pid) ? 'main' : stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      out.set(`${name} user`, (out.get(`${name} user`) ?? 0) + Number(f[11]) / CLK_TCK)
      out.set(`${name} sys`, (out.get(`${name} sys`) ?? 0) + Number(f[12]) / CLK_TCK)
    } catch {
      // the thread ended
    }
  }
  return out
}

/** Logs where the CPU between two threadCpu() snapshots went, in ms per MiB moved. */
export function logThreadCpu(log: (line: string) => void, before: Map<string, number>, after: Map<string, number>, mib: number): void {
  const rows = [...after].map(([k, v]) => [k, ((v - (before.get(k) ?? 0)) * 1000) / mib] as const).filter(([, ms]) => ms >= 0.05)
  rows.sort((a, b) => b[1] - a[1])
  for (const [k, ms] of rows) log(`  cpu ${k.padEnd(36)} ${ms.toFixed(2)} ms/MiB`)
}

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
