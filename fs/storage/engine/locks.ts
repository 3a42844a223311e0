// Concurrency primitives for the chunk engine. Both are promise-chain based
// (no timers, no polling) so a waiting operation costs one pending promise.

import { StrataError } from '../../common/errors.js'

/**
 * FIFO mutual exclusion per string key. Waiters queue in arrival order; a key
 * with nobody holding or waiting has no entry, so the map stays as small as
 * the set of chunks with in-flight work.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>()

  async run<T>(key: string, fn: () => Promise<T> | T): Promise<T> {
    const prev = this.tails.get(key)
    let release!: () => void
    const mine = new Promise<void>((resolve) => {
      release = resolve
    })
    const tail = prev ? prev.then(() => mine) : mine
    this.tails.set(key, tail)
    if (prev) await prev
    try {
      return await fn()
    } finally {
      release()
      // Only the last queued holder may drop the entry; an earlier one would
      // let a newcomer skip the queue.
      if (this.tails.get(key) === tail) this.tails.delete(key)
    }
  }

  isLocked(key: string): boolean {
    return this.tails.has(key)
  }

  get size(): number {
    return this.tails.size
  }
}

/**
 * Admission control for a resource that can be closed or taken exclusively:
 * ordinary operations run concurrently through `run`; `exclusive` waits for
 * them to drain and keeps new ones out until it finishes; `close` drains and
 * then refuses everything with CLOSED.
 */
export class OpGate {
  private active = 0
  private closed = false
  private barrier: Promise<void> | null = null
  private drainWaiters: Array<() => void> = []

  constructor(private readonly what: string) {}

  get isClosed(): boolean {
    return this.closed
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    while (this.barrier) {
      if (this.closed) break
      await this.barrier
    }
    this.checkOpen()
    this.active++
    try {
      return await fn()
    } finally {
      this.active--
      if (this.active === 0) this.notifyDrained()
    }
  }

  /** Synchronous admission check for read-only calls that never yield. */
  checkOpen(): void {
    if (this.closed) throw new StrataError('CLOSED', `${this.what} is closed`)
  }

  async exclusive<T>(fn: () => Promise<T>): Promise<T> {
    while (this.barrier) {
      if (this.closed) break
      await this.barrier
    }
    this.checkOpen()
    let lift!: () => void
    this.barrier = new Promise<void>((resolve) => {
      lift = resolve
    })
    try {
      await this.drained()
      return await fn()
    } finally {
      this.barrier = null
      lift()
    }
  }

  /** Refuses new work, then waits for work already admitted to finish. */
  async close(): Promise<void> {
    this.closed = true
    if (this.barrier) await this.barrier
    await this.drained()
  }

  private drained(): Promise<void> {
    if (this.active === 0) return Promise.resolve()
    return new Promise<void>((resolve) => this.drainWaiters.push(resolve))
  }

  private notifyDrained(): void {
    const waiters = this.drainWaiters
    this.drainWaiters = []
    for (const w of waiters) w()
  }
}
