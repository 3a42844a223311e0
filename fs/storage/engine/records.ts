// Persistent per-chunk record and the public shapes the engine returns.

import type { ChunkMeta, ChunkState, IOResult, RecycleState } from '../protocol.js'

/**
 * A chunk's content as it exists on disk: the first `size` bytes of data file
 * `file` (null when the content is empty). Files are never modified below a
 * size some record still refers to, so a ContentRef stays readable for as long
 * as a record holds it.
 */
export interface ContentRef {
  file: string | null
  size: number
  checksum: number
}

/**
 * What the `chunks` db stores per chunk id. `size`/`checksum`/`file` describe
 * the newest content (the pending one while `commitVer < updateVer`, as in
 * 3FS); `committed` is the content as of the last full commit, kept so a torn
 * or pending update never hides the last good bytes.
 */
export interface ChunkRecord {
  commitVer: number
  updateVer: number
  /**
   * Chain version of the last update or commit. 3FS overwrites it on update
   * too; it equals the commit chain version whenever state is COMMIT.
   */
  chainVer: number
  chunkSize: number
  state: ChunkState
  recycleState: RecycleState
  size: number
  checksum: number
  file: string | null
  committed: ContentRef
  /**
   * Data file an update was writing when the record went DIRTY. Only garbage
   * once the update is abandoned; recorded so it can be reclaimed.
   */
  dirtyFile: string | null
  lastClientId: string
  lastRequestId: number
  timestamp: number
}

export function recordToMeta(chunkId: Buffer, r: ChunkRecord): ChunkMeta {
  return {
    chunkId,
    commitVer: r.commitVer,
    updateVer: r.updateVer,
    chainVer: r.chainVer,
    size: r.size,
    chunkSize: r.chunkSize,
    state: r.state,
    recycleState: r.recycleState,
    checksum: r.checksum,
    lastClientId: r.lastClientId,
    lastRequestId: r.lastRequestId,
    timestamp: r.timestamp,
  }
}

/** Options of `applyUpdate`; mirrors 3FS UpdateOptions plus the message tag. */
export interface ApplyUpdateOptions {
  /** Informational: the version rules branch on `io.updateVer` (0 = from a client), as 3FS does. */
  fromClient: boolean
  /** Full-chunk replace from a predecessor running resync / forwarding to a SYNCING target. */
  isSyncing: boolean
  /** Chain version the update is made under (the forwarder's, or the local one at the head). */
  chainVer: number
  clientId?: string
  requestId?: number
}

export interface UpdateResult extends IOResult {
  /** Chunk length after the update. */
  size: number
  /** null when a REMOVE found no chunk (nothing to do, reported as success). */
  state: ChunkState | null
}

export interface CommitOptions {
  /** The committed update was a REMOVE: a missing chunk is then success, not CHUNK_NOT_FOUND. */
  isRemove?: boolean
  /**
   * Commit even a DIRTY chunk (3FS `isForce`, used by resetUncommitted). A
   * DIRTY chunk's torn update is discarded: it commits its last clean content.
   */
  force?: boolean
  clientId?: string
  requestId?: number
}

export interface CommitResult extends IOResult {
  size: number
  state: ChunkState | null
  /** `commitVer` was not above the chunk's: nothing changed (success for CRAQ). */
  stale: boolean
  /** The chunk was removed by this commit (or was already gone for a REMOVE). */
  removed: boolean
}

export interface ReadOptions {
  /**
   * Return the newest content even while an update is pending (3FS
   * ALLOW_READ_UNCOMMITTED). A DIRTY chunk then serves its committed content,
   * the only bytes known to be whole.
   */
  allowUncommitted?: boolean
  /** Re-read the whole version and compare it with the stored chunk checksum. */
  verifyChecksum?: boolean
  /**
   * Where the data goes: a Buffer of the given length (default: a new one).
   * The result's `data` is that Buffer or a view of it.
   */
  alloc?: (length: number) => Buffer
  /**
   * A read of a whole content version at least this long returns the file
   * range (`file`, leased) instead of the bytes: the caller sends them
   * straight from the page cache (sendfile) and releases the lease after.
   * Not with `verifyChecksum` (that needs the bytes here).
   */
  leaseFrom?: number
}

/** Where a whole-content read's bytes are, held open until `release()` (see ReadOptions.leaseFrom). */
export interface LeasedRange {
  fd: number
  offset: number
  length: number
  release: () => void
}

export interface ChunkReadResult {
  /** the bytes; empty when they are given as `file` instead */
  data: Buffer
  /** with ReadOptions.leaseFrom: the bytes as a leased file range */
  file?: LeasedRange
  commitVer: number
  updateVer: number
  commitChainVer: number
  /** CRC32C of `data` */
  checksum: number
  /** Length of the chunk version that was read. */
  chunkLength: number
  /** CRC32C of that whole version. */
  chunkChecksum: number
}

export interface WholeChunk {
  data: Buffer
  meta: ChunkMeta
  /** CRC32C of `data` (the whole returned version). */
  checksum: number
  /** true when `data` is the committed version, false when it is the pending one. */
  committed: boolean
}

/** 3FS QueryLastChunkRsp over one chunk-id range. */
export interface LastChunkInfo {
  lastChunkId: Buffer | null
  lastChunkLen: number
  totalChunkLen: number
  totalNumChunks: number
  moreChunksInRange: boolean
}

export interface EngineSpaceInfo {
  targetId: number
  /** bytes of the filesystem holding the target */
  capacity: number
  /** bytes available to unprivileged writers on that filesystem */
  free: number
  /** sum of chunk lengths on this target */
  used: number
  chunkCount: number
}

/** Counts found when the engine opened; a restarting service uses them to decide how to rejoin. */
export interface RecoveryInfo {
  chunks: number
  dirtyChunks: number
  uncommittedChunks: number
  orphanFilesRemoved: number
}
