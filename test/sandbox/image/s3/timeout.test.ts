// An S3 endpoint that accepts connections and then says nothing, or stops in
// the middle of a body: push and pull fail IMAGE_REMOTE_ERROR "timed out"
// naming the object and the endpoint after one timeout, without the SDK's
// or push's own retries. No S3 server needed: plain local servers and a
// store that is only asked for the image.
import test from 'ava'
import { pullS3, pushS3, type S3TransferOptions, type TransferStore } from '../../../../sandbox/image/s3/index.js'
import { MANIFEST_MEDIA_TYPE, emptyConfig, encodeManifest, sha256Digest, type ImageManifest } from '../../../../sandbox/image/types.js'
import { S3RVER_CREDENTIALS } from '../../../helpers/s3rver.js'
import { serveHttp, startSilentServer, timedFailure } from '../../../helpers/registry.js'

const TIMEOUT = 500

function opts(endpoint: string): S3TransferOptions {
  return { endpoint, region: 'us-east-1', forcePathStyle: true, credentials: S3RVER_CREDENTIALS, timeoutMs: TIMEOUT }
}

/** A store holding image a:1 (one layer) as far as push asks before it talks to the bucket. */
function oneImageStore(): TransferStore {
  const manifest: ImageManifest = {
    schemaVersion: 1,
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: [{ digest: 'sha256:' + 'a'.repeat(64), size: 10, kind: 'base' }],
    config: emptyConfig(),
    source: { type: 'rootfs', ref: '/x' },
    created: '2026-01-01T00:00:00.000Z',
  }
  const bytes = encodeManifest(manifest)
  return { resolve: async () => ({ ref: { name: 'a', tag: '1' }, digest: sha256Digest(bytes), bytes, manifest }) } as unknown as TransferStore
}

test('push and pull against an endpoint that never answers: timed out once, naming the object and the endpoint, no retries', async (t) => {
  const silent = await startSilentServer(t)
  const endpoint = `http://127.0.0.1:${silent.port}`
  const push = await timedFailure(pushS3(oneImageStore(), 'a:1', 's3://bkt/p', opts(endpoint)))
  t.like(push.error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((push.error as Error).message, new RegExp(`HEAD s3://bkt/p/blobs/sha256/a{64}: timed out: .* for 0.5 s \\(endpoint ${endpoint}\\)`))
  t.log(`push failed after ${push.ms} ms`)
  t.is(silent.connections(), 1, 'the SDK does not send a timed-out request again')
  const pull = await timedFailure(pullS3(oneImageStore(), 's3://bkt/p/a:1', opts(endpoint)))
  t.like(pull.error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((pull.error as Error).message, new RegExp(`GET s3://bkt/p/tags/a/1: timed out: .*\\(endpoint ${endpoint}\\)`))
  t.log(`pull failed after ${pull.ms} ms`)
})

test('a body that stops in the middle: timed out', async (t) => {
  let gets = 0
  const host = await serveHttp(t, (_req, res) => {
    gets++
    res.writeHead(200, { 'content-length': '100', 'content-type': 'text/plain' })
    res.write('sha256:')
  })
  const { error, ms } = await timedFailure(pullS3(oneImageStore(), 's3://bkt/p/a:1', opts(`http://${host}`)))
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, /GET s3:\/\/bkt\/p\/tags\/a\/1: timed out/)
  t.log(`failed after ${ms} ms`)
  t.is(gets, 1)
})

test('a 404 whose error body stalls is the timeout, not "no such key": the pull stops there instead of trying the next PREFIX/NAME split, each waiting the timeout', async (t) => {
  const gets: string[] = []
  const host = await serveHttp(t, (req, res) => {
    gets.push(req.url!)
    res.writeHead(404, { 'content-type': 'application/xml', 'content-length': '200' })
    res.write('<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code>') // and nothing more
  })
  // two splits: PREFIX p/a NAME b, PREFIX p NAME a/b
  const { error } = await timedFailure(pullS3(oneImageStore(), 's3://bkt/p/a/b:1', opts(`http://${host}`)))
  // (it was: each split taken for a missing tag after the timeout, then IMAGE_NOT_FOUND 'no image')
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, /GET s3:\/\/bkt\/p\/a\/tags\/b\/1: timed out/)
  t.is(gets.length, 1, gets.join(' '))
})
