// OCI image fixtures made with independent tools (umoci, GNU tar, skopeo), for
// tests of sandbox/image. `makeOciFixture()` builds a three-layer image in an
// OCI layout:
//
//  1. (umoci repack) a base tree: owners 1234:5678, setuid/setgid/sticky modes,
//     hard links across directories, relative and absolute symlinks, a fifo,
//     char and block devices, user xattrs (one with a binary value, one on a
//     directory), an empty file, a 300 KiB file, a >100-byte path, a non-ASCII
//     name, a sub-second mtime (umoci stores whole seconds);
//  2. (umoci repack) changes: a file and a whole directory deleted (whiteouts),
//     a file rewritten, a file replaced by a symlink, a mode and an owner changed,
//     a new file;
//  3. (GNU tar + `umoci raw add-layer`) `opq/` made opaque with
//     `.wh..wh..opq`: its lower entries disappear, the layer's own stay.
//
// `umociUnpack()` gives the reference rootfs; `toOciArchive()`,
// `toDockerArchive()` and `toZstdLayout()` give the other forms through skopeo.
// Everything lives under `fx.dir`; call `fx.cleanup()` (t.teardown) when done,
// or let `useOciFixture(test, …)` make one per test file and remove it.
import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { TestFn } from 'ava'

export interface OciFixtureLayer {
  digest: string
  mediaType: string
  size: number
  /** The blob file inside the layout. */
  blobPath: string
}

export interface OciFixture {
  /** Temporary directory holding everything below. */
  dir: string
  /** OCI image layout directory. */
  layout: string
  tag: string
  /** `layout:tag`, as umoci's --image and skopeo's oci: transport take it. */
  ref: string
  manifestDigest: string
  configDigest: string
  /** Lowest first. */
  layers: OciFixtureLayer[]
  /** The config's rootfs.diff_ids, lowest first. */
  diffIds: string[]
  cleanup(): Promise<void>
}

export interface RunResult {
  stdout: string
  stderr: string
}

/** Runs a command; rejects with its stderr in the message. */
export function run(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${cmd} ${args.join(' ')} failed: ${stderr || err.message}`, { cause: err }))
      else resolve({ stdout, stderr })
    })
  })
}

export const FIXTURE_TAG = 'latest'
/** mtimes of fixture entries (seconds); some entries add nanoseconds. */
export const FIXTURE_T1 = 1_700_000_000
export const FIXTURE_T2 = 1_700_100_000
export const LONG_NAME = 'deep/' + 'd'.repeat(60) + '/' + 'e'.repeat(60) + '/file-with-a-long-path.txt'
export const UNICODE_NAME = 'data/ünïcödé ☃.txt'
export const BINARY_XATTR = Buffer.from([0x00, 0xff, 0x80, 0x01, 0x0a, 0x3d])

/** Runs shell commands in one process (spawning is slow on a loaded machine). */
function sh(script: string, cwd: string): Promise<RunResult> {
  return run('sh', ['-euc', script], { cwd })
}

/** Sets xattrs with python3's os.setxattr (Node has none; an independent tool here), all in one process. */
function setxattrs(list: [string, string, Buffer][]): Promise<RunResult> {
  const code = [
    'import os,sys',
    'a=sys.argv[1:]',
    'for i in range(0,len(a),3): os.setxattr(a[i], a[i+1], bytes.fromhex(a[i+2]), follow_symlinks=False)',
  ].join('\n')
  return run('python3', ['-c', code, ...list.flatMap(([p, n, v]) => [p, n, v.toString('hex')])])
}

function deterministicBytes(n: number, seed: string): Buffer {
  const out = Buffer.alloc(n)
  let block = crypto.createHash('sha256').update(seed).digest()
  for (let off = 0; off < n; off += block.length) {
    block.copy(out, off)
    block = crypto.createHash('sha256').update(block).digest()
  }
  return out
}

function touch(p: string, sec: number, nsec = 0): void {
  fs.lutimesSync(p, sec + nsec / 1e9, sec + nsec / 1e9)
}

/** Sets every mtime under `root` (not following symlinks) to `sec`, children first. */
async function touchTree(root: string, sec: number): Promise<void> {
  await run('find', [root, '-depth', '-exec', 'touch', '-h', '-d', `@${sec}`, '{}', '+'])
}

async function readJson(file: string): Promise<any> {
  return JSON.parse(await fs.promises.readFile(file, 'utf8'))
}

function blobPath(layout: string, digest: string): string {
  const [alg, hex] = digest.split(':')
  return path.join(layout, 'blobs', alg!, hex!)
}

/** Reads the layout's manifest for `tag` (single-manifest layouts, as umoci and skopeo write them). */
export async function readLayout(layout: string, tag = FIXTURE_TAG): Promise<Omit<OciFixture, 'dir' | 'cleanup'>> {
  const index = await readJson(path.join(layout, 'index.json'))
  const desc = (index.manifests as any[]).find((m) => m.annotations?.['org.opencontainers.image.ref.name'] === tag) ?? index.manifests[0]
  const manifest = await readJson(blobPath(layout, desc.digest))
  const config = await readJson(blobPath(layout, manifest.config.digest))
  return {
    layout,
    tag,
    ref: `${layout}:${tag}`,
    manifestDigest: desc.digest,
    configDigest: manifest.config.digest,
    layers: (manifest.layers as any[]).map((l) => ({ digest: l.digest, mediaType: l.mediaType, size: l.size, blobPath: blobPath(layout, l.digest) })),
    diffIds: config.rootfs.diff_ids,
  }
}

async function layer1(rootfs: string): Promise<void> {
  const p = (rel: string): string => path.join(rootfs, rel)
  for (const d of ['etc', 'bin', 'dev', 'tmp', 'home/u', 'opq/sub', 'gone-dir/a', 'data', 'srv', path.dirname(LONG_NAME)]) {
    await fs.promises.mkdir(p(d), { recursive: true })
  }
  await fs.promises.writeFile(p('etc/passwd'), 'root:x:0:0\n')
  await fs.promises.chown(p('etc/passwd'), 1234, 5678)
  await fs.promises.chmod(p('etc/passwd'), 0o640)
  await fs.promises.writeFile(p('etc/group'), 'root:x:0:\n')
  await fs.promises.writeFile(p('etc/gone'), 'deleted in layer 2\n')
  await fs.promises.writeFile(p('bin/tool'), '#!/bin/sh\necho tool\n')
  await fs.promises.chmod(p('bin/tool'), 0o4755)
  await fs.promises.link(p('bin/tool'), p('bin/tool2'))
  await fs.promises.link(p('bin/tool'), p('data/tool-link'))
  await fs.promises.symlink('../etc/passwd', p('bin/pw'))
  await fs.promises.symlink('/etc/group', p('bin/abs'))
  await sh('mkfifo fifo; mknod dev/null c 1 3; mknod dev/loop0 b 7 0', rootfs)
  await fs.promises.chmod(p('dev/null'), 0o666)
  await fs.promises.chmod(p('tmp'), 0o1777)
  await fs.promises.chown(p('home/u'), 1234, 1234)
  await fs.promises.chmod(p('home/u'), 0o700)
  await fs.promises.writeFile(p('home/u/.profile'), 'export A=1\n')
  await fs.promises.chown(p('home/u/.profile'), 1234, 1234)
  await fs.promises.writeFile(p('opq/old'), 'hidden by the opaque marker\n')
  await fs.promises.writeFile(p('opq/sub/x'), 'hidden too\n')
  await fs.promises.writeFile(p('gone-dir/a/b'), 'whole directory deleted in layer 2\n')
  await fs.promises.writeFile(p('data/big.bin'), deterministicBytes(300 * 1024 + 17, 'big'))
  await fs.promises.writeFile(p('data/empty'), '')
  await fs.promises.writeFile(p(UNICODE_NAME), 'unicode\n')
  await fs.promises.writeFile(p(LONG_NAME), 'long path\n')
  await setxattrs([
    [p('etc/passwd'), 'user.color', Buffer.from('blue')],
    [p('data'), 'user.dirattr', Buffer.from('1')],
    [p('data/big.bin'), 'user.bin', BINARY_XATTR],
  ])
  await fs.promises.chmod(p('srv'), 0o2775)
  await fs.promises.chown(p('srv'), 0, 5678)
  await touchTree(rootfs, FIXTURE_T1)
  touch(p('data/big.bin'), FIXTURE_T1 + 5, 123456789)
  touch(p('bin/pw'), FIXTURE_T1 - 100)
}

async function layer2(rootfs: string): Promise<void> {
  const p = (rel: string): string => path.join(rootfs, rel)
  await fs.promises.rm(p('etc/gone'))
  await fs.promises.rm(p('gone-dir'), { recursive: true })
  await fs.promises.writeFile(p('etc/passwd'), 'root:x:0:0\nu:x:1234:5678\n')
  await fs.promises.rm(p('data/empty'))
  await fs.promises.symlink('big.bin', p('data/empty'))
  await fs.promises.chmod(p('etc/group'), 0o600)
  await fs.promises.chown(p('etc/group'), 0, 1234)
  await fs.promises.writeFile(p('etc/new'), 'added in layer 2\n')
  for (const f of ['etc/passwd', 'data/empty', 'etc/group', 'etc/new', 'etc', 'data', '.']) touch(p(f), FIXTURE_T2)
}

async function layer3Tar(work: string): Promise<string> {
  // An opaque directory: umoci never writes `.wh..wh..opq` itself, GNU tar does what it is told.
  const staging = path.join(work, 'l3')
  await fs.promises.mkdir(path.join(staging, 'opq/sub'), { recursive: true })
  await fs.promises.writeFile(path.join(staging, 'opq/.wh..wh..opq'), '')
  await fs.promises.writeFile(path.join(staging, 'opq/new'), 'layer 3 owns opq now\n')
  await fs.promises.writeFile(path.join(staging, 'opq/sub/y'), 'y\n')
  await touchTree(staging, FIXTURE_T2 + 10)
  const tar = path.join(work, 'l3.tar')
  await run('tar', ['--format=posix', '--numeric-owner', '--owner=0', '--group=0', '--sort=name', '--pax-option=delete=atime,delete=ctime', '-C', staging, '-cf', tar, 'opq'])
  return tar
}

/** Builds the three-layer fixture image (see the file comment). */
export async function makeOciFixture(opts: { tmpDir?: string } = {}): Promise<OciFixture> {
  const dir = await fs.promises.mkdtemp(path.join(opts.tmpDir ?? os.tmpdir(), 'strata-oci-fx-'))
  const cleanup = async (): Promise<void> => {
    await fs.promises.rm(dir, { recursive: true, force: true })
  }
  try {
    const layout = path.join(dir, 'layout')
    const ref = `${layout}:${FIXTURE_TAG}`
    await run('umoci', ['init', '--layout', layout])
    await run('umoci', ['new', '--image', ref])
    const b1 = path.join(dir, 'b1')
    await run('umoci', ['unpack', '--image', ref, b1])
    await layer1(path.join(b1, 'rootfs'))
    await run('umoci', ['repack', '--image', ref, b1])
    const b2 = path.join(dir, 'b2')
    await run('umoci', ['unpack', '--image', ref, b2])
    await layer2(path.join(b2, 'rootfs'))
    await run('umoci', ['repack', '--image', ref, b2])
    await run('umoci', ['raw', 'add-layer', '--image', ref, await layer3Tar(dir)])
    await fs.promises.rm(b1, { recursive: true, force: true })
    await fs.promises.rm(b2, { recursive: true, force: true })
    await fs.promises.rm(path.join(dir, 'l3'), { recursive: true, force: true })
    return { dir, cleanup, ...(await readLayout(layout)) }
  } catch (e) {
    await cleanup()
    throw e
  }
}

/**
 * Registers test.serial.before / test.after.always hooks that build the
 * fixture once for a test file and remove it after the last test; `use`
 * receives it (and may prepare more from it) before the first test and
 * before any hook registered after this call.
 */
export function useOciFixture(test: TestFn, use: (fx: OciFixture) => unknown): void {
  let fx: OciFixture | undefined
  test.serial.before(async () => {
    fx = await makeOciFixture()
    await use(fx)
  })
  test.after.always(async () => {
    await fx?.cleanup()
  })
}

/** `umoci unpack` of the fixture into `bundle`; returns the rootfs path (the reference tree). */
export async function umociUnpack(fx: Pick<OciFixture, 'ref'>, bundle: string): Promise<string> {
  await run('umoci', ['unpack', '--image', fx.ref, bundle])
  return path.join(bundle, 'rootfs')
}

/** `skopeo copy oci:… oci-archive:…`; returns `outFile`. */
export async function toOciArchive(fx: Pick<OciFixture, 'ref'>, outFile: string): Promise<string> {
  await run('skopeo', ['--insecure-policy', 'copy', '-q', `oci:${fx.ref}`, `oci-archive:${outFile}`])
  return outFile
}

/** `skopeo copy oci:… docker-archive:…` (a `docker save` tarball tagged `ref`; skopeo writes RepoTags normalized, `docker.io/…`); returns `outFile`. */
export async function toDockerArchive(fx: Pick<OciFixture, 'ref'>, outFile: string, ref = 'strata-fixture:latest'): Promise<string> {
  await run('skopeo', ['--insecure-policy', 'copy', '-q', `oci:${fx.ref}`, `docker-archive:${outFile}:${ref}`])
  return outFile
}

/** The same image with zstd-compressed layers in a new OCI layout `outDir`. */
export async function toZstdLayout(fx: Pick<OciFixture, 'ref'>, outDir: string): Promise<Omit<OciFixture, 'dir' | 'cleanup'>> {
  await run('skopeo', ['--insecure-policy', 'copy', '-q', '--dest-compress-format', 'zstd', `oci:${fx.ref}`, `oci:${outDir}:${FIXTURE_TAG}`])
  return readLayout(outDir)
}
