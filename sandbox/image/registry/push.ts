// `strata image push NAME docker://…`: every EROFS layer becomes an OCI
// layer tar (layerToTar) compressed with gzip at a fixed level — Node's zlib
// writes no name and mtime 0 in the header, so the same layer gives the same
// bytes and the same digest on every push — then each blob is HEADed and
// uploaded only when missing (POST, chunked PATCH, PUT ?digest=), then the
// OCI image config, and the OCI image manifest last.
//
// Building a layer's tar.gz costs a copy of the EROFS blob out of the DFS, a
// mount, a walk of the tree and gzip over all of its bytes. A small local
// cache (layer digest → diffId, gzip digest, size) lets a push whose blobs
// the registry already has skip that work entirely; a cache entry is only a
// hint: a blob that must be uploaded is always rebuilt and its digest is
// recomputed.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import zlib from 'node:zlib'
import { StrataError } from '../../../fs/common/errors.js'
import { makeDirs } from '../../../fs/common/local-dirs.js'
import { layerToTar } from '../layer/index.js'
import { OCI_CONFIG, OCI_LAYER_GZIP, OCI_MANIFEST } from '../oci/media-types.js'
import { parsePlatform, type Platform } from '../oci/platform.js'
import type { ImageStore } from '../store.js'
import { type ImageManifest, type LayerRef } from '../types.js'
import { RegistryClient } from './client.js'
import { clientOptions, progressOf, shortDigest, type RegistryOptions } from './options.js'
import { formatRegistryUrl, parseRegistryUrl } from './reference.js'

/**
 * Fixed so that pushing the same layer twice gives the same digest. Level 1:
 * on a tar of /usr/lib (690 MiB, 2 busy cores) Node's zlib did 67 MiB/s at
 * level 1, 26 at 3 and 15 at 6, for 37 %, 36 % and 34 % of the input — gzip
 * is the bottleneck of a push, the extra ~9 % of bytes rarely is.
 */
export const GZIP_LEVEL = 1

export interface PushOptions extends RegistryOptions {
  /** directory of the layer → tar.gz digest cache; false: none (default ~/.cache/strata/registry-layers) */
  layerCache?: string | false
  /** local directory for layer copies and tar.gz files (default os.tmpdir()) */
  workDir?: string
}

export interface PushResult {
  /** digest of the OCI image manifest pushed */
  digest: string
  pushedBlobs: number
  skippedBlobs: number
  /** blob bytes uploaded */
  bytes: number
  ref: string
  url: string
  tag?: string
  blobsPushed: number
  blobsSkipped: number
  bytesSent: number
}

interface OciLayer {
  diffId: string
  digest: string
  size: number
}

/** layer digest → its OCI tar.gz, valid for one gzip level and zlib version. */
class LayerCache {
  constructor(readonly dir: string) {}

  #file(layerDigest: string): string {
    return path.join(this.dir, `${layerDigest.slice(7)}.json`)
  }

  get(layerDigest: string): OciLayer | null {
    try {
      const j = JSON.parse(fs.readFileSync(this.#file(layerDigest), 'utf8')) as OciLayer & { gzipLevel?: number; zlib?: string }
      if (j.gzipLevel !== GZIP_LEVEL || j.zlib !== process.versions.zlib) return null
      return { diffId: j.diffId, digest: j.digest, size: j.size }
    } catch {
      return null
    }
  }

  put(layerDigest: string, l: OciLayer): void {
    try {
      fs.mkdirSync(this.dir, { recursive: true })
      const tmp = `${this.#file(layerDigest)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`
      fs.writeFileSync(tmp, JSON.stringify({ ...l, gzipLevel: GZIP_LEVEL, zlib: process.versions.zlib }) + '\n')
      fs.renameSync(tmp, this.#file(layerDigest))
    } catch {
      // a cache that cannot be written only costs a rebuild next time
    }
  }
}

export function defaultLayerCacheDir(): string {
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'strata', 'registry-layers')
}

/** The layer as an OCI tar.gz in `outFile`: diffId (tar sha256), gzip digest and size. */
async function buildLayerTarGz(erofsFile: string, outFile: string, tmpDir: string, onTarBytes?: (n: number) => void, signal?: AbortSignal): Promise<OciLayer> {
  const gzip = zlib.createGzip({ level: GZIP_LEVEL })
  const hash = crypto.createHash('sha256')
  let size = 0
  // the tar's bytes as they go into gzip: the progress of the slow part (its total is not known before)
  const tarBytes = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      onTarBytes?.(chunk.length)
      cb(null, chunk)
    },
  })
  const count = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk)
      size += chunk.length
      cb(null, chunk)
    },
  })
  const written = pipeline(tarBytes, gzip, count, fs.createWriteStream(outFile))
  let tar: { diffId: string; size: number }
  try {
    tar = await layerToTar(erofsFile, tarBytes, { tmpDir, signal })
  } catch (e) {
    tarBytes.destroy(e as Error)
    await written.catch(() => undefined)
    throw e
  }
  await written
  return { diffId: tar.diffId, digest: 'sha256:' + hash.digest('hex'), size }
}

function platformOfManifest(m: ImageManifest): Platform {
  if (m.source.platform) {
    try {
      return parsePlatform(m.source.platform)
    } catch {
      // not a platform string: fall through
    }
  }
  return { os: 'linux', architecture: 'amd64' }
}

/** The OCI image config (image-spec config.md) for a stored image and its layers' diffIds. */
export function ociConfigBytes(m: ImageManifest, diffIds: string[]): Buffer {
  const p = platformOfManifest(m)
  const c: Record<string, unknown> = {}
  if (m.config.user) c.User = m.config.user
  if (m.config.env.length) c.Env = m.config.env
  if (m.config.entrypoint.length) c.Entrypoint = m.config.entrypoint
  if (m.config.cmd.length) c.Cmd = m.config.cmd
  if (m.config.workdir) c.WorkingDir = m.config.workdir
  if (Object.keys(m.config.labels).length) c.Labels = m.config.labels
  const doc = {
    created: m.created,
    architecture: p.architecture,
    os: p.os,
    ...(p.variant ? { variant: p.variant } : {}),
    config: c,
    rootfs: { type: 'layers', diff_ids: diffIds },
    history: m.layers.map((l: LayerRef) => ({ created: m.created, created_by: `strata ${l.kind} layer ${l.digest}` })),
  }
  return Buffer.from(JSON.stringify(doc))
}

export async function pushRegistry(store: ImageStore, ref: string, url: string, opts: PushOptions = {}): Promise<PushResult> {
  const target = parseRegistryUrl(url)
  const { manifest } = await store.resolve(ref)
  const progress = progressOf(opts)
  const client = new RegistryClient(target.host, target.repo, { ...clientOptions(opts), actions: 'pull,push' })
  await client.ping()
  const cache = opts.layerCache === false ? null : new LayerCache(opts.layerCache ?? defaultLayerCacheDir())
  const workDir = opts.workDir ?? os.tmpdir()
  await makeDirs(workDir)
  const work = await fs.promises.mkdtemp(path.join(workDir, 'strata-push-'))
  let pushedBlobs = 0
  let skippedBlobs = 0
  let bytes = 0

  /** HEAD, then upload the file if the registry lacks the blob. */
  const pushBlob = async (file: string, digest: string, size: number): Promise<void> => {
    const task = progress?.start(`push ${shortDigest(digest)}`, size)
    if ((await client.headBlob(digest)) === size) {
      skippedBlobs++
      task?.done('exists')
      return
    }
    try {
      await client.uploadBlob(file, digest, size, (n) => task?.tick(n))
      task?.done()
    } catch (e) {
      // cut short by Ctrl-C: no note, so that the sink marks it interrupted
      task?.done(opts.signal?.aborted ? undefined : `failed: ${(e as StrataError).code ?? (e as Error).message}`)
      throw e
    }
    pushedBlobs++
    bytes += size
  }

  // Layer i uploads while layer i+1 is built (one of each at a time).
  let uploading: Promise<void> = Promise.resolve()
  try {
    const layers: OciLayer[] = []
    // a layer the image repeats is built and sent once (its blob is counted once too)
    const builtHere = new Map<string, OciLayer>()
    for (const [i, layer] of manifest.layers.entries()) {
      const again = builtHere.get(layer.digest)
      if (again) {
        layers.push(again)
        continue
      }
      const cached = cache?.get(layer.digest)
      if (cached && (await client.headBlob(cached.digest)) === cached.size) {
        skippedBlobs++
        progress?.start(`push ${shortDigest(cached.digest)}`, cached.size).done('exists')
        builtHere.set(layer.digest, cached)
        layers.push(cached)
        continue
      }
      const erofs = path.join(work, `${i}.erofs`)
      const tgz = path.join(work, `${i}.tar.gz`)
      const task = progress?.start(`tar+gzip ${shortDigest(layer.digest)}`)
      let built: OciLayer
      try {
        // both stop on Ctrl-C: a layer of gigabytes takes minutes to copy and gzip
        await store.copyBlobToFile(layer.digest, erofs, opts.signal)
        built = await buildLayerTarGz(erofs, tgz, work, (n) => task?.tick(n), opts.signal)
        task?.done()
      } catch (e) {
        task?.done(opts.signal?.aborted ? undefined : 'failed')
        throw e
      } finally {
        await fs.promises.rm(erofs, { force: true })
      }
      cache?.put(layer.digest, built)
      builtHere.set(layer.digest, built)
      layers.push(built)
      await uploading
      uploading = pushBlob(tgz, built.digest, built.size).finally(() => fs.promises.rm(tgz, { force: true }))
      // keep a failure for the await above or below, never unhandled
      uploading.catch(() => undefined)
    }
    await uploading

    const configBytes = ociConfigBytes(
      manifest,
      layers.map((l) => l.diffId),
    )
    const configDigest = 'sha256:' + crypto.createHash('sha256').update(configBytes).digest('hex')
    const configFile = path.join(work, 'config.json')
    await fs.promises.writeFile(configFile, configBytes)
    await pushBlob(configFile, configDigest, configBytes.length)

    const ociManifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_MANIFEST,
        config: { mediaType: OCI_CONFIG, digest: configDigest, size: configBytes.length },
        layers: layers.map((l) => ({ mediaType: OCI_LAYER_GZIP, digest: l.digest, size: l.size })),
      }),
    )
    const manifestDigest = 'sha256:' + crypto.createHash('sha256').update(ociManifest).digest('hex')
    if (target.digest && target.digest !== manifestDigest) {
      throw new StrataError('IMAGE_DIGEST_MISMATCH', `${url}: ${ref} makes the OCI manifest ${manifestDigest}, not ${target.digest}`)
    }
    await client.putManifest(target.tag ?? manifestDigest, ociManifest, OCI_MANIFEST)
    return {
      digest: manifestDigest,
      pushedBlobs,
      skippedBlobs,
      bytes,
      ref,
      url: formatRegistryUrl(target),
      ...(target.tag ? { tag: target.tag } : {}),
      blobsPushed: pushedBlobs,
      blobsSkipped: skippedBlobs,
      bytesSent: bytes,
    }
  } catch (e) {
    // the layer copy and its tar stop with the signal's own reason (an AbortError from a bare AbortController)
    throw opts.signal?.aborted ? client.fail(e, `push ${ref}`) : e
  } finally {
    await uploading.catch(() => undefined)
    await fs.promises.rm(work, { recursive: true, force: true })
  }
}
