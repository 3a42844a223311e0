// Inode id allocation as 3FS InodeIdAllocator + IdAllocator: 32 counters
// under SING-inode-alloc-<shard>; taking value v from shard s yields
// u = v*32 + s (shard 0 starts at 1, so u ≥ 1), and u grants the block of ids
// [u<<12, (u<<12) + 4095], handed out locally. Ids are unique (the counter
// moves in a transaction), ≥ 0x1000 and roughly increasing.

import { randomInt } from 'node:crypto'
import { StrataError } from '../common/errors.js'
import type { KvEngine } from '../kv/types.js'
import { INODE_ALLOC_SHARDS, inodeAllocKey } from './keys.js'

const SHIFT = 12n
const BATCH = 1 << 12
const NEW_CHUNK_ENGINE_BIT = 1n << 56n

export class InodeIdAllocator {
  private readonly queue: bigint[] = []
  private head = 0
  private refilling: Promise<void> | null = null
  private readonly shards: number[]
  private next = 0

  constructor(private readonly kv: KvEngine) {
    this.shards = Array.from({ length: INODE_ALLOC_SHARDS }, (_, i) => i)
    for (let i = this.shards.length - 1; i > 0; i--) {
      const j = randomInt(i + 1)
      ;[this.shards[i], this.shards[j]] = [this.shards[j]!, this.shards[i]!]
    }
  }

  private get available(): number {
    return this.queue.length - this.head
  }

  /** One fresh id; fetches a new block from the KV when the local one runs out. */
  async allocate(): Promise<bigint> {
    for (let attempt = 0; this.available === 0; attempt++) {
      if (attempt > 5) throw new StrataError('INTERNAL', 'inode id allocation made no progress')
      await this.refill()
    }
    const id = this.queue[this.head++]!
    if (this.head > 2 * BATCH) {
      this.queue.splice(0, this.head)
      this.head = 0
    }
    if (this.available < BATCH / 2) void this.refill().catch(() => {})
    if (id >= NEW_CHUNK_ENGINE_BIT) throw new StrataError('INTERNAL', `inode id ${id} is too large`)
    return id
  }

  /** Makes sure a block is cached (called at start so the first create needs no extra transaction). */
  refill(): Promise<void> {
    this.refilling ??= this.fetchBlock().finally(() => {
      this.refilling = null
    })
    return this.refilling
  }

  private async fetchBlock(): Promise<void> {
    const shard = this.shards[this.next++ % this.shards.length]!
    const key = inodeAllocKey(shard)
    const value = await this.kv.transact(async (txn) => {
      const cur = await txn.get(key)
      const min = shard === 0 ? 1n : 0n
      let v = min
      if (cur !== undefined) {
        if (cur.length !== 8) throw new StrataError('INTERNAL', `inode allocator shard ${shard} holds ${cur.length} bytes`)
        v = cur.readBigUInt64LE(0)
        if (v < min) throw new StrataError('INTERNAL', `inode allocator shard ${shard} holds ${v} < ${min}`)
      }
      const nv = Buffer.allocUnsafe(8)
      nv.writeBigUInt64LE(v + 1n)
      txn.set(key, nv)
      return v
    })
    const u = value * BigInt(INODE_ALLOC_SHARDS) + BigInt(shard)
    const first = u << SHIFT
    for (let i = 0; i < BATCH; i++) this.queue.push(first + BigInt(i))
  }
}
