// `strata image export`: an image as an OCI archive — an OCI image layout
// (oci-layout, index.json, blobs/sha256/…) in a tar — that `podman load`,
// `skopeo … oci-archive:` and `docker load` accept. index.json names the
// image with the org.opencontainers.image.ref.name annotation (`NAME:TAG`,
// which podman loads as localhost/NAME:TAG) and a Docker-style manifest.json
// is included as well (RepoTags), as `docker save` has done since Docker 25.
//
// Layers are the tars layerToTar makes of each EROFS layer, stored
// uncompressed (media type …layer.v1.tar): their digest is their diff_id,
// and the same image always exports to the same bytes. The config carries
// the image's env, entrypoint, cmd, workdir, user and labels and
// rootfs.diff_ids. The archive is written next to OUT and renamed over it
// when complete; or, given a stream instead of OUT (`export NAME -`), written
// to it as it is made (a failure then leaves the reader a truncated tar).
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import tarStream from 'tar-stream'
import { StrataError } from '../../../fs/common/errors.js'
import { makeDirs } from '../../../fs/common/local-dirs.js'
import { layerToTar } from '../layer/index.js'
import { NO_PROGRESS, type ProgressSink } from '../progress.js'
import type { ImageStore } from '../store.js'
import { DEFAULT_TAG, sha256Digest, type ImageManifest, type ImageRef } from '../types.js'
import { OCI_CONFIG, OCI_INDEX, OCI_LAYER_TAR, OCI_MANIFEST } from './media-types.js'
import { DEFAULT_PLATFORM, parsePlatform, type Platform } from './platform.js'

export interface ExportOptions {
  /** where layers are copied and converted (default os.tmpdir()); a private directory is made inside and removed */
  workDir?: string
  onProgress?: ProgressSink
  /** the name the archive gives the image (default: the reference's name and tag) */
  refName?: string
  /** cancels the export (nothing is left at OUT or in the work dir) */
  signal?: AbortSignal
}

export interface ExportResult {
  /** the image's manifest digest in the store */
  digest: string
  /** digest of the OCI manifest written into the archive */
  ociManifest: string
  refName: string | null
  layers: Array<{ digest: string; diffId: string; size: number }>
  bytes: number
}

/** The OCI image config of a stored image whose layer tars have these diff_ids. */
export function ociConfigOf(m: ImageManifest, diffIds: string[]): Record<string, unknown> {
  let p: Platform = DEFAULT_PLATFORM
  try {
    if (m.source.platform) p = parsePlatform(m.source.platform)
  } catch {
    p = DEFAULT_PLATFORM
  }
  const c = m.config
  const config: Record<string, unknown> = {}
  if (c.user) config.User = c.user
  if (c.env.length) config.Env = c.env
  if (c.entrypoint.length) config.Entrypoint = c.entrypoint
  if (c.cmd.length) config.Cmd = c.cmd
  if (c.workdir) config.WorkingDir = c.workdir
  if (Object.keys(c.labels).length) config.Labels = c.labels
  return {
    created: m.created,
    architecture: p.architecture,
    os: p.os,
    ...(p.variant ? { variant: p.variant } : {}),
    config,
    rootfs: { type: 'layers', diff_ids: diffIds },
    history: m.layers.map((l) => ({ created: m.created, created_by: `strata ${l.kind} layer ${l.digest}` })),
  }
}

function json(v: unknown): Buffer {
  return Buffer.from(JSON.stringify(v))
}

/** OUT must name a file (new or to replace) in an existing directory: INVALID_ARGUMENT or NOT_FOUND before any work. */
async function checkOutput(outFile: string): Promise<void> {
  if (outFile === '') throw new StrataError('INVALID_ARGUMENT', "the archive's file name is empty")
  const out = path.resolve(outFile)
  const st = await fs.promises.stat(out).catch(() => null)
  if (st?.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${outFile} is a directory; give the archive's file name`)
  if (st && !st.isFile()) throw new StrataError('INVALID_ARGUMENT', `${outFile} exists and is not a regular file`)
  const dir = await fs.promises.stat(path.dirname(out)).catch(() => null)
  if (!dir) throw new StrataError('NOT_FOUND', `cannot write ${outFile}: directory ${path.dirname(out)} does not exist`)
  if (!dir.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `cannot write ${outFile}: ${path.dirname(out)} is not a directory`)
}

/**
 * Writes `ref`'s image as an OCI archive (see the file comment) to the file
 * `out`, or to the stream `out` (standard output; it is not ended).
 */
export async function exportOciArchive(store: ImageStore, ref: string | ImageRef, out: string | NodeJS.WritableStream, opts: ExportOptions = {}): Promise<ExportResult> {
  const progress = opts.onProgress ?? NO_PROGRESS
  const outFile = typeof out === 'string' ? out : null
  if (outFile !== null) await checkOutput(outFile)
  const r = await store.resolve(ref)
  const m = r.manifest
  const refName = opts.refName ?? (r.ref.digest && !r.ref.tag ? null : `${r.ref.name}:${r.ref.tag ?? DEFAULT_TAG}`)
  const base = opts.workDir ?? os.tmpdir()
  await makeDirs(base)
  const work = await fs.promises.mkdtemp(path.join(base, 'strata-export-'))
  const dest = outFile === null ? null : path.resolve(outFile)
  const tmpOut = dest === null ? null : path.join(path.dirname(dest), `.${path.basename(dest)}.${crypto.randomBytes(4).toString('hex')}.tmp`)
  let bytes = 0
  try {
    // every distinct layer → an uncompressed OCI layer tar in the work dir
    const tars = new Map<string, { file: string; diffId: string; size: number }>()
    for (const [i, l] of m.layers.entries()) {
      const label = `export layer ${i + 1}/${m.layers.length} ${l.digest.slice(7, 19)}`
      if (tars.has(l.digest)) {
        // written once; its line says so, so that every layer of the image has one
        progress.start(label, l.size).done(`as layer ${m.layers.findIndex((x) => x.digest === l.digest) + 1}`)
        continue
      }
      const task = progress.start(label, l.size)
      try {
        const erofs = path.join(work, `${i}.erofs`)
        await pipeline(
          store.readBlob(l.digest),
          async function* (src: AsyncIterable<Buffer>) {
            for await (const c of src) {
              task.tick(c.length)
              yield c
            }
          },
          fs.createWriteStream(erofs),
          opts.signal ? { signal: opts.signal } : {},
        )
        const file = path.join(work, `${i}.tar`)
        const t = await layerToTar(erofs, fs.createWriteStream(file), { tmpDir: work, signal: opts.signal })
        opts.signal?.throwIfAborted()
        await fs.promises.rm(erofs, { force: true })
        tars.set(l.digest, { file, diffId: t.diffId, size: t.size })
      } finally {
        task.done()
      }
    }
    const layerTars = m.layers.map((l) => tars.get(l.digest)!)
    const config = json(ociConfigOf(m, layerTars.map((t) => t.diffId)))
    const configDigest = sha256Digest(config)
    const manifest = json({
      schemaVersion: 2,
      mediaType: OCI_MANIFEST,
      config: { mediaType: OCI_CONFIG, digest: configDigest, size: config.length },
      layers: layerTars.map((t) => ({ mediaType: OCI_LAYER_TAR, digest: t.diffId, size: t.size })),
      annotations: { 'org.opencontainers.image.created': m.created },
    })
    const manifestDigest = sha256Digest(manifest)
    const index = json({
      schemaVersion: 2,
      mediaType: OCI_INDEX,
      manifests: [
        {
          mediaType: OCI_MANIFEST,
          digest: manifestDigest,
          size: manifest.length,
          ...(refName ? { annotations: { 'org.opencontainers.image.ref.name': refName } } : {}),
        },
      ],
    })
    const blob = (d: string) => `blobs/sha256/${d.slice(7)}`
    const dockerManifest = json([{ Config: blob(configDigest), RepoTags: refName ? [refName] : [], Layers: layerTars.map((t) => blob(t.diffId)) }])

    // the tar: fixed times and owners, so the same image gives the same bytes
    const mtime = new Date(Date.parse(m.created) || 0)
    const pack = tarStream.pack()
    const written =
      tmpOut !== null
        ? pipeline(pack, fs.createWriteStream(tmpOut))
        : pipeline(pack, async (src: AsyncIterable<unknown>) => {
            // into the caller's stream, which stays open (standard output cannot be ended)
            const sink = out as NodeJS.WritableStream
            const signal = opts.signal
            for await (const x of src) {
              const c = x as Buffer
              bytes += c.length
              // a reader that stopped reading (a FIFO, a pipe) holds the write back: a cancel does not wait for it
              await new Promise<void>((resolve, reject) => {
                const onAbort = () => reject(signal!.reason)
                signal?.throwIfAborted()
                signal?.addEventListener('abort', onAbort, { once: true })
                sink.write(c, (e) => {
                  signal?.removeEventListener('abort', onAbort)
                  if (e) reject(e)
                  else resolve()
                })
              })
            }
          })
    const entry = (name: string, data: Buffer) =>
      new Promise<void>((resolve, reject) => pack.entry({ name, mtime, mode: 0o644, uid: 0, gid: 0 }, data, (e) => (e ? reject(e) : resolve())))
    const fileEntry = async (name: string, file: string, size: number) => {
      const e = pack.entry({ name, size, mtime, mode: 0o644, uid: 0, gid: 0 })
      await pipeline(fs.createReadStream(file, { highWaterMark: 1024 * 1024 }), e, opts.signal ? { signal: opts.signal } : {})
    }
    const dir = (name: string) => new Promise<void>((resolve, reject) => pack.entry({ name, type: 'directory', mtime, mode: 0o755, uid: 0, gid: 0 }, (e) => (e ? reject(e) : resolve())))
    let failure: unknown = null
    try {
      await entry('oci-layout', json({ imageLayoutVersion: '1.0.0' }))
      await dir('blobs')
      await dir('blobs/sha256')
      const done = new Set<string>()
      for (const t of layerTars) {
        if (done.has(t.diffId)) continue
        done.add(t.diffId)
        await fileEntry(blob(t.diffId), t.file, t.size)
      }
      await entry(blob(configDigest), config)
      await entry(blob(manifestDigest), manifest)
      await entry('index.json', index)
      await entry('manifest.json', dockerManifest)
      pack.finalize()
    } catch (e) {
      failure = e
      pack.destroy(e as Error)
    }
    try {
      await written
    } catch (e) {
      // the writer's failure (a full disk, a closed pipe) is the cause; the pack's own is then only "premature close"
      failure = e
    }
    if (failure !== null) throw failure
    if (tmpOut !== null) {
      await fs.promises.rename(tmpOut, dest!)
      bytes = (await fs.promises.stat(dest!)).size
    }
    // the exported layer tars are new diffIds of stored layers: importing the
    // archive again then finds each layer by its diff_id instead of rebuilding it
    for (const [digest, t] of tars) {
      if ((await store.lookupDiffId(t.diffId).catch(() => digest)) !== digest) await store.recordDiffId(t.diffId, digest).catch(() => undefined)
    }
    return {
      digest: r.digest,
      ociManifest: manifestDigest,
      refName,
      layers: m.layers.map((l) => ({ digest: l.digest, diffId: tars.get(l.digest)!.diffId, size: tars.get(l.digest)!.size })),
      bytes,
    }
  } finally {
    if (tmpOut !== null) await fs.promises.rm(tmpOut, { force: true }).catch(() => undefined)
    await fs.promises.rm(work, { recursive: true, force: true }).catch(() => undefined)
  }
}
