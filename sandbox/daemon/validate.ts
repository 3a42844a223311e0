// Checks of every request body the daemon takes. Anything malformed is an
// INVALID_ARGUMENT naming the field; unknown fields are refused too, so a
// misspelt option never silently does nothing.
import { StrataError } from '../../fs/common/errors.js'
import { parseImageRef } from '../image/types.js'
import { checkMountTarget } from '../rootfs/resolve.js'
import type { CreateSandboxRequest, ExecRequest, ListFilter, SandboxState, WarmPoolSpec } from './types.js'

const bad = (msg: string): never => {
  throw new StrataError('INVALID_ARGUMENT', msg)
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function only(o: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(o)) if (!allowed.includes(k)) bad(`${what}: unknown field ${JSON.stringify(k)} (known: ${allowed.join(', ')})`)
}

function str(v: unknown, what: string, max = 4096): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > max || v.includes('\0')) bad(`${what} must be a non-empty string of at most ${max} characters without NUL`)
  return v as string
}

function absPath(v: unknown, what: string): string {
  const s = str(v, what)
  if (!s.startsWith('/')) bad(`${what} must be an absolute path`)
  return s
}

/** An absolute path in the sandbox (file routes), as create's workdir and exec's cwd are checked. */
export function validatePath(v: unknown, what: string): string {
  return absPath(v, what)
}

/** A user as create and exec take it: a name or uid, 1–64 characters, no NUL. */
export function validateUser(v: unknown, what: string): string {
  return str(v, what, 64)
}

/**
 * An image reference, with the image store's parser: IMAGE_INVALID_REFERENCE
 * naming the field for one the store would refuse (`BAD::x`), so the SDK, the
 * CLI and the warm pool config refuse it up front.
 */
function imageRef(v: unknown, what: string): string {
  const s = str(v, what, 512)
  try {
    parseImageRef(s)
  } catch (e) {
    throw new StrataError('IMAGE_INVALID_REFERENCE', `${what}: ${(e as StrataError).reason ?? String(e)}`, { cause: e })
  }
  return s
}

function stringMap(v: unknown, what: string, keyRe: RegExp, maxEntries: number, maxValue: number): Record<string, string> {
  if (!isObject(v)) return bad(`${what} must be an object of strings`)
  const out: Record<string, string> = {}
  const entries = Object.entries(v)
  if (entries.length > maxEntries) bad(`${what}: at most ${maxEntries} entries`)
  for (const [k, val] of entries) {
    if (!keyRe.test(k)) bad(`${what}: invalid key ${JSON.stringify(k)}`)
    if (typeof val !== 'string' || val.length > maxValue || val.includes('\0')) bad(`${what}.${k} must be a string of at most ${maxValue} characters without NUL`)
    out[k] = val as string
  }
  return out
}

function intIn(v: unknown, what: string, min: number, max: number): number {
  if (!Number.isSafeInteger(v) || (v as number) < min || (v as number) > max) bad(`${what} must be an integer in [${min}, ${max}]`)
  return v as number
}

const ENV_KEY = /^[^=\0]{1,256}$/
const LABEL_KEY = /^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$/
const HOSTNAME = /^[a-zA-Z0-9][a-zA-Z0-9.-]{0,62}$/
export const MAX_MOUNTS = 64
export const MAX_TOOLKITS = 32

export function validateCreate(body: unknown): CreateSandboxRequest {
  if (!isObject(body)) return bad('the request body must be a JSON object')
  only(body, ['backend', 'image', 'base', 'workspace', 'toolkits', 'mounts', 'resources', 'lifetime', 'env', 'workdir', 'user', 'labels', 'network', 'hostname', 'idempotencyKey'], 'create')
  const r: CreateSandboxRequest = {}
  if (body.backend !== undefined) {
    if (body.backend !== 'container') {
      if (['microvm', 'vm', 'fncall'].includes(body.backend as string)) throw new StrataError('NOT_IMPLEMENTED', `backend ${JSON.stringify(body.backend)} is not available on this node (container is)`)
      bad(`backend must be one of container, microvm, vm, fncall`)
    }
    r.backend = 'container'
  }
  if (body.image !== undefined) r.image = imageRef(body.image, 'image')
  if (body.base !== undefined) r.base = imageRef(body.base, 'base')
  if (body.workspace !== undefined) r.workspace = imageRef(body.workspace, 'workspace')
  if (body.toolkits !== undefined) {
    if (!Array.isArray(body.toolkits) || body.toolkits.length > MAX_TOOLKITS) bad(`toolkits must be an array of at most ${MAX_TOOLKITS} image references`)
    r.toolkits = (body.toolkits as unknown[]).map((t, i) => imageRef(t, `toolkits[${i}]`))
  }
  if ((r.image === undefined) === (r.base === undefined)) bad('give exactly one of image or base')
  if (r.image !== undefined && (r.workspace !== undefined || r.toolkits !== undefined)) bad('workspace and toolkits go with base, not image')
  if (body.mounts !== undefined) {
    if (!Array.isArray(body.mounts) || body.mounts.length > MAX_MOUNTS) bad(`mounts must be an array of at most ${MAX_MOUNTS} {source, target}`)
    r.mounts = (body.mounts as unknown[]).map((m, i) => {
      if (!isObject(m)) return bad(`mounts[${i}] must be {source, target}`)
      only(m, ['source', 'target'], `mounts[${i}]`)
      const source = absPath(m.source, `mounts[${i}].source`)
      checkMountTarget(m.target, `mounts[${i}].target`)
      return { source, target: m.target as string }
    })
    const seen = new Set<string>()
    for (const m of r.mounts) {
      if (seen.has(m.target)) throw new StrataError('ROOTFS_BAD_MOUNT_TARGET', `dataset target ${m.target} is given twice`, { detail: { target: m.target } })
      seen.add(m.target)
    }
  }
  if (body.resources !== undefined) {
    const x = body.resources
    if (!isObject(x)) return bad('resources must be an object')
    only(x, ['cpu', 'memoryMiB', 'pids'], 'resources')
    r.resources = {}
    if (x.cpu !== undefined) {
      if (typeof x.cpu !== 'number' || !Number.isFinite(x.cpu) || x.cpu < 0.01 || x.cpu > 1024) bad('resources.cpu must be a number in [0.01, 1024]')
      r.resources.cpu = x.cpu as number
    }
    if (x.memoryMiB !== undefined) r.resources.memoryMiB = intIn(x.memoryMiB, 'resources.memoryMiB', 8, 16 * 1024 * 1024)
    if (x.pids !== undefined) r.resources.pids = intIn(x.pids, 'resources.pids', 8, 4 * 1024 * 1024)
  }
  if (body.lifetime !== undefined) {
    const x = body.lifetime
    if (!isObject(x)) return bad('lifetime must be an object')
    only(x, ['idleTtlSec', 'maxLifetimeSec'], 'lifetime')
    r.lifetime = {}
    if (x.idleTtlSec !== undefined) r.lifetime.idleTtlSec = intIn(x.idleTtlSec, 'lifetime.idleTtlSec', 1, 365 * 86400)
    if (x.maxLifetimeSec !== undefined) r.lifetime.maxLifetimeSec = intIn(x.maxLifetimeSec, 'lifetime.maxLifetimeSec', 1, 365 * 86400)
  }
  if (body.env !== undefined) r.env = stringMap(body.env, 'env', ENV_KEY, 1024, 128 * 1024)
  if (body.labels !== undefined) r.labels = stringMap(body.labels, 'labels', LABEL_KEY, 64, 256)
  if (body.workdir !== undefined) r.workdir = absPath(body.workdir, 'workdir')
  if (body.user !== undefined) r.user = str(body.user, 'user', 64)
  if (body.network !== undefined) {
    if (body.network !== 'none' && body.network !== 'host') bad(`network must be 'none' or 'host'`)
    r.network = body.network as 'none' | 'host'
  }
  if (body.hostname !== undefined) {
    if (typeof body.hostname !== 'string' || !HOSTNAME.test(body.hostname)) bad('hostname must be a host name of at most 63 characters')
    r.hostname = body.hostname as string
  }
  if (body.idempotencyKey !== undefined) r.idempotencyKey = str(body.idempotencyKey, 'idempotencyKey', 256)
  return r
}

export const MAX_POOL_COUNT = 1024

/** The daemon config's `warmPool`: BAD_CONFIG naming the entry and field. */
export function validateWarmPool(v: unknown): WarmPoolSpec[] {
  if (v === undefined) return []
  if (!Array.isArray(v)) throw new StrataError('BAD_CONFIG', 'warmPool must be an array of {image, count, resources?, network?}')
  return v.map((e: unknown, i) => {
    try {
      if (!isObject(e)) return bad('must be {image, count, resources?, network?}')
      only(e, ['image', 'count', 'resources', 'network'], 'entry')
      // the create checks give the same rules (and messages) for image, resources and network
      const c = validateCreate({ image: e.image, ...(e.resources !== undefined ? { resources: e.resources } : {}), ...(e.network !== undefined ? { network: e.network } : {}) })
      return { image: c.image!, count: intIn(e.count, 'count', 1, MAX_POOL_COUNT), ...(c.resources ? { resources: c.resources } : {}), ...(c.network ? { network: c.network } : {}) }
    } catch (err) {
      throw new StrataError('BAD_CONFIG', `warmPool[${i}]: ${(err as StrataError).reason ?? (err as Error).message}`, { cause: err })
    }
  })
}

/**
 * Whether a create asks for nothing a sandbox started ahead of it could
 * still get (see WarmPoolSpec): image, resources and network are matched
 * against the pools; labels, lifetime and idempotency are the daemon's.
 */
export function poolEligible(req: CreateSandboxRequest): boolean {
  return req.image !== undefined && !req.mounts?.length && (req.env === undefined || Object.keys(req.env).length === 0) &&
    req.workdir === undefined && req.user === undefined && req.hostname === undefined
}

export const MAX_EXEC_TIMEOUT_MS = 7 * 86400 * 1000

export function validateExec(body: unknown, withStdin: boolean): ExecRequest {
  if (!isObject(body)) return bad('the request body must be a JSON object')
  only(body, withStdin ? ['cmd', 'env', 'cwd', 'user', 'timeoutMs', 'maxOutputBytes', 'stdin'] : ['cmd', 'env', 'cwd', 'user', 'timeoutMs', 'maxOutputBytes'], withStdin ? 'exec' : 'process')
  let cmd: string | string[]
  if (typeof body.cmd === 'string') cmd = str(body.cmd, 'cmd', 1024 * 1024)
  else if (Array.isArray(body.cmd) && body.cmd.length > 0 && body.cmd.length <= 65536) cmd = body.cmd.map((a, i) => {
    if (typeof a !== 'string' || a.includes('\0')) bad(`cmd[${i}] must be a string without NUL`)
    return a as string
  })
  else return bad('cmd must be a shell string or a non-empty array of arguments')
  if (Array.isArray(cmd) && cmd[0] === '') bad('cmd[0], the program, must not be empty')
  const r: ExecRequest = { cmd }
  if (body.env !== undefined) r.env = stringMap(body.env, 'env', ENV_KEY, 1024, 128 * 1024)
  if (body.cwd !== undefined) r.cwd = absPath(body.cwd, 'cwd')
  if (body.user !== undefined) r.user = str(body.user, 'user', 64)
  if (body.timeoutMs !== undefined) r.timeoutMs = intIn(body.timeoutMs, 'timeoutMs', 1, MAX_EXEC_TIMEOUT_MS)
  if (body.maxOutputBytes !== undefined) r.maxOutputBytes = intIn(body.maxOutputBytes, 'maxOutputBytes', 1, 64 * 1024 * 1024)
  if (body.stdin !== undefined) {
    if (typeof body.stdin !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(body.stdin)) bad('stdin must be base64')
    r.stdin = body.stdin as string
  }
  return r
}

const LIST_PARAMS = ['label', 'state']

/** `label=k=v` (repeatable) and `state=` query parameters. */
export function parseListFilter(q: URLSearchParams): ListFilter {
  for (const k of q.keys()) if (!LIST_PARAMS.includes(k)) bad(`unknown query parameter ${JSON.stringify(k)} (known: ${LIST_PARAMS.join(', ')})`)
  const f: ListFilter = {}
  for (const l of q.getAll('label')) {
    const eq = l.indexOf('=')
    if (eq <= 0) bad(`label filter ${JSON.stringify(l)} must be KEY=VALUE`)
    ;(f.labels ??= {})[l.slice(0, eq)] = l.slice(eq + 1)
  }
  const st = q.get('state')
  if (st !== null) f.state = st as SandboxState
  return validateListFilter(f)
}

/**
 * A list filter: labels as create takes them (a key no sandbox can carry is
 * an error, not an empty result), state one of the three.
 */
export function validateListFilter(v: unknown): ListFilter {
  if (v === undefined) return {}
  if (!isObject(v)) return bad('the list filter must be an object {labels?, state?}')
  only(v, ['labels', 'state'], 'list')
  const f: ListFilter = {}
  if (v.labels !== undefined) f.labels = stringMap(v.labels, 'labels', LABEL_KEY, 64, 256)
  if (v.state !== undefined) {
    if (!['creating', 'running', 'stopped'].includes(v.state as string)) bad('state must be creating, running or stopped')
    f.state = v.state as SandboxState
  }
  return f
}

export const SANDBOX_ID_RE = /^sb-[a-z0-9]{12}$/

export function checkSandboxId(id: string): string {
  if (!SANDBOX_ID_RE.test(id)) throw new StrataError('SANDBOX_NOT_FOUND', `no sandbox ${JSON.stringify(id.slice(0, 80))} (ids look like sb-xxxxxxxxxxxx)`)
  return id
}
