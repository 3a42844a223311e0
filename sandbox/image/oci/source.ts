// What a PATH given to `strata image import` is, and how to read it:
//  - a directory with `oci-layout` and `index.json`: an OCI layout;
//  - any other directory: a rootfs tree;
//  - a tar file (plain, gzip or zstd) holding `oci-layout` + `index.json`: an
//    OCI archive, or a `docker save` tarball when it also has manifest.json
//    (Docker 25+); with only manifest.json: a legacy `docker save` tarball;
//  - any other tar file: a rootfs tarball.
// A compressed tar is decompressed once into the work directory (tar members
// need random access); a plain one is read in place.
import fs from 'node:fs'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import { StrataError } from '../../../fs/common/errors.js'
import { decompressStream, sniffCompression, type Compression } from '../layer/decompress.js'
import type { ImageSource } from '../types.js'
import { DirArchiveReader, TarArchiveReader } from './archive.js'
import { legacyRepoTags, readDockerArchive, readOciLayout, type ReadImageOptions } from './layout.js'
import { OCI_LAYOUT_FILE } from './media-types.js'
import { TarIndex } from './tar-index.js'
import type { OciImageSource } from './types.js'

export type ImportInput =
  | { kind: 'image'; image: OciImageSource }
  | { kind: 'rootfs-tar'; file: string; compression: Compression; ref: string }
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

/**
 * Works out what `input` is and opens it. `workDir` receives the
 * decompressed copy of a compressed tar. Throws IMAGE_BAD_ARCHIVE for a file
 * that is not a tar, NOT_FOUND for a missing path.
 */
export async function openImportInput(input: string, workDir: string, opts: ReadImageOptions = {}): Promise<ImportInput> {
  const abs = path.resolve(input)
  let st: fs.Stats
  try {
    st = await fs.promises.stat(abs)
  } catch (e) {
    throw new StrataError('NOT_FOUND', `cannot import ${input}: ${(e as Error).message}`, { cause: e })
  }
  if (st.isDirectory()) {
    const hasLayout = fs.existsSync(path.join(abs, OCI_LAYOUT_FILE)) && fs.existsSync(path.join(abs, 'index.json'))
    if (!hasLayout) return { kind: 'rootfs-dir', dir: abs, ref: abs }
    const reader = new DirArchiveReader(abs)
    await checkLayoutVersion(reader)
    return { kind: 'image', image: await readOciLayout(reader, { type: 'oci-layout', ref: abs }, opts) }
  }
  if (!st.isFile()) throw new StrataError('IMAGE_BAD_ARCHIVE', `${input} is neither a file nor a directory`)
  const head = await readHead(abs, 512)
  // null: not compressed and no ustar magic; TarIndex decides (an old v7 tar has no magic)
  const compression: Compression = sniffCompression(head) ?? 'none'
  // a compressed tar of a tiny tree can be far smaller than one tar block
  if (compression === 'none' && head.length < 512) throw new StrataError('IMAGE_BAD_ARCHIVE', `${input} is not a tar archive (${head.length} bytes)`)
  let tarFile = abs
  if (compression !== 'none') {
    tarFile = path.join(workDir, 'input.tar')
    try {
      await pipeline(await decompressStream(fs.createReadStream(abs, { highWaterMark: 1024 * 1024 })), fs.createWriteStream(tarFile))
    } catch (e) {
      if (e instanceof StrataError && e.code !== 'IMAGE_BAD_ARCHIVE') throw e
      // the decompressor's message ("unexpected end of file") names no file
      throw new StrataError('IMAGE_BAD_ARCHIVE', `${input}: ${e instanceof StrataError ? e.reason : (e as Error).message}`, { cause: e })
    }
  }
  let index: TarIndex
  try {
    index = await TarIndex.open(tarFile)
  } catch (e) {
    // name the user's file, not the decompressed copy in the work dir
    if (tarFile === abs || !(e instanceof StrataError)) throw e
    throw new StrataError(e.code, `${input} (${compression}): ${e.reason.split(tarFile).join('the decompressed tar')}`, { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
  }
  const reader = new TarArchiveReader(index, input)
  const hasLayout = index.has(OCI_LAYOUT_FILE) && index.has('index.json')
  const hasLegacy = index.has('manifest.json')
  if (hasLayout) {
    await checkLayoutVersion(reader)
    const type: ImageSource['type'] = hasLegacy ? 'docker-archive' : 'oci-archive'
    const repoTags = hasLegacy ? await legacyRepoTags(reader) : []
    return { kind: 'image', image: await readOciLayout(reader, { type, ref: abs }, opts, repoTags) }
  }
  if (hasLegacy) return { kind: 'image', image: await readDockerArchive(reader, { type: 'docker-archive', ref: abs }, opts) }
  return { kind: 'rootfs-tar', file: tarFile, compression, ref: abs }
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
