// `strata image compose`: base + workspace + toolkits from stored images,
// without copying a byte (the blob count does not change), kinds re-marked,
// configs overlaid, images built FROM the base contributing only their own
// layers; the composed image mounts as the expected tree and exports with
// its merged config.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { mergeConfigs } from '../../../sandbox/image/compose.js'
import { importPath } from '../../../sandbox/image/oci/import.js'
import { emptyConfig } from '../../../sandbox/image/types.js'
import { ok, strata } from '../../bin/helpers.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { useImageFixtureCluster } from '../../helpers/image-fixture-cluster.js'
import { mountImage } from '../../helpers/image-mount.js'
import { run } from '../../helpers/oci-fixtures.js'

const img = useImageFixtureCluster(test)

/** A one-layer OCI layout made by umoci: `files` (path → content) and config flags. */
async function umociImage(dir: string, name: string, files: Record<string, string>, config: string[]): Promise<string> {
  const layout = path.join(dir, name)
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:latest`])
  const bundle = path.join(dir, `${name}-bundle`)
  await run('umoci', ['unpack', '--image', `${layout}:latest`, bundle])
  for (const [p, content] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(bundle, 'rootfs', p)), { recursive: true })
    fs.writeFileSync(path.join(bundle, 'rootfs', p), content)
  }
  await run('umoci', ['repack', '--image', `${layout}:latest`, bundle])
  if (config.length) await run('umoci', ['config', '--image', `${layout}:latest`, ...config])
  return layout
}

test('mergeConfigs: env by key (later wins), labels merged, the last entrypoint/cmd/workdir/user that is set', (t) => {
  const base = { ...emptyConfig(), env: ['PATH=/usr/bin', 'LANG=C'], cmd: ['sh'], workdir: '/', user: 'root', labels: { a: '1', b: '1' } }
  const ws = { ...emptyConfig(), env: ['LANG=C.UTF-8', 'REPO=/work'], workdir: '/work', labels: { b: '2' } }
  const tk = { ...emptyConfig(), env: ['PATH=/opt/tk/bin:/usr/bin'], entrypoint: ['/opt/tk/run'], labels: { c: '3' } }
  t.deepEqual(mergeConfigs(mergeConfigs(base, ws), tk), {
    env: ['PATH=/opt/tk/bin:/usr/bin', 'LANG=C.UTF-8', 'REPO=/work'],
    entrypoint: ['/opt/tk/run'],
    cmd: ['sh'],
    workdir: '/work',
    user: 'root',
    labels: { a: '1', b: '2', c: '3' },
  })
})

test.serial('compose base + workspace + toolkits: no data copied, kinds re-marked, config overlaid, tree stacked', async (t) => {
  const dir = localTmp(t)
  const ws = await umociImage(dir, 'ws', { 'work/repo/README': 'the task repo\n', 'etc/passwd': 'workspace passwd\n' }, [
    '--config.env=REPO=/work/repo',
    '--config.env=LANG=C.UTF-8',
    '--config.workingdir=/work/repo',
    '--config.label=task=42',
  ])
  const tk = await umociImage(dir, 'tk', { 'opt/tk/run': '#!/bin/sh\n' }, ['--config.entrypoint=/opt/tk/run', '--config.env=TK=1', '--config.label=harness=v3'])
  const tk2 = await umociImage(dir, 'tk2', { 'opt/tk2/tool': 'tool 2\n' }, ['--config.cmd=--verbose'])
  // a toolkit built FROM the base image: its own layer sits on top of the base's three
  const bundle = path.join(dir, 'fromBase')
  await run('umoci', ['unpack', '--image', img.fx.ref, bundle])
  fs.mkdirSync(path.join(bundle, 'rootfs/opt/extra'), { recursive: true })
  fs.writeFileSync(path.join(bundle, 'rootfs/opt/extra/x'), 'extra\n')
  await run('umoci', ['repack', '--image', `${img.fx.layout}:with-extra`, bundle])

  await importPath(img.store, img.fx.layout, { name: 'env/base', ref: 'latest', workDir: dir })
  await importPath(img.store, ws, { name: 'env/ws', kind: 'workspace', workDir: dir })
  await importPath(img.store, tk, { name: 'env/tk', kind: 'toolkit', workDir: dir })
  await importPath(img.store, tk2, { name: 'env/tk2', kind: 'toolkit', workDir: dir })
  await importPath(img.store, img.fx.layout, { name: 'env/extra', ref: 'with-extra', workDir: dir })
  const blobs = (await img.store.listBlobs()).length
  t.is(blobs, 3 + 1 + 1 + 1 + 1)
  const base = (await img.store.resolve('env/base')).manifest

  const c = JSON.parse(
    await ok(t, ['image', ...img.ic.cliArgs, 'compose', 'env/task:1', '--base', 'env/base', '--workspace', 'env/ws', '--toolkit', 'env/tk', '--toolkit', 'env/extra', '--toolkit', 'env/tk2', '--json']),
  )
  t.is(c.image, 'env/task:1')
  t.deepEqual(
    c.parts.map((p: { kind: string; layers: number }) => `${p.kind}:${p.layers}`),
    ['base:3', 'workspace:1', 'toolkit:1', 'toolkit:1', 'toolkit:1'],
  )
  // nothing copied: same blobs, the composed manifest points at the stored layers
  t.is((await img.store.listBlobs()).length, blobs)
  const m = (await img.store.resolve('env/task:1')).manifest
  t.deepEqual(
    m.layers.map((l) => l.kind),
    ['base', 'base', 'base', 'workspace', 'toolkit', 'toolkit', 'toolkit'],
  )
  t.deepEqual(
    m.layers.slice(0, 3).map((l) => l.digest),
    base.layers.map((l) => l.digest),
  )
  t.is(m.layers[3]!.digest, (await img.store.resolve('env/ws')).manifest.layers[0]!.digest)
  t.is(m.layers[5]!.digest, (await img.store.resolve('env/extra')).manifest.layers[3]!.digest)
  t.is(m.source.type, 'compose')
  // config: env merged by key, labels merged, entrypoint from tk, cmd from tk2, workdir from ws
  t.true(m.config.env.includes('REPO=/work/repo'))
  t.true(m.config.env.includes('LANG=C.UTF-8'))
  t.true(m.config.env.includes('TK=1'))
  t.is(m.config.env.filter((e) => e.startsWith('LANG=')).length, 1)
  t.deepEqual(m.config.entrypoint, ['/opt/tk/run'])
  t.deepEqual(m.config.cmd, ['--verbose'])
  t.is(m.config.workdir, '/work/repo')
  t.like(m.config.labels, { task: '42', harness: 'v3' })

  // the stacked tree: the base's files, the workspace's override, every toolkit's files
  const root = await mountImage(t, img.store, m, localTmp(t, 'strata-mnt-'))
  t.is(fs.readFileSync(path.join(root, 'etc/passwd'), 'utf8'), 'workspace passwd\n')
  t.is(fs.readFileSync(path.join(root, 'work/repo/README'), 'utf8'), 'the task repo\n')
  t.true(fs.existsSync(path.join(root, 'opt/tk/run')))
  t.true(fs.existsSync(path.join(root, 'opt/tk2/tool')))
  t.is(fs.readFileSync(path.join(root, 'opt/extra/x'), 'utf8'), 'extra\n')
  t.is(fs.readFileSync(path.join(root, 'etc/new'), 'utf8'), 'added in layer 2\n')
  t.false(fs.existsSync(path.join(root, 'etc/gone')))
  t.true(fs.existsSync(path.join(root, 'opq/new')))
  t.false(fs.existsSync(path.join(root, 'opq/old')))

  // the merged config goes out with an export
  const out = path.join(dir, 'task.tar')
  await ok(t, ['image', ...img.ic.cliArgs, 'export', 'env/task:1', out], { timeoutMs: 180_000 })
  const insp = JSON.parse((await run('skopeo', ['inspect', '--config', `oci-archive:${out}`])).stdout)
  t.deepEqual(insp.config.Entrypoint, ['/opt/tk/run'])
  t.is(insp.config.WorkingDir, '/work/repo')
  t.true(insp.config.Env.includes('TK=1'))
  t.is(insp.rootfs.diff_ids.length, 7)

  // errors: a missing part, and a part that adds nothing
  const missing = await strata(['image', ...img.ic.cliArgs, 'compose', 'env/x', '--base', 'env/base', '--workspace', 'env/none'])
  t.is(missing.code, 1)
  t.regex(missing.stderr, /IMAGE_NOT_FOUND/)
  const nothing = await strata(['image', ...img.ic.cliArgs, 'compose', 'env/x', '--base', 'env/base', '--toolkit', 'env/base'])
  t.is(nothing.code, 1)
  t.regex(nothing.stderr, /INVALID_ARGUMENT/)
  t.is((await img.store.listBlobs()).length, blobs)
})

test.serial('a compose that fails once its manifest is stored (the tag cannot be written) removes that manifest: no new <none> in ls -a', async (t) => {
  const dir = localTmp(t)
  fs.mkdirSync(path.join(dir, 'root/etc'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'root/etc/compose-fail'), 'x\n')
  await importPath(img.store, path.join(dir, 'root'), { name: 'fail/base', workDir: dir })
  const before = (await img.store.listManifests()).sort()
  // the name's tag directory is a file: the manifest is stored, then writing the tag fails
  await img.store.fs.writeFile(`${img.store.root}/tags/fail%2Fblocked`, 'in the way\n')
  t.teardown(() => img.store.fs.unlink(`${img.store.root}/tags/fail%2Fblocked`).catch(() => undefined))
  const r = await strata(['image', ...img.ic.cliArgs, 'compose', 'fail/blocked:v1', '--base', 'fail/base'])
  t.is(r.code, 1)
  t.regex(r.stderr, /^strata: [A-Z_]+: /)
  t.deepEqual((await img.store.listManifests()).sort(), before)
  const all: Array<{ name: string }> = JSON.parse(await ok(t, ['image', ...img.ic.cliArgs, 'ls', '-a', '--json']))
  t.false(all.some((x) => x.name === '<none>'))
  t.deepEqual(await img.store.listLeases(), [])
})
