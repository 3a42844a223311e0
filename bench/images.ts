// Image benchmarks (issue 4), one realistic image for all of them: a Debian
// bookworm minbase tree with python3, pip and git built by debootstrap
// (sandbox/image/debootstrap.ts, cached after the first run), ≥ 300 MB.
//
// - image-import: `strata image import layer.tar` (the EROFS layer built from
//   the tar while it is stored in the DFS with 3 replicas, publish) against `tar -x` of the same tar
//   into a fresh directory on the same filesystem (page cache; a second
//   baseline adds `sync`, since the DFS side is durable when it returns).
// - image-s3: `strata image push|pull … s3://` against raw @aws-sdk/client-s3
//   PutObject/GetObject of the same bytes, both on one s3rver, and against a
//   raw multipart upload with the push's part size and concurrency.
// - image-registry: `strata image push|pull … docker://` against `skopeo copy`
//   of the same image, both on one Debian docker-registry.
// - image-dedup: stored bytes of two images that share the base (one OCI
//   archive with the base layer, one with base + workspace) against the sum
//   of their archives.
//
// Strata's side always runs the CLI as a user would, as a child process.

import fs from 'node:fs'
import path from 'node:path'
import net from 'node:net'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import { S3Client, PutObjectCommand, GetObjectCommand, CreateBucketCommand, CreateMultipartUploadCommand, UploadPartCommand, CompleteMultipartUploadCommand } from '@aws-sdk/client-s3'
import { ensureDebianRootfs } from '../sandbox/image/index.js'
import type { BenchContext, Metric } from './lib/types.js'
import { fmtBytes, fmtRate } from './lib/stats.js'

const CLI = fileURLToPath(new URL('../bin/cli.js', import.meta.url))
const exec = promisify(execFile)
const MiB = 1024 * 1024

/** The packages that take the minbase tree past 300 MB. */
export const BENCH_IMAGE_PACKAGES = ['python3', 'python3-pip', 'git', 'ca-certificates']

interface ImageInputs {
  rootfs: string
  /** uncompressed tar of the tree: the single layer */
  layerTar: string
  layerBytes: number
  /** a small workspace layer (a source tree) for the dedup case */
  workspaceTar: string
}

let inputs: ImageInputs | null = null

/** Builds (once per run) the layer tars from the cached Debian tree. */
async function imageInputs(ctx: BenchContext): Promise<ImageInputs> {
  if (inputs) return inputs
  ctx.log('Debian rootfs: debootstrap minbase + python3, pip, git (cached after the first build)')
  const r = await ensureDebianRootfs({ include: BENCH_IMAGE_PACKAGES, onLine: (l) => ctx.log(`  debootstrap: ${l}`) })
  ctx.log(r.cached ? `  cached at ${r.dir}` : `  built in ${(r.buildMs / 1000).toFixed(0)} s at ${r.dir}`)
  const dir = ctx.fixtures.scratch('image-inputs')
  const layerTar = path.join(dir, 'base.tar')
  await exec('tar', ['--numeric-owner', '--xattrs', '--xattrs-include=*', '-C', r.dir, '-cf', layerTar, '.'])
  const ws = path.join(dir, 'workspace')
  fs.mkdirSync(path.join(ws, 'app'), { recursive: true })
  // a workspace layer shaped like a repository: many small text files
  for (let i = 0; i < 2000; i++) fs.writeFileSync(path.join(ws, 'app', `mod${i}.py`), `# module ${i}\n` + `def f${i}(x):\n    return x * ${i}\n`.repeat(40))
  const workspaceTar = path.join(dir, 'workspace.tar')
  await exec('tar', ['--numeric-owner', '-C', ws, '-cf', workspaceTar, '.'])
  inputs = { rootfs: r.dir, layerTar, layerBytes: fs.statSync(layerTar).size, workspaceTar }
  ctx.log(`image: ${fmtBytes(inputs.layerBytes)} base layer tar`)
  return inputs
}

async function strata(clusterDir: string, args: string[], env: Record<string, string> = {}): Promise<{ ms: number; stdout: string }> {
  const t0 = performance.now()
  // under --profile, STRATA_BIN is the profiled entry point: each command writes its own .cpuprofile
  const { stdout } = await exec(process.execPath, [process.env.STRATA_BIN ?? CLI, 'image', '--cluster', clusterDir, ...args], {
    env: { ...process.env, ...env },
    maxBuffer: 64 * MiB,
  })
  return { ms: performance.now() - t0, stdout }
}

async function timed(cmd: string, args: string[], env: Record<string, string> = {}): Promise<number> {
  const t0 = performance.now()
  await exec(cmd, args, { env: { ...process.env, ...env }, maxBuffer: 64 * MiB })
  return performance.now() - t0
}

function rate(bytes: number, ms: number): number {
  return bytes / (ms / 1000)
}

/** Removes every image and collects its blobs, so the next import/pull starts from an empty store. */
async function emptyStore(clusterDir: string): Promise<void> {
  const ls = JSON.parse((await strata(clusterDir, ['ls', '--json'])).stdout) as Array<{ name: string; tag: string }>
  if (ls.length) await strata(clusterDir, ['rm', ...ls.map((i) => `${i.name}:${i.tag}`)])
  await strata(clusterDir, ['gc'])
}

async function storedBytes(clusterDir: string): Promise<number> {
  // the store's blobs directory, summed through the cluster's FUSE mount
  const blobs = path.join(clusterDir, 'mnt', 'strata/images/blobs/sha256')
  let n = 0
  for (const f of fs.readdirSync(blobs)) n += fs.statSync(path.join(blobs, f)).size
  const manifests = path.join(clusterDir, 'mnt', 'strata/images/manifests/sha256')
  for (const f of fs.readdirSync(manifests)) n += fs.statSync(path.join(manifests, f)).size
  return n
}

// ------------------------------------------------------------------ import

export async function imageImport(ctx: BenchContext): Promise<Metric[]> {
  const inp = await imageInputs(ctx)
  const ns = await ctx.fixtures.getNamespaceCluster()
  const out: Metric[] = []
  // baseline: tar -x of the same layer into a fresh directory on the same filesystem
  const untar = async (sync: boolean) => {
    const samples: number[] = []
    for (let i = 0; i < (ctx.quick ? 1 : 3); i++) {
      const d = ctx.fixtures.scratch('untar')
      await ctx.fixtures.settle()
      const t0 = performance.now()
      await exec('tar', ['--numeric-owner', '--xattrs', '--xattrs-include=*', '-C', d, '-xf', inp.layerTar])
      if (sync) await exec('sync', ['-f', d])
      samples.push(performance.now() - t0)
      fs.rmSync(d, { recursive: true, force: true })
    }
    return { ms: [...samples].sort((a, b) => a - b)[Math.floor(samples.length / 2)]!, runs: `median of ${samples.length} runs (${samples.map((m) => (m / 1000).toFixed(2)).join(', ')} s)` }
  }
  const { ms: tarMs, runs: tarRuns } = await untar(false)
  ctx.log(`tar -x: ${(tarMs / 1000).toFixed(2)} s (${fmtRate(rate(inp.layerBytes, tarMs))}; ${tarRuns})`)
  const { ms: tarSyncMs, runs: tarSyncRuns } = await untar(true)
  ctx.log(`tar -x + sync: ${(tarSyncMs / 1000).toFixed(2)} s (${tarSyncRuns})`)
  out.push({ key: 'image.untar', label: 'tar -x of the layer (page cache)', value: rate(inp.layerBytes, tarMs), unit: 'B/s', extra: { ms: tarMs }, detail: tarRuns })
  out.push({ key: 'image.untar.sync', label: 'tar -x of the layer + sync', value: rate(inp.layerBytes, tarSyncMs), unit: 'B/s', extra: { ms: tarSyncMs }, detail: tarSyncRuns })

  // the median of as many imports as tar -x runs, each into an empty store (this VM's minutes vary as much as tar -x does)
  const importMs: number[] = []
  let digest = ''
  for (let i = 0; i < (ctx.quick ? 1 : 3); i++) {
    await emptyStore(ns.dir)
    await ctx.fixtures.settle()
    const run = await strata(ns.dir, ['import', inp.layerTar, '--name', 'bench/debian:import', '--json'])
    digest = (JSON.parse(run.stdout) as { digest: string }).digest
    importMs.push(run.ms)
  }
  const firstMs = [...importMs].sort((a, b) => a - b)[Math.floor(importMs.length / 2)]!
  ctx.log(`strata image import: ${(firstMs / 1000).toFixed(2)} s (${fmtRate(rate(inp.layerBytes, firstMs))}; runs ${importMs.map((m) => (m / 1000).toFixed(2)).join(', ')} s), ${digest.slice(0, 19)}`)
  out.push({
    key: 'image.import',
    label: 'strata image import (rootfs tar → EROFS layer in the DFS)',
    value: rate(inp.layerBytes, firstMs),
    unit: 'B/s',
    extra: { ms: firstMs },
    detail: `median of ${importMs.length} runs into an empty store (${importMs.map((m) => (m / 1000).toFixed(2)).join(', ')} s), as tar -x's`,
  })
  const again = await strata(ns.dir, ['import', inp.layerTar, '--name', 'bench/debian:again', '--json'])
  ctx.log(`same import again (layer reused by diffId): ${(again.ms / 1000).toFixed(2)} s`)
  out.push({ key: 'image.import.again', label: 'the same import again (layer found by diffId, not rebuilt)', value: rate(inp.layerBytes, again.ms), unit: 'B/s', extra: { ms: again.ms } })
  // --compress only applies to layers an import builds: empty the store so the layer is built anew
  await emptyStore(ns.dir)
  await ctx.fixtures.settle()
  const lz4 = await strata(ns.dir, ['import', inp.layerTar, '--name', 'bench/debian:lz4', '--compress', 'lz4', '--json'])
  ctx.log(`import --compress lz4: ${(lz4.ms / 1000).toFixed(2)} s`)
  out.push({ key: 'image.import.lz4', label: 'strata image import --compress lz4', value: rate(inp.layerBytes, lz4.ms), unit: 'B/s', extra: { ms: lz4.ms } })
  return out
}

// ------------------------------------------------------------------ S3

interface S3Server {
  endpoint: string
  close(): Promise<void>
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer()
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port
      s.close(() => resolve(port))
    })
    s.on('error', reject)
  })
}

async function startS3rver(dir: string): Promise<S3Server> {
  const S3rver = createRequire(import.meta.url)('s3rver') as new (o: Record<string, unknown>) => { run(): Promise<net.AddressInfo>; close(): Promise<void> }
  const server = new S3rver({ address: '127.0.0.1', port: 0, directory: dir, silent: true, configureBuckets: [{ name: 'bench' }] })
  const addr = await server.run()
  return { endpoint: `http://127.0.0.1:${addr.port}`, close: () => server.close() }
}

const S3_ENV = { AWS_ACCESS_KEY_ID: 'S3RVER', AWS_SECRET_ACCESS_KEY: 'S3RVER', AWS_REGION: 'us-east-1' }

export async function imageS3(ctx: BenchContext): Promise<Metric[]> {
  const inp = await imageInputs(ctx)
  const ns = await ctx.fixtures.getNamespaceCluster()
  await emptyStore(ns.dir)
  await strata(ns.dir, ['import', inp.layerTar, '--name', 'bench/debian:s3', '--json'])
  const info = JSON.parse((await strata(ns.dir, ['inspect', 'bench/debian:s3', '--json'])).stdout) as { manifest: { layers: Array<{ digest: string; size: number }> } }
  const layer = info.manifest.layers[0]!
  const bytes = info.manifest.layers.reduce((a, l) => a + l.size, 0)
  // the same bytes as a local file for the raw SDK side
  const local = path.join(ctx.fixtures.scratch('s3-raw'), 'layer.erofs')
  fs.copyFileSync(path.join(ns.mnt, 'strata/images/blobs/sha256', layer.digest.slice(7)), local)
  const s3dir = ctx.fixtures.scratch('s3rver')
  const s3 = await startS3rver(s3dir)
  const out: Metric[] = []
  try {
    // the SDK's streaming CRC trailer (aws-chunked) is off on both sides: Strata's
    // client turns it off too (it sends Content-MD5 and verifies sha256 end to end)
    // the same switch Strata's own client sets (sandbox/image/s3/client.ts): only the SDK's Node 20 notice is silenced
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true'
    const client = new S3Client({
      endpoint: s3.endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
    })
    await client.send(new CreateBucketCommand({ Bucket: 'bench' })).catch(() => undefined)
    await ctx.fixtures.settle()
    let t0 = performance.now()
    await client.send(new PutObjectCommand({ Bucket: 'bench', Key: 'raw/layer', Body: fs.createReadStream(local), ContentLength: layer.size }))
    const rawPutMs = performance.now() - t0
    t0 = performance.now()
    const got = await client.send(new GetObjectCommand({ Bucket: 'bench', Key: 'raw/layer' }))
    let n = 0
    for await (const c of got.Body as AsyncIterable<Uint8Array>) n += c.length
    const rawGetMs = performance.now() - t0
    if (n !== layer.size) throw new Error(`raw GetObject returned ${n} of ${layer.size} bytes`)
    // the same bytes as a multipart upload with Strata's defaults (16 MiB parts, 4 in flight):
    // a large blob has to go that way, and s3rver stores parts, then concatenates them on
    // completion, so this shows what the server's multipart path costs by itself
    await ctx.fixtures.settle()
    t0 = performance.now()
    const mp = await client.send(new CreateMultipartUploadCommand({ Bucket: 'bench', Key: 'raw/layer-mp' }))
    const partSize = 16 * 1024 * 1024
    const parts = Math.ceil(layer.size / partSize)
    const etags: string[] = new Array<string>(parts)
    const fh = await fs.promises.open(local, 'r')
    try {
      let next = 0
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = next++; i < parts; i = next++) {
            const len = Math.min(partSize, layer.size - i * partSize)
            const body = Buffer.allocUnsafe(len)
            await fh.read(body, 0, len, i * partSize)
            const r = await client.send(new UploadPartCommand({ Bucket: 'bench', Key: 'raw/layer-mp', UploadId: mp.UploadId, PartNumber: i + 1, Body: body, ContentLength: len }))
            etags[i] = r.ETag!
          }
        }),
      )
    } finally {
      await fh.close()
    }
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket: 'bench', Key: 'raw/layer-mp', UploadId: mp.UploadId, MultipartUpload: { Parts: etags.map((e, i) => ({ PartNumber: i + 1, ETag: e })) } }),
    )
    const rawMpMs = performance.now() - t0
    client.destroy()
    ctx.log(`raw SDK: PutObject ${fmtRate(rate(layer.size, rawPutMs))}, GetObject ${fmtRate(rate(layer.size, rawGetMs))}, multipart upload ${fmtRate(rate(layer.size, rawMpMs))}`)
    out.push({ key: 's3.raw.put.multipart', label: 'raw @aws-sdk/client-s3 multipart upload of the layer (16 MiB parts, 4 in flight)', value: rate(layer.size, rawMpMs), unit: 'B/s' })
    out.push({ key: 's3.raw.put', label: 'raw @aws-sdk/client-s3 PutObject of the layer', value: rate(layer.size, rawPutMs), unit: 'B/s' })
    out.push({ key: 's3.raw.get', label: 'raw @aws-sdk/client-s3 GetObject of the layer', value: rate(layer.size, rawGetMs), unit: 'B/s' })

    const env = { ...S3_ENV }
    await ctx.fixtures.settle()
    const push = await strata(ns.dir, ['push', 'bench/debian:s3', 's3://bench/strata', '--endpoint', s3.endpoint, '--force-path-style', '--json'], env)
    ctx.log(`strata image push s3://: ${fmtRate(rate(bytes, push.ms))}`)
    out.push({ key: 's3.strata.push', label: 'strata image push … s3://', value: rate(bytes, push.ms), unit: 'B/s', extra: { ms: push.ms } })
    // the same push with a part size above the layer's size: every blob goes in one PutObject,
    // the same requests as the raw PutObject baseline (s3rver's multipart path left out)
    await ctx.fixtures.settle()
    const onePut = await strata(ns.dir, ['push', 'bench/debian:s3', 's3://bench/strata-one-put', '--part-size', '1G', '--endpoint', s3.endpoint, '--force-path-style', '--json'], env)
    ctx.log(`strata image push s3:// --part-size 1G: ${fmtRate(rate(bytes, onePut.ms))}`)
    out.push({ key: 's3.strata.push.oneput', label: 'strata image push … s3:// --part-size 1G (each blob in one PutObject)', value: rate(bytes, onePut.ms), unit: 'B/s', extra: { ms: onePut.ms } })
    await emptyStore(ns.dir)
    await ctx.fixtures.settle()
    const pull = await strata(ns.dir, ['pull', 's3://bench/strata/bench/debian:s3', '--endpoint', s3.endpoint, '--force-path-style', '--json'], env)
    ctx.log(`strata image pull s3://: ${fmtRate(rate(bytes, pull.ms))}`)
    out.push({ key: 's3.strata.pull', label: 'strata image pull s3:// (into the DFS, verified)', value: rate(bytes, pull.ms), unit: 'B/s', extra: { ms: pull.ms } })
  } finally {
    await s3.close()
    fs.rmSync(s3dir, { recursive: true, force: true })
  }
  return out
}

// ------------------------------------------------------------------ registry

async function startRegistry(dir: string): Promise<{ host: string; close(): Promise<void> }> {
  const port = await freePort()
  fs.mkdirSync(dir, { recursive: true })
  const cfg = path.join(dir, 'config.yml')
  fs.writeFileSync(cfg, `version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: ${path.join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n`)
  const child: ChildProcess = spawn('/usr/bin/docker-registry', ['serve', cfg], { stdio: 'ignore' })
  const host = `127.0.0.1:${port}`
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(`http://${host}/v2/`).then((r) => r.ok, () => false)
    if (ok) break
    await sleep(100)
  }
  return {
    host,
    close: async () => {
      child.kill('SIGTERM')
      await new Promise((r) => (child.exitCode !== null ? r(null) : child.once('exit', r)))
    },
  }
}

export async function imageRegistry(ctx: BenchContext): Promise<Metric[]> {
  const inp = await imageInputs(ctx)
  const ns = await ctx.fixtures.getNamespaceCluster()
  await emptyStore(ns.dir)
  await strata(ns.dir, ['import', inp.layerTar, '--name', 'bench/debian:reg', '--json'])
  const work = ctx.fixtures.scratch('registry-bench')
  const archive = path.join(work, 'image.tar')
  await strata(ns.dir, ['export', 'bench/debian:reg', archive])
  const reg = await startRegistry(path.join(work, 'registry'))
  const out: Metric[] = []
  const tls = ['--src-tls-verify=false', '--dest-tls-verify=false']
  try {
    // the bytes on the wire: the layer tar as the export wrote it
    const bytes = inp.layerBytes
    await ctx.fixtures.settle()
    const skPush = await timed('skopeo', ['copy', '-q', ...tls, `oci-archive:${archive}`, `docker://${reg.host}/peer/debian:1`])
    const skPull = await timed('skopeo', ['copy', '-q', ...tls, `docker://${reg.host}/peer/debian:1`, `oci:${path.join(work, 'skopeo-oci')}:1`])
    ctx.log(`skopeo copy: push ${fmtRate(rate(bytes, skPush))}, pull ${fmtRate(rate(bytes, skPull))}`)
    out.push({ key: 'registry.skopeo.push', label: 'skopeo copy oci-archive → registry', value: rate(bytes, skPush), unit: 'B/s', extra: { ms: skPush } })
    out.push({ key: 'registry.skopeo.pull', label: 'skopeo copy registry → oci dir', value: rate(bytes, skPull), unit: 'B/s', extra: { ms: skPull } })
    await ctx.fixtures.settle()
    const push = await strata(ns.dir, ['push', 'bench/debian:reg', `docker://${reg.host}/strata/debian:1`, '--json'], { XDG_CACHE_HOME: path.join(work, 'empty-cache') })
    ctx.log(`strata image push docker://: ${fmtRate(rate(bytes, push.ms))}`)
    out.push({ key: 'registry.strata.push', label: 'strata image push … docker:// (layerToTar + gzip + upload)', value: rate(bytes, push.ms), unit: 'B/s', extra: { ms: push.ms } })
    await emptyStore(ns.dir)
    await ctx.fixtures.settle()
    const pull = await strata(ns.dir, ['pull', `docker://${reg.host}/peer/debian:1`, '--name', 'bench/debian:pulled', '--json'])
    ctx.log(`strata image pull docker://: ${fmtRate(rate(bytes, pull.ms))}`)
    out.push({ key: 'registry.strata.pull', label: 'strata image pull docker:// (download + build EROFS + store)', value: rate(bytes, pull.ms), unit: 'B/s', extra: { ms: pull.ms } })
  } finally {
    await reg.close()
    fs.rmSync(work, { recursive: true, force: true })
  }
  return out
}

// ------------------------------------------------------------------ dedup

export async function imageDedup(ctx: BenchContext): Promise<Metric[]> {
  const inp = await imageInputs(ctx)
  const ns = await ctx.fixtures.getNamespaceCluster()
  await emptyStore(ns.dir)
  const work = ctx.fixtures.scratch('dedup-bench')
  // two OCI archives made by umoci + skopeo: A = base, B = base + workspace
  const layout = path.join(work, 'oci')
  await exec('umoci', ['init', '--layout', layout])
  await exec('umoci', ['new', '--image', `${layout}:a`])
  await exec('umoci', ['raw', 'add-layer', '--image', `${layout}:a`, inp.layerTar])
  await exec('umoci', ['new', '--image', `${layout}:b`])
  await exec('umoci', ['raw', 'add-layer', '--image', `${layout}:b`, inp.layerTar])
  await exec('umoci', ['raw', 'add-layer', '--image', `${layout}:b`, inp.workspaceTar])
  const a = path.join(work, 'a.tar')
  const b = path.join(work, 'b.tar')
  await exec('skopeo', ['copy', '-q', `oci:${layout}:a`, `oci-archive:${a}`])
  await exec('skopeo', ['copy', '-q', `oci:${layout}:b`, `oci-archive:${b}`])
  const archives = fs.statSync(a).size + fs.statSync(b).size
  await strata(ns.dir, ['import', a, '--name', 'bench/dedup:a'])
  await strata(ns.dir, ['import', b, '--name', 'bench/dedup:b'])
  const stored = await storedBytes(ns.dir)
  ctx.log(`two images sharing a base: archives ${fmtBytes(archives)} (gzip layers), stored ${fmtBytes(stored)} (uncompressed EROFS)`)
  fs.rmSync(work, { recursive: true, force: true })
  return [
    { key: 'dedup.archives', label: 'sum of the two OCI archives (gzip layers, made by umoci + skopeo)', value: archives, unit: 'B' },
    { key: 'dedup.stored', label: 'bytes stored in the DFS for both images (layer files + manifests, per replica; uncompressed EROFS)', value: stored, unit: 'B' },
  ]
}
