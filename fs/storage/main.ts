// Storage daemon: one process per storage node, serving StorageSerde and Core.

import fs from 'node:fs'
import { createLogger, type Logger } from '../common/log.js'
import { LOCAL_TIMERS, mergeTimers, type Timers } from '../common/config.js'
import { StrataError } from '../common/errors.js'
import { RpcServer } from '../rpc/index.js'
import { splitListen } from '../mgmtd/index.js'
import { StorageService } from './service.js'

export interface StorageConfig {
  nodeId: number
  dataDir: string
  /** host:port (port 0: any) */
  listen: string
  mgmtdAddresses: string[]
  timers?: Partial<Timers>
  /** fsync chunk files before acknowledging (default true) */
  fsync?: boolean
  /** write chunk data of 64 KiB and more past the page cache with O_DIRECT (default true) */
  directWrites?: boolean
  /** send whole-chunk reads from the page cache with sendfile (default true) */
  zeroCopyReads?: boolean
}

export interface StorageDaemon {
  address: string
  service: StorageService
  close(): Promise<void>
}

export async function startStorage(config: StorageConfig, log: Logger = createLogger(`storage-${config?.nodeId}`)): Promise<StorageDaemon> {
  if (!config || !Number.isInteger(config.nodeId) || config.nodeId <= 0) throw new StrataError('BAD_CONFIG', 'storage nodeId must be a positive integer')
  if (!config.dataDir) throw new StrataError('BAD_CONFIG', 'storage dataDir is required')
  if (!Array.isArray(config.mgmtdAddresses) || config.mgmtdAddresses.length === 0) throw new StrataError('BAD_CONFIG', 'storage needs mgmtdAddresses')
  fs.mkdirSync(config.dataDir, { recursive: true })
  const service = new StorageService({
    nodeId: config.nodeId,
    dataDir: config.dataDir,
    mgmtdAddresses: config.mgmtdAddresses,
    timers: mergeTimers(LOCAL_TIMERS, config.timers),
    fsync: config.fsync ?? true,
    directWrites: config.directWrites ?? true,
    zeroCopyReads: config.zeroCopyReads ?? true,
    log,
  })
  await service.open()
  let closing: Promise<void> | null = null
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      await server.close()
      await service.close()
    })())
  const server = new RpcServer({
    name: `storage-${config.nodeId}`,
    getConfig: () => config,
    getStats: () => service.stats(),
    onShutdown: () => void close().then(() => process.exit(0)),
  })
  const [host, port] = splitListen(config.listen)
  const address = await server.listen(port, host)
  service.start(server)
  log.info('storage listening', { address, nodeId: config.nodeId })
  return { address, service, close }
}
