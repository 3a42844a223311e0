// `docker://HOST[:PORT]/REPO[:TAG][@sha256:…]` references and the endpoint
// (scheme + host) they name.
import { StrataError } from '../../../fs/common/errors.js'
import { DEFAULT_TAG, isDigest, isValidTag } from '../types.js'

export interface RegistryRef {
  /** `host[:port]` exactly as written (the Docker Hub alias is mapped, see below). */
  host: string
  /** repository path inside the registry, e.g. `team/app` */
  repo: string
  tag?: string
  digest?: string
}

const COMPONENT = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*'
const REPO_RE = new RegExp(`^${COMPONENT}(?:/${COMPONENT})*$`)
const HOST_RE = /^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]{1,5})?$/

/**
 * Parses `docker://HOST[:PORT]/REPO[:TAG][@DIGEST]`. The host is always the
 * first path component (there is no implicit Docker Hub). With neither tag
 * nor digest the tag is `latest`.
 */
export function parseRegistryUrl(url: string): RegistryRef {
  const bad = (why: string): never => {
    throw new StrataError('IMAGE_INVALID_REFERENCE', `registry reference ${JSON.stringify(url)}: ${why} (expected docker://HOST[:PORT]/REPO[:TAG][@sha256:…])`)
  }
  if (!url.startsWith('docker://')) bad('must start with docker://')
  let rest = url.slice('docker://'.length)
  const slash = rest.indexOf('/')
  if (slash <= 0) bad('no HOST/REPO')
  let host = rest.slice(0, slash)
  rest = rest.slice(slash + 1)
  if (!HOST_RE.test(host)) bad(`invalid host ${JSON.stringify(host)}`)
  const port = /:([0-9]+)$/.exec(host)?.[1]
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) bad(`port ${port} is out of range (1-65535)`)
  if (host === 'docker.io' || host === 'index.docker.io') host = 'registry-1.docker.io'
  let digest: string | undefined
  const at = rest.indexOf('@')
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!isDigest(digest)) bad(`digest ${JSON.stringify(digest)} is not sha256:<64 hex>`)
  }
  let tag: string | undefined
  const colon = rest.lastIndexOf(':')
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!isValidTag(tag)) bad(`invalid tag ${JSON.stringify(tag)}`)
  }
  if (!REPO_RE.test(rest) || rest.length > 255) bad(`invalid repository ${JSON.stringify(rest)}`)
  const ref: RegistryRef = { host, repo: rest }
  if (tag !== undefined) ref.tag = tag
  if (digest !== undefined) ref.digest = digest
  if (tag === undefined && digest === undefined) ref.tag = DEFAULT_TAG
  return ref
}

export function formatRegistryUrl(ref: RegistryRef): string {
  return `docker://${ref.host}/${ref.repo}${ref.tag !== undefined ? `:${ref.tag}` : ''}${ref.digest !== undefined ? `@${ref.digest}` : ''}`
}

/** The host name without port or brackets. */
export function hostName(host: string): string {
  if (host.startsWith('[')) return host.slice(1, host.indexOf(']'))
  const colon = host.lastIndexOf(':')
  return colon >= 0 ? host.slice(0, colon) : host
}

/** http for `insecure`, https otherwise; when unset, http only for loopback names. */
export function registryScheme(host: string, insecure?: boolean): 'http' | 'https' {
  if (insecure !== undefined) return insecure ? 'http' : 'https'
  const h = hostName(host)
  return h === 'localhost' || h === '127.0.0.1' || h === '::1' || /^127\./.test(h) ? 'http' : 'https'
}
