// One way to read the members of an image archive, whether it is a tar file
// (indexed once, members streamed from their offsets) or a directory (an OCI
// layout on disk). Member names are archive-relative; none may climb out.
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { TarIndex, normalizeArchiveName } from './tar-index.js'

export interface ArchiveReader {
  /** what to call the archive in messages */
  readonly label: string
  /** size of a member, or null if there is none */
  size(name: string): Promise<number | null>
  /** a whole member (JSON documents); IMAGE_BLOB_MISSING if absent, IMAGE_BAD_MANIFEST above `max` bytes */
  read(name: string, max: number): Promise<Buffer>
  /** a member's bytes as a stream; IMAGE_BLOB_MISSING if absent */
  open(name: string): Promise<Readable>
}

function missing(label: string, name: string): StrataError {
  return new StrataError('IMAGE_BLOB_MISSING', `${label}: ${name} is not in the archive`, { detail: { member: name } })
}

/** Members of a tar file, through its TarIndex. */
export class TarArchiveReader implements ArchiveReader {
  constructor(
    readonly index: TarIndex,
    readonly label: string,
  ) {}

  async size(name: string): Promise<number | null> {
    return this.index.resolve(name)?.size ?? null
  }

  async read(name: string, max: number): Promise<Buffer> {
    const e = this.index.resolve(name)
    if (!e) throw missing(this.label, name)
    return this.index.read(e, max)
  }

  async open(name: string): Promise<Readable> {
    const e = this.index.resolve(name)
    if (!e) throw missing(this.label, name)
    return this.index.open(e)
  }
}

/** Members of a directory; a member that is (or goes through) a symlink leading outside the directory is refused. */
export class DirArchiveReader implements ArchiveReader {
  #real: string | null = null

  constructor(
    readonly root: string,
    readonly label: string = root,
  ) {}

  async #path(name: string): Promise<string | null> {
    const rel = normalizeArchiveName(name, this.label)
    this.#real ??= await fs.promises.realpath(this.root)
    const p = path.join(this.root, rel)
    let real: string
    try {
      real = await fs.promises.realpath(p)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT' || (e as NodeJS.ErrnoException).code === 'ENOTDIR') return null
      throw e
    }
    if (real !== this.#real && !real.startsWith(this.#real + path.sep)) {
      throw new StrataError('IMAGE_UNSAFE_PATH', `${this.label}: ${rel} leads outside the directory (to ${real})`)
    }
    return real
  }

  async size(name: string): Promise<number | null> {
    const p = await this.#path(name)
    if (!p) return null
    const st = await fs.promises.stat(p)
    return st.isFile() ? st.size : null
  }

  async read(name: string, max: number): Promise<Buffer> {
    const size = await this.size(name)
    if (size === null) throw missing(this.label, name)
    if (size > max) throw new StrataError('IMAGE_BAD_MANIFEST', `${this.label}: ${name} is ${size} bytes, more than the ${max} a document may have`)
    return fs.promises.readFile((await this.#path(name))!)
  }

  async open(name: string): Promise<Readable> {
    const p = await this.#path(name)
    if (!p || !(await fs.promises.stat(p)).isFile()) throw missing(this.label, name)
    return fs.createReadStream(p, { highWaterMark: 1024 * 1024 })
  }
}
