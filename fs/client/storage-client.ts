// Chunk-level client of the storage service (3FS client/storage
// StorageClientImpl): routes each chunk IO through the cached routing info,
// sends updates to the chain head with exactly-once tags, spreads reads over
// SERVING replicas in one batch RPC per node, and retries what is worth
// retrying until a deadline, refreshing routing info when the error says the
// view of the chain is stale.

import { randomUUID } from 'node:crypto'
import { crc32c } from '../common/crc32c.js'
import { StrataError, toStrataError } from '../common/errors.js'
import { isChunkId } from '../common/chunk-id.js'
import { ServiceId, StorageMethod, methodName } from '../common/services.js'
import type { ChainId, NodeId, RoutingInfo, TargetId } from '../common/types.js'
import type { MgmtdClient } from '../mgmtd/client.js'
import { RpcClient, type AttachmentSink } from '../rpc/index.js'
import { DIRECT_IO_ALIGN } from '../common/native.js'
import type {
  BatchReadReq,
  BatchReadRsp,
  IOResult,
  MessageTag,
  QueryLastChunkReq,
  QueryLastChunkRsp,
  RemoveChunksReq,
  RemoveChunksRsp,
  TruncateChunksReq,
  WriteReq,
} from '../storage/protocol.js'
import { ChannelAllocator, type UpdateChannel } from './channels.js'
import { KeyedLimiter } from './limiter.js'
import { MAX_CHUNKS_PER_REQUEST, drainRange, normalizeRange, type ChunkRangeInput, type DrainResult } from './ranges.js'
import {
  DEFAULT_RETRY_POLICY,
  backoffDelay,
  clusterGone,
  isFastRetryCode,
  isRetryableCode,
  isTargetFailure,
  mergeRetryPolicy,
  needsRoutingRefresh,
  type RetryPolicy,
} from './retry-policy.js'
import { bump, copyStats, emptyStats, type ClientOp, type StorageClientStats } from './stats.js'
import {
  TargetSelector,
  groupByNode,
  headOf,
  isReadMode,
  resolveChain,
  type ReadMode,
  type SlimChain,
  type SlimTarget,
} from './target-selection.js'

export interface StorageClientOptions {
  mgmtd: MgmtdClient
  /** default: a client of our own, closed by close() */
  rpc?: RpcClient
  /** must be unique per client instance: storage dedupes updates by (clientId, chain, channel) */
  clientId?: string
  retry?: Partial<RetryPolicy>
  /** default read target selection, 'loadBalance' unless given */
  readMode?: ReadMode
  /** concurrent updates this client can have in flight (3FS max_concurrent_updates) */
  numChannels?: number
  /** RPCs in flight per storage node; more wait in line */
  maxConcurrentPerNode?: number
  /** a node's share of one batchRead call is split into several RPCs only above these */
  maxBatchIos?: number
  maxBatchBytes?: number
  /** check read data against the CRC32C the server sends with it (default true) */
  verifyReadChecksum?: boolean
  /** chunks removed per removeChunks RPC (default 128) */
  removeBatchSize?: number
  /** for tests: deterministic target choice and jitter */
  random?: () => number
}

export interface CallOptions {
  /** overall budget for this call, all retries included */
  deadlineMs?: number
  attemptTimeoutMs?: number
  signal?: AbortSignal
}

export interface ReadOptions extends CallOptions {
  mode?: ReadMode
  /** return data of a pending update instead of retrying on CHUNK_NOT_COMMIT */
  allowReadUncommitted?: boolean
  /** CHUNK_NOT_FOUND is an error instead of an empty (hole) result */
  strict?: boolean
  verifyChecksum?: boolean
  /** ask the server to check the stored chunk checksum before replying */
  serverVerifyChecksum?: boolean
  /**
   * batchRead calls it once per IO as soon as that IO's result is final
   * (with its index in `ios`), before the whole call resolves: a caller
   * whose requests complete one by one need not wait for the slowest node.
   */
  onResult?: (index: number, result: ChunkReadResult) => void
}

export interface QueryOptions extends CallOptions {
  /** default 'head': the head has every acknowledged update, also ones still committing downstream */
  mode?: ReadMode
}

export interface ReadRequest {
  chainId: ChainId
  chunkId: Buffer
  offset: number
  length: number
  /**
   * Memory of at least `length` bytes the data should land in: the reply is
   * received there by the socket read itself (no fresh buffer, no copy), and
   * the result's `data` is then a view of it. Its contents are unspecified
   * after a failed read. Replies that cannot be placed (a short chunk, a
   * server's copy) still arrive in a fresh buffer, so compare `data.buffer`
   * before assuming where the bytes are.
   *
   * A scatter list (Buffers adding up to at least `length`) puts the data
   * across them in order: the reply is received there in place when it can
   * be, else copied there, and the result's `data` is then empty and
   * `placed` tells how many bytes landed (a batch API read of several slots
   * from one chunk is one IO this way).
   */
  into?: Buffer | readonly Buffer[]
}

export type ChunkReadResult =
  | {
      ok: true
      /** may be shorter than asked (short chunk); empty when the chunk does not exist or `into` was a scatter list */
      data: Buffer
      /** with a scatter list as `into`: the bytes of the chunk that are now in it */
      placed?: number
      /** false: CHUNK_NOT_FOUND, a hole for the file layer */
      found: boolean
      commitVer: number
      updateVer: number
      commitChainVer: number
      /** replica that answered; 0 for a hole */
      targetId: TargetId
    }
  | { ok: false; error: StrataError }

export type RemoveChunksResult = DrainResult

const DEFAULTS = {
  numChannels: 1024,
  maxConcurrentPerNode: 32,
  maxBatchIos: 1024,
  maxBatchBytes: 32 * 1024 * 1024,
  removeBatchSize: 128,
}

const EMPTY = Buffer.alloc(0)

interface ReadState {
  idx: number
  io: ReadRequest
  err?: StrataError
  /** replicas that served bad data to this IO */
  exclude: Set<TargetId>
  checksumFailures: Map<TargetId, number>
}

export class StorageClient {
  readonly clientId: string
  readonly mgmtd: MgmtdClient
  readonly rpc: RpcClient
  readonly policy: RetryPolicy
  readonly readMode: ReadMode
  readonly channels: ChannelAllocator
  private readonly ownsRpc: boolean
  private readonly selector: TargetSelector
  private readonly limiter: KeyedLimiter
  private readonly load = new Map<NodeId, number>()
  private readonly random: () => number
  private readonly maxBatchIos: number
  private readonly maxBatchBytes: number
  private readonly verifyReadChecksum: boolean
  private readonly removeBatchSize: number
  /** sleeping retries, woken by close() */
  private readonly sleepers = new Set<() => void>()
  private readonly aborts = new AbortFanout()
  private nextRequestId = 1
  private counters = emptyStats()
  private closed = false

  constructor(opts: StorageClientOptions) {
    if (!opts?.mgmtd) throw new StrataError('INVALID_ARGUMENT', 'StorageClient needs a MgmtdClient')
    const readMode = opts.readMode ?? 'loadBalance'
    if (!isReadMode(readMode)) throw new StrataError('INVALID_ARGUMENT', `unknown read mode ${String(readMode)}`)
    this.mgmtd = opts.mgmtd
    this.rpc = opts.rpc ?? new RpcClient()
    this.ownsRpc = !opts.rpc
    this.clientId = opts.clientId ?? randomUUID()
    this.policy = mergeRetryPolicy(DEFAULT_RETRY_POLICY, opts.retry)
    this.readMode = readMode
    this.random = opts.random ?? Math.random
    this.selector = new TargetSelector(this.random)
    this.channels = new ChannelAllocator(opts.numChannels ?? DEFAULTS.numChannels)
    this.limiter = new KeyedLimiter(opts.maxConcurrentPerNode ?? DEFAULTS.maxConcurrentPerNode)
    this.maxBatchIos = opts.maxBatchIos ?? DEFAULTS.maxBatchIos
    this.maxBatchBytes = opts.maxBatchBytes ?? DEFAULTS.maxBatchBytes
    this.verifyReadChecksum = opts.verifyReadChecksum ?? true
    this.removeBatchSize = opts.removeBatchSize ?? DEFAULTS.removeBatchSize
  }

  // --- updates (to the head, exactly-once tagged)

  /** Writes `data` at `offset` of a chunk; resolves once every replica of the chain committed it. */
  async write(chainId: ChainId, chunkId: Buffer, offset: number, data: Buffer, chunkSize: number, opts: CallOptions = {}): Promise<IOResult> {
    this.checkOpen()
    checkChunkId(chunkId)
    if (!(data instanceof Uint8Array)) throw new StrataError('INVALID_ARGUMENT', 'write data must be a Buffer')
    checkUint('chunkSize', chunkSize)
    checkUint('offset', offset)
    if (chunkSize === 0 || offset + data.length > chunkSize) {
      throw new StrataError('CHUNK_INVALID_RANGE', `write [${offset}, ${offset + data.length}) exceeds chunk size ${chunkSize}`)
    }
    const buf = asBuffer(data)
    const checksum = crc32c(buf) >>> 0
    bump(this.counters.ops, 'write')
    const r = await this.update<IOResult>('write', chainId, StorageMethod.write, opts, 1, (chain, tag): WriteReq => ({
      io: {
        key: { chainId, chainVer: chain.chainVersion, chunkId },
        offset,
        length: buf.length,
        chunkSize,
        data: buf,
        updateVer: 0,
        updateType: 'WRITE',
        checksum,
      },
      tag,
    }))
    this.counters.bytesWritten += buf.length
    return r
  }

  /**
   * Sets a chunk's length (creating it if missing). With onlyExtend a longer
   * chunk is left alone. `lengthInfo` of the result is the chunk's length after.
   */
  async truncate(chainId: ChainId, chunkId: Buffer, chunkLen: number, chunkSize: number, onlyExtend = false, opts: CallOptions = {}): Promise<IOResult> {
    this.checkOpen()
    checkChunkId(chunkId)
    checkUint('chunkLen', chunkLen)
    checkUint('chunkSize', chunkSize)
    if (chunkSize === 0 || chunkLen > chunkSize) throw new StrataError('INVALID_ARGUMENT', `chunk length ${chunkLen} exceeds chunk size ${chunkSize}`)
    bump(this.counters.ops, 'truncate')
    return this.update<IOResult>('truncate', chainId, StorageMethod.truncateChunks, opts, 1, (chain, tag): TruncateChunksReq => ({
      chainId,
      chainVer: chain.chainVersion,
      chunkId,
      chunkLen,
      chunkSize,
      onlyExtendChunk: onlyExtend,
      tag,
    }))
  }

  /**
   * Removes every chunk of [begin, end) on a chain, one bounded RPC after
   * another until the server reports none left.
   */
  async removeChunks(chainId: ChainId, range: ChunkRangeInput, opts: CallOptions = {}): Promise<RemoveChunksResult> {
    this.checkOpen()
    const r = normalizeRange(range, this.removeBatchSize)
    bump(this.counters.ops, 'removeChunks')
    const slots = r.maxNumChunkIdsToProcess
    // The server numbers the chunks it removes seqnum, seqnum+1, …, so each
    // request reserves that many. Every attempt gets fresh seqnums (3FS
    // reallocates for removals): removal is idempotent, and a cached answer to
    // a partial earlier attempt would hide chunks still left.
    let channel = await this.acquireChannel(slots, opts)
    let fresh = true
    try {
      return await drainRange(() => {
        const requestId = this.nextRequestId++
        return this.withRetries<RemoveChunksRsp>('removeChunks', this.deadlineOf(opts, this.policy.deadlineMs), opts, async (deadline) => {
          const chain = resolveChain(await this.mgmtd.routing(), chainId)
          const head = headOf(chain)
          if (!fresh) channel = this.channels.reseq(channel, slots)
          fresh = false
          const req: RemoveChunksReq = { chainId, chainVer: chain.chainVersion, range: r, tag: this.tag(requestId, channel) }
          return this.callNode<RemoveChunksRsp>(head, StorageMethod.removeChunks, req, deadline, opts.signal)
        })
      })
    } finally {
      this.channels.release(channel)
    }
  }

  // --- queries

  /**
   * The chunk with the largest id in [begin, end) plus totals over the chunks
   * the server processed (all of them unless maxNumChunkIdsToProcess caps it;
   * then moreChunksInRange says so). An empty range gives lastChunkId null.
   */
  async queryLastChunk(chainId: ChainId, range: ChunkRangeInput, opts: QueryOptions = {}): Promise<QueryLastChunkRsp> {
    this.checkOpen()
    const r = normalizeRange(range, MAX_CHUNKS_PER_REQUEST)
    const mode = opts.mode ?? 'head'
    if (!isReadMode(mode)) throw new StrataError('INVALID_ARGUMENT', `unknown read mode ${String(mode)}`)
    bump(this.counters.ops, 'queryLastChunk')
    const avoid = new Set<TargetId>()
    let target: SlimTarget | undefined
    try {
      const rsp = await this.withRetries<QueryLastChunkRsp>(
        'queryLastChunk',
        this.deadlineOf(opts, this.policy.readDeadlineMs),
        opts,
        async (deadline) => {
          const chain = resolveChain(await this.mgmtd.routing(), chainId)
          target = this.selector.select(chain, mode, { avoid, load: (n) => this.nodeLoad(n) })
          if (!target) throw new StrataError('CHAIN_UNAVAILABLE', `chain ${chainId}@${chain.chainVersion} has no serving target`)
          const req: QueryLastChunkReq = { chainId, chainVer: chain.chainVersion, range: r }
          return this.callNode<QueryLastChunkRsp>(target, StorageMethod.queryLastChunk, req, deadline, opts.signal)
        },
        (e) => {
          if (target && isTargetFailure(e.code)) avoid.add(target.targetId)
        },
      )
      return { ...rsp, lastChunkId: rsp.lastChunkId == null ? null : asBuffer(rsp.lastChunkId) }
    } catch (e) {
      if (e instanceof StrataError && e.code === 'CHUNK_NOT_FOUND') {
        return { lastChunkId: null, lastChunkLen: 0, totalChunkLen: 0, totalNumChunks: 0, moreChunksInRange: false }
      }
      throw e
    }
  }

  // --- reads

  /**
   * Reads one chunk range; a missing chunk reads as empty unless opts.strict.
   * `into` as in ReadRequest (the result is then usually a view of it).
   */
  async read(chainId: ChainId, chunkId: Buffer, offset: number, length: number, opts: ReadOptions & { into?: Buffer } = {}): Promise<Buffer> {
    const { into, ...rest } = opts
    const [r] = await this.batchRead([{ chainId, chunkId, offset, length, ...(into ? { into } : {}) }], rest)
    if (!r!.ok) throw r!.error
    return r!.data
  }

  /**
   * Reads many chunk ranges: each IO goes to one SERVING replica chosen by
   * the read mode, IOs for the same node travel in one batchRead RPC, and
   * every IO is retried on its own. Never throws for a per-IO failure; the
   * result at index i belongs to ios[i].
   */
  async batchRead(ios: readonly ReadRequest[], opts: ReadOptions = {}): Promise<ChunkReadResult[]> {
    this.checkOpen()
    const mode = opts.mode ?? this.readMode
    if (!isReadMode(mode)) throw new StrataError('INVALID_ARGUMENT', `unknown read mode ${String(mode)}`)
    const verify = opts.verifyChecksum ?? this.verifyReadChecksum
    const deadline = this.deadlineOf(opts, this.policy.readDeadlineMs)
    const results: Array<ChunkReadResult | undefined> = new Array(ios.length)
    const settle = (idx: number, r: ChunkReadResult): void => {
      if (results[idx]) return
      results[idx] = r
      opts.onResult?.(idx, r)
    }
    this.counters.batchReadCalls++
    bump(this.counters.ops, 'read', ios.length)

    let pending: ReadState[] = []
    ios.forEach((io, idx) => {
      try {
        checkChunkId(io?.chunkId)
        checkUint('offset', io.offset)
        checkUint('length', io.length)
        if (!Number.isInteger(io.chainId)) throw new StrataError('INVALID_ARGUMENT', 'chainId must be an integer')
        if (io.into !== undefined && !(placeCapacity(io.into) >= io.length)) {
          throw new StrataError('INVALID_ARGUMENT', `into must be a Buffer or a list of Buffers of at least ${io.length} bytes`)
        }
        pending.push({ idx, io, exclude: new Set(), checksumFailures: new Map() })
      } catch (e) {
        settle(idx, this.fail(toStrataError(e, 'INVALID_ARGUMENT')))
      }
    })

    // 3FS keeps failed replicas per user call and steers the call's retries elsewhere
    const avoid = new Set<TargetId>()
    for (let round = 1; pending.length > 0; round++) {
      for (const st of pending) st.err = undefined
      const stop = this.stopReason(opts.signal)
      if (stop) {
        for (const st of pending) settle(st.idx, this.fail(stop))
        break
      }
      await this.readRound(pending, results, settle, mode, verify, avoid, deadline, opts)

      const next: ReadState[] = []
      let delay = Infinity
      let refresh = false
      for (const st of pending) {
        if (results[st.idx]) continue
        const err = st.err ?? new StrataError('INTERNAL', 'read IO ended a round without a result')
        // a bad copy is retried on another replica; which ones are left is decided at selection
        const retry = err.code === 'CHECKSUM_MISMATCH' || isRetryableCode(err.code)
        if (!retry || this.closed) {
          settle(st.idx, this.fail(err))
          continue
        }
        // with mgmtd gone, a replica not tried yet may still answer: only when none is left is it over
        const gone = clusterGone(err, this.mgmtd, this.policy.orphanTimeoutMs, 'read')
        if (gone && this.triedEveryReplica(st.io.chainId, mode, avoid)) {
          settle(st.idx, this.fail(gone))
          continue
        }
        next.push(st)
        delay = Math.min(delay, backoffDelay(this.policy, round, isFastRetryCode(err.code) || err.code === 'CHECKSUM_MISMATCH', this.random))
        refresh ||= needsRoutingRefresh(err.code)
      }
      if (next.length === 0) break
      if (performance.now() + delay >= deadline) {
        for (const st of next) settle(st.idx, this.fail(gaveUp(st.err!, round, deadline)))
        break
      }
      for (const st of next) bump(this.counters.retries, st.err!.code)
      await Promise.all([refresh ? this.refreshRouting() : undefined, this.sleep(delay, opts.signal)])
      pending = next
    }
    // (only for an IO left without a result: building the error for every IO counted each as an INTERNAL failure)
    ios.forEach((_, idx) => results[idx] ?? settle(idx, this.fail(new StrataError('INTERNAL', 'read IO without result'))))
    return results as ChunkReadResult[]
  }

  private async readRound(
    pending: ReadState[],
    results: ReadonlyArray<ChunkReadResult | undefined>,
    settle: (idx: number, r: ChunkReadResult) => void,
    mode: ReadMode,
    verify: boolean,
    avoid: Set<TargetId>,
    deadline: number,
    opts: ReadOptions,
  ): Promise<void> {
    let ri: RoutingInfo
    try {
      ri = await this.mgmtd.routing()
    } catch (e) {
      const err = toStrataError(e)
      for (const st of pending) st.err = err
      return
    }
    const chains = new Map<ChainId, SlimChain | StrataError>()
    const roundLoad = new Map<NodeId, number>()
    type Item = { st: ReadState; chain: SlimChain; target: SlimTarget }
    const assigned: Array<{ target: SlimTarget; bytes: number; item: Item }> = []
    for (const st of pending) {
      let chain = chains.get(st.io.chainId)
      if (!chain) {
        try {
          chain = resolveChain(ri, st.io.chainId)
        } catch (e) {
          chain = toStrataError(e)
        }
        chains.set(st.io.chainId, chain)
      }
      if (chain instanceof StrataError) {
        st.err = chain
        continue
      }
      const target = this.selector.select(chain, mode, {
        avoid,
        exclude: st.exclude,
        load: (n) => this.nodeLoad(n) + (roundLoad.get(n) ?? 0),
      })
      if (!target) {
        if (chain.serving.length > 0 && st.exclude.size > 0) {
          // every replica we could use returned bad data: that is the answer
          settle(st.idx, this.fail(new StrataError('CHECKSUM_MISMATCH', `chunk data failed checksum verification on ${[...st.exclude].join(', ')}`)))
        } else {
          st.err = new StrataError('CHAIN_UNAVAILABLE', `chain ${chain.chainId}@${chain.chainVersion} has no serving target`)
        }
        continue
      }
      roundLoad.set(target.nodeId, (roundLoad.get(target.nodeId) ?? 0) + 1)
      assigned.push({ target, bytes: st.io.length, item: { st, chain, target } })
    }

    const batches = groupByNode(assigned, this.maxBatchIos, this.maxBatchBytes)
    await Promise.all(
      batches.map(async (b) => {
        const req: BatchReadReq = {
          ios: b.items.map(({ st, chain }) => ({
            chainId: chain.chainId,
            chainVer: chain.chainVersion,
            chunkId: st.io.chunkId,
            offset: st.io.offset,
            length: st.io.length,
          })),
        }
        if (opts.allowReadUncommitted) req.allowReadUncommitted = true
        if (opts.serverVerifyChecksum) req.verifyChecksum = true
        let rsp: BatchReadRsp
        try {
          const sink = b.items.some(({ st }) => st.io.into) ? placeReadData(b.items.map(({ st }) => st.io.into)) : undefined
          rsp = await this.callNode<BatchReadRsp>(b.items[0]!.target, StorageMethod.batchRead, req, deadline, opts.signal, b.items.length, sink)
          if (!rsp || !Array.isArray(rsp.results) || rsp.results.length !== b.items.length) {
            throw new StrataError('INTERNAL', `batchRead answered ${rsp?.results?.length ?? 'no'} results for ${b.items.length} IOs`)
          }
        } catch (e) {
          const err = toStrataError(e)
          if (isTargetFailure(err.code)) avoid.add(b.items[0]!.target.targetId)
          for (const { st } of b.items) st.err = err
          return
        }
        rsp.results.forEach((r, i) => {
          const { st, target } = b.items[i]!
          if (!r.ok) {
            const err = StrataError.fromWire(r.error)
            bump(this.counters.errors, err.code)
            if (err.code === 'CHUNK_NOT_FOUND' && !opts.strict) {
              this.counters.holes++
              settle(st.idx, { ok: true, data: EMPTY, ...(Array.isArray(st.io.into) ? { placed: 0 } : {}), found: false, commitVer: 0, updateVer: 0, commitChainVer: 0, targetId: 0 })
              return
            }
            if (err.code === 'CHECKSUM_MISMATCH') this.noteBadCopy(st, target, mode)
            if (isTargetFailure(err.code)) avoid.add(target.targetId)
            st.err = err
            return
          }
          let data: Buffer
          let placed: readonly Buffer[] | undefined
          try {
            if (Array.isArray(r.data)) {
              // received in place across the request's scatter list
              if (!Array.isArray(st.io.into)) throw new StrataError('INTERNAL', 'a read reply was scattered without a scatter list')
              placed = r.data as readonly Buffer[]
              data = EMPTY
            } else {
              data = asBuffer(r.data)
              if (Array.isArray(st.io.into)) {
                if (data.length > placeCapacity(st.io.into)) throw new StrataError('INTERNAL', `read reply of ${data.length} bytes does not fit its scatter list`)
                placed = scatterCopy(data, st.io.into)
                data = EMPTY
              }
            }
          } catch (e) {
            st.err = toStrataError(e)
            return
          }
          const got = placed ? crc32cOfList(placed) : undefined
          if (verify && typeof r.checksum === 'number' && ((got ? got.crc : crc32c(data)) >>> 0) !== r.checksum >>> 0) {
            this.counters.checksumMismatches++
            bump(this.counters.errors, 'CHECKSUM_MISMATCH')
            this.noteBadCopy(st, target, mode)
            st.err = new StrataError('CHECKSUM_MISMATCH', `data from target ${target.targetId} does not match its checksum`)
            return
          }
          this.counters.bytesRead += got ? got.bytes : data.length
          settle(st.idx, {
            ok: true,
            data,
            ...(got ? { placed: got.bytes } : {}),
            found: true,
            commitVer: r.commitVer,
            updateVer: r.updateVer,
            commitChainVer: r.commitChainVer,
            targetId: target.targetId,
          })
        })
      }),
    )
  }

  /** any-replica modes move on at once; head/tail insist on their replica for checksumRetries more tries */
  private noteBadCopy(st: ReadState, target: SlimTarget, mode: ReadMode): void {
    const n = (st.checksumFailures.get(target.targetId) ?? 0) + 1
    st.checksumFailures.set(target.targetId, n)
    if (mode !== 'head' && mode !== 'tail') st.exclude.add(target.targetId)
    else if (n > this.policy.checksumRetries) st.exclude.add(target.targetId)
  }

  // --- stats and lifecycle

  stats(): StorageClientStats {
    return copyStats(this.counters)
  }

  resetStats(): void {
    this.counters = emptyStats()
  }

  /** IOs queued or in flight to a node (what loadBalance compares). */
  nodeLoad(nodeId: NodeId): number {
    return this.load.get(nodeId) ?? 0
  }

  get isClosed(): boolean {
    return this.closed
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    for (const wake of [...this.sleepers]) wake()
    this.channels.close()
    if (this.ownsRpc) this.rpc.close()
  }

  // --- internals

  private tag(requestId: number, ch: UpdateChannel): MessageTag {
    return { clientId: this.clientId, requestId, channel: { id: ch.id, seqnum: ch.seqnum } }
  }

  /**
   * One logical update: one channel, one requestId and seqnum for all its
   * attempts, so a retry that reaches a head which already applied it is
   * answered from the server's cache instead of applied twice.
   */
  private async update<T>(
    op: ClientOp,
    chainId: ChainId,
    method: number,
    opts: CallOptions,
    slots: number,
    build: (chain: SlimChain, tag: MessageTag) => unknown,
  ): Promise<T> {
    const deadline = this.deadlineOf(opts, this.policy.deadlineMs)
    const channel = await this.acquireChannel(slots, opts, deadline)
    const tag = this.tag(this.nextRequestId++, channel)
    try {
      return await this.withRetries<T>(op, deadline, opts, async (attemptDeadline) => {
        const chain = resolveChain(await this.mgmtd.routing(), chainId)
        return this.callNode<T>(headOf(chain), method, build(chain, tag), attemptDeadline, opts.signal)
      })
    } finally {
      this.channels.release(channel)
    }
  }

  private async acquireChannel(slots: number, opts: CallOptions, deadline = this.deadlineOf(opts, this.policy.deadlineMs)): Promise<UpdateChannel> {
    const now = this.channels.tryAllocate(slots)
    if (now) return now
    const ctl = new AbortController()
    const timer = setTimeout(() => ctl.abort(new StrataError('TIMEOUT', 'no update channel became free before the deadline')), Math.max(0, deadline - performance.now()))
    const signal = opts.signal
    const off = signal ? this.aborts.on(signal, () => ctl.abort(signal.reason)) : undefined
    try {
      return await this.channels.allocate(slots, ctl.signal)
    } catch (e) {
      if (ctl.signal.reason instanceof StrataError && ctl.signal.reason.code === 'TIMEOUT') throw ctl.signal.reason
      throw e
    } finally {
      clearTimeout(timer)
      off?.()
    }
  }

  /**
   * Runs attempts until one succeeds, an error is not retryable, or the next
   * attempt would start after the deadline. `attempt` gets the absolute
   * deadline of that attempt (attemptTimeoutMs, capped by the overall one).
   */
  private async withRetries<T>(
    op: ClientOp,
    deadline: number,
    opts: CallOptions,
    attempt: (attemptDeadline: number) => Promise<T>,
    onError?: (e: StrataError) => void,
  ): Promise<T> {
    const perAttempt = opts.attemptTimeoutMs ?? this.policy.attemptTimeoutMs
    for (let n = 1; ; n++) {
      const stop = this.stopReason(opts.signal)
      if (stop) throw stop
      try {
        return await attempt(Math.min(deadline, performance.now() + perAttempt))
      } catch (e) {
        const err = toStrataError(e)
        onError?.(err)
        if (!isRetryableCode(err.code)) {
          bump(this.counters.failures, err.code)
          throw err
        }
        // closed or cancelled while the attempt was out: that, not the retryable answer, is why it ends
        const stopped = this.stopReason(opts.signal)
        if (stopped) {
          bump(this.counters.failures, stopped.code)
          throw new StrataError(stopped.code, stopped.message, { cause: err })
        }
        const gone = clusterGone(err, this.mgmtd, this.policy.orphanTimeoutMs, op)
        if (gone) {
          bump(this.counters.failures, gone.code)
          throw gone
        }
        const delay = backoffDelay(this.policy, n, isFastRetryCode(err.code), this.random)
        if (performance.now() + delay >= deadline) {
          bump(this.counters.failures, err.code)
          throw gaveUp(err, n, deadline, op)
        }
        bump(this.counters.retries, err.code)
        await Promise.all([needsRoutingRefresh(err.code) ? this.refreshRouting() : undefined, this.sleep(delay, opts.signal)])
      }
    }
  }

  private async callNode<T>(target: SlimTarget, method: number, payload: unknown, deadline: number, signal?: AbortSignal, weight = 1, sink?: AttachmentSink): Promise<T> {
    this.load.set(target.nodeId, this.nodeLoad(target.nodeId) + weight)
    try {
      return await this.limiter.run(target.address, async () => {
        const timeoutMs = Math.max(1, Math.round(deadline - performance.now()))
        bump(this.counters.rpcs, methodName(ServiceId.Storage, method))
        // The RPC listens on a signal of its own, aborted through the fan-out:
        // the caller's signal keeps one listener however many RPCs share it.
        let rpcCtl: AbortController | undefined
        let off: (() => void) | undefined
        if (signal) {
          const ctl = (rpcCtl = new AbortController())
          off = this.aborts.on(signal, () => ctl.abort(signal.reason))
        }
        try {
          return await this.rpc.call<T>(target.address, ServiceId.Storage, method, payload, {
            timeoutMs,
            ...(rpcCtl ? { signal: rpcCtl.signal } : {}),
            ...(sink ? { sink } : {}),
            // chunk data lands 4 KiB-aligned in the node's frame, ready for an O_DIRECT write
            ...(method === StorageMethod.write ? { alignAttachments: DIRECT_IO_ALIGN } : {}),
          })
        } catch (e) {
          bump(this.counters.errors, toStrataError(e).code)
          throw e
        } finally {
          off?.()
        }
      })
    } finally {
      const n = this.nodeLoad(target.nodeId) - weight
      if (n <= 0) this.load.delete(target.nodeId)
      else this.load.set(target.nodeId, n)
    }
  }

  /** Whether every replica a read in `mode` could use of the chain (per the cached routing) failed in this call. */
  private triedEveryReplica(chainId: ChainId, mode: ReadMode, avoid: ReadonlySet<TargetId>): boolean {
    const ri = this.mgmtd.cachedRouting
    if (!ri) return true
    let serving: SlimTarget[]
    try {
      serving = resolveChain(ri, chainId).serving
    } catch {
      return true
    }
    const usable = mode === 'head' ? serving.slice(0, 1) : mode === 'tail' ? serving.slice(-1) : serving
    return usable.every((t) => avoid.has(t.targetId))
  }

  private async refreshRouting(): Promise<void> {
    this.counters.routingRefreshes++
    try {
      await this.mgmtd.refresh()
    } catch {
      // mgmtd unreachable: keep the cached routing; the next attempt reports what is wrong
    }
  }

  private deadlineOf(opts: CallOptions, defaultMs: number): number {
    return performance.now() + (opts.deadlineMs ?? defaultMs)
  }

  private stopReason(signal?: AbortSignal): StrataError | undefined {
    if (this.closed) return new StrataError('CLOSED', 'storage client closed')
    if (signal?.aborted) return new StrataError('CANCELLED', 'storage operation cancelled', { cause: signal.reason })
    return undefined
  }

  private checkOpen(): void {
    if (this.closed) throw new StrataError('CLOSED', 'storage client closed')
  }

  private fail(error: StrataError): ChunkReadResult {
    bump(this.counters.failures, error.code)
    return { ok: false, error }
  }

  private sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      // wakes up early on close or cancel; the loop then notices and stops
      let off: (() => void) | undefined
      const done = () => {
        clearTimeout(t)
        this.sleepers.delete(done)
        off?.()
        resolve()
      }
      const t = setTimeout(done, Math.max(0, ms))
      this.sleepers.add(done)
      if (signal) off = this.aborts.on(signal, done)
    })
  }
}

/**
 * Abort callbacks grouped by signal, with one 'abort' listener on each
 * signal however many operations wait on it. Many concurrent calls sharing
 * one caller signal (a CLI command's) each had listeners of their own, per
 * RPC and per retry sleep, past the EventTarget limit of 10
 * (MaxListenersExceededWarning) and for no benefit. A signal's entry and its
 * listener go as soon as its last callback is removed or it fires.
 */
class AbortFanout {
  private readonly subs = new Map<AbortSignal, { fns: Set<() => void>; onAbort: () => void }>()

  /** Calls `fn` once when `signal` aborts (at once if it has); returns the function that unsubscribes. */
  on(signal: AbortSignal, fn: () => void): () => void {
    if (signal.aborted) {
      fn()
      return () => {}
    }
    let sub = this.subs.get(signal)
    if (!sub) {
      const fns = new Set<() => void>()
      const onAbort = () => {
        this.subs.delete(signal)
        for (const f of [...fns]) f()
      }
      sub = { fns, onAbort }
      this.subs.set(signal, sub)
      signal.addEventListener('abort', onAbort, { once: true })
    }
    const s = sub
    s.fns.add(fn)
    return () => {
      if (!s.fns.delete(fn) || s.fns.size > 0 || this.subs.get(signal) !== s) return
      this.subs.delete(signal)
      signal.removeEventListener('abort', s.onAbort)
    }
  }
}

function gaveUp(err: StrataError, attempts: number, deadline: number, op?: string): StrataError {
  const late = Math.max(0, Math.round(performance.now() - deadline))
  return new StrataError(err.code, `${err.reason} (${op ? `${op}: ` : ''}gave up after ${attempts} attempt${attempts === 1 ? '' : 's'}${late ? `, ${late} ms past the deadline` : ''})`, {
    cause: err,
    ...(err.detail ? { detail: err.detail } : {}),
  })
}

function checkChunkId(id: unknown): asserts id is Buffer {
  if (!isChunkId(id)) throw new StrataError('INVALID_ARGUMENT', 'chunk id must be a 16-byte Buffer')
}

function checkUint(name: string, v: number): void {
  if (!Number.isSafeInteger(v) || v < 0) throw new StrataError('INVALID_ARGUMENT', `${name} must be a non-negative integer, got ${v}`)
}

/** Sends each result's data into the memory its request named (ReadRequest.into). */
function placeReadData(into: ReadonlyArray<Buffer | readonly Buffer[] | undefined>): AttachmentSink {
  return (payload, placeholders, lengths) => {
    const results = (payload as Partial<BatchReadRsp> | null)?.results
    if (!Array.isArray(results)) return null
    const out: Array<Buffer | readonly Buffer[] | undefined> = new Array(placeholders.length)
    results.forEach((r, i) => {
      const dest = into[i]
      if (!dest || !r?.ok) return
      const k = placeholders.indexOf(r.data as Buffer)
      if (k < 0 || lengths[k]! > placeCapacity(dest)) return
      if (Buffer.isBuffer(dest)) out[k] = dest.subarray(0, lengths[k])
      else if (lengths[k]! > 0) out[k] = clipList(dest, lengths[k]!)
    })
    return out
  }
}

/** Bytes a ReadRequest.into can hold (NaN when it is neither a Buffer nor a list of them). */
function placeCapacity(into: unknown): number {
  if (Buffer.isBuffer(into)) return into.length
  if (!Array.isArray(into) || into.length === 0) return NaN
  let n = 0
  for (const b of into) {
    if (!Buffer.isBuffer(b)) return NaN
    n += b.length
  }
  return n
}

/** The first n bytes of a scatter list, as a list (the last Buffer cut short). */
function clipList(list: readonly Buffer[], n: number): Buffer[] {
  const out: Buffer[] = []
  for (const b of list) {
    if (n <= 0) break
    out.push(b.length <= n ? b : b.subarray(0, n))
    n -= b.length
  }
  return out
}

/** Copies data over a scatter list; returns the parts of the list that now hold it. */
function scatterCopy(data: Buffer, list: readonly Buffer[]): Buffer[] {
  const parts = clipList(list, data.length)
  let off = 0
  for (const b of parts) {
    data.copy(b, 0, off, off + b.length)
    off += b.length
  }
  return parts
}

function crc32cOfList(list: readonly Buffer[]): { crc: number; bytes: number } {
  let crc = 0
  let bytes = 0
  for (const b of list) {
    crc = crc32c(b, crc)
    bytes += b.length
  }
  return { crc, bytes }
}

/** msgpack may hand binary back as a plain Uint8Array. */
function asBuffer(x: unknown): Buffer {
  if (Buffer.isBuffer(x)) return x
  if (x instanceof Uint8Array) return Buffer.from(x.buffer, x.byteOffset, x.byteLength)
  if (x == null) return EMPTY
  throw new StrataError('INTERNAL', `expected binary data, got ${typeof x}`)
}
