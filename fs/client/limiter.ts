// Bounded concurrency per key (a storage node): at most `limit` requests in
// flight, the rest wait FIFO. Keeps one slow node from absorbing every
// request and keeps the per-node in-flight count that loadBalance reads.

export class KeyedLimiter {
  private readonly active = new Map<string, number>()
  private readonly queues = new Map<string, Array<() => void>>()

  constructor(readonly limit: number) {
    if (!(limit >= 1)) throw new RangeError('limit must be >= 1')
  }

  inFlight(key: string): number {
    return this.active.get(key) ?? 0
  }

  queued(key: string): number {
    return this.queues.get(key)?.length ?? 0
  }

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    await this.acquire(key)
    try {
      return await fn()
    } finally {
      this.release(key)
    }
  }

  private acquire(key: string): Promise<void> {
    const n = this.active.get(key) ?? 0
    if (n < this.limit) {
      this.active.set(key, n + 1)
      return Promise.resolve()
    }
    return new Promise<void>((resolve) => {
      let q = this.queues.get(key)
      if (!q) this.queues.set(key, (q = []))
      q.push(resolve)
    })
  }

  private release(key: string): void {
    const q = this.queues.get(key)
    const next = q?.shift()
    if (q && q.length === 0) this.queues.delete(key)
    // the slot passes straight to the next waiter, so `active` stays as is
    if (next) return next()
    const n = (this.active.get(key) ?? 1) - 1
    if (n <= 0) this.active.delete(key)
    else this.active.set(key, n)
  }
}
