// `strata image` as an operator runs it (child processes against a real
// cluster): import, ls, inspect, tag, rm, gc (a leased layer survives),
// export → podman load → podman run, skopeo inspect, and re-import of the
// exported archive.
import test from 'ava'
import crypto from 'node:crypto'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { STRATA, ok, strata } from '../../bin/helpers.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { useImageFixtureCluster } from '../../helpers/image-fixture-cluster.js'
import { mountImage } from '../../helpers/image-mount.js'
import { until } from '../../helpers/procs.js'
import { run, umociUnpack } from '../../helpers/oci-fixtures.js'
import { diffTrees, snapshotTree } from '../../helpers/tree-compare.js'

const img = useImageFixtureCluster(test)

function image(t: import('ava').ExecutionContext, ...args: string[]): Promise<string> {
  return ok(t, ['image', ...img.ic.cliArgs, ...args], { timeoutMs: 180_000 })
}

/** A tiny runnable rootfs: /bin/cat with the libraries it needs, and a file to print. */
async function catRootfs(dir: string): Promise<string> {
  const root = path.join(dir, 'rootfs')
  fs.mkdirSync(path.join(root, 'bin'), { recursive: true })
  fs.mkdirSync(path.join(root, 'etc'))
  fs.copyFileSync('/bin/cat', path.join(root, 'bin/cat'))
  fs.chmodSync(path.join(root, 'bin/cat'), 0o755)
  const { stdout } = await run('ldd', ['/bin/cat'])
  for (const lib of stdout.match(/\/[^\s]+/g) ?? []) {
    fs.mkdirSync(path.join(root, path.dirname(lib)), { recursive: true })
    fs.copyFileSync(fs.realpathSync(lib), path.join(root, lib))
  }
  fs.writeFileSync(path.join(root, 'etc/greeting'), 'hello from a strata image\n')
  return root
}

test.serial('import, ls, inspect, tag, rm and gc (a leased layer survives, unreferenced ones go)', async (t) => {
  const imp = JSON.parse(await image(t, 'import', img.fx.layout, '--name', 'cli/app:v1', '--json'))
  t.like(imp, { image: 'cli/app:v1', name: 'cli/app', tag: 'v1', layersBuilt: 3, layersReused: 0 })
  t.regex(imp.digest, /^sha256:[0-9a-f]{64}$/)

  const ls = JSON.parse(await image(t, 'ls', '--json'))
  t.deepEqual(ls.map((r: { name: string; tag: string }) => `${r.name}:${r.tag}`), ['cli/app:v1'])
  t.like(ls[0], { digest: imp.digest, layers: 3, size: imp.size })
  t.truthy(Date.parse(ls[0].created))
  const text = (await image(t, 'ls')).trim().split('\n')
  t.deepEqual(text[0]!.split(/\s+/), ['NAME', 'TAG', 'DIGEST', 'LAYERS', 'SIZE', 'CREATED'])
  t.is(text[1]!.split(/\s+/)[2], imp.digest.slice(7, 19))

  const insp = JSON.parse(await image(t, 'inspect', 'cli/app:v1', '--json'))
  t.is(insp.digest, imp.digest)
  t.deepEqual(insp.tags, ['cli/app:v1'])
  t.is(insp.layers.length, 3)
  t.is(insp.layers[0].path, `/strata/images/blobs/sha256/${insp.layers[0].digest.slice(7)}`)
  t.is(insp.manifest.source.type, 'oci-layout')
  t.regex(await image(t, 'inspect', `cli/app@${imp.digest}`), /Tags\s+cli\/app:v1/)

  await image(t, 'tag', 'cli/app:v1', 'cli/app:latest')
  await image(t, 'tag', `cli/app@${imp.digest}`, 'other/name:x')
  t.deepEqual(
    (await img.store.listTags()).map((x) => `${x.name}:${x.tag}`),
    ['cli/app:latest', 'cli/app:v1', 'other/name:x'],
  )
  // NAME@sha256:… names the manifest and NAME is not checked, by every command alike: zzz has no tag on it
  t.regex(await image(t, 'inspect', `zzz@${imp.digest}`), new RegExp(`Digest\\s+${imp.digest}`))
  t.deepEqual(JSON.parse(await image(t, 'rm', `zzz@${imp.digest}`, '--json')), { untagged: [], failed: [] })
  t.regex(await image(t, 'rm', `zzz@${imp.digest}`), new RegExp(`no tag of zzz points at ${imp.digest}: nothing untagged`))
  t.is((await img.store.listTags()).length, 3)
  const noManifest = await strata(['image', ...img.ic.cliArgs, 'rm', `zzz@sha256:${'0'.repeat(64)}`])
  t.is(noManifest.code, 1)
  t.regex(noManifest.stderr, /strata: IMAGE_NOT_FOUND: /)
  const missing = await strata(['image', ...img.ic.cliArgs, 'inspect', 'cli/app:nope'])
  t.is(missing.code, 1)
  t.regex(missing.stderr, /strata: IMAGE_NOT_FOUND: /)

  // rm untags; gc has nothing to do while a tag remains
  const rm = JSON.parse(await image(t, 'rm', 'cli/app:v1', 'other/name:x', '--json'))
  t.deepEqual(rm.untagged.map((u: { image: string }) => u.image), ['cli/app:v1', 'other/name:x'])
  const dry = JSON.parse(await image(t, 'gc', '--dry-run', '--json'))
  t.deepEqual(dry.removedBlobs, [])
  t.deepEqual(dry.removedManifests, [])
  const rmMissing = await strata(['image', ...img.ic.cliArgs, 'rm', 'cli/app:v1'])
  t.is(rmMissing.code, 1)
  t.regex(rmMissing.stderr, /IMAGE_NOT_FOUND/)

  // a node holds a lease on the bottom layer; the last tag goes
  const layers: string[] = insp.layers.map((l: { digest: string }) => l.digest)
  await img.store.addLease('node-7', layers[0]!)
  await image(t, 'rm', `cli/app@${imp.digest}`)
  t.deepEqual(await img.store.listTags(), [])
  const preview = JSON.parse(await image(t, 'gc', '--dry-run', '--json'))
  t.deepEqual(preview.removedManifests, [imp.digest])
  t.true(await img.store.hasBlob(layers[1]!))
  const gc = JSON.parse(await image(t, 'gc', '--json'))
  t.deepEqual(gc.removedManifests, [imp.digest])
  t.deepEqual([...gc.removedBlobs].sort(), [layers[1], layers[2]].sort())
  t.deepEqual(gc.keptLeased, [layers[0]])
  // the preview frees what the run frees, manifest bytes included
  t.true(gc.freedBytes > 0)
  t.is(preview.freedBytes, gc.freedBytes)
  t.true(await img.store.hasBlob(layers[0]!))
  t.false(await img.store.hasBlob(layers[1]!))
  t.deepEqual(await img.store.listManifests(), [])
  await img.store.removeLease('node-7', layers[0]!)
  const gc2 = JSON.parse(await image(t, 'gc', '--json'))
  t.deepEqual(gc2.removedBlobs, [layers[0]])
  t.deepEqual(await img.store.listBlobs(), [])
})

test.serial('export → podman load → podman run prints the file; skopeo inspects it; re-import gives the same layers and tree', async (t) => {
  const dir = localTmp(t)
  const root = await catRootfs(dir)
  await image(t, 'import', root, '--name', 'strata-test/cat:v1')
  const out = path.join(dir, 'cat.tar')
  const exp = JSON.parse(await image(t, 'export', 'strata-test/cat:v1', out, '--json'))
  t.is(exp.refName, 'strata-test/cat:v1')
  t.is(exp.layers.length, 1)
  t.true(fs.statSync(out).size > 0)
  // same image, same bytes
  const again = path.join(dir, 'again.tar')
  await image(t, 'export', 'strata-test/cat:v1', again)
  t.true(fs.readFileSync(out).equals(fs.readFileSync(again)))

  const insp = JSON.parse((await run('skopeo', ['inspect', `oci-archive:${out}`])).stdout)
  t.is(insp.Architecture, 'amd64')
  t.is(insp.Os, 'linux')
  t.deepEqual(insp.Layers, [exp.layers[0].diffId])

  const podmanImage = 'localhost/strata-test/cat:v1'
  t.teardown(() => run('podman', ['rmi', '-f', podmanImage]).catch(() => undefined))
  const load = await run('podman', ['load', '-i', out])
  t.regex(load.stdout + load.stderr, /strata-test\/cat:v1/)
  const r = await run('podman', ['run', '--rm', '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=1024:1024', podmanImage, '/bin/cat', '/etc/greeting'])
  t.is(r.stdout, 'hello from a strata image\n')
  await run('podman', ['rmi', podmanImage])

  // the archive imports back as the same layer (layerToTar → unpack → mkfs.erofs is a fixed point)
  const back = JSON.parse(await image(t, 'import', out, '--name', 'strata-test/cat:back', '--json'))
  t.is(back.source.type, 'docker-archive')
  const orig = JSON.parse(await image(t, 'inspect', 'strata-test/cat:v1', '--json'))
  t.deepEqual(back.layers.map((l: { digest: string }) => l.digest), orig.layers.map((l: { digest: string }) => l.digest))
})

test.serial('export to - streams the archive to stdout (the same bytes as a file, skopeo reads it), the summary on stderr; a terminal on stdout is a usage error', async (t) => {
  const dir = localTmp(t)
  const root = await catRootfs(dir)
  await image(t, 'import', root, '--name', 'strata-test/stream:v1')
  const file = path.join(dir, 'file.tar')
  await image(t, 'export', 'strata-test/stream:v1', file)
  // stdout is a file the child writes through its fd 1, as `> piped.tar` does
  const piped = path.join(dir, 'piped.tar')
  const fd = fs.openSync(piped, 'w')
  const child = spawn(process.execPath, [STRATA, 'image', ...img.ic.cliArgs, 'export', 'strata-test/stream:v1', '-', '--json'], { stdio: ['ignore', fd, 'pipe'] })
  fs.closeSync(fd)
  let stderr = ''
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  t.is(code, 0, stderr)
  t.false(fs.existsSync(path.join(dir, '-')), 'no file named -')
  t.true(fs.readFileSync(piped).equals(fs.readFileSync(file)), 'the streamed archive is the file export, byte for byte')
  const j = JSON.parse(stderr.slice(stderr.indexOf('{')))
  t.is(j.out, '-')
  t.is(j.bytes, fs.statSync(piped).size)
  const insp = JSON.parse((await run('skopeo', ['inspect', `oci-archive:${piped}`])).stdout)
  t.deepEqual(insp.Layers, [j.layers[0].diffId])
  // through a pipe too, text summary on stderr
  const viaPipe = await run('sh', ['-c', `"$0" "$1" image ${img.ic.cliArgs.map((a) => `'${a}'`).join(' ')} export strata-test/stream:v1 - | sha256sum`, process.execPath, STRATA])
  t.is(viaPipe.stdout.split(' ')[0], crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex'))
  t.regex(viaPipe.stderr, /exported strata-test\/stream:v1 to standard output: 1 layer\(s\)/)

  // a reader that goes away early (| head): the command ends as SIGPIPE ends a tool (141), its work files removed
  const wd = path.join(dir, 'work')
  const early = await run('bash', ['-c', `"$0" "$1" image ${img.ic.cliArgs.map((a) => `'${a}'`).join(' ')} export --work-dir "$2" strata-test/stream:v1 - | head -c 512 >/dev/null; echo "\${PIPESTATUS[0]}"`, process.execPath, STRATA, wd])
  t.is(early.stdout.trim(), '141', early.stderr)
  t.deepEqual(fs.readdirSync(wd), [])

  // a terminal on stdout (script gives the command a pty): refused before any work, exit 2
  const tty = await run('script', ['-qec', `"${process.execPath}" "${STRATA}" image ${img.ic.cliArgs.join(' ')} export strata-test/stream:v1 -; echo "exit=$?"`, '/dev/null']).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }))
  t.regex(tty.stdout, /strata: usage: refusing to write the archive to a terminal/)
  t.regex(tty.stdout, /exit=2/)
})

test.serial('export through /dev/fd/1, /dev/stdout, a symlink, a FIFO and /dev/null writes into them, never replacing them; Ctrl-C ends an export into a FIFO whose reader stopped; /dev/full is NO_SPACE', async (t) => {
  const dir = localTmp(t)
  const root = await catRootfs(dir)
  await image(t, 'import', root, '--name', 'strata-test/devs:v1')
  const file = path.join(dir, 'file.tar')
  await image(t, 'export', 'strata-test/devs:v1', file)
  const want = fs.readFileSync(file)
  const cli = `"$0" "$1" image ${img.ic.cliArgs.map((a) => `'${a}'`).join(' ')}`
  // stdout a file, named as /dev/fd/1 (the old code made a temporary "beside" it in /proc and failed;
  // for /dev/stdout it renamed a regular file over the machine's /dev/stdout symlink)
  const viaFd = path.join(dir, 'via-fd.tar')
  const r1 = await run('sh', ['-c', `${cli} export strata-test/devs:v1 /dev/fd/1 > "$2"`, process.execPath, STRATA, viaFd])
  t.true(fs.readFileSync(viaFd).equals(want), 'the archive went to the file on fd 1')
  t.regex(r1.stderr, /to standard output/, 'the summary goes to stderr, not into the archive')
  // /dev/stdout as a pipe
  const viaPipe = await run('sh', ['-c', `${cli} export strata-test/devs:v1 /dev/stdout | sha256sum`, process.execPath, STRATA])
  t.is(viaPipe.stdout.split(' ')[0], crypto.createHash('sha256').update(want).digest('hex'))
  t.true(fs.lstatSync('/dev/stdout').isSymbolicLink())
  // a symlink: the file it names is replaced, the link stays
  const real = path.join(dir, 'real.tar')
  const link = path.join(dir, 'link.tar')
  fs.writeFileSync(real, 'old')
  fs.symlinkSync(real, link)
  await image(t, 'export', 'strata-test/devs:v1', link)
  t.true(fs.lstatSync(link).isSymbolicLink(), 'the symlink is kept')
  t.true(fs.readFileSync(real).equals(want))
  // a FIFO is written into; /dev/null stays the device
  const fifo = path.join(dir, 'fifo')
  await run('mkfifo', [fifo])
  const reader = run('sh', ['-c', 'sha256sum < "$0"', fifo])
  await image(t, 'export', 'strata-test/devs:v1', fifo)
  t.is((await reader).stdout.split(' ')[0], crypto.createHash('sha256').update(want).digest('hex'))
  t.true(fs.statSync(fifo).isFIFO())
  // a FIFO whose reader stopped reading: Ctrl-C ends the export (before, it printed CANCELLED and
  // never exited: its blocked write held a libuv pool thread, which process.exit joins)
  t.true(want.length > 1 << 20, 'the archive is larger than a pipe holds')
  const stalled = path.join(dir, 'stalled')
  await run('mkfifo', [stalled])
  const other = fs.openSync(stalled, fs.constants.O_RDWR)
  t.teardown(() => fs.closeSync(other))
  const c = spawn(process.execPath, [STRATA, 'image', ...img.ic.cliArgs, 'export', 'strata-test/devs:v1', stalled], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  c.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise<number | null>((r) => c.once('exit', (code) => r(code)))
  t.teardown(() => {
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  })
  // it has filled the pipe once its layer is exported (the progress line) and a moment has passed
  await until(() => /export layer/.test(stderr), 60_000, 'the export wrote its layer')
  await new Promise((r) => setTimeout(r, 1000))
  c.kill('SIGINT')
  const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running after 60 s'), 60_000))])
  t.is(code, 130, stderr)
  t.regex(stderr, /^strata: CANCELLED: image export interrupted by SIGINT/m)
  await image(t, 'export', 'strata-test/devs:v1', '/dev/null')
  t.true(fs.statSync('/dev/null').isCharacterDevice())
  // a full device: the writer's error, with its code
  const full = await strata(['image', ...img.ic.cliArgs, 'export', 'strata-test/devs:v1', '/dev/full'])
  t.is(full.code, 1)
  t.regex(full.stderr, /strata: NO_SPACE: /)
})

test.serial('a rootfs tarball imported, exported and imported again: the second import reuses the layer by the exported diff_id', async (t) => {
  const dir = localTmp(t)
  const root = await catRootfs(dir)
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['-C', root, '-cf', tar, '.'])
  const first = JSON.parse(await image(t, 'import', tar, '--name', 'strata-test/tarcat:v1', '--json'))
  t.is(first.layersBuilt, 1)
  const out = path.join(dir, 'tarcat.tar')
  await image(t, 'export', 'strata-test/tarcat:v1', out)
  const back = JSON.parse(await image(t, 'import', out, '--name', 'strata-test/tarcat:back', '--json'))
  t.is(back.layersBuilt, 0)
  t.is(back.layersReused, 1)
  t.deepEqual(back.layers.map((l: { digest: string }) => l.digest), first.layers.map((l: { digest: string }) => l.digest))
})

test.serial('export of a multi-layer image with whiteouts and an opaque dir: skopeo → umoci unpack gives the fixture tree', async (t) => {
  const dir = localTmp(t)
  await image(t, 'import', img.fx.layout, '--name', 'cli/fx:v1')
  const out = path.join(dir, 'fx.tar')
  await image(t, 'export', 'cli/fx:v1', out)
  // an independent tool reads our archive back into an OCI layout and unpacks it
  await run('skopeo', ['--insecure-policy', 'copy', '-q', `oci-archive:${out}`, `oci:${path.join(dir, 'layout')}:x`])
  const ours = await snapshotTree(await umociUnpack({ ref: `${path.join(dir, 'layout')}:x` }, path.join(dir, 'b1')))
  const theirs = await snapshotTree(await umociUnpack(img.fx, path.join(dir, 'b2')))
  t.deepEqual(diffTrees(ours, theirs), [])
  // and the stored image mounts as the same tree too
  const { manifest } = await img.store.resolve('cli/fx:v1')
  const mounted = await snapshotTree(await mountImage(t, img.store, manifest, localTmp(t, 'strata-mnt-')))
  t.deepEqual(diffTrees(mounted, theirs), [])
})

test.serial('a name of 255 characters (509 bytes with every / as %2F) works for import, tag, compose, inspect, ls and rm; an absent one is IMAGE_NOT_FOUND', async (t) => {
  const dir = localTmp(t)
  fs.mkdirSync(path.join(dir, 'root/etc'), { recursive: true })
  fs.writeFileSync(path.join(dir, 'root/etc/long'), 'a long name\n')
  const long = Array.from({ length: 128 }, () => 'a').join('/')
  const other = Array.from({ length: 128 }, () => 'b').join('/')
  const imp = JSON.parse(await image(t, 'import', path.join(dir, 'root'), '--name', `${long}:v1`, '--json'))
  t.is(imp.name, long)
  const tagFromMissing = await strata(['image', ...img.ic.cliArgs, 'tag', `${long}:nope`, `${other}:v1`])
  t.is(tagFromMissing.code, 1)
  t.regex(tagFromMissing.stderr, /^strata: IMAGE_NOT_FOUND: /)
  await image(t, 'tag', `${long}:v1`, `${other}:v1`)
  const comp = JSON.parse(await image(t, 'compose', `${long}:c`, '--base', `${other}:v1`, '--json'))
  t.is(comp.image, `${long}:c`)
  const insp = JSON.parse(await image(t, 'inspect', `${long}:v1`, '--json'))
  t.deepEqual(insp.tags, [`${long}:v1`, `${other}:v1`])
  const absent = await strata(['image', ...img.ic.cliArgs, 'inspect', `${long}:zz`])
  t.is(absent.code, 1)
  t.regex(absent.stderr, /^strata: IMAGE_NOT_FOUND: no image a\/a\/.*:zz\n$/)
  const ls: Array<{ name: string; tag: string }> = JSON.parse(await image(t, 'ls', '--json'))
  t.deepEqual(ls.filter((r) => r.name.length === 255).map((r) => `${r.name}:${r.tag}`), [`${long}:c`, `${long}:v1`, `${other}:v1`])
  await image(t, 'rm', `${long}:v1`, `${long}:c`, `${other}:v1`)
  t.false((await img.store.listTags()).some((x) => x.name.length === 255))
})
