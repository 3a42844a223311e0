// File-level client: meta calls, the POSIX-shaped file API with 3FS's FUSE
// client semantics, and the USRBIO-shaped batch API.
export {
  MetaClient,
  DEFAULT_META_RETRY,
  metaServersOf,
  type MetaClientOptions,
  type MetaCallOptions,
  type MetaRetryPolicy,
  type MetaClientStats,
  type Body,
  type TruncateReq,
  type TruncateRsp,
  type DropUserCacheReq,
  type AuthenticateRsp,
} from './meta-client.js'
export {
  FileSystem,
  FileHandle,
  inodeStats,
  DEFAULT_PERIODIC_SYNC_MS,
  DEFAULT_PERIODIC_SYNC_LIMIT,
  type FileSystemOptions,
  type FileSystemStats,
  type CreateOptions,
  type ReadTarget,
  type ReadResult,
  type ReaddirOptions,
  type TimeInput,
  type FileStats,
} from './file-system.js'
export { FileIo, assembleRead, fileLayout, type FileReadOptions, type WriteOptions } from './file-io.js'
export { chainTableOf, stripeChainIds, planPieces, chunkCount, lastChunkOf, readOutcome, type ChunkPiece, type ReadOutcome } from './pieces.js'
export { WriteBuffer, bufferedWrite, DEFAULT_WRITE_BUFFER_SIZE, MAX_CHUNK_WRITE_BUFFER, type FlushFn } from './write-buffer.js'
export { InodeState, Mutex, mergeHint, type SyncKind } from './inode-state.js'
export {
  parseOpenFlags,
  openFlagsToNumber,
  isReadAccess,
  isWriteAccess,
  normalizePath,
  pathAt,
  inodeAt,
  baseName,
  dirName,
  joinPath,
  type OpenFlagsInput,
} from './flags.js'
export {
  createIov,
  wrapIov,
  createIor,
  destroyIor,
  regFd,
  deregFd,
  prepIo,
  submitIos,
  waitForIos,
  errnoOf,
  Ior,
  IOR_ALLOW_READ_UNCOMMITTED,
  IOR_FORBID_READ_HOLES,
  DEFAULT_MAX_JOBS_PER_IOR,
  EAGAIN,
  EINVAL,
  EBADF,
  EACCES,
  EIO,
  type Iov,
  type IorOptions,
  type IorStats,
  type Cqe,
  type RegisteredFd,
} from './usrbio.js'
