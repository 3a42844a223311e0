// A registry that accepts connections and then says nothing, or stops in
// the middle of a body: the client fails IMAGE_REMOTE_ERROR "timed out"
// naming the URL after one timeout, without retrying; a body that keeps
// moving, however slowly, is not cut off. No registry needed: plain local
// servers.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { RegistryClient } from '../../../../sandbox/image/registry/client.js'
import { pullRegistry, pushRegistry } from '../../../../sandbox/image/registry/index.js'
import type { ImageStore } from '../../../../sandbox/image/store.js'
import { emptyConfig, MANIFEST_MEDIA_TYPE } from '../../../../sandbox/image/types.js'
import { tmpDir } from '../../../helpers/procs.js'
import { serveHttp, startSilentServer, timedFailure } from '../../../helpers/registry.js'

const TIMEOUT = 400

test('a registry that never answers: ping times out once, not retried, naming the URL', async (t) => {
  const silent = await startSilentServer(t)
  const host = `127.0.0.1:${silent.port}`
  const c = new RegistryClient(host, 'x/y', { timeoutMs: TIMEOUT })
  const { error, ms } = await timedFailure(c.ping())
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, new RegExp(`GET http://${host}/v2/: timed out: no answer for 0.4 s`))
  t.log(`failed after ${ms} ms`)
  t.is(silent.connections(), 1, 'a timed-out request is not sent again')
})

test('push and pull against a registry that never answers fail as timed out (that a timed-out request is not sent again: the ping test above)', async (t) => {
  const silent = await startSilentServer(t)
  const url = `docker://127.0.0.1:${silent.port}/x/y:1`
  const manifest = { schemaVersion: 1, mediaType: MANIFEST_MEDIA_TYPE, layers: [], config: emptyConfig(), source: { type: 'rootfs', ref: '/x' }, created: '2026-01-01T00:00:00.000Z' }
  // push reads nothing from the store before it has reached the registry
  const store = { resolve: async () => ({ manifest }) } as unknown as ImageStore
  const push = await timedFailure(pushRegistry(store, 'a:1', url, { timeoutMs: TIMEOUT, layerCache: false }))
  t.like(push.error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((push.error as Error).message, /timed out/)
  t.log(`push failed after ${push.ms} ms`)
  const pull = await timedFailure(pullRegistry({} as ImageStore, url, { timeoutMs: TIMEOUT }))
  t.like(pull.error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((pull.error as Error).message, new RegExp(`http://127.0.0.1:${silent.port}/v2/.*timed out`))
  t.log(`pull failed after ${pull.ms} ms`)
})

test('a blob body that stops: timed out, the file removed; a slow body that keeps moving completes', async (t) => {
  const blob = crypto.randomBytes(4000)
  const digest = 'sha256:' + crypto.createHash('sha256').update(blob).digest('hex')
  let requests = 0
  const host = await serveHttp(t, (req, res) => {
    if (req.url === '/v2/') {
      res.end('{}')
      return
    }
    requests++
    res.writeHead(200, { 'content-length': String(blob.length) })
    if (req.url!.startsWith('/v2/stall/')) {
      res.write(blob.subarray(0, 100))
      return // and nothing more
    }
    // 10 pieces, one every TIMEOUT/2: slower in all than the timeout, never idle for it
    let i = 0
    const step = () => {
      res.write(blob.subarray(i * 400, (i + 1) * 400))
      if (++i === 10) res.end()
      else setTimeout(step, TIMEOUT / 2)
    }
    step()
  })
  const dir = tmpDir(t, 'strata-reg-timeout-')
  const stalled = new RegistryClient(host, 'stall/x', { timeoutMs: TIMEOUT })
  const file = path.join(dir, 'blob')
  const { error } = await timedFailure(stalled.getBlobToFile(digest, blob.length, file))
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, new RegExp(`GET http://${host}/v2/stall/x/blobs/${digest}: timed out: no bytes of the body for 0.4 s`))
  t.false(fs.existsSync(file))
  t.is(requests, 1, 'a stalled body is not fetched again')
  const slow = new RegistryClient(host, 'slow/x', { timeoutMs: TIMEOUT })
  const t0 = Date.now()
  await slow.getBlobToFile(digest, blob.length, file)
  t.true(Date.now() - t0 > TIMEOUT * 2)
  t.deepEqual(fs.readFileSync(file), blob)
})

test('an upload whose PATCH (a body sent in slices) is never answered times out, and is not restarted', async (t) => {
  const data = crypto.randomBytes(3 << 20)
  const digest = 'sha256:' + crypto.createHash('sha256').update(data).digest('hex')
  let patches = 0
  const host = await serveHttp(t, (req, res) => {
    if (req.url === '/v2/') {
      res.end('{}')
      return
    }
    if (req.method === 'POST') {
      res.writeHead(202, { location: '/v2/x/y/blobs/uploads/1' })
      res.end()
      return
    }
    if (req.method === 'PATCH') {
      patches++
      // take the whole body, then say nothing
      req.resume()
      return
    }
    if (req.method === 'HEAD') {
      res.writeHead(404)
      res.end()
      return
    }
    res.writeHead(500)
    res.end()
  })
  const dir = tmpDir(t, 'strata-reg-timeout-')
  const file = path.join(dir, 'blob')
  fs.writeFileSync(file, data)
  const c = new RegistryClient(host, 'x/y', { timeoutMs: TIMEOUT, chunkSize: data.length, actions: 'pull,push' })
  const { error } = await timedFailure(c.uploadBlob(file, digest, data.length))
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, /PATCH http:\/\/.*\/v2\/x\/y\/blobs\/uploads\/1: timed out: no answer for 0.4 s/)
  t.is(patches, 1, 'the upload is not restarted after a timeout')
})

test('https to a registry that speaks plain http: IMAGE_REMOTE_ERROR hinting at --insecure, at once', async (t) => {
  let hits = 0
  const host = await serveHttp(t, (_req, res) => {
    hits++
    res.end('{}')
  })
  const c = new RegistryClient(host, 'x/y', { insecure: false, timeoutMs: TIMEOUT })
  const { error } = await timedFailure(c.ping())
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, new RegExp(`GET https://${host}/v2/: ERR_SSL_WRONG_VERSION_NUMBER: the TLS handshake failed; if ${host} serves plain http, use --insecure`))
  t.is(hits, 0)
})

test('a 404 whose error body stalls is the timeout (IMAGE_REMOTE_ERROR "timed out"), not IMAGE_NOT_FOUND', async (t) => {
  const requests: string[] = []
  const host = await serveHttp(t, (req, res) => {
    if (req.url === '/v2/') {
      res.end('{}')
      return
    }
    requests.push(req.url!)
    res.writeHead(404, { 'content-type': 'application/json', 'content-length': '200' })
    res.write('{"errors":[{"code":') // and nothing more
  })
  const c = new RegistryClient(host, 'x/y', { timeoutMs: TIMEOUT })
  const { error } = await timedFailure(c.getManifest('v1'))
  // (it was IMAGE_NOT_FOUND 'HTTP 404', after the timeout)
  t.like(error, { code: 'IMAGE_REMOTE_ERROR' })
  t.regex((error as Error).message, new RegExp(`GET http://${host}/v2/x/y/manifests/v1: timed out: no bytes of the body for 0.4 s`))
  t.deepEqual(requests, ['/v2/x/y/manifests/v1'])
})
