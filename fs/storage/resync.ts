// Resync of a returning target (3FS ResyncWorker): the predecessor of a
// SYNCING target (the last SERVING one) fetches the successor's chunk
// metadata (syncStart), diffs it against its own with 3FS's rules, sends
// removals and full-chunk writes under the chunk lock, and finishes with
// syncDone, after which the successor reports UPTODATE and mgmtd makes it
// SERVING. Client writes that race with the sync are forwarded to the
// SYNCING target as full-chunk replaces (craq.ts), so both interleave safely.
//
// A successor holding committed data the predecessor cannot explain (diff
// rules' "fatal": written alone by an older Strata, or a damaged disk) can
// never be synced: as 3FS does, the predecessor takes it offline on its node
// (the reason travels to mgmtd and is shown by list-targets and cluster
// status) and the round ends. It stays OFFLINE until the operator replaces
// its copy; a restart of its node only repeats the round.

import { formatChunkIdHex } from '../common/chunk-id.js'
import { crc32c } from '../common/crc32c.js'
import { StrataError, isStrataError, toStrataError } from '../common/errors.js'
import { ServiceId, StorageMethod } from '../common/services.js'
import type { ChainInfo } from '../common/types.js'
import type { Logger } from '../common/log.js'
import type { RpcClient } from '../rpc/index.js'
import type { IOResult, SyncStartRsp, UpdateReq } from './protocol.js'
import { diffChunkSets, type SyncFatal, type SyncMeta } from './sync-diff.js'
import type { Craq } from './craq.js'
import type { LocalTarget, TargetMap } from './target-map.js'

export interface ResyncDeps {
  targets: TargetMap
  craq: Craq
  rpc: RpcClient
  log: Logger
  minGapMs: number
  stopping: () => boolean
}

/** Where the operator's procedure for a diverged successor is written down. */
export const DIVERGED_HELP = 'docs/cli.md, "A resync that cannot finish"'
/** diverged chunks named in the log line and in the successor's offline reason */
const NAMED = 3

export interface ResyncStats {
  jobs: number
  /** rounds that found diverged chunks and took the successor offline */
  diverged: number
  chunksSent: number
  chunksRemoved: number
  bytesSent: number
  failures: number
}

export class ResyncWorker {
  private readonly running = new Set<number>()
  private readonly lastAttempt = new Map<number, number>()
  /** chain version a sync completed under: no new job until the chain moves on */
  private readonly completed = new Map<number, number>()
  readonly stats: ResyncStats = { jobs: 0, diverged: 0, chunksSent: 0, chunksRemoved: 0, bytesSent: 0, failures: 0 }

  constructor(private readonly d: ResyncDeps) {}

  /** One pass: start a job for every chain where a local target precedes a SYNCING one. */
  tick(): void {
    for (const t of this.d.targets.all()) {
      if (t.localState !== 'UPTODATE') continue
      const chain = this.d.craq.chainOf(t.record.chainId)
      if (!chain) continue
      const succ = this.syncingSuccessor(chain, t.record.targetId)
      if (succ === undefined || this.running.has(chain.chainId)) continue
      if (this.completed.get(chain.chainId) === chain.chainVersion) continue
      const last = this.lastAttempt.get(chain.chainId) ?? 0
      if (Date.now() - last < this.d.minGapMs) continue
      this.lastAttempt.set(chain.chainId, Date.now())
      this.running.add(chain.chainId)
      void this.run(t, chain, succ)
        .then(() => {
          this.lastAttempt.delete(chain.chainId)
          this.completed.set(chain.chainId, chain.chainVersion)
        })
        .catch((e) => {
          this.stats.failures++
          this.d.log.warn('resync failed', { chainId: chain.chainId, successor: succ, err: toStrataError(e) })
        })
        .finally(() => this.running.delete(chain.chainId))
    }
  }

  /** The SYNCING target right after `targetId` if `targetId` is the last SERVING one. */
  private syncingSuccessor(chain: ChainInfo, targetId: number): number | undefined {
    const i = chain.targets.findIndex((x) => x.targetId === targetId)
    if (i < 0 || chain.targets[i]!.publicState !== 'SERVING') return undefined
    const next = chain.targets.slice(i + 1).find((x) => x.publicState === 'SERVING' || x.publicState === 'SYNCING')
    return next?.publicState === 'SYNCING' ? next.targetId : undefined
  }

  private async run(t: LocalTarget, chain: ChainInfo, succ: number): Promise<void> {
    const started = Date.now()
    const addr = this.d.craq.addressOfTarget(succ)
    const chainVer = chain.chainVersion
    this.stats.jobs++
    this.d.log.info('resync start', { chainId: chain.chainId, from: t.record.targetId, to: succ, chainVer })
    const remote = await this.d.rpc.call<SyncStartRsp>(addr, ServiceId.Storage, StorageMethod.syncStart, { chainId: chain.chainId, chainVer }, { timeoutMs: 60_000 })
    const local = t.engine.getAllMetadata()
    const diff = diffChunkSets(local, remote.metas, chainVer)
    if (diff.fatal.length) {
      // nothing is sent: overwriting or keeping data nobody can explain is the operator's call
      await this.offlineDiverged(t, chain, succ, addr, diff.fatal)
      return
    }
    let sent = 0
    let removed = 0
    const remoteVer = new Map(remote.metas.map((m) => [m.chunkId.toString('hex'), m.updateVer]))
    for (const id of diff.remove) {
      this.checkStillValid(chain.chainId, chainVer)
      await t.engine.withChunkLock(id, async () => {
        if (t.engine.getMeta(id)) return // it reappeared locally; a later write will cover it
        const req: UpdateReq = {
          // one past the successor's version, so it applies as the next update
          io: { key: { chainId: chain.chainId, chainVer, chunkId: id }, offset: 0, length: 0, chunkSize: 0, updateVer: (remoteVer.get(id.toString('hex')) ?? 0) + 1, updateType: 'REMOVE', checksum: 0 },
          tag: { clientId: '', requestId: 0, channel: { id: 0, seqnum: 0 } },
          options: { isSyncing: true, fromClient: false, commitChainVer: chainVer },
        }
        await this.send(addr, req)
        removed++
      })
    }
    for (const id of diff.transfer) {
      this.checkStillValid(chain.chainId, chainVer)
      await t.engine.withChunkLock(id, async () => {
        const meta = t.engine.getMeta(id)
        if (!meta || meta.recycleState !== 'NORMAL') return // vanished meanwhile
        const whole = await t.engine.readWholeChunk(id, { includePending: false })
        const req: UpdateReq = {
          io: {
            key: { chainId: chain.chainId, chainVer, chunkId: id },
            offset: 0,
            length: whole.data.length,
            chunkSize: meta.chunkSize,
            data: whole.data,
            updateVer: meta.commitVer,
            updateType: 'WRITE',
            checksum: crc32c(whole.data),
          },
          tag: { clientId: meta.lastClientId, requestId: meta.lastRequestId, channel: { id: 0, seqnum: 0 } },
          options: { isSyncing: true, fromClient: false, commitChainVer: chainVer, syncChainVer: meta.chainVer },
        }
        const rsp = await this.send(addr, req)
        if (rsp.checksum !== meta.checksum) {
          throw new StrataError('CHECKSUM_MISMATCH', `resync of chunk ${id.toString('hex')}: successor checksum ${rsp.checksum} != ${meta.checksum}`)
        }
        sent++
        this.stats.bytesSent += whole.data.length
      })
    }
    this.checkStillValid(chain.chainId, chainVer)
    await this.d.rpc.call(addr, ServiceId.Storage, StorageMethod.syncDone, { chainId: chain.chainId, chainVer }, { timeoutMs: 10_000 })
    this.stats.chunksSent += sent
    this.stats.chunksRemoved += removed
    this.d.log.info('resync done', { chainId: chain.chainId, to: succ, sent, removed, skipped: diff.skip.length, ms: Date.now() - started })
  }

  /**
   * Ends a round that found diverged chunks: logs them once and has the
   * successor's node hold it offline with a reason naming them. The chain
   * then drops it to OFFLINE, so no further round starts; a failed offline
   * fails the round, which is tried again after the minimum gap.
   */
  private async offlineDiverged(t: LocalTarget, chain: ChainInfo, succ: number, addr: string, fatal: SyncFatal[]): Promise<void> {
    const from = t.record.targetId
    const more = fatal.length > NAMED ? `, and ${fatal.length - NAMED} more` : ''
    const named = fatal.slice(0, NAMED)
    this.d.log.error(`resync found diverged chunks; taking the successor offline (what to do: ${DIVERGED_HELP})`, {
      chainId: chain.chainId,
      chainVer: chain.chainVersion,
      from,
      successor: succ,
      diverged: fatal.length,
      first: named.map((f) => `${formatChunkIdHex(f.chunkId)} ${f.reason}: ours ${versions(f.local)}, successor's ${versions(f.remote)}`),
    })
    const reason = `resync from target ${from} found ${fatal.length} diverged chunk(s): ${named.map((f) => `${formatChunkIdHex(f.chunkId)} (${f.reason})`).join(', ')}${more}; see ${DIVERGED_HELP}`
    this.checkStillValid(chain.chainId, chain.chainVersion)
    await this.d.rpc.call(addr, ServiceId.Storage, StorageMethod.offlineTarget, { targetId: succ, force: true, reason }, { timeoutMs: 10_000 })
    this.stats.diverged++
  }

  private async send(addr: string, req: UpdateReq): Promise<IOResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.d.rpc.call<IOResult>(addr, ServiceId.Storage, StorageMethod.update, req, { timeoutMs: 30_000 })
      } catch (e) {
        // a stale update means the successor already has this version: fine
        if (isStrataError(e, ['CHUNK_COMMITTED_UPDATE', 'CHUNK_STALE_UPDATE'])) return { lengthInfo: 0, commitVer: req.io.updateVer, updateVer: req.io.updateVer, checksum: req.io.checksum, commitChainVer: req.options.commitChainVer }
        if (!isStrataError(e) || !e.retryable || attempt >= 5 || this.d.stopping()) throw e
        await new Promise((r) => setTimeout(r, 50 * attempt))
      }
    }
  }

  /** Abort the job when the chain moved on (version bump): the next pass starts over. */
  private checkStillValid(chainId: number, chainVer: number): void {
    if (this.d.stopping()) throw new StrataError('CLOSED', 'stopping')
    const c = this.d.craq.chainOf(chainId)
    if (!c || c.chainVersion !== chainVer) throw new StrataError('ROUTING_VERSION_MISMATCH', `chain ${chainId} changed during resync`)
  }
}

function versions(m: SyncMeta): string {
  return `v${m.commitVer}/u${m.updateVer} ${m.state} chainVer ${m.chainVer} crc ${(m.checksum >>> 0).toString(16).padStart(8, '0')}`
}
