// Stages 4 and 5: SIGKILL a storage node while the background writer runs,
// watch mgmtd take its targets out of the chains, check that every
// acknowledged write survived; then restart it (`cluster start --node`),
// watch SYNCING → SERVING, count what the resync moved, and check that the
// replicas agree again.

import { setTimeout as sleep } from 'node:timers/promises'
import { clusterKill, clusterStart, type ClusterProcess } from '../../fs/admin/index.js'
import type { RoutingInfo } from '../../fs/common/types.js'
import type { ResyncStats } from '../../fs/storage/resync.js'
import { allServing, chainListing, routing, storageProcesses, waitRouting, type DemoCluster } from './cluster.js'
import { compareAllReplicas, type ReplicaCheck } from './replicas.js'
import { fmtBytes, fmtMBps, fmtMs, fmtOffset, fmtSecs, mbps, type Reporter } from './report.js'
import { windowStats, type BackgroundWriter, type VerifyResult, type WindowStats } from './writer.js'

export interface TimelineEvent {
  atMs: number
  text: string
}

/**
 * Polls routing info and reports every change of the victim node's status and
 * of its targets' public/local state, position and chain version, relative to
 * a time zero. Remembers when each state was first seen.
 */
export class StateWatcher {
  readonly events: TimelineEvent[] = []
  private readonly first = new Map<string, number>()
  private readonly last = new Map<string, string>()
  private timer: Promise<void> | null = null
  private stopped = false

  constructor(
    private readonly c: DemoCluster,
    private readonly nodeId: number,
    private readonly targetIds: number[],
    private readonly t0: number,
    private readonly onEvent: (e: TimelineEvent) => void,
  ) {}

  /** Takes the baseline (not reported), then polls every `everyMs`. */
  async start(everyMs = 50): Promise<void> {
    this.observe(await routing(this.c), false)
    this.timer = (async () => {
      while (!this.stopped) {
        await sleep(everyMs)
        try {
          this.observe(await routing(this.c), true)
        } catch {
          // mgmtd busy: next poll
        }
      }
    })()
  }

  async stop(): Promise<void> {
    this.stopped = true
    await this.timer
  }

  /** Reports the current state now (so events print before the step that waited for them ends). */
  async sync(): Promise<void> {
    try {
      this.observe(await routing(this.c), true)
    } catch {
      // reported by the next poll
    }
  }

  /** ms after time zero when `key` (`node:STATUS`, `target:ID:PUBLIC`) was first seen; null if never. */
  firstSeen(key: string): number | null {
    return this.first.get(key) ?? null
  }

  private note(key: string, value: string, text: string, report: boolean): void {
    const at = performance.now() - this.t0
    if (!this.first.has(`${key}:${value}`)) this.first.set(`${key}:${value}`, at)
    if (this.last.get(key) === value) return
    this.last.set(key, value)
    if (!report) return
    const e = { atMs: at, text }
    this.events.push(e)
    this.onEvent(e)
  }

  private observe(ri: RoutingInfo, report: boolean): void {
    const node = ri.nodes[String(this.nodeId)]
    const status = node?.status ?? 'UNKNOWN'
    this.note('node', status, `node ${this.nodeId} ${status}`, report)
    for (const id of this.targetIds) {
      const t = ri.targets[String(id)]
      const chain = t ? ri.chains[String(t.chainId)] : undefined
      if (!t || !chain) continue
      const pos = chain.targets.findIndex((x) => x.targetId === id)
      const pub = pos >= 0 ? chain.targets[pos]!.publicState : t.publicState
      this.note(`target:${id}`, pub, '', false)
      const value = `${pub}-${t.localState}@${pos + 1}/${chain.targets.length}v${chain.chainVersion}`
      this.note(`targetfull:${id}`, value, `target ${id} ${pub}-${t.localState}, position ${pos + 1}/${chain.targets.length} of chain ${chain.chainId} (v${chain.chainVersion})`, report)
    }
  }
}

export interface Victim {
  proc: ClusterProcess
  nodeId: number
  /** targets on the node, with their chain and role before the kill */
  targets: Array<{ targetId: number; chainId: number; role: string }>
}

/** The node holding the head of the first chain: it is a head in one chain and a tail in the other. */
export async function chooseVictim(c: DemoCluster): Promise<Victim> {
  const ri = await routing(c)
  const head = ri.chains[String(c.chains[0])]!.targets[0]!.targetId
  const nodeId = ri.targets[String(head)]!.nodeId
  const proc = storageProcesses(c).find((p) => p.nodeId === nodeId)
  if (!proc) throw new Error(`no storage process for node ${nodeId}`)
  const targets = Object.values(ri.targets)
    .filter((t) => t.nodeId === nodeId)
    .map((t) => {
      const ch = ri.chains[String(t.chainId)]!
      const i = ch.targets.findIndex((x) => x.targetId === t.targetId)
      return { targetId: t.targetId, chainId: t.chainId, role: i === 0 ? 'head' : i === ch.targets.length - 1 ? 'tail' : 'middle' }
    })
    .sort((a, b) => a.chainId - b.chainId)
  return { proc, nodeId, targets }
}

/** The victim's targets are OFFLINE at the end of their chains and every other target serves. */
function victimMovedOut(ri: RoutingInfo, v: Victim): boolean {
  return v.targets.every(({ targetId, chainId }) => {
    const ch = ri.chains[String(chainId)]
    if (!ch) return false
    const last = ch.targets[ch.targets.length - 1]!
    const others = ch.targets.filter((t) => t.targetId !== targetId)
    return last.targetId === targetId && last.publicState === 'OFFLINE' && others.every((t) => t.publicState === 'SERVING')
  })
}

export interface FailoverResult {
  victim: string
  victimPid: number
  victimTargets: Array<{ targetId: number; chainId: number; role: string }>
  chainsBefore: string
  chainsAfter: string
  chainVersions: Array<{ chainId: number; before: number; after: number }>
  /** kill → mgmtd reports the node HEARTBEAT_FAILED */
  nodeFailedAfterMs: number | null
  /** kill → every victim target OFFLINE at the end of its chain */
  chainsUpdatedAfterMs: number
  writes: WindowStats
  verify: VerifyResult
  timeline: TimelineEvent[]
}

const WARMUP_WRITES = 40
const AFTER_FAILOVER_MS = 1500

export async function runFailover(c: DemoCluster, r: Reporter, writer: BackgroundWriter, v: Victim): Promise<FailoverResult> {
  const roles = v.targets.map((t) => `${t.role} of chain ${t.chainId}`).join(', ')
  r.line(`victim: ${v.proc.name} (node ${v.nodeId}, pid ${v.proc.pid}), ${roles}`)
  const before = await chainListing(c)
  r.line('chains before (admin list-chains):')
  r.block(before.text)

  await r.step(
    `writer running: ${writer.o.loops} loops of ${fmtBytes(writer.o.blockSize)} writes, ~${writer.o.ratePerSec}/s`,
    async (update) => {
      writer.start()
      const end = Date.now() + 10_000
      while (writer.acknowledged() < WARMUP_WRITES) {
        if (Date.now() > end) throw new Error('the writer did not get going (no writes acknowledged in 10 s)')
        await sleep(25)
        update(`${writer.acknowledged()} acknowledged`)
      }
    },
    () => `${writer.acknowledged()} acknowledged`,
  )

  const tKill = performance.now()
  const watcher = new StateWatcher(c, v.nodeId, v.targets.map((t) => t.targetId), tKill, (e) => r.line(`  ${fmtOffset(e.atMs)}  ${e.text}`))
  await watcher.start()
  try {
    const killed = await r.step(`SIGKILL ${v.proc.name}`, () => clusterKill({ dir: c.dir, node: v.proc.name, signal: 'KILL' }), (k) => `pid ${k.pid} exited`)
    const movedAt = await r.step(
      'mgmtd marks its targets OFFLINE and moves them to the chain end',
      async (update) => {
        await waitRouting(
          c,
          'the killed node to be taken out of its chains',
          (ri) => {
            update(`${writer.acknowledged()} writes acknowledged so far`)
            return victimMovedOut(ri, v)
          },
          30_000,
        )
        const at = performance.now() - tKill
        await watcher.sync()
        return at
      },
      (at) => `${fmtSecs(at)} after the kill`,
    )
    const acked0 = writer.acknowledged()
    await r.step(
      'writes continue on the 2 remaining replicas',
      async (update) => {
        const end = performance.now() + AFTER_FAILOVER_MS
        while (performance.now() < end) {
          await sleep(100)
          update(`${writer.acknowledged() - acked0} more acknowledged`)
        }
        await writer.stop()
      },
      () => `${writer.acknowledged() - acked0} more acknowledged`,
    )
    const tStop = performance.now()
    await watcher.stop()
    const after = await chainListing(c)
    r.line('chains after (admin list-chains):')
    r.block(after.text)
    const writes = windowStats(writer.records, tKill, tStop)
    r.line(
      `writes in flight from the kill on: ${writes.writes}, ${writes.acknowledged} acknowledged, ${writes.failed} failed; ` +
        `longest pause between acknowledgements ${fmtMs(writes.maxAckGapMs)}, max write latency ${fmtMs(writes.maxLatencyMs)}, p50 ${fmtMs(writes.p50Ms)}`,
    )
    const verify = await r.step(
      'read back every acknowledged write (from the surviving replicas)',
      () => writer.verify(),
      (x) => `${x.intact}/${x.acknowledged} intact in ${x.chunks} chunks, ${x.lost} lost`,
    )
    if (writes.failed > 0) throw new Error(`${writes.failed} writes failed during failover: ${writer.records.find((x) => !x.ok && x.end >= tKill)?.error}`)
    if (verify.lost > 0) throw new Error(`${verify.lost} acknowledged writes were lost: ${verify.examples.join('; ')}`)
    return {
      victim: v.proc.name,
      victimPid: killed.pid,
      victimTargets: v.targets,
      chainsBefore: before.text,
      chainsAfter: after.text,
      chainVersions: before.records.map((b) => ({ chainId: b.chainId, before: b.chainVersion, after: after.records.find((a) => a.chainId === b.chainId)?.chainVersion ?? 0 })),
      nodeFailedAfterMs: watcher.firstSeen('node:HEARTBEAT_FAILED'),
      chainsUpdatedAfterMs: movedAt,
      writes,
      verify,
      timeline: watcher.events,
    }
  } finally {
    await watcher.stop()
  }
}

type Counters = Pick<ResyncStats, 'jobs' | 'chunksSent' | 'chunksRemoved' | 'bytesSent' | 'failures'>
const ZERO: Counters = { jobs: 0, chunksSent: 0, chunksRemoved: 0, bytesSent: 0, failures: 0 }

/** Resync counters (Core `stats` RPC) of every storage node that answers, by process name. */
async function resyncCounters(c: DemoCluster): Promise<Map<string, Counters>> {
  const out = new Map<string, Counters>()
  await Promise.all(
    storageProcesses(c).map(async (p) => {
      try {
        const s = await c.rpc.stats(p.address, { timeoutMs: 2000 })
        const rs = s.resync as Partial<Counters> | undefined
        out.set(p.name, { ...ZERO, ...rs })
      } catch {
        // not running: counts from zero when it comes back
      }
    }),
  )
  return out
}

function counterDelta(before: Map<string, Counters>, after: Map<string, Counters>): Counters {
  const d = { ...ZERO }
  for (const [name, a] of after) {
    const b = before.get(name) ?? ZERO
    for (const k of Object.keys(d) as Array<keyof Counters>) d[k] += Math.max(0, a[k] - b[k])
  }
  return d
}

export interface RecoveryResult {
  pid: number
  /** start → process answers and mgmtd sees it HEARTBEAT_CONNECTED */
  connectedAfterMs: number
  /** start → first victim target seen SYNCING (null if the poll never caught it) */
  syncingAfterMs: number | null
  /** start → every victim target SERVING-UPTODATE */
  servingAfterMs: number
  resync: Counters & { mbps: number | null }
  writes: WindowStats
  verify: VerifyResult
  replicas: ReplicaCheck
  chainsAfter: string
  timeline: TimelineEvent[]
}

const AFTER_RECOVERY_MS = 500

export async function runRecovery(c: DemoCluster, r: Reporter, writer: BackgroundWriter, v: Victim): Promise<RecoveryResult> {
  const countersBefore = await resyncCounters(c)
  writer.start()
  await sleep(200)
  const tStart = performance.now()
  const watcher = new StateWatcher(c, v.nodeId, v.targets.map((t) => t.targetId), tStart, (e) => r.line(`  ${fmtOffset(e.atMs)}  ${e.text}`))
  await watcher.start()
  try {
    const started = await r.step(
      `cluster start --node ${v.proc.name}`,
      async () => {
        const s = await clusterStart({ dir: c.dir, node: v.proc.name, timeoutMs: 30_000 })
        return { ...s, at: performance.now() - tStart }
      },
      (s) => `pid ${s.pid} on ${s.address}, HEARTBEAT_CONNECTED after ${fmtSecs(s.at)}`,
    )
    const serving = await r.step(
      'resync: SYNCING → SERVING',
      async (update) => {
        await waitRouting(
          c,
          `${v.proc.name}'s targets to be SERVING again`,
          (ri) => {
            const states = v.targets.map((t) => {
              const ch = ri.chains[String(t.chainId)]
              const ct = ch?.targets.find((x) => x.targetId === t.targetId)
              return `${ct?.publicState ?? '?'}-${ri.targets[String(t.targetId)]?.localState ?? '?'}`
            })
            update(states.join(', '))
            return allServing(ri, c.chains)
          },
          60_000,
        )
        const at = performance.now() - tStart
        await watcher.sync()
        return at
      },
      (ms) => `every chain SERVING ${fmtSecs(ms)} after the restart`,
    )
    const acked0 = writer.acknowledged()
    await sleep(AFTER_RECOVERY_MS)
    await writer.stop()
    const tStop = performance.now()
    await watcher.stop()
    const countersAfter = await resyncCounters(c)
    const delta = counterDelta(countersBefore, countersAfter)
    const syncingAt = v.targets
      .map((t) => watcher.firstSeen(`target:${t.targetId}:SYNCING`))
      .filter((x): x is number => x !== null)
      .reduce<number | null>((a, b) => (a === null ? b : Math.min(a, b)), null)
    const syncSpan = syncingAt !== null ? serving - syncingAt : null
    const resync = { ...delta, mbps: syncSpan && syncSpan > 0 ? mbps(delta.bytesSent, syncSpan) : null }
    r.line(
      `resync moved ${delta.chunksSent} chunks (${fmtBytes(delta.bytesSent)}) in ${delta.jobs - delta.failures} job${delta.jobs - delta.failures === 1 ? '' : 's'}` +
        `${delta.failures ? ` (+${delta.failures} aborted, e.g. started again on a stale chain version)` : ''}` +
        `${delta.chunksRemoved ? `, removed ${delta.chunksRemoved}` : ''}${resync.mbps !== null ? `, ${fmtMBps(resync.mbps)} while SYNCING` : ''} ` +
        `(only chunks that changed while the node was down)`,
    )
    const writes = windowStats(writer.records, tStart, tStop)
    r.line(
      `writes during restart and resync: ${writes.writes}, ${writes.acknowledged} acknowledged, ${writes.failed} failed, ` +
        `${writer.acknowledged() - acked0} after SERVING; max latency ${fmtMs(writes.maxLatencyMs)}, p50 ${fmtMs(writes.p50Ms)}`,
    )
    const verify = await r.step('read back every acknowledged write (all stages)', () => writer.verify(), (x) => `${x.intact}/${x.acknowledged} intact in ${x.chunks} chunks, ${x.lost} lost`)
    const replicas = await r.step('replicas equal again (full chunk metadata of every target)', () => compareAllReplicas(c), (x) =>
      x.equal ? `${x.chunks} chunks identical on all ${x.replicas} replicas of ${x.chains} chains` : `${x.differences.length}+ differences`,
    )
    const after = await chainListing(c)
    r.line('chains after (admin list-chains):')
    r.block(after.text)
    if (writes.failed > 0) throw new Error(`${writes.failed} writes failed during recovery: ${writer.records.find((x) => !x.ok && x.end >= tStart)?.error}`)
    if (verify.lost > 0) throw new Error(`${verify.lost} acknowledged writes were lost: ${verify.examples.join('; ')}`)
    if (!replicas.equal) throw new Error(`replicas differ after the resync: ${replicas.differences.join('; ')}`)
    return {
      pid: started.pid,
      // clusterStart polls mgmtd more slowly than the watcher; take whichever saw it first
      connectedAfterMs: Math.min(started.at, watcher.firstSeen('node:HEARTBEAT_CONNECTED') ?? Infinity),
      syncingAfterMs: syncingAt,
      servingAfterMs: serving,
      resync,
      writes,
      verify,
      replicas,
      chainsAfter: after.text,
      timeline: watcher.events,
    }
  } finally {
    await watcher.stop()
  }
}
