// Test cluster with meta servers: the mgmtd + storage harness of procs.ts plus
// `metas` meta servers, either as child processes sharing one lmdb KV
// environment (what production runs; tests can SIGKILL them) or in this
// process over an in-memory KV (fast, for semantics tests).

import fs from 'node:fs'
import path from 'node:path'
import type { ExecutionContext, TestFn } from 'ava'
import { StorageClient } from '../../fs/client/index.js'
import { createLogger } from '../../fs/common/log.js'
import { startMeta, type MetaConfig, type MetaDaemon } from '../../fs/meta/index.js'
import { RpcClient } from '../../fs/rpc/index.js'
import { MemKv } from './mem-kv.js'
import { MetaTestClient, ROOT_USER } from './meta-client.js'
import { TEST_TIMERS, freePort, startTestCluster, until, type TestCluster } from './procs.js'
import type { UserInfo } from '../../fs/meta/protocol.js'

/** Meta settings at test scale: quick GC, quick session pruning. */
export const TEST_META_SETTINGS: Partial<MetaConfig> = {
  gcFileDelayMs: 200,
  // a removed directory stays visible as a d- entry for a moment (3FS: 0)
  gcDirectoryDelayMs: 2000,
  gcRetryDelayMs: 300,
  gcScanIntervalMs: 100,
  sessionScanIntervalMs: 300,
  sessionPruneMinAgeMs: 500,
  statfsUpdateIntervalMs: 500,
  distributorUpdateIntervalMs: 200,
  distributorTimeoutMs: 1500,
  timeGranularityMs: 1,
}

export interface MetaClusterOptions {
  metas?: number
  /** run meta servers in this process over an in-memory KV instead of as child processes over lmdb */
  inProcess?: boolean
  meta?: Partial<MetaConfig>
  nodes?: number
  chains?: number
  replicas?: number
  stripeSize?: number
  chunkSize?: number
}

export class MetaCluster {
  readonly rpc = new RpcClient({ connectTimeoutMs: 500, maxBackoffMs: 200 })
  storage!: StorageClient
  metaNames: string[] = []
  metaAddresses: string[] = []
  /** in-process servers (inProcess mode) */
  daemons: MetaDaemon[] = []
  kv: MemKv | null = null
  kvPath = ''

  constructor(readonly c: TestCluster) {}

  private readonly alive = new Map<string, NodeJS.Timeout>()

  /**
   * A test client. With `alive` (default) it holds an mgmtd client session
   * (extended every 300 ms, as the file client does), so the meta servers'
   * session scan treats its write sessions as live.
   */
  client(user: UserInfo = ROOT_USER, clientId?: string, opts: { alive?: boolean } = {}): MetaTestClient {
    const c = new MetaTestClient(this.rpc, [...this.metaAddresses], user, clientId)
    if (opts.alive ?? true) this.keepAlive(c.clientId)
    return c
  }

  keepAlive(clientId: string): void {
    if (this.alive.has(clientId)) return
    const extend = () => this.c.mgmtd.extendClientSession({ clientId, nodeType: 'CLIENT', hostname: 'test', pid: process.pid }).catch(() => {})
    void extend()
    const timer = setInterval(extend, 300)
    timer.unref()
    this.alive.set(clientId, timer)
  }

  private cleaner: MetaTestClient | null = null

  /**
   * Removes everything under the root (recursively, as root), so a test on a
   * cluster shared by a file's tests starts from the namespace a fresh
   * cluster has. Removed files go to the GC directories as any remove does.
   */
  async emptyRoot(): Promise<void> {
    this.cleaner ??= this.client()
    for (const e of await this.cleaner.listAll('/')) await this.cleaner.remove(`/${e.name}`, { recursive: true })
  }

  /** Stops extending the client's mgmtd session, as if the client process died. */
  crash(clientId: string): void {
    const timer = this.alive.get(clientId)
    if (timer) clearInterval(timer)
    this.alive.delete(clientId)
  }

  async stop(): Promise<void> {
    for (const timer of this.alive.values()) clearInterval(timer)
    this.alive.clear()
    for (const d of this.daemons) await d.close().catch(() => {})
    this.storage?.close()
    this.rpc.close()
  }
}

/** Is the lmdb KV engine built? (Meta child processes need it; without it tests fall back to in-process servers.) */
export function lmdbKvAvailable(): boolean {
  return fs.existsSync(path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../fs/kv/index.js'))
}

export async function startMetaCluster(t: ExecutionContext, o: MetaClusterOptions = {}): Promise<MetaCluster> {
  if (o.inProcess === undefined && !lmdbKvAvailable()) {
    t.log('lmdb KV engine not built: meta servers run in-process over an in-memory KV')
    o = { ...o, inProcess: true }
  }
  const c = await startTestCluster(t, {
    nodes: o.nodes ?? 3,
    chains: o.chains ?? 2,
    replicas: o.replicas ?? 3,
    ...(o.stripeSize !== undefined ? { stripeSize: o.stripeSize } : {}),
    ...(o.chunkSize !== undefined ? { chunkSize: o.chunkSize } : {}),
  })
  const m = new MetaCluster(c)
  t.teardown(() => m.stop())
  const n = o.metas ?? 1
  const settings = { ...TEST_META_SETTINGS, ...o.meta }
  m.kvPath = path.join(c.dir, 'kv')
  if (o.inProcess) {
    m.kv = new MemKv()
    for (let i = 1; i <= n; i++) {
      const d = await startMeta(
        { nodeId: 100 + i, listen: '127.0.0.1:0', mgmtdAddresses: [c.mgmtdAddress], kvPath: m.kvPath, timers: TEST_TIMERS, ...settings } as MetaConfig,
        createLogger(`meta-${100 + i}`),
        { kv: m.kv },
      )
      m.daemons.push(d)
      m.metaNames.push(`meta-${i}`)
      m.metaAddresses.push(d.address)
    }
  } else {
    for (let i = 1; i <= n; i++) {
      const name = `meta-${i}`
      const port = await freePort()
      const address = `127.0.0.1:${port}`
      const config = { nodeId: 100 + i, listen: address, mgmtdAddresses: [c.mgmtdAddress], kvPath: m.kvPath, timers: TEST_TIMERS, ...settings }
      const configFile = path.join(c.dir, 'config', `${name}.json`)
      fs.writeFileSync(configFile, JSON.stringify(config, null, 2))
      c.procs.set(name, { spec: { name, role: 'meta', config, configFile, logFile: path.join(c.dir, 'logs', `${name}.log`), address }, child: null })
      c.start(name)
      m.metaNames.push(name)
      m.metaAddresses.push(address)
    }
    for (const name of m.metaNames) {
      // generous: every start step is a KV flush, and parallel test files can saturate the disk
      await until(() => m.rpc.echo(c.address(name)).then(() => true), 90_000, `${name} up`).catch((e) => {
        throw new Error(`${(e as Error).message}\n${c.log(name)}`)
      })
    }
  }
  m.storage = new StorageClient({ mgmtd: c.mgmtd, rpc: m.rpc })
  // every meta server connected in mgmtd (the file client finds them there)
  await until(
    async () => {
      const ri = await c.mgmtd.refresh()
      return [...Array(n).keys()].every((i) => ri.nodes[String(101 + i)]?.status === 'HEARTBEAT_CONNECTED')
    },
    15000,
    'meta servers connected',
  )
  return m
}

/**
 * A cluster shared by the serial tests of one file: start it in test.before,
 * stop it with the returned close() in test.after.always.
 */
export async function sharedMetaCluster(o: MetaClusterOptions = {}): Promise<{ m: MetaCluster; close: () => Promise<void> }> {
  const teardowns: Array<() => unknown> = []
  const ctx = {
    teardown: (fn: () => unknown) => void teardowns.push(fn),
    log: (...args: unknown[]) => {
      if (process.env.STRATA_KEEP_TEST_DIRS) console.log(...args)
    },
  } as unknown as ExecutionContext
  const close = async () => {
    for (const fn of teardowns.reverse()) await fn()
  }
  try {
    return { m: await startMetaCluster(ctx, o), close }
  } catch (e) {
    await close()
    throw e
  }
}

/**
 * Registers test.before / test.after.always hooks that run one cluster for
 * every serial test of a file; `use` receives it before the first test.
 */
export function useSharedMetaCluster(test: TestFn, o: MetaClusterOptions, use: (m: MetaCluster) => void): void {
  let stop: (() => Promise<void>) | undefined
  test.before(async () => {
    const s = await sharedMetaCluster(o)
    stop = s.close
    use(s.m)
  })
  test.after.always(async () => {
    await stop?.()
  })
}
