export { MgmtdClient, type MgmtdClientOptions } from './client.js'
export { MgmtdService } from './service.js'
export { startMgmtd, splitListen, type MgmtdConfig, type MgmtdDaemon } from './main.js'
export * from './protocol.js'
