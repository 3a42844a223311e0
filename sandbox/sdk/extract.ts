// Unpacking a sandbox's archive (files.downloadTar) onto this machine. The
// archive comes from a sandbox, which is not trusted, so nothing in it gets
// more than an ordinary copy would:
//   - regular files, directories and symlinks are created; hard links only to
//     a file this archive already created;
//   - device nodes, fifos, sockets and anything else are never created:
//     they are skipped and reported through onSkip;
//   - setuid, setgid and sticky bits are dropped (mode & 0o777), the other
//     permission bits and mtimes are kept;
//   - ownership is not restored: everything belongs to the caller;
//   - names are relative and may not climb (`..`), and nothing is written
//     through a symlink: symlinks are created last, and a path that meets a
//     symlink (one already in the destination) is refused.
//   - a sparse file's holes are written as zeros, so the tar reader's cap
//     (1 GiB of holes per archive) bounds what a tiny archive can expand to.
// Errors: IMAGE_UNSAFE_PATH for a name that leaves the directory or runs
// through a symlink, IMAGE_BAD_ARCHIVE for a malformed stream, the stream's
// own error when the download broke, local file errors as errno codes.
import fsp, { type FileHandle } from 'node:fs/promises'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { StrataError, type ErrorCode } from '../../fs/common/errors.js'
import { readTar, type TarEntryType } from '../image/layer/tar-reader.js'

export interface ExtractOptions {
  /** Told of every entry that was not created (a relative name, and why). */
  onSkip?: (name: string, why: string) => void
}

export interface ExtractResult {
  /** entries created */
  entries: number
  /** entries skipped (see onSkip) */
  skipped: number
}

const PERMISSION_BITS = 0o777

const TYPE_NAMES: Partial<Record<TarEntryType, string>> = {
  'character-device': 'character device', 'block-device': 'block device', fifo: 'fifo',
}

const ERRNO_CODES: Record<string, ErrorCode> = {
  ENOENT: 'NOT_FOUND', EEXIST: 'ALREADY_EXISTS', EISDIR: 'INVALID_ARGUMENT', ENOTDIR: 'INVALID_ARGUMENT', EINVAL: 'INVALID_ARGUMENT',
  EACCES: 'PERMISSION_DENIED', EPERM: 'PERMISSION_DENIED', EROFS: 'PERMISSION_DENIED', ENOSPC: 'NO_SPACE',
}

function localError(e: unknown, what: string): StrataError {
  if (e instanceof StrataError) return e
  const errno = (e as NodeJS.ErrnoException).code ?? 'EIO'
  return new StrataError(ERRNO_CODES[errno] ?? 'IO_ERROR', `${what}: ${(e as Error).message}`, { cause: e, detail: { errno } })
}

function unsafe(name: string, why: string): StrataError {
  return new StrataError('IMAGE_UNSAFE_PATH', `archive entry ${JSON.stringify(name.slice(0, 300))} ${why}; nothing is written outside the destination or through a symlink`)
}

/** The components of an entry name below the destination ([] for the destination itself). */
function partsOf(name: string): string[] {
  if (name.startsWith('/')) throw unsafe(name, 'is an absolute path')
  const parts = name.split('/').filter((c) => c !== '' && c !== '.')
  if (parts.includes('..')) throw unsafe(name, "climbs out with '..'")
  return parts
}

async function lstatOrNull(p: string): Promise<import('node:fs').Stats | null> {
  try {
    return await fsp.lstat(p)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw e
  }
}

const SPARSE_BLOCK = 4096
const ZEROS = Buffer.alloc(SPARSE_BLOCK)

/**
 * Writes `chunks` into the empty file `fh` from offset 0 and returns the
 * size. A run of zeros over whole 4 KiB blocks (at aligned offsets) is not
 * written but left as a hole, and the size is set at the end: a sparse file
 * that travelled as a stream of zeros is sparse again (as
 * `cp --sparse=always` makes it; the agent does the same in the sandbox).
 */
export async function writeSparse(fh: FileHandle, chunks: AsyncIterable<Uint8Array>): Promise<number> {
  let pos = 0
  let holeAtEnd = false
  const zero = (c: Buffer, at: number, n: number) => c.compare(ZEROS, 0, n, at, at + n) === 0
  // whole blocks at an aligned offset: runs of zero blocks are skipped, the others written
  const emit = async (c: Buffer, at: number, n: number) => {
    while (n > 0) {
      const z = zero(c, at, SPARSE_BLOCK)
      let run = SPARSE_BLOCK
      while (run < n && zero(c, at + run, SPARSE_BLOCK) === z) run += SPARSE_BLOCK
      if (!z) for (let off = 0; off < run;) off += (await fh.write(c, at + off, run - off, pos + off)).bytesWritten
      holeAtEnd = z
      at += run
      n -= run
      pos += run
    }
  }
  // blocks are judged whole, wherever the chunks begin and end: a partial one waits here
  const blk = Buffer.alloc(SPARSE_BLOCK)
  let blen = 0
  for await (const chunk of chunks) {
    const c = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    let i = 0
    if (blen > 0) {
      const take = Math.min(SPARSE_BLOCK - blen, c.length)
      c.copy(blk, blen, 0, take)
      blen += take
      i = take
      if (blen < SPARSE_BLOCK) continue
      blen = 0
      await emit(blk, 0, SPARSE_BLOCK)
    }
    const whole = (c.length - i) - ((c.length - i) % SPARSE_BLOCK)
    await emit(c, i, whole)
    blen = c.copy(blk, 0, i + whole)
  }
  if (blen > 0) {
    holeAtEnd = zero(blk, 0, blen)
    if (!holeAtEnd) for (let off = 0; off < blen;) off += (await fh.write(blk, off, blen - off, pos + off)).bytesWritten
    pos += blen
  }
  if (holeAtEnd) await fh.truncate(pos)
  return pos
}

/**
 * Unpacks `input` (a tar stream) into the existing directory `dir` under the
 * rules in the file comment.
 */
export async function extractTarSafely(input: Readable, dir: string, o: ExtractOptions = {}): Promise<ExtractResult> {
  const root = path.resolve(dir)
  const files = new Set<string>()
  const symlinks: Array<{ parts: string[]; target: string; name: string }> = []
  const dirs: Array<{ host: string; mode: number; mtime: Date }> = []
  let entries = 0
  let skipped = 0
  const skip = (name: string, why: string) => {
    skipped++
    o.onSkip?.(name, why)
  }

  // Makes the directories `parts` below root, refusing any component that is not a real directory.
  const ensureDir = async (parts: string[], name: string): Promise<string> => {
    let cur = root
    for (const c of parts) {
      cur = path.join(cur, c)
      const st = await lstatOrNull(cur)
      if (st === null) await fsp.mkdir(cur, { mode: 0o755 })
      else if (st.isSymbolicLink()) throw unsafe(name, `runs through the symlink ${path.relative(root, cur)}`)
      else if (!st.isDirectory()) throw unsafe(name, `runs through ${path.relative(root, cur)}, which is not a directory`)
    }
    return cur
  }

  // A leaf about to be (re)created: whatever non-directory is there goes, so nothing is written through it.
  const clearLeaf = async (host: string, name: string): Promise<void> => {
    const st = await lstatOrNull(host)
    if (st === null) return
    if (st.isDirectory()) throw new StrataError('ALREADY_EXISTS', `${name}: a directory is in the way at ${host}`)
    await fsp.unlink(host)
  }

  for await (const { header: h, body } of readTar(input)) {
    const parts = partsOf(h.name)
    const name = parts.join('/') || '.'
    const mtime = new Date(h.mtime.sec * 1000 + Math.floor(h.mtime.nsec / 1e6))
    const mode = h.mode & PERMISSION_BITS
    try {
      if (h.type === 'directory') {
        const host = await ensureDir(parts, h.name)
        dirs.push({ host, mode, mtime })
        entries++
      } else if (h.type === 'file') {
        if (parts.length === 0) throw unsafe(h.name, 'names the destination itself')
        const host = path.join(await ensureDir(parts.slice(0, -1), h.name), parts.at(-1)!)
        await clearLeaf(host, name)
        // 'wx': O_EXCL, so a symlink put there meanwhile is not followed
        const fh = await fsp.open(host, 'wx', 0o600)
        try {
          // runs of zeros become holes again
          await writeSparse(fh, body)
          await fh.chmod(mode)
          await fh.utimes(mtime, mtime)
        } finally {
          await fh.close()
        }
        files.add(name)
        entries++
      } else if (h.type === 'link') {
        const target = partsOf(h.linkname).join('/')
        if (!files.has(target)) {
          skip(name, `a hard link to ${JSON.stringify(h.linkname)}, which this archive did not create as a file`)
          continue
        }
        if (parts.length === 0) throw unsafe(h.name, 'names the destination itself')
        const host = path.join(await ensureDir(parts.slice(0, -1), h.name), parts.at(-1)!)
        await clearLeaf(host, name)
        await fsp.link(path.join(root, target), host)
        files.add(name)
        entries++
      } else if (h.type === 'symlink') {
        if (parts.length === 0) throw unsafe(h.name, 'names the destination itself')
        // last: no later entry may be written through a link this archive made
        symlinks.push({ parts, target: h.linkname, name })
      } else {
        skip(name, `a ${TYPE_NAMES[h.type] ?? h.type} is never created on this machine`)
      }
    } catch (e) {
      throw localError(e, `unpacking ${name} into ${root}`)
    }
  }
  for (const l of symlinks) {
    try {
      const host = path.join(await ensureDir(l.parts.slice(0, -1), l.name), l.parts.at(-1)!)
      await clearLeaf(host, l.name)
      await fsp.symlink(l.target, host)
      entries++
    } catch (e) {
      throw localError(e, `unpacking ${l.name} into ${root}`)
    }
  }
  // deepest last in archive order, so set modes from the end: a read-only directory is filled first
  for (const d of dirs.reverse()) {
    try {
      await fsp.chmod(d.host, d.mode)
      await fsp.utimes(d.host, d.mtime, d.mtime)
    } catch (e) {
      throw localError(e, `setting the mode of ${d.host}`)
    }
  }
  return { entries, skipped }
}
