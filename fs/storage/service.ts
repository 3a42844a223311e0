// The storage service of one node: RPC handlers of StorageSerde (service 3),
// heartbeats to mgmtd carrying local target states, the routing watch that
// drives the local state machine, and the resync loop.

import os from 'node:os'
import path from 'node:path'
import { StrataError, toStrataError } from '../common/errors.js'
import { checkChunkSize } from '../common/layout.js'
import { ServiceId, StorageMethod } from '../common/services.js'
import { RELEASE_VERSION, type Timers } from '../common/config.js'
import { every } from '../common/daemon.js'
import type { Logger } from '../common/log.js'
import type { RoutingInfo } from '../common/types.js'
import { MAX_OFFLINE_REASON, MgmtdClient, type HeartbeatTarget } from '../mgmtd/index.js'
import { AFTER_REPLY, ATTACHMENT_MIN_BYTES, FileSlice, RpcClient, type RpcServer } from '../rpc/index.js'
import { BufferPool } from '../common/buffer-pool.js'
import { Craq } from './craq.js'
import { ResyncWorker } from './resync.js'
import { TargetMap, publicStateIn, type LocalTarget } from './target-map.js'
import type {
  BatchReadReq,
  BatchReadRsp,
  CreateTargetReq,
  GetAllChunkMetadataReq,
  GetAllChunkMetadataRsp,
  IOResult,
  OfflineTargetReq,
  QueryChunkReq,
  QueryChunkRsp,
  QueryLastChunkReq,
  QueryLastChunkRsp,
  ReadResult,
  RemoveChunksReq,
  RemoveChunksRsp,
  RemoveTargetReq,
  SpaceInfoRsp,
  SyncDoneReq,
  SyncStartReq,
  SyncStartRsp,
  TruncateChunksReq,
  UpdateReq,
  WriteReq,
} from './protocol.js'

export interface StorageOptions {
  nodeId: number
  dataDir: string
  mgmtdAddresses: string[]
  timers: Timers
  fsync: boolean
  /** O_DIRECT for large chunk writes (ChunkEngineOptions.directWrites) */
  directWrites: boolean
  /** whole-chunk reads leave by sendfile from the page cache (see batchRead); default true */
  zeroCopyReads?: boolean
  log: Logger
}

export class StorageService {
  readonly targets: TargetMap
  readonly mgmtd: MgmtdClient
  readonly rpc: RpcClient
  readonly craq: Craq
  readonly resync: ResyncWorker
  private readonly hbBase = Date.now() * 1000
  private hbSeq = 0
  private loops: Array<{ stop(): void; kick(): void }> = []
  private unwatch: (() => void) | null = null
  private address = ''
  /** buffers of batchRead replies, reused once the reply is on the wire */
  private readonly readBuffers = new BufferPool()
  private closing = false
  private closed: Promise<void> | null = null

  constructor(private readonly opts: StorageOptions) {
    this.targets = new TargetMap(path.join(opts.dataDir, 'targets'), opts.log.child('targets'), { fsync: opts.fsync, directWrites: opts.directWrites })
    this.rpc = new RpcClient({ connectTimeoutMs: 1000 })
    this.mgmtd = new MgmtdClient({ addresses: opts.mgmtdAddresses, rpc: this.rpc })
    this.craq = new Craq({
      targets: this.targets,
      mgmtd: this.mgmtd,
      rpc: this.rpc,
      log: opts.log.child('craq'),
      stopping: () => this.closing,
      onDiskError: (t, e) => this.onDiskError(t, e),
    })
    this.resync = new ResyncWorker({
      targets: this.targets,
      craq: this.craq,
      rpc: this.rpc,
      log: opts.log.child('resync'),
      minGapMs: opts.timers.resyncMinGapMs,
      stopping: () => this.closing,
    })
  }

  get log(): Logger {
    return this.opts.log
  }

  async open(): Promise<void> {
    await this.targets.load()
  }

  start(server: RpcServer): void {
    this.address = server.address
    const M = StorageMethod
    server.addService(ServiceId.Storage, {
      [M.write]: (p: WriteReq) => this.craq.clientUpdate(p?.io, p?.tag ?? emptyTag()),
      [M.update]: (p: UpdateReq) => this.craq.forwardedUpdate(p),
      [M.batchRead]: (p: BatchReadReq) => this.batchRead(p),
      [M.queryLastChunk]: (p: QueryLastChunkReq) => this.queryLastChunk(p),
      [M.removeChunks]: (p: RemoveChunksReq) => this.removeChunks(p),
      [M.truncateChunks]: (p: TruncateChunksReq) => this.truncateChunks(p),
      [M.syncStart]: (p: SyncStartReq) => this.syncStart(p),
      [M.syncDone]: (p: SyncDoneReq) => this.syncDone(p),
      [M.spaceInfo]: () => this.spaceInfo(),
      [M.createTarget]: (p: CreateTargetReq) => this.createTarget(p),
      [M.queryChunk]: (p: QueryChunkReq & { withData?: boolean }) => this.queryChunk(p),
      [M.getAllChunkMetadata]: (p: GetAllChunkMetadataReq) => this.getAllChunkMetadata(p),
      [M.offlineTarget]: (p: OfflineTargetReq) => this.offlineTarget(p),
      [M.removeTarget]: (p: RemoveTargetReq) => this.removeTarget(p),
      [M.setDiskFault]: (p: { targetId: number; fault: 'ENOSPC' | 'EIO' | null }) => {
        const t = this.targets.get(p?.targetId)
        if (!t) throw new StrataError('TARGET_NOT_FOUND', `no target ${p?.targetId} on this node`)
        if (p.fault !== null && p.fault !== 'ENOSPC' && p.fault !== 'EIO') throw new StrataError('INVALID_ARGUMENT', 'fault must be ENOSPC, EIO or null')
        t.engine.faults.failWrites = p.fault
        return { ok: true }
      },
    }, {
      // chunk writes keep nothing of the request once answered (the data is on disk and forwarded;
      // a forward given up while still queued would reach the successor with a payload that no
      // longer matches its checksum, and be refused there), so their 1 MiB frames are recycled
      recycleRequests: [M.write, M.update],
    })
    const T = this.opts.timers
    this.unwatch = this.mgmtd.watch(T.routingRefreshMs, (ri) => this.onRouting(ri))
    this.loops.push(every(T.heartbeatIntervalMs, this.log, 'heartbeat', () => this.heartbeat()))
    this.loops.push(every(T.resyncIntervalMs, this.log, 'resync', () => this.resync.tick()))
    this.loops[0]!.kick()
  }

  private onRouting(ri: RoutingInfo): void {
    const before = new Map(this.targets.all().map((t) => [t.record.targetId, t.localState]))
    const promoted = this.targets.onRouting(ri)
    for (const t of promoted) {
      // a LASTSRV target coming back as SERVING owns the only copy: its
      // pending updates become the truth (3FS resetUncommitted)
      t.engine.resetUncommitted().catch((e: unknown) => this.log.error('resetUncommitted failed', { targetId: t.record.targetId, err: e }))
    }
    const changed = this.targets.all().some((t) => before.get(t.record.targetId) !== t.localState)
    if (changed) this.loops[0]?.kick()
  }

  private async heartbeat(): Promise<void> {
    if (this.closing) return
    const targets: HeartbeatTarget[] = this.targets.all().map((t) => ({
      targetId: t.record.targetId,
      localState: t.localState,
      chainId: t.record.chainId,
      diskIndex: t.record.diskIndex,
      usedSize: t.engine.usedBytes(),
      ...(t.stickyOffline ? { offlineReason: t.stickyOffline.slice(0, MAX_OFFLINE_REASON) } : {}),
    }))
    const rsp = await this.mgmtd.heartbeat({
      nodeId: this.opts.nodeId,
      type: 'STORAGE',
      hbVersion: this.hbBase + ++this.hbSeq,
      timestamp: Date.now(),
      address: this.address,
      hostname: os.hostname(),
      pid: process.pid,
      configVersion: 0,
      releaseVersion: RELEASE_VERSION,
      targets,
    })
    const known = this.mgmtd.cachedRouting?.routingInfoVersion ?? -1
    if (rsp.routingInfoVersion !== known) await this.mgmtd.refresh(rsp.routingInfoVersion)
  }

  private onDiskError(t: LocalTarget, e: StrataError): void {
    // 3FS: a disk write error takes every target on that disk offline
    for (const o of this.targets.all()) {
      if (o.record.diskIndex === t.record.diskIndex) this.targets.setOffline(o, `disk error: ${e.reason}`)
    }
    this.loops[0]?.kick()
  }

  // --- reads

  private async batchRead(p: BatchReadReq): Promise<BatchReadRsp> {
    if (!p || !Array.isArray(p.ios)) throw new StrataError('INVALID_ARGUMENT', 'batchRead needs ios')
    const alloc = (n: number) => this.readBuffers.take(n)
    // whole chunks of attachment size leave as file ranges the connection sendfile()s from the page cache
    const leaseFrom = this.opts.zeroCopyReads === false ? undefined : ATTACHMENT_MIN_BYTES
    const leases: Array<() => void> = []
    const results: ReadResult[] = await Promise.all(
      p.ios.map(async (io): Promise<ReadResult> => {
        try {
          if (!io || !Buffer.isBuffer(io.chunkId) || io.chunkId.length !== 16) throw new StrataError('INVALID_ARGUMENT', 'read needs a 16-byte chunk id')
          if (!Number.isInteger(io.offset) || io.offset < 0 || !Number.isInteger(io.length) || io.length < 0) throw new StrataError('CHUNK_INVALID_RANGE', 'bad read range')
          const t = this.craq.localTarget(io.chainId)
          const chain = this.craq.chainOf(io.chainId)
          const pub = publicStateIn(chain, t.record.targetId)
          if (pub !== 'SERVING' || t.localState !== 'UPTODATE') {
            throw new StrataError('TARGET_STATE_INVALID', `target ${t.record.targetId} is ${pub ?? 'not in chain'}/${t.localState}`)
          }
          const r = await t.engine.read(io.chunkId, io.offset, io.length, {
            allowUncommitted: p.allowReadUncommitted ?? false,
            verifyChecksum: p.verifyChecksum ?? false,
            alloc,
            ...(leaseFrom !== undefined ? { leaseFrom } : {}),
          })
          let data: Buffer = r.data
          if (r.file) {
            leases.push(r.file.release)
            // travels as an ordinary attachment: the reader receives a Buffer
            data = new FileSlice(r.file.fd, r.file.offset, r.file.length) as unknown as Buffer
          }
          return { ok: true, data, commitVer: r.commitVer, updateVer: r.updateVer, commitChainVer: r.commitChainVer, checksum: r.checksum }
        } catch (e) {
          return { ok: false, error: toStrataError(e).toWire() }
        }
      }),
    )
    // The reply is the only holder of the data (chunk bytes are never cached
    // or kept elsewhere), so once it is written the buffers can be reused.
    const release = () => {
      for (const r of results) if (r.ok && Buffer.isBuffer(r.data)) this.readBuffers.release(r.data)
      for (const done of leases) done()
    }
    return { results, [AFTER_REPLY]: release } as BatchReadRsp
  }

  private anyServingTarget(chainId: number): LocalTarget {
    const t = this.craq.localTarget(chainId)
    const pub = publicStateIn(this.craq.chainOf(chainId), t.record.targetId)
    if (pub !== 'SERVING' || t.localState !== 'UPTODATE') throw new StrataError('TARGET_STATE_INVALID', `target ${t.record.targetId} is ${pub}/${t.localState}`)
    return t
  }

  private async queryLastChunk(p: QueryLastChunkReq): Promise<QueryLastChunkRsp> {
    if (!p?.range || !Buffer.isBuffer(p.range.begin) || !Buffer.isBuffer(p.range.end)) throw new StrataError('INVALID_ARGUMENT', 'queryLastChunk needs a range')
    const t = this.anyServingTarget(p.chainId)
    return t.engine.queryLastChunk(p.range.begin, p.range.end, p.range.maxNumChunkIdsToProcess || 0)
  }

  // --- head-originated updates

  private async removeChunks(p: RemoveChunksReq): Promise<RemoveChunksRsp> {
    if (!p?.range || !Buffer.isBuffer(p.range.begin) || !Buffer.isBuffer(p.range.end)) throw new StrataError('INVALID_ARGUMENT', 'removeChunks needs a range')
    const t = this.craq.localTarget(p.chainId)
    const limit = p.range.maxNumChunkIdsToProcess > 0 ? p.range.maxNumChunkIdsToProcess : 1024
    const ids = t.engine.listChunkIds(p.range.begin, p.range.end, limit + 1)
    const batch = ids.slice(0, limit)
    let removed = 0
    for (const id of batch) {
      await this.craq.headUpdate(
        { key: { chainId: p.chainId, chainVer: p.chainVer, chunkId: id }, offset: 0, length: 0, chunkSize: 0, updateVer: 0, updateType: 'REMOVE', checksum: 0 },
        p.tag ?? emptyTag(),
      )
      removed++
    }
    return { numChunksRemoved: removed, moreChunksInRange: ids.length > limit }
  }

  private async truncateChunks(p: TruncateChunksReq): Promise<IOResult> {
    if (!p || !Buffer.isBuffer(p.chunkId)) throw new StrataError('INVALID_ARGUMENT', 'truncateChunks needs a chunk id')
    if (!Number.isInteger(p.chunkLen) || p.chunkLen < 0 || p.chunkLen > p.chunkSize) throw new StrataError('CHUNK_INVALID_RANGE', `chunkLen ${p.chunkLen} outside chunk size ${p.chunkSize}`)
    return this.craq.headUpdate(
      {
        key: { chainId: p.chainId, chainVer: p.chainVer, chunkId: p.chunkId },
        offset: p.chunkLen,
        length: 0,
        chunkSize: p.chunkSize,
        updateVer: 0,
        updateType: p.onlyExtendChunk ? 'EXTEND' : 'TRUNCATE',
        checksum: 0,
      },
      p.tag ?? emptyTag(),
    )
  }

  // --- sync (successor side)

  private async syncStart(p: SyncStartReq): Promise<SyncStartRsp> {
    const t = this.craq.localTarget(p?.chainId)
    await this.craq.fence(p.chainId, p.chainVer)
    const pub = publicStateIn(this.craq.chainOf(p.chainId), t.record.targetId)
    if (pub !== 'SYNCING' || t.localState !== 'ONLINE') throw new StrataError('SYNC_REFUSED', `target ${t.record.targetId} is ${pub}/${t.localState}`)
    return { targetId: t.record.targetId, metas: t.engine.getAllMetadata() }
  }

  private async syncDone(p: SyncDoneReq): Promise<{ ok: true }> {
    const t = this.craq.localTarget(p?.chainId)
    await this.craq.fence(p.chainId, p.chainVer)
    const pub = publicStateIn(this.craq.chainOf(p.chainId), t.record.targetId)
    if (pub !== 'SYNCING' || t.localState !== 'ONLINE') throw new StrataError('SYNC_REFUSED', `target ${t.record.targetId} is ${pub}/${t.localState}`)
    t.localState = 'UPTODATE'
    this.log.info('sync done; target up to date', { targetId: t.record.targetId, chainId: p.chainId })
    this.loops[0]?.kick()
    return { ok: true }
  }

  // --- admin

  private async spaceInfo(): Promise<SpaceInfoRsp> {
    const targets = await Promise.all(this.targets.all().map((t) => t.engine.spaceInfo()))
    return { targets }
  }

  private async createTarget(p: CreateTargetReq): Promise<{ targetId: number }> {
    if (!p) throw new StrataError('INVALID_ARGUMENT', 'createTarget needs a request')
    // only recorded (chunks of any size are kept), but held to the chunk sizes a layout may name, as 3FS's chunk store checks its list
    if (p.chunkSizes !== undefined) {
      if (!Array.isArray(p.chunkSizes)) throw new StrataError('INVALID_ARGUMENT', 'chunkSizes must be a list')
      for (const c of p.chunkSizes) checkChunkSize(c, 'createTarget chunkSizes: a chunk size')
    }
    const t = await this.targets.create({ targetId: p.targetId, chainId: p.chainId, diskIndex: p.diskIndex ?? 0, ...(p.chunkSizes ? { chunkSizes: p.chunkSizes } : {}) })
    this.loops[0]?.kick()
    return { targetId: t.record.targetId }
  }

  private async queryChunk(p: QueryChunkReq & { withData?: boolean }): Promise<QueryChunkRsp> {
    if (!p || !Buffer.isBuffer(p.chunkId)) throw new StrataError('INVALID_ARGUMENT', 'queryChunk needs a chunk id')
    const t = this.craq.localTarget(p.chainId)
    const meta = t.engine.getMeta(p.chunkId) ?? null
    const rsp: QueryChunkRsp = { targetId: t.record.targetId, meta }
    if (p.withData && meta) rsp.data = (await t.engine.readWholeChunk(p.chunkId, { includePending: false })).data
    return rsp
  }

  private async getAllChunkMetadata(p: GetAllChunkMetadataReq): Promise<GetAllChunkMetadataRsp> {
    const t = p?.targetId !== undefined ? this.targets.get(p.targetId) : p?.chainId !== undefined ? this.targets.forChain(p.chainId) : undefined
    if (!t) throw new StrataError('TARGET_NOT_FOUND', 'no such target on this node')
    return { targetId: t.record.targetId, metas: t.engine.getAllMetadata() }
  }

  private async offlineTarget(p: OfflineTargetReq): Promise<{ ok: true }> {
    const t = this.targets.get(p?.targetId)
    if (!t) throw new StrataError('TARGET_NOT_FOUND', `no target ${p?.targetId} on this node`)
    if (p.reason !== undefined && (typeof p.reason !== 'string' || !p.reason || p.reason.length > MAX_OFFLINE_REASON)) {
      throw new StrataError('INVALID_ARGUMENT', `offlineTarget reason must be a non-empty string of at most ${MAX_OFFLINE_REASON} characters`)
    }
    this.targets.setOffline(t, p.reason ?? 'offline-target')
    this.loops[0]?.kick()
    return { ok: true }
  }

  private async removeTarget(p: RemoveTargetReq): Promise<{ ok: true }> {
    const t = this.targets.get(p?.targetId)
    if (!t) throw new StrataError('TARGET_NOT_FOUND', `no target ${p?.targetId} on this node`)
    const pub = publicStateIn(this.craq.chainOf(t.record.chainId), t.record.targetId)
    if (pub && pub !== 'OFFLINE' && !p.force) throw new StrataError('MGMTD_REFUSED', `target ${p.targetId} is ${pub}; offline it first or pass force`)
    await this.targets.remove(p.targetId)
    this.loops[0]?.kick()
    return { ok: true }
  }

  stats(): Record<string, unknown> {
    return {
      resync: this.resync.stats,
      readBuffers: this.readBuffers.stats(),
      targets: this.targets.all().map((t) => ({ targetId: t.record.targetId, chainId: t.record.chainId, localState: t.localState, dataWrites: t.engine.dataWrites, directCopies: t.engine.directCopies })),
    }
  }

  close(): Promise<void> {
    if (this.closed) return this.closed
    this.closing = true
    this.closed = (async () => {
      for (const l of this.loops) l.stop()
      this.unwatch?.()
      this.mgmtd.close()
      this.rpc.close()
      await this.targets.close()
    })()
    return this.closed
  }
}

function emptyTag() {
  return { clientId: '', requestId: 0, channel: { id: 0, seqnum: 0 } }
}
