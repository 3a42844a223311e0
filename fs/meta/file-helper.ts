// What the metadata service asks storage, as 3FS FileHelper/FileOperation:
// the exact length of a file (queryLastChunk over the file's chunk range on
// every chain of its stripe; length = max(lastChunkIndex*chunkSize +
// lastChunkLen)), removal of all of a file's chunks (GC), and the cluster's
// space (spaceInfo of every storage node, cached).

import { StrataError } from '../common/errors.js'
import { fileChunkRange, parseChunkId } from '../common/chunk-id.js'
import { ServiceId, StorageMethod } from '../common/services.js'
import type { Logger } from '../common/log.js'
import type { StorageClient } from '../client/index.js'
import type { MgmtdClient } from '../mgmtd/index.js'
import type { RpcClient } from '../rpc/index.js'
import type { SpaceInfoRsp } from '../storage/protocol.js'
import { stripeChainIds } from './chains.js'
import type { Inode, StatFsRsp } from './protocol.js'

export class FileHelper {
  private cachedFs: { at: number; status: StatFsRsp } | null = null

  constructor(
    private readonly mgmtd: MgmtdClient,
    private readonly storage: StorageClient,
    private readonly rpc: RpcClient,
    private readonly log: Logger,
  ) {}

  private async chains(inode: Inode): Promise<number[]> {
    if (inode.type !== 'File' || !inode.file) throw new StrataError('META_INVALID_ARGUMENT', `inode 0x${inode.id.toString(16)} is not a file`)
    let ri = await this.mgmtd.routing()
    try {
      return [...new Set(stripeChainIds(ri, inode.file.layout))]
    } catch {
      ri = await this.mgmtd.refresh()
      return [...new Set(stripeChainIds(ri, inode.file.layout))]
    }
  }

  /** The file length storage holds: the end of the last chunk over every chain of the stripe. */
  async queryLength(inode: Inode): Promise<number> {
    const chains = await this.chains(inode)
    const chunkSize = inode.file!.layout.chunkSize
    const range = fileChunkRange(inode.id)
    const results = await Promise.all(chains.map((c) => this.storage.queryLastChunk(c, { ...range, maxNumChunkIdsToProcess: 1 })))
    let length = 0
    for (const r of results) {
      if (!r.lastChunkId || r.totalNumChunks === 0) continue
      const id = parseChunkId(r.lastChunkId)
      if (id.inode !== inode.id) throw new StrataError('INTERNAL', `storage returned chunk of inode ${id.inode} for ${inode.id}`)
      length = Math.max(length, id.chunkIndex * chunkSize + r.lastChunkLen)
    }
    return length
  }

  /** Removes every chunk of the file on every chain of its stripe; returns how many went. */
  async removeChunks(inode: Inode): Promise<number> {
    const chains = await this.chains(inode)
    const range = fileChunkRange(inode.id)
    const rs = await Promise.all(chains.map((c) => this.storage.removeChunks(c, { ...range, maxNumChunkIdsToProcess: 32 })))
    return rs.reduce((n, r) => n + r.numChunksRemoved, 0)
  }

  cachedFsStatus(): StatFsRsp | null {
    return this.cachedFs?.status ?? null
  }

  /** Cached space of the cluster; refreshed by refreshStatFs (3FS answers from its cache only). */
  async statFs(maxAgeMs: number): Promise<StatFsRsp> {
    if (this.cachedFs && Date.now() - this.cachedFs.at <= maxAgeMs) return this.cachedFs.status
    await this.refreshStatFs()
    if (!this.cachedFs) throw new StrataError('META_BUSY', 'space of the cluster unknown yet')
    return this.cachedFs.status
  }

  /** spaceInfo of every connected storage node; one disk counted once (targets on a disk share its space). */
  async refreshStatFs(): Promise<void> {
    const ri = await this.mgmtd.routing()
    const nodes = Object.values(ri.nodes).filter((n) => n.type === 'STORAGE' && n.status === 'HEARTBEAT_CONNECTED' && n.address)
    let capacity = 0
    let free = 0
    let answered = 0
    await Promise.all(
      nodes.map(async (n) => {
        try {
          const rsp = await this.rpc.call<SpaceInfoRsp>(n.address, ServiceId.Storage, StorageMethod.spaceInfo, {}, { timeoutMs: 3000 })
          answered++
          const disks = new Map<string, { capacity: number; free: number }>()
          for (const t of rsp.targets) {
            const disk = ri.targets[String(t.targetId)]?.diskIndex ?? 0
            if (!disks.has(String(disk))) disks.set(String(disk), { capacity: t.capacity, free: Math.min(t.free, t.capacity) })
          }
          for (const d of disks.values()) {
            capacity += d.capacity
            free += d.free
          }
        } catch (e) {
          this.log.warn('spaceInfo failed', { node: n.nodeId, err: e })
        }
      }),
    )
    if (answered === 0 && nodes.length > 0) return
    this.cachedFs = { at: Date.now(), status: { capacity, used: capacity - free, free } }
  }
}
