// The storage node's targets and their local states. Local state follows
// 3FS (TargetMap::updateLocalState + the restart protocol): a process that
// restarts reports every pre-existing target OFFLINE until routing info shows
// none of them SERVING/SYNCING/WAITING, so each goes through recovery; after
// that a target is ONLINE, becomes UPTODATE when its chain makes it SERVING
// (or when a resync finishes), and drops to OFFLINE when the chain demotes it.

import fs from 'node:fs'
import path from 'node:path'
import { StrataError } from '../common/errors.js'
import type { ChainInfo, LocalTargetState, PublicTargetState, RoutingInfo } from '../common/types.js'
import type { Logger } from '../common/log.js'
import { ChunkEngine } from './engine/index.js'

export interface TargetRecord {
  targetId: number
  chainId: number
  diskIndex: number
  chunkSizes?: number[]
  createdAt: number
}

export interface LocalTarget {
  record: TargetRecord
  dir: string
  engine: ChunkEngine
  localState: LocalTargetState
  /** set by offline-target or a disk error; only a process restart clears it */
  stickyOffline: string | null
  /** true until routing shows this pre-existing target out of SERVING/SYNCING/WAITING */
  awaitingRecovery: boolean
  /**
   * Times the chain took this target out of service or it went offline: an
   * update that entered before must not be finished after (craq.ts), when
   * the target is back in another place of its chain.
   */
  demotions: number
}

const RECORD = 'target.json'

export class TargetMap {
  private readonly byId = new Map<number, LocalTarget>()
  private readonly byChain = new Map<number, LocalTarget>()

  constructor(
    private readonly root: string,
    private readonly log: Logger,
    private readonly engine: { fsync: boolean; directWrites: boolean },
  ) {}

  /** Opens every target found on disk; they are pre-existing, so each awaits recovery. */
  async load(): Promise<void> {
    fs.mkdirSync(this.root, { recursive: true })
    for (const name of fs.readdirSync(this.root)) {
      const dir = path.join(this.root, name)
      const recPath = path.join(dir, RECORD)
      if (!fs.existsSync(recPath)) continue
      const record = JSON.parse(fs.readFileSync(recPath, 'utf8')) as TargetRecord
      const engine = await ChunkEngine.open({ dir, targetId: record.targetId, fsync: this.engine.fsync, directWrites: this.engine.directWrites })
      this.add({ record, dir, engine, localState: 'OFFLINE', stickyOffline: null, awaitingRecovery: true, demotions: 0 })
    }
    this.log.info('targets loaded', { count: this.byId.size })
  }

  private add(t: LocalTarget): void {
    this.byId.set(t.record.targetId, t)
    this.byChain.set(t.record.chainId, t)
  }

  async create(rec: Omit<TargetRecord, 'createdAt'>): Promise<LocalTarget> {
    if (!Number.isInteger(rec.targetId) || rec.targetId <= 0) throw new StrataError('INVALID_ARGUMENT', 'targetId must be a positive integer')
    if (!Number.isInteger(rec.chainId) || rec.chainId <= 0) throw new StrataError('INVALID_ARGUMENT', 'chainId must be a positive integer')
    const existing = this.byId.get(rec.targetId)
    if (existing) {
      if (existing.record.chainId === rec.chainId) return existing // idempotent re-create
      throw new StrataError('MGMTD_TARGET_EXISTED', `target ${rec.targetId} exists for chain ${existing.record.chainId}`)
    }
    if (this.byChain.has(rec.chainId)) {
      throw new StrataError('INVALID_ARGUMENT', `this node already has target ${this.byChain.get(rec.chainId)!.record.targetId} in chain ${rec.chainId}`)
    }
    const dir = path.join(this.root, String(rec.targetId))
    fs.mkdirSync(dir, { recursive: true })
    const record: TargetRecord = { ...rec, createdAt: Date.now() }
    const engine = await ChunkEngine.open({ dir, targetId: rec.targetId, fsync: this.engine.fsync, directWrites: this.engine.directWrites })
    // the record is written last: a crash before it leaves an ignored directory
    const tmp = path.join(dir, RECORD + '.tmp')
    fs.writeFileSync(tmp, JSON.stringify(record))
    fs.renameSync(tmp, path.join(dir, RECORD))
    // A brand-new target holds no data, so it needs no recovery.
    const t: LocalTarget = { record, dir, engine, localState: 'ONLINE', stickyOffline: null, awaitingRecovery: false, demotions: 0 }
    this.add(t)
    this.log.info('target created', { targetId: rec.targetId, chainId: rec.chainId })
    return t
  }

  async remove(targetId: number): Promise<void> {
    const t = this.byId.get(targetId)
    if (!t) throw new StrataError('TARGET_NOT_FOUND', `no target ${targetId} on this node`)
    this.byId.delete(targetId)
    if (this.byChain.get(t.record.chainId) === t) this.byChain.delete(t.record.chainId)
    await t.engine.close()
    fs.rmSync(t.dir, { recursive: true, force: true })
  }

  get(targetId: number): LocalTarget | undefined {
    return this.byId.get(targetId)
  }

  forChain(chainId: number): LocalTarget | undefined {
    return this.byChain.get(chainId)
  }

  all(): LocalTarget[] {
    return [...this.byId.values()]
  }

  /** Holds the target offline until the process restarts; the first reason stays (an offline-target after a diverged resync must not hide why). */
  setOffline(t: LocalTarget, why: string): void {
    if (t.stickyOffline === null) {
      this.log.warn('target offline', { targetId: t.record.targetId, why })
      t.stickyOffline = why
    }
    t.localState = 'OFFLINE'
    t.demotions++
  }

  /**
   * Applies routing info to local states. Returns targets that just turned
   * UPTODATE from ONLINE because their chain made them SERVING (a LASTSRV
   * coming back, or a fresh chain): their pending chunks must be force-committed.
   */
  onRouting(ri: RoutingInfo): LocalTarget[] {
    const promoted: LocalTarget[] = []
    const pub = (t: LocalTarget): PublicTargetState | undefined => publicStateIn(ri.chains[t.record.chainId], t.record.targetId)

    // Restart protocol: keep reporting OFFLINE while any pre-existing target is
    // still publicly in service; then bring all of them ONLINE together.
    const waiting = this.all().filter((t) => t.awaitingRecovery)
    if (waiting.length) {
      const stillInService = waiting.some((t) => {
        const p = pub(t)
        return p === 'SERVING' || p === 'SYNCING' || p === 'WAITING'
      })
      if (!stillInService) {
        for (const t of waiting) {
          t.awaitingRecovery = false
          if (!t.stickyOffline) t.localState = 'ONLINE'
        }
        this.log.info('restart protocol: targets out of service, reporting ONLINE', { targets: waiting.map((t) => t.record.targetId) })
      }
    }

    for (const t of this.all()) {
      if (t.awaitingRecovery || t.stickyOffline) continue
      const p = pub(t)
      if (p === undefined) continue // not in any chain yet
      if (t.localState === 'ONLINE' && p === 'SERVING') {
        t.localState = 'UPTODATE'
        promoted.push(t)
      } else if (t.localState === 'UPTODATE' && (p === 'OFFLINE' || p === 'LASTSRV' || p === 'WAITING')) {
        // Demoted while alive (e.g. heartbeats were late): stop serving, and
        // come back through recovery once the chain no longer counts on us.
        t.localState = 'OFFLINE'
        t.awaitingRecovery = true
        t.demotions++
        this.log.warn('target demoted by its chain; recovering', { targetId: t.record.targetId, publicState: p })
      }
    }
    return promoted
  }

  async close(): Promise<void> {
    for (const t of this.byId.values()) await t.engine.close()
    this.byId.clear()
    this.byChain.clear()
  }
}

export function publicStateIn(chain: ChainInfo | undefined, targetId: number): PublicTargetState | undefined {
  return chain?.targets.find((x) => x.targetId === targetId)?.publicState
}
