// The SDK's transport: node:http with a keep-alive agent (one TCP connection
// reused across calls), JSON in and out, streams passed through with
// backpressure. Every failure becomes a StrataError: the daemon's own
// `{code, message}` when it answered, RPC_CONNECT_FAILED / TIMEOUT /
// RPC_CONNECTION_CLOSED when it could not, NOT_A_STRATA_DAEMON when
// something else answered (a response without the daemon's Strata-Api
// header: another web server, a proxy's error page, not HTTP at all).
import http from 'node:http'
import { Readable } from 'node:stream'
import { StrataError, isStrataError } from '../../fs/common/errors.js'
import { API_HEADER } from '../daemon/http.js'

export interface TransportOptions {
  endpoint: string
  token: string
  /** per-request deadline for non-streaming calls. Default 120000 ms. */
  timeoutMs?: number
  /** what a refused connection's message suggests (default: that the cluster may be down) */
  unreachableHint?: string
}

export interface RequestOptions {
  method: string
  path: string
  query?: Record<string, string | number | boolean | undefined | string[]>
  json?: unknown
  body?: Uint8Array | AsyncIterable<Uint8Array> | string
  signal?: AbortSignal
  /** no deadline (streams run as long as they run) */
  stream?: boolean
  timeoutMs?: number
}

/** A daemon endpoint as a URL: http://host:port only (INVALID_ARGUMENT otherwise). */
export function parseEndpoint(endpoint: string): URL {
  let u: URL
  try {
    u = new URL(endpoint)
  } catch {
    throw new StrataError('INVALID_ARGUMENT', `endpoint ${JSON.stringify(endpoint)} is not a URL (http://host:port)`)
  }
  if (u.protocol !== 'http:') throw new StrataError('INVALID_ARGUMENT', `endpoint ${endpoint}: only http:// is supported (the daemon listens on a local address)`)
  return u
}

export class Transport {
  readonly endpoint: URL
  readonly #token: string
  readonly #agent: http.Agent
  readonly #timeoutMs: number
  readonly #unreachableHint: string

  constructor(o: TransportOptions) {
    const u = parseEndpoint(o.endpoint)
    if (typeof o.token !== 'string' || o.token.length === 0) throw new StrataError('INVALID_ARGUMENT', 'a token is required')
    this.endpoint = u
    this.#token = o.token
    this.#agent = new http.Agent({ keepAlive: true, maxSockets: 64 })
    this.#timeoutMs = o.timeoutMs ?? 120_000
    this.#unreachableHint = o.unreachableHint ?? 'is the cluster up? strata cluster status'
  }

  close(): void {
    this.#agent.destroy()
  }

  /** Sends the request; resolves with the response once its headers arrive (2xx only). */
  async request(o: RequestOptions): Promise<http.IncomingMessage> {
    const url = new URL(o.path, this.endpoint)
    for (const [k, v] of Object.entries(o.query ?? {})) {
      if (v === undefined) continue
      if (Array.isArray(v)) for (const x of v) url.searchParams.append(k, x)
      else url.searchParams.set(k, String(v))
    }
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}` }
    let payload: Buffer | AsyncIterable<Uint8Array> | undefined
    if (o.json !== undefined) {
      payload = Buffer.from(JSON.stringify(o.json))
      headers['content-type'] = 'application/json'
    } else if (o.body !== undefined) {
      payload = typeof o.body === 'string' ? Buffer.from(o.body) : o.body instanceof Uint8Array ? Buffer.from(o.body.buffer, o.body.byteOffset, o.body.byteLength) : o.body
      headers['content-type'] = 'application/octet-stream'
    }
    if (Buffer.isBuffer(payload)) headers['content-length'] = String(payload.length)
    const timeoutMs = o.stream ? 0 : (o.timeoutMs ?? this.#timeoutMs)
    return new Promise<http.IncomingMessage>((resolve, reject) => {
      let settled = false
      const fail = (e: StrataError) => {
        if (settled) return
        settled = true
        req.destroy()
        reject(e)
      }
      const req = http.request(url, { method: o.method, headers, agent: this.#agent, signal: o.signal }, (res) => {
        if (settled) {
          res.resume()
          return
        }
        settled = true
        if (timer) clearTimeout(timer)
        if (res.headers[API_HEADER] === undefined) {
          // not ours: the body (an HTML page, someone else's JSON) is not shown, nor read
          res.destroy()
          return reject(notOurs(o.method, url, `answered HTTP ${res.statusCode}${res.statusMessage ? ` ${res.statusMessage}` : ''}${res.headers['content-type'] ? ` (${res.headers['content-type'].split(';')[0]})` : ''}`))
        }
        if ((res.statusCode ?? 500) < 300) return resolve(res)
        void errorOf(res).then(reject, reject)
      })
      const timer = timeoutMs > 0 ? setTimeout(() => fail(new StrataError('TIMEOUT', `${o.method} ${o.path}: no answer within ${timeoutMs} ms`)), timeoutMs) : null
      req.on('error', (e: NodeJS.ErrnoException) => {
        if (timer) clearTimeout(timer)
        if (o.signal?.aborted) return fail(new StrataError('CANCELLED', `${o.method} ${o.path}: cancelled`, { cause: e }))
        if (e.code === 'ECONNREFUSED' || e.code === 'ENOTFOUND' || e.code === 'EHOSTUNREACH') {
          return fail(new StrataError('RPC_CONNECT_FAILED', `cannot reach the sandbox daemon at ${this.endpoint.origin}: ${e.code} (${this.#unreachableHint})`, { cause: e }))
        }
        // llhttp's parse errors: what came back is not an HTTP response
        if (typeof e.code === 'string' && e.code.startsWith('HPE_')) return fail(notOurs(o.method, url, 'answered with something that is not HTTP', e))
        if (e.code === 'ECONNRESET' && /socket hang up/.test(e.message)) {
          return fail(new StrataError('RPC_CONNECTION_CLOSED', `${o.method} ${url.href}: the endpoint closed the connection without answering (is the daemon stopping, or is ${this.endpoint.origin} not a Strata sandbox daemon?)`, { cause: e }))
        }
        fail(new StrataError('RPC_CONNECTION_CLOSED', `${o.method} ${url.href}: ${e.message}`, { cause: e }))
      })
      if (payload === undefined) req.end()
      else if (Buffer.isBuffer(payload)) req.end(payload)
      else {
        Readable.from(payload).on('error', (e) => fail(isStrataError(e) ? e : new StrataError('INVALID_ARGUMENT', `reading the request body failed: ${e.message}`, { cause: e }))).pipe(req)
      }
    })
  }

  /** A streamed response body whose failures are typed (RPC_CONNECTION_CLOSED, CANCELLED). */
  async stream(o: RequestOptions): Promise<Readable> {
    const res = await this.request(o)
    return Readable.from(connectionErrors(res, o.signal), { objectMode: false })
  }

  async json<T>(o: RequestOptions): Promise<T> {
    const res = await this.request(o)
    const text = await readAll(res, o.signal)
    if (res.statusCode === 204 || text.length === 0) return undefined as T
    try {
      return JSON.parse(text.toString('utf8')) as T
    } catch (e) {
      throw new StrataError('RPC_BAD_FRAME', `${o.method} ${o.path}: the daemon answered with invalid JSON`, { cause: e })
    }
  }
}

/** What files.read buffers at most unless told otherwise (the agent client's own cap). */
export const DEFAULT_READ_MAX_BYTES = 256 * 1024 * 1024

/**
 * A response body in memory. Past `maxBytes` the connection is closed (so
 * the daemon stops reading) and the call fails with OUTPUT_LIMIT.
 */
export async function readAll(res: AsyncIterable<Uint8Array> & { destroy?: () => void }, signal?: AbortSignal, cap?: { maxBytes: number; what: string }): Promise<Buffer> {
  const chunks: Buffer[] = []
  let n = 0
  for await (const c of connectionErrors(res, signal)) {
    n += c.length
    if (cap && n > cap.maxBytes) {
      res.destroy?.()
      throw new StrataError('OUTPUT_LIMIT', `${cap.what}: more than ${cap.maxBytes} bytes (maxBytes; use files.readStream for data of any size)`, { detail: { maxBytes: cap.maxBytes } })
    }
    chunks.push(Buffer.from(c))
  }
  return Buffer.concat(chunks)
}

function notOurs(method: string, url: URL, what: string, cause?: unknown): StrataError {
  return new StrataError('NOT_A_STRATA_DAEMON', `${url.origin} is not a Strata sandbox daemon: ${method} ${url.href} ${what}, without the daemon's Strata-Api header (check the endpoint)`, {
    ...(cause !== undefined ? { cause } : {}), detail: { url: url.href },
  })
}

async function errorOf(res: http.IncomingMessage): Promise<StrataError> {
  const body = await readAll(res).catch(() => Buffer.alloc(0))
  try {
    const w = JSON.parse(body.toString('utf8')) as { code?: unknown; message?: unknown; detail?: Record<string, unknown> }
    if (typeof w.code === 'string' && typeof w.message === 'string') return StrataError.fromWire({ code: w.code, message: w.message, ...(w.detail ? { detail: w.detail } : {}) })
  } catch {
    // not ours: below
  }
  // the daemon's header but not its error body (a proxy that passes headers on?): the status, not the body
  return new StrataError('RPC_BAD_FRAME', `HTTP ${res.statusCode} without the daemon's {code, message} error body`)
}

/** Splits an NDJSON byte stream into parsed lines. */
export async function* ndjson<T>(src: AsyncIterable<Uint8Array>, signal?: AbortSignal): AsyncGenerator<T> {
  let buf = ''
  const dec = new TextDecoder()
  for await (const c of connectionErrors(src, signal)) {
    buf += dec.decode(c, { stream: true })
    let nl: number
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl)
      buf = buf.slice(nl + 1)
      if (line.trim()) yield JSON.parse(line) as T
    }
  }
  if (buf.trim()) yield JSON.parse(buf) as T
}

/** A response body whose connection breaks mid-way fails with RPC_CONNECTION_CLOSED, not a bare 'aborted'. */
export async function* connectionErrors(src: AsyncIterable<Uint8Array>, signal?: AbortSignal): AsyncGenerator<Uint8Array> {
  try {
    for await (const c of src) yield c
  } catch (e) {
    if (isStrataError(e)) throw e
    if (signal?.aborted) throw new StrataError('CANCELLED', 'cancelled by the caller', { cause: e })
    throw new StrataError('RPC_CONNECTION_CLOSED', `the daemon's response broke off: ${(e as Error).message}`, { cause: e })
  }
}
