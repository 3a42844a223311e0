// Everything the demo measured, filled in stage by stage, printed at the end
// as a table (or as JSON with --json). A failed run still reports what it
// measured before the failure.

import type { ReplicaCheck, ReplicaSample } from './replicas.js'
import type { FailoverResult, RecoveryResult } from './failover.js'
import type { SmallBurst } from './data.js'
import { fmtBytes, fmtMBps, fmtMs, fmtSecs, round } from './report.js'

export interface ClusterFigures {
  dir: string
  upMs: number
  storageNodes: number
  replicas: number
  chunkSize: number
  chains: number[]
  /** processes as started by cluster up (the restarted one gets a new pid, see recovery.pid) */
  processes: Array<{ name: string; role: string; nodeId: number; address: string; pid: number | null }>
}

export interface BulkFigures {
  chunks: number
  bytes: number
  parallel: number
  writeMs: number
  writeMBps: number
  readMs: number
  readMBps: number
  mismatchedChunks: number
}

export interface SmallFigures {
  qd1: SmallBurst
  qd16: SmallBurst
  verifiedBlocks: number
  mismatchedBlocks: number
}

export interface Summary {
  ok: boolean
  interrupted: boolean
  /** notRunning: cluster processes found dead when the failure was handled */
  error: { stage: string; message: string; notRunning?: string[] } | null
  sizeMiB: number
  dir: string | null
  kept: boolean
  cluster: ClusterFigures | null
  bulk: BulkFigures | null
  small: SmallFigures | null
  replication: { samples: ReplicaSample[]; check: ReplicaCheck } | null
  failover: FailoverResult | null
  recovery: RecoveryResult | null
  teardown: { ms: number; dirRemoved: boolean } | null
  totalMs: number
}

export function emptySummary(sizeMiB: number, kept: boolean): Summary {
  return {
    ok: false,
    interrupted: false,
    error: null,
    sizeMiB,
    dir: null,
    kept,
    cluster: null,
    bulk: null,
    small: null,
    replication: null,
    failover: null,
    recovery: null,
    teardown: null,
    totalMs: 0,
  }
}

const ms = (v: number | null | undefined) => (v == null ? null : round(v, 1))

/** The --json document: stable field names, times in ms, rates in decimal MB/s. */
export function summaryJson(s: Summary): Record<string, unknown> {
  const f = s.failover
  const rc = s.recovery
  return {
    ok: s.ok,
    interrupted: s.interrupted,
    error: s.error,
    sizeMiB: s.sizeMiB,
    dir: s.dir,
    kept: s.kept,
    cluster: s.cluster && { ...s.cluster, upMs: ms(s.cluster.upMs) },
    bulk: s.bulk && {
      chunks: s.bulk.chunks,
      bytes: s.bulk.bytes,
      parallel: s.bulk.parallel,
      writeMs: ms(s.bulk.writeMs),
      writeMBps: round(s.bulk.writeMBps, 1),
      readMs: ms(s.bulk.readMs),
      readMBps: round(s.bulk.readMBps, 1),
      verified: s.bulk.mismatchedChunks === 0,
      mismatchedChunks: s.bulk.mismatchedChunks,
    },
    smallWrites: s.small && {
      blockSize: 4096,
      qd1: burstJson(s.small.qd1),
      qd16: burstJson(s.small.qd16),
      verifiedBlocks: s.small.verifiedBlocks,
      mismatchedBlocks: s.small.mismatchedBlocks,
    },
    replication: s.replication && {
      replicasEqual: s.replication.check.equal && s.replication.samples.every((x) => x.equal),
      chunksCompared: s.replication.check.chunks,
      replicas: s.replication.check.replicas,
      differences: s.replication.check.differences,
      samples: s.replication.samples.map((x) => ({ chainId: x.chainId, chunk: x.chunk, equal: x.equal, replicas: x.rows })),
    },
    failover: f && {
      victim: f.victim,
      victimPid: f.victimPid,
      victimTargets: f.victimTargets,
      nodeFailedAfterMs: ms(f.nodeFailedAfterMs),
      chainsUpdatedAfterMs: ms(f.chainsUpdatedAfterMs),
      chainVersions: f.chainVersions,
      writes: f.writes.writes,
      writesAcknowledged: f.writes.acknowledged,
      writesFailed: f.writes.failed,
      maxAckGapMs: ms(f.writes.maxAckGapMs),
      maxWriteLatencyMs: ms(f.writes.maxLatencyMs),
      p50WriteLatencyMs: ms(f.writes.p50Ms),
      acknowledgedWritesChecked: f.verify.acknowledged,
      lostWrites: f.verify.lost,
      chainsBefore: f.chainsBefore,
      chainsAfter: f.chainsAfter,
      timeline: f.timeline.map((e) => ({ atMs: ms(e.atMs), event: e.text })),
    },
    recovery: rc && {
      pid: rc.pid,
      connectedAfterMs: ms(rc.connectedAfterMs),
      syncingAfterMs: ms(rc.syncingAfterMs),
      servingAfterMs: ms(rc.servingAfterMs),
      resyncJobs: rc.resync.jobs,
      resyncChunks: rc.resync.chunksSent,
      resyncChunksRemoved: rc.resync.chunksRemoved,
      resyncBytes: rc.resync.bytesSent,
      resyncFailures: rc.resync.failures,
      resyncMBps: rc.resync.mbps === null ? null : round(rc.resync.mbps, 1),
      writes: rc.writes.writes,
      writesAcknowledged: rc.writes.acknowledged,
      writesFailed: rc.writes.failed,
      maxWriteLatencyMs: ms(rc.writes.maxLatencyMs),
      acknowledgedWritesChecked: rc.verify.acknowledged,
      lostWrites: rc.verify.lost,
      replicasEqual: rc.replicas.equal,
      chunksCompared: rc.replicas.chunks,
      differences: rc.replicas.differences,
      chainsAfter: rc.chainsAfter,
      timeline: rc.timeline.map((e) => ({ atMs: ms(e.atMs), event: e.text })),
    },
    teardown: s.teardown && { ms: ms(s.teardown.ms), dirRemoved: s.teardown.dirRemoved },
    totalMs: ms(s.totalMs),
  }
}

function burstJson(b: SmallBurst): Record<string, number> {
  return {
    writes: b.writes,
    parallel: b.parallel,
    ms: round(b.ms, 1),
    iops: Math.round(b.iops),
    p50Ms: round(b.latency.p50Ms, 3),
    p99Ms: round(b.latency.p99Ms, 3),
    maxMs: round(b.latency.maxMs, 3),
  }
}

const secs = (v: number | null | undefined) => (v == null ? 'not observed' : `${(v / 1000).toFixed(2)} s`)

/** Rows [stage, measure, value] of the final table. */
export function summaryRows(s: Summary): string[][] {
  const rows: string[][] = [['Stage', 'Measure', 'Value']]
  const add = (stage: string, measure: string, value: string) => rows.push([stage, measure, value])
  const c = s.cluster
  if (c) add('cluster', `up: mgmtd + ${c.storageNodes} storage, ${c.chains.length} chains x ${c.replicas}`, fmtSecs(c.upMs))
  const b = s.bulk
  if (b) {
    add('data', `bulk write, ${b.chunks} x ${fmtBytes(b.bytes / b.chunks)} chunks, ${b.parallel} in flight`, `${fmtMBps(b.writeMBps)} (${fmtSecs(b.writeMs)})`)
    add('data', 'bulk read back + compare', `${fmtMBps(b.readMBps)} (${fmtSecs(b.readMs)}), ${b.chunks - b.mismatchedChunks}/${b.chunks} chunks equal`)
  }
  const sm = s.small
  if (sm) {
    add('data', `4 KiB write latency, 1 in flight (${sm.qd1.writes} writes)`, `p50 ${fmtMs(sm.qd1.latency.p50Ms)}, p99 ${fmtMs(sm.qd1.latency.p99Ms)}`)
    add('data', `4 KiB writes, ${sm.qd16.parallel} in flight (${sm.qd16.writes} writes)`, `${Math.round(sm.qd16.iops)} IOPS, p50 ${fmtMs(sm.qd16.latency.p50Ms)}, p99 ${fmtMs(sm.qd16.latency.p99Ms)}`)
    add('data', '4 KiB writes read back + compare', `${sm.verifiedBlocks - sm.mismatchedBlocks}/${sm.verifiedBlocks} blocks equal`)
  }
  const rp = s.replication
  if (rp) {
    add('replication', 'sampled chunks, queryChunk on every replica', `${rp.samples.filter((x) => x.equal).length}/${rp.samples.length} equal`)
    add('replication', 'chunk metadata of every target compared', rp.check.equal ? `${rp.check.chunks} chunks identical on ${rp.check.replicas} replicas` : `${rp.check.differences.length}+ differences`)
  }
  const f = s.failover
  if (f) {
    add('failover', 'SIGKILL', `${f.victim} (${f.victimTargets.map((t) => `${t.role} of ${t.chainId}`).join(', ')})`)
    add('failover', 'node HEARTBEAT_FAILED after', secs(f.nodeFailedAfterMs))
    add('failover', 'targets OFFLINE, moved to chain end after', secs(f.chainsUpdatedAfterMs))
    add('failover', 'chain versions', f.chainVersions.map((v) => `${v.before}→${v.after}`).join(', '))
    add('failover', 'writes from the kill on: acknowledged / failed', `${f.writes.acknowledged} / ${f.writes.failed}`)
    add('failover', 'longest pause between acknowledgements', fmtMs(f.writes.maxAckGapMs))
    add('failover', 'max write latency / p50', `${fmtMs(f.writes.maxLatencyMs)} / ${fmtMs(f.writes.p50Ms)}`)
    add('failover', 'acknowledged writes lost', `${f.verify.lost} of ${f.verify.acknowledged}`)
  }
  const rc = s.recovery
  if (rc) {
    add('recovery', 'restarted, HEARTBEAT_CONNECTED after', secs(rc.connectedAfterMs))
    add('recovery', 'first target SYNCING after', secs(rc.syncingAfterMs))
    add('recovery', 'all chains SERVING after', secs(rc.servingAfterMs))
    add('recovery', 'resynced', `${rc.resync.chunksSent} chunks, ${fmtBytes(rc.resync.bytesSent)}${rc.resync.mbps !== null ? ` (${fmtMBps(rc.resync.mbps)})` : ''}`)
    add('recovery', 'writes meanwhile: acknowledged / failed', `${rc.writes.acknowledged} / ${rc.writes.failed}, max latency ${fmtMs(rc.writes.maxLatencyMs)}`)
    add('recovery', 'acknowledged writes lost (all stages)', `${rc.verify.lost} of ${rc.verify.acknowledged}`)
    add('recovery', 'replicas equal again', rc.replicas.equal ? `yes, ${rc.replicas.chunks} chunks` : 'NO')
  }
  if (s.teardown) add('teardown', `cluster down${s.teardown.dirRemoved ? ' + remove dir' : ''}`, fmtSecs(s.teardown.ms))
  add('total', 'wall time', fmtSecs(s.totalMs))
  return rows
}
