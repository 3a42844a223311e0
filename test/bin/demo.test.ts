// `npm run demo` (dist/bin/demo.js) as a user runs it: a child process that
// brings up its own cluster, builds and imports the images, runs sandboxes
// over a DFS dataset, and a JSON summary whose checks must all hold.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { execFile } from 'node:child_process'
import { REPO, tempDir } from './helpers.js'

const DEMO = path.join(REPO, 'dist', 'bin', 'demo.js')

interface Run {
  code: number
  stdout: string
  stderr: string
}

function demo(args: string[], timeoutMs = 180_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [DEMO, ...args], { timeout: timeoutMs, maxBuffer: 32 << 20, env: { ...process.env, NO_COLOR: '1' } }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code as number) : 128) : 0
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
  })
}

function alive(pid: number | null | undefined): boolean {
  if (!pid) return false
  try {
    process.kill(pid, 0)
  } catch {
    return false
  }
  // a zombie is gone for our purposes
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return !/^\d+ \(.*\) [ZX]/.test(stat)
  } catch {
    return false
  }
}

test('demo --json: sandboxes on the Debian image read the DFS dataset, cannot write it, and everything is torn down', async (t) => {
  // the first run on a machine builds the Debian rootfs with debootstrap (minutes, from the Debian mirror)
  t.timeout(15 * 60_000)
  const dir = path.join(tempDir(t, 'strata-demo-test-'), 'cluster')
  const r = await demo(['--sandboxes', '2', '--size', '2', '--json', '--dir', dir], 14 * 60_000)
  const context = `exit ${r.code}\nstderr:\n${r.stderr.slice(-4000)}`
  t.is(r.code, 0, context)
  let s: any
  t.notThrows(() => (s = JSON.parse(r.stdout)), `stdout is not JSON:\n${r.stdout.slice(0, 2000)}`)
  if (!s) return
  t.true(s.ok, context)
  t.is(s.error, null)
  t.false(s.interrupted)
  t.deepEqual(s.options, { sandboxes: 2, sizeMiB: 2 })
  t.is(s.dir, dir)

  // the embedded single-node cluster, with its FUSE mount and sandbox daemon
  t.is(s.cluster.storageNodes, 1)
  const roles = s.cluster.processes.map((p: any) => p.role)
  for (const role of ['mgmtd', 'storage', 'meta', 'fuse', 'sandbox']) t.true(roles.includes(role), role)

  // the images: a Debian base layer and a toolkit layer in the DFS
  t.is(s.baseImage.ref, 'debian:bookworm')
  t.deepEqual(s.baseImage.layers.map((l: any) => l.kind), ['base'])
  t.true(s.baseImage.layerBytes > 50 << 20)
  t.is(s.toolkit.ref, 'toolkit:v1')
  t.deepEqual(s.toolkit.layers.map((l: any) => l.kind), ['toolkit'])
  t.true(s.rootfs.packages.includes('python3'))

  // the dataset went into the DFS and came back equal
  t.true(s.dataset.verified)
  t.is(s.dataset.path, '/datasets/demo')
  t.true(s.dataset.bytes >= 2 << 20)

  // every sandbox computed the host's summary and could not write the dataset
  t.is(s.create.count, 2)
  t.true(s.create.coldNodeMs > 0 && s.create.node.p50Ms > 0)
  t.is(s.exec.sandboxes, 2)
  t.is(s.exec.verified, 2)
  t.is(s.exec.probesOk, 2)
  for (const run of s.exec.runs) {
    t.is(run.digest, s.dataset.digest, run.id)
    t.deepEqual(run.differences, [])
    t.is(run.probe.dataset, 'EROFS', run.id)
    t.is(run.probe.tmp, 'ok', run.id)
  }
  // the node shared one mount per layer; a cold create read a small part of the image
  t.is(s.node.running, 2)
  t.is(s.node.layers.length, 2)
  // lazily: python3 started in every sandbox having read a part of the image from the DFS, and /data was read from it
  const cold = s.dfsBytes.create + s.dfsBytes.firstExec
  t.true(cold > 0 && cold < s.dfsBytes.imageBytes / 2, `fetched ${cold} of ${s.dfsBytes.imageBytes} image bytes until python3 ran`)
  t.true(s.dfsBytes.stats >= s.dataset.bytes, `stats.py fetched ${s.dfsBytes.stats} of the ${s.dataset.bytes} byte dataset`)

  // deleted, then torn down: no sandbox, daemon, mount or directory left
  t.deepEqual(s.delete.left, { sandboxes: 0, layers: 0 })
  t.true(s.teardown.dirRemoved)
  t.false(fs.existsSync(dir))
  for (const p of s.cluster.processes) t.false(alive(p.pid), `${p.name} (pid ${p.pid}) still runs`)
  t.false(fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(dir), 'a mount below the cluster directory is left')
})

test('demo --help describes the options and exits 0', async (t) => {
  const r = await demo(['--help'], 30_000)
  t.is(r.code, 0)
  for (const opt of ['--dir', '--keep', '--sandboxes', '--size', '--json', '--help']) t.true(r.stdout.includes(opt), opt)
})

test('demo refuses bad options and a non-empty --dir without touching it', async (t) => {
  const size = await demo(['--size', '0'], 30_000)
  t.is(size.code, 2)
  t.regex(size.stderr, /--size/)
  const many = await demo(['--sandboxes', '1000'], 30_000)
  t.is(many.code, 2)
  t.regex(many.stderr, /--sandboxes/)
  const unknown = await demo(['--frobnicate'], 30_000)
  t.is(unknown.code, 2)

  const dir = tempDir(t, 'strata-demo-test-')
  fs.writeFileSync(path.join(dir, 'precious.txt'), 'keep me')
  const busy = await demo(['--dir', dir, '--size', '1'], 30_000)
  t.is(busy.code, 2)
  t.regex(busy.stderr, /not empty/)
  t.is(fs.readFileSync(path.join(dir, 'precious.txt'), 'utf8'), 'keep me')
})
