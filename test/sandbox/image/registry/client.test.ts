// The distribution client against a real registry (Debian docker-registry),
// with skopeo and umoci on the other side.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { RegistryClient } from '../../../../sandbox/image/registry/client.js'
import { OCI_MANIFEST } from '../../../../sandbox/image/oci/media-types.js'
import { sha256Digest } from '../../../../sandbox/image/types.js'
import { tmpDir } from '../../../helpers/procs.js'
import { hasRegistryTools, layoutBlob, sh, skopeoCopy, startFaultProxy, startRegistry, startTokenServer, umociImage, type TestRegistry } from '../../../helpers/registry.js'

const t0 = hasRegistryTools ? test : test.skip
// tests that set process.env (credentials) run alone
const t0serial = hasRegistryTools ? test.serial : test.serial.skip

async function smallImage(dir: string): Promise<{ layout: string; digest: string }> {
  const layout = path.join(dir, 'oci')
  const digest = await umociImage(layout, 'v1', [
    (r) => {
      fs.mkdirSync(path.join(r, 'etc'))
      fs.writeFileSync(path.join(r, 'etc/hello'), 'hello\n')
      fs.writeFileSync(path.join(r, 'big'), crypto.randomBytes(300_000))
    },
    (r) => fs.writeFileSync(path.join(r, 'etc/second'), 'two\n'),
  ])
  return { layout, digest }
}

async function seeded(t: Parameters<typeof tmpDir>[0]): Promise<{ reg: TestRegistry; dir: string; layout: string; digest: string }> {
  const dir = tmpDir(t, 'strata-regc-')
  const reg = await startRegistry(t)
  const { layout, digest } = await smallImage(dir)
  await skopeoCopy(`oci:${layout}:v1`, reg.url('src/app:v1'))
  return { reg, dir, layout, digest }
}

t0('manifests by tag and by digest, blobs streamed to files and verified', async (t) => {
  const { reg, dir, layout, digest } = await seeded(t)
  const c = new RegistryClient(reg.host, 'src/app')
  const byTag = await c.getManifest('v1')
  t.is(byTag.digest, digest)
  t.is(byTag.mediaType, OCI_MANIFEST)
  t.deepEqual(byTag.bytes, layoutBlob(layout, digest))
  const byDigest = await c.getManifest(digest)
  t.deepEqual(byDigest.bytes, byTag.bytes)
  const m = JSON.parse(byTag.bytes.toString()) as { config: { digest: string; size: number }; layers: Array<{ digest: string; size: number }> }
  const cfg = await c.getBlobBuffer(m.config.digest, m.config.size)
  t.deepEqual(cfg, layoutBlob(layout, m.config.digest))
  let ticks = 0
  for (const l of m.layers) {
    const f = path.join(dir, 'layer')
    await c.getBlobToFile(l.digest, l.size, f, (n) => (ticks += n))
    t.deepEqual(fs.readFileSync(f), layoutBlob(layout, l.digest))
  }
  t.is(ticks, m.layers.reduce((a, l) => a + l.size, 0))
  // a declared size that is wrong is caught while streaming
  await t.throwsAsync(c.getBlobToFile(m.layers[0]!.digest, m.layers[0]!.size - 1, path.join(dir, 'x')), { code: 'IMAGE_SIZE_MISMATCH' })
  t.false(fs.existsSync(path.join(dir, 'x')))
  t.is(await c.headBlob(m.layers[0]!.digest), m.layers[0]!.size)
  t.is(await c.headBlob('sha256:' + '0'.repeat(64)), null)
})

t0('chunked upload (several PATCHes), HEAD, manifest PUT; skopeo reads the result', async (t) => {
  const { reg, dir, layout, digest } = await seeded(t)
  const c = new RegistryClient(reg.host, 'dst/copy', { actions: 'pull,push', chunkSize: 64 * 1024 })
  const m = JSON.parse(layoutBlob(layout, digest).toString()) as { config: { digest: string; size: number }; layers: Array<{ digest: string; size: number }> }
  for (const b of [m.config, ...m.layers]) {
    const f = path.join(dir, 'blob')
    fs.writeFileSync(f, layoutBlob(layout, b.digest))
    let sent = 0
    await c.uploadBlob(f, b.digest, b.size, (n) => (sent += n))
    t.is(sent, b.size)
    t.is(await c.headBlob(b.digest), b.size)
  }
  t.true(m.layers[0]!.size > 4 * 64 * 1024, 'the first layer took several PATCHes')
  t.regex(reg.log(), /"PATCH \/v2\/dst\/copy\/blobs\/uploads\//)
  t.is(await c.putManifest('v2', layoutBlob(layout, digest), OCI_MANIFEST), digest)
  const out = path.join(dir, 'out')
  await skopeoCopy(reg.url('dst/copy:v2'), `oci:${out}:v2`)
  t.deepEqual(fs.readFileSync(path.join(out, 'blobs/sha256', digest.slice(7))), layoutBlob(layout, digest))
  // a wrong digest in the PUT is refused by the registry
  const f = path.join(dir, 'blob')
  fs.writeFileSync(f, 'not what the digest says')
  await t.throwsAsync(c.uploadBlob(f, sha256Digest('other'), 24), { code: 'IMAGE_REMOTE_ERROR' })
})

t0('404 is IMAGE_NOT_FOUND; a blob changed in the registry storage is IMAGE_DIGEST_MISMATCH', async (t) => {
  const { reg, dir, layout, digest } = await seeded(t)
  const c = new RegistryClient(reg.host, 'src/app')
  await t.throwsAsync(c.getManifest('nope'), { code: 'IMAGE_NOT_FOUND' })
  await t.throwsAsync(new RegistryClient(reg.host, 'src/none').getManifest('v1'), { code: 'IMAGE_NOT_FOUND' })
  const m = JSON.parse(layoutBlob(layout, digest).toString()) as { config: { digest: string; size: number }; layers: Array<{ digest: string; size: number }> }
  const l = m.layers[0]!
  const file = reg.blobFile(l.digest)
  const bytes = fs.readFileSync(file)
  bytes[bytes.length >> 1] ^= 0xff
  fs.writeFileSync(file, bytes)
  const out = path.join(dir, 'layer')
  await t.throwsAsync(c.getBlobToFile(l.digest, l.size, out), { code: 'IMAGE_DIGEST_MISMATCH' })
  t.false(fs.existsSync(out), 'the unverified download is removed')
  const cfgFile = reg.blobFile(m.config.digest)
  fs.writeFileSync(cfgFile, fs.readFileSync(cfgFile).toString().replace('amd64', 'arm64'))
  await t.throwsAsync(c.getBlobBuffer(m.config.digest, m.config.size), { code: 'IMAGE_DIGEST_MISMATCH' })
})

t0('a registry that is down is IMAGE_REMOTE_ERROR after the retries', async (t) => {
  const { reg, dir } = await seeded(t)
  const c = new RegistryClient(reg.host, 'src/app', { retries: 2, retryDelayMs: 50, actions: 'pull,push', chunkSize: 4096 })
  await c.ping()
  const f = path.join(dir, 'blob')
  const data = crypto.randomBytes(256 * 1024)
  fs.writeFileSync(f, data)
  // counts the waits between retries (the real ones, still waited): their attempt numbers say how often a request was retried
  const backoffs: number[] = []
  const backoff = c.backoff.bind(c)
  c.backoff = (attempt) => (backoffs.push(attempt), backoff(attempt))
  let killed = false
  const started = Date.now()
  await t.throwsAsync(
    c.uploadBlob(f, sha256Digest(data), data.length, () => {
      if (!killed) {
        killed = true
        void reg.stop()
      }
    }),
    { code: 'IMAGE_REMOTE_ERROR' },
  )
  // given up after the retries (not a wall-clock bound: this took 0.5 s alone and 15 s on a loaded machine)
  t.log(`failed after ${Date.now() - started} ms, backoffs ${JSON.stringify(backoffs)}`)
  t.true(backoffs.length > 0, 'retried')
  t.true(backoffs.every((a) => a < 2), 'no request retried more than the 2 retries')
  await t.throwsAsync(c.getManifest('v1'), { code: 'IMAGE_REMOTE_ERROR' })
})

t0serial('bearer token auth (docker-registry auth: token): credentials from options, environment or auth file; bad ones are IMAGE_AUTH_FAILED', async (t) => {
  const dir = tmpDir(t, 'strata-regc-')
  const tokens = await startTokenServer(t, { alice: 'secret' })
  const reg = await startRegistry(t, { auth: tokens.auth })
  const { layout, digest } = await smallImage(dir)
  // skopeo speaks the same token protocol
  await skopeoCopy(`oci:${layout}:v1`, reg.url('team/app:v1'), ['--dest-creds', 'alice:secret'])
  const good = new RegistryClient(reg.host, 'team/app', { username: 'alice', password: 'secret' })
  t.is((await good.getManifest('v1')).digest, digest)
  t.true(tokens.requests.some((r) => r.user === 'alice' && r.scopes.includes('repository:team/app:pull')))
  // push with a token for pull,push
  const pusher = new RegistryClient(reg.host, 'team/copy', { username: 'alice', password: 'secret', actions: 'pull,push', chunkSize: 100_000 })
  const m = JSON.parse(layoutBlob(layout, digest).toString()) as { config: { digest: string; size: number }; layers: Array<{ digest: string; size: number }> }
  for (const b of [m.config, ...m.layers]) {
    const f = path.join(dir, 'blob')
    fs.writeFileSync(f, layoutBlob(layout, b.digest))
    await pusher.uploadBlob(f, b.digest, b.size)
  }
  await pusher.putManifest('v1', layoutBlob(layout, digest), OCI_MANIFEST)
  t.true(tokens.requests.some((r) => r.user === 'alice' && r.scopes.includes('repository:team/copy:pull,push')))
  // credentials from an auth file
  const authFile = path.join(dir, 'auth.json')
  fs.writeFileSync(authFile, JSON.stringify({ auths: { [reg.host]: { auth: Buffer.from('alice:secret').toString('base64') } } }))
  const saved = process.env.REGISTRY_AUTH_FILE
  process.env.REGISTRY_AUTH_FILE = authFile
  try {
    t.is((await new RegistryClient(reg.host, 'team/copy').getManifest('v1')).digest, digest)
  } finally {
    if (saved === undefined) delete process.env.REGISTRY_AUTH_FILE
    else process.env.REGISTRY_AUTH_FILE = saved
  }
  // anonymous gets a token without access: 401 insufficient_scope
  process.env.REGISTRY_AUTH_FILE = path.join(dir, 'none.json')
  try {
    await t.throwsAsync(new RegistryClient(reg.host, 'team/app').getManifest('v1'), { code: 'IMAGE_AUTH_FAILED' })
    await t.throwsAsync(new RegistryClient(reg.host, 'team/app', { username: 'alice', password: 'wrong' }).getManifest('v1'), { code: 'IMAGE_AUTH_FAILED' })
  } finally {
    if (saved === undefined) delete process.env.REGISTRY_AUTH_FILE
    else process.env.REGISTRY_AUTH_FILE = saved
  }
  await sh('skopeo', ['inspect', '--tls-verify=false', '--creds', 'alice:secret', reg.url('team/copy:v1')])
})

t0('a connection reset mid-blob resumes with Range; redirects are followed; 5xx and 429 are retried; a registry that keeps failing is IMAGE_REMOTE_ERROR', async (t) => {
  const { reg, dir, layout, digest } = await seeded(t)
  const m = JSON.parse(layoutBlob(layout, digest).toString()) as { config: { digest: string; size: number }; layers: Array<{ digest: string; size: number }> }
  const big = [...m.layers].sort((a, b) => b.size - a.size)[0]!
  let cuts = 0
  let fails = 0
  const proxy = await startFaultProxy(t, reg.host, (req) => {
    if (req.method === 'GET' && req.url?.includes('/blobs/') && !req.headers.range && cuts < 1) {
      cuts++
      return 'cut-body'
    }
    if (req.url?.includes('/manifests/') && fails < 2) {
      fails++
      return { status: fails === 1 ? 503 : 429, headers: (fails === 2 ? { 'retry-after': '1' } : {}) as Record<string, string>, body: '{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}' }
    }
    return 'pass'
  })
  const c = new RegistryClient(proxy.host, 'src/app', { retryDelayMs: 20 })
  const before = Date.now()
  t.is((await c.getManifest('v1')).digest, digest)
  t.is(fails, 2)
  t.true(Date.now() - before >= 1000, 'Retry-After: 1 was honoured')
  const f = path.join(dir, 'big')
  await c.getBlobToFile(big.digest, big.size, f)
  t.deepEqual(fs.readFileSync(f), layoutBlob(layout, big.digest))
  t.is(cuts, 1)
  const resumed = proxy.seen.find((s) => s.range)
  t.truthy(resumed)
  t.regex(resumed!.range!, /^bytes=[1-9][0-9]*-$/)

  // blobs served through a redirect to another origin (as registries on object storage do)
  const redirecting = await startFaultProxy(t, reg.host, (req) =>
    req.method === 'GET' && req.url?.includes('/blobs/sha256:') ? { status: 307, headers: { location: `http://${reg.host}${req.url}` } } : 'pass',
  )
  const rc = new RegistryClient(redirecting.host, 'src/app')
  await rc.getBlobToFile(big.digest, big.size, f)
  t.deepEqual(fs.readFileSync(f), layoutBlob(layout, big.digest))
  t.deepEqual(await rc.getBlobBuffer(m.config.digest, m.config.size), layoutBlob(layout, m.config.digest))
  t.true(redirecting.seen.filter((x) => x.url.includes('/blobs/')).length >= 2)

  const down = await startFaultProxy(t, reg.host, () => ({ status: 500, body: 'boom' }))
  const started = Date.now()
  await t.throwsAsync(new RegistryClient(down.host, 'src/app', { retries: 2, retryDelayMs: 20 }).getManifest('v1'), { code: 'IMAGE_REMOTE_ERROR' })
  t.log(`failed after ${Date.now() - started} ms`)
  t.is(down.seen.length, 3, 'one try and two retries')
})

t0serial('basic auth: the challenge is answered with the credentials; none or wrong ones are IMAGE_AUTH_FAILED', async (t) => {
  const { reg, digest } = await seeded(t)
  const good = 'Basic ' + Buffer.from('bob:pw').toString('base64')
  const proxy = await startFaultProxy(t, reg.host, (req) =>
    req.headers.authorization === good ? 'pass' : { status: 401, headers: { 'www-authenticate': 'Basic realm="test"' }, body: '{"errors":[{"code":"UNAUTHORIZED"}]}' },
  )
  const saved = process.env.REGISTRY_AUTH_FILE
  process.env.REGISTRY_AUTH_FILE = '/nonexistent/auth.json'
  try {
    t.is((await new RegistryClient(proxy.host, 'src/app', { username: 'bob', password: 'pw' }).getManifest('v1')).digest, digest)
    // the message names the auth file that was looked in ($REGISTRY_AUTH_FILE), not always ~/.docker/config.json
    await t.throwsAsync(new RegistryClient(proxy.host, 'src/app').getManifest('v1'), { code: 'IMAGE_AUTH_FAILED', message: /an auths entry for \S+ in \/nonexistent\/auth\.json/ })
    await t.throwsAsync(new RegistryClient(proxy.host, 'src/app', { username: 'bob', password: 'nope' }).getManifest('v1'), { code: 'IMAGE_AUTH_FAILED' })
  } finally {
    if (saved === undefined) delete process.env.REGISTRY_AUTH_FILE
    else process.env.REGISTRY_AUTH_FILE = saved
  }
})

t0('a PATCH body over 1 MiB (fed to fetch in slices, for the answer timeout) arrives whole', async (t) => {
  const dir = tmpDir(t, 'strata-regc-')
  const reg = await startRegistry(t)
  const data = crypto.randomBytes(3 << 20)
  const digest = sha256Digest(data)
  const f = path.join(dir, 'blob')
  fs.writeFileSync(f, data)
  const c = new RegistryClient(reg.host, 'big/blob', { actions: 'pull,push' })
  await c.uploadBlob(f, digest, data.length)
  t.is(await c.headBlob(digest), data.length)
  await c.getBlobToFile(digest, data.length, path.join(dir, 'back'))
  t.deepEqual(fs.readFileSync(path.join(dir, 'back')), data)
})
