// A client for one repository of an OCI distribution-spec registry: ping and
// auth (anonymous, Bearer token, Basic), manifests, blobs (streamed to a
// local file with digest and size checked as the bytes arrive, resumed with
// Range after a reset), blob HEAD, chunked uploads.
//
// Errors: 401/403 after authenticating → IMAGE_AUTH_FAILED, 404 →
// IMAGE_NOT_FOUND, 5xx / 429 / connection failures → IMAGE_REMOTE_ERROR
// after `retries` retries with exponential backoff (idempotent requests only;
// an upload is restarted whole), digest → IMAGE_DIGEST_MISMATCH, size →
// IMAGE_SIZE_MISMATCH. A registry that sends no answer, or no bytes of a
// body, for `timeoutMs` is IMAGE_REMOTE_ERROR "timed out" at once, without
// retries: fetch() itself waits minutes (undici's 300 s header and body
// timeouts) and a retry would only wait as long again.
import crypto from 'node:crypto'
import fs from 'node:fs'
import { StrataError } from '../../../fs/common/errors.js'
import { isDigest, sha256Digest } from '../types.js'
import { basicAuthorization, parseWwwAuthenticate, registryAuthFile, resolveCredentials, type Credentials } from './auth.js'
import { MANIFEST_ACCEPT } from '../oci/media-types.js'
import { registryScheme } from './reference.js'

export interface RegistryClientOptions {
  insecure?: boolean
  username?: string
  password?: string
  /** `pull` or `pull,push`: the actions a token is requested for */
  actions?: string
  /** bytes per PATCH of a chunked upload (default 8 MiB) */
  chunkSize?: number
  /** retries of a failed idempotent request or blob upload (default 4) */
  retries?: number
  /** first backoff delay, doubled per retry (default 250 ms) */
  retryDelayMs?: number
  /** how long the registry may leave a request without an answer, or a body without new bytes (default 60 s) */
  timeoutMs?: number
  /** aborts requests and backoffs: CANCELLED */
  signal?: AbortSignal
}

export const DEFAULT_CHUNK_SIZE = 8 << 20
export const DEFAULT_TIMEOUT_MS = 60_000
/** Request bodies larger than this are fed to fetch in slices, so that the wait for the answer is timed from the last byte sent. */
const BODY_SLICE = 1 << 20
/** Statuses whose responses carry no body (a Response cannot be built with one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304])
const MAX_MANIFEST_BYTES = 4 << 20

interface SendInit {
  headers?: Record<string, string>
  body?: Buffer
  /** retry network failures and 5xx/429 (only for idempotent requests) */
  retry?: boolean
}

function statusError(res: Response, what: string, body: string): StrataError {
  let detail = ''
  try {
    const j = JSON.parse(body) as { errors?: Array<{ code?: string; message?: string }> }
    if (Array.isArray(j.errors)) detail = j.errors.map((e) => `${e.code ?? '?'}: ${e.message ?? ''}`).join('; ')
  } catch {
    detail = body.slice(0, 200)
  }
  const msg = `${what}: HTTP ${res.status}${detail ? ` (${detail})` : ''}`
  const d = { detail: { status: res.status } }
  if (res.status === 404) return new StrataError('IMAGE_NOT_FOUND', msg, d)
  if (res.status === 401 || res.status === 403) return new StrataError('IMAGE_AUTH_FAILED', msg, d)
  return new StrataError('IMAGE_REMOTE_ERROR', msg, d)
}

async function failFrom(res: Response, what: string): Promise<never> {
  // An error body that stalls is the timeout, not the status: a 5xx would be
  // retried, each attempt waiting the whole timeout again.
  const body = await res.text().catch((e: unknown) => {
    if (isTimeout(e)) throw e
    return ''
  })
  throw statusError(res, what, body)
}

function networkError(e: unknown, what: string): StrataError {
  if (e instanceof StrataError) return e
  const cause = (e as { cause?: { code?: string; message?: string } }).cause
  const why = cause?.code ?? cause?.message ?? (e as Error).message
  if (why === 'bad port') {
    // Node's fetch refuses the Fetch standard's blocked ports (6000, 6665-6669, 10080, …) before connecting
    return new StrataError('IMAGE_REMOTE_ERROR', `${what}: the port is one the Fetch standard blocks (X11's 6000, IRC's 6665-6669, …), which Node's fetch refuses to connect to; serve the registry on another port`, {
      cause: e,
      detail: { blockedPort: true },
    })
  }
  return new StrataError('IMAGE_REMOTE_ERROR', `${what}: ${why}`, { cause: e })
}

/** fetch's refusal of a blocked port, raw or wrapped: it will refuse every retry too. */
function isBlockedPort(e: unknown): boolean {
  if (e instanceof StrataError) return (e.detail as { blockedPort?: unknown } | undefined)?.blockedPort === true
  return (e as { cause?: { message?: unknown } } | null)?.cause?.message === 'bad port'
}

function isRetryable(e: unknown): boolean {
  if (isBlockedPort(e)) return false
  return !(e instanceof StrataError) || (e.code === 'IMAGE_REMOTE_ERROR' && !isTimeout(e))
}

/** https to a server that does not speak TLS (a plain-http registry: "wrong version number") or whose TLS fails. */
function isTlsFailure(e: unknown): boolean {
  if (e instanceof StrataError) return false
  const cause = (e as { cause?: { code?: unknown } })?.cause
  return typeof cause?.code === 'string' && /^(ERR_SSL_|ERR_TLS_|EPROTO$)/.test(cause.code)
}

/** A request that timed out (timedFetch): not retried. */
export function isTimeout(e: unknown): boolean {
  return e instanceof StrataError && (e.detail as { timeout?: unknown } | undefined)?.timeout === true
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`
}

/**
 * fetch() with two timers: no answer (status and headers) within
 * `timeoutMs` of sending the request's last byte, and no bytes of the body
 * for `timeoutMs` while the caller is reading it. Either aborts the request
 * with IMAGE_REMOTE_ERROR naming `what` and "timed out". `signal` (the
 * caller's cancel) aborts it as fetch does.
 */
export async function timedFetch(url: string | URL, init: Omit<RequestInit, 'body' | 'signal'> & { body?: Buffer }, timeoutMs: number, what: string, signal?: AbortSignal): Promise<Response> {
  const ac = new AbortController()
  const onOuter = () => ac.abort(signal!.reason)
  if (signal?.aborted) ac.abort(signal.reason)
  else signal?.addEventListener('abort', onOuter, { once: true })
  let timer: NodeJS.Timeout | undefined
  let timedOut: StrataError | null = null
  const arm = (why: string) => {
    clearTimeout(timer)
    timer = setTimeout(() => {
      timedOut = new StrataError('IMAGE_REMOTE_ERROR', `${what}: timed out: ${why} for ${seconds(timeoutMs)}`, { detail: { timeout: true, url: String(url) } })
      ac.abort(timedOut)
    }, timeoutMs)
  }
  const settle = () => {
    clearTimeout(timer)
    signal?.removeEventListener('abort', onOuter)
  }
  const { body, ...rest } = init
  let reqBody: Buffer | ReadableStream<Uint8Array> | undefined = body
  const streamed = body !== undefined && body.length > BODY_SLICE
  if (streamed) {
    let off = 0
    reqBody = new ReadableStream<Uint8Array>(
      {
        pull(c) {
          arm('no answer')
          if (off >= body.length) return c.close()
          c.enqueue(body.subarray(off, off + BODY_SLICE))
          off += BODY_SLICE
        },
      },
      { highWaterMark: 0 },
    )
  }
  arm('no answer')
  let res: Response
  try {
    const headers = streamed ? { ...(rest.headers as Record<string, string> | undefined), 'content-length': String(body.length) } : rest.headers
    res = await fetch(url, { ...rest, ...(headers ? { headers } : {}), ...(reqBody !== undefined ? { body: reqBody } : {}), ...(streamed ? { duplex: 'half' } : {}), signal: ac.signal } as RequestInit)
  } catch (e) {
    settle()
    throw timedOut ?? e
  }
  clearTimeout(timer)
  if (!res.body || NULL_BODY.has(res.status)) {
    settle()
    return res
  }
  const reader = res.body.getReader()
  // pulled only when the caller reads, so the timer runs only while it waits for the server
  const watched = new ReadableStream<Uint8Array>(
    {
      async pull(c) {
        arm('no bytes of the body')
        try {
          const r = await reader.read()
          clearTimeout(timer)
          if (r.done) {
            settle()
            c.close()
          } else c.enqueue(r.value)
        } catch (e) {
          settle()
          c.error(timedOut ?? e)
        }
      },
      cancel(reason) {
        settle()
        return reader.cancel(reason)
      },
    },
    { highWaterMark: 0 },
  )
  const out = new Response(watched, { status: res.status, statusText: res.statusText, headers: res.headers })
  // Location headers are resolved against the URL the answer came from (after redirects)
  Object.defineProperty(out, 'url', { value: res.url })
  return out
}

function cancelledError(signal: AbortSignal): StrataError {
  const r: unknown = signal.reason
  if (r instanceof StrataError) return r
  return new StrataError('CANCELLED', 'registry transfer cancelled', { cause: r })
}

async function discard(res: Response): Promise<void> {
  await res.body?.cancel().catch(() => undefined)
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(cancelledError(signal))
    const onAbort = () => {
      clearTimeout(timer)
      reject(cancelledError(signal!))
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export class RegistryClient {
  readonly base: string
  readonly retries: number
  readonly chunkSize: number
  readonly #retryDelayMs: number
  readonly timeoutMs: number
  readonly #creds: Credentials | undefined
  readonly #actions: string
  readonly signal: AbortSignal | undefined
  #authorization: string | undefined
  #ping: Promise<void> | undefined

  constructor(
    readonly host: string,
    readonly repo: string,
    opts: RegistryClientOptions = {},
  ) {
    this.base = `${registryScheme(host, opts.insecure)}://${host}`
    this.retries = opts.retries ?? 4
    this.chunkSize = opts.chunkSize ?? DEFAULT_CHUNK_SIZE
    if (!(this.chunkSize >= 1)) throw new RangeError('chunkSize must be at least 1 byte')
    this.#retryDelayMs = opts.retryDelayMs ?? 250
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS
    if (!(this.timeoutMs > 0)) throw new RangeError('timeoutMs must be positive')
    this.#creds = resolveCredentials(host, opts)
    this.#actions = opts.actions ?? 'pull'
    this.signal = opts.signal
  }

  /** Wraps a failure: CANCELLED once the signal fired, IMAGE_REMOTE_ERROR for network errors, StrataErrors as they are. */
  fail(e: unknown, what: string): StrataError {
    if (this.signal?.aborted) return cancelledError(this.signal)
    const err = networkError(e, what)
    if (this.base.startsWith('https:') && isTlsFailure(e)) {
      return new StrataError('IMAGE_REMOTE_ERROR', `${err.reason}: the TLS handshake failed; if ${this.host} serves plain http, use --insecure`, { cause: e })
    }
    return err
  }

  /** Whether a failure may be retried (network and remote errors, never a cancel, a timeout or a TLS handshake that failed). */
  retryable(e: unknown): boolean {
    return !this.signal?.aborted && isRetryable(e) && !isTlsFailure(e)
  }

  /** `/v2/<repo>/<rest>` as an absolute URL. */
  url(rest: string): string {
    return `${this.base}/v2/${this.repo}/${rest}`
  }

  backoff(attempt: number): Promise<void> {
    return sleep(Math.min(this.#retryDelayMs * 2 ** attempt, 5000), this.signal)
  }

  /** GET /v2/ once, to learn the auth scheme before the first real request. */
  ping(): Promise<void> {
    this.#ping ??= (async () => {
      const res = await this.#fetch('GET', `${this.base}/v2/`, { retry: true }, 'ping')
      if (res.status === 401) {
        const challenge = res.headers.get('www-authenticate')
        await discard(res)
        await this.#authenticate(challenge)
      } else {
        await discard(res)
      }
    })().catch((e: unknown): never => {
      this.#ping = undefined
      throw e
    })
    return this.#ping
  }

  /**
   * One request with auth applied: a 401 re-authenticates from its challenge
   * and repeats once; 401/403 after that is IMAGE_AUTH_FAILED. With `retry`,
   * network failures and 5xx/429 are repeated with backoff. Other statuses
   * are returned to the caller.
   */
  async send(method: string, url: string, init: SendInit, what: string): Promise<Response> {
    await this.ping()
    let reauthed = false
    for (;;) {
      const res = await this.#fetch(method, url, init, what)
      if (res.status === 401 && !reauthed) {
        reauthed = true
        const challenge = res.headers.get('www-authenticate')
        await discard(res)
        await this.#authenticate(challenge)
        continue
      }
      if (res.status === 401 || res.status === 403) await failFrom(res, `${what}: the registry refused the credentials`)
      return res
    }
  }

  async #fetch(method: string, url: string, init: SendInit, what: string): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const headers: Record<string, string> = { ...init.headers }
      if (this.#authorization) headers.authorization = this.#authorization
      let res: Response
      try {
        res = await timedFetch(url, { method, headers, ...(init.body !== undefined ? { body: init.body } : {}), redirect: 'follow' }, this.timeoutMs, `${what}: ${method} ${url}`, this.signal)
      } catch (e) {
        if (init.retry && attempt < this.retries && this.retryable(e)) {
          await this.backoff(attempt)
          continue
        }
        throw this.fail(e, `${what}: ${method} ${url}`)
      }
      if (init.retry && (res.status >= 500 || res.status === 429) && attempt < this.retries) {
        await discard(res)
        // Retry-After in seconds (429/503), capped at 30 s; else the backoff
        const after = Number(res.headers.get('retry-after'))
        if (after > 0) await sleep(Math.min(after * 1000, 30_000), this.signal)
        else await this.backoff(attempt)
        continue
      }
      if (res.status >= 500) await failFrom(res, `${what}: ${method} ${url}`)
      return res
    }
  }

  async #authenticate(header: string | null): Promise<void> {
    const challenges = parseWwwAuthenticate(header ?? '')
    const bearer = challenges.find((c) => c.scheme === 'bearer')
    if (bearer) {
      this.#authorization = `Bearer ${await this.#token(bearer.params)}`
      return
    }
    if (challenges.some((c) => c.scheme === 'basic')) {
      if (!this.#creds) throw new StrataError('IMAGE_AUTH_FAILED', `${this.host} wants basic auth and no credentials were given (--username/--password, STRATA_REGISTRY_USER/STRATA_REGISTRY_PASSWORD, or an auths entry for ${this.host} in ${registryAuthFile()})`)
      this.#authorization = basicAuthorization(this.#creds)
      return
    }
    throw new StrataError('IMAGE_AUTH_FAILED', `${this.host} answered 401 without a usable challenge (${JSON.stringify(header)})`)
  }

  /** Bearer token from the realm, for our scope plus whatever the challenge asked for. */
  async #token(params: Record<string, string>): Promise<string> {
    if (!params.realm) throw new StrataError('IMAGE_AUTH_FAILED', `${this.host}: Bearer challenge without a realm`)
    let u: URL
    try {
      u = new URL(params.realm)
    } catch (e) {
      throw new StrataError('IMAGE_AUTH_FAILED', `${this.host}: Bearer realm ${JSON.stringify(params.realm)} is not a URL`, { cause: e })
    }
    if (params.service) u.searchParams.set('service', params.service)
    const scopes = new Set<string>((params.scope ?? '').split(' ').filter(Boolean))
    scopes.add(`repository:${this.repo}:${this.#actions}`)
    for (const s of scopes) u.searchParams.append('scope', s)
    const headers: Record<string, string> = {}
    if (this.#creds) headers.authorization = basicAuthorization(this.#creds)
    for (let attempt = 0; ; attempt++) {
      try {
        const res = await timedFetch(u, { headers, redirect: 'follow' }, this.timeoutMs, `token from ${u.origin}${u.pathname}`, this.signal)
        if (res.status === 401 || res.status === 403) await failFrom(res, `token from ${u.origin}${u.pathname}: the token service refused the credentials`)
        if (res.status >= 500 && attempt < this.retries) {
          await discard(res)
          await this.backoff(attempt)
          continue
        }
        if (!res.ok) await failFrom(res, `token from ${u.origin}${u.pathname}`)
        const j = (await res.json()) as { token?: string; access_token?: string }
        const token = j.token ?? j.access_token
        if (!token) throw new StrataError('IMAGE_AUTH_FAILED', `token from ${u.origin}${u.pathname}: the answer holds no token`)
        return token
      } catch (e) {
        if (this.retryable(e) && !(e instanceof StrataError) && attempt < this.retries) {
          await this.backoff(attempt)
          continue
        }
        throw this.fail(e, `token from ${u.origin}${u.pathname}`)
      }
    }
  }

  /**
   * GET a manifest by tag or digest. Verifies the bytes against the digest
   * when fetched by digest and against Docker-Content-Digest when the
   * registry sends one. The media type is the Content-Type, or the body's
   * `mediaType` field when the Content-Type is generic.
   */
  async getManifest(reference: string): Promise<{ bytes: Buffer; digest: string; mediaType: string }> {
    const what = `manifest ${this.host}/${this.repo}${isDigest(reference) ? '@' : ':'}${reference}`
    for (let attempt = 0; ; attempt++) {
      try {
        const res = await this.send('GET', this.url(`manifests/${reference}`), { headers: { accept: MANIFEST_ACCEPT }, retry: true }, what)
        if (!res.ok) await failFrom(res, what)
        const declared = Number(res.headers.get('content-length') ?? '0')
        if (declared > MAX_MANIFEST_BYTES) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}: ${declared} bytes is more than a manifest may have (${MAX_MANIFEST_BYTES})`)
        const bytes = await readCapped(res, MAX_MANIFEST_BYTES, what)
        const digest = sha256Digest(bytes)
        if (isDigest(reference) && digest !== reference) throw new StrataError('IMAGE_DIGEST_MISMATCH', `${what}: the bytes hash to ${digest}`)
        const header = res.headers.get('docker-content-digest')
        if (header && header.startsWith('sha256:') && header !== digest) {
          throw new StrataError('IMAGE_DIGEST_MISMATCH', `${what}: Docker-Content-Digest ${header} but the bytes hash to ${digest}`)
        }
        let mediaType = (res.headers.get('content-type') ?? '').split(';')[0]!.trim()
        if (!mediaType.startsWith('application/vnd.')) {
          try {
            const j = JSON.parse(bytes.toString('utf8')) as { mediaType?: unknown; manifests?: unknown; layers?: unknown }
            if (typeof j.mediaType === 'string') mediaType = j.mediaType
          } catch {
            // left to the caller's parser
          }
        }
        return { bytes, digest, mediaType }
      } catch (e) {
        // a reset while reading the body: fetch the whole manifest again
        if (e instanceof StrataError || attempt >= this.retries || !this.retryable(e)) throw this.fail(e, what)
        await this.backoff(attempt)
      }
    }
  }

  /** A small blob (a config) into memory, verified. */
  async getBlobBuffer(digest: string, size: number, maxBytes = 16 << 20): Promise<Buffer> {
    const what = `blob ${this.host}/${this.repo}@${digest}`
    if (size > maxBytes) throw new StrataError('IMAGE_BAD_MANIFEST', `${what}: ${size} bytes is more than allowed here (${maxBytes})`)
    for (let attempt = 0; ; attempt++) {
      try {
        const res = await this.send('GET', this.url(`blobs/${digest}`), { retry: true }, what)
        if (!res.ok) await failFrom(res, what)
        const bytes = await readCapped(res, size, what)
        verify(bytes.length, sha256Digest(bytes), digest, size, what)
        return bytes
      } catch (e) {
        if (e instanceof StrataError || attempt >= this.retries || !this.retryable(e)) throw this.fail(e, what)
        await this.backoff(attempt)
      }
    }
  }

  /**
   * Streams a blob into `file`, hashing as it goes; a connection that breaks
   * mid-body resumes with `Range: bytes=N-` (or starts over if the server
   * ignores the range). Throws (and removes the file) on a digest or size
   * mismatch; the file is complete and verified when this returns.
   */
  async getBlobToFile(digest: string, size: number, file: string, onBytes?: (n: number) => void): Promise<void> {
    const what = `blob ${this.host}/${this.repo}@${digest}`
    const fh = await fs.promises.open(file, 'w')
    let hash = crypto.createHash('sha256')
    let got = 0
    try {
      for (let attempt = 0; ; ) {
        const headers: Record<string, string> = got > 0 ? { range: `bytes=${got}-` } : {}
        try {
          const res = await this.send('GET', this.url(`blobs/${digest}`), { headers, retry: true }, what)
          if (res.status === 206 && got > 0 && !(res.headers.get('content-range') ?? '').startsWith(`bytes ${got}-`)) {
            await failFrom(res, `${what}: resumed at ${got} but the registry answered ${res.headers.get('content-range')}`)
          }
          if (res.status === 200 && got > 0) {
            // the server ignored the range: start over
            got = 0
            hash = crypto.createHash('sha256')
            await fh.truncate(0)
          } else if (!(res.status === 206 && got > 0) && res.status !== 200) {
            await failFrom(res, what)
          }
          if (!res.body) throw new StrataError('IMAGE_REMOTE_ERROR', `${what}: empty response`)
          for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
            if (got + chunk.length > size) throw new StrataError('IMAGE_SIZE_MISMATCH', `${what}: more than the ${size} bytes the manifest declares`)
            await fh.write(chunk, 0, chunk.length, got)
            hash.update(chunk)
            got += chunk.length
            onBytes?.(chunk.length)
          }
          break
        } catch (e) {
          if (e instanceof StrataError || attempt >= this.retries || !this.retryable(e)) throw this.fail(e, what)
          await this.backoff(attempt++)
        }
      }
      verify(got, 'sha256:' + hash.digest('hex'), digest, size, what)
    } catch (e) {
      await fh.close().catch(() => undefined)
      await fs.promises.rm(file, { force: true })
      throw e
    }
    await fh.close()
  }

  /** The blob's size if the registry has it, null if not. */
  async headBlob(digest: string): Promise<number | null> {
    const what = `blob ${this.host}/${this.repo}@${digest}`
    const res = await this.send('HEAD', this.url(`blobs/${digest}`), { retry: true }, what)
    await discard(res)
    if (res.status === 404) return null
    if (!res.ok) await failFrom(res, `HEAD ${what}`)
    return Number(res.headers.get('content-length') ?? '-1')
  }

  /**
   * Uploads a local file as blob `digest`: POST an upload session, PATCH it in
   * `chunkSize` pieces (Content-Range, following Location each time), PUT
   * ?digest=. A failure anywhere restarts the upload (after checking whether
   * the blob arrived after all), up to `retries` times.
   */
  async uploadBlob(file: string, digest: string, size: number, onBytes?: (n: number) => void): Promise<void> {
    const what = `upload ${this.host}/${this.repo}@${digest}`
    for (let attempt = 0; ; attempt++) {
      let location: string | undefined
      try {
        const res = await this.send('POST', this.url('blobs/uploads/'), { headers: { 'content-length': '0' } }, what)
        if (res.status !== 202) await failFrom(res, `${what}: POST`)
        await discard(res)
        location = this.#location(res, what)
        const fh = await fs.promises.open(file, 'r')
        try {
          let offset = 0
          while (offset < size) {
            const n = Math.min(this.chunkSize, size - offset)
            const buf = Buffer.allocUnsafe(n)
            const { bytesRead } = await fh.read(buf, 0, n, offset)
            if (bytesRead !== n) throw new StrataError('IO_ERROR', `${file}: short read at ${offset} (the file changed?)`)
            const patch = await this.send(
              'PATCH',
              location,
              { headers: { 'content-type': 'application/octet-stream', 'content-range': `${offset}-${offset + n - 1}` }, body: buf },
              what,
            )
            if (patch.status !== 202) await failFrom(patch, `${what}: PATCH at ${offset}`)
            await discard(patch)
            const range = patch.headers.get('range')
            if (range && !range.endsWith(`-${offset + n - 1}`)) {
              throw new StrataError('IMAGE_REMOTE_ERROR', `${what}: the registry holds ${range} after a PATCH up to ${offset + n - 1}`)
            }
            location = this.#location(patch, what)
            offset += n
            onBytes?.(n)
          }
        } finally {
          await fh.close()
        }
        const u = new URL(location)
        u.searchParams.set('digest', digest)
        const put = await this.send('PUT', u.toString(), { headers: { 'content-type': 'application/octet-stream', 'content-length': '0' } }, what)
        // 201 per the spec; some registries answer 204
        if (put.status !== 201 && put.status !== 204) await failFrom(put, `${what}: PUT`)
        await discard(put)
        return
      } catch (e) {
        if (!this.retryable(e) || attempt >= this.retries) throw this.fail(e, what)
        if (location) void timedFetch(location, { method: 'DELETE', headers: this.#authorization ? { authorization: this.#authorization } : {} }, this.timeoutMs, `DELETE ${location}`).then(discard, () => undefined)
        await this.backoff(attempt)
        const have = await this.headBlob(digest).catch(() => null)
        if (have === size) return
      }
    }
  }

  /** PUT a manifest under a tag or its digest; returns the registry's digest for it. */
  async putManifest(reference: string, bytes: Buffer, mediaType: string): Promise<string> {
    const what = `manifest ${this.host}/${this.repo}${isDigest(reference) ? '@' : ':'}${reference}`
    const digest = sha256Digest(bytes)
    const res = await this.send('PUT', this.url(`manifests/${reference}`), { headers: { 'content-type': mediaType }, body: bytes, retry: true }, what)
    if (!res.ok) await failFrom(res, `PUT ${what}`)
    await discard(res)
    const header = res.headers.get('docker-content-digest')
    if (header && header.startsWith('sha256:') && header !== digest) {
      throw new StrataError('IMAGE_DIGEST_MISMATCH', `PUT ${what}: the registry stored ${header}, we sent ${digest}`)
    }
    return digest
  }

  #location(res: Response, what: string): string {
    const loc = res.headers.get('location')
    if (!loc) throw new StrataError('IMAGE_REMOTE_ERROR', `${what}: HTTP ${res.status} without a Location`)
    return new URL(loc, res.url || this.base).toString()
  }
}

function verify(gotSize: number, gotDigest: string, digest: string, size: number, what: string): void {
  if (gotSize !== size) throw new StrataError('IMAGE_SIZE_MISMATCH', `${what}: got ${gotSize} bytes, the manifest declares ${size}`)
  if (gotDigest !== digest) throw new StrataError('IMAGE_DIGEST_MISMATCH', `${what}: the bytes hash to ${gotDigest}`)
}

async function readCapped(res: Response, max: number, what: string): Promise<Buffer> {
  const parts: Buffer[] = []
  let n = 0
  if (res.body) {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      n += chunk.length
      if (n > max) {
        await res.body.cancel().catch(() => undefined)
        throw new StrataError('IMAGE_SIZE_MISMATCH', `${what}: more than ${max} bytes`)
      }
      parts.push(Buffer.from(chunk))
    }
  }
  return Buffer.concat(parts)
}
