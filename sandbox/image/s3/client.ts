// The S3 client of image push/pull (@aws-sdk/client-s3) and the mapping of
// its failures onto the image error codes.
import os from 'node:os'
import path from 'node:path'
import { S3Client, type S3ClientConfig } from '@aws-sdk/client-s3'
import { ENV_PROFILE, parseKnownFiles } from '@smithy/core/config'
import { StrataError } from '../../../fs/common/errors.js'

/** Where and how to reach the object store. Unset fields come from the SDK's default chain (env, profile files). */
export interface S3ClientInit {
  /** `http(s)://host:port` of an S3-compatible server; default: the SDK's (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, profile endpoint_url, AWS). */
  endpoint?: string
  /** default: AWS_REGION / profile, then `us-east-1` */
  region?: string
  /** `http://endpoint/bucket/key` instead of `http://bucket.endpoint/key` (needed by most local servers) */
  forcePathStyle?: boolean
  /** default: the SDK's chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws files, SSO, IMDS) */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string }
  /** attempts per request (default 3); a timed-out attempt is not repeated */
  maxAttempts?: number
  /**
   * ms the server may leave a request without an answer, or a body without
   * new bytes, before the request fails "timed out" (default 60 s). Measured
   * on the socket, so a large upload or download that keeps moving is never
   * cut off.
   */
  timeoutMs?: number
  /** parallel connections (default 16) */
  maxSockets?: number
}

export const DEFAULT_TIMEOUT_MS = 60_000

interface RetryToken {
  getRetryCount(): number
  getRetryDelay(): number
}

/** Attempts of one S3 request (the SDK's, and push's own resends of a streamed PUT): 4 retries. */
export const S3_MAX_ATTEMPTS = 5

/**
 * The wait before retry `n` (1, 2, …): 250 ms doubling to at most 5 s, the
 * upper half jittered, so that the retries of a request span ~2–4 s and an
 * object store that restarts meanwhile is found again (the registry client's
 * backoff).
 */
export function s3RetryDelayMs(n: number): number {
  if (n <= 0) return 0
  const d = Math.min(250 * 2 ** (n - 1), 5000)
  return d / 2 + (Math.random() * d) / 2
}

function retryToken(count: number): RetryToken {
  const delay = s3RetryDelayMs(count)
  return { getRetryCount: () => count, getRetryDelay: () => delay }
}

/**
 * The SDK's standard retries (transient, throttling and server errors, up
 * to `maxAttempts`), except that an answer "not implemented" (501/405) and a
 * timed-out attempt are final: the SDK
 * would wait the whole timeout again on each attempt, against a server that
 * accepts connections and never answers several minutes in all.
 */
function retryStrategy(maxAttempts: number) {
  return {
    mode: 'standard',
    acquireInitialRetryToken: async (_scope: string): Promise<RetryToken> => retryToken(0),
    refreshRetryTokenForRetry: async (token: RetryToken, info: { errorType: string; error?: unknown }): Promise<RetryToken> => {
      const next = token.getRetryCount() + 1
      // a server that does not implement a request (s3rver's ListMultipartUploads: 501) answers the same
      // every time; push falls back at once, so asking again only waits out the backoff (~4 s)
      if (next >= maxAttempts || info.errorType === 'CLIENT_ERROR' || isTimeout(info.error) || isNotImplemented(info.error)) throw new Error('no more attempts')
      return retryToken(next)
    },
    recordSuccess: (_token: RetryToken): void => {},
  }
}

/**
 * Socket errors the SDK's HTTP handler renames `TimeoutError` although nothing
 * timed out: the server closed or restarted under the request, which is worth
 * another attempt.
 */
const RESET_CODES = new Set(['ECONNRESET', 'EPIPE'])

function isReset(e: unknown): boolean {
  const code = (e as SdkError | undefined)?.code
  return typeof code === 'string' && RESET_CODES.has(code)
}

/** The SDK's timeouts: no connection, or a socket idle for the timeout. */
export function isTimeout(e: unknown): boolean {
  if (e instanceof StrataError) return (e.detail as { timeout?: unknown } | undefined)?.timeout === true
  const err = e as SdkError | undefined
  if (isReset(err)) return false
  return err?.name === 'TimeoutError' || err?.code === 'ETIMEDOUT'
}

const ignore = (): void => {}
const SILENT_LOGGER = { trace: ignore, debug: ignore, info: ignore, warn: ignore, error: ignore }

/**
 * An S3Client for `init`. The SDK warns once per process that its releases
 * after January 2027 need Node >= 22; Strata runs on Node 20 with this pinned
 * release, so that one warning is turned off through the SDK's own switch
 * (AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED, read by
 * @aws-sdk/core emitWarningIfUnsupportedVersion when a client is built).
 * Every other warning still reaches process 'warning' listeners.
 */
export async function createS3Client(init: S3ClientInit = {}): Promise<S3Client> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
  if (!init.credentials) missingProfile = await findMissingProfile()
  const base: S3ClientConfig = {
    ...(init.endpoint ? { endpoint: init.endpoint } : {}),
    ...(init.forcePathStyle !== undefined ? { forcePathStyle: init.forcePathStyle } : {}),
    ...(init.credentials ? { credentials: init.credentials } : {}),
    maxAttempts: init.maxAttempts ?? S3_MAX_ATTEMPTS,
    retryStrategy: retryStrategy(init.maxAttempts ?? S3_MAX_ATTEMPTS),
    // Integrity: PutObject/UploadPart carry a Content-MD5 computed here
    // (natively) or, for one-PUT blobs, their known SHA-256 with the MD5
    // checked against the ETag (push.ts putStreamed), and pulls verify sha256
    // digests end to end; the SDK's own CRC32 (computed in JS over every
    // body) would only add CPU on the data path.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // The SDK logs nowhere by default, except that its retry step writes
    // "non-retryable streaming request" to the console when it gives up on a
    // request whose body is a stream, a blob PUT that push sends again itself
    // (push.ts putStreamed). A logger of our own that also logs nowhere keeps
    // that one line off the user's terminal and changes nothing else.
    logger: SILENT_LOGGER,
    requestHandler: {
      // socketTimeout is the inactivity timer that stays on while the body
      // streams; requestTimeout (the SDK's whole-request timer) only logs a
      // warning unless told to throw, and would cut off large transfers
      socketTimeout: init.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      connectionTimeout: Math.min(init.timeoutMs ?? DEFAULT_TIMEOUT_MS, 10_000),
      httpAgent: { keepAlive: true, maxSockets: init.maxSockets ?? 16 },
      httpsAgent: { keepAlive: true, maxSockets: init.maxSockets ?? 16 },
    },
  }
  if (init.region) return new S3Client({ ...base, region: init.region })
  // region from the default chain; a custom endpoint without one still works
  const probe = new S3Client(base)
  try {
    await probe.config.region()
    return probe
  } catch {
    probe.destroy()
    return new S3Client({ ...base, region: 'us-east-1' })
  }
}

/**
 * What is wrong with $AWS_PROFILE, when it names a profile that neither AWS
 * file has: the SDK's chain then ends in "Could not load credentials from any
 * providers", which does not say that the name is the problem (nor that the
 * SDK takes AWS_PROFILE over AWS_ACCESS_KEY_ID, so keys in the environment
 * are not used). Set by createS3Client, which every request follows, for
 * s3Error, which cannot wait for the files.
 */
let missingProfile: string | undefined

async function findMissingProfile(): Promise<string | undefined> {
  const profile = process.env[ENV_PROFILE]
  if (!profile) return undefined
  let known: Record<string, unknown>
  try {
    known = await parseKnownFiles({})
  } catch {
    return undefined // an unreadable file: the SDK's own message says more
  }
  if (Object.hasOwn(known, profile)) return undefined
  const aws = path.join(os.homedir(), '.aws')
  const files = `${process.env.AWS_CONFIG_FILE || path.join(aws, 'config')} nor ${process.env.AWS_SHARED_CREDENTIALS_FILE || path.join(aws, 'credentials')}`
  const keys = process.env.AWS_ACCESS_KEY_ID ? '; the SDK takes AWS_PROFILE over AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, so unset AWS_PROFILE to use those' : ''
  return `AWS_PROFILE is "${profile}", a profile in neither ${files}${keys}`
}

interface SdkError {
  name?: string
  code?: string
  message?: string
  $fault?: 'client' | 'server'
  $metadata?: { httpStatusCode?: number }
}

const AUTH_NAMES = new Set([
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'AccessDenied',
  'ExpiredToken',
  'InvalidToken',
  'TokenRefreshRequired',
  'CredentialsProviderError',
  'AuthorizationHeaderMalformed',
  'InvalidSecurity',
  'AllAccessDisabled',
])

/** HTTP status of an SDK error (undefined for transport failures). */
export function statusOf(e: unknown): number | undefined {
  return (e as SdkError)?.$metadata?.httpStatusCode
}

/** S3 error name (`NoSuchKey`, `NotFound`, …) or a Node error code (`ECONNREFUSED`). */
export function errorName(e: unknown): string {
  const err = e as SdkError
  return err?.name && err.name !== 'Error' ? err.name : (err?.code ?? 'Error')
}

/** The object (not the bucket or the upload) does not exist. */
export function isNotFound(e: unknown): boolean {
  // a 404 whose error body stalled is a timeout (the SDK keeps the status): not an answer to act on
  if (isTimeout(e)) return false
  const n = errorName(e)
  return n === 'NoSuchKey' || n === 'NotFound' || (statusOf(e) === 404 && n !== 'NoSuchBucket' && n !== 'NoSuchUpload')
}

/** The server does not implement the operation (s3rver has no ListMultipartUploads/ListParts). */
export function isNotImplemented(e: unknown): boolean {
  const n = errorName(e)
  const s = statusOf(e)
  return n === 'NotImplemented' || n === 'MethodNotAllowed' || s === 501 || s === 405
}

/** A remote failure with the endpoint named (the s3:// URL in `what` does not say which server). */
export function atEndpoint(e: StrataError, endpoint: string | undefined): StrataError {
  if (!endpoint || e.code !== 'IMAGE_REMOTE_ERROR' || e.reason.includes(endpoint)) return e
  return new StrataError(e.code, `${e.reason} (endpoint ${endpoint})`, { cause: e.cause, ...(e.detail ? { detail: e.detail } : {}) })
}

/**
 * Maps an SDK failure to IMAGE_AUTH_FAILED (credentials missing or refused),
 * IMAGE_NOT_FOUND (a missing bucket, for push as for pull: docs/images.md's errors) or
 * IMAGE_REMOTE_ERROR (anything else: refused connections, resets, timeouts
 * ("timed out", with `detail.timeout`), 5xx), keeping the SDK error as the cause.
 */
export function s3Error(e: unknown, what: string): StrataError {
  if (e instanceof StrataError) return e
  const name = errorName(e)
  const status = statusOf(e)
  const msg = (e as SdkError)?.message || name
  if (name === 'CredentialsProviderError') {
    if (missingProfile) return new StrataError('IMAGE_AUTH_FAILED', `${what}: ${missingProfile}`, { cause: e })
    return new StrataError('IMAGE_AUTH_FAILED', `${what}: no AWS credentials found (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws/credentials): ${msg}`, { cause: e })
  }
  // an answer without a body (HEAD) leaves the SDK nothing but "Unknown: UnknownError": the status says more
  const nameless = name === 'Unknown' || name === 'UnknownError' || msg === 'UnknownError'
  const said = nameless && status !== undefined ? `HTTP ${status}` : `${status !== undefined ? `HTTP ${status} ` : ''}${name}: ${msg}`
  if (AUTH_NAMES.has(name) || status === 401 || status === 403) {
    return new StrataError('IMAGE_AUTH_FAILED', `${what}: the object store refused the credentials: ${said}`, { cause: e })
  }
  if (name === 'NoSuchBucket') return new StrataError('IMAGE_NOT_FOUND', `${what}: the bucket does not exist`, { cause: e })
  if (isTimeout(e)) {
    const ms = /(\d+) ms/.exec(msg)
    const after = ms ? ` for ${Math.round(Number(ms[1]) / 100) / 10} s` : ''
    const why = /connection/i.test(msg) ? `no connection${after}` : `no answer or no bytes of the body${after}`
    return new StrataError('IMAGE_REMOTE_ERROR', `${what}: timed out: ${why}`, { cause: e, detail: { timeout: true } })
  }
  if (isReset(e)) return new StrataError('IMAGE_REMOTE_ERROR', `${what}: the connection was reset (${(e as SdkError).code}): ${msg}`, { cause: e })
  return new StrataError('IMAGE_REMOTE_ERROR', `${what}: ${said}`, { cause: e })
}
