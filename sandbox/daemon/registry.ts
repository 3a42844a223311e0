// The node's sandbox registry, persisted in a local lmdb environment so a
// restarted daemon knows every sandbox it made: `sb:<id>` holds the record a
// client sees plus where its state lives; `idem:<key>` maps an idempotency
// key to the sandbox it created and a hash of the request, kept 24 h.
import { open, type RootDatabase } from 'lmdb'
import type { SandboxInfo } from './types.js'

export interface IdempotencyRecord {
  id: string
  /** sha256 of the canonical request, without the key */
  requestHash: string
  at: number
}

export const IDEMPOTENCY_RETENTION_MS = 24 * 3600 * 1000

export class Registry {
  readonly #db: RootDatabase
  #closed = false

  private constructor(db: RootDatabase) {
    this.#db = db
  }

  /**
   * Written without fsync: what the registry describes (running sandboxes)
   * does not survive a machine crash either, and a killed daemon loses
   * nothing lmdb has committed to the page cache.
   */
  static open(path: string): Registry {
    return new Registry(open({ path, compression: false, noSync: true }))
  }

  get(id: string): SandboxInfo | undefined {
    return this.#db.get(`sb:${id}`) as SandboxInfo | undefined
  }

  all(): SandboxInfo[] {
    const out: SandboxInfo[] = []
    for (const { value } of this.#db.getRange({ start: 'sb:', end: 'sb;' })) out.push(value as SandboxInfo)
    return out
  }

  async put(info: SandboxInfo): Promise<void> {
    await this.#db.put(`sb:${info.id}`, info)
  }

  async remove(id: string): Promise<void> {
    await this.#db.remove(`sb:${id}`)
  }

  getIdempotency(key: string): IdempotencyRecord | undefined {
    const r = this.#db.get(`idem:${key}`) as IdempotencyRecord | undefined
    if (r && Date.now() - r.at > IDEMPOTENCY_RETENTION_MS) return undefined
    return r
  }

  async putIdempotency(key: string, rec: IdempotencyRecord): Promise<void> {
    await this.#db.put(`idem:${key}`, rec)
  }

  /** Drops idempotency keys past their retention. */
  async expireIdempotency(now = Date.now()): Promise<number> {
    const old: string[] = []
    for (const { key, value } of this.#db.getRange({ start: 'idem:', end: 'idem;' })) {
      if (now - (value as IdempotencyRecord).at > IDEMPOTENCY_RETENTION_MS) old.push(key as string)
    }
    for (const k of old) await this.#db.remove(k)
    return old.length
  }

  async close(): Promise<void> {
    if (this.#closed) return
    this.#closed = true
    await this.#db.close()
  }
}
