// Packing a local directory into a tar for files.uploadTar (`strata sandbox
// cp DIR ID:/path`). Written here rather than by GNU tar so that what cannot
// be read is handled the way a download from a sandbox handles it: the entry
// is left out (a directory that cannot be opened is sent empty), a warning
// with the errno's catalogue code names it, and the rest is copied; a tar
// child could only fail the whole copy with its stderr as the message.
//   - files are sent as large as they are when they are opened, so a file
//     that keeps growing cannot make the copy endless; bytes that fail to read
//     or that a shrinking file no longer has are sent as zeros (named);
//   - hard links within the directory stay hard links, symlinks are sent as
//     symlinks (not followed), fifos and device nodes as what they are (the
//     sandbox decides whether it may create them), sockets are skipped (a tar
//     cannot carry them);
//   - the directory itself must be readable: if it is not, the copy fails.
import fs from 'node:fs'
import fsp, { type FileHandle } from 'node:fs/promises'
import type { Readable, Writable } from 'node:stream'
import { StrataError, fromSystemError, systemErrorWords } from '../../fs/common/errors.js'
import { TarWriter, type TarWriteHeader } from '../image/layer/tar-writer.js'

export interface PackOptions {
  /** An entry left out or zero-filled: code of its errno, detail.path (the local path) and detail.errno. */
  onWarning?: (w: StrataError) => void
  /** An entry a tar cannot carry (a socket, a name that is not UTF-8): its local path and why. */
  onSkip?: (path: string, why: string) => void
}

export interface PackResult {
  /** entries written */
  entries: number
  /** entries left out or zero-filled (onWarning) */
  warnings: number
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

function devNumbers(rdev: bigint): { major: number; minor: number } {
  const major = ((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)
  const minor = (rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)
  return { major: Number(major), minor: Number(minor) }
}

class Packer {
  readonly inodes = new Map<string, string>()
  entries = 0
  warnings = 0

  constructor(
    readonly w: TarWriter,
    readonly o: PackOptions,
  ) {}

  warn(abs: string, what: string, e: unknown, consequence: string): void {
    this.warnings++
    const errno = (e as NodeJS.ErrnoException).code ?? 'EIO'
    // the catalogue's code for a command's local file: PERMISSION_DENIED, NOT_FOUND, … else LOCAL_IO_ERROR
    const sys = fromSystemError(e)?.code
    const code = sys === undefined || sys === 'IO_ERROR' ? 'LOCAL_IO_ERROR' : sys
    this.o.onWarning?.(new StrataError(code, `${abs}: ${what}: ${systemErrorWords(e)}; ${consequence}`, { cause: e, detail: { path: abs, errno } }))
  }

  base(name: string, st: fs.BigIntStats): Omit<TarWriteHeader, 'type'> {
    return {
      name,
      mode: Number(st.mode) & 0o7777,
      uid: Number(st.uid),
      gid: Number(st.gid),
      size: 0,
      mtime: { sec: Number(st.mtimeNs / 1_000_000_000n), nsec: Number(st.mtimeNs % 1_000_000_000n) },
    }
  }

  async dir(abs: string, rel: string, st: fs.BigIntStats, names: Buffer[] | null): Promise<void> {
    await this.w.entry({ ...this.base(rel === '' ? './' : `./${rel}/`, st), type: 'directory' })
    this.entries++
    if (names === null) {
      try {
        names = fs.readdirSync(abs, { encoding: 'buffer' })
      } catch (e) {
        // as tar does: the directory is archived, empty
        this.warn(abs, 'cannot open the directory', e, 'its contents are skipped')
        return
      }
    }
    names.sort(Buffer.compare)
    for (const raw of names) {
      let name: string
      try {
        name = utf8.decode(raw)
      } catch {
        this.o.onSkip?.(`${abs}/${raw.toString('latin1')}`, 'its name is not valid UTF-8')
        continue
      }
      await this.child(`${abs}/${name}`, rel === '' ? name : `${rel}/${name}`)
    }
  }

  async child(abs: string, rel: string): Promise<void> {
    let st: fs.BigIntStats
    try {
      st = fs.lstatSync(abs, { bigint: true })
    } catch (e) {
      this.warn(abs, 'cannot stat', e, 'skipped')
      return
    }
    if (st.isDirectory()) return this.dir(abs, rel, st, null)
    if (st.isSocket()) {
      this.o.onSkip?.(abs, 'a socket cannot be copied')
      return
    }
    const base = this.base(`./${rel}`, st)
    const key = `${st.dev}:${st.ino}`
    if (st.nlink > 1n && !st.isSymbolicLink()) {
      const first = this.inodes.get(key)
      if (first !== undefined) {
        await this.w.entry({ ...base, type: 'link', linkname: first })
        this.entries++
        return
      }
    }
    if (st.isFile()) {
      if (!(await this.file(abs, base, st))) return
    } else if (st.isSymbolicLink()) {
      let target: string
      try {
        target = fs.readlinkSync(abs)
      } catch (e) {
        this.warn(abs, 'cannot read the link', e, 'skipped')
        return
      }
      await this.w.entry({ ...base, type: 'symlink', linkname: target })
    } else if (st.isCharacterDevice() || st.isBlockDevice()) {
      const { major, minor } = devNumbers(st.rdev)
      await this.w.entry({ ...base, type: st.isCharacterDevice() ? 'character-device' : 'block-device', devmajor: major, devminor: minor })
    } else if (st.isFIFO()) {
      await this.w.entry({ ...base, type: 'fifo' })
    } else {
      this.o.onSkip?.(abs, 'not a file, directory, symlink, device or fifo')
      return
    }
    this.entries++
    if (st.nlink > 1n && !st.isSymbolicLink()) this.inodes.set(key, base.name)
  }

  /** A regular file, as large as it is once opened; false when it could not be opened (left out). */
  async file(abs: string, base: Omit<TarWriteHeader, 'type'>, st: fs.BigIntStats): Promise<boolean> {
    let fd: number
    try {
      // O_NONBLOCK: a file replaced by a fifo since the lstat cannot block the copy
      fd = fs.openSync(abs, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
    } catch (e) {
      this.warn(abs, 'cannot open', e, 'skipped')
      return false
    }
    try {
      const now = fs.fstatSync(fd, { bigint: true })
      if (!now.isFile() || now.ino !== st.ino) {
        this.o.onSkip?.(abs, 'it was replaced while it was copied')
        return false
      }
      let failed = false
      await this.w.fileEntry({ ...base, type: 'file', size: Number(now.size) }, (buf, off, len, pos) => {
        if (!failed) {
          try {
            const n = fs.readSync(fd, buf, off, len, pos)
            if (n > 0) return n
            this.warnings++
            this.o.onWarning?.(new StrataError('LOCAL_IO_ERROR', `${abs}: it shrank while it was copied; the rest is zeros`, { detail: { path: abs } }))
          } catch (e) {
            this.warn(abs, `cannot read at byte ${pos}`, e, 'the rest is zeros')
          }
          failed = true
        }
        buf.fill(0, off, off + len)
        return len
      })
      return true
    } finally {
      fs.closeSync(fd)
    }
  }
}

/**
 * Writes a tar of the contents of the local directory `root` (names `./…`)
 * to `out` and ends it. A root that cannot be read throws at once (a
 * catalogue error naming it), before anything is written, so a caller can
 * start the transfer only after this returned; an error of `out` rejects.
 */
export function packDirectory(root: string, out: Writable, o: PackOptions = {}): Promise<PackResult> {
  let st: fs.BigIntStats
  let names: Buffer[]
  try {
    st = fs.statSync(root, { bigint: true })
    names = fs.readdirSync(root, { encoding: 'buffer' })
  } catch (e) {
    const sys = fromSystemError(e)
    throw sys ? new StrataError(sys.code, `cannot read ${root}: ${systemErrorWords(e)}`, { cause: e }) : e
  }
  const w = new TarWriter(out)
  const p = new Packer(w, o)
  return (async () => {
    await p.dir(root, '', st, names)
    await w.finish(true)
    return { entries: p.entries, warnings: p.warnings }
  })()
}

/** What is read of a file at least, whatever its size at stat (a /proc file says 0): as the agent's first read. */
export const FIRST_READ = 64 * 1024

/**
 * Opens a local file for an upload, as large as it is now (at least its
 * first 64 KiB, so a pseudo file of stat size 0 comes with what it holds):
 * a file that keeps growing (a log) cannot make the copy endless. A file
 * that cannot be opened throws a catalogue error naming it before anything
 * is sent. close() must be called once the stream is consumed or abandoned.
 */
export async function openLocalFile(p: string): Promise<{ stream: Readable; size: number; close: () => Promise<void> }> {
  let fh: FileHandle
  let size: number
  try {
    fh = await fsp.open(p, 'r')
  } catch (e) {
    const sys = fromSystemError(e)
    throw sys ? new StrataError(sys.code, `cannot read ${p}: ${systemErrorWords(e)}`, { cause: e }) : e
  }
  try {
    size = (await fh.stat()).size
  } catch (e) {
    await fh.close()
    throw e
  }
  const stream = fh.createReadStream({ autoClose: false, start: 0, end: Math.max(size, FIRST_READ) - 1 })
  return { stream, size, close: () => fh.close() }
}
