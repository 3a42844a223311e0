// The archive readers without a cluster: the tar index (PAX and GNU long
// names, links inside the archive, truncation, checksums, duplicates,
// unsafe names), platform selection in (nested) multi-platform indexes, and
// the legacy `docker save` layout with symlinked duplicate layers.
import test from 'ava'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { openImportInput } from '../../../sandbox/image/oci/source.js'
import { TarIndex } from '../../../sandbox/image/oci/tar-index.js'
import { parsePlatform, platformMatches } from '../../../sandbox/image/oci/platform.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { run, toDockerArchive, useOciFixture, type OciFixture } from '../../helpers/oci-fixtures.js'

let fx: OciFixture

useOciFixture(test, (f) => {
  fx = f
})

async function sha(s: Readable): Promise<string> {
  const h = crypto.createHash('sha256')
  for await (const c of s) h.update(c as Buffer)
  return 'sha256:' + h.digest('hex')
}

async function pyTar(file: string, format: 'PAX' | 'GNU' | 'USTAR', entries: Array<{ name: string; type?: 'file' | 'symlink' | 'hardlink' | 'dir'; data?: string; link?: string }>): Promise<string> {
  const script = `
import io, json, sys, tarfile
with tarfile.open(sys.argv[1], 'w', format=getattr(tarfile, sys.argv[2] + '_FORMAT')) as tf:
    for e in json.loads(sys.argv[3]):
        ti = tarfile.TarInfo(e['name'])
        t = e.get('type', 'file')
        if t == 'symlink': ti.type = tarfile.SYMTYPE; ti.linkname = e['link']; tf.addfile(ti)
        elif t == 'hardlink': ti.type = tarfile.LNKTYPE; ti.linkname = e['link']; tf.addfile(ti)
        elif t == 'dir': ti.type = tarfile.DIRTYPE; tf.addfile(ti)
        else:
            d = e.get('data', '').encode(); ti.size = len(d); tf.addfile(ti, io.BytesIO(d))
`
  await run('python3', ['-c', script, file, format, JSON.stringify(entries)])
  return file
}

test('tar index: long names (PAX and GNU), links resolved inside the archive, members streamed from their offsets', async (t) => {
  const dir = localTmp(t)
  const long = 'blobs/sha256/' + 'a'.repeat(64) + '/' + 'x'.repeat(120)
  for (const format of ['PAX', 'GNU'] as const) {
    const file = await pyTar(path.join(dir, `${format}.tar`), format, [
      { name: 'dir', type: 'dir' },
      { name: long, data: 'long name' },
      { name: 'dir/a.txt', data: 'A'.repeat(1000) },
      { name: 'dir/link', type: 'symlink', link: 'a.txt' },
      { name: 'up', type: 'symlink', link: 'dir/link' },
      { name: 'hard', type: 'hardlink', link: 'dir/a.txt' },
      { name: 'empty', data: '' },
    ])
    const idx = await TarIndex.open(file)
    const text = async (name: string) => {
      const parts: Buffer[] = []
      for await (const c of idx.open(idx.resolve(name)!)) parts.push(c as Buffer)
      return Buffer.concat(parts).toString()
    }
    t.is(await text(long), 'long name', format)
    t.is(await text('dir/a.txt'), 'A'.repeat(1000))
    t.is(await text('dir/link'), 'A'.repeat(1000))
    t.is(await text('up'), 'A'.repeat(1000))
    t.is(await text('./hard'), 'A'.repeat(1000))
    t.is(await text('empty'), '')
    t.is(idx.resolve('nope'), null)
  }
})

test('tar index: truncated, corrupt, duplicate and unsafe archives are refused with their codes', async (t) => {
  const dir = localTmp(t)
  const good = await pyTar(path.join(dir, 'good.tar'), 'USTAR', [
    { name: 'a', data: 'x'.repeat(2000) },
    { name: 'b', data: 'y' },
  ])
  const bytes = fs.readFileSync(good)
  const write = (name: string, b: Buffer) => {
    fs.writeFileSync(path.join(dir, name), b)
    return path.join(dir, name)
  }
  await t.throwsAsync(TarIndex.open(write('mid-data.tar', bytes.subarray(0, 1000))), { code: 'IMAGE_BAD_ARCHIVE' })
  await t.throwsAsync(TarIndex.open(write('no-eof.tar', bytes.subarray(0, 512 * 7))), { code: 'IMAGE_BAD_ARCHIVE' })
  await t.throwsAsync(TarIndex.open(write('half-header.tar', bytes.subarray(0, 512 * 5 + 100))), { code: 'IMAGE_BAD_ARCHIVE' })
  const corrupt = Buffer.from(bytes)
  corrupt[10] = 0x41
  await t.throwsAsync(TarIndex.open(write('checksum.tar', corrupt)), { code: 'IMAGE_BAD_ARCHIVE' })
  const badSize = Buffer.from(bytes)
  badSize.write('9999999999\0', 124, 'latin1')
  await t.throwsAsync(TarIndex.open(write('size.tar', badSize)), { code: 'IMAGE_BAD_ARCHIVE' })
  await t.throwsAsync(TarIndex.open(await pyTar(path.join(dir, 'dup.tar'), 'PAX', [{ name: 'index.json', data: '{}' }, { name: './index.json', data: '{}' }])), { code: 'IMAGE_DUPLICATE_ENTRY' })
  await t.throwsAsync(TarIndex.open(await pyTar(path.join(dir, 'dotdot.tar'), 'PAX', [{ name: 'blobs/../../etc/passwd', data: 'x' }])), { code: 'IMAGE_UNSAFE_PATH' })
  // `..` that stays inside is taken lexically, as a layer's entries are
  const inside = await TarIndex.open(await pyTar(path.join(dir, 'inside.tar'), 'PAX', [{ name: 'a/../b', data: 'x' }]))
  t.deepEqual([...inside.entries.keys()], ['b'])
  await t.throwsAsync(TarIndex.open(await pyTar(path.join(dir, 'abs.tar'), 'PAX', [{ name: '/etc/passwd', data: 'x' }])), { code: 'IMAGE_UNSAFE_PATH' })
  const esc = await TarIndex.open(await pyTar(path.join(dir, 'esc.tar'), 'PAX', [{ name: 'index.json', type: 'symlink', link: '../../etc/passwd' }]))
  t.throws(() => esc.resolve('index.json'), { code: 'IMAGE_UNSAFE_PATH' })
  const loop = await TarIndex.open(await pyTar(path.join(dir, 'loop.tar'), 'PAX', [{ name: 'a', type: 'symlink', link: 'b' }, { name: 'b', type: 'symlink', link: 'a' }]))
  t.throws(() => loop.resolve('a'), { code: 'IMAGE_BAD_ARCHIVE' })
})

test('platforms: aliases and variants', (t) => {
  t.deepEqual(parsePlatform('linux/x86_64'), { os: 'linux', architecture: 'amd64' })
  t.true(platformMatches(parsePlatform('linux/arm64'), parsePlatform('linux/arm64/v8')))
  t.true(platformMatches(parsePlatform('linux/arm/v7'), parsePlatform('linux/arm')))
  t.false(platformMatches(parsePlatform('linux/arm/v6'), parsePlatform('linux/arm/v7')))
  t.throws(() => parsePlatform('amd64'), { code: 'INVALID_ARGUMENT' })
})

/** A layout holding the fixture (amd64) and an arm64 variant, listed in a nested index with platforms and an attestation entry. */
async function multiPlatformLayout(dir: string): Promise<{ layout: string; amd64: string; arm64: string }> {
  const layout = path.join(dir, 'multi')
  fs.cpSync(fx.layout, layout, { recursive: true })
  await run('umoci', ['config', '--image', `${layout}:latest`, '--architecture', 'arm64', '--tag', 'arm'])
  await run('skopeo', ['--insecure-policy', 'copy', '-q', `oci:${layout}:arm`, `oci:${path.join(dir, 'only-arm')}:arm`])
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const byTag = (tag: string) => index.manifests.find((m: any) => m.annotations['org.opencontainers.image.ref.name'] === tag)
  const amd = byTag('latest')
  const arm = byTag('arm')
  const nested = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        { mediaType: amd.mediaType, digest: arm.digest, size: arm.size, platform: { os: 'unknown', architecture: 'unknown' } },
        { mediaType: arm.mediaType, digest: arm.digest, size: arm.size, platform: { os: 'linux', architecture: 'arm64', variant: 'v8' } },
        { mediaType: amd.mediaType, digest: amd.digest, size: amd.size, platform: { os: 'linux', architecture: 'amd64' } },
      ],
    }),
  )
  const nd = crypto.createHash('sha256').update(nested).digest('hex')
  fs.writeFileSync(path.join(layout, 'blobs/sha256', nd), nested)
  fs.writeFileSync(
    path.join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{ mediaType: 'application/vnd.oci.image.index.v1+json', digest: `sha256:${nd}`, size: nested.length, annotations: { 'org.opencontainers.image.ref.name': 'multi' } }],
    }),
  )
  return { layout, amd64: amd.digest, arm64: arm.digest }
}

test('multi-platform index: linux/amd64 by default, --platform picks another, a missing platform is an error', async (t) => {
  const dir = localTmp(t)
  const { layout, amd64, arm64 } = await multiPlatformLayout(dir)
  const def = await openImportInput(layout, dir)
  if (def.kind !== 'image') return t.fail()
  t.is(def.image.source.digest, amd64)
  t.is(def.image.source.platform, 'linux/amd64')
  t.is(def.image.layers.length, 3)
  const arm = await openImportInput(layout, dir, { platform: parsePlatform('linux/arm64') })
  if (arm.kind !== 'image') return t.fail()
  t.is(arm.image.source.digest, arm64)
  // the index lists linux/arm64/v8 (the config names no variant): the index's platform is recorded
  t.is(arm.image.source.platform, 'linux/arm64/v8')
  await t.throwsAsync(openImportInput(layout, dir, { platform: parsePlatform('linux/s390x') }), { code: 'IMAGE_PLATFORM_NOT_FOUND' })
  // the same as an OCI archive (skopeo keeps the whole index with --all)
  const archive = path.join(dir, 'multi.tar')
  await run('skopeo', ['--insecure-policy', 'copy', '-q', '--all', `oci:${layout}:multi`, `oci-archive:${archive}`])
  const fromArchive = await openImportInput(archive, dir, { platform: parsePlatform('linux/arm64/v8') })
  if (fromArchive.kind !== 'image') return t.fail()
  t.is(fromArchive.image.source.type, 'oci-archive')
  t.is(fromArchive.image.source.digest, arm64)
  // a single image for another platform: taken by default (nothing to choose from), refused when amd64 is asked for
  const only = path.join(dir, 'only-arm')
  const single = await openImportInput(only, dir)
  if (single.kind !== 'image') return t.fail()
  t.is(single.image.source.platform, 'linux/arm64')
  await t.throwsAsync(openImportInput(only, dir, { platform: parsePlatform('linux/amd64') }), { code: 'IMAGE_PLATFORM_NOT_FOUND' })
  // as `docker save` (containerd store) on an arm64 host writes it: the whole index, the blobs of one platform
  fs.rmSync(path.join(layout, 'blobs/sha256', amd64.slice(7)))
  const partial = await openImportInput(layout, dir)
  if (partial.kind !== 'image') return t.fail()
  t.is(partial.image.source.digest, arm64)
  await t.throwsAsync(openImportInput(layout, dir, { platform: parsePlatform('linux/amd64') }), { code: 'IMAGE_BLOB_MISSING' })
})

test('legacy docker save (<id>/layer.tar, <hex>.json, a duplicate layer as a symlink): layers stream and match their diff_ids', async (t) => {
  const dir = localTmp(t)
  // start from skopeo's docker-archive and rearrange it the way Docker before 25 wrote it
  const src = await toDockerArchive(fx, path.join(dir, 'docker.tar'), 'legacy/app:v1')
  const x = path.join(dir, 'x')
  fs.mkdirSync(x)
  await run('tar', ['-C', x, '-xf', src])
  const m = JSON.parse(fs.readFileSync(path.join(x, 'manifest.json'), 'utf8'))[0]
  const config = JSON.parse(fs.readFileSync(path.join(x, m.Config), 'utf8'))
  const out = path.join(dir, 'legacy')
  fs.mkdirSync(out)
  const layers: string[] = []
  for (const [i, l] of (m.Layers as string[]).entries()) {
    const id = crypto.createHash('sha256').update(`layer-${i}`).digest('hex')
    fs.mkdirSync(path.join(out, id))
    fs.copyFileSync(path.join(x, l), path.join(out, id, 'layer.tar'))
    fs.writeFileSync(path.join(out, id, 'json'), '{}')
    fs.writeFileSync(path.join(out, id, 'VERSION'), '1.0')
    layers.push(`${id}/layer.tar`)
  }
  // the bottom layer once more on top, stored as a symlink to the first copy
  const dupId = crypto.createHash('sha256').update('dup').digest('hex')
  fs.mkdirSync(path.join(out, dupId))
  fs.symlinkSync(`../${layers[0]!}`, path.join(out, dupId, 'layer.tar'))
  layers.push(`${dupId}/layer.tar`)
  config.rootfs.diff_ids.push(config.rootfs.diff_ids[0])
  const cfg = Buffer.from(JSON.stringify(config))
  const cfgName = crypto.createHash('sha256').update(cfg).digest('hex') + '.json'
  fs.writeFileSync(path.join(out, cfgName), cfg)
  fs.writeFileSync(path.join(out, 'manifest.json'), JSON.stringify([{ Config: cfgName, RepoTags: ['legacy/app:v1'], Layers: layers }]))
  fs.writeFileSync(path.join(out, 'repositories'), '{}')
  const tarFile = path.join(dir, 'legacy.tar')
  await run('tar', ['-C', out, '-cf', tarFile, '.'])

  const inp = await openImportInput(tarFile, dir)
  if (inp.kind !== 'image') return t.fail()
  t.is(inp.image.source.type, 'docker-archive')
  t.deepEqual(inp.image.refNames, ['legacy/app:v1'])
  t.is(inp.image.layers.length, 4)
  for (const [i, l] of inp.image.layers.entries()) {
    t.is(l.diffId, config.rootfs.diff_ids[i])
    t.is(await sha(await l.open()), l.diffId!)
  }
  // the same save unpacked into a directory is read the same way (it was a rootfs tree)
  const unpacked = await openImportInput(out, dir)
  if (unpacked.kind !== 'image') return t.fail(`the unpacked docker save is a ${unpacked.kind}`)
  t.like(unpacked.image.source, { type: 'docker-archive', ref: out })
  t.deepEqual(unpacked.image.refNames, ['legacy/app:v1'])
  t.deepEqual(
    unpacked.image.layers.map((l) => [l.digest, l.diffId, l.size]),
    inp.image.layers.map((l) => [l.digest, l.diffId, l.size]),
  )
  for (const l of unpacked.image.layers) t.is(await sha(await l.open()), l.diffId!)
  // a config whose name is not its digest
  fs.writeFileSync(path.join(out, cfgName), Buffer.concat([cfg, Buffer.from(' ')]))
  await t.throwsAsync(openImportInput(out, dir), { code: 'IMAGE_DIGEST_MISMATCH' })
  await run('tar', ['-C', out, '-cf', tarFile, '.'])
  await t.throwsAsync(openImportInput(tarFile, dir), { code: 'IMAGE_DIGEST_MISMATCH' })
})

test('a rootfs tar that ships its own manifest.json is a rootfs; a docker save whose manifest.json is broken is still an error', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(path.join(tree, 'app'), { recursive: true })
  fs.writeFileSync(path.join(tree, 'app', 'a'), 'x\n')
  const tarOf = async (name: string, manifest: string, ...members: string[]) => {
    fs.writeFileSync(path.join(tree, 'manifest.json'), manifest)
    const f = path.join(dir, name)
    await run('tar', ['-C', tree, '-cf', f, 'app', 'manifest.json', ...members])
    return f
  }
  // a web app's manifest, an empty list, a list of something else, not JSON at all
  for (const [i, m] of ['{"name":"app"}', '[]', '[{"name":"x"}]', 'not json'].entries()) {
    const inp = await openImportInput(await tarOf(`rootfs-${i}.tar`, m), dir)
    t.is(inp.kind, 'rootfs-tar', m)
  }
  // the rest of a docker save's shape: its broken manifest.json is reported
  const hex = 'a'.repeat(64)
  fs.mkdirSync(path.join(tree, hex))
  fs.writeFileSync(path.join(tree, hex, 'layer.tar'), '')
  await t.throwsAsync(openImportInput(await tarOf('save.tar', '{"name":"app"}', hex), dir), { code: 'IMAGE_BAD_MANIFEST' })

  // the same rules for a directory (a tree, or a docker save unpacked)
  const tree2 = path.join(dir, 'tree2')
  fs.mkdirSync(path.join(tree2, 'app'), { recursive: true })
  for (const m of ['{"name":"app"}', '[]', '[{"name":"x"}]', 'not json']) {
    fs.writeFileSync(path.join(tree2, 'manifest.json'), m)
    t.is((await openImportInput(tree2, dir)).kind, 'rootfs-dir', m)
  }
  // a manifest.json that is a link out of the tree (an absolute one, as a rootfs may have) is no docker save either
  fs.rmSync(path.join(tree2, 'manifest.json'))
  fs.symlinkSync('/etc/hostname', path.join(tree2, 'manifest.json'))
  t.is((await openImportInput(tree2, dir)).kind, 'rootfs-dir')
  fs.rmSync(path.join(tree2, 'manifest.json'))
  fs.writeFileSync(path.join(tree2, 'manifest.json'), '{"name":"app"}')
  for (const [shape, make] of [
    [
      '<hex>/layer.tar',
      () => {
        fs.mkdirSync(path.join(tree2, hex))
        fs.writeFileSync(path.join(tree2, hex, 'layer.tar'), '')
      },
    ],
    ['repositories', () => fs.writeFileSync(path.join(tree2, 'repositories'), '{}')],
    [
      'blobs/sha256/…',
      () => {
        fs.mkdirSync(path.join(tree2, 'blobs/sha256'), { recursive: true })
        fs.writeFileSync(path.join(tree2, 'blobs/sha256', hex), '')
      },
    ],
  ] as const) {
    fs.rmSync(path.join(tree2, hex), { recursive: true, force: true })
    fs.rmSync(path.join(tree2, 'repositories'), { force: true })
    fs.rmSync(path.join(tree2, 'blobs'), { recursive: true, force: true })
    make()
    await t.throwsAsync(openImportInput(tree2, dir), { code: 'IMAGE_BAD_MANIFEST', message: /manifest\.json/ }, shape)
  }
})

/** The fixture (amd64, `latest`) and an arm64 variant (`arm`) side by side in one layout, each its own index.json entry; `rewrite` edits those entries. */
async function twoImageLayout(dir: string, name: string, rewrite: (amd: any, arm: any) => unknown[]): Promise<{ layout: string; amd64: string; arm64: string }> {
  const layout = path.join(dir, name)
  fs.cpSync(fx.layout, layout, { recursive: true })
  await run('umoci', ['config', '--image', `${layout}:latest`, '--architecture', 'arm64', '--tag', 'arm'])
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const byTag = (tag: string) => index.manifests.find((m: any) => m.annotations['org.opencontainers.image.ref.name'] === tag)
  const amd = byTag('latest')
  const arm = byTag('arm')
  fs.writeFileSync(path.join(layout, 'index.json'), JSON.stringify({ ...index, manifests: rewrite(amd, arm) }))
  return { layout, amd64: amd.digest, arm64: arm.digest }
}

function unnamed(d: any): any {
  const { annotations: _a, ...rest } = d
  return rest
}

test('several images in a layout: INVALID_ARGUMENT without --ref, naming each (digests for unnamed ones); --ref NAME or --ref sha256:… picks one; --platform never chooses between images', async (t) => {
  const dir = localTmp(t)
  // two unnamed images: both listed by digest, either picked by its digest
  const two = await twoImageLayout(dir, 'unnamed', (amd, arm) => [unnamed(amd), unnamed(arm)])
  const e1 = await t.throwsAsync(openImportInput(two.layout, dir), { code: 'INVALID_ARGUMENT' })
  t.true(e1!.message.includes(`unnamed ${two.amd64}`) && e1!.message.includes(`unnamed ${two.arm64}`), e1!.message)
  t.regex(e1!.message, /--ref sha256:/)
  for (const d of [two.amd64, two.arm64]) {
    const inp = await openImportInput(two.layout, dir, { ref: d })
    if (inp.kind !== 'image') return t.fail()
    t.is(inp.image.source.digest, d)
  }
  await t.throwsAsync(openImportInput(two.layout, dir, { ref: 'sha256:' + '0'.repeat(64) }), { code: 'IMAGE_NOT_FOUND', message: /unnamed sha256:/ })
  // two named images of different platforms: the default platform does not pick between them
  const named = await twoImageLayout(dir, 'named', (amd, arm) => [amd, arm])
  const e2 = await t.throwsAsync(openImportInput(named.layout, dir), { code: 'INVALID_ARGUMENT' })
  t.regex(e2!.message, /latest, arm/)
  await t.throwsAsync(openImportInput(named.layout, dir, { platform: parsePlatform('linux/arm64') }), { code: 'INVALID_ARGUMENT' })
  const arm = await openImportInput(named.layout, dir, { ref: 'arm' })
  if (arm.kind !== 'image') return t.fail()
  t.is(arm.image.source.digest, named.arm64)
  t.is(arm.image.source.platform, 'linux/arm64')
  // one named, one unnamed: both listed
  const mixed = await twoImageLayout(dir, 'mixed', (amd, arm) => [amd, unnamed(arm)])
  const e3 = await t.throwsAsync(openImportInput(mixed.layout, dir), { code: 'INVALID_ARGUMENT' })
  t.true(e3!.message.includes('latest') && e3!.message.includes(`unnamed ${mixed.arm64}`), e3!.message)
  const byName = await openImportInput(mixed.layout, dir, { ref: 'latest' })
  if (byName.kind !== 'image') return t.fail()
  t.is(byName.image.source.digest, mixed.amd64)
  // one name listed once per platform is one image: --platform picks within it
  const perPlatform = await twoImageLayout(dir, 'per-platform', (amd, arm) => [
    { ...amd, platform: { os: 'linux', architecture: 'amd64' } },
    { ...arm, platform: { os: 'linux', architecture: 'arm64' }, annotations: { 'org.opencontainers.image.ref.name': 'latest' } },
  ])
  const def = await openImportInput(perPlatform.layout, dir)
  if (def.kind !== 'image') return t.fail()
  t.is(def.image.source.digest, perPlatform.amd64)
  const armOfOne = await openImportInput(perPlatform.layout, dir, { platform: parsePlatform('linux/arm64') })
  if (armOfOne.kind !== 'image') return t.fail()
  t.is(armOfOne.image.source.digest, perPlatform.arm64)
})

/** Stores a copy of manifest `m` of `layout` whose config is changed by `edit`; returns its descriptor. */
function withConfig(layout: string, m: any, edit: (c: any) => void): any {
  const blob = (d: string) => path.join(layout, 'blobs/sha256', d.slice('sha256:'.length))
  const put = (b: Buffer) => {
    const d = 'sha256:' + crypto.createHash('sha256').update(b).digest('hex')
    fs.writeFileSync(blob(d), b)
    return { digest: d, size: b.length }
  }
  const manifest = JSON.parse(fs.readFileSync(blob(m.digest), 'utf8'))
  const config = JSON.parse(fs.readFileSync(blob(manifest.config.digest), 'utf8'))
  edit(config)
  manifest.config = { ...manifest.config, ...put(Buffer.from(JSON.stringify(config))) }
  return { mediaType: m.mediaType, ...put(Buffer.from(JSON.stringify(manifest))) }
}

test('the index entry\'s platform decides: linux/arm/v7 in the index with a config that names no variant is linux/arm/v7; a config naming another variant or architecture is refused', async (t) => {
  const dir = localTmp(t)
  const { layout } = await twoImageLayout(dir, 'arm-variants', (amd) => [amd])
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const amd = index.manifests[0]
  const arm = withConfig(layout, amd, (c) => {
    c.architecture = 'arm'
    delete c.variant
  })
  const armV6 = withConfig(layout, amd, (c) => {
    c.architecture = 'arm'
    c.variant = 'v6'
  })
  const name = { 'org.opencontainers.image.ref.name': 'latest' }
  fs.writeFileSync(
    path.join(layout, 'index.json'),
    JSON.stringify({
      ...index,
      manifests: [
        { ...arm, platform: { os: 'linux', architecture: 'arm', variant: 'v7' }, annotations: name },
        { ...armV6, platform: { os: 'linux', architecture: 'arm', variant: 'v5' }, annotations: name },
        { ...amd, platform: { os: 'linux', architecture: 'riscv64' }, annotations: name },
      ],
    }),
  )
  const v7 = await openImportInput(layout, dir, { platform: parsePlatform('linux/arm/v7') })
  if (v7.kind !== 'image') return t.fail()
  t.is(v7.image.source.digest, arm.digest)
  t.is(v7.image.source.platform, 'linux/arm/v7')
  await t.throwsAsync(openImportInput(layout, dir, { platform: parsePlatform('linux/arm/v5') }), { code: 'IMAGE_PLATFORM_NOT_FOUND', message: /config is for linux\/arm\/v6, not linux\/arm\/v5/ })
  await t.throwsAsync(openImportInput(layout, dir, { platform: parsePlatform('linux/riscv64') }), { code: 'IMAGE_PLATFORM_NOT_FOUND', message: /config is for linux\/amd64/ })
})

test('tar index: sparse members (GNU tar -S, old GNU with extension blocks and PAX 1.0) are skipped correctly and refused by name when asked for', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  // 60 data segments: an old GNU header with extension blocks, a PAX 1.0 map over two blocks
  fs.writeFileSync(path.join(tree, 'many'), '')
  fs.truncateSync(path.join(tree, 'many'), 20 << 20)
  const fd = fs.openSync(path.join(tree, 'many'), 'r+')
  for (let i = 1; i <= 60; i++) fs.writeSync(fd, `x${i}`, i * 300_000)
  fs.closeSync(fd)
  fs.writeFileSync(path.join(tree, 'plain'), 'plain data\n')
  for (const flags of [['--format=gnu'], ['--format=pax', '--sparse-version=1.0']]) {
    const tar = path.join(dir, 'a.tar')
    await run('tar', [...flags, '-S', '-cf', tar, '-C', tree, 'many', 'plain'])
    const idx = await TarIndex.open(tar)
    t.deepEqual([...idx.entries.keys()].sort(), ['many', 'plain'], flags.join(' '))
    t.is(await sha(idx.open(idx.resolve('plain')!)), 'sha256:' + crypto.createHash('sha256').update('plain data\n').digest('hex'))
    t.throws(() => idx.resolve('many'), { code: 'IMAGE_BAD_ARCHIVE', message: /"many" is stored as a sparse file/ })
  }
})
