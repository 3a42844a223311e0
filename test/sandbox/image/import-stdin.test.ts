// `strata image import -` (standard input, as `docker load` / `podman load`
// read it) and a `docker save` unpacked into a directory, through the CLI
// against a real cluster: real `podman save` / skopeo archives and tar
// streams piped in, an empty and a truncated stream, a terminal on stdin,
// Ctrl-C while stdin is read. Each failure leaves the store and the work
// dir as they were.
import test from 'ava'
import crypto from 'node:crypto'
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { STRATA, strata } from '../../bin/helpers.js'
import { localTmp } from '../../helpers/image-cluster.js'
import { useImageFixtureCluster } from '../../helpers/image-fixture-cluster.js'
import { run, toDockerArchive } from '../../helpers/oci-fixtures.js'

const img = useImageFixtureCluster(test)

interface Result {
  code: number
  stdout: string
  stderr: string
}

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`

/** Runs `PRODUCER | strata image … import - ARGS` in bash; the result is strata's. */
function pipeInto(producer: string, args: string[]): Promise<Result> {
  const script = `${producer} | ${q(process.execPath)} ${q(STRATA)} image ${img.ic.cliArgs.map(q).join(' ')} import - ${args.map(q).join(' ')}`
  return new Promise((resolve) => {
    execFile('bash', ['-c', script], { maxBuffer: 16 << 20, timeout: 180_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 128) : 0
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
  })
}

async function state(): Promise<Record<string, string[]>> {
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

/** `producer | strata image import - …` must fail with `code`, leave the store as it was and the work dir empty. */
async function expectPipeFailure(t: import('ava').ExecutionContext, code: string, producer: string, args: string[], work: string): Promise<string> {
  const before = await state()
  const r = await pipeInto(producer, [...args, '--work-dir', work])
  t.is(r.code, 1, `${producer} | import - ${args.join(' ')}\n${r.stdout}${r.stderr}`)
  t.regex(r.stderr, new RegExp(`strata: ${code}: `), `${producer}: expected ${code}\n${r.stderr}`)
  t.deepEqual(await state(), before, `${producer} | import -: left something in the store`)
  t.deepEqual(fs.readdirSync(work), [], `${producer} | import -: left something in the work dir`)
  return r.stderr
}

/** The fixture in podman's storage as `name` (removed at teardown). */
async function inPodman(t: import('ava').ExecutionContext, name: string): Promise<void> {
  t.teardown(() => run('podman', ['rmi', '-f', name]).catch(() => undefined))
  await run('skopeo', ['--insecure-policy', 'copy', '-q', `oci:${img.fx.ref}`, `containers-storage:${name}`])
}

test.serial('podman save (docker-archive and oci-archive) and a zstd-compressed one piped in import as the archive, named by its RepoTags; progress shows the bytes read', async (t) => {
  const name = `localhost/strata-stdin-${crypto.randomBytes(4).toString('hex')}:v1`
  await inPodman(t, name)
  const work = localTmp(t)

  // podman writes the archive to stdout when it is not a terminal
  const docker = await pipeInto(`podman save --format docker-archive ${q(name)}`, ['--json', '--work-dir', work])
  t.is(docker.code, 0, docker.stderr)
  const d = JSON.parse(docker.stdout)
  t.is(d.image, name)
  t.like(d.source, { type: 'docker-archive', ref: '-' })
  t.deepEqual(
    d.layers.map((l: { diffId: string }) => l.diffId),
    img.fx.diffIds,
  )
  t.deepEqual(fs.readdirSync(work), [])

  // the same image from a file gives the same layers
  const dir = localTmp(t)
  const file = path.join(dir, 'saved.tar')
  await run('podman', ['save', '--format', 'docker-archive', '-o', file, name])
  const fromFile = await strata(['image', ...img.ic.cliArgs, 'import', file, '--name', 'stdin/from-file', '--json'])
  t.is(fromFile.code, 0, fromFile.stderr)
  t.deepEqual(JSON.parse(fromFile.stdout).layers, d.layers)

  const oci = await pipeInto(`podman save --format oci-archive ${q(name)}`, ['--name', 'stdin/oci:v1', '--json'])
  t.is(oci.code, 0, oci.stderr)
  const o = JSON.parse(oci.stdout)
  t.is(o.image, 'stdin/oci:v1')
  t.like(o.source, { type: 'oci-archive', ref: '-' })
  t.deepEqual(o.layers, d.layers)

  // compressed on the way, text output: the bytes read are reported on stderr
  const zst = await pipeInto(`skopeo --insecure-policy copy -q oci:${q(img.fx.ref)} docker-archive:/dev/stdout:stdin/zst:v1 | zstd -q -c`, ['--name', 'stdin/zst:v1'])
  t.is(zst.code, 0, zst.stderr)
  t.regex(zst.stdout, /^imported stdin\/zst:v1 sha256:/)
  t.regex(zst.stderr, /read standard input: [\d.]+ (B|KiB|MiB)/)
  const inspected = JSON.parse((await strata(['image', ...img.ic.cliArgs, 'inspect', 'stdin/zst:v1', '--json'])).stdout)
  t.deepEqual(inspected.layers.map((l: { digest: string }) => l.digest), d.layers.map((l: { digest: string }) => l.digest))
})

test.serial('a rootfs tar piped in (plain, gzip) is the rootfs tarball it is: the same layer as the file; without --name it is IMAGE_INVALID_REFERENCE', async (t) => {
  const dir = localTmp(t)
  const root = path.join(dir, 'root')
  fs.mkdirSync(path.join(root, 'etc'), { recursive: true })
  fs.writeFileSync(path.join(root, 'etc/hostname'), 'from stdin\n')
  fs.writeFileSync(path.join(root, 'big.bin'), crypto.randomBytes(3 << 20))
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['-C', root, '-cf', tar, '.'])
  const work = path.join(dir, 'work')

  const piped = await pipeInto(`cat ${q(tar)}`, ['--name', 'stdin/rootfs:v1', '--json', '--work-dir', work])
  t.is(piped.code, 0, piped.stderr)
  const p = JSON.parse(piped.stdout)
  t.like(p, { image: 'stdin/rootfs:v1', layersBuilt: 1 })
  t.like(p.source, { type: 'rootfs', ref: '-' })
  t.is(p.layers[0].diffId, 'sha256:' + crypto.createHash('sha256').update(fs.readFileSync(tar)).digest('hex'))
  t.deepEqual(fs.readdirSync(work), [])

  const fromFile = JSON.parse((await strata(['image', ...img.ic.cliArgs, 'import', tar, '--name', 'stdin/rootfs:file', '--json'])).stdout)
  t.deepEqual(fromFile.layers, p.layers)
  // zcat-able: gzip on the way in, the same tar inside, the same layer
  const gz = await pipeInto(`gzip -c ${q(tar)}`, ['--name', 'stdin/rootfs:gz', '--json'])
  t.is(gz.code, 0, gz.stderr)
  t.deepEqual(JSON.parse(gz.stdout).layers, p.layers)

  const unnamed = await expectPipeFailure(t, 'IMAGE_INVALID_REFERENCE', `cat ${q(tar)}`, [], work)
  t.regex(unnamed, /standard input gives the image no name/)
})

test.serial('an empty stdin, a truncated stream (docker save, rootfs tar, gzip) and one that is not a tar fail with their codes and store nothing', async (t) => {
  const dir = localTmp(t)
  const work = path.join(dir, 'work')
  fs.mkdirSync(work)
  const empty = await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', 'true', ['--name', 'stdin/empty'], work)
  t.regex(empty, /standard input is empty/)
  // a closed stdin is empty too
  const closed = await pipeInto('true', ['--name', 'stdin/closed'])
  t.is(closed.code, 1)

  const docker = await toDockerArchive(img.fx, path.join(dir, 'docker.tar'))
  const size = fs.statSync(docker).size
  for (const named of [true, false]) {
    const err = await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', `head -c ${Math.floor(size * 0.6)} ${q(docker)}`, named ? ['--name', 'stdin/truncated'] : [], work)
    t.regex(err, /strata: IMAGE_BAD_ARCHIVE: standard input: /)
    t.notRegex(err, /stdin\.tar/, 'the spool file is not named')
  }
  // a rootfs tar cut short (imported while indexed, with --name): stopped, what it stored removed
  const root = path.join(dir, 'root')
  fs.mkdirSync(root)
  for (let i = 0; i < 4; i++) fs.writeFileSync(path.join(root, `f${i}.bin`), crypto.randomBytes(1 << 20))
  const tar = path.join(dir, 'rootfs.tar')
  await run('tar', ['-C', root, '-cf', tar, '.'])
  await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', `head -c ${3 << 20} ${q(tar)}`, ['--name', 'stdin/truncated-rootfs'], work)
  const gz = await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', `gzip -c ${q(tar)} | head -c 100000`, ['--name', 'stdin/truncated-gz'], work)
  t.regex(gz, /standard input: gzip: /)
  await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', 'echo not a tar', ['--name', 'stdin/text'], work)
  await expectPipeFailure(t, 'IMAGE_BAD_ARCHIVE', 'head -c 4096 /dev/urandom', ['--name', 'stdin/garbage'], work)
})

test.serial('a terminal on stdin is a usage error (exit 2) before any work; Ctrl-C while stdin is read exits 130 and removes the spooled bytes', async (t) => {
  const tty = await run('script', ['-qec', `"${process.execPath}" "${STRATA}" image ${img.ic.cliArgs.join(' ')} import - --name stdin/tty; echo "exit=$?"`, '/dev/null']).catch((e: { stdout?: string }) => ({ stdout: e.stdout ?? '' }))
  t.regex(tty.stdout, /strata: usage: refusing to read the archive from a terminal/)
  t.regex(tty.stdout, /exit=2/)

  const work = localTmp(t)
  const before = await state()
  const child = spawn(process.execPath, [STRATA, 'image', ...img.ic.cliArgs, 'import', '-', '--name', 'stdin/interrupted', '--work-dir', work], { stdio: ['pipe', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  child.stdin.on('error', () => undefined)
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  // some bytes, and the stream kept open: the command is reading stdin
  child.stdin.write(crypto.randomBytes(1 << 20))
  const spooled = () => fs.readdirSync(work).some((d) => d.startsWith('strata-input-') && (fs.statSync(path.join(work, d, 'stdin.tar'), { throwIfNoEntry: false })?.size ?? 0) > 0)
  for (let i = 0; i < 600 && !spooled(); i++) await new Promise((r) => setTimeout(r, 50))
  t.true(spooled(), stderr)
  child.kill('SIGINT')
  const code = await exited
  t.is(code, 130, stderr)
  t.regex(stderr, /strata: CANCELLED: image import interrupted by SIGINT/)
  // the read was cut short: its progress line says so, not like one that finished ("read standard input: 1.0 MiB 0.3s")
  t.regex(stderr, /^read standard input: .*\(interrupted\)$/m, stderr)
  t.deepEqual(fs.readdirSync(work), [])
  t.deepEqual(await state(), before)
})

test.serial('a docker save unpacked into a directory imports as the docker save (named by RepoTags, the same layers as the tar); a broken manifest.json there is IMAGE_BAD_MANIFEST; a rootfs with a web app manifest.json stays a rootfs', async (t) => {
  const dir = localTmp(t)
  const docker = await toDockerArchive(img.fx, path.join(dir, 'docker.tar'), 'stdin/unpacked:v1')
  const unpacked = path.join(dir, 'unpacked')
  fs.mkdirSync(unpacked)
  await run('tar', ['-C', unpacked, '-xf', docker])
  t.true(fs.existsSync(path.join(unpacked, 'manifest.json')))

  const fromTar = JSON.parse((await strata(['image', ...img.ic.cliArgs, 'import', docker, '--name', 'stdin/unpacked:tar', '--json'])).stdout)
  const r = await strata(['image', ...img.ic.cliArgs, 'import', unpacked, '--json'])
  t.is(r.code, 0, r.stderr)
  const j = JSON.parse(r.stdout)
  t.is(j.image, 'stdin/unpacked:v1')
  t.like(j.source, { type: 'docker-archive', ref: unpacked })
  t.deepEqual(j.layers, fromTar.layers)
  t.is(j.layers.length, img.fx.layers.length)

  // the manifest broken: the error the tar gives
  const before = await state()
  fs.writeFileSync(path.join(unpacked, 'manifest.json'), '[{"Config": "x.json", "Layers": [')
  for (const args of [[unpacked], [unpacked, '--name', 'stdin/broken']]) {
    const b = await strata(['image', ...img.ic.cliArgs, 'import', ...args])
    t.is(b.code, 1, b.stderr)
    t.regex(b.stderr, /strata: IMAGE_BAD_MANIFEST: .*manifest\.json/)
  }
  t.deepEqual(await state(), before)

  // a rootfs tree that ships its own manifest.json (a web app's) is still a rootfs
  const site = path.join(dir, 'site')
  fs.mkdirSync(path.join(site, 'app'), { recursive: true })
  fs.writeFileSync(path.join(site, 'manifest.json'), '{"name":"app","icons":[]}')
  fs.writeFileSync(path.join(site, 'app/index.html'), '<p>hi</p>\n')
  const s = await strata(['image', ...img.ic.cliArgs, 'import', site, '--name', 'stdin/site', '--json'])
  t.is(s.code, 0, s.stderr)
  t.is(JSON.parse(s.stdout).source.type, 'rootfs')
})
