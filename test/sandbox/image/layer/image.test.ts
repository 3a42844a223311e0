// A real multi-layer image (umoci + GNU tar, see test/helpers/oci-fixtures.ts):
// each layer blob → unpackLayer('layer') → buildErofs → file-backed EROFS
// mounts → overlay, compared with `umoci unpack` of the same image; the squash
// ('apply' over all layers, one EROFS) gives the same tree.
import test, { type ExecutionContext } from 'ava'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Transform } from 'node:stream'
import { buildErofs, decompressStream, unpackLayer, type UnpackMode } from '../../../../sandbox/image/layer/index.js'
import { run, toDockerArchive, toOciArchive, toZstdLayout, umociUnpack, useOciFixture, type OciFixture, type OciFixtureLayer } from '../../../helpers/oci-fixtures.js'
import { diffTrees, snapshotTree, type Tree } from '../../../helpers/tree-compare.js'
import { mount, tmpDir } from './helpers.js'

let fx: OciFixture
let reference: Tree

useOciFixture(test, async (f) => {
  fx = f
  reference = await snapshotTree(await umociUnpack(fx, path.join(fx.dir, 'reference')))
})

/** Decompresses and unpacks one layer blob, returning the sha256 of the uncompressed tar too. */
async function unpackBlob(layer: OciFixtureLayer, dest: string, mode: UnpackMode): Promise<string> {
  const h = crypto.createHash('sha256')
  const hashing = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      h.update(chunk)
      cb(null, chunk)
    },
  })
  const plain = await decompressStream(fs.createReadStream(layer.blobPath), layer.mediaType)
  plain.on('error', (e) => hashing.destroy(e))
  await unpackLayer(plain.pipe(hashing), dest, { mode })
  return 'sha256:' + h.digest('hex')
}

async function layerFiles(t: ExecutionContext, layers: OciFixtureLayer[], work: string): Promise<{ files: string[]; digests: string[]; diffIds: string[] }> {
  const files: string[] = []
  const digests: string[] = []
  const diffIds: string[] = []
  for (const [i, layer] of layers.entries()) {
    const dir = path.join(work, `tree${i}`)
    fs.mkdirSync(dir)
    diffIds.push(await unpackBlob(layer, dir, 'layer'))
    const file = path.join(work, `layer${i}.erofs`)
    const built = await buildErofs(dir, file)
    t.is(built.size, fs.statSync(file).size)
    digests.push(built.digest)
    files.push(file)
  }
  return { files, digests, diffIds }
}

test('per-layer EROFS files stacked with overlayfs give the tree umoci unpacks', async (t) => {
  const work = tmpDir(t)
  const { files, diffIds } = await layerFiles(t, fx.layers, work)
  t.deepEqual(diffIds, fx.diffIds, 'the decompressed tars are the layers the config names')
  const lowers: string[] = []
  for (const [i, f] of files.entries()) {
    const mp = path.join(work, `m${i}`)
    mount(t, f, mp, 'erofs', null)
    lowers.unshift(mp)
  }
  const merged = path.join(work, 'merged')
  mount(t, 'overlay', merged, 'overlay', `lowerdir=${lowers.join(':')}`)
  const got = await snapshotTree(merged)
  t.deepEqual(diffTrees(got, reference), [])
  // What the fixture is about, spelled out (the comparison above already covers it).
  t.false(got.has('opq/old'))
  t.false(got.has('opq/sub/x'))
  t.true(got.has('opq/sub/y'))
  t.false(got.has('etc/gone'))
  t.false(got.has('gone-dir'))
  t.deepEqual(got.get('bin/tool')!.links, ['bin/tool2', 'data/tool-link'])
  t.is(got.get('bin/tool')!.mode, '4755')
  t.is(got.get('data/big.bin')!.xattrs!['user.bin'], '00ff80010a3d')
})

test('squashing (apply mode over every layer, one EROFS) gives the same tree', async (t) => {
  const work = tmpDir(t)
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  for (const layer of fx.layers) await unpackBlob(layer, tree, 'apply')
  t.deepEqual(diffTrees(await snapshotTree(tree), reference), [])
  const file = path.join(work, 'squash.erofs')
  await buildErofs(tree, file)
  const mp = path.join(work, 'm')
  mount(t, file, mp, 'erofs', null)
  t.deepEqual(diffTrees(await snapshotTree(mp), reference), [])
})

test('zstd layers (skopeo) decompress to the same tars and build the same EROFS bytes as the gzip ones', async (t) => {
  const work = tmpDir(t)
  const zstd = await toZstdLayout(fx, path.join(work, 'zstd-layout'))
  t.true(zstd.layers.every((l) => l.mediaType.endsWith('+zstd')))
  fs.mkdirSync(path.join(work, 'gz'))
  fs.mkdirSync(path.join(work, 'zst'))
  const gz = await layerFiles(t, fx.layers, path.join(work, 'gz'))
  const zs = await layerFiles(t, zstd.layers, path.join(work, 'zst'))
  t.deepEqual(zs.diffIds, fx.diffIds)
  t.deepEqual(zs.digests, gz.digests)
})

test('the fixture helper also gives oci-archive and docker-archive forms of the image', async (t) => {
  const work = tmpDir(t)
  const oci = await toOciArchive(fx, path.join(work, 'x.oci.tar'))
  const docker = await toDockerArchive(fx, path.join(work, 'x.docker.tar'), 'strata/fixture:v1')
  const ociList = (await run('tar', ['-tf', oci])).stdout.split('\n')
  t.true(ociList.includes('index.json'))
  t.true(ociList.includes('oci-layout'))
  for (const l of fx.layers) t.true(ociList.includes(`blobs/sha256/${l.digest.slice(7)}`))
  const manifest = JSON.parse((await run('tar', ['-xOf', docker, 'manifest.json'])).stdout)
  t.deepEqual(manifest[0].RepoTags, ['docker.io/strata/fixture:v1'], 'skopeo writes the normalized name')
  t.is(manifest[0].Layers.length, fx.layers.length)
})
