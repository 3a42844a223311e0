// Unusual but valid layer tars, made by GNU tar and put into an OCI layout by
// umoci (`umoci raw add-layer`), imported every way a layer is built (the
// one-pass builder, --compress's unpack + mkfs.erofs, --squash's apply mode),
// mounted and stacked, and compared with what `umoci unpack` makes of the
// same image.
import test, { type ExecutionContext } from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { importPath } from '../../../sandbox/image/oci/import.js'
import { localTmp, useImageStores } from '../../helpers/image-cluster.js'
import { mountImage } from '../../helpers/image-mount.js'
import { run } from '../../helpers/oci-fixtures.js'
import { diffTrees, snapshotTree } from '../../helpers/tree-compare.js'

const stores = useImageStores(test, '/img-tar-layers')

/** Writes `files` (path → content; a path ending in / is a directory) under `dir`. */
function writeTree(dir: string, files: Record<string, string>): void {
  for (const [p, content] of Object.entries(files)) {
    const abs = path.join(dir, p)
    if (p.endsWith('/')) fs.mkdirSync(abs, { recursive: true })
    else {
      fs.mkdirSync(path.dirname(abs), { recursive: true })
      fs.writeFileSync(abs, content)
    }
  }
}

/** A layer tar made by GNU tar from `dir`, holding exactly `members` in that order. */
async function gnuTar(dir: string, out: string, members: string[]): Promise<string> {
  await run('tar', ['--format=pax', '--numeric-owner', '--mtime=2021-01-01 00:00:00', '--no-recursion', '-cf', out, '-C', dir, ...members])
  return out
}

/** An OCI layout whose image `:t` has `layers` (tars), lowest first; returns the layout directory. */
async function umociLayout(work: string, layers: string[]): Promise<string> {
  const layout = path.join(work, 'oci')
  await run('umoci', ['init', '--layout', layout])
  await run('umoci', ['new', '--image', `${layout}:t`])
  for (const l of layers) await run('umoci', ['raw', 'add-layer', '--image', `${layout}:t`, l])
  return layout
}

/** Imports `layout` with `opts` and returns the differences between the mounted image and umoci's unpack (or the tree `ref`). */
async function diffsAgainstUmoci(t: ExecutionContext, layout: string, opts: { squash?: boolean; compress?: 'lz4' } = {}, ref?: string): Promise<string[]> {
  const work = localTmp(t)
  const store = await stores.fresh()
  const name = 'tar-layers:t'
  await importPath(store, layout, { name: 'tar-layers', tag: 't', workDir: work, ...opts })
  const bundle = path.join(work, 'bundle')
  if (ref === undefined) await run('umoci', ['unpack', '--image', `${layout}:t`, bundle])
  const { manifest } = await store.resolve(name)
  const root = await mountImage(t, store, manifest, localTmp(t, 'strata-mnt-'))
  return diffTrees(await snapshotTree(root), await snapshotTree(ref ?? path.join(bundle, 'rootfs')))
}

test.serial('a whiteout and an entry of the same name in one layer (OCI: the whiteout hides only lower layers) import as umoci unpacks them', async (t) => {
  const work = localTmp(t)
  const lower = path.join(work, 'lower')
  const upper = path.join(work, 'upper')
  writeTree(lower, { 'a/old': 'old a', 'b/old': 'old b', c: 'old c', 'd/old': 'old d', 'e/old': 'old e', 'f/old': 'old f' })
  writeTree(upper, {
    '.wh.a': '', 'a/new': 'new a', // whiteout, then the directory again
    'b/new': 'new b', '.wh.b': '', // the directory, then its whiteout
    '.wh.c': '', c: 'new c', // a file over a file
    '.wh.d': '', 'd/new': 'new d', // an implied directory under a whiteout
    '.wh.e': '', 'e/.wh..wh..opq': '', 'e/new': 'new e', // whiteout and opaque marker
    f: 'a file over a directory', '.wh.f': '',
  })
  const layers = [
    await gnuTar(lower, path.join(work, 'lower.tar'), ['.', 'a', 'a/old', 'b', 'b/old', 'c', 'd', 'd/old', 'e', 'e/old', 'f', 'f/old']),
    await gnuTar(upper, path.join(work, 'upper.tar'), ['.wh.a', 'a', 'a/new', 'b', 'b/new', '.wh.b', '.wh.c', 'c', '.wh.d', 'd/new', '.wh.e', 'e/.wh..wh..opq', 'e/new', 'f', '.wh.f']),
  ]
  const layout = await umociLayout(work, layers)
  // the reference really has what the case is about
  const ref = path.join(work, 'ref')
  await run('umoci', ['unpack', '--image', `${layout}:t`, ref])
  for (const x of ['a', 'b', 'd', 'e']) t.deepEqual(fs.readdirSync(path.join(ref, 'rootfs', x)), ['new'])
  t.is(fs.readFileSync(path.join(ref, 'rootfs', 'c'), 'utf8'), 'new c')
  t.true(fs.lstatSync(path.join(ref, 'rootfs', 'f')).isFile())

  t.deepEqual(await diffsAgainstUmoci(t, layout), [])
  t.deepEqual(await diffsAgainstUmoci(t, layout, { compress: 'lz4' }), [])
  t.deepEqual(await diffsAgainstUmoci(t, layout, { squash: true }), [])
})

test.serial('times before 1970 (GNU tar gnu and pax formats, sub-second) are kept by an import as umoci unpacks them', async (t) => {
  const work = localTmp(t)
  const tree = path.join(work, 'tree')
  writeTree(tree, { '1960': 'a', 'just-before': 'b', '1901': 'c', '1980': 'd', 'dir/': '' })
  // (fs.utimes takes a negative time for "now")
  const set = (p: string, when: string) => run('touch', ['-d', `@${when}`, path.join(tree, p)])
  await set('1960', '-304775999.5') // 1960-05-05 12:00:00.5
  await set('just-before', '-0.75') // 1969-12-31 23:59:59.25
  await set('1901', '-2147483648')
  await set('1980', '315532800')
  const members = ['.', 'dir', '1960', 'just-before', '1901', '1980']
  const gnu = path.join(work, 'gnu.tar')
  await run('tar', ['--format=gnu', '--numeric-owner', '--no-recursion', '-cf', gnu, '-C', tree, ...members])
  const pax = path.join(work, 'pax.tar')
  await run('tar', ['--format=pax', '--numeric-owner', '--no-recursion', '-cf', pax, '-C', tree, '.', ...members.slice(1)])
  for (const tar of [gnu, pax]) {
    const layout = await umociLayout(localTmp(t), [tar])
    t.deepEqual(await diffsAgainstUmoci(t, layout), [], path.basename(tar))
  }
  // the reference has the times (the tree-compare snapshot compares mtimes of non-directories to the nanosecond)
  t.is(fs.lstatSync(path.join(tree, '1960'), { bigint: true }).mtimeNs, -304_775_999_500_000_000n)
})

test.serial('sparse files (GNU tar -S: PAX 0.0, 0.1, 1.0 and old GNU S headers with extension blocks) import to the tree umoci (GNU tar for S headers) unpacks, whether their holes stay holes (the default build, --squash) or become zeros (--compress)', async (t) => {
  const work = localTmp(t)
  const tree = path.join(work, 'tree')
  writeTree(tree, { plain: 'plain\n' })
  // one hole and a few bytes (the brief's case), and 60 data segments (a PAX 1.0 map over two blocks, GNU extension blocks)
  fs.writeFileSync(path.join(tree, 'one'), '')
  fs.truncateSync(path.join(tree, 'one'), 10 << 20)
  const one = fs.openSync(path.join(tree, 'one'), 'r+')
  fs.writeSync(one, 'abc', 5_000_000)
  fs.closeSync(one)
  fs.writeFileSync(path.join(tree, 'many'), '')
  fs.truncateSync(path.join(tree, 'many'), 20 << 20)
  const many = fs.openSync(path.join(tree, 'many'), 'r+')
  for (let i = 1; i <= 60; i++) fs.writeSync(many, `x${i}`, i * 300_000)
  fs.closeSync(many)
  fs.appendFileSync(path.join(tree, 'many'), 'tail')
  const variants: Array<[string, string[]]> = [
    ['pax-0.0', ['--format=pax', '--sparse-version=0.0']],
    ['pax-0.1', ['--format=pax', '--sparse-version=0.1']],
    ['pax-1.0', ['--format=pax', '--sparse-version=1.0']],
    ['gnu', ['--format=gnu']],
  ]
  for (const [label, flags] of variants) {
    const tar = path.join(work, `${label}.tar`)
    await run('tar', [...flags, '-S', '--numeric-owner', '-cf', tar, '-C', tree, '.'])
    // the fixture really is sparse (GNU tar 1.34 stores a 4 KiB block per written spot)
    t.true(fs.statSync(tar).size < 1 << 20, label)
    const layout = await umociLayout(localTmp(t), [tar])
    // umoci 0.4 refuses old GNU 'S' entries (unknown typeflag), GNU tar extracts them
    let ref: string | undefined
    if (label === 'gnu') {
      ref = path.join(localTmp(t), 'ref')
      fs.mkdirSync(ref)
      await run('tar', ['--numeric-owner', '-xpf', tar, '-C', ref])
    }
    t.deepEqual(await diffsAgainstUmoci(t, layout, {}, ref), [], label)
    if (label === 'gnu' || label === 'pax-1.0') {
      t.deepEqual(await diffsAgainstUmoci(t, layout, { compress: 'lz4' }, ref), [], `${label} --compress`)
      t.deepEqual(await diffsAgainstUmoci(t, layout, { squash: true }, ref), [], `${label} --squash`)
    }
  }
})
