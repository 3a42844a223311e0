// Per-target chunk engine (local storage of one 3FS-style target).
export { ChunkEngine, type ChunkEngineOptions } from './chunk-engine.js'
export { KeyedMutex, OpGate } from './locks.js'
export { nextVersions, type ChunkVersions, type VersionDecision } from './versions.js'
export { crc32cCombine, crc32cZeros, crc32cOf } from './crc.js'
export type { DiskFault, EngineFaults } from './files.js'
export {
  recordToMeta,
  type ApplyUpdateOptions,
  type ChunkReadResult,
  type ChunkRecord,
  type CommitOptions,
  type CommitResult,
  type ContentRef,
  type EngineSpaceInfo,
  type LastChunkInfo,
  type LeasedRange,
  type ReadOptions,
  type RecoveryInfo,
  type UpdateResult,
  type WholeChunk,
} from './records.js'
