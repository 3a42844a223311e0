// Message shapes of the storage service (3FS StorageSerde, service 3). Field
// names follow 3FS (src/fbs/storage/Common.h). Chunk ids travel as 16-byte
// Buffers; data travels inline in the frame (3FS's SEND_DATA_INLINE mode).

import type { ChainId, TargetId } from '../common/types.js'
import type { WireError } from '../common/errors.js'

export type UpdateType = 'WRITE' | 'REMOVE' | 'TRUNCATE' | 'EXTEND'
export type ChunkState = 'COMMIT' | 'DIRTY' | 'CLEAN'
export type RecycleState = 'NORMAL' | 'REMOVAL_IN_PROGRESS'

export interface GlobalKey {
  chainId: ChainId
  /** chain version the sender believes in; the target fences on it */
  chainVer: number
  /** 16-byte ChunkId */
  chunkId: Buffer
}

export interface UpdateIO {
  key: GlobalKey
  /** byte offset inside the chunk (WRITE), or new length (TRUNCATE/EXTEND) */
  offset: number
  length: number
  /** the file's chunk size; fixed per chunk */
  chunkSize: number
  /** WRITE payload (length bytes) */
  data?: Buffer
  /** 0 from a client; the head's assigned version when forwarded */
  updateVer: number
  updateType: UpdateType
  /** CRC32C of `data` (WRITE) */
  checksum: number
}

/** Exactly-once bookkeeping: per (client, chain, channel) the server caches the last reply. */
export interface MessageTag {
  clientId: string
  requestId: number
  channel: { id: number; seqnum: number }
}

export interface UpdateOptions {
  isSyncing: boolean
  fromClient: boolean
  /** chain version of the forwarder */
  commitChainVer: number
  /**
   * Resync transfer of an already committed chunk: record and commit it under
   * the chain version the predecessor holds it at, not the current one, so a
   * later diff of the same chunk sees equal chain versions instead of a
   * "successor newer" divergence (3FS issue #229).
   */
  syncChainVer?: number
}

export interface IOResult {
  /** bytes written, or the chunk length after TRUNCATE/EXTEND */
  lengthInfo: number
  commitVer: number
  updateVer: number
  /** CRC32C of the whole chunk after the update */
  checksum: number
  commitChainVer: number
}

export interface WriteReq {
  io: UpdateIO
  tag: MessageTag
}
export type WriteRsp = IOResult

export interface UpdateReq {
  io: UpdateIO
  tag: MessageTag
  options: UpdateOptions
}
export type UpdateRsp = IOResult

export interface ReadIO {
  chainId: ChainId
  chainVer: number
  chunkId: Buffer
  offset: number
  length: number
}

export interface BatchReadReq {
  ios: ReadIO[]
  /** return pending (uncommitted) data instead of CHUNK_NOT_COMMIT */
  allowReadUncommitted?: boolean
  /** verify the stored chunk checksum before replying */
  verifyChecksum?: boolean
}

export type ReadResult =
  | {
      ok: true
      data: Buffer
      commitVer: number
      updateVer: number
      commitChainVer: number
      /** CRC32C of `data` */
      checksum: number
    }
  | { ok: false; error: WireError }

export interface BatchReadRsp {
  results: ReadResult[]
}

export interface ChunkIdRange {
  begin: Buffer
  /** exclusive */
  end: Buffer
  maxNumChunkIdsToProcess: number
}

export interface QueryLastChunkReq {
  chainId: ChainId
  chainVer?: number
  range: ChunkIdRange
}
export interface QueryLastChunkRsp {
  lastChunkId: Buffer | null
  lastChunkLen: number
  totalChunkLen: number
  totalNumChunks: number
  moreChunksInRange: boolean
}

export interface RemoveChunksReq {
  chainId: ChainId
  chainVer: number
  range: ChunkIdRange
  tag: MessageTag
}
export interface RemoveChunksRsp {
  numChunksRemoved: number
  moreChunksInRange: boolean
}

export interface TruncateChunksReq {
  chainId: ChainId
  chainVer: number
  chunkId: Buffer
  chunkLen: number
  chunkSize: number
  onlyExtendChunk: boolean
  tag: MessageTag
}
export type TruncateChunksRsp = IOResult

export interface ChunkMeta {
  chunkId: Buffer
  commitVer: number
  updateVer: number
  /** chain version at the last commit */
  chainVer: number
  size: number
  chunkSize: number
  state: ChunkState
  recycleState: RecycleState
  checksum: number
  lastClientId: string
  lastRequestId: number
  timestamp: number
}

export interface SyncStartReq {
  chainId: ChainId
  chainVer: number
}
export interface SyncStartRsp {
  targetId: TargetId
  metas: ChunkMeta[]
}

export interface SyncDoneReq {
  chainId: ChainId
  chainVer: number
}

export interface TargetSpaceInfo {
  targetId: TargetId
  capacity: number
  free: number
  used: number
  chunkCount: number
}
export interface SpaceInfoRsp {
  targets: TargetSpaceInfo[]
}

export interface CreateTargetReq {
  targetId: TargetId
  chainId: ChainId
  diskIndex: number
  chunkSizes?: number[]
}

export interface QueryChunkReq {
  chainId: ChainId
  chunkId: Buffer
}
export interface QueryChunkRsp {
  targetId: TargetId
  meta: ChunkMeta | null
  /** only when requested with withData */
  data?: Buffer
}

export interface GetAllChunkMetadataReq {
  targetId?: TargetId
  chainId?: ChainId
}
export interface GetAllChunkMetadataRsp {
  targetId: TargetId
  metas: ChunkMeta[]
}

export interface OfflineTargetReq {
  targetId: TargetId
  force?: boolean
  /** shown as the target's offlineReason (default "offline-target") */
  reason?: string
}
export interface RemoveTargetReq {
  targetId: TargetId
  force: boolean
}
