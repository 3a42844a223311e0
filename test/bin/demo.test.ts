// `npm run demo` (dist/bin/demo.js) as a user runs it: a child process that
// brings up its own cluster, and a JSON summary whose checks must all hold.
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

test('demo --json: data verified, replicas equal, no acknowledged write lost, everything torn down', async (t) => {
  const dir = path.join(tempDir(t, 'strata-demo-test-'), 'cluster')
  const r = await demo(['--size', '4', '--json', '--dir', dir])
  const context = `exit ${r.code}\nstderr:\n${r.stderr.slice(-4000)}`
  t.is(r.code, 0, context)
  let s: any
  t.notThrows(() => (s = JSON.parse(r.stdout)), `stdout is not JSON:\n${r.stdout.slice(0, 2000)}`)
  if (!s) return
  t.true(s.ok, context)
  t.is(s.error, null)
  t.false(s.interrupted)
  t.is(s.sizeMiB, 4)
  t.is(s.dir, dir)

  // the cluster: 3 storage nodes, 2 chains of 3 replicas
  t.is(s.cluster.storageNodes, 3)
  t.is(s.cluster.replicas, 3)
  t.is(s.cluster.chains.length, 2)
  // the DFS core processes (cluster up also starts the meta servers; the demo asks for no FUSE mount)
  t.deepEqual(
    s.cluster.processes.map((p: any) => p.name).filter((n: string) => !n.startsWith('meta-')),
    ['mgmtd', 'storage-1', 'storage-2', 'storage-3'],
  )

  // data path: every byte read back equal; figures are measured
  t.true(s.bulk.verified)
  t.is(s.bulk.chunks, 4)
  t.is(s.bulk.mismatchedChunks, 0)
  t.true(s.bulk.writeMBps > 0 && s.bulk.readMBps > 0)
  t.true(s.smallWrites.qd1.writes > 0 && s.smallWrites.qd16.writes > 0)
  t.true(s.smallWrites.qd1.p50Ms > 0 && s.smallWrites.qd1.p99Ms >= s.smallWrites.qd1.p50Ms)
  t.is(s.smallWrites.verifiedBlocks, s.smallWrites.qd1.writes + s.smallWrites.qd16.writes)
  t.is(s.smallWrites.mismatchedBlocks, 0)

  // replication: every sampled chunk equal on its 3 replicas, and all chunk metadata equal
  t.true(s.replication.replicasEqual)
  t.deepEqual(s.replication.differences, [])
  t.true(s.replication.chunksCompared >= s.bulk.chunks)
  for (const sample of s.replication.samples) {
    t.true(sample.equal, sample.chunk)
    t.is(sample.replicas.length, 3)
    t.is(new Set(sample.replicas.map((x: any) => x.checksum)).size, 1)
  }

  // failover: writes kept being acknowledged, none failed, none lost; the victim went to the chain end
  const f = s.failover
  t.is(f.writesFailed, 0)
  t.true(f.writesAcknowledged > 0)
  t.is(f.lostWrites, 0)
  t.true(f.acknowledgedWritesChecked > 0)
  t.true(f.chainsUpdatedAfterMs > 0)
  t.true(f.chainVersions.every((v: any) => v.after > v.before))
  for (const vt of f.victimTargets) t.regex(f.chainsAfter, new RegExp(`${vt.targetId}\\(OFFLINE-OFFLINE\\)\\s*$`, 'm'))

  // recovery: back to SERVING, replicas equal again, still nothing lost
  const rc = s.recovery
  t.true(rc.servingAfterMs > 0)
  t.true(rc.replicasEqual)
  t.deepEqual(rc.differences, [])
  t.is(rc.writesFailed, 0)
  t.is(rc.lostWrites, 0)
  t.true(rc.acknowledgedWritesChecked >= f.acknowledgedWritesChecked)
  t.true(rc.resyncJobs >= 1)
  t.notRegex(rc.chainsAfter, /OFFLINE|SYNCING|WAITING/)

  // teardown: no daemon left, directory gone
  t.true(s.teardown.dirRemoved)
  t.false(fs.existsSync(dir))
  for (const p of s.cluster.processes) t.false(alive(p.pid), `${p.name} (pid ${p.pid}) still runs`)
  t.false(alive(rc.pid), `restarted ${f.victim} (pid ${rc.pid}) still runs`)
})

test('demo --help describes the options and exits 0', async (t) => {
  const r = await demo(['--help'], 30_000)
  t.is(r.code, 0)
  for (const opt of ['--dir', '--keep', '--size', '--json', '--help']) t.true(r.stdout.includes(opt), opt)
})

test('demo refuses bad options and a non-empty --dir without touching it', async (t) => {
  const size = await demo(['--size', '0'], 30_000)
  t.is(size.code, 2)
  t.regex(size.stderr, /--size/)
  const unknown = await demo(['--frobnicate'], 30_000)
  t.is(unknown.code, 2)

  const dir = tempDir(t, 'strata-demo-test-')
  fs.writeFileSync(path.join(dir, 'precious.txt'), 'keep me')
  const busy = await demo(['--dir', dir, '--size', '1'], 30_000)
  t.is(busy.code, 2)
  t.regex(busy.stderr, /not empty/)
  t.is(fs.readFileSync(path.join(dir, 'precious.txt'), 'utf8'), 'keep me')
})
