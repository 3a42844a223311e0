// EROFS layer → deterministic OCI layer tar. Entries in path order (each
// directory before its entries, entries of a directory sorted bytewise by their
// tar name); overlay whiteouts (char 0/0) become `.wh.NAME` empty files,
// `trusted.overlay.opaque=y` becomes `DIR/.wh..wh..opq`; hard links (same
// inode) point at the first path; xattrs other than overlayfs's go into PAX
// SCHILY.xattr records; uid/gid/mode/mtime kept, uname/gname empty, no
// atime/ctime. The same layer gives the same bytes.
import { once } from 'node:events'
import fs from 'node:fs'
import path from 'node:path'
import type { Writable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { native } from '../../../fs/common/native.js'
import { isOverlayXattr, timesOf } from './fs-ops.js'
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

function devNumbers(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)
  return { major: Number(major), minor: Number(minor) }
}

function readXattrs(abs: string): { xattrs: Map<string, Buffer>; opaque: boolean } {
  const n = native()
  const xattrs = new Map<string, Buffer>()
  let opaque = false
  for (const name of n.llistxattr(abs).sort()) {
    if (name === 'trusted.overlay.opaque') {
      opaque = n.lgetxattr(abs, name).toString() === 'y'
      continue
    }
    if (isOverlayXattr(name)) continue
    xattrs.set(name, n.lgetxattr(abs, name))
  }
  return { xattrs, opaque }
}

interface Child {
  tarName: string
  rel: string
  abs: string
  st: fs.BigIntStats | null
}

class LayerWalker {
  /** inode → first tar path, for hard links. */
  readonly inodes = new Map<bigint, string>()

  constructor(
    readonly w: TarWriter,
    readonly root: string,
  ) {}

  async dir(abs: string, rel: string, st: fs.BigIntStats): Promise<void> {
    const { xattrs, opaque } = readXattrs(abs)
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
    for (const raw of await fs.promises.readdir(abs, { encoding: 'buffer' })) {
      const name = decodeName(raw, rel || '.')
      const cabs = path.join(abs, name)
      const crel = rel === '' ? name : `${rel}/${name}`
      if (name.startsWith(WHITEOUT_PREFIX)) throw new StrataError('IMAGE_BAD_LAYER', `${crel}: names starting with ${WHITEOUT_PREFIX} cannot be carried in a layer tar`)
      const cst = await fs.promises.lstat(cabs, { bigint: true })
      const isWhiteout = cst.isCharacterDevice() && cst.rdev === 0n
      const tarBase = isWhiteout ? WHITEOUT_PREFIX + name : name
      children.push({ tarName: rel === '' ? tarBase : `${rel}/${tarBase}`, rel: crel, abs: cabs, st: cst })
    }
    if (opaque) children.push({ tarName: rel === '' ? OPAQUE_MARKER : `${rel}/${OPAQUE_MARKER}`, rel, abs, st: null })
    children.sort((a, b) => Buffer.compare(Buffer.from(a.tarName), Buffer.from(b.tarName)))
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
    const { xattrs } = readXattrs(c.abs)
    if (st.isFile()) {
      const size = Number(st.size)
      const rs = fs.createReadStream(c.abs, { highWaterMark: 1 << 20 })
      try {
        await this.w.entry({ ...base, type: 'file', size, xattrs }, rs as AsyncIterable<Buffer>)
      } finally {
        // The file must be closed before the layer can be unmounted.
        if (!rs.closed) {
          rs.destroy()
          await once(rs, 'close').catch(() => {})
        }
      }
    } else if (st.isSymbolicLink()) {
      const target = decodeName(await fs.promises.readlink(c.abs, { encoding: 'buffer' }), c.rel)
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
    const w = new TarWriter(out)
    const walker = new LayerWalker(w, mp)
    try {
      await walker.dir(mp, '', await fs.promises.lstat(mp, { bigint: true }))
      return await w.finish(opts.end ?? true)
    } catch (e) {
      // A half-written tar must not look complete to whoever reads `out`.
      if ((opts.end ?? true) && !out.destroyed) out.destroy(e as Error)
      throw e
    }
  })
}
