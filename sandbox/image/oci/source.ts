// What a PATH given to `strata image import` is, and how to read it:
//  - a directory with `oci-layout` and `index.json`: an OCI layout (a
//    `docker save` of Docker 25+ unpacked when it also has a docker-save
//    manifest.json, whose RepoTags then name the image too);
//  - a directory or a tar with a top-level manifest.json that makes it a
//    `docker save` (see isDockerSave: a list of {Config, Layers}, or the rest
//    of a docker save's shape, when a broken manifest.json is
//    IMAGE_BAD_MANIFEST): a legacy `docker save`, unpacked or not;
//  - a directory, or a tar, with `oci-layout` (the layout's marker) but no
//    `index.json`, or with an OCI index as `index.json` and `blobs/sha256/`
//    but no `oci-layout`: refused (IMAGE_BAD_ARCHIVE), not taken for a
//    rootfs;
//  - any other directory: a rootfs tree;
//  - a tar file (plain, gzip or zstd) holding `oci-layout` + `index.json`: an
//    OCI archive, or a `docker save` tarball when it also has manifest.json
//    (Docker 25+);
//  - any other tar file: a rootfs tarball;
//  - `-`: standard input, any of the tar forms above; it is read to its end
//    into the work directory first (decompressed on the way), as a docker
//    save can end with its manifest.json.
// A compressed tar is decompressed once into the work directory (tar members
// need random access); a plain one is read in place.
import fs from 'node:fs'
import path from 'node:path'
import { Transform, pipeline as pipelineCb, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { StrataError, fromSystemError } from '../../../fs/common/errors.js'
import { decompressStream, sniffCompression, type Compression } from '../layer/decompress.js'
import { NO_PROGRESS, type ProgressSink } from '../progress.js'
import type { ImageSource } from '../types.js'
import { DirArchiveReader, TarArchiveReader } from './archive.js'
import { legacyRepoTags, readDockerArchive, readOciLayout, type ReadImageOptions } from './layout.js'
import { OCI_LAYOUT_FILE } from './media-types.js'
import { TarIndex } from './tar-index.js'
import { MAX_DOCUMENT_BYTES, type OciImageSource } from './types.js'

export type ImportInput =
  | { kind: 'image'; image: OciImageSource }
  | {
      kind: 'rootfs-tar'
      file: string
      compression: Compression
      ref: string
      /**
       * With `speculate`: the tar's index, still being built on a worker,
       * and what it shows: the image when the tar is an image archive after
       * all, null when it is a rootfs tarball; rejects with what indexing
       * found wrong (IMAGE_BAD_ARCHIVE, IMAGE_UNSAFE_PATH, …).
       */
      archive?: Promise<{ kind: 'image'; image: OciImageSource } | null>
    }
  | { kind: 'rootfs-dir'; dir: string; ref: string }

async function readHead(file: string, n: number): Promise<Buffer> {
  const fh = await fs.promises.open(file, 'r')
  try {
    const buf = Buffer.alloc(n)
    const { bytesRead } = await fh.read(buf, 0, n, 0)
    return buf.subarray(0, bytesRead)
  } finally {
    await fh.close()
  }
}

export interface OpenImportOptions extends ReadImageOptions {
  /**
   * For a tar that does not begin like an image archive: return it as a
   * rootfs tarball at once, its index built on a worker meanwhile (see
   * ImportInput's `archive`), so that an import can start before the
   * ~10^4 headers of a rootfs are read.
   */
  speculate?: boolean
  /** stops the indexing worker, and the read of standard input */
  signal?: AbortSignal
  /** what `-` reads (default process.stdin) */
  stdin?: Readable
  /** where the read of standard input is reported (bytes read) */
  onProgress?: ProgressSink
}

/** The PATH that names standard input (`strata image import -`). */
export const STDIN_INPUT = '-'

/** What standard input is called in messages, and the `source.ref` of an image imported from it. */
const STDIN_LABEL = 'standard input'

/**
 * Works out what `input` is and opens it. `workDir` receives the
 * decompressed copy of a compressed tar, and what `-` (STDIN_INPUT) reads
 * from `opts.stdin` (default process.stdin): the whole stream is spooled
 * there first (decompressed on the way), since what an archive is can be
 * known only from all of it (a `docker save` may put manifest.json last).
 * Throws IMAGE_BAD_ARCHIVE for a file or stream that is not a tar (or is
 * empty), NOT_FOUND for a missing path.
 */
export async function openImportInput(input: string, workDir: string, opts: OpenImportOptions = {}): Promise<ImportInput> {
  // path.resolve('') is the working directory: an unset shell variable must not import it
  if (input === '') throw new StrataError('INVALID_ARGUMENT', 'the path to import is empty')
  if (input === STDIN_INPUT) {
    const file = path.join(workDir, 'stdin.tar')
    const compression = await spoolStream(opts.stdin ?? process.stdin, file, opts)
    return openTar({ file, label: STDIN_LABEL, ref: STDIN_INPUT, decompressed: compression }, workDir, opts)
  }
  const abs = path.resolve(input)
  let st: fs.Stats
  try {
    st = await fs.promises.stat(abs)
  } catch (e) {
    throw new StrataError('NOT_FOUND', `cannot import ${input}: ${(e as Error).message}`, { cause: e })
  }
  if (st.isDirectory()) return openDirectory(input, abs, opts)
  if (!st.isFile()) throw new StrataError('IMAGE_BAD_ARCHIVE', `${input} is neither a file nor a directory`)
  return openTar({ file: abs, label: input, ref: abs }, workDir, opts)
}

/**
 * A directory: an OCI layout, a `docker save` unpacked (by its manifest.json,
 * as for a tar), a layout that cannot be read, or a rootfs tree.
 */
async function openDirectory(input: string, abs: string, opts: OpenImportOptions): Promise<ImportInput> {
  const reader = new DirArchiveReader(abs)
  const marker = fs.existsSync(path.join(abs, OCI_LAYOUT_FILE))
  const hasLayout = marker && fs.existsSync(path.join(abs, 'index.json'))
  const hasLegacy = (await dirMemberSize(reader, 'manifest.json')) !== null && (await isDockerSaveDir(abs, reader))
  if (hasLayout) {
    await checkLayoutVersion(reader)
    // a Docker 25+ `docker save` unpacked: its layout, named by manifest.json's RepoTags too
    const type: ImageSource['type'] = hasLegacy ? 'docker-archive' : 'oci-layout'
    const repoTags = hasLegacy ? await legacyRepoTags(reader) : []
    return { kind: 'image', image: await readOciLayout(reader, { type, ref: abs }, opts, repoTags) }
  }
  if (hasLegacy) return { kind: 'image', image: await readDockerArchive(reader, { type: 'docker-archive', ref: abs }, opts) }
  if (marker) throw incompleteLayout(input, 'directory', fs.existsSync(path.join(abs, 'blobs')))
  if (fs.statSync(path.join(abs, 'blobs', 'sha256'), { throwIfNoEntry: false })?.isDirectory()) {
    const idx = fs.statSync(path.join(abs, 'index.json'), { throwIfNoEntry: false })
    if (idx?.isFile() && idx.size <= MAX_DOCUMENT_BYTES && isOciIndex(await fs.promises.readFile(path.join(abs, 'index.json')))) throw unmarkedLayout(input, 'directory')
  }
  if (await isDirTransportCopy(reader)) throw dirTransportCopy(input)
  // a symlink to a directory is built as the directory it names (mkfs.erofs refuses the link)
  return { kind: 'rootfs-dir', dir: await fs.promises.realpath(abs), ref: abs }
}

/** The size of a regular file in a directory (through links inside it), or null: none, not a file, or a link leading out. */
async function dirMemberSize(reader: DirArchiveReader, name: string): Promise<number | null> {
  try {
    return await reader.size(name)
  } catch (e) {
    if (e instanceof StrataError && e.code === 'IMAGE_UNSAFE_PATH') return null
    throw e
  }
}

/** A tar to open: the file, what to call it and the `source.ref` to record; `decompressed`: the file is already a plain tar, spooled from a stream (standard input) that had this compression. */
interface TarInput {
  file: string
  label: string
  ref: string
  decompressed?: Compression
}

/** A tar file (plain, gzip or zstd): an image archive or a rootfs tarball. */
async function openTar(t: TarInput, workDir: string, opts: OpenImportOptions): Promise<ImportInput> {
  const { label: input, ref: abs } = t
  const head = await readHead(t.file, 512)
  // null: not compressed and no ustar magic; TarIndex decides (an old v7 tar has no magic)
  const sniffed: Compression = t.decompressed ? 'none' : (sniffCompression(head) ?? 'none')
  // a compressed tar of a tiny tree can be far smaller than one tar block
  if (sniffed === 'none' && head.length < 512) throw new StrataError('IMAGE_BAD_ARCHIVE', `${input} is not a tar archive (${head.length} bytes)`)
  const compression: Compression = t.decompressed ?? sniffed
  let tarFile = t.file
  if (sniffed !== 'none') {
    tarFile = path.join(workDir, 'input.tar')
    try {
      await pipeline(await decompressStream(fs.createReadStream(t.file, { highWaterMark: 1024 * 1024 })), fs.createWriteStream(tarFile))
    } catch (e) {
      if (e instanceof StrataError && e.code !== 'IMAGE_BAD_ARCHIVE') throw e
      // the decompressor's message ("unexpected end of file") names no file
      throw new StrataError('IMAGE_BAD_ARCHIVE', `${input}: ${e instanceof StrataError ? e.reason : (e as Error).message}`, { cause: e })
    }
  }
  const shown: ShownTar = { input, tarFile, compression, spooled: t.decompressed !== undefined }
  const classify = (index: TarIndex) => classifyTar(index, input, abs, tarFile, compression, opts)
  if (opts.speculate && !startsLikeImageArchive(sniffed === 'none' ? head : await readHead(tarFile, 512))) {
    const archive = TarIndex.scan(tarFile, opts.signal).then(
      async (index) => {
        const inp = await classify(index)
        return inp.kind === 'image' ? inp : null
      },
      (e: unknown) => {
        throw nameUserFile(e, shown)
      },
    )
    // not awaited until the import needs it; a failure is reported there
    archive.catch(() => undefined)
    return { kind: 'rootfs-tar', file: tarFile, compression, ref: abs, archive }
  }
  let index: TarIndex
  try {
    index = await TarIndex.open(tarFile)
  } catch (e) {
    throw nameUserFile(e, shown)
  }
  return classify(index)
}

/**
 * Reads all of `stream` into `file` (standard input for `import -`),
 * decompressing gzip or zstd on the way; the bytes read are reported as a
 * progress task. Returns the stream's compression. IMAGE_BAD_ARCHIVE for an
 * empty stream or a broken compressed one; `opts.signal` stops the read (the
 * stream is destroyed) with its reason.
 */
async function spoolStream(stream: Readable, file: string, opts: OpenImportOptions): Promise<Compression> {
  const signal = opts.signal
  const task = (opts.onProgress ?? NO_PROGRESS).start(`read ${STDIN_LABEL}`)
  let head = Buffer.alloc(0)
  let bytes = 0
  const counted = new Transform({
    transform(c: Buffer, _enc, cb) {
      if (head.length < 512) head = Buffer.concat([head, c.subarray(0, 512 - head.length)])
      bytes += c.length
      task.tick(c.length)
      cb(null, c)
    },
  })
  // a producer that sends nothing must not hold up a Ctrl-C
  const stop = (): void => {
    stream.destroy()
  }
  signal?.addEventListener('abort', stop, { once: true })
  try {
    if (signal?.aborted) stop()
    const plain = await decompressStream(pipelineCb(stream, counted, () => undefined) as unknown as Readable, 'application/x-tar')
    await pipeline(plain, fs.createWriteStream(file))
  } catch (e) {
    // the rest of the stream is not wanted (a producer still writing gets EPIPE)
    stream.destroy()
    if (signal?.aborted) {
      const r: unknown = signal.reason
      throw r instanceof StrataError ? r : new StrataError('CANCELLED', 'import cancelled', r === undefined ? undefined : { cause: r })
    }
    if (e instanceof StrataError) {
      // the decompressor's message ("gzip: unexpected end of file") names no input
      throw new StrataError(e.code, `${STDIN_LABEL}: ${e.reason}`, { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
    }
    const sys = fromSystemError(e)
    throw sys ? new StrataError(sys.code, `${STDIN_LABEL}: ${sys.reason}`, { cause: e }) : new StrataError('IO_ERROR', `reading ${STDIN_LABEL}: ${(e as Error)?.message ?? String(e)}`, { cause: e })
  } finally {
    signal?.removeEventListener('abort', stop)
    task.done()
  }
  if (bytes === 0) {
    throw new StrataError('IMAGE_BAD_ARCHIVE', `${STDIN_LABEL} is empty: pipe an image archive or a rootfs tar into \`strata image import -\``, { detail: { empty: true } })
  }
  return sniffCompression(head) ?? 'none'
}

/** How a tar's failures are told: the user's file (or standard input), not a decompressed or spooled copy. */
interface ShownTar {
  input: string
  tarFile: string
  compression: Compression
  spooled: boolean
}

/** A failure to index the decompressed (or spooled) copy of the input, told in terms of the user's file or stream. */
function nameUserFile(e: unknown, s: ShownTar): unknown {
  if (!(e instanceof StrataError)) return e
  const keep = { cause: e, ...(e.detail ? { detail: e.detail } : {}) }
  if (s.spooled) {
    // TarIndex's messages begin with the file's name: the spool file's would mean nothing to the user
    const reason = e.reason.split(`${s.tarFile}: `).join('').split(s.tarFile).join(s.input)
    return new StrataError(e.code, `${s.input}${s.compression === 'none' ? '' : ` (${s.compression})`}: ${reason}`, keep)
  }
  if (s.tarFile === path.resolve(s.input)) return e
  return new StrataError(e.code, `${s.input} (${s.compression}): ${e.reason.split(s.tarFile).join('the decompressed tar')}`, keep)
}

async function classifyTar(index: TarIndex, input: string, abs: string, tarFile: string, compression: Compression, opts: ReadImageOptions): Promise<ImportInput> {
  const reader = new TarArchiveReader(index, input)
  const hasLayout = index.has(OCI_LAYOUT_FILE) && index.has('index.json')
  const hasLegacy = index.has('manifest.json') && (await isDockerSave(index))
  if (hasLayout) {
    await checkLayoutVersion(reader)
    const type: ImageSource['type'] = hasLegacy ? 'docker-archive' : 'oci-archive'
    const repoTags = hasLegacy ? await legacyRepoTags(reader) : []
    return { kind: 'image', image: await readOciLayout(reader, { type, ref: abs }, opts, repoTags) }
  }
  if (hasLegacy) return { kind: 'image', image: await readDockerArchive(reader, { type: 'docker-archive', ref: abs }, opts) }
  if (index.has(OCI_LAYOUT_FILE)) throw incompleteLayout(input, 'tar', [...index.entries.keys()].some((n) => n === 'blobs' || n.startsWith('blobs/')))
  const idx = index.resolve('index.json', false)
  if (idx && idx.size <= MAX_DOCUMENT_BYTES && [...index.entries.keys()].some((n) => n.startsWith('blobs/sha256/')) && isOciIndex(await index.read(idx, MAX_DOCUMENT_BYTES))) {
    throw unmarkedLayout(input, 'tar')
  }
  return { kind: 'rootfs-tar', file: tarFile, compression, ref: abs }
}

/**
 * An OCI layout (directory or archive) without index.json, which names its
 * images: it cannot be read, and importing it as a rootfs would make an
 * image of the layout's files.
 */
function incompleteLayout(input: string, what: 'directory' | 'tar', blobs: boolean): StrataError {
  return new StrataError(
    'IMAGE_BAD_ARCHIVE',
    `${input} has ${OCI_LAYOUT_FILE}${blobs ? ' and blobs/' : ''} but no index.json: an OCI layout ${what} needs index.json to name its images`,
    { detail: { missing: 'index.json' } },
  )
}

/** What containers/image writes first in a `dir:` copy (`skopeo copy … dir:D`, `podman save --format docker-dir|oci-dir`). */
const DIR_TRANSPORT_VERSION = 'Directory Transport Version:'

/**
 * Whether a directory is a containers/image `dir:` copy: its `version` file
 * says so and `manifest.json` beside it is the image's manifest. Such a copy
 * (blobs named by bare hex, no index) is no layout import reads, and built as
 * a rootfs it would give an image whose tree is those blob files.
 */
async function isDirTransportCopy(reader: DirArchiveReader): Promise<boolean> {
  const size = await dirMemberSize(reader, 'version')
  if (size === null || size > 256 || (await dirMemberSize(reader, 'manifest.json')) === null) return false
  return (await reader.read('version', 256)).toString('utf8').startsWith(DIR_TRANSPORT_VERSION)
}

function dirTransportCopy(input: string): StrataError {
  return new StrataError(
    'IMAGE_BAD_ARCHIVE',
    `${input} is a containers/image dir: copy (skopeo copy … dir:, podman save --format docker-dir or oci-dir), which import does not read: copy it to an OCI layout or archive instead (skopeo copy dir:${input} oci:LAYOUT:NAME:TAG, or podman save --format oci-archive)`,
  )
}

/** Whether `bytes` are an OCI image index (schemaVersion 2 with a manifests list), as an OCI layout's index.json is. */
function isOciIndex(bytes: Buffer): boolean {
  try {
    const v = JSON.parse(bytes.toString('utf8')) as { schemaVersion?: unknown; manifests?: unknown } | null
    return typeof v === 'object' && v !== null && v.schemaVersion === 2 && Array.isArray(v.manifests)
  } catch {
    return false
  }
}

/** An OCI layout (index.json, blobs/sha256/) without the oci-layout file that says which layout version it is. */
function unmarkedLayout(input: string, what: 'directory' | 'tar'): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', `${input} has index.json and blobs/sha256/ but no ${OCI_LAYOUT_FILE}: an OCI layout ${what} needs ${OCI_LAYOUT_FILE} (its layout version)`, {
    detail: { missing: OCI_LAYOUT_FILE },
  })
}

/**
 * Whether a tar with a top-level manifest.json is a `docker save` archive and
 * not a rootfs that ships a file of that name (a web app's or an extension's):
 * its manifest.json is a list of {Config, Layers}, or the tar has the rest of
 * a docker save's shape (repositories, <64 hex>/layer.tar, blobs/sha256/…), in
 * which case a broken manifest.json is reported rather than imported as a tree.
 */
async function isDockerSave(index: TarIndex): Promise<boolean> {
  const e = index.resolve('manifest.json', false)
  if (e && e.size <= MAX_DOCUMENT_BYTES && isLegacyManifest(await index.read(e, MAX_DOCUMENT_BYTES))) return true
  if (index.has('repositories')) return true
  for (const name of index.entries.keys()) if (/^[0-9a-f]{64}\/layer\.tar$/.test(name) || name.startsWith('blobs/sha256/')) return true
  return false
}

/**
 * The same for a directory with a top-level manifest.json (a `docker save`
 * unpacked): the same manifest, or the same rest of the shape (repositories,
 * a <64 hex>/layer.tar, a file in blobs/sha256/).
 */
async function isDockerSaveDir(abs: string, reader: DirArchiveReader): Promise<boolean> {
  const size = await dirMemberSize(reader, 'manifest.json')
  if (size !== null && size <= MAX_DOCUMENT_BYTES && isLegacyManifest(await reader.read('manifest.json', MAX_DOCUMENT_BYTES))) return true
  if ((await dirMemberSize(reader, 'repositories')) !== null) return true
  const top = await fs.promises.readdir(abs)
  for (const name of top) if (/^[0-9a-f]{64}$/.test(name) && (await dirMemberSize(reader, `${name}/layer.tar`)) !== null) return true
  const blobs = await fs.promises.readdir(path.join(abs, 'blobs', 'sha256')).catch(() => [])
  return blobs.length > 0
}

/** Whether `bytes` are a docker-save manifest.json: a non-empty JSON array of {Config: string, Layers: [...]}. */
function isLegacyManifest(bytes: Buffer): boolean {
  try {
    const v = JSON.parse(bytes.toString('utf8')) as unknown
    const entry = (x: unknown) => typeof x === 'object' && x !== null && typeof (x as { Config?: unknown }).Config === 'string' && Array.isArray((x as { Layers?: unknown }).Layers)
    return Array.isArray(v) && v.length > 0 && v.every(entry)
  } catch {
    // not JSON: decided by the rest of the archive
    return false
  }
}

/**
 * Whether a tar's first header names what image archives begin with
 * (`docker save`, skopeo, podman, umoci: blobs/, oci-layout, index.json,
 * manifest.json, repositories, a 64-hex layer directory or file). Only a
 * hint for `speculate`: the full index decides either way.
 */
function startsLikeImageArchive(head: Buffer): boolean {
  if (head.length < 512) return true
  const cstr = (b: Buffer) => {
    const z = b.indexOf(0)
    return b.subarray(0, z < 0 ? b.length : z).toString('utf8')
  }
  let name = cstr(head.subarray(0, 100))
  if (head.subarray(257, 263).toString('latin1') === 'ustar\0') {
    const prefix = cstr(head.subarray(345, 500))
    if (prefix) name = `${prefix}/${name}`
  }
  const first = name.split('/').filter((c) => c !== '' && c !== '.')[0] ?? ''
  // PAX and GNU long-name records hide the first real name (GNU tar --xattrs begins with one): no hint
  const typeflag = String.fromCharCode(head[156]!)
  if ('xgLK'.includes(typeflag)) return false
  return first === '' ? false : ['blobs', OCI_LAYOUT_FILE, 'index.json', 'manifest.json', 'repositories'].includes(first) || /^[0-9a-f]{64}(\.json|\.tar)?$/.test(first)
}

async function checkLayoutVersion(reader: DirArchiveReader | TarArchiveReader): Promise<void> {
  let v: unknown
  try {
    v = JSON.parse((await reader.read(OCI_LAYOUT_FILE, 4096)).toString('utf8'))
  } catch (e) {
    throw new StrataError('IMAGE_BAD_MANIFEST', `${reader.label}: oci-layout is not JSON`, { cause: e })
  }
  const ver = (v as { imageLayoutVersion?: unknown } | null)?.imageLayoutVersion
  if (typeof ver !== 'string' || !/^1\./.test(ver)) throw new StrataError('IMAGE_BAD_MANIFEST', `${reader.label}: unsupported imageLayoutVersion ${JSON.stringify(ver)}`)
}
