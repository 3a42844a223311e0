// Images for the S3 tests: real EROFS layers made by mkfs.erofs from small
// trees (one large random file so that the layer needs several parts),
// published straight into an ImageStore.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { Readable } from 'node:stream'
import type { ExecutionContext } from 'ava'
import { MANIFEST_MEDIA_TYPE, emptyConfig, encodeManifest, type ImageManifest } from '../../../../sandbox/image/types.js'
import type { ImageStore } from '../../../../sandbox/image/store.js'
import { localTmp } from '../../../helpers/image-cluster.js'

export interface Fixture {
  store: ImageStore
  digest: string
  manifest: ImageManifest
  /** layer digest → the EROFS file's bytes */
  layers: Map<string, Buffer>
  /** the large layer */
  big: { digest: string; bytes: Buffer }
}

/** An EROFS layer made by mkfs.erofs from a tree with a file of `bytes` random bytes. */
export function erofsLayer(t: ExecutionContext, bytes: number, seed: string): Buffer {
  const dir = localTmp(t, 'strata-s3-layer-')
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(path.join(tree, 'etc'), { recursive: true })
  fs.writeFileSync(path.join(tree, 'etc', 'os-release'), `ID=${seed}\n`)
  fs.writeFileSync(path.join(tree, 'data.bin'), crypto.randomBytes(bytes))
  fs.symlinkSync('data.bin', path.join(tree, 'link'))
  const out = path.join(dir, 'layer.erofs')
  execFileSync('mkfs.erofs', ['-T0', '--all-root', out, tree], { stdio: 'pipe' })
  return fs.readFileSync(out)
}

/** Publishes NAME:TAG into `store`: a layer of about `bigBytes` and a small one, then the manifest, then the tag. */
export async function publishFixture(t: ExecutionContext, store: ImageStore, name: string, tag: string, bigBytes: number): Promise<Fixture> {
  const blobs = [erofsLayer(t, bigBytes, `${name}-base`), erofsLayer(t, 64 * 1024, `${name}-top`)]
  const layers = new Map<string, Buffer>()
  const refs = []
  for (const b of blobs) {
    const r = await store.putBlob(Readable.from([b]), { size: b.length })
    layers.set(r.digest, b)
    refs.push({ digest: r.digest, size: b.length, kind: 'base' as const })
  }
  const manifest: ImageManifest = {
    schemaVersion: 1,
    mediaType: MANIFEST_MEDIA_TYPE,
    layers: refs,
    config: { ...emptyConfig(), cmd: ['sh'], env: ['PATH=/bin'] },
    source: { type: 'rootfs', ref: '/fixture' },
    created: '2026-11-30T10:00:00.000Z',
  }
  const put = await store.putManifest(encodeManifest(manifest))
  await store.setTag(name, tag, put.digest)
  return { store, digest: put.digest, manifest, layers, big: { digest: refs[0]!.digest, bytes: blobs[0]! } }
}

/** A blob's bytes as the store serves them. */
export async function blobBytes(store: ImageStore, digest: string): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of store.readBlob(digest)) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}
