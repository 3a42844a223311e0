// `strata image pull docker://…`: resolve the manifest (picking a platform
// from an index), fetch and verify the config, stage each layer blob in a
// local file (digest and size verified while streaming) and hand the image
// to the import pipeline, which builds the EROFS layers and tags it last.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { makeDirs } from '../../../fs/common/local-dirs.js'
import { importOciImage } from '../oci/import.js'
import { CONFIG_TYPES, INDEX_TYPES, LAYER_MEDIA_TYPES, MANIFEST_TYPES } from '../oci/media-types.js'
import { DEFAULT_PLATFORM, formatPlatform, imagePlatform, parsePlatform, platformMatches, platformOf, type Platform } from '../oci/platform.js'
import type { OciImageConfig, OciLayerSource } from '../oci/types.js'
import type { ImageStore } from '../store.js'
import { DEFAULT_TAG, checkDocumentDigest, isDigest, isValidName, parseImageRef, type LayerKind } from '../types.js'
import { RegistryClient } from './client.js'
import { formatRegistryUrl, parseRegistryUrl, type RegistryRef } from './reference.js'
import { clientOptions, progressOf, shortDigest, type RegistryOptions } from './options.js'

export interface PullOptions extends RegistryOptions {
  /** local `NAME` or `NAME:TAG` (default: `HOST[:PORT]/REPO` and the URL's tag) */
  name?: string
  /** `os/arch[/variant]` to pick from an index (default linux/amd64) */
  platform?: string
  kind?: LayerKind
  squash?: boolean
  /** local directory for staged blobs and layer builds (default os.tmpdir()) */
  workDir?: string
  /** layer downloads in flight (default 3) */
  concurrency?: number
}

export interface PullResult {
  /** the Strata manifest digest */
  digest: string
  name: string
  tag: string
  url: string
  /** digest of the registry's image manifest that was imported */
  remoteDigest: string
  platform: string
  blobsFetched: number
  blobsSkipped: number
  bytesReceived: number
  layersBuilt: number
  layersReused: number
}

interface Descriptor {
  mediaType: string
  digest: string
  size: number
  platform?: unknown
}

const MAX_INDEX_DEPTH = 2

function parseJson(bytes: Buffer, what: string): Record<string, unknown> {
  let v: unknown
  try {
    v = JSON.parse(bytes.toString('utf8'))
  } catch (e) {
    throw new StrataError('IMAGE_BAD_MANIFEST', `${what} is not JSON`, { cause: e })
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new StrataError('IMAGE_BAD_MANIFEST', `${what} is not a JSON object`)
  return v as Record<string, unknown>
}

function descriptor(v: unknown, what: string): Descriptor {
  const d = v as Record<string, unknown> | null
  if (typeof d !== 'object' || d === null) throw new StrataError('IMAGE_BAD_MANIFEST', `${what} is not a descriptor`)
  if (typeof d.mediaType !== 'string') throw new StrataError('IMAGE_BAD_MANIFEST', `${what}.mediaType is missing`)
  if (typeof d.digest !== 'string') throw new StrataError('IMAGE_BAD_MANIFEST', `${what}.digest is missing`)
  checkDocumentDigest(d.digest, `${what}.digest`)
  if (!Number.isSafeInteger(d.size) || (d.size as number) < 0) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}.size is not a size`)
  return { mediaType: d.mediaType, digest: d.digest, size: d.size as number, ...(d.platform !== undefined ? { platform: d.platform } : {}) }
}

function kindOf(mediaType: string, doc: Record<string, unknown>): 'index' | 'manifest' {
  if (INDEX_TYPES.includes(mediaType)) return 'index'
  if (MANIFEST_TYPES.includes(mediaType)) return 'manifest'
  if (mediaType === '' || mediaType === 'application/json') {
    // an OCI document without mediaType: tell by shape
    if (Array.isArray(doc.manifests)) return 'index'
    if (Array.isArray(doc.layers)) return 'manifest'
  }
  throw new StrataError(
    'IMAGE_UNSUPPORTED_MEDIA_TYPE',
    `manifest media type ${JSON.stringify(mediaType)} is not supported (OCI image index/manifest, Docker manifest list/v2 schema 2)`,
  )
}

/** Follows indexes down to the image manifest for `want`. */
async function resolveImageManifest(
  client: RegistryClient,
  reference: string,
  want: Platform,
  explicitPlatform: boolean,
): Promise<{ digest: string; doc: Record<string, unknown>; platform: Platform | null }> {
  let m = await client.getManifest(reference)
  let expectSize: number | undefined
  let chosen: Platform | null = null
  for (let depth = 0; ; depth++) {
    const what = `manifest ${m.digest}`
    if (expectSize !== undefined && m.bytes.length !== expectSize) {
      throw new StrataError('IMAGE_SIZE_MISMATCH', `${what}: ${m.bytes.length} bytes, the index says ${expectSize}`)
    }
    const doc = parseJson(m.bytes, what)
    const kind = kindOf(m.mediaType, doc)
    if (kind === 'manifest') return { digest: m.digest, doc, platform: chosen }
    if (depth >= MAX_INDEX_DEPTH) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}: indexes nested more than ${MAX_INDEX_DEPTH} deep`)
    if (!Array.isArray(doc.manifests)) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}: index without manifests`)
    const entries = doc.manifests.map((d, i) => descriptor(d, `${what}.manifests[${i}]`))
    const matching = entries.filter((d) => {
      const p = platformOf(d.platform)
      return p !== null && platformMatches(p, want)
    })
    // an index entry without a platform is taken only when nothing names one
    const pick = matching[0] ?? (entries.every((d) => platformOf(d.platform) === null) && !explicitPlatform ? entries[0] : undefined)
    if (!pick) {
      const have = entries.map((d) => platformOf(d.platform)).filter((p): p is Platform => p !== null).map(formatPlatform)
      throw new StrataError('IMAGE_PLATFORM_NOT_FOUND', `${what} has no manifest for ${formatPlatform(want)} (it has: ${have.join(', ') || 'none'})`)
    }
    chosen = platformOf(pick.platform)
    expectSize = pick.size
    m = await client.getManifest(pick.digest)
  }
}

/** A tiny FIFO limiter for concurrent downloads. */
function limiter(n: number): <T>(fn: () => Promise<T>) => Promise<T> {
  let active = 0
  const queue: Array<() => void> = []
  return async <T>(fn: () => Promise<T>): Promise<T> => {
    if (active >= n) await new Promise<void>((r) => queue.push(r))
    active++
    try {
      return await fn()
    } finally {
      active--
      queue.shift()?.()
    }
  }
}

function localName(ref: RegistryRef, name: string | undefined): { name: string; tag: string } {
  const remoteTag = ref.tag ?? (ref.digest ? `sha256-${ref.digest.slice(7, 19)}` : DEFAULT_TAG)
  if (name === undefined) {
    const full = `${ref.host}/${ref.repo}`
    return { name: isValidName(full) ? full : ref.repo, tag: remoteTag }
  }
  const parsed = parseImageRef(name)
  if (parsed.digest) throw new StrataError('IMAGE_INVALID_REFERENCE', `--name ${JSON.stringify(name)}: a local name takes a tag, not a digest`)
  const hasTag = name.lastIndexOf(':') > name.lastIndexOf('/')
  return { name: parsed.name, tag: hasTag ? parsed.tag! : remoteTag }
}

export async function pullRegistry(store: ImageStore, url: string, opts: PullOptions = {}): Promise<PullResult> {
  const ref = parseRegistryUrl(url)
  const target = localName(ref, opts.name)
  const want = opts.platform ? parsePlatform(opts.platform) : DEFAULT_PLATFORM
  const progress = progressOf(opts)
  // aborted when the pull ends, so that downloads a failed import left running stop
  const ac = new AbortController()
  const signal = opts.signal ? AbortSignal.any([opts.signal, ac.signal]) : ac.signal
  const client = new RegistryClient(ref.host, ref.repo, { ...clientOptions(opts), actions: 'pull', signal })

  const resolved = await resolveImageManifest(client, ref.digest ?? ref.tag!, want, opts.platform !== undefined)
  const what = `manifest ${resolved.digest}`
  const doc = resolved.doc
  if (doc.schemaVersion !== 2) throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${what}: schemaVersion ${JSON.stringify(doc.schemaVersion)} (only 2 is supported)`)
  const configDesc = descriptor(doc.config, `${what}.config`)
  if (!CONFIG_TYPES.includes(configDesc.mediaType)) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${what}: config media type ${JSON.stringify(configDesc.mediaType)} is not an image config`)
  }
  if (!Array.isArray(doc.layers) || doc.layers.length === 0) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}: no layers`)
  const layerDescs = doc.layers.map((l, i) => descriptor(l, `${what}.layers[${i}]`))
  for (const [i, l] of layerDescs.entries()) {
    if (LAYER_MEDIA_TYPES[l.mediaType] === undefined) throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${what}.layers[${i}]: media type ${JSON.stringify(l.mediaType)} is not a layer tar`)
  }

  const configBytes = await client.getBlobBuffer(configDesc.digest, configDesc.size)
  const config = parseJson(configBytes, `config ${configDesc.digest}`) as OciImageConfig
  const diffIds = config.rootfs?.diff_ids
  if (!Array.isArray(diffIds) || diffIds.length !== layerDescs.length) {
    throw new StrataError('IMAGE_BAD_MANIFEST', `config ${configDesc.digest}: rootfs.diff_ids has ${Array.isArray(diffIds) ? diffIds.length : 'no'} entries for ${layerDescs.length} layers`)
  }
  for (const [i, d] of diffIds.entries()) {
    if (typeof d !== 'string') throw new StrataError('IMAGE_BAD_MANIFEST', `config ${configDesc.digest}: rootfs.diff_ids[${i}] is not a string`)
    checkDocumentDigest(d, `config ${configDesc.digest}: rootfs.diff_ids[${i}]`)
  }
  const platform = imagePlatform(resolved.platform, platformOf(config))
  if (opts.platform !== undefined && platform && !platformMatches(platform, want)) {
    throw new StrataError('IMAGE_PLATFORM_NOT_FOUND', `${url} is ${formatPlatform(platform)}, not ${formatPlatform(want)}`)
  }

  const workDir = opts.workDir ?? os.tmpdir()
  await makeDirs(workDir)
  const staging = await fs.promises.mkdtemp(path.join(workDir, 'strata-pull-'))
  const limit = limiter(opts.concurrency ?? 3)
  let blobsFetched = 1
  let bytesReceived = configBytes.length
  const staged = new Map<number, Promise<string>>()
  const stage = (i: number): Promise<string> => {
    let p = staged.get(i)
    if (!p) {
      const l = layerDescs[i]!
      p = limit(async () => {
        const file = path.join(staging, `${i}-${l.digest.slice(7)}`)
        const task = progress?.start(`pull ${shortDigest(l.digest)}`, l.size)
        try {
          await client.getBlobToFile(l.digest, l.size, file, (n) => task?.tick(n))
          task?.done()
        } catch (e) {
          // cut short by Ctrl-C: no note, so that the sink marks it interrupted
          task?.done(opts.signal?.aborted ? undefined : `failed: ${(e as StrataError).code ?? (e as Error).message}`)
          throw e
        }
        blobsFetched++
        bytesReceived += l.size
        return file
      })
      staged.set(i, p)
    }
    return p
  }
  const layers: OciLayerSource[] = layerDescs.map((l, i) => ({
    digest: l.digest,
    size: l.size,
    mediaType: l.mediaType,
    diffId: diffIds[i]!,
    async open(): Promise<Readable> {
      const file = await stage(i)
      const stream = fs.createReadStream(file)
      // a staged blob is read once: free the disk as soon as the importer is done with it
      stream.once('close', () => void fs.promises.rm(file, { force: true }))
      return stream
    },
  }))

  try {
    // Prefetch the layers the store cannot build from its diffId cache; the
    // importer opens the others only if it needs them after all.
    for (const [i, d] of diffIds.entries()) {
      if (typeof d === 'string' && isDigest(d) && (await store.lookupDiffId(d))) continue
      stage(i).catch(() => undefined)
    }
    const r = await importOciImage(
      store,
      {
        config,
        layers,
        source: { type: 'registry', ref: formatRegistryUrl({ host: ref.host, repo: ref.repo, digest: resolved.digest }), digest: resolved.digest, ...(platform ? { platform: formatPlatform(platform) } : {}) },
      },
      {
        name: target.name,
        tag: target.tag,
        ...(opts.kind !== undefined ? { kind: opts.kind } : {}),
        ...(opts.squash !== undefined ? { squash: opts.squash } : {}),
        workDir,
        ...(progress ? { onProgress: progress } : {}),
      },
    )
    return {
      digest: r.digest,
      name: target.name,
      tag: target.tag,
      url: formatRegistryUrl(ref),
      remoteDigest: resolved.digest,
      platform: platform ? formatPlatform(platform) : '',
      blobsFetched,
      blobsSkipped: layerDescs.length + 1 - blobsFetched,
      bytesReceived,
      layersBuilt: r.layersBuilt,
      layersReused: r.layersReused,
    }
  } finally {
    ac.abort(new StrataError('CANCELLED', 'pull ended'))
    await Promise.allSettled(staged.values())
    await fs.promises.rm(staging, { recursive: true, force: true })
  }
}
