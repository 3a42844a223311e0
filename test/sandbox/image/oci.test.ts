// Imports of every input form against a real cluster, checked the hard way:
// the stored layers are mounted (file-backed EROFS, stacked with overlayfs)
// and the tree compared with what `umoci unpack` makes of the same image.
// Fixtures come from umoci, skopeo and GNU tar (test/helpers/oci-fixtures.ts).
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { exportOciArchive } from '../../../sandbox/image/oci/export.js'
import { importPath } from '../../../sandbox/image/oci/import.js'
import type { ImageStore } from '../../../sandbox/image/store.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { useImageFixtureCluster } from '../../helpers/image-fixture-cluster.js'
import { mountImage } from '../../helpers/image-mount.js'
import { FIXTURE_TAG, readLayout, run, toDockerArchive, toOciArchive, toZstdLayout, umociUnpack, type OciFixture } from '../../helpers/oci-fixtures.js'
import { diffTrees, sampleFile, snapshotTree, type Tree } from '../../helpers/tree-compare.js'

const img = useImageFixtureCluster(test)
let fx: OciFixture
let reference: Tree
let refRoot: string
let n = 0

test.before(async () => {
  fx = img.fx
  refRoot = await umociUnpack(fx, path.join(fx.dir, 'bundle'))
  reference = await snapshotTree(refRoot)
})

async function fresh(): Promise<ImageStore> {
  return img.ic.store(`/img-oci-${++n}`)
}

/** Mounts the image and compares it with umoci's tree; returns the differences. */
async function treeDiffs(t: import('ava').ExecutionContext, store: ImageStore, ref: string): Promise<string[]> {
  const { manifest } = await store.resolve(ref)
  const root = await mountImage(t, store, manifest, localTmp(t, 'strata-mnt-'))
  return diffTrees(await snapshotTree(root), reference)
}

test.serial('OCI layout directory (umoci): three layers, whiteouts, opaque dir, links, xattrs, devices — tree equals umoci unpack', async (t) => {
  const store = await fresh()
  const r = await importPath(store, fx.layout, { name: 'fx/layout', tag: 'v1', workDir: localTmp(t) })
  t.is(r.layersBuilt, 3)
  t.is(r.layersReused, 0)
  t.is(r.manifest.layers.length, 3)
  t.deepEqual(
    r.manifest.layers.map((l) => l.diffId),
    fx.diffIds,
  )
  t.true(r.manifest.layers.every((l) => l.kind === 'base'))
  t.like(r.manifest.source, { type: 'oci-layout', ref: fx.layout, digest: fx.manifestDigest, platform: 'linux/amd64' })
  t.is((await store.resolve('fx/layout:v1')).digest, r.digest)
  // the reference really has what the fixture promises (so an empty diff means something)
  t.truthy(reference.get('etc/passwd')?.xattrs?.['user.color'])
  t.false(reference.has('etc/gone'))
  t.false(reference.has('gone-dir'))
  t.false(reference.has('opq/old'))
  t.true(reference.has('opq/new'))
  t.deepEqual(reference.get('bin/tool2')?.links, ['bin/tool', 'data/tool-link'])
  t.is(reference.get('dev/null')?.type, 'char')
  t.is(reference.get('data/empty')?.type, 'symlink')
  t.deepEqual(await treeDiffs(t, store, 'fx/layout:v1'), [])
  // the staging area is empty and nothing is leased once the import is done
  t.deepEqual((await store.fs.readdirAll(`${store.root}/tmp`)).entries, [])
  t.deepEqual(await store.listLeases(), [])
})

test.serial('OCI archive and docker-save tarball (skopeo), zstd layers: same trees, same layer digests', async (t) => {
  const dir = localTmp(t)
  const oci = await toOciArchive(fx, path.join(dir, 'fx-oci.tar'))
  const docker = await toDockerArchive(fx, path.join(dir, 'fx-docker.tar'), 'strata-fixture:v2')
  const zstd = await toZstdLayout(fx, path.join(dir, 'zstd-layout'))
  t.true(zstd.layers.every((l) => l.mediaType.endsWith('+zstd')))
  const digests: string[][] = []
  for (const [input, name, type] of [
    [oci, 'fx/oci', 'oci-archive'],
    [docker, undefined, 'docker-archive'],
    [zstd.layout, 'fx/zstd', 'oci-layout'],
  ] as const) {
    const store = await fresh()
    const r = await importPath(store, input, { ...(name ? { name } : {}), workDir: dir })
    t.is(r.manifest.source.type, type, input)
    t.is(r.layersBuilt, 3, input)
    // a docker-save tarball names the image itself
    if (!name) t.is(`${r.name}:${r.tag}`, 'strata-fixture:v2')
    t.deepEqual(await treeDiffs(t, store, `${r.name}:${r.tag}`), [], input)
    digests.push(r.manifest.layers.map((l) => l.digest))
  }
  // EROFS layers are built deterministically: the same tree gives the same bytes whatever the archive form
  t.deepEqual(digests[1], digests[0])
  t.deepEqual(digests[2], digests[0])
})

test.serial('an image archive that does not begin like one (a README first) is imported as the image it holds, not as a rootfs', async (t) => {
  // with --name a tar is imported as a rootfs while its index is built; the index decides
  const dir = localTmp(t)
  const oci = await toOciArchive(fx, path.join(dir, 'fx-oci.tar'))
  const docker = await toDockerArchive(fx, path.join(dir, 'fx-docker.tar'), 'strata-fixture:v3')
  for (const [src, type] of [
    [oci, 'oci-archive'],
    [docker, 'docker-archive'],
  ] as const) {
    const odd = path.join(dir, `readme-first-${type}.tar`)
    await run('python3', [
      '-c',
      'import io,sys,tarfile\n' +
        'src=tarfile.open(sys.argv[1]); out=tarfile.open(sys.argv[2],"w",format=tarfile.PAX_FORMAT)\n' +
        'b=b"not a rootfs\\n"; i=tarfile.TarInfo("README"); i.size=len(b); out.addfile(i,io.BytesIO(b))\n' +
        'for m in src.getmembers(): out.addfile(m, src.extractfile(m) if m.isfile() else None)\n' +
        'out.close()',
      src,
      odd,
    ])
    const store = await fresh()
    const r = await importPath(store, odd, { name: 'fx/odd', tag: type, workDir: dir })
    t.is(r.manifest.source.type, type)
    t.is(r.layersBuilt, 3)
    t.deepEqual(await treeDiffs(t, store, `fx/odd:${type}`), [])
    // nothing of the rootfs import that was stopped stays: only the image's own layers are stored
    t.deepEqual((await store.listBlobs()).map((b) => b.digest).sort(), r.manifest.layers.map((l) => l.digest).sort())
    t.deepEqual((await store.fs.readdirAll(`${store.root}/tmp`)).entries, [])
    t.deepEqual(await store.listLeases(), [])
  }
})

test.serial('rootfs tarballs (plain, gzip, zstd) and a rootfs directory; squash', async (t) => {
  const dir = localTmp(t)
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['--format=posix', '--xattrs', '--xattrs-include=*', '--numeric-owner', '-C', refRoot, '-cf', tar, '.'])
  await run('sh', ['-c', `gzip -c ${tar} > ${tar}.gz && zstd -q -c ${tar} > ${tar}.zst`])
  const store = await fresh()
  const plain = await importPath(store, tar, { name: 'fx/rootfs', tag: 'tar', workDir: dir })
  t.is(plain.manifest.layers.length, 1)
  t.is(plain.manifest.source.type, 'rootfs')
  t.deepEqual(await treeDiffs(t, store, 'fx/rootfs:tar'), [])
  // the same tar compressed: same diffId, the layer is reused without unpacking
  for (const f of [`${tar}.gz`, `${tar}.zst`]) {
    const r = await importPath(store, f, { name: 'fx/rootfs', tag: path.extname(f).slice(1), workDir: dir })
    t.is(r.layersReused, 1, f)
    t.deepEqual(r.manifest.layers, plain.manifest.layers)
  }
  const fromDir = await importPath(store, refRoot, { name: 'fx/rootfs', tag: 'dir', kind: 'toolkit', workDir: dir })
  t.is(fromDir.manifest.layers[0]!.kind, 'toolkit')
  t.deepEqual(await treeDiffs(t, store, 'fx/rootfs:dir'), [])
  // the directory's diffId is the tar layerToTar makes of the built layer
  t.truthy(fromDir.manifest.layers[0]!.diffId)
  const squashed = await importPath(store, fx.layout, { name: 'fx/squashed', squash: true, workDir: dir })
  t.is(squashed.manifest.layers.length, 1)
  t.deepEqual(await treeDiffs(t, store, 'fx/squashed'), [])
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('strata-')), [])
})

test.serial('a rootfs directory keeps what its tarball keeps: times before 1970 to the nanosecond, a sparse file as holes, lost+found, odd names (the same layer)', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  const sparse = 2 * 1024 ** 3
  await run(
    'sh',
    [
      '-euc',
      `mkdir -p d lost+found
       echo old > old
       touch -d '1960-01-01 00:00:00.123456789' old
       truncate -s ${sparse} sparse
       printf abc | dd of=sparse bs=1 seek=1000000000 conv=notrunc status=none
       echo lf > lost+found/x
       printf nl > "$(printf 'a\\nb')"
       echo x > d/a
       ln d/a d/b
       setfattr -n user.k -v v d/a
       touch -d '1969-07-20 20:17:40' d`,
    ],
    { cwd: tree },
  )
  const store = await fresh()
  const r = await importPath(store, tree, { name: 'fx/tree', workDir: dir })
  // mkfs.erofs 1.5 stored the 2 GiB of holes as zeros
  t.true(r.manifest.layers[0]!.size < 1024 * 1024, `a layer of ${r.manifest.layers[0]!.size} bytes`)
  const root = await mountImage(t, store, (await store.resolve('fx/tree')).manifest, localTmp(t, 'strata-mnt-'))
  const typeOnly = (rel: string): boolean => rel === 'sparse'
  const want = await snapshotTree(tree, { typeOnly })
  t.is(want.get('old')?.mtimeNs, -315619199876543211n)
  t.deepEqual(diffTrees(await snapshotTree(root, { typeOnly }), want), [])
  const at = [0, 1_000_000_000 - 8, sparse - 8]
  t.deepEqual(sampleFile(path.join(root, 'sparse'), at), sampleFile(path.join(tree, 'sparse'), at))
  t.is(fs.lstatSync(path.join(root, 'd'), { bigint: true }).mtimeNs, fs.lstatSync(path.join(tree, 'd'), { bigint: true }).mtimeNs)
  // its tarball is the same layer: one builder for both
  const tar = path.join(dir, 'tree.tar')
  await run('tar', ['--sort=name', '--format=posix', '--sparse', '--xattrs', '--xattrs-include=*', '--numeric-owner', '-C', tree, '-cf', tar, '.'])
  const fromTar = await importPath(store, tar, { name: 'fx/tree', tag: 'tar', workDir: dir })
  t.is(fromTar.manifest.layers[0]!.digest, r.manifest.layers[0]!.digest)
})

test.serial('--squash keeps times before 1970 to the nanosecond (its tree is built by the one-pass builder now; with --compress mkfs.erofs 1.5 still holds 1970)', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'old'), 'old\n')
  await run('touch', ['-d', '1960-01-01 00:00:00.123456789', path.join(tree, 'old')])
  const layer = path.join(dir, 'old.tar')
  await run('tar', ['--format=posix', '--numeric-owner', '-cf', layer, '-C', tree, 'old'])
  const layout = path.join(dir, 'oci')
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:t`])
  await run('umoci', ['raw', 'add-layer', '--image', `${layout}:t`, layer])
  const store = await fresh()
  const mtime = async (ref: string): Promise<bigint> => {
    const root = await mountImage(t, store, (await store.resolve(ref)).manifest, localTmp(t, 'strata-mnt-'))
    return fs.lstatSync(path.join(root, 'old'), { bigint: true }).mtimeNs
  }
  await importPath(store, layout, { name: 'old/squash', squash: true, workDir: dir })
  t.is(await mtime('old/squash'), -315619199876543211n)
  await importPath(store, layout, { name: 'old/squash', tag: 'lz4', squash: true, compress: 'lz4', workDir: dir })
  t.is(await mtime('old/squash:lz4'), 0n)
})

test.serial('dedup: the same import twice is stored once; two images sharing a base store the base once', async (t) => {
  const dir = localTmp(t)
  const store = await fresh()
  const a1 = await importPath(store, fx.layout, { name: 'dedup/a', workDir: dir })
  const blobs1 = (await store.listBlobs()).length
  t.is(blobs1, 3)
  const a2 = await importPath(store, fx.layout, { name: 'dedup/a', tag: 'again', workDir: dir })
  t.is(a2.layersReused, 3)
  t.is(a2.layersBuilt, 0)
  t.deepEqual(a2.manifest.layers, a1.manifest.layers)
  // same source, same config: even the manifest is the same
  t.is(a2.digest, a1.digest)
  t.is((await store.listBlobs()).length, 3)
  t.is((await store.listManifests()).length, 1)

  // image B = the fixture + one more layer (made by umoci)
  const bundle = path.join(dir, 'b')
  await run('umoci', ['unpack', '--image', fx.ref, bundle])
  fs.writeFileSync(path.join(bundle, 'rootfs/etc/app.conf'), 'app\n')
  await run('umoci', ['repack', '--image', `${fx.layout}:app`, bundle])
  const appLayout = await readLayout(fx.layout, 'app')
  t.is(appLayout.layers.length, 4)
  const b = await importPath(store, fx.layout, { name: 'dedup/b', ref: 'app', workDir: dir })
  t.is(b.layersReused, 3)
  t.is(b.layersBuilt, 1)
  t.deepEqual(b.manifest.layers.slice(0, 3), a1.manifest.layers)
  t.is((await store.listBlobs()).length, 4)
  // the layout holds two images now: without --ref the import refuses to guess
  await t.throwsAsync(importPath(store, fx.layout, { name: 'dedup/c', workDir: dir }), { code: 'INVALID_ARGUMENT' })
  const again = await importPath(store, fx.layout, { name: 'dedup/c', ref: FIXTURE_TAG, workDir: dir })
  t.is(again.digest, a1.digest)

  // a compressed import of the same layers builds its own (lz4) layers and reuses none of the plain
  // ones; a plain import afterwards still gets the plain layers, the same manifest as before
  const lz4 = await importPath(store, fx.layout, { name: 'dedup/lz4', ref: FIXTURE_TAG, workDir: dir, compress: 'lz4' })
  t.is(lz4.layersReused, 0)
  t.true(lz4.manifest.layers.every((l, i) => l.digest !== a1.manifest.layers[i]!.digest))
  t.is((await importPath(store, fx.layout, { name: 'dedup/lz4', tag: 'again', ref: FIXTURE_TAG, workDir: dir, compress: 'lz4' })).layersReused, 3, 'lz4 layers are reused by lz4 imports')
  const plainAgain = await importPath(store, fx.layout, { name: 'dedup/c', ref: FIXTURE_TAG, workDir: dir })
  t.is(plainAgain.layersReused, 3)
  t.is(plainAgain.digest, a1.digest, 'the same path imported the same way gives the same manifest')
})

test.serial('a docker-save tarball whose image has two RepoTags: without --ref both are tagged; --ref by one of them tags that one only', async (t) => {
  const dir = localTmp(t)
  const tar = path.join(dir, 'two-tags.tar')
  await run('skopeo', ['--insecure-policy', 'copy', '-q', '--additional-tag', 'localhost/accc/lay:other', `oci:${fx.ref}`, `docker-archive:${tar}:localhost/accc/lay:v2`])
  const repoTags = JSON.parse((await run('tar', ['-xOf', tar, 'manifest.json'])).stdout)[0].RepoTags
  t.deepEqual(repoTags, ['localhost/accc/lay:v2', 'localhost/accc/lay:other'])
  const all = await fresh()
  const r = await importPath(all, tar, { workDir: dir })
  t.deepEqual(r.tags, ['localhost/accc/lay:v2', 'localhost/accc/lay:other'])
  t.deepEqual((await all.listTags()).map((x) => `${x.name}:${x.tag}=${x.digest}`), [`localhost/accc/lay:other=${r.digest}`, `localhost/accc/lay:v2=${r.digest}`])
  for (const ref of ['localhost/accc/lay:other', 'accc/lay:other']) {
    const one = await fresh()
    const o = await importPath(one, tar, { ref, workDir: dir })
    t.is(`${o.name}:${o.tag}`, 'localhost/accc/lay:other', ref)
    t.deepEqual((await one.listTags()).map((x) => `${x.name}:${x.tag}`), ['localhost/accc/lay:other'], ref)
  }
  // --name wins over every RepoTag
  const named = await fresh()
  await importPath(named, tar, { name: 'mine/lay', tag: 'x', ref: 'accc/lay:other', workDir: dir })
  t.deepEqual((await named.listTags()).map((x) => `${x.name}:${x.tag}`), ['mine/lay:x'])
})

test.serial('an image that repeats a layer: layersBuilt + layersReused is the number of layers (a repeat counts as reused)', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'a'), 'a\n')
  const a = path.join(dir, 'a.tar')
  await run('tar', ['--numeric-owner', '-cf', a, '-C', tree, 'a'])
  fs.writeFileSync(path.join(tree, 'b'), 'b\n')
  const b = path.join(dir, 'b.tar')
  await run('tar', ['--numeric-owner', '-cf', b, '-C', tree, 'b'])
  const layout = path.join(dir, 'oci')
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:t`])
  for (const l of [a, b, a]) await run('umoci', ['raw', 'add-layer', '--image', `${layout}:t`, l])
  const store = await fresh()
  const first = await importPath(store, layout, { name: 'repeat', tag: 't', ref: 't', workDir: dir })
  t.is(first.manifest.layers.length, 3)
  t.is(first.manifest.layers[0]!.digest, first.manifest.layers[2]!.digest)
  t.deepEqual([first.layersBuilt, first.layersReused], [2, 1])
  const again = await importPath(store, layout, { name: 'repeat', tag: 'again', ref: 't', workDir: dir })
  t.deepEqual([again.layersBuilt, again.layersReused], [0, 3])
  // export writes the repeated layer once, and still gives each layer of the image its line
  const lines: string[] = []
  const onProgress = { start: (label: string) => ({ tick: () => undefined, done: (note?: string) => void lines.push(`${label.replace(/ [0-9a-f]{12}$/, '')}: ${note ?? 'done'}`) }) }
  await exportOciArchive(store, 'repeat:t', path.join(dir, 'out.tar'), { workDir: dir, onProgress })
  t.deepEqual(lines, ['export layer 1/3: done', 'export layer 2/3: done', 'export layer 3/3: as layer 1'])
})
