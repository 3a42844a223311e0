// Loader of the N-API addon built from native/addon by binding.gyp. Only the
// system calls Node lacks live there; callers get errors whose `code` is the
// errno name, like Node's own fs errors.
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { StrataError } from './errors.js'

export interface NativeAddon {
  mount(source: string | null, target: string, fstype: string | null, flags: number, data?: string | null): void
  umount2(target: string, flags: number): void
  gettid(): number
  /** mknod(2); `mode` carries the file type (S_IFCHR, S_IFBLK, S_IFIFO) and permission bits. */
  mknod(path: string, mode: number, major: number, minor: number): void
  /** lsetxattr(2): never follows a final symlink. `flags` is XATTR.CREATE / XATTR.REPLACE or 0. */
  lsetxattr(path: string, name: string, value: Buffer, flags?: number): void
  /** lgetxattr(2); throws code ENODATA when the attribute is absent. */
  lgetxattr(path: string, name: string): Buffer
  /** llistxattr(2): attribute names in the order the filesystem lists them. */
  llistxattr(path: string): string[]
  lremovexattr(path: string, name: string): void
  /** utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW) with exact nanoseconds. */
  lutimens(path: string, atimeSec: number, atimeNsec: number, mtimeSec: number, mtimeNsec: number): void
  /**
   * A listening AF_UNIX stream socket bound at `path` (created mode 0600), returned as a raw fd with
   * FD_CLOEXEC set: the control channel handed to a sandbox agent as its fd 3 (spawn stdio slot 3).
   * The caller closes it with fs.closeSync once the agent runs and unlinks `path` when done.
   * Throws with code EADDRINUSE when `path` exists, ENAMETOOLONG past 107 bytes.
   */
  unixListen(path: string, backlog?: number): number
  /**
   * A Buffer of `size` bytes whose memory starts at a multiple of `alignment` (a power of two,
   * 8–65536), as O_DIRECT needs; freed when the Buffer is collected.
   */
  alignedBuffer(size: number, alignment: number): Buffer
  /**
   * sendfile(2) of [offset, offset+length) of `fileFd` to the stream socket `socketFd`, on a libuv pool
   * thread, waiting (poll, at most `timeoutMs` each time) whenever the socket buffer is full. The socket
   * descriptor is duplicated for the duration, so a socket closed meanwhile never lets the bytes go to a
   * reused descriptor number. Rejects with the errno name as `code` (EPIPE, ECONNRESET, ETIMEDOUT,
   * EOVERFLOW when the file ends before `length` bytes).
   */
  sendfile(socketFd: number, fileFd: number, offset: number, length: number, timeoutMs: number): Promise<void>
  /**
   * The start of such a sendfile done at once on this thread, without waiting: only when the whole range
   * is in the page cache (cachestat(2)), as much as the socket buffer takes. Returns the bytes sent, the
   * rest to be sent with sendfileOnLoop; -1 (nothing sent) when the range is not all cached or the
   * kernel cannot tell, the whole range then to be sent with sendfile, whose thread may wait for the disk.
   */
  sendfileCached(socketFd: number, fileFd: number, offset: number, length: number): number
  /**
   * The rest of a cached range after sendfileCached: the event loop waits for room in the socket buffer
   * (a libuv poll handle on a duplicate of the descriptor) and sends what fits each time, on this
   * thread, without waking a pool thread. Rejects like sendfile; ETIMEDOUT when the socket takes no
   * byte for `stallMs`.
   */
  sendfileOnLoop(socketFd: number, fileFd: number, offset: number, length: number, stallMs: number): Promise<void>
  /** CRC32C with the SSE4.2 instruction (three streams); absent when the CPU lacks it. Use fs/common/crc32c.ts. */
  crc32c?: (data: Uint8Array, initial?: number) => number
  /** flock(2) on `fd`; false when LOCK_NB was given and the lock is held elsewhere */
  flock(fd: number, operation: number): boolean
  /** true when the memory of `data` starts at a multiple of `alignment` (a power of two) */
  isAligned(data: Uint8Array, alignment: number): boolean
  /** FS_IOC_FIEMAP of `fd`: the file's data extents as offset, length pairs, in the filesystem's order (EOPNOTSUPP without fiemap) */
  dataExtents(fd: number): number[]
  /**
   * Where reads of the first `size` bytes of `fd` return data (lseek SEEK_DATA/SEEK_HOLE), as offset,
   * length pairs in order; the whole file where the filesystem keeps no holes. Holes read as zeros.
   */
  dataSegments(fd: number, size: number): number[]
}

/**
 * Alignment of memory, offsets and lengths for O_DIRECT I/O (every common
 * device's logical block divides it). Chunk-write requests place their data
 * at it inside the frame, and the RPC server receives large frames into
 * memory aligned to it, so a storage node writes the data as it arrived.
 */
export const DIRECT_IO_ALIGN = 4096

/** Memory for a BufferPool whose buffers O_DIRECT accepts; plain memory if the addon is missing. */
export function alignedMemory(size: number): ArrayBuffer {
  try {
    return native().alignedBuffer(size, DIRECT_IO_ALIGN).buffer as ArrayBuffer
  } catch {
    return new ArrayBuffer(size)
  }
}

/** Whether `data` may be handed to an O_DIRECT write as it is (its address is aligned). */
export function directIoReady(data: Uint8Array): boolean {
  try {
    return native().isAligned(data, DIRECT_IO_ALIGN)
  } catch {
    return false
  }
}

/** mount(2) flags used by Strata (linux/mount.h) */
export const MS = { RDONLY: 1, NOSUID: 2, NODEV: 4, NOEXEC: 8, REMOUNT: 32, BIND: 4096, REC: 16384, PRIVATE: 1 << 18 } as const
/** lsetxattr(2) flags */
export const XATTR = { CREATE: 1, REPLACE: 2 } as const
/** umount2(2) flags */
export const MNT = { FORCE: 1, DETACH: 2, EXPIRE: 4 } as const

let addon: NativeAddon | null = null

export function native(): NativeAddon {
  if (addon) return addon
  // dist/fs/common/native.js → repo root is three levels up
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..')
  const file = path.join(root, 'build/Release/strata_native.node')
  try {
    addon = createRequire(import.meta.url)(file) as NativeAddon
  } catch (e) {
    throw new StrataError('NOT_IMPLEMENTED', `native addon not built at ${file} (run npm run build): ${(e as Error).message}`, { cause: e })
  }
  return addon
}
