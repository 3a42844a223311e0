// Every kind of bad input to `strata image import`, through the CLI: each
// exits non-zero with its stable code, and leaves no tag, manifest, blob,
// diffId record, lease or staging file behind. Malicious tars are written
// with Python's tarfile; image layouts are the umoci fixture, copied and
// then broken.
import test from 'ava'
import crypto from 'node:crypto'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { strata } from '../../bin/helpers.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { mountImage } from '../../helpers/image-mount.js'
import { useImageFixtureCluster } from '../../helpers/image-fixture-cluster.js'
import { run, toDockerArchive } from '../../helpers/oci-fixtures.js'

const img = useImageFixtureCluster(test)

interface StoreState {
  blobs: string[]
  manifests: string[]
  tags: string[]
  diffIds: string[]
  leases: string[]
  tmp: string[]
}

async function state(): Promise<StoreState> {
  const names = async (p: string) => (await img.store.fs.readdirAll(p)).entries.map((e) => e.name).sort()
  return {
    blobs: (await img.store.listBlobs()).map((b) => b.digest).sort(),
    manifests: (await img.store.listManifests()).sort(),
    tags: (await img.store.listTags()).map((t) => `${t.name}:${t.tag}`),
    diffIds: await names(`${img.store.root}/diffids/sha256`),
    leases: (await img.store.listLeases()).map((l) => `${l.holder}/${l.digest}`),
    tmp: await names(`${img.store.root}/tmp`),
  }
}

/** Runs `strata image import …`; expects failure with `code` and an unchanged store. */
async function expectFailure(t: import('ava').ExecutionContext, code: string, args: string[]): Promise<string> {
  const before = await state()
  const r = await strata(['image', ...img.ic.cliArgs, 'import', ...args])
  t.not(r.code, 0, `import ${args.join(' ')} should fail\n${r.stdout}${r.stderr}`)
  t.regex(r.stderr, new RegExp(`strata: ${code}: `), `import ${args.join(' ')}: expected ${code}\n${r.stderr}`)
  t.deepEqual(await state(), before, `import ${args.join(' ')} left something behind`)
  return r.stderr
}

/** Writes a tar with Python's tarfile from a list of entries. */
async function pyTar(file: string, entries: Array<{ name: string; type?: 'file' | 'dir' | 'symlink' | 'hardlink'; data?: string; link?: string; paxBytes?: number }>): Promise<string> {
  const script = `
import io, json, sys, tarfile
entries = json.loads(sys.argv[2])
with tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT) as tf:
    for e in entries:
        ti = tarfile.TarInfo(e['name'])
        ti.mtime = 1700000000
        if e.get('paxBytes'): ti.pax_headers = {'comment': 'x' * e['paxBytes']}
        t = e.get('type', 'file')
        if t == 'dir':
            ti.type = tarfile.DIRTYPE; ti.mode = 0o755; tf.addfile(ti)
        elif t == 'symlink':
            ti.type = tarfile.SYMTYPE; ti.linkname = e['link']; tf.addfile(ti)
        elif t == 'hardlink':
            ti.type = tarfile.LNKTYPE; ti.linkname = e['link']; tf.addfile(ti)
        else:
            data = e.get('data', '').encode(); ti.size = len(data); ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
`
  await run('python3', ['-c', script, file, JSON.stringify(entries)])
  return file
}

function copyLayout(dir: string, name: string): string {
  const dest = path.join(dir, name)
  fs.cpSync(img.fx.layout, dest, { recursive: true })
  return dest
}

function blobFile(layout: string, digest: string): string {
  return path.join(layout, 'blobs/sha256', digest.slice('sha256:'.length))
}

function writeBlob(layout: string, data: Buffer): { digest: string; size: number } {
  const digest = 'sha256:' + crypto.createHash('sha256').update(data).digest('hex')
  fs.writeFileSync(blobFile(layout, digest), data)
  return { digest, size: data.length }
}

/** Rewrites the layout's manifest (and its config, when `editConfig` is given) and points index.json at the result. */
function rewrite(layout: string, editManifest: (m: any) => void, editConfig?: (c: any) => void): void {
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const desc = index.manifests[0]
  const m = JSON.parse(fs.readFileSync(blobFile(layout, desc.digest), 'utf8'))
  if (editConfig) {
    const c = JSON.parse(fs.readFileSync(blobFile(layout, m.config.digest), 'utf8'))
    editConfig(c)
    const nc = writeBlob(layout, Buffer.from(JSON.stringify(c)))
    m.config = { ...m.config, ...nc }
  }
  editManifest(m)
  const nm = writeBlob(layout, Buffer.from(JSON.stringify(m)))
  index.manifests = [{ ...desc, ...nm }]
  fs.writeFileSync(path.join(layout, 'index.json'), JSON.stringify(index))
}

/** Adds a layer made of `tarFile` on top of the fixture in a copy of its layout (umoci raw add-layer). */
async function layoutWithLayer(dir: string, name: string, tarFile: string): Promise<string> {
  const layout = copyLayout(dir, name)
  await run('umoci', ['raw', 'add-layer', '--image', `${layout}:latest`, tarFile])
  return layout
}

test.serial('a good import works and sets the baseline', async (t) => {
  // not the fixture: its layers would be reused by diffId and never read by the imports below
  const dir = localTmp(t)
  fs.mkdirSync(path.join(dir, 'etc'))
  fs.writeFileSync(path.join(dir, 'etc/hostname'), 'baseline\n')
  const r = await strata(['image', ...img.ic.cliArgs, 'import', dir, '--name', 'good/base', '--json'])
  t.is(r.code, 0, r.stderr)
  const j = JSON.parse(r.stdout)
  t.is(j.image, 'good/base:latest')
  t.is(j.layersBuilt, 1)
  t.deepEqual((await state()).tags, ['good/base:latest'])
})

test.serial('path traversal, symlink escapes, duplicate entries, bad tar headers: in a rootfs tar and in an image layer', async (t) => {
  const dir = localTmp(t)
  const traversal = await pyTar(path.join(dir, 'traversal.tar'), [{ name: 'ok.txt', data: 'ok' }, { name: '../evil.txt', data: 'evil' }])
  const escape = await pyTar(path.join(dir, 'escape.tar'), [
    { name: 'esc', type: 'symlink', link: '../../../../tmp' },
    { name: 'esc/evil.txt', data: 'evil' },
  ])
  const dup = await pyTar(path.join(dir, 'dup.tar'), [
    { name: 'a.txt', data: 'one' },
    { name: 'a.txt', data: 'two' },
  ])
  const absolute = await pyTar(path.join(dir, 'abs.tar'), [{ name: 'a', type: 'dir' }, { name: 'a/x', type: 'hardlink', link: '../../etc/passwd' }])
  // a checksum that does not match its header
  const badHeader = path.join(dir, 'bad-header.tar')
  const buf = fs.readFileSync(await pyTar(path.join(dir, 'ok.tar'), [{ name: 'a.txt', data: 'x' }, { name: 'b.txt', data: 'y' }]))
  const second = buf.indexOf(Buffer.from('b.txt\0'))
  buf.write('77777', second + 148, 'latin1')
  fs.writeFileSync(badHeader, buf)

  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [traversal, '--name', 'bad/traversal'])
  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [escape, '--name', 'bad/escape'])
  await expectFailure(t, 'IMAGE_DUPLICATE_ENTRY', [dup, '--name', 'bad/dup'])
  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [absolute, '--name', 'bad/abs'])
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [badHeader, '--name', 'bad/header'])
  // an oversized PAX header (8 MiB of "comment")
  const oversized = await pyTar(path.join(dir, 'oversized.tar'), [{ name: 'a.txt', data: 'x', paxBytes: 8 << 20 }])
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [oversized, '--name', 'bad/oversized'])
  // the same as the fourth layer of an image: the three good layers built before are taken back
  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [await layoutWithLayer(dir, 'l-traversal', traversal), '--name', 'bad/layer-traversal'])
  await expectFailure(t, 'IMAGE_DUPLICATE_ENTRY', [await layoutWithLayer(dir, 'l-dup', dup), '--name', 'bad/layer-dup'])
})

test.serial('absolute names are refused like ..; a hard link to a lower layer\'s file needs --squash, which imports it', async (t) => {
  const dir = localTmp(t)
  const absolute = await pyTar(path.join(dir, 'absolute.tar'), [{ name: 'ok.txt', data: 'ok' }, { name: '/abs.txt', data: 'was stored as abs.txt' }])
  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [absolute, '--name', 'bad/absolute'])
  await expectFailure(t, 'IMAGE_UNSAFE_PATH', [await layoutWithLayer(dir, 'l-absolute', absolute), '--name', 'bad/layer-absolute'])

  // the fourth layer links to etc/group of the first (docker and containerd accept this)
  const link = await pyTar(path.join(dir, 'lower-link.tar'), [{ name: 'etc', type: 'dir' }, { name: 'etc/group-link', type: 'hardlink', link: 'etc/group' }])
  const layout = await layoutWithLayer(dir, 'l-lower-link', link)
  const before = await state()
  const r = await strata(['image', ...img.ic.cliArgs, 'import', layout, '--name', 'bad/lower-link'])
  t.is(r.code, 1, r.stderr)
  t.regex(r.stderr, /strata: IMAGE_BAD_ARCHIVE: .*"etc\/group-link": hard link target "etc\/group" .*--squash/)
  t.deepEqual(await state(), before)
  const ok = await strata(['image', ...img.ic.cliArgs, 'import', layout, '--name', 'good/lower-link', '--squash', '--json'])
  t.is(ok.code, 0, ok.stderr)
  const { manifest } = await img.store.resolve('good/lower-link')
  t.is(manifest.layers.length, 1)
  const root = await mountImage(t, img.store, manifest, localTmp(t, 'strata-mnt-'))
  t.is(fs.readFileSync(path.join(root, 'etc/group-link'), 'utf8'), fs.readFileSync(path.join(root, 'etc/group'), 'utf8'))
  t.is(fs.lstatSync(path.join(root, 'etc/group-link')).ino, fs.lstatSync(path.join(root, 'etc/group')).ino)
  await img.store.removeTag('good/lower-link', 'latest')
})

test.serial('malformed and truncated archives', async (t) => {
  const dir = localTmp(t)
  const garbage = path.join(dir, 'garbage.tar')
  fs.writeFileSync(garbage, crypto.randomBytes(4096))
  const docker = await toDockerArchive(img.fx, path.join(dir, 'docker.tar'))
  const size = fs.statSync(docker).size
  const truncated = path.join(dir, 'truncated.tar')
  fs.writeFileSync(truncated, fs.readFileSync(docker).subarray(0, Math.floor(size * 0.6)))
  // cut exactly at a record boundary: only the missing end-of-archive marker tells
  const cut = path.join(dir, 'cut.tar')
  fs.writeFileSync(cut, fs.readFileSync(docker).subarray(0, 1024))
  const gz = path.join(dir, 'truncated.tar.gz')
  await run('sh', ['-c', `gzip -c ${docker} | head -c 20000 > ${gz}`])
  const badJson = copyLayout(dir, 'bad-json')
  fs.writeFileSync(path.join(badJson, 'index.json'), '{"schemaVersion":2,"manifests":[')
  const tiny = path.join(dir, 'tiny.tar')
  fs.writeFileSync(tiny, 'not a tar')

  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [garbage, '--name', 'bad/garbage'])
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [truncated, '--name', 'bad/truncated'])
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [cut, '--name', 'bad/cut'])
  // the message names the file given, not the decompressed copy
  t.true((await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [gz, '--name', 'bad/gz'])).includes(`${gz}: `))
  const rootfsTar = await pyTar(path.join(dir, 'rootfs.tar'), [{ name: 'big.bin', data: crypto.randomBytes(60_000).toString('hex') }])
  const rootfsGz = path.join(dir, 'rootfs-truncated.tar.gz')
  await run('sh', ['-c', `gzip -c ${rootfsTar} | head -c 20000 > ${rootfsGz}`])
  t.true((await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [rootfsGz, '--name', 'bad/rootfs-gz'])).includes(`${rootfsGz}: `))
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [tiny, '--name', 'bad/tiny'])
  await expectFailure(t, 'IMAGE_BAD_MANIFEST', [badJson, '--name', 'bad/json'])
  await expectFailure(t, 'NOT_FOUND', [path.join(dir, 'nope.tar'), '--name', 'bad/nope'])
  // a layer tar cut short before its end blocks in an image whose digests all match (umoci insert writes such
  // layers): the message names the layer (it said only 'tar: Unexpected end of data'), with and without --squash
  fs.writeFileSync(path.join(dir, 'f'), 'hello\n')
  await run('tar', ['--numeric-owner', '-cf', path.join(dir, 'whole.tar'), '-C', dir, 'f'])
  const shortTar = path.join(dir, 'short-layer.tar')
  fs.writeFileSync(shortTar, fs.readFileSync(path.join(dir, 'whole.tar')).subarray(0, 1030))
  const shortLayout = await layoutWithLayer(dir, 'short-layer', shortTar)
  for (const extra of [[], ['--squash']]) {
    t.regex(await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [shortLayout, '--name', 'bad/short-layer', ...extra]), /strata: IMAGE_BAD_ARCHIVE: (apply )?layer \d+\/\d+ [0-9a-f]{12}: tar: /, extra.join(' '))
  }
})

test.serial('a sparse member of 1 TiB (a tar of a few KiB): the default build and --squash keep its hole as a hole (a layer of a few KiB); --compress, which hands mkfs.erofs the unpacked tree, refuses it naming the 1 GiB hole cap before any zeros are written', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'small'), 'small\n')
  fs.writeFileSync(path.join(tree, 'big'), '')
  fs.truncateSync(path.join(tree, 'big'), 2 ** 40)
  const fd = fs.openSync(path.join(tree, 'big'), 'r+')
  fs.writeSync(fd, 'end', 2 ** 40 - 3)
  fs.closeSync(fd)
  const tar = path.join(dir, 'sparse.tar')
  await run('tar', ['--format=pax', '-S', '--numeric-owner', '-cf', tar, '-C', tree, 'small', 'big'])
  fs.rmSync(tree, { recursive: true })
  t.true(fs.statSync(tar).size < 64 << 10)
  const layout = await layoutWithLayer(dir, 'l-sparse', tar)
  const cap = /strata: IMAGE_BAD_ARCHIVE: .*"big": sparse file: its holes \(\d+ bytes\) exceed the cap of 1073741824 hole bytes per layer \(1 GiB\)/
  t.regex(await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [layout, '--name', 'bad/sparse', '--compress', 'lz4']), cap)
  // (--squash was refused too: its unpack wrote holes as zeros, so it kept the cap)
  for (const [input, name, extra] of [[layout, 'ok/sparse', []], [layout, 'ok/sparse-squashed', ['--squash']], [tar, 'ok/sparse-rootfs', []]] as const) {
    const r = await strata(['image', ...img.ic.cliArgs, 'import', input, '--name', name, '--json', ...extra])
    t.is(r.code, 0, r.stderr)
    const { manifest } = await img.store.resolve(name)
    if (extra.length) t.is(manifest.layers.length, 1)
    for (const l of manifest.layers) t.true(l.size < 16 << 20, `${name}: a layer of ${l.size} bytes`)
    const root = await mountImage(t, img.store, manifest, localTmp(t, 'strata-mnt-'))
    const big = path.join(root, 'big')
    t.is(fs.statSync(big).size, 2 ** 40)
    const at = (pos: number, n: number) => {
      const b = Buffer.alloc(n)
      const f = fs.openSync(big, 'r')
      try {
        fs.readSync(f, b, 0, n, pos)
      } finally {
        fs.closeSync(f)
      }
      return b.toString('latin1')
    }
    t.is(at(2 ** 40 - 3, 3), 'end')
    t.is(at(0, 4), '\0\0\0\0')
    t.is(at(2 ** 39, 4), '\0\0\0\0')
    t.is(fs.readFileSync(path.join(root, 'small'), 'utf8'), 'small\n')
    await img.store.removeTag(name, 'latest')
  }
  // the layout's fixture layers go again: the tests below import tampered copies of them, which a
  // stored layer of the same diff_id would stand in for unread
  await img.store.gc()
})

test.serial('a sparse member whose data is spread too thinly to keep its holes (a byte every 512 MiB of 8 TiB) is IMAGE_BAD_ARCHIVE naming the 1 GiB cap, before it is stored', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(tree, 'thin'), '')
  fs.truncateSync(path.join(tree, 'thin'), 2 ** 43)
  const fd = fs.openSync(path.join(tree, 'thin'), 'r+')
  for (let pos = 0; pos < 2 ** 43; pos += 2 ** 29) fs.writeSync(fd, 'x', pos)
  fs.closeSync(fd)
  const tar = path.join(dir, 'thin.tar')
  await run('tar', ['--format=pax', '-S', '--numeric-owner', '-cf', tar, '-C', tree, 'thin'])
  fs.rmSync(tree, { recursive: true })
  const err = await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [tar, '--name', 'bad/thin'])
  t.regex(err, /"thin": sparse file: storing it takes \d+ bytes of zeros and block map beyond its data, over the cap of 1073741824 bytes per layer \(1 GiB\)/)
})

test.serial('an OCI layout (directory, tar, tar.gz) with oci-layout and blobs/ but no index.json, or index.json and blobs/ but no oci-layout, is IMAGE_BAD_ARCHIVE naming what is missing, not a rootfs; a docker save whose manifest.json is broken is IMAGE_BAD_MANIFEST', async (t) => {
  const dir = localTmp(t)
  const noIndex = copyLayout(dir, 'no-index')
  fs.rmSync(path.join(noIndex, 'index.json'))
  const tar = path.join(dir, 'no-index.tar')
  await run('tar', ['-C', noIndex, '-cf', tar, '.'])
  // members named without ./ (as skopeo and podman write them): the tar does not begin like a rootfs
  const bare = path.join(dir, 'no-index-bare.tar')
  await run('tar', ['-C', noIndex, '-cf', bare, 'oci-layout', 'blobs'])
  const gz = path.join(dir, 'no-index.tar.gz')
  await run('sh', ['-c', `gzip -c ${tar} > ${gz}`])
  for (const [input, named] of [[noIndex, true], [noIndex, false], [tar, true], [bare, true], [bare, false], [gz, true]] as const) {
    const err = await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [input, ...(named ? ['--name', 'bad/no-index'] : [])])
    t.regex(err, /has oci-layout and blobs\/ but no index\.json/, `${input}: ${err}`)
  }

  // the other way round: index.json and blobs/sha256/ without oci-layout
  const noMarker = copyLayout(dir, 'no-marker')
  fs.rmSync(path.join(noMarker, 'oci-layout'))
  const noMarkerTar = path.join(dir, 'no-marker.tar')
  await run('tar', ['-C', noMarker, '-cf', noMarkerTar, '.'])
  const noMarkerBare = path.join(dir, 'no-marker-bare.tar')
  await run('tar', ['-C', noMarker, '-cf', noMarkerBare, 'index.json', 'blobs'])
  for (const [input, named] of [[noMarker, true], [noMarker, false], [noMarkerTar, true], [noMarkerBare, false]] as const) {
    const err = await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [input, ...(named ? ['--name', 'bad/no-marker'] : [])])
    t.regex(err, /has index\.json and blobs\/sha256\/ but no oci-layout/, `${input}: ${err}`)
  }

  // docker save (legacy: manifest.json, <id>/layer.tar) with manifest.json broken in three ways
  const docker = await toDockerArchive(img.fx, path.join(dir, 'docker.tar'))
  const script = `
import sys, tarfile, io
with tarfile.open(sys.argv[1]) as src, tarfile.open(sys.argv[2], 'w') as dst:
    for m in src.getmembers():
        if m.name == 'manifest.json':
            data = sys.argv[3].encode(); m.size = len(data); dst.addfile(m, io.BytesIO(data))
        else:
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
`
  for (const [i, manifest] of ['[{"Config": "x.json", "Layers": [', '{}', '[{"Config": 5, "Layers": "no"}]'].entries()) {
    const broken = path.join(dir, `docker-broken-${i}.tar`)
    await run('python3', ['-c', script, docker, broken, manifest])
    for (const named of [true, false]) {
      const err = await expectFailure(t, 'IMAGE_BAD_MANIFEST', [broken, ...(named ? ['--name', 'bad/docker-manifest'] : [])])
      t.regex(err, /manifest\.json/, err)
    }
  }
})

test.serial('--ref and --platform with a rootfs directory or tarball are usage errors (exit 2, nothing stored)', async (t) => {
  const dir = localTmp(t)
  const root = path.join(dir, 'rootfs')
  fs.mkdirSync(path.join(root, 'etc'), { recursive: true })
  fs.writeFileSync(path.join(root, 'etc/hostname'), 'rootfs\n')
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['-C', root, '-cf', tar, '.'])
  const gz = path.join(dir, 'rootfs.tar.gz')
  await run('sh', ['-c', `gzip -c ${tar} > ${gz}`])
  for (const input of [root, tar, gz]) {
    for (const opts of [['--ref', 'x:1'], ['--platform', 'linux/amd64'], ['--platform', 'linux/arm64', '--ref', 'sha256:' + '0'.repeat(64)]]) {
      const before = await state()
      const r = await strata(['image', ...img.ic.cliArgs, 'import', input, '--name', 'bad/rootfs-opts', ...opts])
      t.is(r.code, 2, `${input} ${opts.join(' ')}: ${r.stderr}`)
      t.regex(r.stderr, /^strata: usage: --(ref|platform).* an OCI layout; .* is a rootfs (directory|tarball)/m, r.stderr)
      t.deepEqual(await state(), before)
    }
  }
  // (with an image they choose: 'wrong platform' below)
})

test.serial('digest and size mismatches, unknown media types, missing blobs, wrong platform', async (t) => {
  const dir = localTmp(t)
  // a layer blob with one byte flipped (same size): caught while streaming, after other layers were built
  const tampered = copyLayout(dir, 'tampered')
  const top = img.fx.layers[2]!
  const bytes = fs.readFileSync(blobFile(tampered, top.digest))
  bytes[Math.floor(bytes.length / 2)]! ^= 0xff
  fs.writeFileSync(blobFile(tampered, top.digest), bytes)
  // one byte more: caught before anything is read
  const longer = copyLayout(dir, 'longer')
  fs.appendFileSync(blobFile(longer, img.fx.layers[0]!.digest), 'x')
  // a diff_id that is not the layer's
  const wrongDiff = copyLayout(dir, 'wrong-diffid')
  rewrite(wrongDiff, () => undefined, (c) => {
    c.rootfs.diff_ids[1] = 'sha256:' + '0'.repeat(64)
  })
  // a tampered manifest (index.json still has the old digest)
  const badManifest = copyLayout(dir, 'bad-manifest')
  {
    const index = JSON.parse(fs.readFileSync(path.join(badManifest, 'index.json'), 'utf8'))
    const f = blobFile(badManifest, index.manifests[0].digest)
    fs.writeFileSync(f, fs.readFileSync(f, 'utf8').replace('"schemaVersion":2', '"schemaVersion":3'))
  }
  const unknown = copyLayout(dir, 'unknown-type')
  rewrite(unknown, (m) => {
    m.layers[1].mediaType = 'application/vnd.example.layer.v1.squashfs'
  })
  // another digest algorithm: a valid document this reader cannot check; a malformed digest: a bad document
  const sha512 = copyLayout(dir, 'sha512-layer')
  rewrite(sha512, (m) => {
    m.layers[1].digest = 'sha512:' + 'ab'.repeat(64)
  })
  const sha512Diff = copyLayout(dir, 'sha512-diffid')
  rewrite(sha512Diff, () => undefined, (c) => {
    c.rootfs.diff_ids[0] = 'sha512:' + 'cd'.repeat(64)
  })
  const malformed = copyLayout(dir, 'malformed-digest')
  rewrite(malformed, (m) => {
    m.layers[1].digest = 'sha256:xyz'
  })
  const missing = copyLayout(dir, 'missing-blob')
  fs.rmSync(blobFile(missing, img.fx.layers[1]!.digest))
  const missingConfig = copyLayout(dir, 'missing-config')
  fs.rmSync(blobFile(missingConfig, img.fx.configDigest))

  await expectFailure(t, 'IMAGE_DIGEST_MISMATCH', [tampered, '--name', 'bad/tampered'])
  await expectFailure(t, 'IMAGE_SIZE_MISMATCH', [longer, '--name', 'bad/longer'])
  await expectFailure(t, 'IMAGE_DIGEST_MISMATCH', [wrongDiff, '--name', 'bad/diffid'])
  await expectFailure(t, 'IMAGE_DIGEST_MISMATCH', [badManifest, '--name', 'bad/manifest'])
  await expectFailure(t, 'IMAGE_UNSUPPORTED_MEDIA_TYPE', [unknown, '--name', 'bad/type'])
  await expectFailure(t, 'IMAGE_UNSUPPORTED_MEDIA_TYPE', [sha512, '--name', 'bad/sha512'])
  await expectFailure(t, 'IMAGE_UNSUPPORTED_MEDIA_TYPE', [sha512Diff, '--name', 'bad/sha512-diffid'])
  await expectFailure(t, 'IMAGE_BAD_MANIFEST', [malformed, '--name', 'bad/malformed-digest'])
  await expectFailure(t, 'IMAGE_BLOB_MISSING', [missing, '--name', 'bad/missing'])
  await expectFailure(t, 'IMAGE_BLOB_MISSING', [missingConfig, '--name', 'bad/missing-config'])
  await expectFailure(t, 'IMAGE_PLATFORM_NOT_FOUND', [img.fx.layout, '--name', 'bad/platform', '--platform', 'linux/arm64'])
  await expectFailure(t, 'IMAGE_INVALID_REFERENCE', [img.fx.layout, '--name', 'Bad Name'])
  await expectFailure(t, 'IMAGE_INVALID_REFERENCE', [img.fx.layout])
  // a usage error exits 2
  const r = await strata(['image', ...img.ic.cliArgs, 'import', img.fx.layout, '--name', 'x', '--kind', 'nope'])
  t.is(r.code, 2)
})

test.serial('an interrupted import (SIGINT) cleans up: no tag, manifest, blob or staging file, empty work dir', async (t) => {
  const dir = localTmp(t)
  const root = path.join(dir, 'big')
  fs.mkdirSync(root)
  // incompressible data, enough to take a few seconds to unpack, build and store
  for (let i = 0; i < 8; i++) fs.writeFileSync(path.join(root, `f${i}.bin`), crypto.randomBytes(16 << 20))
  const tar = path.join(dir, 'big.tar')
  await run('tar', ['-C', root, '-cf', tar, '.'])
  const work = path.join(dir, 'work')
  fs.mkdirSync(work)
  const before = await state()
  const { spawn } = await import('node:child_process')
  const { STRATA } = await import('../../bin/helpers.js')
  const child = spawn(process.execPath, [STRATA, 'image', ...img.ic.cliArgs, 'import', tar, '--name', 'bad/interrupted', '--work-dir', work], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  // interrupt once the import is under way (its private work dir exists)
  for (let i = 0; i < 600 && !fs.readdirSync(work).some((f) => f.startsWith('strata-import-')); i++) await new Promise((r) => setTimeout(r, 50))
  await new Promise((r) => setTimeout(r, 300))
  child.kill('SIGINT')
  const code = await exited
  t.is(code, 130, stderr)
  t.regex(stderr, /strata: CANCELLED: image import interrupted by SIGINT/)
  t.deepEqual(fs.readdirSync(work), [])
  t.deepEqual(await state(), before)
})

test.serial('an interrupted export (SIGTERM while a layer is copied out) exits 143 with CANCELLED and leaves no output or work files', async (t) => {
  const dir = localTmp(t)
  const root = path.join(dir, 'big')
  fs.mkdirSync(root)
  for (let i = 0; i < 8; i++) fs.writeFileSync(path.join(root, `f${i}.bin`), crypto.randomBytes(16 << 20))
  const imported = await strata(['image', ...img.ic.cliArgs, 'import', root, '--name', 'bad/export-interrupted'])
  t.is(imported.code, 0, imported.stderr)
  const work = path.join(dir, 'work')
  fs.mkdirSync(work)
  const out = path.join(dir, 'out.tar')
  const { spawn } = await import('node:child_process')
  const { STRATA } = await import('../../bin/helpers.js')
  const child = spawn(process.execPath, [STRATA, 'image', ...img.ic.cliArgs, 'export', 'bad/export-interrupted', out, '--work-dir', work], { stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  // interrupt while the first layer is copied out of the DFS (its local copy exists)
  const copying = () => fs.readdirSync(work).some((d) => d.startsWith('strata-export-') && fs.existsSync(path.join(work, d, '0.erofs')))
  for (let i = 0; i < 600 && !copying(); i++) await new Promise((r) => setTimeout(r, 20))
  child.kill('SIGTERM')
  const code = await exited
  t.is(code, 143, stderr)
  t.regex(stderr, /strata: CANCELLED: image export interrupted by SIGTERM/)
  t.deepEqual(fs.readdirSync(work), [])
  t.false(fs.existsSync(out))
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.includes('out.tar')), [])
  const rm = await strata(['image', ...img.ic.cliArgs, 'rm', 'bad/export-interrupted'])
  t.is(rm.code, 0, rm.stderr)
})

test.serial('a gzip rootfs tarball smaller than one tar block imports', async (t) => {
  const dir = localTmp(t)
  fs.mkdirSync(path.join(dir, 'tree'))
  fs.writeFileSync(path.join(dir, 'tree/f'), 'tiny\n')
  await run('tar', ['-C', path.join(dir, 'tree'), '-czf', path.join(dir, 'tiny.tar.gz'), '.'])
  t.true(fs.statSync(path.join(dir, 'tiny.tar.gz')).size < 512)
  const r = await strata(['image', ...img.ic.cliArgs, 'import', path.join(dir, 'tiny.tar.gz'), '--name', 'tiny/gz', '--json'])
  t.is(r.code, 0, r.stderr)
  t.is(JSON.parse(r.stdout).image, 'tiny/gz:latest')
  fs.writeFileSync(path.join(dir, 'short.tar'), 'not a tar')
  await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [path.join(dir, 'short.tar'), '--name', 'short/x'])
})

test.serial('an empty path, and work dirs that cannot be made (a file, /proc, a read-only mount), fail at once with their codes; a symlink to a rootfs directory imports the directory', async (t) => {
  const dir = localTmp(t)
  const tree = path.join(dir, 'tree')
  fs.mkdirSync(path.join(tree, 'etc'), { recursive: true })
  fs.writeFileSync(path.join(tree, 'etc', 'hello'), 'hi\n')
  // path.resolve('') is the working directory: it must not be imported
  await expectFailure(t, 'INVALID_ARGUMENT', ['', '--name', 'bad/empty'])
  const x = await strata(['image', ...img.ic.cliArgs, 'export', 'tiny/gz', ''])
  t.is(x.code, 1)
  t.regex(x.stderr, /^strata: INVALID_ARGUMENT: the archive's file name is empty/m)
  const file = path.join(dir, 'a-file')
  fs.writeFileSync(file, 'x')
  t.regex(await expectFailure(t, 'INVALID_ARGUMENT', [tree, '--name', 'bad/wd', '--work-dir', file]), /exists and is not a directory/)
  // Node's own recursive mkdir never returns here
  t.regex(await expectFailure(t, 'INVALID_ARGUMENT', [tree, '--name', 'bad/wd', '--work-dir', '/proc/strata-nope/x']), /takes no new entries/)
  const ro = path.join(dir, 'ro')
  fs.mkdirSync(ro)
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=1m', 'tmpfs', ro])
  t.teardown(() => execFileSync('umount', ['-l', ro]))
  t.regex(await expectFailure(t, 'PERMISSION_DENIED', [tree, '--name', 'bad/wd', '--work-dir', path.join(ro, 'wd')]), /read-only/i)
  const link = path.join(dir, 'rootlink')
  fs.symlinkSync(tree, link)
  const r = await strata(['image', ...img.ic.cliArgs, 'import', link, '--name', 'ok/link', '--json'])
  t.is(r.code, 0, r.stderr)
  t.is((JSON.parse(r.stdout) as { source: { ref: string } }).source.ref, link)
  t.is((await strata(['image', ...img.ic.cliArgs, 'rm', 'ok/link'])).code, 0)
})

test.serial('a registry on a port Node\'s fetch blocks (6000): a clear error, not "bad port"', async (t) => {
  const r = await strata(['image', ...img.ic.cliArgs, 'push', 'tiny/gz', 'docker://127.0.0.1:6000/x/y:1', '--insecure'])
  t.is(r.code, 1)
  t.regex(r.stderr, /^strata: IMAGE_REMOTE_ERROR: .*the port is one the Fetch standard blocks/m)
})

test.serial('a docker:// URL with a port out of range is IMAGE_INVALID_REFERENCE for pull and push, before the cluster or the network is used', async (t) => {
  // no cluster at this address: a command that got as far as the cluster would fail otherwise
  for (const args of [
    ['pull', 'docker://127.0.0.1:99999/x'],
    ['push', 'tiny/gz', 'docker://127.0.0.1:99999/x'],
    ['pull', 'docker://localhost:0/x:1'],
  ]) {
    const r = await strata(['image', '--mgmtd-address', '127.0.0.1:1', ...args])
    t.is(r.code, 1, args.join(' '))
    t.regex(r.stderr, /^strata: IMAGE_INVALID_REFERENCE: .*port [0-9]+ is out of range/m, args.join(' '))
  }
})

test.serial('push and pull: an option of the other back end (s3 flags with docker://, docker flags and --platform with s3://) is a usage error, before the cluster is used', async (t) => {
  for (const [args, flags] of [
    [['pull', 's3://bucket/app:v1', '--platform', 'linux/arm64'], '--platform applies to docker://'],
    [['pull', 's3://bucket/app:v1', '--insecure', '--username', 'u'], '--insecure, --username apply to docker://'],
    [['push', 'app:v1', 's3://bucket/x', '--password', 'p'], '--password applies to docker://'],
    [['push', 'app:v1', 'docker://localhost:5000/app', '--part-size', '5M', '--force-path-style'], '--force-path-style, --part-size apply to s3://'],
    [['pull', 'docker://localhost:5000/app:v1', '--endpoint', 'http://127.0.0.1:9', '--region', 'x'], '--endpoint, --region apply to s3://'],
    [['pull', 'docker://localhost:5000/app:v1', '--prefix', 'x'], '--prefix applies to s3://'],
  ] as const) {
    const r = await strata(['image', '--mgmtd-address', '127.0.0.1:1', ...args])
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
    t.true(r.stderr.startsWith(`strata: usage: ${flags} URLs only`), r.stderr)
  }
})

test.serial('export refuses a directory or a missing directory as OUT, before any work; compose names a part that adds nothing', async (t) => {
  const dir = localTmp(t)
  const x1 = await strata(['image', ...img.ic.cliArgs, 'export', 'tiny/gz', dir])
  t.is(x1.code, 1)
  t.regex(x1.stderr, /^strata: INVALID_ARGUMENT: .* is a directory/m)
  const missing = path.join(dir, 'no-such-dir', 'x.tar')
  const x2 = await strata(['image', ...img.ic.cliArgs, 'export', 'tiny/gz', missing])
  t.is(x2.code, 1)
  t.regex(x2.stderr, /^strata: NOT_FOUND: /m)
  t.false(fs.existsSync(path.dirname(missing)))
  t.deepEqual(fs.readdirSync(dir), [])
  const c = await strata(['image', ...img.ic.cliArgs, 'compose', 'tiny/twice', '--base', 'tiny/gz', '--toolkit', 'tiny/gz'])
  t.is(c.code, 1)
  t.regex(c.stderr, /^strata: INVALID_ARGUMENT: tiny\/gz:latest adds no layers to the images before it/m)
  // --base and --workspace take one image: a second one was dropped in silence (the last won), unlike --toolkit's
  for (const flag of ['--base', '--workspace']) {
    const twice = await strata(['image', ...img.ic.cliArgs, 'compose', 'tiny/twice', ...(flag === '--base' ? [] : ['--base', 'tiny/gz']), flag, 'tiny/gz', flag, 'tiny/other'])
    t.is(twice.code, 2, twice.stderr)
    t.regex(twice.stderr, new RegExp(`^strata: usage: .*${flag} is given once \\("tiny/gz", then "tiny/other"\\); more parts stack with --toolkit`), flag)
  }
})

test.serial('a containers/image dir: copy (skopeo copy … dir:, podman save --format docker-dir) is IMAGE_BAD_ARCHIVE saying what it is, not built as a rootfs of blob files; a rootfs with its own /version file stays a rootfs', async (t) => {
  const dir = localTmp(t)
  for (const format of ['v2s2', 'oci']) {
    const copy = path.join(dir, `dir-${format}`)
    await run('skopeo', ['copy', '--quiet', '--format', format, `oci:${img.fx.ref}`, `dir:${copy}`])
    t.regex(fs.readFileSync(path.join(copy, 'version'), 'utf8'), /^Directory Transport Version: /)
    for (const named of [true, false]) {
      const err = await expectFailure(t, 'IMAGE_BAD_ARCHIVE', [copy, ...(named ? ['--name', 'bad/dir-copy'] : [])])
      t.regex(err, /is a containers\/image dir: copy .*\(skopeo copy dir:/, err)
    }
  }
  // a tree that happens to hold /version and /manifest.json is a tree
  const root = path.join(dir, 'rootfs')
  fs.mkdirSync(root)
  fs.writeFileSync(path.join(root, 'version'), '1.2.3\n')
  fs.writeFileSync(path.join(root, 'manifest.json'), '{"name":"web-app"}\n')
  const r = await strata(['image', ...img.ic.cliArgs, 'import', root, '--name', 'ok/rootfs-version', '--json'])
  t.is(r.code, 0, r.stderr)
  t.is(JSON.parse(r.stdout).source.type, 'rootfs')
  t.is((await strata(['image', ...img.ic.cliArgs, 'rm', 'ok/rootfs-version'])).code, 0)
})
