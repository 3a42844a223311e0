// The namespace invariants (fs/meta/fsck.ts) after a concurrent run: three
// client processes do random namespace operations on the same few names
// while the meta servers they talk to are SIGKILLed and restarted in turn
// (clients fail over and replay; docs/meta.md "Idempotency"). Then fsck
// over the shared lmdb KV must find nothing.

import test from 'ava'
import { spawn, type ChildProcess } from 'node:child_process'
import path from 'node:path'
import { FileSystem } from '../../../fs/client/index.js'
import { startMetaCluster, lmdbKvAvailable } from '../../helpers/meta-cluster.js'
import { fsckCluster } from '../../helpers/fsck.js'
import { until } from '../../helpers/procs.js'

const WORKER = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../../helpers/ns-worker.js')
// local runs: STRATA_FSCK_OPS=N operations per worker, STRATA_FSCK_SEEDS=a,b,c the workers' seeds
const OPS = Number(process.env.STRATA_FSCK_OPS ?? 160)
const SEEDS = (process.env.STRATA_FSCK_SEEDS ?? '11,12,13').split(',').map(Number)

interface Worker {
  child: ChildProcess
  progress: number
  out: string
  exit: Promise<number | null>
}

function startWorker(mgmtd: string, root: string, seed: number): Worker {
  const child = spawn(process.execPath, [WORKER, mgmtd, root, String(seed), String(OPS)], { stdio: ['ignore', 'pipe', 'pipe'] })
  const w: Worker = { child, progress: 0, out: '', exit: new Promise((r) => child.once('exit', (code) => r(code))) }
  const take = (b: Buffer) => {
    w.out += b.toString()
    const m = /progress (\d+)\n(?![\s\S]*progress)/.exec(w.out)
    if (m) w.progress = Number(m[1])
  }
  child.stdout!.on('data', take)
  child.stderr!.on('data', take)
  return w
}

test.serial('concurrent clients while meta servers are SIGKILLed and restarted: fsck finds nothing', async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built: needs meta child processes sharing one KV')
    t.pass()
    return
  }
  const m = await startMetaCluster(t, { metas: 2, nodes: 1, chains: 1, replicas: 1 })
  const setup = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], routingRefreshMs: 200 })
  t.teardown(() => setup.shutdown())
  await setup.mkdir('/conc')
  const workers = SEEDS.map((seed) => startWorker(m.c.mgmtdAddress, '/conc', seed))
  t.teardown(() => {
    for (const w of workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL')
  })
  const reached = (n: number) => until(() => workers.every((w) => w.progress >= n || w.child.exitCode !== null), 120_000, `every worker past ${n} ops`)

  await reached(OPS / 4)
  await m.c.kill('meta-1', 'SIGKILL')
  await reached(OPS / 2)
  m.c.start('meta-1')
  await until(() => m.rpc.echo(m.metaAddresses[0]!).then(() => true), 60_000, 'meta-1 back')
  await m.c.kill('meta-2', 'SIGKILL')
  await reached((3 * OPS) / 4)
  m.c.start('meta-2')
  await until(() => m.rpc.echo(m.metaAddresses[1]!).then(() => true), 60_000, 'meta-2 back')

  const codes = await Promise.all(workers.map((w) => w.exit))
  for (const [i, w] of workers.entries()) t.is(codes[i], 0, `worker ${i}:\n${w.out.split('\n').filter((l) => !l.startsWith('progress')).join('\n')}`)
  const report = await fsckCluster(m)
  t.true(report.inodes > 2)
  t.deepEqual(report.violations, [])
})
