// The image model shared by every part of sandbox/image: manifest shape,
// references (NAME[:TAG] | NAME@DIGEST), digests, and the fixed DFS root.
// See docs/images.md.
import crypto from 'node:crypto'
import { StrataError } from '../../fs/common/errors.js'

export const IMAGE_ROOT = '/strata/images'
export const MANIFEST_MEDIA_TYPE = 'application/vnd.strata.image.manifest.v1+json'
export const DEFAULT_TAG = 'latest'

export const LAYER_KINDS = ['base', 'workspace', 'toolkit'] as const
export type LayerKind = (typeof LAYER_KINDS)[number]

export interface LayerRef {
  /** sha256 of the EROFS layer file: `sha256:<64 hex>`. */
  digest: string
  size: number
  kind: LayerKind
  /** sha256 of the uncompressed OCI layer tar the layer stands for. */
  diffId?: string
}

export interface ImageConfig {
  env: string[]
  entrypoint: string[]
  cmd: string[]
  workdir: string
  user: string
  labels: Record<string, string>
}

export interface ImageSource {
  type: 'oci-archive' | 'docker-archive' | 'oci-layout' | 'rootfs' | 'registry' | 's3' | 'compose'
  ref: string
  /** Digest of the source manifest, where the source had one. */
  digest?: string
  platform?: string
}

export interface ImageManifest {
  schemaVersion: 1
  mediaType: typeof MANIFEST_MEDIA_TYPE
  layers: LayerRef[]
  config: ImageConfig
  source: ImageSource
  created: string
}

export interface ImageRef {
  name: string
  tag?: string
  digest?: string
}

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/
const NAME_COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*'
// A name may start with a registry host as Docker's reference grammar has
// it, so that pulled images keep their origin (localhost:5000/team/app): a
// first component is a host when it is `localhost` or holds a `.` or a
// `:port`; otherwise it is an ordinary lowercase component.
const DOMAIN_COMPONENT = '[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?'
const HOST = `(?:localhost(?::[0-9]+)?|${DOMAIN_COMPONENT}(?:\\.${DOMAIN_COMPONENT})+(?::[0-9]+)?|${DOMAIN_COMPONENT}:[0-9]+)`
const NAME_RE = new RegExp(`^(?:${HOST}/)?${NAME_COMPONENT}(?:/${NAME_COMPONENT})*$`)
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/

export function emptyConfig(): ImageConfig {
  return { env: [], entrypoint: [], cmd: [], workdir: '', user: '', labels: {} }
}

export function isDigest(s: string): boolean {
  return DIGEST_RE.test(s)
}

/** The OCI digest grammar (`algorithm:encoded`), any algorithm. */
const ANY_DIGEST_RE = /^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$/

/**
 * Checks a digest found in a document (descriptor, diff_id): a well-formed
 * digest of another algorithm (`sha512:…`) is IMAGE_UNSUPPORTED_MEDIA_TYPE,
 * as the document is valid and only this reader lacks the algorithm; one
 * that is no digest at all, or a malformed sha256 one, is IMAGE_BAD_MANIFEST.
 */
export function checkDocumentDigest(s: string, what: string): void {
  if (isDigest(s)) return
  if (ANY_DIGEST_RE.test(s) && !s.startsWith('sha256:')) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `${what} ${JSON.stringify(s)}: digest algorithm ${s.slice(0, s.indexOf(':'))} is not supported (only sha256)`)
  }
  throw new StrataError('IMAGE_BAD_MANIFEST', `${what} ${JSON.stringify(s)} is not a sha256:<64 hex> digest`)
}

export function assertDigest(s: string, what = 'digest'): string {
  if (!isDigest(s)) throw new StrataError('IMAGE_INVALID_REFERENCE', `${what} ${JSON.stringify(s)} is not sha256:<64 hex>`)
  return s
}

export function digestHex(digest: string): string {
  return assertDigest(digest).slice('sha256:'.length)
}

export function sha256Digest(data: Uint8Array | string): string {
  return 'sha256:' + crypto.createHash('sha256').update(data).digest('hex')
}

export function isValidName(name: string): boolean {
  return name.length <= 255 && NAME_RE.test(name)
}

export function isValidTag(tag: string): boolean {
  return TAG_RE.test(tag)
}

/** Parses `NAME`, `NAME:TAG` or `NAME@sha256:…` (a port in a host part is not a tag). */
export function parseImageRef(input: string): ImageRef {
  let rest = input
  let digest: string | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    assertDigest(digest, `image reference ${JSON.stringify(input)}:`)
  }
  let tag: string | undefined
  const colon = rest.lastIndexOf(':')
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!isValidTag(tag)) {
      // a tag that only breaks the length rule is told so: the grammar alone would not say what is wrong
      const why = tag.length > 128 && TAG_RE.test(tag.slice(0, 128)) ? `${tag.length} characters, at most 128` : 'a tag is [A-Za-z0-9_][A-Za-z0-9._-]*, at most 128 characters'
      throw new StrataError('IMAGE_INVALID_REFERENCE', `invalid tag ${JSON.stringify(tag)} in ${JSON.stringify(input)} (${why})`)
    }
  }
  if (!isValidName(rest)) {
    const why = rest.length > 255 && NAME_RE.test(rest) ? `${rest.length} characters, at most 255` : 'lowercase [a-z0-9] components joined by . _ - and /, optionally after a registry HOST[:PORT]/; at most 255 characters'
    throw new StrataError('IMAGE_INVALID_REFERENCE', `invalid image name ${JSON.stringify(rest)} (${why})`)
  }
  const ref: ImageRef = { name: rest }
  if (tag !== undefined) ref.tag = tag
  if (digest !== undefined) ref.digest = digest
  if (ref.tag === undefined && ref.digest === undefined) ref.tag = DEFAULT_TAG
  return ref
}

export function formatImageRef(ref: ImageRef): string {
  return ref.digest ? `${ref.name}@${ref.digest}` : `${ref.name}:${ref.tag ?? DEFAULT_TAG}`
}

/** Checks a parsed manifest's shape; throws IMAGE_BAD_MANIFEST naming the first problem. */
export function validateManifest(m: unknown): ImageManifest {
  const bad = (why: string): never => {
    throw new StrataError('IMAGE_BAD_MANIFEST', `image manifest: ${why}`)
  }
  if (typeof m !== 'object' || m === null || Array.isArray(m)) bad('not a JSON object')
  const o = m as Record<string, unknown>
  if (o.schemaVersion !== 1) bad('schemaVersion must be 1')
  if (o.mediaType !== MANIFEST_MEDIA_TYPE) bad(`mediaType must be ${MANIFEST_MEDIA_TYPE}`)
  if (!Array.isArray(o.layers) || o.layers.length === 0) bad('layers must be a non-empty array')
  for (const [i, l] of (o.layers as unknown[]).entries()) {
    if (typeof l !== 'object' || l === null) bad(`layers[${i}] is not an object`)
    const layer = l as Record<string, unknown>
    if (typeof layer.digest !== 'string' || !isDigest(layer.digest)) bad(`layers[${i}].digest is not sha256:<hex>`)
    if (!Number.isSafeInteger(layer.size) || (layer.size as number) < 0) bad(`layers[${i}].size is not a size`)
    if (!LAYER_KINDS.includes(layer.kind as LayerKind)) bad(`layers[${i}].kind must be one of ${LAYER_KINDS.join(', ')}`)
    if (layer.diffId !== undefined && (typeof layer.diffId !== 'string' || !isDigest(layer.diffId))) bad(`layers[${i}].diffId is not sha256:<hex>`)
  }
  const c = o.config as Record<string, unknown> | undefined
  if (typeof c !== 'object' || c === null) bad('config is missing')
  const cfg = c as Record<string, unknown>
  for (const k of ['env', 'entrypoint', 'cmd'] as const) {
    if (!Array.isArray(cfg[k]) || !(cfg[k] as unknown[]).every((x) => typeof x === 'string')) bad(`config.${k} must be an array of strings`)
  }
  for (const k of ['workdir', 'user'] as const) if (typeof cfg[k] !== 'string') bad(`config.${k} must be a string`)
  if (typeof cfg.labels !== 'object' || cfg.labels === null || Array.isArray(cfg.labels)) bad('config.labels must be an object')
  const s = o.source as Record<string, unknown> | undefined
  if (typeof s !== 'object' || s === null || typeof s.type !== 'string' || typeof s.ref !== 'string') bad('source must be {type, ref}')
  if (typeof o.created !== 'string') bad('created must be an ISO time')
  return m as ImageManifest
}

/** The exact bytes a manifest is stored and addressed by. */
export function encodeManifest(m: ImageManifest): Buffer {
  return Buffer.from(JSON.stringify(m, null, 2) + '\n')
}
