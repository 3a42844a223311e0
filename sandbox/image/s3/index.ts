// Image push and pull through S3 (`@aws-sdk/client-s3`). See docs/images.md.
//
// The SDK takes ~130 ms to load, a quarter of every `strata` command's start
// and of each daemon's, though only push and pull of s3:// use it: the
// modules that need it are loaded on the first call.
import type { S3Client } from '@aws-sdk/client-s3'
import type { S3ClientInit } from './client.js'
import type { PullResult, PushResult, S3TransferOptions, TransferStore } from './common.js'

export { parseS3Location, parseS3ImageUrl, withPrefix, blobKey, manifestKey, tagKey, type S3Location, type S3ImageUrl } from './url.js'
export { DEFAULT_PART_SIZE, MIN_PART_SIZE, type PushResult, type PullResult, type S3TransferOptions, type TransferStore, type TransferProgress } from './common.js'
export type { S3ClientInit } from './client.js'

/** See push.ts. */
export async function pushS3(store: TransferStore, ref: string, url: string, opts: S3TransferOptions = {}): Promise<PushResult> {
  return (await import('./push.js')).pushS3(store, ref, url, opts)
}

/** See pull.ts. */
export async function pullS3(store: TransferStore, url: string, opts: S3TransferOptions & { name?: string; prefix?: string } = {}): Promise<PullResult> {
  return (await import('./pull.js')).pullS3(store, url, opts)
}

/** See client.ts. */
export async function createS3Client(init: S3ClientInit = {}): Promise<S3Client> {
  return (await import('./client.js')).createS3Client(init)
}
