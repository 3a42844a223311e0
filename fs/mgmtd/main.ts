// mgmtd daemon: an RPC server carrying the Mgmtd and Core services.

import fs from 'node:fs'
import { createLogger, type Logger } from '../common/log.js'
import { LOCAL_TIMERS, mergeTimers, type Timers } from '../common/config.js'
import { StrataError } from '../common/errors.js'
import { RpcServer } from '../rpc/index.js'
import { MgmtdService } from './service.js'

export interface MgmtdConfig {
  nodeId: number
  dataDir: string
  /** host:port to listen on (port 0: any) */
  listen: string
  timers?: Partial<Timers>
  allowHeartbeatFromUnregistered?: boolean
}

export interface MgmtdDaemon {
  address: string
  service: MgmtdService
  close(): Promise<void>
}

export async function startMgmtd(config: MgmtdConfig, log: Logger = createLogger('mgmtd')): Promise<MgmtdDaemon> {
  if (!config || !Number.isInteger(config.nodeId) || config.nodeId <= 0) throw new StrataError('BAD_CONFIG', 'mgmtd nodeId must be a positive integer')
  if (!config.dataDir) throw new StrataError('BAD_CONFIG', 'mgmtd dataDir is required')
  fs.mkdirSync(config.dataDir, { recursive: true })
  const timers = mergeTimers(LOCAL_TIMERS, config.timers)
  const service = new MgmtdService({
    nodeId: config.nodeId,
    dataDir: config.dataDir,
    timers,
    allowHeartbeatFromUnregistered: config.allowHeartbeatFromUnregistered ?? true,
    log,
  })
  let closing: Promise<void> | null = null
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      await server.close()
      await service.close()
    })())
  const server = new RpcServer({ name: `mgmtd-${config.nodeId}`, getConfig: () => config, onShutdown: () => void close().then(() => process.exit(0)) })
  const [host, port] = splitListen(config.listen)
  const address = await server.listen(port, host)
  service.start(server)
  log.info('mgmtd listening', { address, nodeId: config.nodeId })
  return { address, service, close }
}

export function splitListen(listen: string | undefined): [string, number] {
  if (!listen) return ['127.0.0.1', 0]
  const i = listen.lastIndexOf(':')
  const port = Number(listen.slice(i + 1))
  if (i <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) throw new StrataError('BAD_CONFIG', `bad listen address ${listen}`)
  return [listen.slice(0, i), port]
}
