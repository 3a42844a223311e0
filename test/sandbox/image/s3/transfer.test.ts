// S3 push and pull between two real clusters through a real S3 server
// (s3rver): round trip with identical digests and bytes, skipping, resumed
// pushes (server listing and local journal) and pulls, a server that dies
// mid-push, tampered objects, missing tags and refused credentials.
import test from 'ava'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { importPath } from '../../../../sandbox/image/oci/import.js'
import { HeadObjectCommand } from '@aws-sdk/client-s3'
import type { ExecutionContext } from 'ava'
import { StrataError } from '../../../../fs/common/errors.js'
import { encodeManifest } from '../../../../sandbox/image/types.js'
import { ImageStore } from '../../../../sandbox/image/store.js'
import { createS3Client, pullS3, pushS3, type S3TransferOptions, type TransferProgress } from '../../../../sandbox/image/s3/index.js'
import { S3_MAX_ATTEMPTS, isTimeout, s3Error } from '../../../../sandbox/image/s3/client.js'
import { blobKey, manifestKey, tagKey } from '../../../../sandbox/image/s3/url.js'
import { startImageCluster, localTmp, type ImageCluster } from '../../../helpers/image-cluster.js'
import { blobBytes, publishFixture, type Fixture } from './fixture.js'
import { S3RVER_CREDENTIALS, startS3, type TestS3 } from '../../../helpers/s3rver.js'

const MiB = 1024 * 1024
const PART = 5 * MiB

let A: ImageCluster
let B: ImageCluster
let n = 0

test.before(async () => {
  // two clusters: what A pushes, B pulls (one after the other: less of a spike on a loaded machine)
  A = await startImageCluster()
  B = await startImageCluster()
})
test.after.always(async () => {
  await Promise.all([A?.close(), B?.close()])
})

async function fixture(t: ExecutionContext, name: string, tag: string, bigBytes = 14 * MiB): Promise<Fixture> {
  return publishFixture(t, await A.store(`/s3-a-${++n}`), name, tag, bigBytes)
}

function s3opts(s3: TestS3, extra: S3TransferOptions = {}): S3TransferOptions {
  return { endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: S3RVER_CREDENTIALS, partSize: PART, ...extra }
}

function objectExists(s3: TestS3, key: string): boolean {
  return fs.existsSync(s3.objectPath(key))
}

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p
  } catch (e) {
    if (e instanceof StrataError) return e.code
    throw e
  }
  throw new Error('expected a failure')
}

test.serial('round trip A → s3rver → B: same manifest digest, same layer bytes, bucket objects byte-identical; a second push skips every blob', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'team/app', 'v1')
  const o = s3opts(s3)
  const pushed = await pushS3(f.store, 'team/app:v1', `s3://${s3.bucket}/mirror`, o)
  t.is(pushed.digest, f.digest)
  t.is(pushed.tag, 'v1')
  t.is(pushed.blobsPushed, 2)
  t.is(pushed.blobsSkipped, 0)
  const total = [...f.layers.values()].reduce((a, b) => a + b.length, 0)
  t.true(pushed.bytesSent >= total, `bytesSent ${pushed.bytesSent} < ${total}`)
  // the layout: blobs as stored in the DFS, the manifest's exact bytes, the tag
  for (const [d, bytes] of f.layers) t.true(fs.readFileSync(s3.objectPath(blobKey('mirror', d))).equals(bytes), `bucket object of ${d}`)
  t.true(fs.readFileSync(s3.objectPath(manifestKey('mirror', f.digest))).equals(encodeManifest(f.manifest)), 'bucket manifest object')
  t.is(fs.readFileSync(s3.objectPath(tagKey('mirror', 'team/app', 'v1')), 'utf8'), `${f.digest}\n`)
  // the big layer went up in parts
  t.true(s3.requests.some((r) => /partNumber=3&/.test(r)), `a third part was uploaded: ${s3.requests.filter((r) => /partNumber/.test(r)).slice(0, 5).join(' | ')}`)
  // s3rver does not implement ListMultipartUploads (501): asked once, not retried with backoff
  const listings = s3.requests.filter((r) => r.startsWith('GET ') && /[?&]uploads(=|&|$)/.test(r))
  t.is(listings.length, 1, listings.join(' | '))

  const again = await pushS3(f.store, 'team/app:v1', `s3://${s3.bucket}/mirror`, o)
  t.is(again.blobsPushed, 0)
  t.is(again.blobsSkipped, 2)
  t.true(again.bytesSent < 1024, `only the tag object is written again (${again.bytesSent} bytes)`)

  const storeB = await B.store(`/s3-b-${++n}`)
  const pulled = await pullS3(storeB, `s3://${s3.bucket}/mirror/team/app:v1`, o)
  t.is(pulled.digest, f.digest)
  t.is(`${pulled.name}:${pulled.tag}`, 'team/app:v1')
  t.is(pulled.blobsFetched, 2)
  const got = await storeB.resolve('team/app:v1')
  t.is(got.digest, f.digest)
  t.true(got.bytes.equals(encodeManifest(f.manifest)), 'manifest in B')
  for (const [d, bytes] of f.layers) t.true((await blobBytes(storeB, d)).equals(bytes), `layer ${d} in B`)

  // pulled again: nothing fetched; under another local name
  const re = await pullS3(storeB, `s3://${s3.bucket}/mirror/team/app:v1`, { ...o, name: 'copy' })
  t.is(re.blobsFetched, 0)
  t.is(re.blobsSkipped, 2)
  t.is(`${re.name}:${re.tag}`, 'copy:v1')
  t.is((await storeB.resolve('copy:v1')).digest, f.digest)
  // by digest
  const byDigest = await pullS3(storeB, `s3://${s3.bucket}/mirror/team/app@${f.digest}`, { ...o, name: 'pinned:one' })
  t.is(byDigest.digest, f.digest)
  t.is((await storeB.resolve('pinned:one')).digest, f.digest)
})

/** A progress sink that records how each task ended (a task not in `ends` never ended). */
function recordTasks(): { sink: TransferProgress; ends: Map<string, { note: string | undefined }> } {
  const ends = new Map<string, { note: string | undefined }>()
  return { ends, sink: { start: (label) => ({ tick: () => undefined, done: (note) => void ends.set(label, { note }) }) } }
}

for (const mode of ['journal', 'server listing'] as const) {
  test.serial(`an interrupted push resumes from the parts already uploaded (${mode})`, async (t) => {
    const s3 = await startS3(t, { listUploads: mode === 'server listing' })
    const f = await fixture(t, 'resume', 'v1', 22 * MiB)
    const big = [...f.layers.entries()].find(([, b]) => b.length > PART)!
    const stateDir = localTmp(t, 'strata-s3-state-')
    const o = s3opts(s3, { concurrency: 2, ...(mode === 'journal' ? { stateDir } : {}) })
    const ac = new AbortController()
    let parts = 0
    const tasks = recordTasks()
    const first = pushS3(f.store, 'resume:v1', `s3://${s3.bucket}/r`, {
      ...o,
      signal: ac.signal,
      progress: tasks.sink,
      onUpload: (e) => {
        if (e.digest === big[0] && ++parts === 2) ac.abort()
      },
    })
    t.is(await code(first), 'CANCELLED')
    // the blob cut short ends its task with no note (the sink shows it interrupted); it never ended before
    t.deepEqual(tasks.ends.get(`push ${big[0].slice(7, 19)}`), { note: undefined })
    t.false(objectExists(s3, tagKey('r', 'resume', 'v1')), 'nothing tagged')
    t.false(objectExists(s3, manifestKey('r', f.digest)))
    t.false(objectExists(s3, blobKey('r', big[0])))
    if (mode === 'journal') t.is(fs.readdirSync(stateDir).length, 1, 'one upload journal')

    const before = s3.requests.length
    const second = await pushS3(f.store, 'resume:v1', `s3://${s3.bucket}/r`, o)
    t.true(second.partsResumed >= 2, `parts resumed: ${second.partsResumed}`)
    t.true(second.bytesSent <= big[1].length - 2 * PART + 128 * 1024, `bytes sent on resume: ${second.bytesSent}`)
    t.true(fs.readFileSync(s3.objectPath(blobKey('r', big[0]))).equals(big[1]))
    const listed = s3.requests.slice(before).some((r) => r.includes('uploads'))
    t.true(listed, 'asked the server for unfinished uploads')
    if (mode === 'server listing') t.true(s3.requests.slice(before).some((r) => /^GET .*uploadId=/.test(r)), 'ListParts')
    else t.deepEqual(fs.readdirSync(stateDir), [], 'journal removed after completion')

    const storeB = await B.store(`/s3-b-${++n}`)
    const pulled = await pullS3(storeB, `s3://${s3.bucket}/r/resume:v1`, o)
    t.is(pulled.digest, f.digest)
    t.true((await blobBytes(storeB, big[0])).equals(big[1]))
  })
}

test.serial('a resumed part whose bytes do not match is uploaded again (server listing)', async (t) => {
  const s3 = await startS3(t, { listUploads: true })
  const f = await fixture(t, 'reup', 'v1', 16 * MiB)
  const big = [...f.layers.entries()].find(([, b]) => b.length > PART)!
  const ac = new AbortController()
  let parts = 0
  const o = s3opts(s3, { concurrency: 1 })
  t.is(await code(pushS3(f.store, 'reup:v1', `s3://${s3.bucket}/x`, { ...o, signal: ac.signal, onUpload: (e) => e.digest === big[0] && ++parts === 2 && ac.abort() })), 'CANCELLED')
  // corrupt part 1 on the server (its recorded MD5 stays): the ETag check must catch it
  const uploads = path.join(s3.dir, s3.bucket, '._S3rver_uploads')
  const [id] = fs.readdirSync(uploads)
  const p1 = path.join(uploads, id!, '1')
  const bytes = fs.readFileSync(p1)
  bytes[100] ^= 0xff
  fs.writeFileSync(p1, bytes)
  fs.writeFileSync(`${p1}.md5`, crypto.createHash('md5').update(bytes).digest('hex'))
  const r = await pushS3(f.store, 'reup:v1', `s3://${s3.bucket}/x`, o)
  t.is(r.partsResumed, 1, 'part 2 kept, part 1 sent again')
  t.true(fs.readFileSync(s3.objectPath(blobKey('x', big[0]))).equals(big[1]))
})

test.serial('an interrupted pull resumes from the bytes already in the store', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'pullresume', 'v1', 18 * MiB)
  const big = [...f.layers.entries()].find(([, b]) => b.length > PART)!
  const o = s3opts(s3)
  await pushS3(f.store, 'pullresume:v1', `s3://${s3.bucket}`, o)
  const storeB = await B.store(`/s3-b-${++n}`)
  const ac = new AbortController()
  let got = 0
  const tasks = recordTasks()
  const first = pullS3(storeB, `s3://${s3.bucket}/pullresume:v1`, {
    ...o,
    signal: ac.signal,
    progress: tasks.sink,
    onReceive: (e) => {
      if (e.digest === big[0] && (got += e.bytes) >= 8 * MiB) ac.abort()
    },
  })
  t.is(await code(first), 'CANCELLED')
  t.deepEqual(tasks.ends.get(`pull ${big[0].slice(7, 19)}`), { note: undefined }, 'the blob cut short ends its task, with no note')
  t.is(await code(storeB.resolve('pullresume:v1')), 'IMAGE_NOT_FOUND', 'nothing tagged in B')
  const partial = await storeB.partialBlobLength(big[0])
  t.true(partial >= 8 * MiB, `partial: ${partial}`)

  // a new process sees the same partial file: a second store instance
  await storeB.close()
  const storeB2 = await B.store(storeB.root)
  const second = await pullS3(storeB2, `s3://${s3.bucket}/pullresume:v1`, o)
  t.is(second.digest, f.digest)
  t.is(second.bytesResumed, partial)
  t.true(second.bytesReceived <= big[1].length - partial + 64 * 1024 + 4096, `received on resume: ${second.bytesReceived}`)
  t.true((await blobBytes(storeB2, big[0])).equals(big[1]))
  t.is((await storeB2.resolve('pullresume:v1')).digest, f.digest)

  // a torn partial left by a killed run (wrong bytes) is dropped and the blob fetched whole once more
  const storeC = await B.store(`/s3-b-${++n}`)
  await storeC.writePartialBlob(big[0], 0, crypto.randomBytes(3 * MiB))
  await storeC.close()
  const storeC2 = await B.store(storeC.root)
  const third = await pullS3(storeC2, `s3://${s3.bucket}/pullresume:v1`, o)
  t.is(third.bytesResumed, 0)
  t.true(third.bytesReceived >= big[1].length)
  t.true((await blobBytes(storeC2, big[0])).equals(big[1]))
})

test.serial('a pull whose partial file gets its length after the pull looked at it (meta closing a killed pull\'s session) writes every byte at its own offset', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'lenmoves', 'v1', 12 * MiB)
  const o = s3opts(s3)
  await pushS3(f.store, 'lenmoves:v1', `s3://${s3.bucket}`, o)
  const root = `/s3-b-${++n}`
  await B.store(root)
  // a pull SIGKILLed after writing the big layer's first 4 MiB: its client never closed the
  // partial file, so the file's length stays 0 until meta prunes the dead client's session
  const killed = B.fs()
  const fh = await killed.open(`${root}/tmp/partial-${f.big.digest.slice('sha256:'.length)}`, 'w')
  await killed.write(fh, f.big.bytes.subarray(0, 4 * MiB), 0)
  // the next pull looks at the file (length 0), then the session is closed with the length
  // storage has, as meta's prune does, before that pull writes anything
  let closed = false
  class PrunedAfterLook extends ImageStore {
    override async partialBlobLength(digest: string): Promise<number> {
      const n = await super.partialBlobLength(digest)
      if (digest === f.big.digest && !closed) {
        closed = true
        await killed.close(fh)
        t.is(await super.partialBlobLength(digest), 4 * MiB, 'the length moved after the look')
      }
      return n
    }
  }
  const store = new PrunedAfterLook(B.fs(), { root })
  await store.open()
  t.teardown(() => store.close())
  const r = await pullS3(store, `s3://${s3.bucket}/lenmoves:v1`, o)
  t.true(closed)
  t.is(r.digest, f.digest)
  t.is(r.bytesResumed, 0, 'fetched from the first byte, as the look said')
  t.true((await blobBytes(store, f.big.digest)).equals(f.big.bytes))
})

test.serial('two pulls of one image into one store at once share the partial file: both succeed, the blob is whole', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'twice', 'v1', 12 * MiB)
  const o = s3opts(s3)
  await pushS3(f.store, 'twice:v1', `s3://${s3.bucket}`, o)
  const root = `/s3-b-${++n}`
  // the second pull stops after its first write until the first pull has stored the image
  let firstWrite!: () => void
  const wrote = new Promise<void>((r) => (firstWrite = r))
  let release!: () => void
  const released = new Promise<void>((r) => (release = r))
  class PausedAfterFirstWrite extends ImageStore {
    override async writePartialBlob(digest: string, at: number, chunk: Uint8Array): Promise<void> {
      await super.writePartialBlob(digest, at, chunk)
      if (digest === f.big.digest && at === 0) {
        firstWrite()
        await released
      }
    }
  }
  const second = new PausedAfterFirstWrite(B.fs(), { root })
  await second.open()
  t.teardown(() => second.close())
  const secondPull = pullS3(second, `s3://${s3.bucket}/twice:v1`, o)
  secondPull.catch(() => undefined)
  await wrote
  const first = await B.store(root)
  const r1 = await pullS3(first, `s3://${s3.bucket}/twice:v1`, { ...o, name: 'once:v1' })
  t.is(r1.digest, f.digest)
  t.true((await blobBytes(first, f.big.digest)).equals(f.big.bytes), 'the blob the first pull stored is whole')
  release()
  const r2 = await secondPull
  t.is(r2.digest, f.digest)
  t.true((await blobBytes(first, f.big.digest)).equals(f.big.bytes))
  t.is((await first.resolve('twice:v1')).digest, f.digest)
})

test.serial('a pull records the diffIds of the manifest\'s uncompressed layers: importing the same rootfs tarball in B then reuses the pulled layer; an lz4 layer is not recorded', async (t) => {
  const s3 = await startS3(t)
  const o = s3opts(s3)
  const dir = localTmp(t)
  fs.mkdirSync(path.join(dir, 'tree/etc'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'tree/etc/os-release'), 'ID=diffids\n')
  fs.writeFileSync(path.join(dir, 'tree/data.bin'), crypto.randomBytes(256 * 1024))
  const tar = path.join(dir, 'rootfs.tar')
  execFileSync('tar', ['-C', path.join(dir, 'tree'), '-cf', tar, '.'])
  const storeA = await A.store(`/s3-a-${++n}`)
  const plain = await importPath(storeA, tar, { name: 'diffids/plain', tag: 'v1' })
  const lz4 = await importPath(storeA, tar, { name: 'diffids/lz4', tag: 'v1', compress: 'lz4' })
  const diffId = plain.manifest.layers[0]!.diffId!
  t.is(diffId, 'sha256:' + crypto.createHash('sha256').update(fs.readFileSync(tar)).digest('hex'))
  t.is(lz4.manifest.layers[0]!.diffId, diffId)
  await pushS3(storeA, 'diffids/plain:v1', `s3://${s3.bucket}/d`, o)
  await pushS3(storeA, 'diffids/lz4:v1', `s3://${s3.bucket}/d`, o)

  // the lz4 layer: its manifest's diffId stays out of the cache (which variant it was cannot be told)
  const storeL = await B.store(`/s3-b-${++n}`)
  await pullS3(storeL, `s3://${s3.bucket}/d/diffids/lz4:v1`, o)
  t.deepEqual((await storeL.resolve('diffids/lz4:v1')).manifest.layers, lz4.manifest.layers)
  t.is(await storeL.lookupDiffId(diffId), null)
  t.is(await storeL.lookupDiffId(diffId, 'lz4'), null)

  const storeB = await B.store(`/s3-b-${++n}`)
  await pullS3(storeB, `s3://${s3.bucket}/d/diffids/plain:v1`, o)
  t.deepEqual((await storeB.resolve('diffids/plain:v1')).manifest.layers, plain.manifest.layers, 'the manifest carries the diffIds')
  t.is(await storeB.lookupDiffId(diffId), plain.manifest.layers[0]!.digest, 'and the cache has them')
  const again = await importPath(storeB, tar, { name: 'diffids/again', tag: 'v1' })
  t.is(again.layersReused, 1)
  t.is(again.layersBuilt, 0)
  t.is(again.manifest.layers[0]!.digest, plain.manifest.layers[0]!.digest)
})

test.serial('the server dies mid-push: IMAGE_REMOTE_ERROR with the cause, no tag; after it is back the push completes', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'dies', 'v1', 16 * MiB)
  const o = s3opts(s3, { concurrency: 1, maxAttempts: 2 })
  let stopping: Promise<void> | undefined
  const err = await pushS3(f.store, 'dies:v1', `s3://${s3.bucket}/d`, {
    ...o,
    onUpload: (e) => {
      if (e.partNumber === 1) stopping ??= s3.stop()
    },
  }).catch((e: unknown) => e)
  await stopping
  t.true(err instanceof StrataError)
  t.is((err as StrataError).code, 'IMAGE_REMOTE_ERROR', String(err))
  t.truthy((err as StrataError).cause, 'keeps the SDK error as cause')
  t.false(objectExists(s3, tagKey('d', 'dies', 'v1')))
  t.false(objectExists(s3, manifestKey('d', f.digest)))
  await s3.start()
  const r = await pushS3(f.store, 'dies:v1', `s3://${s3.bucket}/d`, o)
  t.is(r.digest, f.digest)
  t.true(objectExists(s3, tagKey('d', 'dies', 'v1')))
})

test.serial('the server restarts mid-push (connections reset under parts in flight): the push retries and completes', async (t) => {
  // throttled, so that parts are still on the wire when the server goes away
  const s3 = await startS3(t, { rateBytesPerSec: 8 * MiB })
  const f = await fixture(t, 'restarts', 'v1', 16 * MiB)
  let restarting: Promise<void> | undefined
  const r = await pushS3(f.store, 'restarts:v1', `s3://${s3.bucket}/r`, {
    ...s3opts(s3),
    onUpload: (e) => {
      if (e.partNumber === 1) restarting ??= s3.stop().then(() => s3.start())
    },
  })
  await restarting
  t.truthy(restarting, 'the server was restarted during the push')
  t.is(r.digest, f.digest)
  t.true(objectExists(s3, tagKey('r', 'restarts', 'v1')))
  t.true(fs.readFileSync(s3.objectPath(blobKey('r', f.big.digest))).equals(f.big.bytes))
})

test('a reset connection (which the SDK names TimeoutError) is retried and reported as a reset, a real timeout is not', (t) => {
  const reset = Object.assign(new Error('read ECONNRESET'), { name: 'TimeoutError', code: 'ECONNRESET' })
  t.false(isTimeout(reset))
  t.regex(s3Error(reset, 'upload part 2').message, /^IMAGE_REMOTE_ERROR: upload part 2: the connection was reset \(ECONNRESET\)/)
  const idle = Object.assign(new Error('the request socket timed out after 60000 ms of inactivity'), { name: 'TimeoutError' })
  t.true(isTimeout(idle))
  t.regex(s3Error(idle, 'GET x').message, /timed out: no answer or no bytes of the body for 60 s/)
  t.true(isTimeout(s3Error(idle, 'GET x')))
})

test.serial('the server dies mid-pull: IMAGE_REMOTE_ERROR, nothing tagged in B; after it is back the pull resumes', async (t) => {
  // throttled, so that the server stops while the body is streaming
  const s3 = await startS3(t, { rateBytesPerSec: 8 * MiB })
  const f = await fixture(t, 'pulldies', 'v1', 16 * MiB)
  const o = s3opts(s3, { maxAttempts: 2 })
  await pushS3(f.store, 'pulldies:v1', `s3://${s3.bucket}/pd`, o)
  const storeB = await B.store(`/s3-b-${++n}`)
  let stopping: Promise<void> | undefined
  const err = await pullS3(storeB, `s3://${s3.bucket}/pd/pulldies:v1`, {
    ...o,
    onReceive: (e) => {
      if (e.digest === f.big.digest) stopping ??= s3.stop()
    },
  }).catch((e: unknown) => e)
  await stopping
  t.is((err as StrataError).code, 'IMAGE_REMOTE_ERROR', String(err))
  t.deepEqual(await storeB.listTags(), [])
  t.deepEqual(await storeB.listManifests(), [])
  await s3.start()
  const r = await pullS3(storeB, `s3://${s3.bucket}/pd/pulldies:v1`, o)
  t.true(r.bytesResumed > 0, `resumed ${r.bytesResumed}`)
  t.is((await storeB.resolve('pulldies:v1')).digest, f.digest)
  t.true((await blobBytes(storeB, f.big.digest)).equals(f.big.bytes))
})

test.serial('a blob PUT (streamed body, which the SDK cannot resend) refused with 503 is sent again by the push; refused every time: IMAGE_REMOTE_ERROR, no tag', async (t) => {
  let refusals = 1
  const isBlobPut = (m: string, u: string) => m === 'PUT' && u.includes('/blobs/') && !u.includes('partNumber=')
  const s3 = await startS3(t, { refuse: (m, u) => (isBlobPut(m, u) && refusals-- > 0 ? 503 : undefined) })
  const f = await fixture(t, 'team/retry', 'v1')
  const small = [...f.layers.keys()].find((d) => d !== f.big.digest)!
  const r = await pushS3(f.store, 'team/retry:v1', `s3://${s3.bucket}/m`, s3opts(s3))
  t.is(r.blobsPushed, 2)
  const puts = s3.requests.filter((q) => isBlobPut(q.split(' ')[0]!, q.slice(q.indexOf(' ') + 1)) && q.includes(small.slice(7)))
  t.is(puts.length, 2, `the small blob's PUT was sent twice: ${puts.join(' | ')}`)
  t.true(fs.readFileSync(s3.objectPath(blobKey('m', small))).equals(f.layers.get(small)!))

  refusals = Infinity
  // every blob PUT refused, the big blob's parts too: nothing is left half-written in s3rver when the push gives up
  const s3b = await startS3(t, { refuse: (m, u) => (m === 'PUT' && u.includes('/blobs/') ? 500 : undefined) })
  const e = await t.throwsAsync(pushS3(f.store, 'team/retry:v1', `s3://${s3b.bucket}/m`, s3opts(s3b)))
  t.is((e as StrataError).code, 'IMAGE_REMOTE_ERROR')
  t.regex(e!.message, /500|InternalError/)
  t.false(objectExists(s3b, tagKey('m', 'team/retry', 'v1')))
  // only the small blob's PUT refused: it is sent exactly S3_MAX_ATTEMPTS times, then the push gives up
  // (with every PUT refused, the big blob's parts may give up first and cut the small blob's last attempt short)
  const s3c = await startS3(t, { refuse: (m, u) => (isBlobPut(m, u) && u.includes(small.slice(7)) ? 500 : undefined) })
  const e2 = await t.throwsAsync(pushS3(f.store, 'team/retry:v1', `s3://${s3c.bucket}/m`, s3opts(s3c)))
  t.is((e2 as StrataError).code, 'IMAGE_REMOTE_ERROR')
  t.is(s3c.requests.filter((q) => isBlobPut(q.split(' ')[0]!, q.slice(q.indexOf(' ') + 1)) && q.includes(small.slice(7))).length, S3_MAX_ATTEMPTS, 'every attempt, then it gives up')
  t.false(objectExists(s3c, tagKey('m', 'team/retry', 'v1')))
})

test.serial('the server is down from the start: IMAGE_REMOTE_ERROR for push and pull', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'down', 'v1', 64 * 1024)
  await s3.stop()
  const o = s3opts(s3, { maxAttempts: 1 })
  t.is(await code(pushS3(f.store, 'down:v1', `s3://${s3.bucket}/d`, o)), 'IMAGE_REMOTE_ERROR')
  t.is(await code(pullS3(await B.store(`/s3-b-${++n}`), `s3://${s3.bucket}/d/down:v1`, o)), 'IMAGE_REMOTE_ERROR')
})

test.serial('a tampered blob or manifest in the bucket: IMAGE_DIGEST_MISMATCH and nothing tagged or stored in B', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'tamper', 'v1', 6 * MiB)
  const o = s3opts(s3)
  await pushS3(f.store, 'tamper:v1', `s3://${s3.bucket}/t`, o)
  const big = [...f.layers.entries()].find(([, b]) => b.length > PART)!
  const file = s3.objectPath(blobKey('t', big[0]))
  const bytes = fs.readFileSync(file)
  bytes[bytes.length >> 1] ^= 0x01
  fs.writeFileSync(file, bytes)
  const storeB = await B.store(`/s3-b-${++n}`)
  const mismatch = await t.throwsAsync(pullS3(storeB, `s3://${s3.bucket}/t/tamper:v1`, o), { code: 'IMAGE_DIGEST_MISMATCH' })
  // which object, on which server
  t.true(mismatch!.message.includes(`s3://${s3.bucket}/${blobKey('t', big[0])} at ${s3.endpoint}: `), mismatch!.message)
  t.is(await code(storeB.resolve('tamper:v1')), 'IMAGE_NOT_FOUND')
  t.is(await storeB.statBlob(big[0]), null)
  t.is(await storeB.partialBlobLength(big[0]), 0, 'the bad partial is dropped')
  t.deepEqual(await storeB.listManifests(), [])

  // a truncated blob is a size mismatch
  fs.writeFileSync(file, bytes.subarray(0, bytes.length - 10))
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/t/tamper:v1`, o)), 'IMAGE_SIZE_MISMATCH')

  // the manifest object changed: its digest no longer matches the tag
  fs.writeFileSync(file, big[1])
  const mfile = s3.objectPath(manifestKey('t', f.digest))
  fs.writeFileSync(mfile, fs.readFileSync(mfile, 'utf8').replace('"sh"', '"xx"'))
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/t/tamper:v1`, o)), 'IMAGE_DIGEST_MISMATCH')
  t.deepEqual(await storeB.listTags(), [])
})

test.serial('missing tag or bucket: IMAGE_NOT_FOUND; refused credentials: IMAGE_AUTH_FAILED; bad URLs: IMAGE_INVALID_REFERENCE', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'misc', 'v1', 64 * 1024)
  const o = s3opts(s3)
  const storeB = await B.store(`/s3-b-${++n}`)
  await pushS3(f.store, 'misc:v1', `s3://${s3.bucket}/m`, o)
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/m/misc:v2`, o)), 'IMAGE_NOT_FOUND')
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/other/misc:v1`, o)), 'IMAGE_NOT_FOUND')
  t.is(await code(pullS3(storeB, `s3://no-such-bucket/m/misc:v1`, o)), 'IMAGE_NOT_FOUND')
  const noBucket = await pushS3(f.store, 'misc:v1', `s3://no-such-bucket/m`, o).catch((e: unknown) => e as StrataError)
  t.is((noBucket as StrataError).code, 'IMAGE_NOT_FOUND', 'push to a missing bucket, as pull')
  t.regex((noBucket as StrataError).message, /the bucket does not exist/)
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/m/misc@sha256:${'0'.repeat(64)}`, o)), 'IMAGE_NOT_FOUND')
  t.is(await code(pushS3(f.store, 'nope:v1', `s3://${s3.bucket}/m`, o)), 'IMAGE_NOT_FOUND', 'no such local image')

  // s3rver checks the access key id but not V4 signatures, so the refused
  // credentials here are an unknown key id (InvalidAccessKeyId, HTTP 403)
  const wrong = { ...o, credentials: { accessKeyId: 'NOBODY', secretAccessKey: 'wrong' } }
  const refused = await pushS3(f.store, 'misc:v1', `s3://${s3.bucket}/m2`, wrong).catch((e: unknown) => e as StrataError)
  t.is((refused as StrataError).code, 'IMAGE_AUTH_FAILED')
  // a HEAD's answer has no body to name the error: the HTTP status does
  t.regex((refused as StrataError).message, /refused the credentials: HTTP 403/)
  t.notRegex((refused as StrataError).message, /UnknownError/)
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/m/misc:v1`, wrong)), 'IMAGE_AUTH_FAILED')
  t.false(objectExists(s3, tagKey('m2', 'misc', 'v1')))

  for (const u of ['s3:/images', 'http://x/y', 's3://images/a:b', 's3://images/../x']) t.is(await code(pushS3(f.store, 'misc:v1', u, o)), 'IMAGE_INVALID_REFERENCE', u)
  for (const u of ['s3://images', 's3://images/BAD', 's3://images/x:y:z']) t.is(await code(pullS3(storeB, u, o)), 'IMAGE_INVALID_REFERENCE', u)
  t.is(await code(pullS3(storeB, `s3://${s3.bucket}/m/misc:v1`, { ...o, name: 'x@sha256:' + '1'.repeat(64) })), 'IMAGE_INVALID_REFERENCE')

  // the SDK's Node 20 notice is switched off, nothing else
  const warnings: string[] = []
  const onWarning = (w: Error) => warnings.push(w.message)
  process.on('warning', onWarning)
  const c = await createS3Client(o)
  await c.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: tagKey('m', 'misc', 'v1') }))
  c.destroy()
  await new Promise((r) => setImmediate(r))
  process.off('warning', onWarning)
  t.false(warnings.some((w) => w.includes('NodeVersionSupportWarning')))
})

/** The store with its readBlob calls counted per digest. */
function counting(store: Fixture['store']): { store: Fixture['store']; reads: Map<string, number> } {
  const reads = new Map<string, number>()
  const wrapped = new Proxy(store, {
    get(target, prop, recv) {
      const v = Reflect.get(target, prop, recv) as unknown
      if (prop !== 'readBlob' || typeof v !== 'function') return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v
      return (digest: string, ...rest: unknown[]) => {
        reads.set(digest, (reads.get(digest) ?? 0) + 1)
        return (v as (...a: unknown[]) => unknown).call(target, digest, ...rest)
      }
    },
  })
  return { store: wrapped, reads }
}

test.serial('a blob up to the part size goes up in one PUT and one pass over the DFS, its SHA-256 sent and its MD5 checked against the ETag', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'onepass', 'v1')
  const small = [...f.layers.entries()].filter(([, b]) => b.length <= PART)
  t.true(small.length > 0, 'the fixture has a layer sent in one PUT')
  const c = counting(f.store)
  await pushS3(c.store, 'onepass:v1', `s3://${s3.bucket}/p`, s3opts(s3))
  for (const [d, bytes] of small) {
    t.is(c.reads.get(d), 1, `${d} read once`)
    t.true(fs.readFileSync(s3.objectPath(blobKey('p', d))).equals(bytes))
  }
})

test.serial('a server whose answer confirms neither the SHA-256 nor the MD5: the object is deleted and the blob sent again with Content-MD5', async (t) => {
  const s3 = await startS3(t)
  const f = await fixture(t, 'unverified', 'v1')
  const [d, bytes] = [...f.layers.entries()].find(([, b]) => b.length <= PART)!
  const client = await createS3Client(s3opts(s3))
  t.teardown(() => client.destroy())
  let rewritten = 0
  // answers to one-pass PUTs (no Content-MD5) lose what would confirm the bytes, as from a server that ignores checksums and whose ETag is not an MD5
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const r = await next(args)
      const input = args.input as { ContentMD5?: string; Key?: string }
      if (context.commandName === 'PutObjectCommand' && !input.ContentMD5 && input.Key === blobKey('u', d)) {
        const out = r.output as { ETag?: string; ChecksumSHA256?: string }
        out.ETag = '"0123456789abcdef0123456789abcdef"'
        delete out.ChecksumSHA256
        rewritten++
      }
      return r
    },
    { step: 'initialize', name: 'unverifiedAnswer' },
  )
  const c = counting(f.store)
  const before = s3.requests.length
  await pushS3(c.store, 'unverified:v1', `s3://${s3.bucket}/u`, s3opts(s3, { client }))
  t.is(rewritten, 1)
  const key = blobKey('u', d)
  const mine = s3.requests.slice(before).filter((r) => r.includes(key) && !r.startsWith('HEAD'))
  t.deepEqual(mine.map((r) => r.split(' ')[0]), ['PUT', 'DELETE', 'PUT'], mine.join(' | '))
  // the one-pass PUT, then the strict one (its MD5 pass and its body)
  t.is(c.reads.get(d), 3)
  t.true(fs.readFileSync(s3.objectPath(key)).equals(bytes))
})
