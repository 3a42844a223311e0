// Registry credentials and the WWW-Authenticate challenge grammar
// (RFC 7235 auth-params, as the distribution token spec uses them).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { StrataError } from '../../../fs/common/errors.js'
import { hostName } from './reference.js'

export interface Credentials {
  username: string
  password: string
}

export interface Challenge {
  /** lower-cased: `bearer`, `basic`, … */
  scheme: string
  params: Record<string, string>
}

/** The auth file credentials are looked up in: $REGISTRY_AUTH_FILE, else ~/.docker/config.json. */
export function registryAuthFile(env: NodeJS.ProcessEnv = process.env): string {
  return env.REGISTRY_AUTH_FILE || path.join(env.HOME || os.homedir(), '.docker', 'config.json')
}

/**
 * Credentials for `host`, first found wins: explicit username/password, the
 * STRATA_REGISTRY_USER / STRATA_REGISTRY_PASSWORD environment (each half of
 * the explicit pair may come from it; a half missing everywhere is
 * INVALID_ARGUMENT), then the `auths` of $REGISTRY_AUTH_FILE or
 * ~/.docker/config.json. Undefined means anonymous.
 */
export function resolveCredentials(
  host: string,
  opts: { username?: string; password?: string } = {},
  env: NodeJS.ProcessEnv = process.env,
): Credentials | undefined {
  // A user without a password (or the reverse) is a mistake, not an empty
  // password: registries refuse that as if it were wrong. The other half may
  // come from the environment; empty variables count as unset.
  const envUser = env.STRATA_REGISTRY_USER || undefined
  const envPassword = env.STRATA_REGISTRY_PASSWORD || undefined
  if (opts.username !== undefined || opts.password !== undefined || envUser !== undefined || envPassword !== undefined) {
    const username = opts.username ?? envUser
    const password = opts.password ?? envPassword
    if (username === undefined) throw new StrataError('INVALID_ARGUMENT', `registry credentials for ${host}: a password without a user name (give the user, or set STRATA_REGISTRY_USER)`)
    if (password === undefined) throw new StrataError('INVALID_ARGUMENT', `registry credentials for ${host}: user ${JSON.stringify(username)} has no password (give it, or set STRATA_REGISTRY_PASSWORD)`)
    return { username, password }
  }
  const file = registryAuthFile(env)
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    return undefined
  }
  let cfg: { auths?: Record<string, { auth?: string; username?: string; password?: string }> }
  try {
    cfg = JSON.parse(text)
  } catch (e) {
    throw new StrataError('BAD_CONFIG', `registry auth file ${file} is not JSON`, { cause: e })
  }
  const auths = cfg.auths ?? {}
  const wanted = new Set([host, hostName(host)])
  if (host === 'registry-1.docker.io') for (const k of ['docker.io', 'index.docker.io', 'https://index.docker.io/v1/']) wanted.add(k)
  for (const [key, entry] of Object.entries(auths)) {
    // keys are "host[:port]", optionally with a scheme and a path
    const bare = key.replace(/^[a-z]+:\/\//, '').replace(/\/.*$/, '')
    if (!wanted.has(key) && bare !== host) continue
    if (entry.auth) {
      const decoded = Buffer.from(entry.auth, 'base64').toString('utf8')
      const colon = decoded.indexOf(':')
      if (colon < 0) throw new StrataError('BAD_CONFIG', `registry auth file ${file}: auths[${JSON.stringify(key)}].auth is not base64 of user:password`)
      return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) }
    }
    if (entry.username !== undefined) return { username: entry.username, password: entry.password ?? '' }
  }
  return undefined
}

export function basicAuthorization(c: Credentials): string {
  return 'Basic ' + Buffer.from(`${c.username}:${c.password}`).toString('base64')
}

/**
 * Parses a WWW-Authenticate header value into its challenges, e.g.
 * `Bearer realm="https://auth/token",service="reg",scope="repository:a:pull"`.
 * Commas inside quoted strings do not split.
 */
export function parseWwwAuthenticate(header: string): Challenge[] {
  const out: Challenge[] = []
  let i = 0
  const n = header.length
  const skipWs = () => {
    while (i < n && (header[i] === ' ' || header[i] === '\t')) i++
  }
  const token = () => {
    const start = i
    while (i < n && /[!#$%&'*+\-.^_`|~0-9A-Za-z]/.test(header[i]!)) i++
    return header.slice(start, i)
  }
  while (i < n) {
    skipWs()
    if (header[i] === ',') {
      i++
      continue
    }
    const scheme = token()
    if (!scheme) break
    const ch: Challenge = { scheme: scheme.toLowerCase(), params: {} }
    out.push(ch)
    // auth-params: name=value pairs separated by commas, until the next scheme
    for (;;) {
      skipWs()
      const save = i
      const name = token()
      skipWs()
      if (!name || header[i] !== '=') {
        i = save
        break
      }
      i++
      skipWs()
      let value = ''
      if (header[i] === '"') {
        i++
        while (i < n && header[i] !== '"') {
          if (header[i] === '\\' && i + 1 < n) i++
          value += header[i]
          i++
        }
        i++
      } else {
        value = token()
      }
      ch.params[name.toLowerCase()] = value
      skipWs()
      if (header[i] === ',') i++
      else break
    }
  }
  return out
}
