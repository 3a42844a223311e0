// strata image push/pull through a real registry (Debian docker-registry),
// with skopeo and umoci as the independent tools on the other side: images
// made by umoci go in with skopeo and come out as EROFS layers whose overlay
// equals `umoci unpack`; images Strata pushes come out with skopeo and unpack
// with umoci to the same tree.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import anyTest, { type ExecutionContext, type TestFn } from 'ava'
import { RegistryClient, pullRegistry, pushRegistry } from '../../../../sandbox/image/registry/index.js'
import type { ProgressSink } from '../../../../sandbox/image/progress.js'
import type { ImageStore } from '../../../../sandbox/image/store.js'
import { sha256Digest } from '../../../../sandbox/image/types.js'
import { localTmp, startImageCluster, type ImageCluster } from '../../../helpers/image-cluster.js'
import { mountImage } from '../../../helpers/image-mount.js'
import { importPath } from '../../../../sandbox/image/oci/import.js'
import { makeOciFixture, run, umociUnpack, type OciFixture } from '../../../helpers/oci-fixtures.js'
import {
  hasRegistryTools,
  layoutBlob,
  layoutDigest,
  registryGet,
  sh,
  skopeoCopy,
  startRegistry,
  startTokenServer,
  umociImage,
  type TestRegistry,
} from '../../../helpers/registry.js'
import { diffTrees, snapshotTree, type Tree } from '../../../helpers/tree-compare.js'

const test = anyTest as TestFn<{ ic: ImageCluster }>
const root = process.getuid?.() === 0
const t0 = hasRegistryTools && root ? test.serial : test.serial.skip

// One registry and one umoci fixture for the round-trip tests (1)-(3), alive for the whole file.
const fileTeardowns: Array<() => unknown> = []
const fileCtx = { teardown: (fn: () => unknown) => void fileTeardowns.push(fn), log: () => undefined } as unknown as ExecutionContext
let reg: TestRegistry
let fixtureDir: string

test.before(async (t) => {
  if (!hasRegistryTools || !root) return
  t.context.ic = await startImageCluster()
  reg = await startRegistry(fileCtx)
  fixtureDir = localTmp(fileCtx, 'strata-reg-fixture-')
  fx = await makeOciFixture({ tmpDir: fixtureDir })
})
test.after.always(async (t) => {
  for (const fn of fileTeardowns.reverse()) await fn()
  await t.context.ic?.close()
})

let storeSeq = 0
/** Stores a multi-platform index in an OCI layout and names it `ref` in the layout's index.json. */
function addIndex(lay: string, index: Buffer, ref: string): void {
  const indexDigest = sha256Digest(index)
  fs.writeFileSync(path.join(lay, 'blobs/sha256', indexDigest.slice(7)), index)
  const top = JSON.parse(fs.readFileSync(path.join(lay, 'index.json'), 'utf8')) as { manifests: unknown[] }
  top.manifests.push({ mediaType: 'application/vnd.oci.image.index.v1+json', digest: indexDigest, size: index.length, annotations: { 'org.opencontainers.image.ref.name': ref } })
  fs.writeFileSync(path.join(lay, 'index.json'), JSON.stringify(top))
}

function freshStore(t: ExecutionContext<{ ic: ImageCluster }>): Promise<ImageStore> {
  return t.context.ic.store(`/strata/images-reg-${process.pid}-${++storeSeq}`)
}

/** The tree of a stored image, mounted as the node would (EROFS layers under overlayfs). */
async function imageTree(t: ExecutionContext, store: ImageStore, digest: string, dir: string): Promise<string> {
  fs.mkdirSync(dir, { recursive: true })
  return mountImage(t, store, (await store.getManifest(digest)).manifest, dir)
}

let fx: OciFixture
let expected: Tree
let pulled: { store: ImageStore; name: string; digest: string }

t0('(1) skopeo → registry → strata pull: the overlay of the EROFS layers equals umoci unpack', async (t) => {
  const dir = localTmp(t, 'strata-reg-')
  expected = await snapshotTree(await umociUnpack(fx, path.join(dir, 'bundle')))
  t.true(expected.size > 20)
  await skopeoCopy(`oci:${fx.ref}`, reg.url('src/rich:v1'))

  const store = await freshStore(t)
  const tasks: string[] = []
  const progress: ProgressSink = { start: (label) => (tasks.push(label), { tick: () => undefined, done: () => undefined }) }
  const r = await pullRegistry(store, reg.url('src/rich:v1'), { workDir: dir, onProgress: progress })
  t.is(r.name, `${reg.host}/src/rich`)
  t.is(r.tag, 'v1')
  t.is(r.remoteDigest, fx.manifestDigest)
  t.is(r.blobsFetched, 4)
  t.true(tasks.filter((l) => l.startsWith('pull ')).length === 3)
  const got = await store.resolve(`${reg.host}/src/rich:v1`)
  t.is(got.digest, r.digest)
  t.is(got.manifest.layers.length, 3)
  t.deepEqual(got.manifest.source, { type: 'registry', ref: `docker://${reg.host}/src/rich@${fx.manifestDigest}`, digest: fx.manifestDigest, platform: 'linux/amd64' })
  const fxConfig = JSON.parse(layoutBlob(fx.layout, fx.configDigest).toString()) as { config?: { Env?: string[] } }
  t.deepEqual(got.manifest.config.env, fxConfig.config?.Env ?? [])
  t.deepEqual(diffTrees(await snapshotTree(await imageTree(t, store, r.digest, path.join(dir, 'mnt'))), expected), [])
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('strata-pull-')), [], 'staging files are removed')

  // again, by digest, under another name: every layer comes from the diffId cache, only the config is fetched
  const again = await pullRegistry(store, `docker://${reg.host}/src/rich@${fx.manifestDigest}`, { workDir: dir, name: 'again' })
  t.is(again.name, 'again')
  t.is(again.tag, `sha256-${fx.manifestDigest.slice(7, 19)}`)
  t.is(again.blobsFetched, 1)
  t.is(again.layersReused, 3)
  t.deepEqual((await store.resolve(`again:${again.tag}`)).manifest.layers, got.manifest.layers)
  // squashed into one layer, of kind toolkit: the same tree
  const sq = await pullRegistry(store, reg.url('src/rich:v1'), { workDir: dir, name: 'squashed:v1', squash: true, kind: 'toolkit' })
  const sqm = (await store.getManifest(sq.digest)).manifest
  t.is(sqm.layers.length, 1)
  t.is(sqm.layers[0]!.kind, 'toolkit')
  t.deepEqual(diffTrees(await snapshotTree(await imageTree(t, store, sq.digest, path.join(dir, 'mnt-sq'))), expected), [])

  // cancelled: CANCELLED, nothing tagged, no staging left
  const ac = new AbortController()
  const fresh = await freshStore(t)
  const cancelled = pullRegistry(fresh, reg.url('src/rich:v1'), {
    workDir: dir,
    name: 'cancelled',
    signal: ac.signal,
    onProgress: { start: () => ({ tick: () => ac.abort(), done: () => undefined }) },
  })
  await t.throwsAsync(cancelled, { code: 'CANCELLED' })
  t.deepEqual(await fresh.listTags(), [])
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('strata-pull-')), [])
  pulled = { store, name: `${reg.host}/src/rich:v1`, digest: r.digest }
})

t0('(2) strata push → skopeo copy out → umoci unpack equals the original; a second push skips every blob', async (t) => {
  if (!pulled) return t.fail('needs test (1)')
  const dir = localTmp(t, 'strata-reg-')
  const cache = path.join(dir, 'cache')
  const first = await pushRegistry(pulled.store, pulled.name, reg.url('dst/rich:v1'), { chunkSize: 256 * 1024, layerCache: cache, workDir: dir })
  t.is(first.pushedBlobs, 4)
  t.is(first.skippedBlobs, 0)
  t.true(first.bytes > 300 * 1024)
  t.regex(reg.log(), /"PATCH \/v2\/dst\/rich\/blobs\/uploads\//)
  const out = path.join(dir, 'out')
  await skopeoCopy(reg.url('dst/rich:v1'), `oci:${out}:v1`)
  t.is(layoutDigest(out, 'v1'), first.digest)
  const m = JSON.parse(layoutBlob(out, first.digest).toString()) as { mediaType: string; config: { digest: string }; layers: Array<{ mediaType: string }> }
  t.is(m.mediaType, 'application/vnd.oci.image.manifest.v1+json')
  t.true(m.layers.every((l) => l.mediaType === 'application/vnd.oci.image.layer.v1.tar+gzip'))
  const cfg = JSON.parse(layoutBlob(out, m.config.digest).toString()) as { architecture: string; os: string; config: { Env?: string[] }; rootfs: { diff_ids: string[] } }
  const fxConfig = JSON.parse(layoutBlob(fx.layout, fx.configDigest).toString()) as { config?: { Env?: string[] } }
  t.is(cfg.architecture, 'amd64')
  t.is(cfg.os, 'linux')
  t.deepEqual(cfg.config.Env, fxConfig.config?.Env)
  t.is(cfg.rootfs.diff_ids.length, 3)
  t.deepEqual(diffTrees(await snapshotTree(await umociUnpack({ ref: `${out}:v1` }, path.join(dir, 'bundle'))), expected), [])

  // the same image again: the cache knows the gzip digests, HEAD finds every blob
  const second = await pushRegistry(pulled.store, pulled.name, reg.url('dst/rich:v1'), { layerCache: cache, workDir: dir })
  t.is(second.digest, first.digest)
  t.is(second.pushedBlobs, 0)
  t.is(second.skippedBlobs, 4)
  t.is(second.bytes, 0)
  // and without the cache: the rebuilt tar.gz files have the same digests (deterministic gzip), so nothing is uploaded either
  const third = await pushRegistry(pulled.store, pulled.name, reg.url('dst/rich:v1'), { layerCache: false, workDir: dir })
  t.is(third.digest, first.digest)
  t.is(third.pushedBlobs, 0)
  t.is(third.skippedBlobs, 4)
})

t0('(3) a manifest list (skopeo copy --all of a two-platform index) pulls linux/amd64 unless --platform says otherwise', async (t) => {
  if (!reg) return t.fail('needs test (1)')
  const dir = localTmp(t, 'strata-reg-')
  const lay = path.join(dir, 'multi')
  const descs = []
  for (const arch of ['arm64', 'amd64']) {
    const d = await umociImage(lay, arch, [(r) => fs.writeFileSync(path.join(r, 'arch'), `${arch}\n`)], { architecture: arch })
    descs.push({ mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: d, size: layoutBlob(lay, d).length, platform: { architecture: arch, os: 'linux', ...(arch === 'arm64' ? { variant: 'v8' } : {}) } })
  }
  const index = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.oci.image.index.v1+json', manifests: descs }))
  addIndex(lay, index, 'multi')
  await skopeoCopy(`oci:${lay}:multi`, reg.url('multi/app:v1'), ['--all'])
  const res = await registryGet(reg.host, '/v2/multi/app/manifests/v1', { accept: 'application/vnd.oci.image.index.v1+json' })
  t.is(res.status, 200)
  t.is(JSON.parse(res.body.toString()).manifests.length, 2)

  const store = await freshStore(t)
  const amd = await pullRegistry(store, reg.url('multi/app:v1'), { workDir: dir })
  t.is(amd.platform, 'linux/amd64')
  t.is(amd.remoteDigest, descs[1]!.digest)
  t.is(fs.readFileSync(path.join(await imageTree(t, store, amd.digest, path.join(dir, 'm1')), 'arch'), 'utf8'), 'amd64\n')
  const arm = await pullRegistry(store, reg.url('multi/app:v1'), { workDir: dir, platform: 'linux/arm64', name: 'multi-arm' })
  t.is(arm.remoteDigest, descs[0]!.digest)
  t.is(fs.readFileSync(path.join(await imageTree(t, store, arm.digest, path.join(dir, 'm2')), 'arch'), 'utf8'), 'arm64\n')
  await t.throwsAsync(pullRegistry(store, reg.url('multi/app:v1'), { workDir: dir, platform: 'linux/s390x', name: 'nope' }), { code: 'IMAGE_PLATFORM_NOT_FOUND' })
  t.false((await store.listTags()).some((x) => x.name === 'nope'))

  // the same as a Docker manifest list of Docker v2 schema 2 manifests
  await skopeoCopy(`oci:${lay}:multi`, reg.url('multi/docker:v1'), ['--all', '--format', 'v2s2'])
  const list = await registryGet(reg.host, '/v2/multi/docker/manifests/v1', { accept: 'application/vnd.docker.distribution.manifest.list.v2+json' })
  t.is(list.headers.get('content-type'), 'application/vnd.docker.distribution.manifest.list.v2+json')
  const dock = await pullRegistry(store, reg.url('multi/docker:v1'), { workDir: dir })
  t.is(dock.platform, 'linux/amd64')
  t.is(fs.readFileSync(path.join(await imageTree(t, store, dock.digest, path.join(dir, 'm3')), 'arch'), 'utf8'), 'amd64\n')
  t.deepEqual((await store.getManifest(dock.digest)).manifest.layers.map((l) => l.digest), (await store.getManifest(amd.digest)).manifest.layers.map((l) => l.digest))
})

t0('(3b) an index entry for linux/arm/v7 whose config names no variant pulls with --platform linux/arm/v7 (the index decides, and is recorded); a config of another architecture is refused', async (t) => {
  if (!reg) return t.fail('needs test (1)')
  const dir = localTmp(t, 'strata-reg-')
  const lay = path.join(dir, 'armv7')
  const arm = await umociImage(lay, 'arm', [(r) => fs.writeFileSync(path.join(r, 'arch'), 'arm\n')], { architecture: 'arm' })
  const amd = await umociImage(lay, 'amd', [(r) => fs.writeFileSync(path.join(r, 'arch'), 'amd64\n')], { architecture: 'amd64' })
  t.is(JSON.parse(layoutBlob(lay, JSON.parse(layoutBlob(lay, arm).toString()).config.digest).toString()).variant, undefined)
  const mt = 'application/vnd.oci.image.manifest.v1+json'
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        { mediaType: mt, digest: arm, size: layoutBlob(lay, arm).length, platform: { os: 'linux', architecture: 'arm', variant: 'v7' } },
        { mediaType: mt, digest: amd, size: layoutBlob(lay, amd).length, platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
      ],
    }),
  )
  addIndex(lay, index, 'multi')
  await skopeoCopy(`oci:${lay}:multi`, reg.url('armv7/app:v1'), ['--all'])

  const store = await freshStore(t)
  const r = await pullRegistry(store, reg.url('armv7/app:v1'), { workDir: dir, platform: 'linux/arm/v7' })
  t.is(r.remoteDigest, arm)
  t.is(r.platform, 'linux/arm/v7')
  t.is((await store.getManifest(r.digest)).manifest.source.platform, 'linux/arm/v7')
  await t.throwsAsync(pullRegistry(store, reg.url('armv7/app:v1'), { workDir: dir, platform: 'linux/arm64', name: 'nope' }), { code: 'IMAGE_PLATFORM_NOT_FOUND', message: /is linux\/amd64, not linux\/arm64/ })
  t.false((await store.listTags()).some((x) => x.name === 'nope'))
})

t0('(4) bearer token auth: docker-registry with `auth: token` and a token service; pull and push with credentials, IMAGE_AUTH_FAILED without', async (t) => {
  const dir = localTmp(t, 'strata-reg-')
  const tokens = await startTokenServer(t, { alice: 'secret' })
  const areg = await startRegistry(t, { auth: tokens.auth })
  const lay = path.join(dir, 'oci')
  await umociImage(lay, 'v1', [(r) => fs.writeFileSync(path.join(r, 'who'), 'alice\n')])
  await skopeoCopy(`oci:${lay}:v1`, areg.url('private/app:v1'), ['--dest-creds', 'alice:secret'])
  const store = await freshStore(t)
  const saved = { u: process.env.STRATA_REGISTRY_USER, p: process.env.STRATA_REGISTRY_PASSWORD, f: process.env.REGISTRY_AUTH_FILE }
  process.env.REGISTRY_AUTH_FILE = path.join(dir, 'no-auth.json')
  try {
    await t.throwsAsync(pullRegistry(store, areg.url('private/app:v1'), { workDir: dir }), { code: 'IMAGE_AUTH_FAILED' })
    await t.throwsAsync(pullRegistry(store, areg.url('private/app:v1'), { workDir: dir, username: 'alice', password: 'wrong' }), { code: 'IMAGE_AUTH_FAILED' })
    t.deepEqual(await store.listTags(), [])
    const r = await pullRegistry(store, areg.url('private/app:v1'), { workDir: dir, username: 'alice', password: 'secret', name: 'private' })
    t.is(r.tag, 'v1')
    // push with credentials from the environment
    process.env.STRATA_REGISTRY_USER = 'alice'
    process.env.STRATA_REGISTRY_PASSWORD = 'secret'
    const p = await pushRegistry(store, 'private:v1', areg.url('private/copy:v1'), { layerCache: false, workDir: dir })
    t.is(p.pushedBlobs, 2)
    t.true(tokens.requests.some((x) => x.user === 'alice' && x.scopes.includes('repository:private/copy:pull,push')))
    await sh('skopeo', ['inspect', '--tls-verify=false', '--creds', 'alice:secret', areg.url('private/copy:v1')])
  } finally {
    for (const [k, v] of [['STRATA_REGISTRY_USER', saved.u], ['STRATA_REGISTRY_PASSWORD', saved.p], ['REGISTRY_AUTH_FILE', saved.f]] as const) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
})

t0('(5) failures: unknown tag → IMAGE_NOT_FOUND; tampered blob → IMAGE_DIGEST_MISMATCH and nothing tagged; registry killed mid-push → IMAGE_REMOTE_ERROR and no manifest', async (t) => {
  if (!pulled) return t.fail('needs test (1)')
  const dir = localTmp(t, 'strata-reg-')
  const freg = await startRegistry(t)
  const store = await freshStore(t)
  await t.throwsAsync(pullRegistry(store, freg.url('src/rich:nope'), { workDir: dir }), { code: 'IMAGE_NOT_FOUND' })

  await skopeoCopy(`oci:${fx.ref}`, freg.url('src/rich:v1'))
  const biggest = [...fx.layers].sort((a, b) => b.size - a.size)[0]!
  const file = freg.blobFile(biggest.digest)
  const bytes = fs.readFileSync(file)
  bytes[bytes.length - 100] ^= 0x55
  fs.writeFileSync(file, bytes)
  await t.throwsAsync(pullRegistry(store, freg.url('src/rich:v1'), { workDir: dir, name: 'tampered' }), { code: 'IMAGE_DIGEST_MISMATCH' })
  t.deepEqual(await store.listTags(), [])
  t.deepEqual(await store.listManifests(), [])

  // documents a pull cannot turn into layers: an artifact (helm) config, a layer of an unknown type
  const c = new RegistryClient(freg.host, 'odd/thing', { actions: 'pull,push' })
  const blob = Buffer.from('{}')
  const blobFile = path.join(dir, 'blob')
  fs.writeFileSync(blobFile, blob)
  await c.uploadBlob(blobFile, sha256Digest(blob), blob.length)
  const put = (tag: string, doc: unknown, mediaType = 'application/vnd.oci.image.manifest.v1+json') => c.putManifest(tag, Buffer.from(JSON.stringify(doc)), mediaType)
  const desc = (mediaType: string) => ({ mediaType, digest: sha256Digest(blob), size: blob.length })
  await put('helm', { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: desc('application/vnd.cncf.helm.config.v1+json'), layers: [desc('application/vnd.oci.image.layer.v1.tar+gzip')] })
  await put('foo', { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: desc('application/vnd.oci.image.config.v1+json'), layers: [desc('application/x-foo')] })
  for (const tag of ['helm', 'foo']) {
    await t.throwsAsync(pullRegistry(store, freg.url(`odd/thing:${tag}`), { workDir: dir }), { code: 'IMAGE_UNSUPPORTED_MEDIA_TYPE' }, tag)
  }
  t.deepEqual(await store.listTags(), [])

  // the registry dies during the first PATCH of the push
  let killed: Promise<void> | undefined
  const progress: ProgressSink = {
    start: (label) => ({
      tick: () => {
        if (label.startsWith('push ') && !killed) killed = freg.stop()
      },
      done: () => undefined,
    }),
  }
  const started = Date.now()
  await t.throwsAsync(pushRegistry(pulled.store, pulled.name, freg.url('dead/rich:v1'), { chunkSize: 64 * 1024, layerCache: false, workDir: dir, onProgress: progress, retries: 2, retryDelayMs: 50 }), {
    code: 'IMAGE_REMOTE_ERROR',
  })
  // that the retries end is what the rejection shows (a push retrying without end is the test's timeout); the time is logged
  t.log(`failed after ${Date.now() - started} ms`)
  t.truthy(killed)
  await killed
  await freg.start()
  const res = await registryGet(freg.host, '/v2/dead/rich/manifests/v1', { accept: 'application/vnd.oci.image.manifest.v1+json' })
  t.is(res.status, 404)
  t.deepEqual(freg.tagsOnDisk('dead/rich'), [])
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('strata-push-')), [], 'work files are removed')
})

t0('(6) progress: tar+gzip counts the tar as it is made; a blob the registry has is a task "exists"; a layer the image repeats is built and sent once', async (t) => {
  const dir = localTmp(t, 'strata-reg-')
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  const tars: string[] = []
  for (const name of ['a', 'b']) {
    fs.writeFileSync(path.join(tree, name), name.repeat(300_000))
    const tar = path.join(dir, `${name}.tar`)
    await run('tar', ['--numeric-owner', '-cf', tar, '-C', tree, name])
    tars.push(tar)
  }
  const layout = path.join(dir, 'oci')
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:t`])
  for (const l of [tars[0]!, tars[1]!, tars[0]!]) await run('umoci', ['raw', 'add-layer', '--image', `${layout}:t`, l])
  const store = await freshStore(t)
  await importPath(store, layout, { name: 'repeat', tag: 't', ref: 't', workDir: dir })
  type Task = { label: string; ticks: number; ticked: number; tickedBeforeDone: number; note: string | undefined }
  const record = () => {
    const tasks: Task[] = []
    const sink: ProgressSink = {
      start: (label) => {
        const task: Task = { label, ticks: 0, ticked: 0, tickedBeforeDone: -1, note: undefined }
        tasks.push(task)
        return { tick: (n) => void ((task.ticked += n), task.ticks++), done: (note) => void ((task.tickedBeforeDone = task.ticked), (task.note = note)) }
      },
    }
    return { tasks, sink }
  }
  const first = record()
  const r1 = await pushRegistry(store, 'repeat:t', reg.url('rep/eat:t'), { layerCache: false, workDir: dir, onProgress: first.sink })
  const built = first.tasks.filter((x) => x.label.startsWith('tar+gzip '))
  t.is(built.length, 2, JSON.stringify(first.tasks))
  // the tar of each layer (300 kB of data and its headers) went by in pieces before the task ended
  for (const b of built) t.true(b.tickedBeforeDone > 300_000 && b.ticks > 1, JSON.stringify(b))
  t.deepEqual([r1.pushedBlobs, r1.skippedBlobs], [3, 0])
  const m = JSON.parse((await registryGet(reg.host, '/v2/rep/eat/manifests/t', { accept: 'application/vnd.oci.image.manifest.v1+json' })).body.toString()) as { layers: Array<{ digest: string }> }
  t.is(m.layers.length, 3)
  t.is(m.layers[0]!.digest, m.layers[2]!.digest)
  const second = record()
  const r2 = await pushRegistry(store, 'repeat:t', reg.url('rep/eat:t'), { layerCache: false, workDir: dir, onProgress: second.sink })
  t.is(r2.digest, r1.digest)
  t.deepEqual([r2.pushedBlobs, r2.skippedBlobs], [0, 3])
  t.deepEqual(second.tasks.filter((x) => x.label.startsWith('push ')).map((x) => x.note), ['exists', 'exists', 'exists'])
})

t0('(7) Ctrl-C while a layer is tar+gzipped stops the tar there (it ran to the end of the layer): CANCELLED, the task interrupted, nothing uploaded, work files removed', async (t) => {
  const dir = localTmp(t, 'strata-reg-')
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'big'), crypto.randomBytes(16 << 20))
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['--numeric-owner', '-cf', tar, '-C', tree, 'big'])
  const store = await freshStore(t)
  await importPath(store, tar, { name: 'cancel', tag: 't', workDir: dir })
  const ac = new AbortController()
  const tasks: Array<{ label: string; ticked: number; ended: boolean; note: string | undefined }> = []
  const progress: ProgressSink = {
    start: (label) => {
      const task = { label, ticked: 0, ended: false, note: undefined as string | undefined }
      tasks.push(task)
      return {
        tick: (n) => {
          task.ticked += n
          // the first bytes of the tar: as if Ctrl-C came now
          if (label.startsWith('tar+gzip ')) ac.abort()
        },
        done: (note) => void ((task.ended = true), (task.note = note)),
      }
    },
  }
  await t.throwsAsync(pushRegistry(store, 'cancel:t', reg.url('can/cel:t'), { layerCache: false, workDir: dir, onProgress: progress, signal: ac.signal }), { code: 'CANCELLED' })
  const built = tasks.find((x) => x.label.startsWith('tar+gzip '))
  t.truthy(built, JSON.stringify(tasks))
  // a few of the tar writer's 256 KiB batches at most, not the layer's 16 MiB
  t.true(built!.ticked < 4 << 20, JSON.stringify(built))
  // no note: the command's sink shows it as interrupted, not failed
  t.true(built!.ended)
  t.is(built!.note, undefined)
  t.deepEqual(tasks.filter((x) => x.label.startsWith('push ')), [])
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('strata-push-')), [], 'work files are removed')
})
