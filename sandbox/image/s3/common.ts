// What push and pull share: the slice of the image store they use, options,
// results, a request limiter and cancellation.
import { setMaxListeners } from 'node:events'
import type { Readable } from 'node:stream'
import { StrataError } from '../../../fs/common/errors.js'
import type { ImageManifest, ImageRef } from '../types.js'
import type { S3Client } from '@aws-sdk/client-s3'
import type { S3ClientInit } from './client.js'

/**
 * The part of ImageStore (sandbox/image/store.ts) that S3 transfers use;
 * ImageStore satisfies it. Blob reads take byte ranges (end exclusive).
 */
export interface TransferStore {
  resolve(ref: string): Promise<{ ref: ImageRef; digest: string; bytes: Buffer; manifest: ImageManifest }>
  readBlob(digest: string, opts?: { start?: number; end?: number }): Readable
  readBlobInto(digest: string, start: number, target: Buffer): Promise<void>
  statBlob(digest: string): Promise<{ digest: string; size: number } | null>
  partialBlobLength(digest: string): Promise<number>
  writePartialBlob(digest: string, at: number, chunk: Uint8Array): Promise<void>
  finishPartialBlob(digest: string, expectSize?: number): Promise<{ digest: string; size: number }>
  putManifest(m: Buffer): Promise<{ digest: string; bytes: Buffer }>
  setTag(name: string, tag: string, digest: string): Promise<void>
  /** the diffId cache (ImageStore's): uncompressed builds only, the default variant */
  lookupDiffId(diffId: string): Promise<string | null>
  recordDiffId(diffId: string, layerDigest: string): Promise<void>
  /** leases (ImageStore's): a pull holds what it stores until its tag is written, as an import does */
  addLease(holder: string, digest: string): Promise<void>
  removeLease(holder: string, digest: string): Promise<void>
  keepFresh(path: string): () => void
  leaseHolderPath(holder: string): string
}

/** Progress reporting as sandbox/image/progress.ts provides it. */
export interface TransferProgress {
  start(label: string, total?: number): TransferTask
}

export interface TransferTask {
  tick(bytes: number): void
  done(note?: string): void
}

export interface S3TransferOptions extends S3ClientInit {
  /** an existing client (then endpoint/region/credentials are ignored and the client is not destroyed) */
  client?: S3Client
  progress?: TransferProgress
  /** aborting leaves what was transferred in place for the next run (CANCELLED) */
  signal?: AbortSignal
  /** multipart part size in bytes (default 16 MiB, at least 5 MiB as S3 requires); blobs up to this size go in one PutObject */
  partSize?: number
  /** object requests in flight (default 4) */
  concurrency?: number
  /**
   * Directory for records of unfinished multipart uploads, used when the
   * server cannot list them (see journal.ts). Without it such servers restart
   * an interrupted blob from its first part.
   */
  stateDir?: string
  /** after every uploaded part or object (tests use it to interrupt a push) */
  onUpload?: (e: { digest: string; partNumber: number; bytes: number }) => void
  /** after every body chunk received (tests use it to interrupt a pull) */
  onReceive?: (e: { digest: string; bytes: number }) => void
}

export interface PushResult {
  ref: string
  url: string
  digest: string
  /** the tag written (`v1`; its object is tags/NAME/TAG under the prefix; none when pushed by digest), as a registry push reports it */
  tag?: string
  blobsPushed: number
  blobsSkipped: number
  /** parts found already uploaded by an earlier, interrupted run */
  partsResumed: number
  bytesSent: number
}

export interface PullResult {
  url: string
  /** local name and tag the image was tagged as ('' when pulled by digest without --name tag) */
  name: string
  tag: string
  digest: string
  blobsFetched: number
  blobsSkipped: number
  /** bytes of blobs that were already in the store as partial downloads */
  bytesResumed: number
  bytesReceived: number
}

export const DEFAULT_PART_SIZE = 16 * 1024 * 1024
export const MIN_PART_SIZE = 5 * 1024 * 1024
/** S3's largest part, and its largest single PUT: a blob up to the part size goes in one PUT. */
export const MAX_PART_SIZE = 5 * 1024 * 1024 * 1024
/** S3 allows at most 10000 parts per upload. */
export const MAX_PARTS = 10000

/** Runs at most `n` tasks at once, in submission order. */
export class Limiter {
  #active = 0
  readonly #queue: Array<() => void> = []

  constructor(readonly n: number) {}

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#active >= this.n) await new Promise<void>((r) => this.#queue.push(r))
    this.#active++
    try {
      return await fn()
    } finally {
      this.#active--
      this.#queue.shift()?.()
    }
  }
}

/**
 * A signal that follows `outer` and can be aborted on its own. Every request
 * in flight listens on it, so the listener warning threshold is lifted.
 */
export function linkedSignal(outer: AbortSignal | undefined): { signal: AbortSignal; abort(reason?: unknown): void; dispose(): void } {
  const ac = new AbortController()
  setMaxListeners(0, ac.signal)
  const onOuter = () => ac.abort(outer?.reason)
  if (outer?.aborted) ac.abort(outer.reason)
  else outer?.addEventListener('abort', onOuter, { once: true })
  return { signal: ac.signal, abort: (r) => ac.abort(r), dispose: () => outer?.removeEventListener('abort', onOuter) }
}

export function isAbort(e: unknown): boolean {
  const n = (e as { name?: string })?.name
  return n === 'AbortError' || (e as { code?: string })?.code === 'ABORT_ERR'
}

/**
 * The CANCELLED a stopped transfer ends with. Stopped by the CLI's Ctrl-C or
 * SIGTERM (a CANCELLED reason naming the signal), it keeps that wording
 * (`image push interrupted by SIGINT`), as every other interrupted image
 * command reports it, and adds that a second run resumes; otherwise `what`
 * was cancelled.
 */
export function cancelled(what: string, signal?: AbortSignal): StrataError {
  const r: unknown = signal?.reason
  if (r instanceof StrataError && r.code === 'CANCELLED' && r.detail?.signal !== undefined) {
    return new StrataError('CANCELLED', `${r.reason}; run the command again to resume`, { detail: r.detail })
  }
  return new StrataError('CANCELLED', `${what}: cancelled; run the command again to resume`)
}

/**
 * Runs `tasks` with a shared abort: the first failure aborts the others (and
 * `outer` aborts all); waits until every task has settled, then throws the
 * first failure.
 */
export async function allOrAbort<T>(outer: AbortSignal | undefined, tasks: Array<(signal: AbortSignal) => Promise<T>>): Promise<T[]> {
  const ac = linkedSignal(outer)
  let first: { e: unknown } | null = null
  try {
    const settled = await Promise.allSettled(
      tasks.map((t) =>
        t(ac.signal).catch((e: unknown) => {
          // a task that failed because a sibling aborted it is not the cause
          if (!first && !(isAbort(e) && ac.signal.aborted && !outer?.aborted)) first = { e }
          ac.abort(e)
          throw e
        }),
      ),
    )
    if (first) throw (first as { e: unknown }).e
    const failed = settled.find((s) => s.status === 'rejected')
    if (failed) throw (failed as PromiseRejectedResult).reason
    return settled.map((s) => (s as PromiseFulfilledResult<T>).value)
  } finally {
    ac.dispose()
  }
}

export function shortDigest(d: string): string {
  return d.slice('sha256:'.length, 'sha256:'.length + 12)
}
