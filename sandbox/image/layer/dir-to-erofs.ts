// A local directory → an EROFS layer file, through the builder a layer tar
// goes through (layer-builder.ts): the walk hands it the entries the tar of
// the directory would hold (`tar --sparse --xattrs --numeric-owner -C DIR .`:
// every directory before its entries, names in bytewise order, a hard link
// after its first path), with file data read straight from the files and the
// holes of sparse files found with SEEK_DATA/SEEK_HOLE. So a directory keeps
// what a tarball of it keeps (times before 1970 to the nanosecond, holes,
// xattrs, hard links, devices), which mkfs.erofs 1.5 did not, and gives the
// layer layerToTar turns back into that tar (its diffId).
//
// What a tar cannot carry is not taken: sockets are left out (as GNU tar
// does); a name starting with `.wh.` (a whiteout in a layer) and a name or
// symlink target that is not UTF-8 are refused. overlayfs's opaque xattr on a
// directory becomes its opaque marker, as in layerToTar. A file that changes
// while it is read (size, mtime or ctime), or an entry that vanishes between
// the listing and its read, fails the build rather than store a torn file.
import fs from 'node:fs'
import { StrataError } from '../../../fs/common/errors.js'
import { native } from '../../../fs/common/native.js'
import { devNumbers, tarXattrsOf, timesOf } from './fs-ops.js'
import { buildLayer, type EntryData, type LayerBuildOptions, type LayerBuilder } from './layer-builder.js'
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from './paths.js'
import type { TarEntryHeader } from './tar-reader.js'
import type { SparseMap } from './tar-sparse.js'
import type { UnpackStats } from './types.js'

export interface DirToErofsOptions extends LayerBuildOptions {
  /** stops the walk (CANCELLED, or the signal's StrataError reason) */
  signal?: AbortSignal
  /** file data bytes read so far, as they are read */
  onBytes?: (n: number) => void
  /** directories left out wherever they are in the tree (the import's own work dir, when the tree holds it) */
  skip?: string[]
}

const BLOCK = 4096
/** the most of a file read at once */
const READ_BYTES = 1024 * 1024
/**
 * Paths given to the kernel stay short: a directory whose path is longer
 * than this is opened and its entries are reached as /proc/self/fd/N/NAME, so
 * a tree may hold paths of any length (as a tar may, past PATH_MAX), and no
 * call walks more than a few hundred components (a walk of a tree 3000
 * directories deep spent most of its time in the kernel's lookups of paths
 * 3000 bytes long). One descriptor is held per this many bytes of depth.
 */
const REBASE_AT = 512

const utf8 = new TextDecoder('utf-8', { fatal: true })

function shown(rel: string): string {
  return JSON.stringify(rel === '' ? '.' : rel)
}

function decode(b: Buffer, what: string): string {
  try {
    return utf8.decode(b)
  } catch {
    throw new StrataError('IMAGE_BAD_ARCHIVE', `${what} is not valid UTF-8 (hex ${b.toString('hex')}); a layer (a tar) holds UTF-8 names only`)
  }
}

/** An OS error on the source tree → a catalogue error naming the path. */
function sourceError(e: unknown, abs: string): StrataError {
  if (e instanceof StrataError) return e
  const code = (e as NodeJS.ErrnoException)?.code
  const msg = `${abs}: ${(e as Error)?.message ?? String(e)}`
  if (code === 'ENOENT' || code === 'ENOTDIR') return changed(abs, 'vanished')
  if (code === 'EACCES' || code === 'EPERM') return new StrataError('PERMISSION_DENIED', msg, { cause: e })
  return new StrataError('LOCAL_IO_ERROR', msg, { cause: e })
}

function changed(abs: string, how: string): StrataError {
  return new StrataError('IMAGE_BUILD_FAILED', `${abs} ${how} while it was imported; import the directory again once it is not being changed`)
}

/** Runs a system call on the source tree; `shownAs` names the path in an error. */
function os<T>(shownAs: string, f: () => T): T {
  try {
    return f()
  } catch (e) {
    throw sourceError(e, shownAs)
  }
}

/**
 * Where a file has data, as a sparse map, when it has holes (what reads as
 * zeros is not stored); null when it has none. Only a file that takes fewer
 * blocks than its size can have holes (GNU tar's test), so others cost no
 * system call.
 */
function holesOf(fd: number, st: fs.BigIntStats): SparseMap | null {
  const size = Number(st.size)
  if (size <= BLOCK || st.blocks * 512n >= st.size) return null
  const map = native().dataSegments(fd, size)
  let data = 0
  for (let k = 1; k < map.length; k += 2) data += map[k]!
  return data >= size ? null : map
}

/**
 * A regular file's data for the builder, read on this thread (the page cache
 * answers most reads; the image is written on the thread pool meanwhile).
 * Holes need no zeros made up: the file reads them as zeros, and the builder
 * skips whole chunks of them with skipHole.
 */
class FileData implements EntryData {
  #pos = 0

  constructor(
    readonly fd: number,
    readonly size: number,
    readonly sparseMap: SparseMap | null,
    readonly shownAs: string,
    readonly onBytes?: (n: number) => void,
  ) {}

  buffered(): Buffer | null {
    return null
  }

  async chunk(max = Infinity): Promise<Buffer | null> {
    const n = Math.min(max, this.size - this.#pos, READ_BYTES)
    if (n <= 0) return null
    // a fresh buffer each time: the image writer keeps it until it is written
    const buf = Buffer.allocUnsafe(n)
    let got = 0
    while (got < n) {
      const r = os(this.shownAs, () => fs.readSync(this.fd, buf, got, n - got, this.#pos + got))
      if (r === 0) throw changed(this.shownAs, `shrank (${this.#pos + got} of ${this.size} bytes)`)
      got += r
    }
    this.#pos += n
    this.onBytes?.(n)
    return buf
  }

  skipHole(n: number): void {
    this.#pos += n
  }
}

class DirWalker {
  /** dev:ino → the first path of a file with more than one link */
  readonly inodes = new Map<string, string>()
  /** dev:ino of the directories left out */
  readonly skipped = new Set<string>()

  constructor(
    readonly b: LayerBuilder,
    readonly root: string,
    readonly opts: DirToErofsOptions,
  ) {
    for (const d of opts.skip ?? []) {
      const st = fs.statSync(d, { bigint: true, throwIfNoEntry: false })
      if (st) this.skipped.add(`${st.dev}:${st.ino}`)
    }
  }

  /** The source path of `rel`, for messages (a long one is reached through /proc/self/fd). */
  shown(rel: string): string {
    return rel === '' ? this.root : `${this.root}/${rel}`
  }

  check(): void {
    const s = this.opts.signal
    if (!s?.aborted) return
    const r: unknown = s.reason
    throw r instanceof StrataError ? r : new StrataError('CANCELLED', 'import cancelled', r === undefined ? undefined : { cause: r })
  }

  async entry(h: Partial<TarEntryHeader> & Pick<TarEntryHeader, 'name' | 'type'>, st: fs.BigIntStats | null, data: EntryData | null = null): Promise<void> {
    const header: TarEntryHeader = {
      mode: st ? Number(st.mode) & 0o7777 : 0,
      uid: st ? Number(st.uid) : 0,
      gid: st ? Number(st.gid) : 0,
      size: 0,
      mtime: st ? timesOf(st) : { sec: 0, nsec: 0 },
      linkname: '',
      devmajor: 0,
      devminor: 0,
      xattrs: new Map(),
      ...h,
    }
    // the builder reads data only for regular files
    await this.b.entry(header, data ?? NO_DATA)
    if (this.opts.ready) await this.opts.ready()
  }

  /** `abs`: the directory's path as given; `rel`: its path in the layer. */
  async dir(abs: string, rel: string, st: fs.BigIntStats): Promise<void> {
    this.check()
    let fd = -1
    try {
      let base = abs
      if (abs.length > REBASE_AT) {
        fd = os(this.shown(rel), () => fs.openSync(abs, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW))
        base = `/proc/self/fd/${fd}`
      }
      const { xattrs, opaque } = os(this.shown(rel), () => tarXattrsOf(base))
      await this.entry({ name: rel === '' ? './' : `${rel}/`, type: 'directory', xattrs }, st)
      if (opaque) await this.entry({ name: rel === '' ? OPAQUE_MARKER : `${rel}/${OPAQUE_MARKER}`, type: 'file' }, null)
      const names = os(this.shown(rel), () => fs.readdirSync(base, { encoding: 'buffer' })).sort(Buffer.compare)
      for (const raw of names) {
        const crel = rel === '' ? '' : `${rel}/`
        const name = decode(raw, `a name in ${shown(rel)} of the directory`)
        if (name.startsWith(WHITEOUT_PREFIX)) {
          throw new StrataError('IMAGE_BAD_ARCHIVE', `${JSON.stringify(crel + name)}: a name starting with ${WHITEOUT_PREFIX} is an OCI whiteout in a layer, so no file of that name can be imported (or exported)`)
        }
        await this.child(`${base}/${name}`, crel + name)
      }
    } finally {
      if (fd >= 0) fs.closeSync(fd)
    }
  }

  async child(abs: string, rel: string): Promise<void> {
    this.check()
    const st = os(this.shown(rel), () => fs.lstatSync(abs, { bigint: true }))
    if (st.isDirectory()) return this.skipped.has(`${st.dev}:${st.ino}`) ? undefined : this.dir(abs, rel, st)
    if (st.isSocket()) return // a tar cannot carry a socket
    if (st.nlink > 1n) {
      const key = `${st.dev}:${st.ino}`
      const first = this.inodes.get(key)
      if (first !== undefined) return this.entry({ name: rel, type: 'link', linkname: first }, st)
      this.inodes.set(key, rel)
    }
    if (st.isFile()) return this.file(abs, rel)
    const { xattrs } = os(this.shown(rel), () => tarXattrsOf(abs))
    if (st.isSymbolicLink()) {
      const target = decode(os(this.shown(rel), () => fs.readlinkSync(abs, { encoding: 'buffer' })), `the target of the symlink ${JSON.stringify(rel)}`)
      return this.entry({ name: rel, type: 'symlink', linkname: target, xattrs }, st)
    }
    if (st.isFIFO()) return this.entry({ name: rel, type: 'fifo', xattrs }, st)
    const { major, minor } = devNumbers(st.rdev)
    return this.entry({ name: rel, type: st.isCharacterDevice() ? 'character-device' : 'block-device', devmajor: major, devminor: minor, xattrs }, st)
  }

  /** A regular file, described by the descriptor its data is read from, and unchanged until read. */
  async file(abs: string, rel: string): Promise<void> {
    const shownAs = this.shown(rel)
    const fd = os(shownAs, () => fs.openSync(abs, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW))
    try {
      const st = os(shownAs, () => fs.fstatSync(fd, { bigint: true }))
      if (!st.isFile()) throw changed(shownAs, 'was replaced')
      const size = Number(st.size)
      const { xattrs } = os(shownAs, () => tarXattrsOf(abs))
      const data = new FileData(fd, size, os(shownAs, () => holesOf(fd, st)), shownAs, this.opts.onBytes)
      await this.entry({ name: rel, type: 'file', size, xattrs }, st, data)
      const after = os(shownAs, () => fs.fstatSync(fd, { bigint: true }))
      if (after.size !== st.size || after.mtimeNs !== st.mtimeNs || after.ctimeNs !== st.ctimeNs) throw changed(shownAs, 'changed')
    } finally {
      fs.closeSync(fd)
    }
  }
}

const NO_DATA: EntryData = {
  sparseMap: null,
  buffered: () => null,
  chunk: async () => null,
  skipHole: () => undefined,
}

/**
 * Builds the EROFS layer of the tree at `dir` at `outFile` (written to a
 * temporary sibling, renamed into place when complete): the layer the tar of
 * the tree would give (see the file comment). The same tree gives the same
 * bytes. IMAGE_BAD_ARCHIVE for what a layer cannot hold, IMAGE_BUILD_FAILED
 * when the tree changes under the walk, PERMISSION_DENIED / LOCAL_IO_ERROR
 * when it cannot be read, NO_SPACE when the image cannot be written.
 */
export async function dirToErofs(dir: string, outFile: string, opts: DirToErofsOptions = {}): Promise<{ size: number; stats: UnpackStats }> {
  const st = os(dir, () => fs.lstatSync(dir, { bigint: true }))
  if (!st.isDirectory()) throw new StrataError('IMAGE_BUILD_FAILED', `${dir} is not a directory`)
  return buildLayer(outFile, opts, (b) => new DirWalker(b, dir, opts).dir(dir, '', st))
}
