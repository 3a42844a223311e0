export { startStorage, type StorageConfig, type StorageDaemon } from './main.js'
export { StorageService } from './service.js'
export * from './protocol.js'
export { diffChunkSets, syncDecision } from './sync-diff.js'
