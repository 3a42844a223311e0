// The server map of 3FS's Distributor: every meta server refreshes its own
// liveness key (META-<nodeId:08d>) each update interval, and the map of
// active servers (key META) is rewritten in the same transaction when a server
// joins, leaves (clean shutdown) or stops refreshing for the timeout. The
// owner of an inode is chosen by rendezvous hashing over the active servers.
//
// 3FS routes sync/close/setattr/create to the owner so one server batches
// them; here every server serves every request itself (the KV's serializable
// transactions keep that correct), and the map only reports who would own
// what (Core stats) — see docs/meta.md.

import type { Logger } from '../common/log.js'
import type { KvEngine } from '../kv/types.js'
import { decodeValue, encodeValue } from './codec.js'
import { META_MAP_KEY, parseMetaServerKey, prefixEnd, metaServerKey } from './keys.js'

const MASK64 = (1n << 64n) - 1n

function mix64(x: bigint): bigint {
  // splitmix64 finalizer
  x = (x + 0x9e3779b97f4a7c15n) & MASK64
  x = ((x ^ (x >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK64
  x = ((x ^ (x >> 27n)) * 0x94d049bb133111ebn) & MASK64
  return x ^ (x >> 31n)
}

/** Rendezvous (highest random weight) choice of a server for an inode. */
export function ownerOf(active: readonly number[], inode: bigint): number | undefined {
  let best: number | undefined
  let bestW = -1n
  for (const n of active) {
    const w = mix64(BigInt.asUintN(64, inode) ^ mix64(BigInt(n)))
    if (w > bestW || (w === bestW && best !== undefined && n < best)) {
      best = n
      bestW = w
    }
  }
  return best
}

interface ServerMap {
  active: number[]
}

export class Distributor {
  private active: number[] = []
  private readonly seen = new Map<number, { value: string; changed: number }>()
  private readonly startedAt = Date.now()
  private seq = 0

  constructor(
    private readonly kv: KvEngine,
    private readonly nodeId: number,
    private readonly timeoutMs: number,
    private readonly log: Logger,
  ) {}

  get activeServers(): readonly number[] {
    return this.active
  }

  getServer(inode: bigint): number | undefined {
    return ownerOf(this.active, inode)
  }

  /** One refresh; `exit` takes this server out of the map (clean shutdown). */
  async update(exit = false): Promise<void> {
    const prefix = Buffer.from('META-')
    const next = await this.kv.transact(async (txn) => {
      const raw = await txn.get(META_MAP_KEY)
      const map: ServerMap = raw ? decodeValue<ServerMap>(raw, 'meta server map') : { active: [] }
      const keys = await txn.snapshotGetRange(prefix, prefixEnd(prefix))
      const now = Date.now()
      for (const kv of keys) {
        const id = parseMetaServerKey(kv.key)
        if (id === undefined || id === this.nodeId) continue
        const value = kv.value.toString('hex')
        const prev = this.seen.get(id)
        if (!prev || prev.value !== value) this.seen.set(id, { value, changed: now })
      }
      const dead = new Set(map.active.filter((n) => n !== this.nodeId && (this.seen.get(n)?.changed ?? this.startedAt) + this.timeoutMs < now))
      if (exit) {
        txn.clear(metaServerKey(this.nodeId))
        dead.add(this.nodeId)
      } else {
        txn.set(metaServerKey(this.nodeId), encodeValue({ nodeId: this.nodeId, seq: ++this.seq, at: now }))
      }
      const joined = !exit && !map.active.includes(this.nodeId)
      if (!joined && dead.size === 0) return map.active
      const active = [...new Set([...map.active.filter((n) => !dead.has(n)), ...(exit ? [] : [this.nodeId])])].sort((a, b) => a - b)
      txn.set(META_MAP_KEY, encodeValue({ active }))
      if (dead.size) this.log.info('meta servers left the map', { dead: [...dead], active })
      return active
    })
    this.active = next
  }
}
