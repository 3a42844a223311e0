// Test harness for multi-process clusters: real mgmtd and storage daemons as
// child processes (so tests can SIGKILL them), wired up the way `strata
// cluster up` does it, torn down by the test that made them.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import type { ExecutionContext } from 'ava'
import { pickFreePorts } from '../../fs/admin/index.js'
import { MgmtdClient } from '../../fs/mgmtd/index.js'
import { RpcClient } from '../../fs/rpc/index.js'
import { ServiceId, StorageMethod } from '../../fs/common/services.js'
import type { RoutingInfo } from '../../fs/common/types.js'

export const REPO = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../..')
export const CLI = path.join(REPO, 'bin/strata.js')

export const TEST_TIMERS = {
  heartbeatIntervalMs: 100,
  heartbeatFailIntervalMs: 2000,
  chainUpdateIntervalMs: 50,
  newChainBootstrapMs: 1000,
  routingRefreshMs: 200,
  resyncIntervalMs: 100,
  resyncMinGapMs: 300,
  clientSessionTimeoutMs: 2000,
}

/** A free TCP port, reserved against the other tests and clusters on this host (fs/admin/ports.ts). */
export async function freePort(): Promise<number> {
  const [port] = await pickFreePorts(1)
  return port!
}

export function tmpDir(t: ExecutionContext, prefix = 'strata-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  // STRATA_KEEP_TEST_DIRS=1 keeps logs and data of every test for debugging
  t.teardown(() => {
    if (process.env.STRATA_KEEP_TEST_DIRS) t.log(`kept ${dir}`)
    else fs.rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

export async function until<T>(fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, ms = 15000, what = 'condition'): Promise<T> {
  const end = Date.now() + ms
  let lastErr: unknown
  for (;;) {
    try {
      const v = await fn()
      if (v) return v
    } catch (e) {
      lastErr = e
    }
    if (Date.now() > end) throw new Error(`${what} not reached within ${ms} ms${lastErr ? `: ${(lastErr as Error).message}` : ''}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

export interface ProcSpec {
  name: string
  role: 'mgmtd' | 'storage' | 'meta'
  config: Record<string, unknown>
  configFile: string
  logFile: string
  address: string
}

export class TestCluster {
  readonly procs = new Map<string, { spec: ProcSpec; child: ChildProcess | null }>()
  readonly rpc = new RpcClient({ connectTimeoutMs: 500 })
  mgmtd!: MgmtdClient
  mgmtdAddress = ''
  /** chainId → targetIds head-first */
  chains: Array<{ chainId: number; targets: number[] }> = []
  targetNode = new Map<number, string>()

  constructor(readonly dir: string) {}

  start(name: string): ChildProcess {
    const p = this.procs.get(name)!
    const out = fs.openSync(p.spec.logFile, 'a')
    const child = spawn(process.execPath, [CLI, 'daemon', p.spec.role, '--config', p.spec.configFile, '--name', name], {
      stdio: ['ignore', out, out],
      env: { ...process.env, STRATA_LOG_LEVEL: 'info' },
    })
    fs.closeSync(out)
    p.child = child
    return child
  }

  kill(name: string, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const p = this.procs.get(name)!
    const child = p.child
    p.child = null
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
    return new Promise((r) => {
      child.once('exit', () => r())
      child.kill(signal)
    })
  }

  address(name: string): string {
    return this.procs.get(name)!.spec.address
  }

  log(name: string): string {
    try {
      return fs.readFileSync(this.procs.get(name)!.spec.logFile, 'utf8')
    } catch {
      return ''
    }
  }

  async routing(): Promise<RoutingInfo> {
    return this.mgmtd.refresh()
  }

  async waitAllServing(ms = 20000): Promise<RoutingInfo> {
    return until(
      async () => {
        const ri = await this.mgmtd.refresh()
        const ok = this.chains.every((c) => ri.chains[c.chainId]?.targets.every((t) => t.publicState === 'SERVING' && ri.targets[t.targetId]?.localState === 'UPTODATE'))
        return ok ? ri : undefined
      },
      ms,
      'all chains SERVING',
    )
  }

  async stop(): Promise<void> {
    await Promise.all([...this.procs.keys()].map((n) => this.kill(n, 'SIGKILL')))
    this.mgmtd?.close()
    this.rpc.close()
  }
}

/**
 * mgmtd + `nodes` storage processes; `chains` chains of `replicas` targets
 * placed round-robin on distinct nodes; chain table 1 lists them all.
 */
export async function startTestCluster(
  t: ExecutionContext,
  opts: {
    nodes?: number
    chains?: number
    replicas?: number
    timers?: Record<string, number>
    fsync?: boolean
    stripeSize?: number
    chunkSize?: number
    /** data directory of storage node i (1-based) instead of DIR/storage-i, e.g. on a small filesystem of the test's */
    storageDir?: (i: number) => string | undefined
  } = {},
): Promise<TestCluster> {
  const nodes = opts.nodes ?? 3
  const nchains = opts.chains ?? 2
  const replicas = opts.replicas ?? 3
  const timers = { ...TEST_TIMERS, ...opts.timers }
  const dir = tmpDir(t, 'strata-cluster-')
  const c = new TestCluster(dir)
  t.teardown(() => c.stop())
  fs.mkdirSync(path.join(dir, 'config'))
  fs.mkdirSync(path.join(dir, 'logs'))
  const mport = await freePort()
  c.mgmtdAddress = `127.0.0.1:${mport}`
  const add = (name: string, role: 'mgmtd' | 'storage', config: Record<string, unknown>, address: string) => {
    const configFile = path.join(dir, 'config', `${name}.json`)
    fs.writeFileSync(configFile, JSON.stringify(config, null, 2))
    c.procs.set(name, { spec: { name, role, config, configFile, logFile: path.join(dir, 'logs', `${name}.log`), address }, child: null })
  }
  add('mgmtd', 'mgmtd', { nodeId: 1, dataDir: path.join(dir, 'mgmtd'), listen: c.mgmtdAddress, timers }, c.mgmtdAddress)
  for (let i = 1; i <= nodes; i++) {
    const port = await freePort()
    add(`storage-${i}`, 'storage', { nodeId: 10000 + i, dataDir: opts.storageDir?.(i) ?? path.join(dir, `storage-${i}`), listen: `127.0.0.1:${port}`, mgmtdAddresses: [c.mgmtdAddress], timers, fsync: opts.fsync ?? false }, `127.0.0.1:${port}`)
  }
  for (const name of c.procs.keys()) c.start(name)
  c.mgmtd = new MgmtdClient({ addresses: [c.mgmtdAddress], rpc: c.rpc })
  await until(() => c.mgmtd.clusterInfo().then(() => true), 60_000, 'mgmtd up')
  await c.mgmtd.initCluster({ chainTableId: 1, chunkSize: opts.chunkSize ?? 65536, stripeSize: opts.stripeSize ?? Math.min(nchains, 2) })
  for (let i = 1; i <= nodes; i++) await until(() => c.rpc.echo(c.address(`storage-${i}`)).then(() => true), 60_000, `storage-${i} up`)
  for (let k = 0; k < nchains; k++) {
    const chainId = 100 + k + 1
    const targets: number[] = []
    for (let r = 0; r < replicas; r++) {
      const node = ((k + r) % nodes) + 1
      const targetId = (10000 + node) * 100 + k + 1
      targets.push(targetId)
      c.targetNode.set(targetId, `storage-${node}`)
      await c.rpc.call(c.address(`storage-${node}`), ServiceId.Storage, StorageMethod.createTarget, { targetId, chainId, diskIndex: 0 })
    }
    c.chains.push({ chainId, targets })
  }
  await c.mgmtd.setChains({ chains: c.chains })
  await c.mgmtd.setChainTable({ chainTableId: 1, chains: c.chains.map((x) => x.chainId) })
  await c.waitAllServing()
  return c
}
