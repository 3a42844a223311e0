export {
  StorageClient,
  type StorageClientOptions,
  type CallOptions,
  type ReadOptions,
  type QueryOptions,
  type ReadRequest,
  type ChunkReadResult,
  type RemoveChunksResult,
} from './storage-client.js'
export {
  TargetSelector,
  READ_MODES,
  isReadMode,
  resolveChain,
  headOf,
  groupByNode,
  type ReadMode,
  type SlimChain,
  type SlimTarget,
  type SelectOptions,
  type NodeBatch,
} from './target-selection.js'
export { ChannelAllocator, type UpdateChannel } from './channels.js'
export {
  DEFAULT_RETRY_POLICY,
  mergeRetryPolicy,
  backoffDelay,
  isRetryableCode,
  isFastRetryCode,
  isTargetFailure,
  needsRoutingRefresh,
  type RetryPolicy,
} from './retry-policy.js'
export { normalizeRange, drainRange, MAX_CHUNKS_PER_REQUEST, type ChunkRangeInput, type RangeStep, type DrainResult } from './ranges.js'
export { KeyedLimiter } from './limiter.js'
export { emptyStats, type StorageClientStats, type ClientOp } from './stats.js'
export * from './file/index.js'
export { checkMgmtdReachable } from './reachability.js'
