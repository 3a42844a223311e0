// gc against commands that make things reachable while it runs: each test
// stops gc at a fixed point (GcOptions.pause) and lets another store
// instance, with its own DFS client, do what an import, `image tag` or a
// failing import does at that moment. Whatever a tag or lease reaches when gc
// is done must be stored whole; what nothing reaches goes.
import test from 'ava'
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { localTmp, useImageStores } from '../../helpers/image-cluster.js'
import { MANIFEST_MEDIA_TYPE, emptyConfig, sha256Digest, type ImageManifest } from '../../../sandbox/image/types.js'
import { ImageStore, type StoredBlob } from '../../../sandbox/image/store.js'
import { importOciImage } from '../../../sandbox/image/oci/import.js'
import { OCI_LAYER_TAR } from '../../../sandbox/image/oci/media-types.js'
import { pullS3, pushS3, type TransferStore } from '../../../sandbox/image/s3/index.js'
import { S3RVER_CREDENTIALS, startS3 } from '../../helpers/s3rver.js'
import { publishFixture } from './s3/fixture.js'

const stores = useImageStores(test, '/img-gc-races')
const here = path.dirname(fileURLToPath(import.meta.url))

function manifestOf(layers: StoredBlob[], ref: string): ImageManifest {
  return {
    schemaVersion: 1,
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: layers.map((l) => ({ ...l, kind: 'base' as const })),
    config: emptyConfig(),
    source: { type: 'rootfs', ref },
    created: '2026-01-01T00:00:00.000Z',
  }
}

async function blob(s: ImageStore, text: string): Promise<StoredBlob> {
  const b = await s.putBlob(Readable.from([Buffer.from(text)]))
  return { digest: b.digest, size: b.size }
}

/** Every tag resolves to a manifest whose layers are all stored. */
async function assertWhole(t: import('ava').ExecutionContext, s: ImageStore): Promise<void> {
  for (const tag of await s.listTags()) {
    const r = await s.resolve(`${tag.name}:${tag.tag}`)
    for (const l of r.manifest.layers) t.truthy(await s.statBlob(l.digest), `${tag.name}:${tag.tag} layer ${l.digest}`)
  }
}

test.serial('an import that stores its manifest, tags it and drops its leases between gc listing manifests and reading tags keeps its layer', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  // the import has stored and leased its layer before gc starts
  const layer = await blob(other, 'layer of an import in progress')
  await other.addLease('transient-import-1', layer.digest)
  const r = await s.gc({
    pause: async (at) => {
      if (at !== 'listed') return
      // it finishes between gc's listing of manifests and its reading of tags and leases
      const m = await other.putManifest(manifestOf([layer], 'import'))
      await other.setTag('fresh', 'v1', m.digest)
      await other.removeLease('transient-import-1', layer.digest)
    },
  })
  t.deepEqual(r.removedBlobs, [])
  await assertWhole(t, s)
  t.truthy(await s.statBlob(layer.digest))
})

test.serial('`image tag` of an untagged image while gc removes it: the tag keeps the manifest and its layers', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const layer = await blob(s, 'layer of an untagged image')
  const m = await s.putManifest(manifestOf([layer], 'untagged'))
  await s.setTag('old', 'v1', m.digest)
  await s.removeTag('old', 'v1')
  const r = await s.gc({
    pause: async (at) => {
      // `strata image tag old@sha256:… new:v1`
      if (at === 'decided') await other.setTag('new', 'v1', m.digest)
    },
  })
  t.deepEqual(r.removedManifests, [])
  t.deepEqual(r.removedBlobs, [])
  t.is((await s.resolve('new:v1')).digest, m.digest)
  await assertWhole(t, s)
})

test.serial('an import that reuses an unreferenced layer (lease, then look) while gc removes it gets it back', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const layers: StoredBlob[] = []
  for (const at of ['decided', 'aside'] as const) {
    const layer = await blob(s, `an unreferenced layer an import finds by diffId (${at})`)
    layers.push(layer)
    let paused = false
    const r = await s.gc({
      pause: async (p) => {
        if (p !== at) return
        paused = true
        await other.addLease('transient-import-3', layer.digest)
        t.truthy(await other.statBlob(layer.digest), `found at ${at}`)
        const m = await other.putManifest(manifestOf([layer], `reuse-${at}`))
        await other.setTag('reuse', at, m.digest)
        await other.removeLease('transient-import-3', layer.digest)
      },
    })
    t.true(paused, at)
    t.deepEqual(r.removedBlobs, [], at)
  }
  await assertWhole(t, s)
  t.deepEqual(await s.listTags().then((l) => l.map((x) => x.tag)), ['aside', 'decided'])
  // nothing reaches them any more: the next gc takes both manifests and layers, and leaves no aside directory
  await s.removeTag('reuse', 'aside')
  await s.removeTag('reuse', 'decided')
  const r = await s.gc()
  t.deepEqual(r.removedBlobs.sort(), layers.map((l) => l.digest).sort())
  t.is(r.removedManifests.length, 2)
  t.deepEqual((await s.fs.readdirAll(`${s.root}/tmp`)).entries.map((e) => e.name), [])
})

test.serial('a gc SIGKILLed with its removals aside: a reader gets them back, the next gc puts back the rest and decides again', async (t) => {
  const s = await stores.fresh()
  const a = await blob(s, 'aside and read back')
  const b = await blob(s, 'aside and referenced later')
  const c = await blob(s, 'aside and garbage')
  const child = spawn(process.execPath, [path.join(here, '../../helpers/image-gc-child.js'), stores.cluster().cliArgs[1]!, s.root], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  let out = ''
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes('aside\n')) resolve()
    })
    child.on('exit', (code) => reject(new Error(`gc child exited ${code} before its removals were aside: ${out}`)))
  })
  child.kill('SIGKILL')
  await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once('exit', resolve)))
  // the killed gc left its aside directory behind, the blobs gone from blobs/
  const tmp = (await s.fs.readdirAll(`${s.root}/tmp`)).entries.map((e) => e.name)
  t.is(tmp.filter((n) => n.startsWith('gc-')).length, 1)
  t.false((await s.listBlobs()).some((x) => x.digest === a.digest))
  // a reader finds it anyway
  t.is(Buffer.concat(await Readable.from(s.readBlob(a.digest)).toArray()).toString(), 'aside and read back')
  // a tag made meanwhile (its check puts the layer back), and the next gc
  const m = await s.putManifest(manifestOf([b], 'after-kill'))
  await s.setTag('after', 'kill', m.digest)
  const r = await s.gc()
  t.deepEqual(r.removedBlobs.sort(), [a.digest, c.digest].sort())
  await assertWhole(t, s)
  t.deepEqual((await s.fs.readdirAll(`${s.root}/tmp`)).entries.map((e) => e.name), [])
})

/** An uncompressed layer tar of a few files. */
async function layerTar(t: import('ava').ExecutionContext, files: Record<string, string>): Promise<Buffer> {
  const dir = localTmp(t)
  const root = path.join(dir, 'root')
  fs.mkdirSync(root)
  for (const [n, body] of Object.entries(files)) fs.writeFileSync(path.join(root, n), body)
  await promisify(execFile)('tar', ['--sort=name', '--mtime=@1700000000', '--owner=0', '--group=0', '-cf', path.join(dir, 'l.tar'), '-C', root, '.'])
  return fs.readFileSync(path.join(dir, 'l.tar'))
}

test.serial('a failing import does not remove a layer another import found stored and tagged meanwhile', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const shared = await layerTar(t, { 'base.txt': 'the shared base layer\n' })
  const top = await layerTar(t, { 'top.txt': 'a top layer that arrives corrupt\n' })
  const sharedD = sha256Digest(shared)
  const topD = sha256Digest(top)
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const layer = (bytes: Buffer, digest: string, open: () => Promise<Readable>) => ({ digest, size: bytes.length, mediaType: OCI_LAYER_TAR, diffId: digest, open })
  const config = (ids: string[]) => ({ architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: ids } })
  // import A: the shared layer, then a top layer whose bytes do not match its digest once let through
  const a = importOciImage(
    s,
    {
      config: config([sharedD, topD]),
      layers: [
        layer(shared, sharedD, async () => Readable.from([shared])),
        layer(top, topD, async () => {
          await gate
          const bad = Buffer.from(top)
          bad[600] = bad[600]! ^ 1
          return Readable.from([bad])
        }),
      ],
      source: { type: 'oci-layout', ref: 'a' },
    },
    { name: 'a', tag: 'v1' },
  )
  a.catch(() => undefined)
  // A has stored the shared layer (and recorded its diffId)
  let built: string | null = null
  while (!(built = await s.lookupDiffId(sharedD))) await new Promise((r) => setTimeout(r, 50))
  // import B of just the shared layer finds it by diffId and finishes
  const b = await importOciImage(other, { config: config([sharedD]), layers: [layer(shared, sharedD, async () => Readable.from([shared]))], source: { type: 'oci-layout', ref: 'b' } }, { name: 'b', tag: 'v1' })
  t.is(b.manifest.layers[0]!.digest, built)
  t.is(b.layersReused, 1)
  release()
  await t.throwsAsync(a, { code: 'IMAGE_DIGEST_MISMATCH' })
  await assertWhole(t, s)
  t.truthy(await s.statBlob(built))
  t.is(await s.lookupDiffId(sharedD), built)
  await t.throwsAsync(s.resolve('a:v1'), { code: 'IMAGE_NOT_FOUND' })
})

test.serial('an s3 pull whose blobs are stored but not yet referenced keeps them through a gc that runs before it stores the manifest', async (t) => {
  const s3 = await startS3(t)
  const o = { endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: S3RVER_CREDENTIALS }
  const src = await stores.fresh()
  await publishFixture(t, src, 'pulled', 'v1', 256 * 1024)
  await pushS3(src, 'pulled:v1', `s3://${s3.bucket}/m`, o)
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  // the pull's own store, with a full gc (another process's) run just before its manifest is stored
  let collected: string[] | null = null
  const putManifest = async (m: Buffer) => {
    collected = (await other.gc()).removedBlobs
    return s.putManifest(m)
  }
  const store: TransferStore = new Proxy(s, {
    get: (target, prop) => {
      if (prop === 'putManifest') return putManifest
      const v: unknown = Reflect.get(target, prop)
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    },
  })
  const r = await pullS3(store, `s3://${s3.bucket}/m/pulled:v1`, o)
  t.deepEqual(collected, [])
  t.is(r.blobsFetched, 2)
  await assertWhole(t, s)
  t.is((await s.resolve('pulled:v1')).digest, r.digest)
})

test.serial('tagging a name while another client removes its last other tag never fails (removeTag drops the name\'s directory)', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const layer = await blob(s, 'layer of a retagged image')
  const m = await s.putManifest(manifestOf([layer], 'retag'))
  const failures: string[] = []
  // `image tag IMG app:a` + `image rm app:a` in one client, the same with app:b in the other
  const loop = async (st: ImageStore, tag: string) => {
    for (let i = 0; i < 25; i++) {
      try {
        await st.setTag('app', tag, m.digest)
        await st.removeTag('app', tag)
      } catch (e) {
        failures.push(`${tag} ${i}: ${String(e)}`)
      }
    }
  }
  await Promise.all([loop(s, 'a'), loop(other, 'b')])
  t.deepEqual(failures, [])
  t.deepEqual(await s.listTags(), [])
})

test.serial('an import running longer than gc\'s hour for a dead command\'s leases keeps them fresh: gc takes neither its stored layer nor its staging file', async (t) => {
  const root = (await stores.fresh()).root
  // the import's store refreshes every 100 ms instead of every 10 minutes
  const s = new ImageStore(stores.cluster().fs(), { root, refreshMs: 100 })
  const other = await stores.cluster().store(root)
  const first = await layerTar(t, { 'first.txt': 'stored an hour ago\n' })
  const second = await layerTar(t, { 'second.txt': 'still arriving\n' })
  const firstD = sha256Digest(first)
  const secondD = sha256Digest(second)
  let release!: () => void
  const gate = new Promise<void>((r) => (release = r))
  const layer = (bytes: Buffer, digest: string, open: () => Promise<Readable>) => ({ digest, size: bytes.length, mediaType: OCI_LAYER_TAR, diffId: digest, open })
  const run = importOciImage(
    s,
    {
      config: { architecture: 'amd64', os: 'linux', rootfs: { type: 'layers', diff_ids: [firstD, secondD] } },
      layers: [
        layer(first, firstD, async () => Readable.from([first])),
        layer(second, secondD, async () => {
          await gate
          return Readable.from([second])
        }),
      ],
      source: { type: 'oci-layout', ref: 'long' },
    },
    { name: 'long', tag: 'v1' },
  )
  run.catch(() => undefined)
  t.teardown(release)
  while (!(await s.lookupDiffId(firstD))) await new Promise((r) => setTimeout(r, 50))
  // two hours pass: the holder's directory and every staging file look that old
  const old = Date.now() - 2 * 60 * 60 * 1000
  const aged = [...new Set((await other.listLeases()).map((l) => `${root}/leases/${l.holder}`))]
  aged.push(...(await other.fs.readdirAll(`${root}/tmp`)).entries.map((e) => `${root}/tmp/${e.name}`))
  t.true(aged.some((p) => p.includes('/leases/transient-import-')), aged.join(' '))
  for (const p of aged) await other.fs.utimes(p, old, old)
  // until the running import has touched them again (bounded: without a refresh they stay old)
  for (let i = 0; i < 100; i++) {
    const st = await Promise.all(aged.map((p) => other.fs.lstat(p).catch(() => null)))
    if (st.every((x) => x === null || x.mtime / 1000 > old + 60 * 60 * 1000)) break
    await new Promise((r) => setTimeout(r, 50))
  }
  const r = await other.gc()
  t.deepEqual(r.removedBlobs, [])
  release()
  const done = await run
  t.is(done.manifest.layers.length, 2)
  await assertWhole(t, s)
})

test.serial('a manifest stored without tag or lease while gc decides (a pull by digest) keeps its layers until a gc removes the manifest', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const layer = await blob(s, 'a layer an untagged manifest comes to list')
  let m = ''
  const r = await s.gc({
    pause: async (at) => {
      if (at === 'decided') m = (await other.putManifest(manifestOf([layer], 'by-digest'))).digest
    },
  })
  t.deepEqual(r.removedBlobs, [])
  t.truthy(await s.statBlob(layer.digest))
  t.is((await s.resolve(`by/digest@${m}`)).manifest.layers[0]!.digest, layer.digest)
  // the next gc takes the untagged manifest and then its layer
  const again = await s.gc()
  t.deepEqual(again.removedManifests, [m])
  t.deepEqual(again.removedBlobs, [layer.digest])
})

test.serial('a lease added while another client drops the same holder\'s last other lease never fails (removeLease drops the holder\'s directory)', async (t) => {
  const s = await stores.fresh()
  const other = await stores.cluster().store(s.root)
  const mine = await blob(s, 'layer mounted by one sandbox of the node')
  const theirs = await blob(s, 'layer another sandbox of the node stops using')
  // two layer mounts of one node (one holder): right after this one makes the holder's
  // directory, the other takes its lease and drops it again, which removes the then empty directory
  const mkdir = s.fs.mkdir.bind(s.fs)
  let raced = 0
  s.fs.mkdir = (async (...args: Parameters<typeof mkdir>) => {
    const r = await mkdir(...args)
    if (String(args[0]).endsWith('/leases/node-7') && raced++ === 0) {
      await other.addLease('node-7', theirs.digest)
      await other.removeLease('node-7', theirs.digest)
    }
    return r
  }) as typeof s.fs.mkdir
  await s.addLease('node-7', mine.digest)
  t.is(raced, 2, 'the directory was made again after the other client dropped it')
  t.deepEqual(await s.listLeases(), [{ holder: 'node-7', digest: mine.digest }])
})
