// Everything the demo measured, filled in stage by stage, printed at the end
// as a table (or as JSON with --json). A failed run still reports what it
// measured before the failure.

import type { ImportFigures } from './images.js'
import type { LatencySummary } from './latency.js'
import { fmtBytes, fmtMs, fmtSecs, round } from './report.js'
import type { CreateFigures, SandboxRun } from './sandboxes.js'

export interface Summary {
  ok: boolean
  interrupted: boolean
  /** notRunning: cluster processes found dead when the failure was handled */
  error: { stage: string; message: string; notRunning?: string[] } | null
  dir: string | null
  kept: boolean
  options: { sandboxes: number; sizeMiB: number }
  cluster: {
    upMs: number
    storageNodes: number
    replicas: number
    chains: number
    processes: Array<{ name: string; role: string; nodeId: number; address: string; pid: number | null }>
  } | null
  rootfs: { dir: string; cached: boolean; buildMs: number; ms: number; treeBytes: number; files: number; packages: string[] } | null
  baseImage: ImportFigures | null
  toolkit: (ImportFigures & { files: number; treeBytes: number }) | null
  dataset: { path: string; files: number; bytes: number; digest: string; publishMs: number; readBackMs: number; mismatched: string[] } | null
  create: CreateFigures | null
  /** the node after the creates: layer mounts shared by the sandboxes */
  node: { running: number; layers: Array<{ digest: string; users: number }> } | null
  exec: {
    runs: SandboxRun[]
    first: LatencySummary
    firstAgent: LatencySummary
    stats: LatencySummary
    probe: LatencySummary
    wallMs: number
    verified: number
    probesOk: number
  } | null
  /** bytes the node's FUSE daemon read from the DFS */
  dfsBytes: { create: number; firstExec: number; stats: number; probe: number; total: number; imageBytes: number; datasetBytes: number } | null
  delete: { count: number; latency: LatencySummary; wallMs: number; left: { sandboxes: number; layers: number } } | null
  teardown: { ms: number; dirRemoved: boolean; sandboxesDeleted: number } | null
  totalMs: number
}

export function emptySummary(o: { sandboxes: number; sizeMiB: number; keep: boolean }): Summary {
  return {
    ok: false,
    interrupted: false,
    error: null,
    dir: null,
    kept: o.keep,
    options: { sandboxes: o.sandboxes, sizeMiB: o.sizeMiB },
    cluster: null,
    rootfs: null,
    baseImage: null,
    toolkit: null,
    dataset: null,
    create: null,
    node: null,
    exec: null,
    dfsBytes: null,
    delete: null,
    teardown: null,
    totalMs: 0,
  }
}

const ms = (v: number | null | undefined) => (v == null || !Number.isFinite(v) ? null : round(v, 1))
const lat = (l: LatencySummary | null | undefined) => l && { count: l.count, p50Ms: ms(l.p50Ms), p99Ms: ms(l.p99Ms), maxMs: ms(l.maxMs), meanMs: ms(l.meanMs) }

/** The --json document: stable field names, times in ms, sizes in bytes. */
export function summaryJson(s: Summary): Record<string, unknown> {
  const c = s.create
  const e = s.exec
  return {
    ok: s.ok,
    interrupted: s.interrupted,
    error: s.error,
    dir: s.dir,
    kept: s.kept,
    options: s.options,
    cluster: s.cluster && { ...s.cluster, upMs: ms(s.cluster.upMs) },
    rootfs: s.rootfs && { ...s.rootfs, buildMs: ms(s.rootfs.buildMs), ms: ms(s.rootfs.ms) },
    baseImage: s.baseImage && { ...s.baseImage, ms: ms(s.baseImage.ms) },
    toolkit: s.toolkit && { ...s.toolkit, ms: ms(s.toolkit.ms) },
    dataset: s.dataset && { ...s.dataset, publishMs: ms(s.dataset.publishMs), readBackMs: ms(s.dataset.readBackMs), verified: s.dataset.mismatched.length === 0 },
    create: c && {
      count: c.all.count,
      coldWallMs: ms(c.cold.wallMs),
      coldNodeMs: ms(c.cold.nodeMs),
      batch: c.batch && { count: c.batch.count, wallMs: ms(c.batch.wallMs), perSec: round(c.batch.perSec, 2), failed: c.batch.failed, node: lat(c.batch.node) },
      node: lat(c.all),
    },
    node: s.node,
    exec: e && {
      sandboxes: e.runs.length,
      verified: e.verified,
      probesOk: e.probesOk,
      wallMs: ms(e.wallMs),
      firstExec: lat(e.first),
      firstExecAgent: lat(e.firstAgent),
      statsExec: lat(e.stats),
      probeExec: lat(e.probe),
      runs: e.runs.map((r) => ({
        id: r.id,
        firstExecMs: ms(r.firstExecMs),
        firstExecAgentMs: ms(r.firstExecAgentMs),
        statsMs: ms(r.statsMs),
        readMs: ms(r.readMs),
        digest: r.digest,
        python: r.python,
        statsOk: r.statsOk,
        differences: r.differences,
        probeMs: ms(r.probeMs),
        probe: r.probe,
        probeOk: r.probeOk,
      })),
    },
    dfsBytes: s.dfsBytes,
    delete: s.delete && { count: s.delete.count, wallMs: ms(s.delete.wallMs), latency: lat(s.delete.latency), left: s.delete.left },
    teardown: s.teardown && { ms: ms(s.teardown.ms), dirRemoved: s.teardown.dirRemoved, sandboxesDeleted: s.teardown.sandboxesDeleted },
    totalMs: ms(s.totalMs),
  }
}

const p50p99 = (l: LatencySummary) => `p50 ${fmtMs(l.p50Ms)}, p99 ${fmtMs(l.p99Ms)}`
const pct = (part: number, whole: number) => (whole > 0 ? `${((part / whole) * 100).toFixed(1)}%` : 'n/a')

/** Rows [stage, measure, value] of the final table. */
export function summaryRows(s: Summary): string[][] {
  const rows: string[][] = [['Stage', 'Measure', 'Value']]
  const add = (stage: string, measure: string, value: string) => rows.push([stage, measure, value])
  if (s.cluster) add('cluster', `up: mgmtd, ${s.cluster.storageNodes} storage, meta, FUSE, sandbox daemon`, fmtSecs(s.cluster.upMs))
  if (s.rootfs) {
    add(
      'base image',
      `Debian ${s.rootfs.packages.join(' ')} rootfs (debootstrap minbase)`,
      `${s.rootfs.cached ? 'cached' : `built in ${fmtSecs(s.rootfs.buildMs)}`}: ${fmtBytes(s.rootfs.treeBytes)}, ${s.rootfs.files} files`,
    )
  }
  if (s.baseImage) add('base image', `import ${s.baseImage.ref} (mkfs.erofs + DFS)`, `${fmtSecs(s.baseImage.ms)}: ${s.baseImage.layers.length} layer, ${fmtBytes(s.baseImage.layerBytes)}`)
  if (s.toolkit) add('toolkit', `build + import ${s.toolkit.ref}`, `${fmtSecs(s.toolkit.ms)}: ${s.toolkit.files} files, layer ${fmtBytes(s.toolkit.layerBytes)}`)
  if (s.dataset) {
    add('dataset', `publish ${s.dataset.path} (${s.dataset.files} files)`, `${fmtSecs(s.dataset.publishMs)}: ${fmtBytes(s.dataset.bytes)}`)
    add('dataset', 'read back through the file client', `${fmtSecs(s.dataset.readBackMs)}: ${s.dataset.mismatched.length ? `${s.dataset.mismatched.length} files DIFFER` : 'equal'}`)
  }
  const c = s.create
  if (c) {
    add('create', '1st sandbox, cold node (mounts the layers)', `${fmtMs(c.cold.wallMs)} (node ${fmtMs(c.cold.nodeMs)})`)
    if (c.batch) {
      add('create', `createMany(${c.batch.count}), node-side per sandbox`, p50p99(c.batch.node))
      add('create', `createMany(${c.batch.count}), whole batch`, `${fmtSecs(c.batch.wallMs)} (${c.batch.perSec.toFixed(1)} creates/s)`)
    }
  }
  if (s.node) add('create', 'layer mounts on the node', `${s.node.layers.length} (users: ${s.node.layers.map((l) => l.users).join(', ')}) for ${s.node.running} sandboxes`)
  const e = s.exec
  if (e) {
    add('exec', `first exec: python3 -c 'import hashlib, json…', all ${e.runs.length} at once`, `${p50p99(e.first)} (agent ${p50p99(e.firstAgent)})`)
    add('exec', 'exec: stats.py over /data', `${p50p99(e.stats)}; equal to the host's summary in ${e.verified}/${e.runs.length}`)
    add('exec', 'exec: write probe (/data EROFS, /tmp writable)', `${p50p99(e.probe)}; ${e.probesOk}/${e.runs.length} as expected`)
  }
  const b = s.dfsBytes
  if (b) {
    add('DFS bytes', 'fetched by the FUSE daemon for the creates', `${fmtBytes(b.create)} (${pct(b.create, b.imageBytes)} of the ${fmtBytes(b.imageBytes)} image)`)
    add('DFS bytes', '... for the first execs (python3 from the image)', `${fmtBytes(b.firstExec)} (${pct(b.firstExec, b.imageBytes)} of the image)`)
    add('DFS bytes', '... for stats.py (the dataset, /data)', `${fmtBytes(b.stats)} (${(b.stats / b.datasetBytes).toFixed(1)}x the ${fmtBytes(b.datasetBytes)} dataset)`)
    add('DFS bytes', '... for the probes', fmtBytes(b.probe))
    add('DFS bytes', 'total for the batch', fmtBytes(b.total))
  }
  if (s.delete) add('delete', `${s.delete.count} sandboxes, all at once`, `${p50p99(s.delete.latency)}; ${fmtSecs(s.delete.wallMs)} in all, ${s.delete.left.sandboxes} sandboxes and ${s.delete.left.layers} layer mounts left`)
  if (s.teardown) add('teardown', `cluster down${s.teardown.dirRemoved ? ' + remove dir' : ''}`, fmtSecs(s.teardown.ms))
  add('total', 'wall time', fmtSecs(s.totalMs))
  return rows
}
