// CRAQ update path as 3FS runs it (StorageOperator::handleUpdate,
// ReliableUpdate, ReliableForwarding): client writes enter at the head, are
// serialized per chunk, applied locally with the version algebra, forwarded
// to the successor (whose reply is the acknowledgement that it and everything
// after it committed), then committed locally. A client is acknowledged only
// after every SERVING/SYNCING replica committed.

import { crc32c } from '../common/crc32c.js'
import { StrataError, isStrataError, toStrataError } from '../common/errors.js'
import { StorageMethod, ServiceId } from '../common/services.js'
import { DIRECT_IO_ALIGN } from '../common/native.js'
import type { ChainInfo, RoutingInfo } from '../common/types.js'
import type { Logger } from '../common/log.js'
import type { MgmtdClient } from '../mgmtd/index.js'
import type { RpcClient } from '../rpc/index.js'
import type { IOResult, MessageTag, UpdateIO, UpdateOptions, UpdateReq } from './protocol.js'
import { publicStateIn, type LocalTarget, type TargetMap } from './target-map.js'

interface ChannelSlot {
  seqnum: number
  requestId: number
  inFlight: boolean
  result?: IOResult
  error?: StrataError
}

const MAX_CHANNEL_SLOTS = 200_000

export interface CraqDeps {
  targets: TargetMap
  mgmtd: MgmtdClient
  rpc: RpcClient
  log: Logger
  /** stops forward retries when the service shuts down */
  stopping: () => boolean
  /** called when a local disk operation failed with IO_ERROR */
  onDiskError: (t: LocalTarget, e: StrataError) => void
}

export class Craq {
  /** exactly-once bookkeeping per (client, chain, channel) */
  private readonly channels = new Map<string, ChannelSlot>()

  constructor(private readonly d: CraqDeps) {}

  // --- routing helpers

  routing(): RoutingInfo | null {
    return this.d.mgmtd.cachedRouting
  }

  chainOf(chainId: number): ChainInfo | undefined {
    return this.routing()?.chains[chainId]
  }

  /**
   * Fences on chain version: a request from a newer chain version makes us
   * refresh first; any remaining difference is ROUTING_VERSION_MISMATCH.
   */
  async fence(chainId: number, chainVer: number): Promise<ChainInfo> {
    let chain = this.chainOf(chainId)
    if (!chain || chainVer > chain.chainVersion) {
      await this.d.mgmtd.refresh().catch(() => undefined)
      chain = this.chainOf(chainId)
    }
    if (!chain) throw new StrataError('ROUTING_VERSION_MISMATCH', `chain ${chainId} unknown to this node`)
    if (chain.chainVersion !== chainVer) {
      throw new StrataError('ROUTING_VERSION_MISMATCH', `chain ${chainId}: request version ${chainVer}, local version ${chain.chainVersion}`, {
        detail: { chainVersion: chain.chainVersion },
      })
    }
    return chain
  }

  localTarget(chainId: number): LocalTarget {
    const t = this.d.targets.forChain(chainId)
    if (!t) throw new StrataError('TARGET_NOT_FOUND', `no target of chain ${chainId} on this node`)
    return t
  }

  /** First SERVING or SYNCING target after `targetId` in chain order. */
  successorOf(chain: ChainInfo, targetId: number): number | undefined {
    const i = chain.targets.findIndex((t) => t.targetId === targetId)
    for (let j = i + 1; j < chain.targets.length; j++) {
      const s = chain.targets[j]!.publicState
      if (s === 'SERVING' || s === 'SYNCING') return chain.targets[j]!.targetId
    }
    return undefined
  }

  addressOfTarget(targetId: number): string {
    const ri = this.routing()
    const ti = ri?.targets[targetId]
    const node = ti ? ri?.nodes[ti.nodeId] : undefined
    if (!node?.address) throw new StrataError('TARGET_OFFLINE', `no address for target ${targetId}`)
    return node.address
  }

  // --- client entry point at the head

  /** Validates an update that must enter at this node as the chain's head. */
  private async asHead(io: UpdateIO): Promise<LocalTarget> {
    validateUpdate(io)
    const t = this.localTarget(io.key.chainId)
    const chain = await this.fence(io.key.chainId, io.key.chainVer)
    const head = chain.targets.find((x) => x.publicState === 'SERVING')
    if (!head) throw new StrataError('CHAIN_UNAVAILABLE', `chain ${chain.chainId} has no serving target`)
    if (head.targetId !== t.record.targetId) {
      throw new StrataError('ROUTING_ERROR', `target ${t.record.targetId} is not the head of chain ${chain.chainId} (head is ${head.targetId})`)
    }
    if (t.localState !== 'UPTODATE') throw new StrataError('TARGET_OFFLINE', `target ${t.record.targetId} is ${t.localState}`)
    return t
  }

  async clientUpdate(io: UpdateIO, tag: MessageTag): Promise<IOResult> {
    const t = await this.asHead(io)

    const key = `${tag.clientId}:${io.key.chainId}:${tag.channel.id}`
    const slot = this.channels.get(key)
    if (slot) {
      if (tag.channel.seqnum < slot.seqnum) throw new StrataError('DUPLICATE_UPDATE', `seqnum ${tag.channel.seqnum} < ${slot.seqnum} on channel ${tag.channel.id}`)
      if (tag.channel.seqnum === slot.seqnum) {
        if (slot.requestId !== tag.requestId) throw new StrataError('DUPLICATE_UPDATE', `seqnum ${slot.seqnum} reused by another request`)
        if (slot.inFlight) throw new StrataError('CHANNEL_IS_LOCKED', `channel ${tag.channel.id} busy with seqnum ${slot.seqnum}`)
        if (slot.result) return slot.result
        // the previous attempt failed before being applied; run it again
      }
    }
    const mine: ChannelSlot = { seqnum: tag.channel.seqnum, requestId: tag.requestId, inFlight: true }
    this.channels.delete(key) // re-insert to keep Map order ≈ LRU
    this.channels.set(key, mine)
    if (this.channels.size > MAX_CHANNEL_SLOTS) {
      for (const k of this.channels.keys()) {
        if (this.channels.size <= MAX_CHANNEL_SLOTS * 0.9) break
        if (!this.channels.get(k)!.inFlight) this.channels.delete(k)
      }
    }
    const entered = t.demotions
    try {
      const r = await t.engine.withChunkLock(io.key.chunkId, () => this.headUpdateLocked(t, io, tag, entered))
      mine.result = r
      return r
    } catch (e) {
      const err = toStrataError(e)
      mine.error = err
      // a failure that happened before anything was applied may be retried under the same seqnum
      throw err
    } finally {
      mine.inFlight = false
    }
  }

  /**
   * An update originated by this head itself (a chunk of removeChunks, a
   * truncate): same path as a client write, without channel bookkeeping.
   */
  async headUpdate(io: UpdateIO, tag: MessageTag): Promise<IOResult> {
    const t = await this.asHead(io)
    const entered = t.demotions
    return t.engine.withChunkLock(io.key.chunkId, () => this.headUpdateLocked(t, io, { ...tag, requestId: 0 }, entered))
  }

  private async headUpdateLocked(t: LocalTarget, io: UpdateIO, tag: MessageTag, entered: number): Promise<IOResult> {
    // re-check under the chunk lock: the chain may have changed while we queued
    const chain = await this.fence(io.key.chainId, io.key.chainVer)
    const meta = t.engine.getMeta(io.key.chunkId)
    // Same request applied and committed before (e.g. by us as a former middle
    // replica, before the client failed over to us): answer, do not re-apply.
    if (meta && meta.lastClientId === tag.clientId && meta.lastRequestId === tag.requestId && meta.commitVer === meta.updateVer && tag.requestId !== 0) {
      return { lengthInfo: io.updateType === 'WRITE' ? io.length : meta.size, commitVer: meta.commitVer, updateVer: meta.updateVer, checksum: meta.checksum, commitChainVer: meta.chainVer }
    }
    const applied = await this.applyLocal(t, io, { fromClient: true, isSyncing: false, chainVer: chain.chainVersion, clientId: tag.clientId, requestId: tag.requestId })
    const fwdIo: UpdateIO = { ...io, updateVer: applied.updateVer }
    return this.forwardAndCommit(t, fwdIo, tag, applied, io, undefined, { abortable: true, atHead: true, entered })
  }

  // --- forwarded updates at a middle or tail replica

  async forwardedUpdate(req: UpdateReq): Promise<IOResult> {
    const { io, tag, options } = req
    validateUpdate(io)
    const t = this.localTarget(io.key.chainId)
    const chain = await this.fence(io.key.chainId, io.key.chainVer)
    const pub = publicStateIn(chain, t.record.targetId)
    if (pub !== 'SERVING' && pub !== 'SYNCING') throw new StrataError('TARGET_STATE_INVALID', `target ${t.record.targetId} is ${pub ?? 'not in chain'}`)
    if (t.localState === 'OFFLINE') throw new StrataError('TARGET_OFFLINE', `target ${t.record.targetId} is offline`)
    const entered = t.demotions
    const syncChainVer = options?.isSyncing && Number.isInteger(options.syncChainVer) ? options.syncChainVer : undefined
    return t.engine.withChunkLock(io.key.chunkId, async () => {
      await this.fence(io.key.chainId, io.key.chainVer)
      let applied: { updateVer: number; checksum: number; size: number }
      try {
        applied = await this.applyLocal(t, io, {
          fromClient: false,
          isSyncing: options?.isSyncing ?? false,
          chainVer: syncChainVer ?? chain.chainVersion,
          clientId: tag.clientId,
          requestId: tag.requestId,
        })
      } catch (e) {
        if (isStrataError(e, 'CHUNK_COMMITTED_UPDATE')) {
          // already committed here (a retried forward): report the committed state
          const m = t.engine.getMeta(io.key.chunkId)
          return {
            lengthInfo: io.updateType === 'WRITE' ? io.length : m?.size ?? 0,
            commitVer: m?.commitVer ?? io.updateVer,
            updateVer: m?.updateVer ?? io.updateVer,
            checksum: m?.checksum ?? 0,
            commitChainVer: m?.chainVer ?? chain.chainVersion,
          }
        }
        if (!isStrataError(e, 'CHUNK_STALE_UPDATE')) throw e
        // applied before but not committed: forward again and commit
        const m = t.engine.getMeta(io.key.chunkId)
        applied = { updateVer: io.updateVer, checksum: m?.checksum ?? 0, size: m?.size ?? 0 }
      }
      return this.forwardAndCommit(t, io, tag, applied, io, syncChainVer, { abortable: !(options?.isSyncing ?? false), atHead: false, entered })
    })
  }

  private async applyLocal(
    t: LocalTarget,
    io: UpdateIO,
    opts: { fromClient: boolean; isSyncing: boolean; chainVer: number; clientId: string; requestId: number },
  ): Promise<{ updateVer: number; checksum: number; size: number }> {
    const before = t.engine.getMeta(io.key.chunkId)
    try {
      return await t.engine.applyUpdate(io, opts)
    } catch (e) {
      const err = toStrataError(e)
      if (err.code === 'IO_ERROR') this.d.onDiskError(t, err)
      if (err.code === 'NO_SPACE' && sameVersions(before, t.engine.getMeta(io.key.chunkId))) throw unapplied(err)
      throw err
    }
  }

  /**
   * Forwards to the successor until it acknowledges or there is none, then
   * commits locally. Holds the chunk lock throughout, as 3FS does, so a chain
   * change never reorders updates of one chunk.
   */
  private async forwardAndCommit(
    t: LocalTarget,
    io: UpdateIO,
    tag: MessageTag,
    applied: { updateVer: number; checksum: number; size: number },
    original: UpdateIO,
    /** resync transfer: commit at the end of the chain under this version */
    syncChainVer: number | undefined,
    how: {
      /** the local apply was an ordinary (not syncing) update, which abortUpdate can take back */
      abortable: boolean
      /** the update entered here from a client or this head itself: only the head may finish it */
      atHead: boolean
      /** the target's demotion count when the update entered */
      entered: number
    },
  ): Promise<IOResult> {
    const { abortable, atHead } = how
    let commitChainVer = 0
    let attempt = 0
    for (;;) {
      if (this.d.stopping()) throw new StrataError('CLOSED', 'storage service is stopping')
      const chain = this.chainOf(io.key.chainId)
      if (!chain) throw new StrataError('ROUTING_VERSION_MISMATCH', `chain ${io.key.chainId} vanished from routing`)
      const mePublic = publicStateIn(chain, t.record.targetId)
      if (mePublic !== 'SERVING' && mePublic !== 'SYNCING') {
        throw new StrataError('TARGET_STATE_INVALID', `target ${t.record.targetId} left the chain's serving set (${mePublic ?? 'removed'})`)
      }
      if (t.demotions !== how.entered) {
        // The chain stopped counting on this target while the update was
        // here; back in service it sits elsewhere in the chain (a SYNCING
        // tail), where committing would finish the update on a replica the
        // rest of the chain never forwarded it to.
        throw new StrataError('TARGET_STATE_INVALID', `target ${t.record.targetId} was taken out of chain ${chain.chainId} while the update was in flight`)
      }
      if (atHead) this.checkStillHead(t, chain)
      const succ = this.successorOf(chain, t.record.targetId)
      if (succ === undefined) {
        commitChainVer = syncChainVer ?? chain.chainVersion
        break
      }
      const succState = publicStateIn(chain, succ)!
      try {
        const fwd = await this.buildForward(t, io, tag, succState === 'SYNCING', chain.chainVersion)
        const rsp = await this.d.rpc.call<IOResult>(this.addressOfTarget(succ), ServiceId.Storage, StorageMethod.update, fwd, { timeoutMs: 10_000, alignAttachments: DIRECT_IO_ALIGN })
        if (fwd.io.updateType !== 'REMOVE' && rsp.checksum !== applied.checksum) {
          // the successor diverged: never acknowledge; the forward is retried
          // (3FS reports kChecksumMismatch) after a routing refresh
          throw new StrataError('CHECKSUM_MISMATCH', `successor ${succ} checksum ${rsp.checksum} != local ${applied.checksum}`)
        }
        if (rsp.commitChainVer > chain.chainVersion) {
          await this.d.mgmtd.refresh(undefined).catch(() => undefined)
          throw new StrataError('CHAIN_VERSION_MISMATCH', `successor runs chain version ${rsp.commitChainVer}`)
        }
        commitChainVer = rsp.commitChainVer || chain.chainVersion
        break
      } catch (e) {
        const err = toStrataError(e)
        if (abortable && syncChainVer === undefined && isUnappliedNoSpace(err)) {
          // The rest of the chain has no room for the update and holds none
          // of it: retrying would hold the chunk lock until someone frees
          // space, and the writer would wait out its deadline for an error
          // that is certain now. Take the update back here too and say so.
          if (await t.engine.abortUpdate(io.key.chunkId, applied.updateVer)) {
            // the replica whose disk is full names itself; those before it pass that on
            const said = err.reason.startsWith('target ') ? err.reason : `target ${succ} of chain ${io.key.chainId}: ${err.reason}`
            throw unapplied(new StrataError('NO_SPACE', said))
          }
        }
        attempt++
        if (attempt === 1 || attempt % 20 === 0) {
          this.d.log.warn('forward failed; retrying', { chainId: io.key.chainId, successor: succ, attempt, err: err.code })
        }
        if (err.code === 'CHECKSUM_MISMATCH' && attempt > 50) throw err
        await new Promise((r) => setTimeout(r, Math.min(500, 10 * 2 ** Math.min(attempt, 6))))
        await this.d.mgmtd.refresh().catch(() => undefined)
      }
    }
    const c = await t.engine.commit(io.key.chunkId, applied.updateVer, commitChainVer, {
      isRemove: io.updateType === 'REMOVE',
      clientId: tag.clientId,
      requestId: tag.requestId,
    })
    return {
      lengthInfo: original.updateType === 'WRITE' ? original.length : c.size,
      commitVer: c.commitVer,
      updateVer: c.updateVer,
      checksum: c.checksum,
      commitChainVer,
    }
  }

  /**
   * A head's update is acknowledged only while this target is still the
   * chain's head. A head demoted while its forward was out (its node stalled
   * past the heartbeat timeout) comes back as a SYNCING target at the end of
   * the chain: there it has no successor, and committing would acknowledge
   * a write that no serving replica holds, which the resync from the new head
   * then removes. The update stays pending here (the resync settles it) and
   * the client retries at the new head.
   */
  private checkStillHead(t: LocalTarget, chain: ChainInfo): void {
    const head = chain.targets.find((x) => x.publicState === 'SERVING')
    if (head?.targetId !== t.record.targetId || t.localState !== 'UPTODATE') {
      throw new StrataError(
        'TARGET_STATE_INVALID',
        `target ${t.record.targetId} is no longer the head of chain ${chain.chainId} (version ${chain.chainVersion}: head ${head?.targetId ?? 'none'}, this target ${publicStateIn(chain, t.record.targetId)}/${t.localState})`,
      )
    }
  }

  /** The request sent to the successor; to a SYNCING one, writes become full-chunk replaces. */
  private async buildForward(t: LocalTarget, io: UpdateIO, tag: MessageTag, toSyncing: boolean, chainVer: number): Promise<UpdateReq & { options: UpdateOptions }> {
    // the client's tag travels along so every replica records who wrote last
    const options: UpdateOptions = { isSyncing: toSyncing, fromClient: false, commitChainVer: chainVer }
    if (!toSyncing || io.updateType === 'REMOVE') return { io: { ...io, key: { ...io.key, chainVer } }, tag, options }
    const whole = await t.engine.readWholeChunk(io.key.chunkId, { includePending: true })
    return {
      io: {
        key: { ...io.key, chainVer },
        offset: 0,
        length: whole.data.length,
        chunkSize: io.chunkSize,
        data: whole.data,
        updateVer: io.updateVer,
        updateType: 'WRITE',
        checksum: crc32c(whole.data),
      },
      tag,
      options,
    }
  }
}

function validateUpdate(io: UpdateIO): void {
  if (!io || !io.key || !Buffer.isBuffer(io.key.chunkId) || io.key.chunkId.length !== 16) throw new StrataError('INVALID_ARGUMENT', 'update needs a 16-byte chunk id')
  if (!Number.isInteger(io.key.chainId) || !Number.isInteger(io.key.chainVer)) throw new StrataError('INVALID_ARGUMENT', 'update needs chainId and chainVer')
  if (!['WRITE', 'REMOVE', 'TRUNCATE', 'EXTEND'].includes(io.updateType)) throw new StrataError('INVALID_ARGUMENT', `unknown update type ${String(io.updateType)}`)
  if (!Number.isInteger(io.offset) || io.offset < 0 || !Number.isInteger(io.length) || io.length < 0) throw new StrataError('CHUNK_INVALID_RANGE', 'offset and length must be non-negative integers')
  if (io.updateType === 'WRITE' && (!Buffer.isBuffer(io.data) || io.data.length !== io.length)) throw new StrataError('INVALID_ARGUMENT', 'WRITE data length differs from length')
}

/**
 * A NO_SPACE that left this replica (and everything after it) without the
 * update, marked so the predecessor may take it back as well. Only such an
 * error may be answered by aborting: a full disk met while committing, after
 * the successors committed, must be retried like any other failure.
 */
function unapplied(err: StrataError): StrataError {
  return new StrataError('NO_SPACE', err.reason, { cause: err, detail: { ...err.detail, unapplied: true } })
}

function isUnappliedNoSpace(err: StrataError): boolean {
  return err.code === 'NO_SPACE' && err.detail?.unapplied === true
}

function sameVersions(a: { updateVer: number; commitVer: number; state: string } | null, b: { updateVer: number; commitVer: number; state: string } | null): boolean {
  if (!a || !b) return a === b
  return a.updateVer === b.updateVer && a.commitVer === b.commitVer && a.state === b.state
}
