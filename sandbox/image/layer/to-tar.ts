// EROFS layer → deterministic OCI layer tar. Entries in path order (each
// directory before its entries, entries of a directory sorted bytewise by their
// tar name); overlay whiteouts (char 0/0) become `.wh.NAME` empty files,
// `trusted.overlay.opaque=y` becomes `DIR/.wh..wh..opq`; hard links (same
// inode) point at the first path; xattrs other than overlayfs's go into PAX
// SCHILY.xattr records; uid/gid/mode/mtime kept, uname/gname empty, no
// atime/ctime; a file with holes (a chunked file of the layer) is a GNU sparse
// member, so its holes are not written out as zeros. The same layer gives the
// same bytes.
import fs from 'node:fs'
import type { Writable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { native } from '../../../fs/common/native.js'
import { devNumbers, tarXattrsOf, timesOf } from './fs-ops.js'
import { withErofsMount } from './mount.js'
import { OPAQUE_MARKER, WHITEOUT_PREFIX } from './paths.js'
import { TarWriter, type TarWriteHeader } from './tar-writer.js'
import type { LayerToTarOptions, LayerToTarResult } from './types.js'

const utf8 = new TextDecoder('utf-8', { fatal: true })

function decodeName(b: Buffer, where: string): string {
  try {
    return utf8.decode(b)
  } catch (e) {
    throw new StrataError('IMAGE_BAD_LAYER', `${where}: a name is not valid UTF-8 (${b.toString('hex')})`, { cause: e })
  }
}

interface Child {
  tarName: string
  /** tarName as bytes (the sort key) */
  key: Buffer
  rel: string
  abs: string
  st: fs.BigIntStats | null
}

/**
 * Paths given to the kernel stay under PATH_MAX (4096): a directory whose path
 * is longer than this is opened and its entries are reached as
 * /proc/self/fd/N/NAME, so a layer may hold paths of any length (a tar can).
 */
const REBASE_AT = 3000

const BLOCK = 4096

/**
 * Where a file of the mounted layer has data, as offset, length pairs, when
 * it has holes; null when it has none (a file stored flat, the usual case),
 * or the filesystem cannot say.
 */
function dataMap(fd: number, size: number): number[] | null {
  if (size <= BLOCK) return null
  let extents: number[]
  try {
    extents = native().dataExtents(fd)
  } catch {
    return null
  }
  const map: number[] = []
  let data = 0
  for (let k = 0; k < extents.length; k += 2) {
    const start = extents[k]!
    const end = Math.min(start + extents[k + 1]!, size)
    if (end <= start) continue
    const last = map.length - 2
    if (last >= 0 && start <= map[last]! + map[last + 1]!) {
      const grown = Math.max(map[last]! + map[last + 1]!, end) - map[last]!
      data += grown - map[last + 1]!
      map[last + 1] = grown
    } else {
      map.push(start, end - start)
      data += end - start
    }
  }
  if (data >= size) return null
  // a map that ends in a hole says where the file ends, as GNU tar's do
  if (map.length === 0 || map[map.length - 2]! + map[map.length - 1]! < size) map.push(size, 0)
  return map
}

function lstat(abs: string): fs.BigIntStats {
  return fs.lstatSync(abs, { bigint: true })
}

/**
 * Walks the mounted layer depth first. Metadata comes from the page cache of
 * a read-only mount, so it is read with synchronous calls; so is file data
 * (straight into the writer's batch buffer), while writing the output is
 * asynchronous and waits for it to drain.
 */
class LayerWalker {
  /** inode → first tar path, for hard links. */
  readonly inodes = new Map<bigint, string>()

  constructor(
    readonly w: TarWriter,
    readonly root: string,
  ) {}

  async dir(abs: string, rel: string, st: fs.BigIntStats): Promise<void> {
    let fd = -1
    try {
      let base = abs
      if (abs.length > REBASE_AT) {
        fd = fs.openSync(abs, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW)
        base = `/proc/self/fd/${fd}`
      }
      await this.dirAt(abs, base, rel, st)
    } finally {
      if (fd >= 0) fs.closeSync(fd)
    }
  }

  /** `abs` names the directory, `base` too (shorter, for its entries' paths). */
  async dirAt(abs: string, base: string, rel: string, st: fs.BigIntStats): Promise<void> {
    const { xattrs, opaque } = tarXattrsOf(abs)
    await this.w.entry({
      name: rel === '' ? './' : rel + '/',
      type: 'directory',
      mode: Number(st.mode) & 0o7777,
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: 0,
      mtime: timesOf(st),
      xattrs,
    })
    const children: Child[] = []
    for (const raw of fs.readdirSync(abs, { encoding: 'buffer' })) {
      const name = decodeName(raw, rel || '.')
      const cabs = base + '/' + name
      const crel = rel === '' ? name : `${rel}/${name}`
      if (name.startsWith(WHITEOUT_PREFIX)) throw new StrataError('IMAGE_BAD_LAYER', `${crel}: names starting with ${WHITEOUT_PREFIX} cannot be carried in a layer tar`)
      const cst = lstat(cabs)
      const isWhiteout = cst.isCharacterDevice() && cst.rdev === 0n
      const tarBase = isWhiteout ? WHITEOUT_PREFIX + name : name
      const tarName = rel === '' ? tarBase : `${rel}/${tarBase}`
      children.push({ tarName, key: Buffer.from(tarName), rel: crel, abs: cabs, st: cst })
    }
    if (opaque) {
      const tarName = rel === '' ? OPAQUE_MARKER : `${rel}/${OPAQUE_MARKER}`
      children.push({ tarName, key: Buffer.from(tarName), rel, abs, st: null })
    }
    children.sort((a, b) => Buffer.compare(a.key, b.key))
    for (const c of children) await this.child(c)
  }

  async child(c: Child): Promise<void> {
    const st = c.st
    if (st === null) {
      await this.w.entry({ name: c.tarName, type: 'file', mode: 0, uid: 0, gid: 0, size: 0, mtime: { sec: 0, nsec: 0 } })
      return
    }
    if (st.isDirectory()) return this.dir(c.abs, c.rel, st)
    const base: Omit<TarWriteHeader, 'type'> = {
      name: c.tarName,
      mode: Number(st.mode) & 0o7777,
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: 0,
      mtime: timesOf(st),
    }
    if (st.isCharacterDevice() && st.rdev === 0n) {
      await this.w.entry({ ...base, type: 'file' })
      return
    }
    if (st.isSocket()) return // a tar cannot carry sockets
    if (st.nlink > 1n) {
      const first = this.inodes.get(st.ino)
      if (first !== undefined) {
        await this.w.entry({ ...base, type: 'link', linkname: first })
        return
      }
      this.inodes.set(st.ino, c.tarName)
    }
    const { xattrs } = tarXattrsOf(c.abs)
    if (st.isFile()) {
      // The file must be closed before the layer can be unmounted: always closed here.
      const fd = fs.openSync(c.abs, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW)
      try {
        const h: TarWriteHeader = { ...base, type: 'file', size: Number(st.size), xattrs }
        const read = (buf: Buffer, off: number, len: number, pos: number): number => fs.readSync(fd, buf, off, len, pos)
        const map = dataMap(fd, h.size)
        if (map) await this.w.sparseFileEntry(h, map, read)
        else await this.w.fileEntry(h, read)
      } finally {
        fs.closeSync(fd)
      }
    } else if (st.isSymbolicLink()) {
      const target = decodeName(fs.readlinkSync(c.abs, { encoding: 'buffer' }), c.rel)
      await this.w.entry({ ...base, type: 'symlink', linkname: target, xattrs })
    } else if (st.isCharacterDevice() || st.isBlockDevice()) {
      const { major, minor } = devNumbers(st.rdev)
      await this.w.entry({ ...base, type: st.isCharacterDevice() ? 'character-device' : 'block-device', devmajor: major, devminor: minor, xattrs })
    } else if (st.isFIFO()) {
      await this.w.entry({ ...base, type: 'fifo', xattrs })
    }
  }
}

/**
 * Writes the OCI layer tar of an EROFS layer file to `out` (ended afterwards
 * unless `end: false`). The file is mounted read-only on a private temporary
 * mount point that is always unmounted. diffId is the sha256 of the tar bytes.
 */
export async function layerToTar(erofsFile: string, out: Writable, opts: LayerToTarOptions = {}): Promise<LayerToTarResult> {
  return withErofsMount(erofsFile, opts.tmpDir, async (mp) => {
    const w = new TarWriter(out, opts.signal)
    const walker = new LayerWalker(w, mp)
    try {
      await walker.dir(mp, '', lstat(mp))
      return await w.finish(opts.end ?? true)
    } catch (e) {
      // A half-written tar must not look complete to whoever reads `out`.
      if ((opts.end ?? true) && !out.destroyed) out.destroy(e as Error)
      throw e
    }
  })
}
