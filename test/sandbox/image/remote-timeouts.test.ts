// `--timeout` against a registry and an S3 endpoint that hang on one kind of
// request, the others served by a real docker-registry and s3rver through a
// fault proxy: push and pull of a stored image fail IMAGE_REMOTE_ERROR
// "timed out" naming the request, and send no hung request again. The fake
// servers of registry/timeout.test.ts and s3/timeout.test.ts cover the
// client's timers; this covers the transfers that use them (manifest PUT,
// blob uploads, multipart parts, blob and manifest GETs in a pull).
import anyTest, { type TestFn } from 'ava'
import type http from 'node:http'
import { pullRegistry, pushRegistry } from '../../../sandbox/image/registry/index.js'
import { pullS3, pushS3 } from '../../../sandbox/image/s3/index.js'
import { localTmp, startImageCluster, type ImageCluster } from '../../helpers/image-cluster.js'
import { hasRegistryTools, startFaultProxy, startRegistry, timedFailure, type ProxyAction } from '../../helpers/registry.js'
import { S3RVER_CREDENTIALS, startS3 } from '../../helpers/s3rver.js'
import { publishFixture } from './s3/fixture.js'

const test = anyTest as TestFn<{ ic: ImageCluster }>
const root = process.getuid?.() === 0
const TIMEOUT = 1000

test.before(async (t) => {
  if (root) t.context.ic = await startImageCluster()
})
test.after.always(async (t) => {
  await t.context.ic?.close()
})

type Case = [what: string, op: 'push' | 'pull', match: (r: http.IncomingMessage) => boolean, action: ProxyAction, message: RegExp]

/** Runs each case through a fresh proxy: the failure is a timeout naming the request, and no hung request is sent twice. */
async function hangCases(t: import('ava').ExecutionContext, upstream: string, cases: Case[], run: (op: 'push' | 'pull', host: string, i: number) => Promise<unknown>): Promise<void> {
  for (const [i, [what, op, match, action, message]] of cases.entries()) {
    const hung: string[] = []
    const proxy = await startFaultProxy(t, upstream, (r) => {
      if (!match(r)) return 'pass'
      hung.push(`${r.method} ${r.url}`)
      return action
    })
    const { error } = await timedFailure(run(op, proxy.host, i))
    t.like(error, { code: 'IMAGE_REMOTE_ERROR' }, `${what}: ${(error as Error).message}`)
    t.regex((error as Error).message, message, what)
    t.true(hung.length > 0, `${what}: the request was made`)
    t.is(new Set(hung).size, hung.length, `${what}: a hung request was sent again: ${hung.join(', ')}`)
    await proxy.close()
  }
}

;(hasRegistryTools && root ? test.serial : test.serial.skip)('docker://: a registry that hangs on a blob upload, the manifest PUT, a manifest or blob GET', async (t) => {
  const store = await t.context.ic.store('remote-timeouts-reg')
  await publishFixture(t, store, 'h/app', 'v1', 1 << 20)
  const reg = await startRegistry(t)
  await pushRegistry(store, 'h/app:v1', `docker://${reg.host}/r/app:v1`, { layerCache: false })
  const timedOut = (method: string, path: string, why: string) => new RegExp(`${method} http://127\\.0\\.0\\.1:\\d+/v2/${path}: timed out: ${why} for 1 s`)
  const cases: Case[] = [
    ['PATCH of a blob, its body unread', 'push', (r) => r.method === 'PATCH', 'hang', timedOut('PATCH', 'r/new0/blobs/uploads/\\S+', 'no answer')],
    ['manifest PUT', 'push', (r) => r.method === 'PUT' && r.url!.includes('/manifests/'), 'hang', timedOut('PUT', 'r/new1/manifests/v1', 'no answer')],
    ['manifest GET, headers then a stalled body', 'pull', (r) => r.method === 'GET' && r.url!.includes('/manifests/'), 'stall-body', timedOut('GET', 'r/app/manifests/v1', 'no bytes of the body')],
    ['blob GET', 'pull', (r) => r.method === 'GET' && r.url!.includes('/blobs/'), 'hang', timedOut('GET', 'r/app/blobs/sha256:[0-9a-f]{64}', 'no answer')],
    ['blob GET, headers then a stalled body', 'pull', (r) => r.method === 'GET' && r.url!.includes('/blobs/'), 'stall-body', timedOut('GET', 'r/app/blobs/sha256:[0-9a-f]{64}', 'no bytes of the body')],
  ]
  await hangCases(t, reg.host, cases, (op, host, i) =>
    op === 'push'
      ? pushRegistry(store, 'h/app:v1', `docker://${host}/r/new${i}:v1`, { timeoutMs: TIMEOUT, layerCache: false })
      : pullRegistry(store, `docker://${host}/r/app:v1`, { timeoutMs: TIMEOUT, workDir: localTmp(t), name: `pulled/p${i}` }),
  )
})

;(root ? test.serial : test.serial.skip)('s3://: an endpoint that hangs on a blob PUT, a multipart part, the manifest PUT, a manifest or blob GET', async (t) => {
  const store = await t.context.ic.store('remote-timeouts-s3')
  // a 6 MiB layer goes up in two 5 MiB-part uploads, the small one in one PUT
  await publishFixture(t, store, 'h/app', 'v1', 6 << 20)
  const s3 = await startS3(t)
  const base = { region: 'us-east-1', forcePathStyle: true, credentials: S3RVER_CREDENTIALS, partSize: 5 << 20 }
  await pushS3(store, 'h/app:v1', `s3://${s3.bucket}/good`, { ...base, endpoint: s3.endpoint })
  const timedOut = (what: string) => new RegExp(`${what}: timed out: .* for 1 s \\(endpoint http://127\\.0\\.0\\.1:\\d+\\)`)
  const blob = 'blobs/sha256/[0-9a-f]{64}'
  const cases: Case[] = [
    ['one-PUT blob, its body unread', 'push', (r) => r.method === 'PUT' && r.url!.includes('/blobs/') && !r.url!.includes('partNumber'), 'hang', timedOut(`PUT s3://${s3.bucket}/n0/${blob}`)],
    ['multipart part', 'push', (r) => r.method === 'PUT' && r.url!.includes('partNumber'), 'hang', timedOut(`upload part \\d of s3://${s3.bucket}/n1/${blob}`)],
    ['manifest PUT', 'push', (r) => r.method === 'PUT' && r.url!.includes('/manifests/'), 'hang', timedOut(`PUT s3://${s3.bucket}/n2/manifests/sha256/[0-9a-f]{64}`)],
    ['manifest GET, headers then a stalled body', 'pull', (r) => r.method === 'GET' && r.url!.includes('/manifests/'), 'stall-body', timedOut(`GET s3://${s3.bucket}/good/manifests/sha256/[0-9a-f]{64}`)],
    ['blob GET', 'pull', (r) => r.method === 'GET' && r.url!.includes('/blobs/'), 'hang', timedOut(`GET s3://${s3.bucket}/good/${blob}`)],
    ['blob GET, headers then a stalled body', 'pull', (r) => r.method === 'GET' && r.url!.includes('/blobs/'), 'stall-body', timedOut(`GET s3://${s3.bucket}/good/${blob}`)],
  ]
  await hangCases(t, s3.endpoint.replace('http://', ''), cases, async (op, host, i) => {
    const o = { ...base, endpoint: `http://${host}`, timeoutMs: TIMEOUT }
    return op === 'push' ? pushS3(store, 'h/app:v1', `s3://${s3.bucket}/n${i}`, o) : pullS3(await t.context.ic.store(`remote-timeouts-s3-pull-${i}`), `s3://${s3.bucket}/good/h/app:v1`, o)
  })
})
