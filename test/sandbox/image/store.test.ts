// ImageStore against a real cluster: staging and verification of blobs,
// manifests that reference missing layers, atomic tags, the diffId cache,
// resumable partial blobs, leases and gc.
import test from 'ava'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import { localTmp, useImageStores } from '../../helpers/image-cluster.js'
import { MANIFEST_MEDIA_TYPE, emptyConfig, sha256Digest, type ImageManifest } from '../../../sandbox/image/types.js'
import { ImageStore } from '../../../sandbox/image/store.js'
import { StrataError } from '../../../fs/common/errors.js'
import type { FileSystem } from '../../../fs/client/index.js'

const stores = useImageStores(test, '/img-store')
const fresh = stores.fresh

function manifestOf(layers: Array<{ digest: string; size: number }>, extra: Partial<ImageManifest> = {}): ImageManifest {
  return {
    schemaVersion: 1,
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: layers.map((l) => ({ ...l, kind: 'base' as const })),
    config: emptyConfig(),
    source: { type: 'rootfs', ref: '/test' },
    created: '2026-01-01T00:00:00.000Z',
    ...extra,
  }
}

async function tmpNames(s: ImageStore): Promise<string[]> {
  return (await s.fs.readdirAll(`${s.root}/tmp`)).entries.map((e) => e.name)
}

test.serial('putBlob streams, verifies and stores once; bad digest or size leaves nothing behind', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(20 * 1024 * 1024 + 17)
  const digest = sha256Digest(data)
  let progress = 0
  const chunks = Array.from({ length: 21 }, (_, i) => data.subarray(i * 1024 * 1024, (i + 1) * 1024 * 1024))
  const r = await s.putBlob(Readable.from(chunks), { digest, size: data.length }, { onProgress: (b) => (progress += b) })
  t.deepEqual(r, { digest, size: data.length, existed: false })
  t.is(progress, data.length)
  t.true(await s.hasBlob(digest))
  t.deepEqual(await s.statBlob(digest), { digest, size: data.length })
  // already stored: returns at once without reading the source
  let read = false
  const again = await s.putBlob(
    (async function* () {
      read = true
      yield data
    })(),
    { digest },
  )
  t.true(again.existed)
  t.false(read)
  // readBlob, ranges, copyBlobToFile
  const back: Buffer[] = []
  for await (const c of s.readBlob(digest)) back.push(c as Buffer)
  t.true(Buffer.concat(back).equals(data))
  const part: Buffer[] = []
  for await (const c of s.readBlob(digest, { start: 9 * 1024 * 1024 - 3, end: 9 * 1024 * 1024 + 5 })) part.push(c as Buffer)
  t.true(Buffer.concat(part).equals(data.subarray(9 * 1024 * 1024 - 3, 9 * 1024 * 1024 + 5)))
  // readBlobInto: a range spanning several reads into the caller's buffer; past the end, missing
  const into = Buffer.alloc(17 * 1024 * 1024 + 11, 0xee)
  await s.readBlobInto(digest, 1234, into)
  t.true(into.equals(data.subarray(1234, 1234 + into.length)))
  await t.throwsAsync(s.readBlobInto(digest, data.length - 10, Buffer.alloc(20)), { code: 'IMAGE_SIZE_MISMATCH' })
  await t.throwsAsync(s.readBlobInto(sha256Digest(Buffer.from('never stored')), 0, Buffer.alloc(4)), { code: 'IMAGE_BLOB_MISSING' })
  const dir = localTmp(t)
  await s.copyBlobToFile(digest, path.join(dir, 'copy'))
  t.true(fs.readFileSync(path.join(dir, 'copy')).equals(data))
  // without expectations the digest is computed
  const small = Buffer.from('hello layer\n')
  t.deepEqual(await s.putBlob(Readable.from([small])), { digest: sha256Digest(small), size: small.length, existed: false })
  // mismatches: nothing published, tmp/ empty
  const other = Buffer.from('other bytes')
  await t.throwsAsync(s.putBlob(Readable.from([other]), { digest: sha256Digest(Buffer.from('x')) }), { code: 'IMAGE_DIGEST_MISMATCH' })
  await t.throwsAsync(s.putBlob(Readable.from([other]), { size: 3 }), { code: 'IMAGE_SIZE_MISMATCH' })
  await t.throwsAsync(s.putBlob(Readable.from([other]), { size: 100 }), { code: 'IMAGE_SIZE_MISMATCH' })
  t.false(await s.hasBlob(sha256Digest(other)))
  t.deepEqual(await tmpNames(s), [])
  // a failing source also leaves nothing
  const failing = new Readable({
    read() {
      this.destroy(new Error('boom'))
    },
  })
  await t.throwsAsync(s.putBlob(failing))
  t.deepEqual(await tmpNames(s), [])
  // missing blob
  const missing = sha256Digest('nope')
  await t.throwsAsync(s.copyBlobToFile(missing, path.join(dir, 'x')), { code: 'IMAGE_BLOB_MISSING' })
  t.is(await s.statBlob(missing), null)
  // putBlobFile hashes first and skips stored content
  fs.writeFileSync(path.join(dir, 'f'), data)
  t.true((await s.putBlobFile(path.join(dir, 'f'))).existed)
  t.deepEqual((await s.listBlobs()).map((b) => b.digest).sort(), [digest, sha256Digest(small)].sort())
})

test.serial('manifests need their layers; tags move atomically; resolve and list', async (t) => {
  const s = await fresh()
  const a = Buffer.from('layer a')
  const b = Buffer.from('layer b')
  const la = await s.putBlob(Readable.from([a]))
  const m1 = manifestOf([la, { digest: sha256Digest(b), size: b.length }])
  await t.throwsAsync(s.putManifest(m1), { code: 'IMAGE_BLOB_MISSING' })
  t.deepEqual(await s.listManifests(), [])
  const lb = await s.putBlob(Readable.from([b]))
  // wrong size is refused too
  await t.throwsAsync(s.putManifest(manifestOf([la, { digest: lb.digest, size: 99 }])), { code: 'IMAGE_BLOB_MISSING' })
  await t.throwsAsync(s.putManifest(Buffer.from('{"schemaVersion":2}')), { code: 'IMAGE_BAD_MANIFEST' })
  await t.throwsAsync(s.putManifest(Buffer.from('not json')), { code: 'IMAGE_BAD_MANIFEST' })
  const p1 = await s.putManifest(m1)
  t.is(p1.digest, sha256Digest(p1.bytes))
  t.deepEqual(await s.putManifest(m1), p1)
  const got = await s.getManifest(p1.digest)
  t.deepEqual(got.manifest, m1)
  await t.throwsAsync(s.getManifest(sha256Digest('zzz')), { code: 'IMAGE_NOT_FOUND' })
  // tags
  await t.throwsAsync(s.setTag('app', 'v1', sha256Digest('nothing')), { code: 'IMAGE_NOT_FOUND' })
  await t.throwsAsync(s.setTag('App', 'v1', p1.digest), { code: 'IMAGE_INVALID_REFERENCE' })
  await s.setTag('app', 'v1', p1.digest)
  await s.setTag('localhost:5000/team/app', 'latest', p1.digest)
  t.is((await s.resolve('app:v1')).digest, p1.digest)
  t.is((await s.resolve('localhost:5000/team/app')).digest, p1.digest)
  t.is((await s.resolve(`whatever@${p1.digest}`)).digest, p1.digest)
  await t.throwsAsync(s.resolve('app:v2'), { code: 'IMAGE_NOT_FOUND' })
  await t.throwsAsync(s.resolve('Bad Name'), { code: 'IMAGE_INVALID_REFERENCE' })
  const p2 = await s.putManifest(manifestOf([lb]))
  await s.setTag('app', 'v1', p2.digest)
  t.is((await s.resolve('app:v1')).digest, p2.digest)
  t.deepEqual(await s.listTags(), [
    { name: 'app', tag: 'v1', digest: p2.digest },
    { name: 'localhost:5000/team/app', tag: 'latest', digest: p1.digest },
  ])
  t.deepEqual((await s.listManifests()).sort(), [p1.digest, p2.digest].sort())
  await s.removeTag('app', 'v1')
  await t.throwsAsync(s.removeTag('app', 'v1'), { code: 'IMAGE_NOT_FOUND' })
  t.deepEqual(
    (await s.listTags()).map((x) => x.name),
    ['localhost:5000/team/app'],
  )
  t.deepEqual(await tmpNames(s), [])
})

test.serial('names of up to 255 characters are tags like any other (a long name\'s directory is hashed); a name\'s old %2F directory still reads', async (t) => {
  const s = await fresh()
  const layer = await s.putBlob(Readable.from([Buffer.from('long-name layer')]))
  const m = await s.putManifest(manifestOf([layer]))
  // 128 one-letter components: 255 characters, 509 bytes once every / is %2F (over the DFS's 255)
  const long = Array.from({ length: 128 }, () => 'a').join('/')
  const longer = 'localhost:5000/' + 'b'.repeat(120) + '/' + 'c'.repeat(119)
  t.is(long.length, 255)
  t.is(longer.length, 255)
  t.is(await s.getTag(long, 'v1'), null)
  await t.throwsAsync(s.resolve(`${long}:v1`), { code: 'IMAGE_NOT_FOUND' })
  await s.setTag(long, 'v1', m.digest)
  await s.setTag(long, 'v2', m.digest)
  await s.setTag(longer, 'x', m.digest)
  await s.setTag('short/name', 'v1', m.digest)
  t.is(await s.getTag(long, 'v1'), m.digest)
  t.is((await s.resolve(`${long}:v2`)).digest, m.digest)
  t.truthy(await s.tagVersion(long, 'v1'))
  t.deepEqual(
    (await s.listTags()).map((x) => `${x.name}:${x.tag}`),
    [`${long}:v1`, `${long}:v2`, `${longer}:x`, 'short/name:v1'],
  )
  // a short name keeps the directory it always had
  t.is(s.tagPath('short/name', 'v1'), `${s.root}/tags/short%2Fname/v1`)
  t.regex(s.tagPath(long, 'v1'), /\/tags\/@[0-9a-f]{64}\/v1$/)
  // the tag keeps the manifest from gc; removing the last tags of a name removes it
  t.deepEqual((await s.gc({ dryRun: true })).removedManifests, [])
  await s.removeTag(long, 'v1')
  await s.removeTag(long, 'v2')
  await t.throwsAsync(s.removeTag(long, 'v2'), { code: 'IMAGE_NOT_FOUND' })
  t.deepEqual(
    (await s.listTags()).map((x) => `${x.name}:${x.tag}`),
    [`${longer}:x`, 'short/name:v1'],
  )
  // a tag file of a hashed directory that does not name its image names nothing
  await s.fs.writeFile(s.tagPath(longer, 'y'), `${m.digest}\nsome/other\n`)
  await t.throwsAsync(s.getTag(longer, 'y'), { code: 'IMAGE_BAD_MANIFEST' })
  t.deepEqual((await s.listTags()).map((x) => `${x.name}:${x.tag}`), [`${longer}:x`, 'short/name:v1'])
  // a store written before hashed directories existed: tags/<name with / as %2F>/<tag> holding the digest alone
  await s.fs.mkdir(`${s.root}/tags/team%2Fold`, { recursive: true })
  await s.fs.writeFile(`${s.root}/tags/team%2Fold/v9`, `${m.digest}\n`)
  t.is((await s.resolve('team/old:v9')).digest, m.digest)
  t.true((await s.listTags()).some((x) => x.name === 'team/old' && x.tag === 'v9'))
  t.deepEqual(await tmpNames(s), [])
})

test.serial('diffId cache, partial blobs, leases and gc', async (t) => {
  const s = await fresh()
  const base = await s.putBlob(Readable.from([Buffer.from('base layer')]))
  const top = await s.putBlob(Readable.from([Buffer.from('top layer')]))
  const stray = await s.putBlob(Readable.from([Buffer.from('stray layer')]))
  const leasedOnly = await s.putBlob(Readable.from([Buffer.from('leased layer')]))
  const diffId = sha256Digest('some tar')
  t.is(await s.lookupDiffId(diffId), null)
  await s.recordDiffId(diffId, stray.digest)
  t.is(await s.lookupDiffId(diffId), stray.digest)

  // partial blob: appended in pieces, resumed by a second store instance, verified at the end
  const big = crypto.randomBytes(3 * 1024 * 1024 + 5)
  const bigDigest = sha256Digest(big)
  t.is(await s.partialBlobLength(bigDigest), 0)
  await s.writePartialBlob(bigDigest, 0, big.subarray(0, 1024 * 1024))
  await s.writePartialBlob(bigDigest, 1024 * 1024, big.subarray(1024 * 1024, 2 * 1024 * 1024))
  t.is(await s.partialBlobLength(bigDigest), 2 * 1024 * 1024)
  await s.close()
  const s2 = await stores.cluster().store(s.root)
  t.is(await s2.partialBlobLength(bigDigest), 2 * 1024 * 1024)
  await s2.writePartialBlob(bigDigest, 2 * 1024 * 1024, big.subarray(2 * 1024 * 1024))
  t.deepEqual(await s2.finishPartialBlob(bigDigest, big.length), { digest: bigDigest, size: big.length })
  t.true(await s2.hasBlob(bigDigest))
  // a corrupt partial is deleted
  const bad = sha256Digest('expected')
  await s2.writePartialBlob(bad, 0, Buffer.from('something else'))
  await t.throwsAsync(s2.finishPartialBlob(bad), { code: 'IMAGE_DIGEST_MISMATCH' })
  t.is(await s2.partialBlobLength(bad), 0)
  await t.throwsAsync(s2.finishPartialBlob(bad), { code: 'IMAGE_BLOB_MISSING' })

  const tagged = await s2.putManifest(manifestOf([base, top]))
  await s2.setTag('img', 'latest', tagged.digest)
  const untagged = await s2.putManifest(manifestOf([base, stray]))
  await s2.addLease('node-1', leasedOnly.digest)
  await s2.addLease('node-1', base.digest)

  const dry = await s2.gc({ dryRun: true })
  t.deepEqual(dry.removedManifests, [untagged.digest])
  t.deepEqual(dry.removedBlobs.sort(), [stray.digest, bigDigest].sort())
  t.deepEqual(dry.keptLeased, [leasedOnly.digest])
  t.true(await s2.hasBlob(stray.digest))
  // keep: an untagged manifest can be kept explicitly
  const kept = await s2.gc({ dryRun: true, keep: [untagged.digest] })
  t.deepEqual(kept.removedManifests, [])
  t.deepEqual(kept.removedBlobs, [bigDigest])

  const res = await s2.gc()
  t.deepEqual(res.removedManifests, [untagged.digest])
  t.is(res.freedBytes, stray.size + big.length + (await Promise.resolve(untagged.bytes.length)))
  t.false(await s2.hasBlob(stray.digest))
  t.false(await s2.hasBlob(bigDigest))
  t.true(await s2.hasBlob(leasedOnly.digest))
  t.true(await s2.hasBlob(base.digest))
  t.true(await s2.hasBlob(top.digest))
  t.is(await s2.lookupDiffId(diffId), null)
  t.deepEqual((await s2.listManifests()), [tagged.digest])
  // the lease goes: the layer goes at the next gc
  await s2.removeLease('node-1', leasedOnly.digest)
  await s2.removeLease('node-1', leasedOnly.digest)
  const res2 = await s2.gc()
  t.deepEqual(res2.removedBlobs, [leasedOnly.digest])
  t.deepEqual(await s2.listLeases(), [{ holder: 'node-1', digest: base.digest }])
  await t.throwsAsync(s2.addLease('../x', base.digest), { code: 'INVALID_ARGUMENT' })
})

test.serial('gc and listings fail, and remove nothing, when tags cannot be read (storage down)', async (t) => {
  const s = await fresh()
  const layer = await s.putBlob(Readable.from([Buffer.from('kept layer')]))
  const m = await s.putManifest(manifestOf([layer]))
  await s.setTag('keep', '1', m.digest)
  // the same store over a client whose reads of tag files fail as they do with every storage node down
  const down = new Proxy(s.fs, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown
      if (prop === 'readFile') {
        return (p: string, ...rest: unknown[]) =>
          p.includes('/tags/') ? Promise.reject(new StrataError('CHAIN_UNAVAILABLE', 'chain 1 has no serving target')) : (v as (...a: unknown[]) => unknown).call(target, p, ...rest)
      }
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
    },
  }) as FileSystem
  const blind = new ImageStore(down, { root: s.root })
  await t.throwsAsync(blind.listTags(), { code: 'CHAIN_UNAVAILABLE' })
  await t.throwsAsync(blind.gc({ dryRun: true }), { code: 'CHAIN_UNAVAILABLE' })
  await t.throwsAsync(blind.gc(), { code: 'CHAIN_UNAVAILABLE' })
  await blind.close()
  t.true(await s.hasManifest(m.digest))
  t.true(await s.hasBlob(layer.digest))
  t.deepEqual(await s.listTags(), [{ name: 'keep', tag: '1', digest: m.digest }])
  // a tag holding garbage names nothing, and is no reason to fail
  await s.fs.mkdir(`${s.root}/tags/junk`, { recursive: true })
  await s.fs.writeFile(s.tagPath('junk', '1'), 'not a digest\n')
  t.deepEqual(await s.listTags(), [{ name: 'keep', tag: '1', digest: m.digest }])
  t.deepEqual((await s.gc({ dryRun: true })).removedManifests, [])
})

test.serial('stageBlob: bytes pushed out of order (the first block last) publish as one blob; a wrong size or an abort leaves nothing', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(20 * 1024 * 1024 + 4096)
  const digest = sha256Digest(data)
  const st = await s.stageBlob()
  // everything after the first 4 KiB in uneven pieces, then the first 4 KiB
  for (let at = 4096; at < data.length; ) {
    const n = Math.min(data.length - at, 100_000 + (at % 77_777))
    st.push([data.subarray(at, at + n)], at)
    await st.ready()
    at += n
  }
  st.push([data.subarray(0, 4096)], 0)
  let leased = false
  t.false(await st.publish(digest, data.length, async () => void (leased = true)))
  t.true(leased)
  const back: Buffer[] = []
  for await (const c of s.readBlob(digest)) back.push(c as Buffer)
  t.true(Buffer.concat(back).equals(data))
  t.deepEqual(await tmpNames(s), [])

  const short = await s.stageBlob()
  short.push([Buffer.from('abc')], 0)
  await t.throwsAsync(short.publish(sha256Digest('abcd'), 4), { code: 'IMAGE_SIZE_MISMATCH' })
  const dropped = await s.stageBlob()
  dropped.push([Buffer.alloc(9 * 1024 * 1024)], 0)
  await dropped.abort()
  await dropped.abort()
  t.deepEqual(await tmpNames(s), [])
  t.false(await s.hasBlob(sha256Digest('abcd')))
})

test.serial('two commands publishing the same blob at once: the first keeps its file (a reader holding it open is not cut off), the second finds it stored', async (t) => {
  const s = await fresh()
  const data = crypto.randomBytes(64 * 1024)
  const digest = sha256Digest(data)
  const dest = s.blobPath(digest)
  // both look for the blob before either publishes it: the window a rename used to replace the first one's file in
  const fsys = s.fs as FileSystem & { lstat: FileSystem['lstat'] }
  const lstat = fsys.lstat.bind(fsys)
  let waiting: Array<() => void> = []
  let looks = 0
  fsys.lstat = (async (p: string) => {
    if (p === dest && looks < 2) {
      looks++
      const r = lstat(p)
      if (looks < 2) await new Promise<void>((res) => waiting.push(res))
      else for (const w of waiting.splice(0)) w()
      return r
    }
    return lstat(p)
  }) as FileSystem['lstat']
  t.teardown(() => {
    fsys.lstat = lstat
    waiting = []
  })
  const [a, b] = await Promise.all([s.putBlob(Readable.from([data]), { digest, size: data.length }), s.putBlob(Readable.from([data]), { digest, size: data.length })])
  t.is(looks, 2)
  t.deepEqual([a.existed, b.existed].sort(), [false, true], 'one published, the other found it (before, both renamed over the blob)')
  t.deepEqual(await s.fs.readFile(dest), data)
  t.deepEqual(await tmpNames(s), [])
})
