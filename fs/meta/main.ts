// Meta daemon: one stateless metadata server. Several run per cluster, all
// opening the same KV environment (kvPath); `strata daemon meta --config F`
// runs one in the foreground.

import fs from 'node:fs'
import { createLogger, type Logger } from '../common/log.js'
import { LOCAL_TIMERS, mergeTimers, type Timers } from '../common/config.js'
import { StrataError } from '../common/errors.js'
import { openLmdbKv, type KvDurability, type KvEngine } from '../kv/index.js'
import { RpcServer } from '../rpc/index.js'
import { splitListen } from '../mgmtd/index.js'
import { DEFAULT_META_SETTINGS, PRODUCTION_META_SETTINGS, mergeMetaSettings, type MetaSettings } from './config.js'
import { MetaService } from './service.js'

export interface MetaConfig extends Partial<MetaSettings> {
  nodeId: number
  /** host:port (port 0: any) */
  listen: string
  mgmtdAddresses: string[]
  /** directory of the shared KV environment (every meta server of the cluster opens the same one) */
  kvPath: string
  timers?: Partial<Timers>
  /** lmdb durability (default 'flushed': fsync before answering); every process sharing the env must agree on 'nosync' */
  kvDurability?: KvDurability
  /** base of the meta settings before the overrides given here: 'local' (test scale, default) or 'production' (3FS defaults) */
  profile?: 'local' | 'production'
}

export interface MetaDaemon {
  address: string
  service: MetaService
  close(): Promise<void>
}

export interface MetaDeps {
  /** an already open KV engine (tests); otherwise the lmdb engine at kvPath is opened and closed with the daemon */
  kv?: KvEngine
}


export async function startMeta(config: MetaConfig, log: Logger = createLogger(`meta-${config?.nodeId}`), deps: MetaDeps = {}): Promise<MetaDaemon> {
  if (!config || !Number.isInteger(config.nodeId) || config.nodeId <= 0) throw new StrataError('BAD_CONFIG', 'meta nodeId must be a positive integer')
  if (!Array.isArray(config.mgmtdAddresses) || config.mgmtdAddresses.length === 0) throw new StrataError('BAD_CONFIG', 'meta needs mgmtdAddresses')
  if (!deps.kv && !config.kvPath) throw new StrataError('BAD_CONFIG', 'meta kvPath is required')
  if (config.profile !== undefined && config.profile !== 'local' && config.profile !== 'production') throw new StrataError('BAD_CONFIG', 'meta profile must be local or production')
  const settings = mergeMetaSettings(config.profile === 'production' ? PRODUCTION_META_SETTINGS : DEFAULT_META_SETTINGS, config as unknown as Record<string, unknown>)
  const timers = mergeTimers(LOCAL_TIMERS, config.timers)
  log.info('meta starting', { nodeId: config.nodeId, kvPath: config.kvPath })
  let kv = deps.kv
  const ownsKv = !kv
  if (!kv) {
    fs.mkdirSync(config.kvPath, { recursive: true })
    kv = await openLmdbKv({ path: config.kvPath, ...(config.kvDurability ? { durability: config.kvDurability } : {}) })
  }
  const service = new MetaService({ nodeId: config.nodeId, kv, mgmtdAddresses: config.mgmtdAddresses, settings, timers, log })
  let server: RpcServer | null = null
  let closing: Promise<void> | null = null
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      await server?.close()
      await service.close()
      if (ownsKv) await kv!.close()
      log.info('meta stopped', { nodeId: config.nodeId })
    })())
  try {
    await service.init()
    server = new RpcServer({
      name: `meta-${config.nodeId}`,
      getConfig: () => config,
      getStats: () => service.stats(),
      onShutdown: () => void close().then(() => process.exit(0)),
    })
    const [host, port] = splitListen(config.listen)
    const address = await server.listen(port, host)
    service.start(server)
    log.info('meta listening', { address, nodeId: config.nodeId, kvPath: config.kvPath })
    return { address, service, close }
  } catch (e) {
    await close().catch(() => {})
    throw e
  }
}
