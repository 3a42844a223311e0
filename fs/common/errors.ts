// The one error catalogue. Every failure that crosses a module or process
// boundary is a StrataError with a stable `code`; callers match on `code`,
// never on message text or class identity (classes do not survive RPC).
// 3FS status names are used where 3FS has one; errno names where the error is
// meant for the FUSE/POSIX boundary.

export interface ErrorSpec {
  /** Client may retry the same request (possibly after a routing refresh). */
  readonly retryable: boolean
  /** errno name used when this error reaches a POSIX boundary. */
  readonly errno: string
  readonly summary: string
}

function spec(retryable: boolean, errno: string, summary: string): ErrorSpec {
  return { retryable, errno, summary }
}

export const ERRORS = {
  // --- generic
  INVALID_ARGUMENT: spec(false, 'EINVAL', 'a request argument is invalid'),
  NOT_FOUND: spec(false, 'ENOENT', 'the named object does not exist'),
  ALREADY_EXISTS: spec(false, 'EEXIST', 'the named object already exists'),
  PERMISSION_DENIED: spec(false, 'EACCES', 'the operating system refused access to a local file'),
  NOT_IMPLEMENTED: spec(false, 'ENOSYS', 'the operation is not supported'),
  INTERNAL: spec(false, 'EIO', 'an internal invariant was violated'),
  IO_ERROR: spec(true, 'EIO', 'a local disk operation failed'),
  LOCAL_IO_ERROR: spec(false, 'EIO', "a command's local file (source or destination on this machine) could not be read or written; not retried"),
  NO_SPACE: spec(false, 'ENOSPC', 'the disk is full'),
  CLOSED: spec(false, 'ESHUTDOWN', 'the object was closed'),
  CANCELLED: spec(false, 'EINTR', 'the operation was cancelled'),
  TIMEOUT: spec(true, 'ETIMEDOUT', 'the deadline passed before a reply arrived'),
  BAD_CONFIG: spec(false, 'EINVAL', 'configuration is invalid'),
  CLUSTER_NOT_FOUND: spec(false, 'ENOENT', 'no cluster description at the given directory'),
  CLUSTER_RUNNING: spec(false, 'EBUSY', 'a cluster is already running in that directory'),
  CLUSTER_UNREACHABLE: spec(true, 'ENOTCONN', 'mgmtd and the servers a request needs refused connections for longer than the client waits for a stopped cluster'),

  // --- RPC transport (3FS RPC status names)
  RPC_CONNECT_FAILED: spec(true, 'ECONNREFUSED', 'could not connect to the peer'),
  RPC_SEND_FAILED: spec(true, 'EPIPE', 'the connection broke before the request was sent (a request the codec cannot encode, such as an integer beyond u64, is INVALID_ARGUMENT at once)'),
  RPC_CONNECTION_CLOSED: spec(true, 'ECONNRESET', 'the connection closed before a reply arrived'),
  RPC_FRAME_TOO_LARGE: spec(false, 'EMSGSIZE', 'a frame exceeds the configured maximum size'),
  RPC_BAD_FRAME: spec(false, 'EPROTO', 'a frame could not be decoded'),
  RPC_UNKNOWN_SERVICE: spec(false, 'ENOSYS', 'no such service on the peer'),
  RPC_UNKNOWN_METHOD: spec(false, 'ENOSYS', 'no such method on the peer'),
  RPC_FAULT_INJECTED: spec(true, 'EIO', 'a test fault hook failed the request'),

  // --- mgmtd
  MGMTD_NOT_PRIMARY: spec(true, 'EAGAIN', 'this mgmtd is not the primary'),
  MGMTD_NODE_NOT_FOUND: spec(false, 'ENOENT', 'the node is not registered'),
  MGMTD_REGISTER_FAIL: spec(false, 'EEXIST', 'the node id cannot be registered (it is already registered)'),
  MGMTD_NODE_DISABLED: spec(false, 'EPERM', 'the node is disabled'),
  MGMTD_STALE_HEARTBEAT: spec(false, 'ESTALE', 'heartbeat version is older than the last one seen'),
  MGMTD_CLOCK_SKEW: spec(false, 'EINVAL', 'heartbeat clock differs too much from mgmtd'),
  MGMTD_CHAIN_NOT_FOUND: spec(false, 'ENOENT', 'no such chain'),
  MGMTD_CHAIN_TABLE_NOT_FOUND: spec(false, 'ENOENT', 'no such chain table'),
  MGMTD_TARGET_NOT_FOUND: spec(false, 'ENOENT', 'no such target'),
  MGMTD_TARGET_EXISTED: spec(false, 'EEXIST', 'the target already exists'),
  MGMTD_INVALID_CHAIN: spec(false, 'EINVAL', 'the chain definition is invalid'),
  MGMTD_NOT_INITIALIZED: spec(false, 'EINVAL', 'the cluster was not initialized'),
  MGMTD_ALREADY_INITIALIZED: spec(false, 'EEXIST', 'the cluster was already initialized'),
  MGMTD_REFUSED: spec(false, 'EPERM', 'the operation would leave a chain without a serving replica'),
  MGMTD_CLIENT_SESSION_NOT_FOUND: spec(false, 'ENOENT', 'no such client session'),

  // --- storage / CRAQ (3FS StorageClient/StorageServer status names)
  ROUTING_VERSION_MISMATCH: spec(true, 'EAGAIN', 'the request carries a different chain version than the target'),
  CHAIN_VERSION_MISMATCH: spec(true, 'EAGAIN', 'the successor runs a newer chain version'),
  ROUTING_ERROR: spec(true, 'EAGAIN', 'the request was sent to a target that does not serve this role'),
  TARGET_OFFLINE: spec(true, 'EAGAIN', 'the target is offline'),
  TARGET_NOT_FOUND: spec(true, 'EAGAIN', 'no such target on this storage node'),
  TARGET_STATE_INVALID: spec(true, 'EAGAIN', 'the target is not up to date'),
  CHUNK_NOT_FOUND: spec(false, 'ENOENT', 'the chunk does not exist'),
  CHUNK_NOT_COMMIT: spec(true, 'EAGAIN', 'the chunk has an uncommitted update'),
  CHUNK_NOT_CLEAN: spec(false, 'EIO', 'the chunk was left dirty by a torn write'),
  CHUNK_COMMITTED_UPDATE: spec(false, 'EIO', 'the forwarded update is already committed'),
  CHUNK_STALE_UPDATE: spec(false, 'EIO', 'the forwarded update is older than the pending one'),
  CHUNK_MISSING_UPDATE: spec(true, 'EIO', 'an update between the local version and the forwarded one is missing'),
  CHUNK_ADVANCE_UPDATE: spec(true, 'EAGAIN', 'a pending update already exists for this chunk'),
  CHUNK_STALE_COMMIT: spec(false, 'EIO', 'the commit is older than the committed version'),
  CHUNK_SIZE_MISMATCH: spec(false, 'EINVAL', 'the chunk size differs from the stored chunk'),
  CHUNK_INVALID_RANGE: spec(false, 'EINVAL', 'offset and length fall outside the chunk'),
  CHUNK_VERSION_FENCED: spec(false, 'EIO', 'the request chain version is older than the chunk committed under'),
  CHECKSUM_MISMATCH: spec(false, 'EIO', 'data does not match its checksum'),
  DUPLICATE_UPDATE: spec(false, 'EIO', 'the update sequence number was already used on this channel'),
  CHANNEL_IS_LOCKED: spec(true, 'EAGAIN', 'another update on this channel is in flight'),
  SYNC_REFUSED: spec(true, 'EAGAIN', 'the successor is not in a state that accepts a sync'),
  NO_SUCCESSOR: spec(true, 'EAGAIN', 'the chain has no serving replica to forward to'),
  CHAIN_UNAVAILABLE: spec(true, 'EAGAIN', 'the chain has no serving target'),
  READ_ONLY: spec(false, 'EROFS', 'the target refuses writes'),

  // --- transactional KV (FoundationDB error names)
  KV_CONFLICT: spec(true, 'EAGAIN', 'the transaction conflicted with a concurrent commit'),
  KV_TXN_TOO_OLD: spec(true, 'EAGAIN', 'the transaction read version is too old to check conflicts'),
  KV_COMMIT_UNKNOWN: spec(true, 'EIO', 'the commit may or may not have been applied'),
  KV_VALUE_TOO_LARGE: spec(false, 'E2BIG', 'a key or value exceeds the engine limit'),

  // --- metadata (3FS MetaCode names; errno is what FUSE returns)
  META_NOT_FOUND: spec(false, 'ENOENT', 'no such file or directory'),
  META_EXISTS: spec(false, 'EEXIST', 'the name already exists'),
  META_NOT_EMPTY: spec(false, 'ENOTEMPTY', 'the directory is not empty'),
  META_NOT_DIRECTORY: spec(false, 'ENOTDIR', 'a path component is not a directory'),
  META_IS_DIRECTORY: spec(false, 'EISDIR', 'the path is a directory'),
  META_TOO_MANY_SYMLINKS: spec(false, 'ELOOP', 'too many levels of symbolic links'),
  META_NO_PERMISSION: spec(false, 'EACCES', 'permission denied'),
  META_NOT_PERMITTED: spec(false, 'EPERM', 'operation not permitted'),
  META_NO_LOCK: spec(false, 'ENOLCK', 'the directory is locked by another client'),
  META_NAME_TOO_LONG: spec(false, 'ENAMETOOLONG', 'a name is too long'),
  META_FILE_TOO_LARGE: spec(false, 'EFBIG', 'the file would exceed the maximum size'),
  META_CROSS_DEVICE: spec(false, 'EXDEV', 'rename across filesystems'),
  META_INVALID_ARGUMENT: spec(false, 'EINVAL', 'invalid argument for a metadata operation'),
  META_BUSY: spec(true, 'EBUSY', 'the object is busy; retry later'),
  META_TOO_MANY_LINKS: spec(false, 'EMLINK', 'too many hard links'),
  META_NO_ATTR: spec(false, 'ENODATA', 'no such extended attribute'),
  META_NOT_SUPPORTED: spec(false, 'ENOTSUP', 'operation not supported'),
  META_READ_ONLY: spec(false, 'EROFS', 'read-only file system'),
  META_BAD_FILE: spec(false, 'EBADF', 'bad file handle or mode'),
  META_CLIENT_ALIVE: spec(false, 'EBUSY', 'the client is alive in mgmtd: its write sessions cannot be pruned'),
  META_REQUEST_ABANDONED: spec(false, 'ETIMEDOUT', 'the client gave up on this request and withdrew it: it is not applied'),

  // --- images (sandbox/image)
  IMAGE_NOT_FOUND: spec(false, 'ENOENT', 'no such image, tag or manifest'),
  IMAGE_INVALID_REFERENCE: spec(false, 'EINVAL', 'the image name, tag, digest or URL is malformed'),
  IMAGE_BAD_ARCHIVE: spec(false, 'EINVAL', 'the archive or tar stream is malformed or truncated'),
  IMAGE_BAD_MANIFEST: spec(false, 'EINVAL', 'a manifest, index or config is malformed'),
  IMAGE_UNSAFE_PATH: spec(false, 'EINVAL', 'an archive entry would be written outside the tree'),
  IMAGE_DUPLICATE_ENTRY: spec(false, 'EINVAL', 'an archive holds the same path twice'),
  IMAGE_DIGEST_MISMATCH: spec(false, 'EIO', 'content does not match its digest'),
  IMAGE_SIZE_MISMATCH: spec(false, 'EIO', 'content does not match its declared size'),
  IMAGE_UNSUPPORTED_MEDIA_TYPE: spec(false, 'ENOTSUP', 'the media type or compression is not supported'),
  IMAGE_BLOB_MISSING: spec(false, 'ENOENT', 'a manifest references a blob that is not stored'),
  IMAGE_PLATFORM_NOT_FOUND: spec(false, 'ENOENT', 'the index has no manifest for the requested platform'),
  IMAGE_BUILD_FAILED: spec(false, 'EIO', 'building the EROFS layer failed'),
  IMAGE_REMOTE_ERROR: spec(true, 'EIO', 'the registry or object store failed'),
  IMAGE_AUTH_FAILED: spec(false, 'EACCES', 'the registry or object store refused the credentials'),
  IMAGE_NEEDS_ROOT: spec(false, 'EPERM', 'building layers needs root (device nodes, trusted xattrs, ownership)'),
  IMAGE_BAD_LAYER: spec(false, 'EINVAL', 'a layer file is not a mountable EROFS image or holds what a tar cannot carry'),

  // --- sandbox (sandbox/backends; the in-sandbox agent's errno names map onto these, with the
  // original errno and path in `detail`)
  SANDBOX_GONE: spec(false, 'ESRCH', 'the sandbox no longer exists or is shutting down'),
  SANDBOX_AGENT_UNREACHABLE: spec(true, 'EHOSTDOWN', 'the agent inside the sandbox did not answer'),
  SANDBOX_PROTOCOL_ERROR: spec(false, 'EPROTO', 'a malformed frame on the sandbox agent channel'),
  SANDBOX_EXEC_FAILED: spec(false, 'ENOEXEC', 'the command could not be started (errno in detail)'),
  SANDBOX_START_FAILED: spec(false, 'EIO', 'the runtime could not start the sandbox (stage and output in detail)'),
  SANDBOX_PERMISSION_DENIED: spec(false, 'EACCES', 'permission denied inside the sandbox'),
  SANDBOX_NOT_A_DIRECTORY: spec(false, 'ENOTDIR', 'a path component inside the sandbox is not a directory'),
  SANDBOX_IS_A_DIRECTORY: spec(false, 'EISDIR', 'the path inside the sandbox is a directory'),
  SANDBOX_NOT_EMPTY: spec(false, 'ENOTEMPTY', 'the directory inside the sandbox is not empty'),
  SANDBOX_READ_ONLY: spec(false, 'EROFS', 'the path inside the sandbox is on a read-only mount'),
  SANDBOX_RESOURCE_EXHAUSTED: spec(true, 'EAGAIN', 'the sandbox ran out of processes, memory or file descriptors'),
  SANDBOX_FS_ERROR: spec(false, 'EIO', 'a file operation inside the sandbox failed (errno in detail)'),
  OUTPUT_LIMIT: spec(false, 'EFBIG', 'the data exceeds the size limit the caller set'),
  // node daemon and SDK (sandbox/daemon, sandbox/sdk)
  SANDBOX_NOT_FOUND: spec(false, 'ENOENT', 'no sandbox with that id on this node'),
  UNAUTHENTICATED: spec(false, 'EACCES', 'the bearer token is missing or wrong'),
  QUOTA_EXCEEDED: spec(false, 'EDQUOT', 'the request exceeds a configured limit of the node (sandbox count, per-sandbox resources)'),
  CAPACITY_UNAVAILABLE: spec(true, 'EAGAIN', 'the node lacks the memory, pids or disk to admit the sandbox now'),
  IDEMPOTENCY_MISMATCH: spec(false, 'EEXIST', 'the idempotency key was used before with a different request'),
  NOT_A_STRATA_DAEMON: spec(false, 'EPROTO', 'the endpoint answered, but not as a Strata sandbox daemon (another HTTP server, or not HTTP at all): check the endpoint URL'),
  // rootfs and datasets (sandbox/rootfs)
  ROOTFS_MOUNT_FAILED: spec(false, 'EIO', 'mounting a layer, the overlay or a dataset failed (errno in detail)'),
  ROOTFS_UNMOUNT_FAILED: spec(true, 'EBUSY', 'a layer, overlay or dataset mount could not be removed'),
  ROOTFS_NOT_MOUNTED: spec(false, 'ENOENT', 'a mount to re-adopt is not in the mount table'),
  ROOTFS_BAD_MOUNT_TARGET: spec(false, 'EINVAL', 'a mount target is not a clean absolute path inside the rootfs'),
  ROOTFS_DATASET_NOT_FOUND: spec(false, 'ENOENT', 'the dataset source does not exist in the DFS'),
  ROOTFS_BAD_DATASET: spec(false, 'EINVAL', 'the dataset source is not a directory or regular file inside the DFS'),
} as const satisfies Record<string, ErrorSpec>

export type ErrorCode = keyof typeof ERRORS

export interface WireError {
  code: string
  message: string
}

export class StrataError extends Error {
  readonly code: ErrorCode
  /** Extra structured detail that travels over RPC (must be msgpack-able). */
  readonly detail?: Record<string, unknown>

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown; detail?: Record<string, unknown> }) {
    super(`${code}: ${message ?? ERRORS[code].summary}`, options?.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'StrataError'
    this.code = code
    if (options?.detail) this.detail = options.detail
  }

  get retryable(): boolean {
    return ERRORS[this.code].retryable
  }

  get errno(): string {
    return ERRORS[this.code].errno
  }

  /** The bare message without the code prefix. */
  get reason(): string {
    const prefix = `${this.code}: `
    return this.message.startsWith(prefix) ? this.message.slice(prefix.length) : this.message
  }

  toWire(): WireError & { detail?: Record<string, unknown> } {
    return this.detail ? { code: this.code, message: this.reason, detail: this.detail } : { code: this.code, message: this.reason }
  }

  static fromWire(w: WireError & { detail?: Record<string, unknown> }): StrataError {
    const code = isErrorCode(w.code) ? w.code : 'INTERNAL'
    const msg = isErrorCode(w.code) ? w.message : `${w.code}: ${w.message}`
    return new StrataError(code, msg, w.detail ? { detail: w.detail } : undefined)
  }
}

export function isErrorCode(code: unknown): code is ErrorCode {
  return typeof code === 'string' && Object.prototype.hasOwnProperty.call(ERRORS, code)
}

export function isStrataError(e: unknown, code?: ErrorCode | readonly ErrorCode[]): e is StrataError {
  if (!(e instanceof StrataError)) return false
  if (code === undefined) return true
  return typeof code === 'string' ? e.code === code : code.includes(e.code)
}

export function isRetryable(e: unknown): boolean {
  return e instanceof StrataError && e.retryable
}

/** errno names of local file operations → catalogue codes (what a command reports for a bad local path) */
const SYSTEM_ERRORS: Record<string, ErrorCode> = {
  ENOENT: 'NOT_FOUND',
  EEXIST: 'ALREADY_EXISTS',
  ENOTEMPTY: 'ALREADY_EXISTS',
  EISDIR: 'INVALID_ARGUMENT',
  ENOTDIR: 'INVALID_ARGUMENT',
  EINVAL: 'INVALID_ARGUMENT',
  ENAMETOOLONG: 'INVALID_ARGUMENT',
  ELOOP: 'INVALID_ARGUMENT',
  EACCES: 'PERMISSION_DENIED',
  EPERM: 'PERMISSION_DENIED',
  EROFS: 'PERMISSION_DENIED',
  ENOSPC: 'NO_SPACE',
  EDQUOT: 'NO_SPACE',
}

/**
 * A Node system error (one with an errno name and a syscall, e.g. ENOENT from
 * opening a local file) as a catalogue error; null for anything else.
 */
export function fromSystemError(e: unknown): StrataError | null {
  const ne = e as NodeJS.ErrnoException
  if (!ne || typeof ne.code !== 'string' || typeof ne.syscall !== 'string' || !/^E[A-Z0-9]+$/.test(ne.code)) return null
  return new StrataError(SYSTEM_ERRORS[ne.code] ?? 'IO_ERROR', ne.message, { cause: e })
}

/**
 * What a Node system error says, in words: "no such file or directory" for
 * Node's "ENOENT: no such file or directory, open '/x'" (for a message that
 * names the path itself); any other error's message as it is.
 */
export function systemErrorWords(e: unknown): string {
  const msg = (e as Error)?.message ?? String(e)
  return /^E[A-Z0-9]+: ([^,]+)/.exec(msg)?.[1] ?? msg
}

/** Turns any thrown value into a StrataError, keeping the original as `cause`. */
export function toStrataError(e: unknown, fallback: ErrorCode = 'INTERNAL'): StrataError {
  if (e instanceof StrataError) return e
  const ne = e as NodeJS.ErrnoException
  if (ne && typeof ne.code === 'string') {
    if (ne.code === 'ENOSPC' || ne.code === 'EDQUOT') return new StrataError('NO_SPACE', ne.message, { cause: e })
    if (ne.code === 'EIO' || ne.code === 'EROFS') return new StrataError('IO_ERROR', ne.message, { cause: e })
  }
  return new StrataError(fallback, e instanceof Error ? e.message : String(e), { cause: e })
}
