// The demo's stages in order. Each fills its part of the summary and throws
// on a failed check; demo.ts owns the process (signals, teardown, exit code).

import { formatTable } from '../../fs/admin/index.js'
import { chunkIdOf } from '../../fs/common/chunk-id.js'
import { bringUp, chainListing, CHUNK_SIZE, REPLICAS, STORAGE_NODES, type DemoCluster } from './cluster.js'
import { BULK_INODE, BULK_WRITE_PARALLEL, SMALL_INODE, chainFor, readBulk, smallBurst, verifySmall, writeBulk } from './data.js'
import { chooseVictim, runFailover, runRecovery } from './failover.js'
import { compareAllReplicas, queryReplicas, replicaTable } from './replicas.js'
import { fmtBytes, fmtMBps, fmtMs, mbps, type Reporter } from './report.js'
import type { Summary } from './summary.js'
import { BackgroundWriter } from './writer.js'

export const STAGES = 6

/**
 * Small-write bursts, bounded in count and time: chunks [0, 2) get the
 * one-at-a-time writes, [2, 18) the parallel ones (one chunk per write in
 * flight, as independent writers would).
 */
const QD1 = { writes: 500, maxMs: 2500, parallel: 1, firstChunk: 0, nChunks: 2 }
const QD16 = { writes: 4096, maxMs: 4000, parallel: 16, firstChunk: 2, nChunks: 16 }

/** Writer used across failover and recovery. */
const WRITER = { loops: 4, blockSize: 32 * 1024, ratePerSec: 200 }

export interface StageHooks {
  /** called as soon as the cluster handles exist, so teardown can close them */
  onCluster(c: DemoCluster): void
  /** the stage now running (for the failure message) */
  onStage(name: string): void
}

export async function runStages(dir: string, sizeMiB: number, r: Reporter, s: Summary, hooks: StageHooks): Promise<void> {
  hooks.onStage('cluster up')
  r.section(1, STAGES, `Cluster: mgmtd + ${STORAGE_NODES} storage nodes, 2 chains x ${REPLICAS} replicas, ${fmtBytes(CHUNK_SIZE)} chunks (strata cluster up)`)
  const c = await bringUp(dir, r)
  hooks.onCluster(c)
  s.cluster = {
    dir,
    upMs: c.upMs,
    storageNodes: STORAGE_NODES,
    replicas: REPLICAS,
    chunkSize: c.chunkSize,
    chains: c.chains,
    processes: c.file.processes.map((p) => ({ name: p.name, role: p.role, nodeId: p.nodeId, address: p.address, pid: p.pid })),
  }
  r.line(`cluster ready in ${(c.upMs / 1000).toFixed(1)}s at ${dir}`)
  r.block(formatTable([['Name', 'Role', 'NodeId', 'Address', 'Pid'], ...c.file.processes.map((p) => [p.name, p.role, String(p.nodeId), p.address, String(p.pid)])]))
  r.line('chains (admin list-chains):')
  r.block((await chainListing(c)).text)

  hooks.onStage('data path')
  await dataPath(c, sizeMiB, r, s)

  hooks.onStage('replication')
  await replication(c, r, s)

  hooks.onStage('failover')
  r.section(4, STAGES, 'Failover: SIGKILL a storage node while a writer runs')
  const victim = await chooseVictim(c)
  const writer = new BackgroundWriter(c, WRITER)
  try {
    s.failover = await runFailover(c, r, writer, victim)
    hooks.onStage('recovery')
    r.section(5, STAGES, `Recovery: restart ${victim.proc.name}, resync, replicas equal again`)
    s.recovery = await runRecovery(c, r, writer, victim)
  } finally {
    await writer.stop()
  }
}

async function dataPath(c: DemoCluster, sizeMiB: number, r: Reporter, s: Summary): Promise<void> {
  const chunks = Math.ceil((sizeMiB * 1024 * 1024) / c.chunkSize)
  const bytes = chunks * c.chunkSize
  r.section(2, STAGES, `Data path: ${fmtBytes(bytes)} in ${fmtBytes(c.chunkSize)} chunks, then 4 KiB writes, through StorageClient`)
  const writeMs = await r.step(
    `write ${chunks} x ${fmtBytes(c.chunkSize)} chunks round-robin over ${c.chains.length} chains (${BULK_WRITE_PARALLEL} in flight)`,
    (u) => writeBulk(c, chunks, u),
    (ms) => fmtMBps(mbps(bytes, ms)),
  )
  const read = await r.step(
    `read back and compare ${chunks} chunks`,
    (u) => readBulk(c, chunks, u),
    (x) => `${fmtMBps(mbps(bytes, x.ms))}, ${chunks - x.mismatched.length}/${chunks} equal`,
  )
  s.bulk = { chunks, bytes, parallel: BULK_WRITE_PARALLEL, writeMs, writeMBps: mbps(bytes, writeMs), readMs: read.ms, readMBps: mbps(bytes, read.ms), mismatchedChunks: read.mismatched.length }
  if (read.mismatched.length) throw new Error(`${read.mismatched.length} bulk chunks read back different from what was written (first: chunk ${read.mismatched[0]})`)

  const qd1 = await r.step(`4 KiB writes, 1 in flight`, (u) => smallBurst(c, QD1, u), (b) => `${b.writes} writes, p50 ${fmtMs(b.latency.p50Ms)}, p99 ${fmtMs(b.latency.p99Ms)}`)
  const qd16 = await r.step(`4 KiB writes, ${QD16.parallel} in flight`, (u) => smallBurst(c, QD16, u), (b) =>
    `${b.writes} writes, ${Math.round(b.iops)} IOPS, p50 ${fmtMs(b.latency.p50Ms)}, p99 ${fmtMs(b.latency.p99Ms)}`,
  )
  const v = await r.step(
    'read back and compare the 4 KiB writes',
    async () => {
      const a = await verifySmall(c, { ...QD1, writes: qd1.writes })
      const b = await verifySmall(c, { ...QD16, writes: qd16.writes })
      return { blocks: a.blocks + b.blocks, mismatched: a.mismatched + b.mismatched }
    },
    (x) => `${x.blocks - x.mismatched}/${x.blocks} blocks equal`,
  )
  s.small = { qd1, qd16, verifiedBlocks: v.blocks, mismatchedBlocks: v.mismatched }
  if (v.mismatched) throw new Error(`${v.mismatched} of ${v.blocks} 4 KiB blocks read back different from what was written`)
}

async function replication(c: DemoCluster, r: Reporter, s: Summary): Promise<void> {
  r.section(3, STAGES, 'Replication: every replica asked directly (queryChunk to each target\'s node)')
  const picks = [
    { inode: BULK_INODE, index: 0, what: 'bulk chunk, written once' },
    { inode: BULK_INODE, index: 1, what: 'bulk chunk, written once' },
    { inode: SMALL_INODE, index: QD16.firstChunk, what: `${Math.ceil((s.small?.qd16.writes ?? 0) / QD16.nChunks)} x 4 KiB writes` },
  ]
  const samples = []
  for (const p of picks) {
    const chainId = chainFor(c.chains, p.index)
    const sample = await queryReplicas(c, chainId, chunkIdOf(p.inode, p.index))
    samples.push(sample)
    r.line(`chunk ${sample.chunk} (${p.what}) on chain ${chainId}: ${sample.equal ? 'equal on every replica' : 'REPLICAS DIFFER'}`)
    r.table(replicaTable(sample))
  }
  const check = await r.step('compare the chunk metadata of every target (getAllChunkMetadata)', () => compareAllReplicas(c), (x) =>
    x.equal ? `${x.chunks} chunks identical on all ${x.replicas} replicas of ${x.chains} chains` : `${x.differences.length}+ differences`,
  )
  s.replication = { samples, check }
  const bad = samples.filter((x) => !x.equal)
  if (bad.length) throw new Error(`replicas differ for ${bad.map((x) => `${x.chunk} on chain ${x.chainId}`).join(', ')}`)
  if (!check.equal) throw new Error(`replicas differ: ${check.differences.join('; ')}`)
}
