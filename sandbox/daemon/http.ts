// The node daemon's HTTP API (docs/sandbox-api.md): JSON bodies, NDJSON
// streams for command output, raw bytes for files and tar archives, bearer
// token on every route but /v1/health. Errors are `{code, message, detail?}`
// with an HTTP status derived from the code; clients match on `code`.
import crypto from 'node:crypto'
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import { pipeline } from 'node:stream/promises'
import { StrataError, fromSystemError, toStrataError, type ErrorCode } from '../../fs/common/errors.js'
import type { Logger } from '../../fs/common/log.js'
import type { AgentProcess, ExitInfo, FileEntry } from '../backends/agent/index.js'
import type { SandboxService } from './service.js'
import type { ExecRequest, OutputEvent } from './types.js'
import { parseListFilter, validateExec, validatePath, validateUser } from './validate.js'
import { WARNINGS_TRAILER, WarningsTrailer } from './warnings.js'

export const API_VERSION = 'v1'
/**
 * Sent on every response (`Strata-Api: v1`): how a client tells the daemon
 * from another HTTP server at the same address (the SDK refuses an answer
 * without it as NOT_A_STRATA_DAEMON).
 */
export const API_HEADER = 'strata-api'
/** JSON request bodies above this are refused (files and archives stream and have no limit). */
export const MAX_JSON_BODY = 4 * 1024 * 1024
/** exec output cap when the request gives none (the agent's exec default) */
export const DEFAULT_EXEC_OUTPUT = 1024 * 1024

const STATUS: Partial<Record<ErrorCode, number>> = {
  INVALID_ARGUMENT: 400, IMAGE_INVALID_REFERENCE: 400, ROOTFS_BAD_MOUNT_TARGET: 400, ROOTFS_BAD_DATASET: 400,
  UNAUTHENTICATED: 401,
  QUOTA_EXCEEDED: 403, SANDBOX_PERMISSION_DENIED: 403,
  NOT_FOUND: 404, SANDBOX_NOT_FOUND: 404, IMAGE_NOT_FOUND: 404, ROOTFS_DATASET_NOT_FOUND: 404,
  ALREADY_EXISTS: 409, IDEMPOTENCY_MISMATCH: 409,
  SANDBOX_GONE: 410,
  OUTPUT_LIMIT: 413,
  NOT_IMPLEMENTED: 501,
  SANDBOX_START_FAILED: 500,
  CAPACITY_UNAVAILABLE: 503, CLOSED: 503, SANDBOX_AGENT_UNREACHABLE: 503,
  TIMEOUT: 504,
}

/** `host:port` with a port in [0, 65535] (0 picks one); BAD_CONFIG otherwise. */
export function parseListen(listen: string): { host: string; port: number } {
  const i = listen.lastIndexOf(':')
  const ps = listen.slice(i + 1)
  const port = Number(ps)
  if (i <= 0 || !/^\d{1,5}$/.test(ps) || port > 65535) throw new StrataError('BAD_CONFIG', `listen address ${JSON.stringify(listen)} is not HOST:PORT with a port in [0, 65535]`)
  return { host: listen.slice(0, i), port }
}

/**
 * A failed listen in the catalogue's words. A busy port is INVALID_ARGUMENT,
 * as `cluster up --base-port` reports one, since another address is the fix.
 */
export function listenFailure(e: unknown, listen: string): StrataError {
  const code = (e as NodeJS.ErrnoException)?.code
  if (code === 'EADDRINUSE') return new StrataError('INVALID_ARGUMENT', `cannot listen on ${listen}: the address is already in use`, { cause: e })
  if (code === 'EADDRNOTAVAIL') return new StrataError('INVALID_ARGUMENT', `cannot listen on ${listen}: not an address of this machine`, { cause: e })
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return new StrataError('INVALID_ARGUMENT', `cannot listen on ${listen}: unknown host`, { cause: e })
  if (code === 'EACCES') return new StrataError('PERMISSION_DENIED', `cannot listen on ${listen}: permission denied (ports below 1024 need root)`, { cause: e })
  const sys = fromSystemError(e)
  return sys ? new StrataError(sys.code, `cannot listen on ${listen}: ${sys.reason}`, { cause: e }) : toStrataError(e)
}

/** Binds `listen` and lets it go again: a start-up check with the errors listen() would give. */
export async function probeListen(listen: string): Promise<number> {
  const { host, port } = parseListen(listen)
  const s = net.createServer()
  await new Promise<void>((resolve, reject) => {
    s.once('error', (e) => reject(listenFailure(e, listen)))
    s.listen({ port, host, exclusive: true }, () => resolve())
  })
  // the port bound: the one asked for, or the one the kernel picked for port 0
  const bound = (s.address() as net.AddressInfo).port
  await new Promise<void>((r) => s.close(() => r()))
  return bound
}

export function httpStatusOf(code: ErrorCode): number {
  return STATUS[code] ?? (code.startsWith('SANDBOX_') ? 422 : 500)
}

interface Ctx {
  req: http.IncomingMessage
  res: http.ServerResponse
  url: URL
  params: string[]
  /** the query parameters (the last value of each), already checked against the route's known ones */
  q: Record<string, string | undefined>
  signal: AbortSignal
}

type Handler = (c: Ctx) => Promise<void>

interface RouteOptions {
  /** false: no token needed (health) */
  auth?: boolean
  /**
   * The query parameters the route knows. Any other is refused before the
   * handler runs, so a misspelt one (`reclaim?x=1`) never does anything.
   */
  query?: readonly string[]
}

interface Route {
  method: string
  re: RegExp
  h: Handler
  auth: boolean
  query: readonly string[]
}

/** One running command started with POST …/processes, until its exit is streamed. */
interface ProcessEntry {
  sandboxId: string
  proc: AgentProcess
  pid: number
  reader: boolean
  release: () => void
  /** stdin writes are serialized (a second PUT waits for the first) */
  stdinBusy: Promise<void>
  /** whether the sandbox counted an OOM kill since the command started */
  oomSince: () => boolean
  expires?: NodeJS.Timeout
}

export interface SandboxHttpOptions {
  service: SandboxService
  token: string
  log: Logger
  version: string
  /** host:port ('127.0.0.1:0' picks a port) */
  listen: string
}

export class SandboxHttpServer {
  readonly #svc: SandboxService
  readonly #token: Buffer
  readonly #log: Logger
  readonly #version: string
  readonly #server: http.Server
  readonly #routes: Route[] = []
  readonly #procs = new Map<string, ProcessEntry>()
  readonly #listen: string
  #closed: Promise<void> | null = null

  constructor(o: SandboxHttpOptions) {
    this.#svc = o.service
    this.#token = Buffer.from(o.token)
    this.#log = o.log
    this.#version = o.version
    this.#listen = o.listen
    this.#server = http.createServer((req, res) => void this.#dispatch(req, res))
    this.#server.keepAliveTimeout = 30_000
    this.#server.headersTimeout = 30_000
    // streams (exec output, tar) may be long; a dead client is noticed by the socket closing
    this.#server.requestTimeout = 0
    this.#defineRoutes()
  }

  async listen(): Promise<string> {
    const { host, port } = parseListen(this.#listen)
    await new Promise<void>((resolve, reject) => {
      const onError = (e: Error) => reject(listenFailure(e, this.#listen))
      this.#server.once('error', onError)
      this.#server.listen(port, host, () => {
        this.#server.off('error', onError)
        resolve()
      })
    })
    return this.address
  }

  get address(): string {
    const a = this.#server.address() as AddressInfo
    return `${a.address}:${a.port}`
  }

  /** Stops accepting, ends open streams, kills processes nobody will read any more. Idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      for (const [key, p] of this.#procs) {
        p.proc.kill('SIGKILL')
        p.release()
        this.#procs.delete(key)
      }
      await new Promise<void>((r) => {
        this.#server.close(() => r())
        this.#server.closeAllConnections()
      })
    })()
    return this.#closed
  }

  // ---------------------------------------------------------------- plumbing

  #route(method: string, pattern: string, h: Handler, o: RouteOptions = {}): void {
    const re = new RegExp('^' + pattern.replace(/:([a-z]+)/g, '([^/]+)') + '$')
    this.#routes.push({ method, re, h, auth: o.auth ?? true, query: o.query ?? [] })
  }

  async #dispatch(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    res.setHeader(API_HEADER, API_VERSION)
    const ac = new AbortController()
    // the client went away: cancel what its request started
    res.on('close', () => ac.abort(new StrataError('CANCELLED', 'the client closed the connection')))
    let url: URL
    try {
      url = new URL(req.url ?? '/', 'http://x')
    } catch {
      return this.#error(res, new StrataError('INVALID_ARGUMENT', 'malformed request URL'))
    }
    try {
      let allowed: string[] = []
      for (const r of this.#routes) {
        const m = r.re.exec(url.pathname)
        if (!m) continue
        if (r.method !== req.method) {
          allowed.push(r.method)
          continue
        }
        if (r.auth) this.#authenticate(req)
        let params: string[]
        try {
          params = m.slice(1).map(decodeURIComponent)
        } catch {
          throw new StrataError('INVALID_ARGUMENT', `malformed percent-encoding in ${url.pathname}`)
        }
        const q = checkQuery(url, r.query)
        await r.h({ req, res, url, params, q, signal: ac.signal })
        return
      }
      allowed = [...new Set(allowed)]
      if (allowed.length) {
        res.setHeader('Allow', allowed.join(', '))
        throw new StrataError('INVALID_ARGUMENT', `${req.method} is not allowed on ${url.pathname} (allowed: ${allowed.join(', ')})`, { detail: { status: 405 } })
      }
      throw new StrataError('NOT_FOUND', `no route ${req.method} ${url.pathname}`)
    } catch (e) {
      // a client that closed the connection (a reader that had enough: `| head`, files.read's
      // maxBytes) cut its own stream: that is not a failure of the daemon to log with a stack
      this.#error(res, ac.signal.aborted ? ac.signal.reason : e)
    }
  }

  #authenticate(req: http.IncomingMessage): void {
    const h = req.headers.authorization ?? ''
    const m = /^Bearer (.+)$/.exec(h)
    const given = Buffer.from(m?.[1] ?? '')
    if (given.length !== this.#token.length || !crypto.timingSafeEqual(given, this.#token)) {
      throw new StrataError('UNAUTHENTICATED', m ? 'wrong bearer token' : 'an Authorization: Bearer <token> header is required (the token is in the cluster directory, sandbox.token)')
    }
  }

  #error(res: http.ServerResponse, e: unknown): void {
    const se = toStrataError(e)
    if (se.code === 'INTERNAL') this.#log.error('request failed', { err: e, stack: (e as Error)?.stack })
    if (res.headersSent) {
      // mid-stream: an error event if the stream is NDJSON, else cut the connection so the client sees a short body
      if (res.getHeader('content-type') === 'application/x-ndjson' && !res.writableEnded) {
        res.end(JSON.stringify({ type: 'error', code: se.code, message: se.reason }) + '\n')
      } else {
        res.destroy(se)
      }
      return
    }
    const status = (se.detail?.status as number | undefined) ?? httpStatusOf(se.code)
    json(res, status, se.toWire())
  }

  // ---------------------------------------------------------------- routes

  #defineRoutes(): void {
    const svc = this.#svc
    this.#route('GET', '/v1/health', async ({ res }) => json(res, 200, { ok: true, version: this.#version }), { auth: false })
    this.#route('GET', '/v1/node', async ({ res }) => json(res, 200, svc.nodeInfo(this.#version)))
    this.#route('POST', '/v1/node/reclaim', async ({ req, res }) => {
      await noFields(req, 'reclaim')
      json(res, 200, { removed: await svc.reclaimAll() })
    })

    this.#route('POST', '/v1/sandboxes', async ({ req, res }) => {
      const r = await svc.create(await readJson(req))
      json(res, r.replay ? 200 : 201, r.info)
    })
    this.#route('POST', '/v1/sandboxes/batch', async ({ req, res }) => {
      const body = await readJson(req)
      if (!body || typeof body !== 'object' || Array.isArray(body)) throw new StrataError('INVALID_ARGUMENT', 'body must be {spec, count}')
      const { spec, count, ...rest } = body as Record<string, unknown>
      if (Object.keys(rest).length) throw new StrataError('INVALID_ARGUMENT', `batch: unknown field ${JSON.stringify(Object.keys(rest)[0])} (known: spec, count)`)
      json(res, 200, await svc.createMany(spec, count as number))
    })
    this.#route('GET', '/v1/sandboxes', async ({ res, url }) => json(res, 200, { sandboxes: svc.list(parseListFilter(url.searchParams)) }), { query: ['label', 'state'] })
    this.#route('GET', '/v1/sandboxes/:id', async ({ res, params }) => json(res, 200, await svc.inspect(params[0]!)))
    this.#route('DELETE', '/v1/sandboxes/:id', async ({ res, q, params }) => {
      const wait = q.wait === undefined || flag(q.wait)
      await svc.delete(params[0]!, { wait })
      res.writeHead(wait ? 204 : 202).end()
    }, { query: ['wait'] })
    this.#route('POST', '/v1/sandboxes/:id/kill', async ({ req, res, params }) => {
      await noFields(req, 'kill')
      json(res, 200, await svc.kill(params[0]!))
    })
    this.#route('POST', '/v1/sandboxes/:id/keepalive', async ({ req, res, params }) => {
      await noFields(req, 'keepalive')
      json(res, 200, svc.touch(params[0]!))
    })

    // exec: run to completion, output streamed as NDJSON
    this.#route('POST', '/v1/sandboxes/:id/exec', async ({ req, res, params, signal }) => {
      const body = validateExec(await readJson(req), true)
      await svc.use(params[0]!, async (h, info) => {
        const oomBefore = h.oomKills()
        const proc = h.agent.spawn(body.cmd, { ...runOpts(body, info), maxOutputBytes: body.maxOutputBytes ?? DEFAULT_EXEC_OUTPUT, signal })
        if (body.stdin !== undefined) proc.stdin.end(Buffer.from(body.stdin, 'base64'))
        else proc.stdin.end()
        await streamProcess(res, proc, signal, () => h.oomKills() > oomBefore)
      })
    })

    // processes: started by one request, fed and read by others
    this.#route('POST', '/v1/sandboxes/:id/processes', async ({ req, res, params }) => {
      const body = validateExec(await readJson(req), false)
      const id = params[0]!
      let release!: () => void
      const held = new Promise<void>((r) => (release = r))
      let entry: ProcessEntry | undefined
      const started = new Promise<ProcessEntry>((resolve, reject) => {
        svc.use(id, async (h, info) => {
          const oomBefore = h.oomKills()
          const proc = h.agent.spawn(body.cmd, { ...runOpts(body, info), ...(body.maxOutputBytes ? { maxOutputBytes: body.maxOutputBytes } : {}) })
          const pid = await proc.pid
          entry = { sandboxId: id, proc, pid, reader: false, release, stdinBusy: Promise.resolve(), oomSince: () => h.oomKills() > oomBefore }
          resolve(entry)
          // counts as activity until its output has been read to the end (or the server closes)
          await held
        }).catch(reject)
      })
      const e = await started
      const key = `${id}/${e.pid}`
      this.#procs.set(key, e)
      // nobody ever reads it: do not keep it forever
      e.expires = setTimeout(() => this.#dropProcess(key, 'SIGKILL'), 10 * 60_000)
      e.expires.unref()
      json(res, 201, { pid: e.pid })
    })
    this.#route('GET', '/v1/sandboxes/:id/processes/:pid/output', async ({ res, params, signal }) => {
      const key = this.#procKey(params)
      const e = this.#procs.get(key)!
      if (e.reader) throw new StrataError('ALREADY_EXISTS', `process ${e.pid}'s output is already being read`)
      e.reader = true
      if (e.expires) clearTimeout(e.expires)
      try {
        await streamProcess(res, e.proc, signal, e.oomSince)
        this.#dropProcess(key)
      } catch (err) {
        // the command or its sandbox is gone: nothing more will come out of it
        if (!signal.aborted) this.#dropProcess(key)
        throw await this.#svc.explain(e.sandboxId, err)
      } finally {
        e.reader = false
      }
    })
    this.#route('PUT', '/v1/sandboxes/:id/processes/:pid/stdin', async ({ req, res, q, params }) => {
      const e = this.#procs.get(this.#procKey(params))!
      const eof = flag(q.eof)
      const prev = e.stdinBusy
      let done!: () => void
      e.stdinBusy = new Promise<void>((r) => (done = r))
      try {
        await prev
        const stdin = e.proc.stdin
        if (stdin.writableEnded || stdin.destroyed) throw new StrataError('CLOSED', `process ${e.pid}'s stdin is closed`)
        let bytes = 0
        for await (const c of req) {
          bytes += (c as Buffer).length
          if (!stdin.write(c)) {
            // drain, or the stream ends (the command exited): never wait forever
            await new Promise<void>((r) => {
              const done = () => { stdin.off('drain', done); stdin.off('close', done); stdin.off('error', done); r() }
              stdin.once('drain', done)
              stdin.once('close', done)
              stdin.once('error', done)
            })
            if (stdin.destroyed) throw new StrataError('CLOSED', `process ${e.pid}'s stdin closed while writing`)
          }
        }
        if (eof) e.proc.stdin.end()
        json(res, 200, { bytes })
      } finally {
        done()
      }
    }, { query: ['eof'] })
    this.#route('POST', '/v1/sandboxes/:id/processes/:pid/signal', async ({ req, res, params }) => {
      const e = this.#procs.get(this.#procKey(params))!
      const { signal: sig, group } = signalBody(await readJson(req, true))
      try {
        e.proc.kill(sig as NodeJS.Signals | number, { group })
      } catch (err) {
        throw new StrataError('INVALID_ARGUMENT', `signal ${String(sig)}: ${(err as StrataError).reason ?? (err as Error).message}`, { cause: err })
      }
      json(res, 200, { ok: true })
    })

    // files: `path` is required and absolute (filePath), `user` checked like exec's (userOf)
    this.#route('GET', '/v1/sandboxes/:id/files', async ({ res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      const range = { ...intParam(q, 'offset'), ...intParam(q, 'length') }
      await svc.use(params[0]!, async (h, info) => {
        const s = h.agent.files.readStream(p, { user: user ?? info.user, ...range, signal })
        const first = await firstChunk(s)
        res.writeHead(200, { 'content-type': 'application/octet-stream' })
        if (first) res.write(first)
        await pipeline(s, res)
      })
    }, { query: ['path', 'offset', 'length', 'user'] })
    this.#route('PUT', '/v1/sandboxes/:id/files', async ({ req, res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      const mode = q.mode !== undefined ? { mode: parseMode(q.mode) } : {}
      await svc.use(params[0]!, async (h, info) => {
        const r = await h.agent.files.write(p, req, {
          user: user ?? info.user, ...mode,
          mkdirs: flag(q.mkdirs), append: flag(q.append), exclusive: flag(q.exclusive), signal,
        })
        json(res, 200, r)
      })
    }, { query: ['path', 'mode', 'mkdirs', 'append', 'exclusive', 'user'] })
    this.#route('GET', '/v1/sandboxes/:id/files/list', async ({ res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      await svc.use(params[0]!, async (h, info) => json(res, 200, { entries: (await h.agent.files.list(p, { user: user ?? info.user, signal })).map(entryJson) }))
    }, { query: ['path', 'user'] })
    this.#route('GET', '/v1/sandboxes/:id/files/stat', async ({ res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      const follow = q.follow !== undefined ? { followSymlinks: flag(q.follow) } : {}
      await svc.use(params[0]!, async (h, info) => json(res, 200, entryJson(await h.agent.files.stat(p, { user: user ?? info.user, ...follow, signal }))))
    }, { query: ['path', 'user', 'follow'] })
    this.#route('POST', '/v1/sandboxes/:id/files/mkdir', async ({ req, res, params, signal }) => {
      const b = fileBody(await readJson(req), ['path', 'parents', 'mode', 'user'], ['path'])
      await svc.use(params[0]!, async (h, info) => {
        await h.agent.files.mkdir(b.path as string, { user: (b.user as string) ?? info.user, ...(b.parents !== undefined ? { parents: b.parents === true } : {}), ...(b.mode !== undefined ? { mode: b.mode as number } : {}), signal })
        json(res, 200, { ok: true })
      })
    })
    this.#route('POST', '/v1/sandboxes/:id/files/remove', async ({ req, res, params, signal }) => {
      const b = fileBody(await readJson(req), ['path', 'recursive', 'force', 'user'], ['path'])
      await svc.use(params[0]!, async (h, info) => {
        await h.agent.files.remove(b.path as string, { user: (b.user as string) ?? info.user, recursive: b.recursive === true, force: b.force === true, signal })
        json(res, 200, { ok: true })
      })
    })
    this.#route('POST', '/v1/sandboxes/:id/files/rename', async ({ req, res, params, signal }) => {
      const b = fileBody(await readJson(req), ['from', 'to', 'noReplace', 'user'], ['from', 'to'])
      await svc.use(params[0]!, async (h, info) => {
        await h.agent.files.rename(b.from as string, b.to as string, { user: (b.user as string) ?? info.user, noReplace: b.noReplace === true, signal })
        json(res, 200, { ok: true })
      })
    })
    this.#route('GET', '/v1/sandboxes/:id/archive', async ({ res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      await svc.use(params[0]!, async (h, info) => {
        // entries the agent could not read are left out (or zero-filled) and listed in a trailer
        const warnings = new WarningsTrailer()
        const s = h.agent.files.downloadTar(p, { user: user ?? info.user, signal, onWarning: (w) => warnings.add(w) })
        // the first bytes (or the error) decide the status: a missing path is a 404, not a truncated 200
        const first = await firstChunk(s)
        res.writeHead(200, { 'content-type': 'application/x-tar', trailer: WARNINGS_TRAILER })
        if (first) res.write(first)
        await pipeline(s, res, { end: false })
        res.addTrailers({ [WARNINGS_TRAILER]: warnings.toString() })
        res.end()
      })
    }, { query: ['path', 'user'] })
    this.#route('PUT', '/v1/sandboxes/:id/archive', async ({ req, res, q, params, signal }) => {
      const p = filePath(q)
      const user = userOf(q)
      await svc.use(params[0]!, async (h, info) => json(res, 200, await h.agent.files.uploadTar(p, req, { user: user ?? info.user, preserveOwner: flag(q.owner), signal })))
    }, { query: ['path', 'user', 'owner'] })
  }

  /** The process entry, after checking its sandbox still runs (its entries go when it does not). */
  #procKey(params: string[]): string {
    const [id, pid] = params
    let st
    try {
      st = this.#svc.peek(id!)
    } catch (e) {
      for (const [k, x] of this.#procs) if (x.sandboxId === id) this.#dropProcess(k)
      throw e
    }
    if (st.state !== 'running') {
      for (const [k, e] of this.#procs) if (e.sandboxId === id) this.#dropProcess(k)
      throw new StrataError('SANDBOX_GONE', `sandbox ${id} is ${st.state}`)
    }
    const key = `${id}/${pid}`
    if (!this.#procs.has(key)) throw new StrataError('NOT_FOUND', `no process ${pid} started through the API in sandbox ${id} (or its output was read to the end)`)
    return key
  }

  #dropProcess(key: string, signal?: NodeJS.Signals): void {
    const e = this.#procs.get(key)
    if (!e) return
    this.#procs.delete(key)
    if (e.expires) clearTimeout(e.expires)
    if (signal) e.proc.kill(signal)
    e.release()
  }
}

// ---------------------------------------------------------------- helpers

function json(res: http.ServerResponse, status: number, body: unknown): void {
  const s = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(s) })
  res.end(s)
}

async function readJson(req: http.IncomingMessage, optional = false): Promise<unknown> {
  const chunks: Buffer[] = []
  let n = 0
  for await (const c of req) {
    n += (c as Buffer).length
    if (n > MAX_JSON_BODY) {
      // read the rest (up to a bound) so the client sees the 413 instead of a reset mid-upload
      if (n > 16 * MAX_JSON_BODY) req.destroy()
      continue
    }
    chunks.push(c as Buffer)
  }
  if (n > MAX_JSON_BODY) throw new StrataError('INVALID_ARGUMENT', `the JSON body exceeds ${MAX_JSON_BODY} bytes`, { detail: { status: 413 } })
  if (n === 0) {
    if (optional) return undefined
    throw new StrataError('INVALID_ARGUMENT', 'a JSON body is required')
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'))
  } catch (e) {
    throw new StrataError('INVALID_ARGUMENT', `the body is not valid JSON: ${(e as Error).message}`)
  }
}

/**
 * The query parameters a route knows, the last value of each. Any other is
 * refused (listing the known ones) before the route does anything.
 */
function checkQuery(url: URL, known: readonly string[]): Record<string, string | undefined> {
  const q: Record<string, string | undefined> = {}
  for (const [k, v] of url.searchParams) {
    if (!known.includes(k)) {
      throw new StrataError('INVALID_ARGUMENT', `unknown query parameter ${JSON.stringify(k)} (${known.length ? `known: ${known.join(', ')}` : `${url.pathname} takes none`})`)
    }
    q[k] = v
  }
  return q
}

/** The file routes' `path`: required, absolute (paths are never resolved against the agent's cwd). */
function filePath(q: Record<string, string | undefined>): string {
  if (!q.path) throw new StrataError('INVALID_ARGUMENT', 'the path query parameter is required')
  return validatePath(q.path, 'path')
}

/** `user` as exec takes it: refused here rather than by the agent protocol (a NUL cannot be encoded). */
function userOf(q: Record<string, string | undefined>): string | undefined {
  return q.user === undefined ? undefined : validateUser(q.user, 'user')
}

/**
 * Routes that take no body (kill, keepalive, reclaim): none, or `{}`. Anything
 * else is refused, so a body meant for another route does not pass unnoticed.
 */
async function noFields(req: http.IncomingMessage, what: string): Promise<void> {
  const b = await readJson(req, true)
  if (b === undefined) return
  if (!b || typeof b !== 'object' || Array.isArray(b)) throw new StrataError('INVALID_ARGUMENT', `${what} takes no body (or {})`)
  const keys = Object.keys(b)
  if (keys.length) throw new StrataError('INVALID_ARGUMENT', `${what}: unknown field ${JSON.stringify(keys[0])} (it takes none)`)
}

/** The signal route's optional `{signal?, group?}`. */
function signalBody(body: unknown): { signal: string | number; group: boolean } {
  if (body === undefined) return { signal: 'SIGTERM', group: true }
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new StrataError('INVALID_ARGUMENT', 'the body must be {signal?, group?}')
  const b = body as Record<string, unknown>
  for (const k of Object.keys(b)) if (k !== 'signal' && k !== 'group') throw new StrataError('INVALID_ARGUMENT', `signal: unknown field ${JSON.stringify(k)} (known: signal, group)`)
  const sig = b.signal ?? 'SIGTERM'
  if (typeof sig !== 'string' && typeof sig !== 'number') throw new StrataError('INVALID_ARGUMENT', 'signal must be a name like SIGTERM or a number')
  if (b.group !== undefined && typeof b.group !== 'boolean') throw new StrataError('INVALID_ARGUMENT', 'group must be true or false')
  return { signal: sig, group: b.group !== false }
}

function flag(v: string | undefined): boolean {
  return v === '1' || v === 'true'
}

function intParam(q: Record<string, string | undefined>, k: string): Record<string, number> {
  const v = q[k]
  if (v === undefined) return {}
  const n = Number(v)
  if (!/^\d+$/.test(v) || !Number.isSafeInteger(n)) throw new StrataError('INVALID_ARGUMENT', `${k} must be a non-negative integer`)
  return { [k]: n }
}

function parseMode(v: string): number {
  if (!/^0?[0-7]{1,4}$/.test(v)) throw new StrataError('INVALID_ARGUMENT', 'mode must be octal, e.g. 0644')
  return parseInt(v, 8)
}

function fileBody(body: unknown, allowed: string[], paths: string[]): Record<string, unknown> {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new StrataError('INVALID_ARGUMENT', 'the body must be a JSON object')
  const b = body as Record<string, unknown>
  for (const k of Object.keys(b)) if (!allowed.includes(k)) throw new StrataError('INVALID_ARGUMENT', `unknown field ${JSON.stringify(k)} (known: ${allowed.join(', ')})`)
  for (const k of paths) validatePath(b[k], k)
  if (b.user !== undefined) validateUser(b.user, 'user')
  for (const k of ['parents', 'recursive', 'force', 'noReplace']) {
    if (b[k] !== undefined && typeof b[k] !== 'boolean') throw new StrataError('INVALID_ARGUMENT', `${k} must be true or false`)
  }
  if (b.mode !== undefined && (!Number.isInteger(b.mode) || (b.mode as number) < 0 || (b.mode as number) > 0o7777)) throw new StrataError('INVALID_ARGUMENT', 'mode must be an integer in [0, 0o7777]')
  return b
}

function runOpts(body: ExecRequest, info: { user: string; workdir: string }): { user: string; cwd: string; env?: Record<string, string>; timeoutMs?: number } {
  return {
    user: body.user ?? info.user,
    cwd: body.cwd ?? info.workdir,
    ...(body.env ? { env: body.env } : {}),
    ...(body.timeoutMs !== undefined ? { timeoutMs: body.timeoutMs } : {}),
  }
}

export function entryJson(e: FileEntry): Record<string, unknown> {
  return { ...e, mtimeNs: e.mtimeNs.toString() }
}

async function firstChunk(s: NodeJS.ReadableStream & AsyncIterable<Buffer>): Promise<Buffer | null> {
  return new Promise<Buffer | null>((resolve, reject) => {
    const onData = (c: Buffer) => { cleanup(); s.pause(); resolve(c) }
    const onEnd = () => { cleanup(); resolve(null) }
    const onErr = (e: Error) => { cleanup(); reject(e) }
    const cleanup = () => { s.off('data', onData); s.off('end', onEnd); s.off('error', onErr) }
    s.on('data', onData)
    s.once('end', onEnd)
    s.once('error', onErr)
  })
}

/**
 * Streams a process's output as NDJSON events: started, stdout/stderr
 * chunks (base64) in the order they arrived, then exit (with oomKilled from
 * `oomSince`). A start failure is a plain error response (nothing was
 * streamed yet).
 */
async function streamProcess(res: http.ServerResponse, proc: AgentProcess, signal: AbortSignal, oomSince: () => boolean): Promise<void> {
  const pid = await proc.pid
  // setHeader, not writeHead's argument: #error looks the content type up to end a failed stream with an error event
  res.setHeader('content-type', 'application/x-ndjson')
  res.setHeader('cache-control', 'no-store')
  res.writeHead(200)
  const write = (ev: OutputEvent): boolean => res.write(JSON.stringify(ev) + '\n')
  write({ type: 'started', pid })
  let paused = 0
  const pump = (stream: NodeJS.ReadableStream, type: 'stdout' | 'stderr') => new Promise<void>((resolve, reject) => {
    stream.on('data', (c: Buffer) => {
      if (!write({ type, data: c.toString('base64') })) {
        // the client reads slower than the command writes: backpressure to the agent
        stream.pause()
        paused++
        res.once('drain', () => {
          paused--
          stream.resume()
        })
      }
    })
    stream.once('end', resolve)
    stream.once('error', reject)
  })
  const onAbort = () => proc.kill('SIGKILL')
  signal.addEventListener('abort', onAbort, { once: true })
  try {
    await Promise.all([pump(proc.stdout, 'stdout'), pump(proc.stderr, 'stderr')])
    const info: ExitInfo = await proc.wait()
    const { coreDumped: _c, ...exit } = info
    // The counter is raised when the kernel picks its victim, before the agent reaps it.
    // A command run through a shell (a string, or sh -c …) does not die of the
    // SIGKILL itself when the OOM killer picks a child: the shell exits 137 (128 + 9).
    const killed = exit.signal === 'SIGKILL' || (exit.signal === null && exit.exitCode === 128 + 9)
    const oomKilled = killed && !exit.timedOut && oomSince()
    res.end(JSON.stringify({ type: 'exit', ...exit, oomKilled } satisfies OutputEvent) + '\n')
  } finally {
    signal.removeEventListener('abort', onAbort)
    void paused
  }
}
