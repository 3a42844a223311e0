// From an image archive to the image to import: index.json (nested indexes,
// platform selection) → manifest → config → layers, for OCI layouts (a
// directory, an OCI archive, or a `docker save` tarball of Docker 25+), and
// the legacy `docker save` manifest.json. Every document is checked against
// the digest and size that point at it; every layer blob must be present
// with its declared size before anything is imported.
import crypto from 'node:crypto'
import type { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import { checkDocumentDigest, isDigest, type ImageSource } from '../types.js'
import type { ArchiveReader } from './archive.js'
import {
  CONFIG_TYPES,
  DOCKER_LAYER_GZIP,
  DOCKER_LAYER_TAR,
  INDEX_TYPES,
  MANIFEST_TYPES,
  layerCompression,
} from './media-types.js'
import { sniffCompression } from '../layer/decompress.js'
import { DEFAULT_PLATFORM, formatPlatform, imagePlatform, platformMatches, platformOf, type Platform } from './platform.js'
import { MAX_DOCUMENT_BYTES, type OciImageConfig, type OciImageSource, type OciLayerSource } from './types.js'

export interface ReadImageOptions {
  /** the platform asked for with --platform (default: linux/amd64, preferred but not required when the archive holds one image) */
  platform?: Platform
  /** which image of a multi-image archive (a RepoTag or ref.name annotation) */
  ref?: string
}

export interface Descriptor {
  mediaType: string
  digest: string
  size: number
  platform?: Platform
  annotations: Record<string, string>
}

const REF_ANNOTATIONS = ['io.containerd.image.name', 'org.opencontainers.image.ref.name']

function badManifest(label: string, why: string): StrataError {
  return new StrataError('IMAGE_BAD_MANIFEST', `${label}: ${why}`)
}

export function parseJson(buf: Buffer, label: string, what: string): unknown {
  try {
    return JSON.parse(buf.toString('utf8'))
  } catch (e) {
    throw new StrataError('IMAGE_BAD_MANIFEST', `${label}: ${what} is not JSON: ${(e as Error).message}`, { cause: e })
  }
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

/** Checks a descriptor's shape; only sha256 digests are accepted (another algorithm is IMAGE_UNSUPPORTED_MEDIA_TYPE). */
export function parseDescriptor(v: unknown, label: string, where: string): Descriptor {
  if (!isObject(v)) throw badManifest(label, `${where} is not a descriptor object`)
  const { mediaType, digest, size } = v
  if (typeof digest !== 'string') throw badManifest(label, `${where}.digest is missing`)
  checkDocumentDigest(digest, `${label}: ${where}.digest`)
  if (!Number.isSafeInteger(size) || (size as number) < 0) throw badManifest(label, `${where}.size is not a size`)
  if (mediaType !== undefined && typeof mediaType !== 'string') throw badManifest(label, `${where}.mediaType is not a string`)
  const d: Descriptor = { mediaType: (mediaType as string | undefined) ?? '', digest, size: size as number, annotations: {} }
  const p = platformOf(v.platform)
  if (p) d.platform = p
  if (isObject(v.annotations)) for (const [k, val] of Object.entries(v.annotations)) if (typeof val === 'string') d.annotations[k] = val
  return d
}

export function blobName(digest: string): string {
  return `blobs/sha256/${digest.slice('sha256:'.length)}`
}

/** Reads a document a descriptor points at, checking size (before reading) and digest. */
export async function readVerified(reader: ArchiveReader, d: Descriptor, what: string): Promise<Buffer> {
  const name = blobName(d.digest)
  const size = await reader.size(name)
  if (size === null) throw new StrataError('IMAGE_BLOB_MISSING', `${reader.label}: ${what} ${d.digest} is not in the archive`, { detail: { digest: d.digest } })
  if (size !== d.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `${reader.label}: ${what} ${d.digest} has ${size} bytes, the descriptor says ${d.size}`)
  const buf = await reader.read(name, MAX_DOCUMENT_BYTES)
  const got = 'sha256:' + crypto.createHash('sha256').update(buf).digest('hex')
  if (got !== d.digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `${reader.label}: ${what} hashes to ${got}, the descriptor says ${d.digest}`)
  return buf
}

interface Candidate {
  desc: Descriptor
  platform?: Platform
  refs: string[]
}

function refsOf(d: Descriptor): string[] {
  return REF_ANNOTATIONS.map((k) => d.annotations[k]).filter((x): x is string => !!x)
}

function isAttestation(c: Candidate): boolean {
  return c.platform?.os === 'unknown' || c.desc.annotations['vnd.docker.reference.type'] === 'attestation-manifest'
}

async function collect(reader: ArchiveReader, d: Descriptor, refs: string[], depth: number, out: Candidate[], skipped: Set<string>): Promise<void> {
  let mediaType = d.mediaType
  if (!mediaType) {
    // a descriptor without mediaType: the document says what it is
    const doc = parseJson(await readVerified(reader, d, 'manifest'), reader.label, `blob ${d.digest}`)
    mediaType = isObject(doc) && typeof doc.mediaType === 'string' ? doc.mediaType : isObject(doc) && Array.isArray(doc.manifests) ? INDEX_TYPES[0]! : MANIFEST_TYPES[0]!
  }
  if (INDEX_TYPES.includes(mediaType)) {
    if (depth > 4) throw badManifest(reader.label, 'image indexes nest too deeply')
    const idx = parseJson(await readVerified(reader, d, 'image index'), reader.label, `index ${d.digest}`)
    for (const child of manifestsOf(idx, reader.label, `index ${d.digest}`)) await collect(reader, child, refs.length ? refs : refsOf(child), depth + 1, out, skipped)
    return
  }
  if (MANIFEST_TYPES.includes(mediaType)) {
    const c: Candidate = { desc: { ...d, mediaType }, refs }
    if (d.platform) c.platform = d.platform
    out.push(c)
    return
  }
  skipped.add(mediaType)
}

function manifestsOf(idx: unknown, label: string, what: string): Descriptor[] {
  if (!isObject(idx) || !Array.isArray(idx.manifests)) throw badManifest(label, `${what} has no manifests array`)
  if (idx.schemaVersion !== undefined && idx.schemaVersion !== 2) throw badManifest(label, `${what}: schemaVersion ${String(idx.schemaVersion)} is not 2`)
  return idx.manifests.map((m, i) => parseDescriptor(m, label, `${what}.manifests[${i}]`))
}

function normRef(r: string): string {
  let s = r.replace(/^docker\.io\/library\//, '').replace(/^docker\.io\//, '').replace(/^localhost\//, '')
  if (!/:[^/]+$/.test(s) && !s.includes('@')) s += ':latest'
  return s
}

export function refMatches(have: string, want: string): boolean {
  return have === want || normRef(have) === normRef(want)
}

/**
 * The image an OCI layout (directory or archive) holds for the wanted
 * platform. `index.json` may list several images and nest indexes;
 * attestation manifests are ignored. IMAGE_PLATFORM_NOT_FOUND when no image
 * matches an explicit --platform (or the default one when there is a choice).
 */
export async function readOciLayout(reader: ArchiveReader, source: ImageSource, opts: ReadImageOptions = {}, extraRefs: string[] = []): Promise<OciImageSource> {
  const label = reader.label
  const index = parseJson(await reader.read('index.json', MAX_DOCUMENT_BYTES), label, 'index.json')
  const top = manifestsOf(index, label, 'index.json')
  const skipped = new Set<string>()
  const images: LayoutImage[] = []
  for (const d of top) {
    const found: Candidate[] = []
    await collect(reader, d, refsOf(d), 0, found, skipped)
    const cands = found.filter((c) => !isAttestation(c))
    if (cands.length) addImage(images, { digest: d.digest, refs: [...new Set(cands.flatMap((c) => c.refs))], cands })
  }
  if (images.length === 0) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${label}: no image manifest in index.json${skipped.size ? ` (found ${[...skipped].join(', ')})` : ''}`)
  }
  let picked = images
  if (opts.ref) {
    const want = opts.ref
    if (isDigest(want)) {
      // an unnamed image has only its digest: the index.json entry's, or one platform's manifest
      picked = []
      for (const img of images) {
        if (img.digest === want || img.cands.some((c) => c.desc.digest === want)) {
          picked.push(img.digest === want ? img : { ...img, cands: img.cands.filter((c) => c.desc.digest === want) })
        }
      }
    } else {
      picked = images.filter((img) => img.refs.some((r) => refMatches(r, want)) || (images.length === 1 && extraRefs.some((r) => refMatches(r, want))))
    }
    if (picked.length === 0) throw new StrataError('IMAGE_NOT_FOUND', `${label}: no image ${JSON.stringify(want)} (it has ${describeImages(images)})`)
  }
  // the platform is chosen within one image, never between images
  if (picked.length > 1) {
    throw new StrataError('INVALID_ARGUMENT', `${label} holds ${picked.length} images (${describeImages(picked)}); choose one with --ref NAME or --ref sha256:…`)
  }
  const cands = picked[0]!.cands
  const loaded = new Map<string, { manifest: Record<string, unknown>; config: OciImageConfig; configDesc: Descriptor }>()
  const load = async (c: Candidate) => {
    let l = loaded.get(c.desc.digest)
    if (!l) {
      l = await loadManifest(reader, c.desc)
      loaded.set(c.desc.digest, l)
    }
    return l
  }
  // `docker save` with the containerd store lists every platform of an
  // image but carries the blobs of one: only images whose manifest is in the
  // archive can be chosen (an explicitly wanted one that is absent is missing)
  const present: Candidate[] = []
  for (const c of cands) if ((await reader.size(blobName(c.desc.digest))) !== null) present.push(c)
  const want = opts.platform ?? DEFAULT_PLATFORM
  if (opts.platform) {
    const absent = cands.find((c) => !present.includes(c) && c.platform && platformMatches(c.platform, want))
    if (absent && !present.some((c) => c.platform && platformMatches(c.platform, want))) {
      throw new StrataError('IMAGE_BLOB_MISSING', `${label}: the manifest for ${formatPlatform(want)} (${absent.desc.digest}) is listed but not in the archive`, { detail: { digest: absent.desc.digest } })
    }
  }
  if (present.length === 0) {
    throw new StrataError('IMAGE_BLOB_MISSING', `${label}: manifest ${cands[0]!.desc.digest} is not in the archive`, { detail: { digest: cands[0]!.desc.digest } })
  }
  // platforms: from the index, else from each image's config
  for (const c of present) {
    if (!c.platform) {
      const p = platformOf((await load(c)).config)
      if (p) c.platform = p
    }
  }
  let chosen = present.filter((c) => c.platform && platformMatches(c.platform, want))
  if (chosen.length === 0) {
    if (!opts.platform && new Set(present.map((c) => c.desc.digest)).size === 1) chosen = present
    else {
      const have = [...new Set(present.map((c) => (c.platform ? formatPlatform(c.platform) : 'unknown')))].join(', ')
      throw new StrataError('IMAGE_PLATFORM_NOT_FOUND', `${label}: no image for ${formatPlatform(want)} (it has ${have})`)
    }
  }
  const digests = [...new Set(chosen.map((c) => c.desc.digest))]
  if (digests.length > 1) {
    throw new StrataError('INVALID_ARGUMENT', `${label}: ${describeImages(picked)} has ${digests.length} manifests for ${formatPlatform(want)} (${digests.join(', ')}); choose one with --ref sha256:…`)
  }
  const pick = chosen[0]!
  const l = await load(pick)
  const platform = imagePlatform(pick.platform, platformOf(l.config))
  if (opts.platform && platform && !platformMatches(platform, opts.platform)) {
    throw new StrataError('IMAGE_PLATFORM_NOT_FOUND', `${label}: the image's config is for ${formatPlatform(platform)}, not ${formatPlatform(opts.platform)}`)
  }
  const layers = await layerSources(reader, l.manifest, l.config)
  return {
    config: l.config,
    layers,
    source: { ...source, digest: pick.desc.digest, ...(platform ? { platform: formatPlatform(platform) } : {}) },
    refNames: [...new Set([...pick.refs, ...extraRefs])],
  }
}

/**
 * One image of a layout: an entry of index.json (a manifest, or an index of
 * its platforms), merged with the other entries that carry one of its names
 * (a layout may list each platform of one named image on its own). An
 * unnamed entry is an image of its own, known by its digest.
 */
interface LayoutImage {
  digest: string
  refs: string[]
  cands: Candidate[]
}

function addImage(images: LayoutImage[], img: LayoutImage): void {
  const manifests = (i: LayoutImage) => [...new Set(i.cands.map((c) => c.desc.digest))].sort().join(',')
  const same = images.find((i) => i.digest === img.digest || manifests(i) === manifests(img) || i.refs.some((r) => img.refs.some((s) => refMatches(r, s))))
  if (!same) {
    images.push(img)
    return
  }
  same.refs = [...new Set([...same.refs, ...img.refs])]
  for (const c of img.cands) if (!same.cands.some((x) => x.desc.digest === c.desc.digest)) same.cands.push(c)
}

function describeImages(images: LayoutImage[]): string {
  return images.map((i) => (i.refs.length ? i.refs.join(' ') : `unnamed ${i.digest}`)).join(', ')
}

async function loadManifest(reader: ArchiveReader, d: Descriptor): Promise<{ manifest: Record<string, unknown>; config: OciImageConfig; configDesc: Descriptor }> {
  const label = reader.label
  const m = parseJson(await readVerified(reader, d, 'manifest'), label, `manifest ${d.digest}`)
  if (!isObject(m)) throw badManifest(label, `manifest ${d.digest} is not an object`)
  if (m.schemaVersion !== 2) throw badManifest(label, `manifest ${d.digest}: schemaVersion must be 2`)
  if (m.mediaType !== undefined && !MANIFEST_TYPES.includes(m.mediaType as string)) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${label}: manifest ${d.digest} has media type ${JSON.stringify(m.mediaType)}`)
  }
  const configDesc = parseDescriptor(m.config, label, `manifest ${d.digest}.config`)
  if (configDesc.mediaType && !CONFIG_TYPES.includes(configDesc.mediaType)) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${label}: config media type ${JSON.stringify(configDesc.mediaType)} is not an image config`)
  }
  const config = parseConfig(await readVerified(reader, configDesc, 'config'), label)
  return { manifest: m, config, configDesc }
}

/** Parses and checks an image config: rootfs.diff_ids must be sha256 digests. */
export function parseConfig(buf: Buffer, label: string): OciImageConfig {
  const c = parseJson(buf, label, 'image config')
  if (!isObject(c)) throw badManifest(label, 'image config is not an object')
  const rootfs = c.rootfs
  if (!isObject(rootfs) || !Array.isArray(rootfs.diff_ids)) throw badManifest(label, 'image config has no rootfs.diff_ids')
  for (const [i, d] of rootfs.diff_ids.entries()) {
    if (typeof d !== 'string') throw badManifest(label, `image config rootfs.diff_ids[${i}] is not a string`)
    checkDocumentDigest(d, `${label}: image config rootfs.diff_ids[${i}]`)
  }
  if (c.config !== undefined && c.config !== null && !isObject(c.config)) throw badManifest(label, 'image config "config" is not an object')
  return c as OciImageConfig
}

async function layerSources(reader: ArchiveReader, m: Record<string, unknown>, config: OciImageConfig): Promise<OciLayerSource[]> {
  const label = reader.label
  if (!Array.isArray(m.layers)) throw badManifest(label, 'manifest has no layers array')
  const descs = m.layers.map((l, i) => parseDescriptor(l, label, `manifest.layers[${i}]`))
  const diffIds = config.rootfs!.diff_ids
  if (diffIds.length !== descs.length) throw badManifest(label, `manifest lists ${descs.length} layers, the config ${diffIds.length} diff_ids`)
  const out: OciLayerSource[] = []
  for (const [i, d] of descs.entries()) {
    layerCompression(d.mediaType)
    const name = blobName(d.digest)
    const size = await reader.size(name)
    if (size === null) throw new StrataError('IMAGE_BLOB_MISSING', `${label}: layer ${d.digest} is not in the archive`, { detail: { digest: d.digest } })
    if (size !== d.size) throw new StrataError('IMAGE_SIZE_MISMATCH', `${label}: layer ${d.digest} has ${size} bytes, the manifest says ${d.size}`)
    out.push({ digest: d.digest, size: d.size, mediaType: d.mediaType, diffId: diffIds[i]!, open: () => reader.open(name) })
  }
  return out
}

// --- legacy `docker save` (manifest.json)

interface LegacyEntry {
  Config: string
  RepoTags: string[]
  Layers: string[]
}

/** The RepoTags of a docker-save manifest.json, if the archive has one. */
export async function legacyRepoTags(reader: ArchiveReader): Promise<string[]> {
  if ((await reader.size('manifest.json')) === null) return []
  try {
    return parseLegacy(await reader.read('manifest.json', MAX_DOCUMENT_BYTES), reader.label).flatMap((e) => e.RepoTags)
  } catch {
    return []
  }
}

function parseLegacy(buf: Buffer, label: string): LegacyEntry[] {
  const v = parseJson(buf, label, 'manifest.json')
  if (!Array.isArray(v) || v.length === 0) throw badManifest(label, 'manifest.json is not a non-empty array')
  return v.map((e, i) => {
    if (!isObject(e) || typeof e.Config !== 'string' || !Array.isArray(e.Layers) || !e.Layers.every((x) => typeof x === 'string')) {
      throw badManifest(label, `manifest.json[${i}] needs Config and Layers`)
    }
    const tags = Array.isArray(e.RepoTags) ? e.RepoTags.filter((x): x is string => typeof x === 'string') : []
    return { Config: e.Config, RepoTags: tags, Layers: e.Layers as string[] }
  })
}

function digestInName(name: string): string | null {
  const m = /(?:^|\/)(?:sha256\/)?([0-9a-f]{64})(?:\.json|\.tar|\/layer\.tar)?$/.exec(name)
  return m && !name.endsWith('/layer.tar') ? `sha256:${m[1]}` : null
}

async function hashStream(s: Readable): Promise<string> {
  const h = crypto.createHash('sha256')
  for await (const c of s) h.update(c as Buffer)
  return 'sha256:' + h.digest('hex')
}

/**
 * The image of a legacy `docker save` archive (manifest.json, `<id>/layer.tar`
 * or `<diffId>.tar` members). Layers that are named by their digest are
 * checked against it; a `layer.tar` is an uncompressed tar checked against
 * its diff_id.
 */
export async function readDockerArchive(reader: ArchiveReader, source: ImageSource, opts: ReadImageOptions = {}): Promise<OciImageSource> {
  const label = reader.label
  let entries = parseLegacy(await reader.read('manifest.json', MAX_DOCUMENT_BYTES), label)
  // an image without RepoTags is known by its ID, the digest of its config
  const describe = (es: LegacyEntry[]) => es.map((e) => e.RepoTags.join(' ') || `unnamed ${digestInName(e.Config) ?? e.Config}`).join(', ')
  if (opts.ref) {
    const want = opts.ref
    const all = entries
    entries = entries.filter((e) => (isDigest(want) ? digestInName(e.Config) === want : e.RepoTags.some((r) => refMatches(r, want))))
    if (entries.length === 0) throw new StrataError('IMAGE_NOT_FOUND', `${label}: no image ${JSON.stringify(want)} (it has ${describe(all)})`)
  }
  if (entries.length > 1) throw new StrataError('INVALID_ARGUMENT', `${label} holds ${entries.length} images (${describe(entries)}); choose one with --ref NAME or --ref sha256:…`)
  const e = entries[0]!
  const cfgBytes = await reader.read(e.Config, MAX_DOCUMENT_BYTES)
  const cfgDigest = 'sha256:' + crypto.createHash('sha256').update(cfgBytes).digest('hex')
  const named = digestInName(e.Config)
  if (named && named !== cfgDigest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `${label}: config ${e.Config} hashes to ${cfgDigest}`)
  const config = parseConfig(cfgBytes, label)
  const platform = platformOf(config)
  if (opts.platform && platform && !platformMatches(platform, opts.platform)) {
    throw new StrataError('IMAGE_PLATFORM_NOT_FOUND', `${label}: the image is for ${formatPlatform(platform)}, not ${formatPlatform(opts.platform)}`)
  }
  const diffIds = config.rootfs!.diff_ids
  if (diffIds.length !== e.Layers.length) throw badManifest(label, `manifest.json lists ${e.Layers.length} layers, the config ${diffIds.length} diff_ids`)
  const layers: OciLayerSource[] = []
  for (const [i, name] of e.Layers.entries()) {
    const size = await reader.size(name)
    if (size === null) throw new StrataError('IMAGE_BLOB_MISSING', `${label}: layer ${name} is not in the archive`, { detail: { member: name } })
    const head = await firstBytes(await reader.open(name), 4)
    const comp = sniffCompression(head)
    const mediaType = comp === 'gzip' ? DOCKER_LAYER_GZIP : comp === 'zstd' ? 'application/vnd.docker.image.rootfs.diff.tar.zstd' : DOCKER_LAYER_TAR
    const diffId = diffIds[i]!
    // an uncompressed layer's digest is its diff_id; a compressed one not named by its digest is hashed here
    const digest = digestInName(name) ?? (comp === 'none' ? diffId : await hashStream(await reader.open(name)))
    layers.push({ digest, size, mediaType, diffId, open: () => reader.open(name) })
  }
  return { config, layers, source: { ...source, ...(platform ? { platform: formatPlatform(platform) } : {}) }, refNames: e.RepoTags }
}

async function firstBytes(s: Readable, n: number): Promise<Buffer> {
  const parts: Buffer[] = []
  let got = 0
  try {
    for await (const c of s) {
      parts.push(c as Buffer)
      got += (c as Buffer).length
      if (got >= n) break
    }
  } finally {
    s.destroy()
  }
  return Buffer.concat(parts).subarray(0, n)
}
