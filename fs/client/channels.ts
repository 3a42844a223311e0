// Update channels for exactly-once updates (3FS UpdateChannelAllocator).
// Storage nodes remember, per (client, chain, channel), the last seqnum they
// saw and its result: a retry carrying the same tag gets the cached answer
// instead of being applied twice, and a lower seqnum is refused. That only
// works if a channel carries one update at a time and every new update on it
// has a higher seqnum — hence: a channel is held for the whole life of one
// logical update (all its retries), and seqnums come from one counter shared
// by all channels, so they only ever grow.

import { StrataError } from '../common/errors.js'

export interface UpdateChannel {
  /** 1..numChannels; 0 is 3FS's "no channel" */
  id: number
  seqnum: number
}

interface Waiter {
  slots: number
  resolve: (ch: UpdateChannel) => void
  reject: (e: StrataError) => void
  cleanup: () => void
}

export class ChannelAllocator {
  readonly numChannels: number
  private readonly free: number[] = []
  private readonly busy = new Set<number>()
  private readonly waiters: Waiter[] = []
  private nextSeqnum: number
  private closed = false

  constructor(numChannels = 1024, firstSeqnum = 1) {
    if (!Number.isInteger(numChannels) || numChannels < 1 || numChannels > 0xffff) {
      throw new StrataError('INVALID_ARGUMENT', `numChannels must be in [1, 65535], got ${numChannels}`)
    }
    if (!Number.isSafeInteger(firstSeqnum) || firstSeqnum < 1) throw new StrataError('INVALID_ARGUMENT', 'firstSeqnum must be a positive integer')
    this.numChannels = numChannels
    this.nextSeqnum = firstSeqnum
    // a stack with 1 on top: low ids are reused first, as in 3FS
    for (let id = numChannels; id > 0; id--) this.free.push(id)
  }

  get inUse(): number {
    return this.busy.size
  }

  get waiting(): number {
    return this.waiters.length
  }

  /**
   * `slots` seqnums are reserved: a removeChunks request lets the server
   * use seqnum, seqnum+1, … for the chunks it removes.
   */
  private takeSeqnum(slots: number): number {
    if (!Number.isInteger(slots) || slots < 1) throw new StrataError('INVALID_ARGUMENT', `slots must be a positive integer, got ${slots}`)
    const s = this.nextSeqnum
    this.nextSeqnum += slots
    return s
  }

  tryAllocate(slots = 1): UpdateChannel | undefined {
    if (this.closed) throw new StrataError('CLOSED', 'channel allocator closed')
    // queued waiters go first, or a steady stream of tryAllocate could starve them
    if (this.waiters.length > 0) return undefined
    const id = this.free.pop()
    if (id === undefined) return undefined
    this.busy.add(id)
    return { id, seqnum: this.takeSeqnum(slots) }
  }

  /** Waits (FIFO) for a free channel when all are busy. */
  allocate(slots = 1, signal?: AbortSignal): Promise<UpdateChannel> {
    const ch = this.tryAllocate(slots)
    if (ch) return Promise.resolve(ch)
    if (signal?.aborted) return Promise.reject(new StrataError('CANCELLED', 'waiting for an update channel was cancelled', { cause: signal.reason }))
    return new Promise<UpdateChannel>((resolve, reject) => {
      const onAbort = () => {
        const i = this.waiters.indexOf(w)
        if (i >= 0) this.waiters.splice(i, 1)
        reject(new StrataError('CANCELLED', 'waiting for an update channel was cancelled', { cause: signal?.reason }))
      }
      const w: Waiter = { slots, resolve, reject, cleanup: () => signal?.removeEventListener('abort', onAbort) }
      signal?.addEventListener('abort', onAbort, { once: true })
      this.waiters.push(w)
    })
  }

  /**
   * Same channel, fresh seqnum: for idempotent updates (removeChunks) whose
   * retry must not be answered from the cache of a partial earlier attempt.
   */
  reseq(ch: UpdateChannel, slots = 1): UpdateChannel {
    if (!this.busy.has(ch.id)) throw new StrataError('INTERNAL', `channel ${ch.id} is not allocated`)
    return { id: ch.id, seqnum: this.takeSeqnum(slots) }
  }

  release(ch: UpdateChannel): void {
    if (!this.busy.has(ch.id)) throw new StrataError('INTERNAL', `channel ${ch.id} released twice or never allocated`)
    const w = this.waiters.shift()
    if (w && !this.closed) {
      // hand over directly: the channel never becomes visible as free
      w.cleanup()
      w.resolve({ id: ch.id, seqnum: this.takeSeqnum(w.slots) })
      return
    }
    this.busy.delete(ch.id)
    this.free.push(ch.id)
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    for (const w of this.waiters.splice(0)) {
      w.cleanup()
      w.reject(new StrataError('CLOSED', 'storage client closed'))
    }
  }
}
