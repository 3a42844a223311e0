// The demo's stages in order. Each fills its part of the summary and throws
// on a failed check; demo.ts owns the process (signals, teardown, exit code).

import crypto from 'node:crypto'
import path from 'node:path'
import { formatTable } from '../../fs/admin/index.js'
import { StrataError, isStrataError } from '../../fs/common/errors.js'
import { DEFAULT_MIRROR } from '../../sandbox/image/debootstrap.js'
import type { Sandbox } from '../../sandbox/sdk/index.js'
import { bringUp, CHUNK_SIZE, REPLICAS, STORAGE_NODES, TARGETS_PER_NODE, type DemoCluster } from './cluster.js'
import { DATASET_DIR, makeDataset, publish, readBack } from './dataset.js'
import { BASE_IMAGE, DEBIAN_PACKAGES, DEBIAN_SUITE, TOOLKIT_IMAGE, baseRootfs, importBase, importToolkit, ref } from './images.js'
import { summarize } from './latency.js'
import { fmtBytes, fmtMs, fmtSecs, type Reporter } from './report.js'
import { DATA_TARGET, createSandboxes, each, runFirst, runProbe, runStats, type SandboxRun } from './sandboxes.js'
import type { Summary } from './summary.js'
import { PROBE_PY, STATS_PY } from './toolkit.js'

const pct = (part: number, whole: number) => (whole > 0 ? `${((part / whole) * 100).toFixed(1)}%` : 'n/a')

/** the last one (teardown) is run by demo.ts */
export const STAGES = 8

export interface StageHooks {
  /** called as soon as the cluster handles exist, so teardown can close them */
  onCluster(c: DemoCluster): void
  /** the stage now running (for the failure message) */
  onStage(name: string): void
  /** every sandbox as soon as it exists (teardown deletes what is left) */
  onSandbox(sb: Sandbox): void
  /** every sandbox the delete stage removed */
  onDeleted(id: string): void
  /** a debootstrap build in flight (teardown waits for it to clean its scratch dir) */
  onRootfsBuild(p: Promise<unknown>): void
  /** Ctrl-C: cancels the imports */
  signal: AbortSignal
}

export interface StageOptions {
  dir: string
  sandboxes: number
  sizeMiB: number
}

export async function runStages(o: StageOptions, r: Reporter, s: Summary, hooks: StageHooks): Promise<void> {
  const runId = crypto.randomBytes(4).toString('hex')
  // under DIR/data, so that `cluster destroy` of a --keep run removes it with the rest
  const workDir = path.join(o.dir, 'data', 'demo-work')

  // 1 ---------------------------------------------------------------- cluster
  hooks.onStage('cluster up')
  r.section(1, STAGES, `Cluster: mgmtd + ${STORAGE_NODES} storage node (${TARGETS_PER_NODE} targets, ${REPLICAS} replica), meta, FUSE mount, sandbox daemon (strata cluster up)`)
  const c = await bringUp(o.dir, r)
  hooks.onCluster(c)
  s.cluster = {
    upMs: c.upMs,
    storageNodes: STORAGE_NODES,
    replicas: REPLICAS,
    chains: c.file.layout.chains.length,
    processes: c.file.processes.map((p) => ({ name: p.name, role: p.role, nodeId: p.nodeId, address: p.address, pid: p.pid })),
  }
  r.line(`cluster ready in ${fmtSecs(c.upMs)} at ${o.dir}; ${fmtBytes(CHUNK_SIZE)} chunks; the DFS is mounted at ${path.join(o.dir, 'mnt')}`)
  r.block(formatTable([['Name', 'Role', 'Address', 'Pid'], ...c.file.processes.map((p) => [p.name, p.role, p.address, String(p.pid)])]))
  const fuseBaseline = await c.fuseBytesRead()

  // 2 ---------------------------------------------------------------- base image
  hooks.onStage('base image')
  r.section(2, STAGES, `Base image ${ref(BASE_IMAGE)}: Debian ${DEBIAN_SUITE} minbase + ${DEBIAN_PACKAGES.join(', ')} from Debian packages, one EROFS layer`)
  const t0 = performance.now()
  const step = r.begin(`rootfs (debootstrap --variant=minbase --include=${DEBIAN_PACKAGES.join(',')}, cached after the first run)`)
  const build = baseRootfs((d) => step.update(d))
  hooks.onRootfsBuild(build)
  let rootfs
  try {
    rootfs = await build
    step.done(`${rootfs.cached ? 'cached' : `built in ${fmtSecs(rootfs.buildMs)}`}: ${fmtBytes(rootfs.treeBytes)} in ${rootfs.files} files at ${rootfs.dir}`)
  } catch (e) {
    step.fail((e as Error).message.split('\n')[0])
    if (isStrataError(e, ['IMAGE_BUILD_FAILED'])) {
      throw new StrataError('IMAGE_BUILD_FAILED', `${e.reason} (the first run builds the base image from the Debian mirror ${DEFAULT_MIRROR}; STRATA_DEBIAN_MIRROR picks another)`, { cause: e })
    }
    throw e
  }
  s.rootfs = { dir: rootfs.dir, cached: rootfs.cached, buildMs: rootfs.buildMs, ms: performance.now() - t0, treeBytes: rootfs.treeBytes, files: rootfs.files, packages: DEBIAN_PACKAGES }
  const base = await r.step(`import as ${ref(BASE_IMAGE)} (kind base): mkfs.erofs of the tree, stored in the DFS`, (u) => importBase(c.store, rootfs.dir, workDir, u, hooks.signal), (b) =>
    `layer ${b.layers[0]?.digest.slice(0, 19) ?? '?'}… of ${fmtBytes(b.layerBytes)} (tree ${fmtBytes(rootfs.treeBytes)})`,
  )
  s.baseImage = base

  // 3 ---------------------------------------------------------------- toolkit
  hooks.onStage('toolkit')
  r.section(3, STAGES, `Toolkit ${ref(TOOLKIT_IMAGE)}: /opt/toolkit (stats.py, probe_write.py), a layer of kind toolkit`)
  const tk = await r.step(`build the tree and import it as ${ref(TOOLKIT_IMAGE)} (kind toolkit)`, (u) => importToolkit(c.store, workDir, u, hooks.signal), (t) =>
    `${t.files} files, layer ${fmtBytes(t.layerBytes)}`,
  )
  s.toolkit = tk
  r.line(`sandboxes stack them per create: base ${ref(BASE_IMAGE)} + toolkits [${ref(TOOLKIT_IMAGE)}], ${base.layers.length + tk.layers.length} layers, nothing copied`)

  // 4 ---------------------------------------------------------------- dataset
  hooks.onStage('dataset')
  const ds = makeDataset(o.sizeMiB)
  r.section(4, STAGES, `Dataset ${DATASET_DIR}: ${ds.files.size} files, ${fmtBytes(ds.bytes)}, published through the DFS file client`)
  let t = performance.now()
  await r.step(`write ${[...ds.files.keys()].join(', ')}`, (u) => publish(c.fs, ds, u), (n) => `${fmtBytes(n)}`)
  const publishMs = performance.now() - t
  t = performance.now()
  const mismatched = await r.step('read back and compare through the file client', (u) => readBack(c.fs, ds, u), (bad) => (bad.length ? `${bad.length} files differ` : 'every byte equal'))
  s.dataset = { path: DATASET_DIR, files: ds.files.size, bytes: ds.bytes, digest: ds.expected.digest, publishMs, readBackMs: performance.now() - t, mismatched }
  if (mismatched.length) throw new Error(`dataset files read back different from what was written: ${mismatched.join(', ')}`)
  r.line(`host's summary (what every sandbox must report): digest ${ds.expected.digest.slice(0, 16)}…`)
  r.table([['File', 'Size', 'Rows', 'sha256'], ...ds.expected.files.map((f) => [f.path, String(f.size), f.rows === undefined ? '-' : String(f.rows), `${f.sha256.slice(0, 16)}…`])])

  // 5 ---------------------------------------------------------------- sandboxes
  hooks.onStage('create sandboxes')
  r.section(5, STAGES, `Sandboxes: ${o.sandboxes} containers on ${ref(BASE_IMAGE)} + ${ref(TOOLKIT_IMAGE)}, ${DATASET_DIR} mounted read-only at ${DATA_TARGET} (SDK)`)
  const sandboxes: Sandbox[] = []
  const beforeCreate = await c.fuseBytesRead()
  const created = await r.step(
    `create ${o.sandboxes} (1 alone, then createMany)`,
    (u) => createSandboxes(c.strata, o.sandboxes, runId, u, (sb) => {
      sandboxes.push(sb)
      hooks.onSandbox(sb)
    }),
    (x) => `node-side p50 ${fmtMs(x.all.p50Ms)}, p99 ${fmtMs(x.all.p99Ms)}; 1st (cold) ${fmtMs(x.cold.wallMs)}${x.batch ? `; batch of ${x.batch.count} in ${fmtSecs(x.batch.wallMs)}` : ''}`,
  )
  s.create = created
  const afterCreate = await c.fuseBytesRead()
  const node = await c.strata.node()
  s.node = { running: node.sandboxes.running, layers: node.layers }
  r.line(`node: ${node.sandboxes.running} sandboxes running on ${node.layers.length} shared layer mounts (users per layer: ${node.layers.map((l) => l.users).join(', ')})`)
  r.line(`the FUSE daemon fetched ${fmtBytes(afterCreate - beforeCreate)} from the DFS for the creates; the image is ${fmtBytes(base.layerBytes + tk.layerBytes)}`)

  // 6 ---------------------------------------------------------------- run
  hooks.onStage('exec')
  r.section(6, STAGES, `Run: python3 in every sandbox, then ${STATS_PY} ${DATA_TARGET}, then the write probe`)
  const n = sandboxes.length
  t = performance.now()
  const firsts = await r.step(
    `first command: python3 -c 'import hashlib, json, …' in all ${n} at once (the interpreter comes lazily from the image)`,
    (u) => each(sandboxes, (sb) => runFirst(sb), (k) => u(`${k}/${n} done`)),
    (xs) => `python ${xs[0]?.python ?? '?'}; p50 ${fmtMs(summarize(xs.map((x) => x.firstExecMs)).p50Ms)}`,
  )
  const afterFirst = await c.fuseBytesRead()
  const stats = await r.step(
    `stats.py over ${DATA_TARGET} in all ${n} at once`,
    (u) => each(sandboxes, (sb) => runStats(sb, ds.expected), (k) => u(`${k}/${n} done`)),
    (xs) => `${xs.filter((x) => x.statsOk).length}/${xs.length} equal to the host's summary; p50 ${fmtMs(summarize(xs.map((x) => x.statsMs)).p50Ms)}`,
  )
  const afterStats = await c.fuseBytesRead()
  const probes = await r.step(
    `python3 ${PROBE_PY} ${DATA_TARGET} in all ${n} at once`,
    (u) => each(sandboxes, (sb) => runProbe(sb), (k) => u(`${k}/${n} done`)),
    (xs) => `${xs.filter((x) => x.probeOk).length}/${xs.length}: write to ${DATA_TARGET} refused (${xs[0]?.probe?.dataset ?? '?'}), /tmp writable`,
  )
  const execWall = performance.now() - t
  const afterProbe = await c.fuseBytesRead()
  const runs: SandboxRun[] = sandboxes.map((sb, i) => ({ id: sb.id, ...firsts[i]!, ...stats[i]!, ...probes[i]! }))
  s.exec = {
    runs,
    first: summarize(runs.map((x) => x.firstExecMs)),
    firstAgent: summarize(runs.map((x) => x.firstExecAgentMs)),
    stats: summarize(runs.map((x) => x.statsMs)),
    probe: summarize(runs.map((x) => x.probeMs)),
    wallMs: execWall,
    verified: runs.filter((x) => x.statsOk).length,
    probesOk: runs.filter((x) => x.probeOk).length,
  }
  const imageBytes = base.layerBytes + tk.layerBytes
  s.dfsBytes = {
    create: afterCreate - beforeCreate,
    firstExec: afterFirst - afterCreate,
    stats: afterStats - afterFirst,
    probe: afterProbe - afterStats,
    total: afterProbe - fuseBaseline,
    imageBytes,
    datasetBytes: ds.bytes,
  }
  r.table([
    ['Sandbox', 'python3', 'stats.py', 'python read /data', 'digest', 'equal', 'write /data', '/tmp'],
    ...runs.map((x) => [
      x.id,
      fmtMs(x.firstExecMs),
      fmtMs(x.statsMs),
      x.readMs === null ? '-' : fmtMs(x.readMs),
      x.digest ? `${x.digest.slice(0, 12)}…` : '-',
      x.statsOk ? 'yes' : 'NO',
      x.probe?.dataset ?? '-',
      x.probe?.tmp ?? '-',
    ]),
  ])
  const b = s.dfsBytes
  r.line(`fetched from the DFS by the FUSE daemon: ${fmtBytes(b.create + b.firstExec)} until python3 ran in all ${n} (${pct(b.create + b.firstExec, imageBytes)} of the ${fmtBytes(imageBytes)} image),`)
  r.line(`${fmtBytes(b.stats)} for stats.py (${(b.stats / ds.bytes).toFixed(1)}x the ${fmtBytes(ds.bytes)} dataset: an open of a FUSE file drops its cached pages, so`)
  r.line(`sandboxes reading /data at different times each fetch it), ${fmtBytes(b.probe)} for the probes`)
  const badStats = runs.filter((x) => !x.statsOk)
  if (badStats.length) throw new Error(`${badStats.length} sandboxes reported a different dataset summary; ${badStats[0]!.id}: ${badStats[0]!.differences.slice(0, 3).join('; ')}`)
  const badProbe = runs.filter((x) => !x.probeOk)
  if (badProbe.length) throw new Error(`the write probe failed in ${badProbe.length} sandboxes; ${badProbe[0]!.id}: ${JSON.stringify(badProbe[0]!.probe)}`)

  // 7 ---------------------------------------------------------------- delete
  hooks.onStage('delete sandboxes')
  r.section(7, STAGES, 'Delete: every sandbox (its container, overlay rootfs and dataset bind)')
  t = performance.now()
  const lat = await r.step(
    `delete all ${sandboxes.length} at once`,
    (u) => each(sandboxes, async (sb) => {
      const t1 = performance.now()
      await sb.delete()
      hooks.onDeleted(sb.id)
      return performance.now() - t1
    }, (n) => u(`${n}/${sandboxes.length} deleted`)),
    (xs) => `p50 ${fmtMs(summarize(xs).p50Ms)}, p99 ${fmtMs(summarize(xs).p99Ms)}`,
  )
  const deleteWall = performance.now() - t
  const after = await c.strata.node()
  const leftLayers = after.layers.filter((l) => l.users > 0).length
  const leftSandboxes = after.sandboxes.running + after.sandboxes.creating + after.sandboxes.stopped + (after.sandboxes.deleting ?? 0)
  s.delete = { count: lat.length, latency: summarize(lat), wallMs: deleteWall, left: { sandboxes: leftSandboxes, layers: leftLayers } }
  r.line(`node after the deletes: ${leftSandboxes} sandboxes, ${after.layers.length} layer mounts (${leftLayers} in use)`)
  if (leftSandboxes || leftLayers) throw new Error(`after deleting every sandbox the node still has ${leftSandboxes} sandboxes and ${leftLayers} layer mounts in use`)
}
