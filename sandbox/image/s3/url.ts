// `s3://BUCKET/PREFIX` (push) and `s3://BUCKET/PREFIX/NAME[:TAG|@DIGEST]`
// (pull) URLs, and the object keys of the bucket layout:
//   PREFIX/blobs/sha256/<hex>       layer EROFS files, byte-identical to the DFS blobs
//   PREFIX/manifests/sha256/<hex>   manifest JSON bytes
//   PREFIX/tags/<name>/<tag>        "sha256:<hex>\n", written last
import { StrataError } from '../../../fs/common/errors.js'
import { DEFAULT_TAG, digestHex, isDigest, isValidName, isValidTag, type ImageRef } from '../types.js'

/** A bucket and a key prefix (no leading or trailing slash; '' for the bucket root). */
export interface S3Location {
  bucket: string
  prefix: string
}

/**
 * A pull URL. The split between PREFIX and NAME is ambiguous when NAME has a
 * slash (`s3://b/x/team/app:v1`), so every split is listed, longest prefix
 * first; the puller takes the one whose tag or manifest object exists.
 */
export interface S3ImageUrl {
  bucket: string
  candidates: Array<{ prefix: string; ref: ImageRef }>
}

// Bucket names as S3 documents them (3-63 chars, lowercase letters, digits,
// dots and hyphens, starting and ending with a letter or digit), plus
// underscores, which some S3-compatible stores and legacy buckets allow.
const BUCKET_RE = /^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/

function invalid(url: string, why: string, form: string): never {
  throw new StrataError('IMAGE_INVALID_REFERENCE', `S3 URL ${JSON.stringify(url)}: ${why} (expected ${form})`)
}

function split(url: string, form: string): { bucket: string; parts: string[] } {
  if (!url.startsWith('s3://')) invalid(url, 'the scheme must be s3://', form)
  const rest = url.slice('s3://'.length)
  if (/[?#\\\s]/.test(rest)) invalid(url, 'query strings, fragments, backslashes and spaces are not allowed', form)
  const [bucket = '', ...parts] = rest.replace(/\/+$/, '').split('/')
  if (bucket === '') invalid(url, 'the bucket is missing', form)
  if (!BUCKET_RE.test(bucket) || bucket.includes('..')) invalid(url, `${JSON.stringify(bucket)} is not a valid bucket name`, form)
  for (const p of parts) {
    if (p === '') invalid(url, 'empty path segment (//)', form)
    if (p === '.' || p === '..') invalid(url, `path segment ${JSON.stringify(p)} is not allowed`, form)
  }
  return { bucket, parts }
}

/** Parses a push destination `s3://BUCKET[/PREFIX]`; IMAGE_INVALID_REFERENCE when malformed. */
export function parseS3Location(url: string): S3Location {
  const form = 's3://BUCKET[/PREFIX]'
  const { bucket, parts } = split(url, form)
  for (const p of parts) if (/[:@]/.test(p)) invalid(url, `a push destination names no image (${JSON.stringify(p)}); the image's own name and tag are used`, form)
  return { bucket, prefix: parts.join('/') }
}

/** Parses a pull source `s3://BUCKET[/PREFIX]/NAME[:TAG|@sha256:…]`; IMAGE_INVALID_REFERENCE when malformed. */
export function parseS3ImageUrl(url: string): S3ImageUrl {
  const form = 's3://BUCKET[/PREFIX]/NAME[:TAG|@sha256:…]'
  const { bucket, parts } = split(url, form)
  if (parts.length === 0) invalid(url, 'the image name is missing', form)
  let last = parts[parts.length - 1]!
  let digest: string | undefined
  let tag: string | undefined
  const at = last.indexOf('@')
  if (at >= 0) {
    digest = last.slice(at + 1)
    last = last.slice(0, at)
    if (!isDigest(digest)) invalid(url, `${JSON.stringify(digest)} is not sha256:<64 hex>`, form)
  }
  const colon = last.indexOf(':')
  if (colon >= 0) {
    tag = last.slice(colon + 1)
    last = last.slice(0, colon)
    if (!isValidTag(tag)) invalid(url, `invalid tag ${JSON.stringify(tag)}`, form)
  }
  const segs = [...parts.slice(0, -1), last]
  const candidates: S3ImageUrl['candidates'] = []
  // longest prefix (shortest name) first
  for (let i = segs.length - 1; i >= 0; i--) {
    const name = segs.slice(i).join('/')
    if (!isValidName(name)) continue
    const ref: ImageRef = { name }
    if (tag !== undefined) ref.tag = tag
    if (digest !== undefined) ref.digest = digest
    if (tag === undefined && digest === undefined) ref.tag = DEFAULT_TAG
    candidates.push({ prefix: segs.slice(0, i).join('/'), ref })
  }
  if (candidates.length === 0) invalid(url, `${JSON.stringify(last)} is not a valid image name (lowercase [a-z0-9] components joined by . _ - and /)`, form)
  return { bucket, candidates }
}

/**
 * Keeps the one PREFIX/NAME split of a pull URL whose PREFIX is `prefix`
 * (`--prefix`: '' or '/' is the bucket root; slashes around it are dropped);
 * IMAGE_INVALID_REFERENCE naming the splits there are when none has it.
 */
export function withPrefix(u: S3ImageUrl, url: string, prefix: string): S3ImageUrl {
  const want = prefix.replace(/^\/+|\/+$/g, '')
  const kept = u.candidates.filter((c) => c.prefix === want)
  if (kept.length === 0) {
    const have = u.candidates.map((c) => JSON.stringify(c.prefix)).join(', ')
    throw new StrataError('IMAGE_INVALID_REFERENCE', `S3 URL ${JSON.stringify(url)}: --prefix ${JSON.stringify(prefix)} is not a PREFIX of it before a valid image name (it can be ${have})`)
  }
  return { bucket: u.bucket, candidates: kept }
}

function join(prefix: string, rest: string): string {
  return prefix ? `${prefix}/${rest}` : rest
}

/** `PREFIX/blobs/sha256/<hex>`: a layer's EROFS bytes. */
export function blobKey(prefix: string, digest: string): string {
  return join(prefix, `blobs/sha256/${digestHex(digest)}`)
}

/** `PREFIX/manifests/sha256/<hex>`: a manifest's exact bytes. */
export function manifestKey(prefix: string, digest: string): string {
  return join(prefix, `manifests/sha256/${digestHex(digest)}`)
}

/** `PREFIX/tags/<name>/<tag>`: `sha256:<hex>\n` of the manifest (a name's slashes stay slashes). */
export function tagKey(prefix: string, name: string, tag: string): string {
  return join(prefix, `tags/${name}/${tag}`)
}

/** `s3://bucket/prefix` for messages. */
export function formatS3(bucket: string, key = ''): string {
  return `s3://${bucket}${key ? `/${key}` : ''}`
}
