// Write sessions of dead clients, as 3FS SessionManager: the first active
// meta server (smallest node id among the connected META nodes) scans every
// INOS record; a session whose client has no live mgmtd client session (and
// that is older than a minimum age, so a session created during the scan is
// safe) is pruned. With syncOnPruneSession the session is closed the way its
// client would have closed it — the length is queried from storage — so a
// file left open by a crashed writer ends with its exact length; otherwise it
// is just deleted. Pruning a session lets GC remove the file's chunks.

import { StrataError } from '../common/errors.js'
import type { Logger } from '../common/log.js'
import type { RoutingInfo } from '../common/types.js'
import type { KvEngine } from '../kv/types.js'
import type { MgmtdClient } from '../mgmtd/index.js'
import { decodeSession } from './codec.js'
import type { MetaSettings } from './config.js'
import { nowUs } from './inode.js'
import { PREFIX_SESSION, PRUNE_INODE, keyAfter, prefixEnd, sessionKey } from './keys.js'
import type { FileSessionRecord } from './protocol.js'

const PAGE = 512

/** The smallest connected META node id (3FS isFirstMeta). */
export function firstMeta(ri: RoutingInfo | null): number | undefined {
  if (!ri) return undefined
  let best: number | undefined
  for (const n of Object.values(ri.nodes)) {
    if (n.type !== 'META' || n.status !== 'HEARTBEAT_CONNECTED') continue
    if (best === undefined || n.nodeId < best) best = n.nodeId
  }
  return best
}

export interface SessionManagerOptions {
  kv: KvEngine
  mgmtd: MgmtdClient
  settings: MetaSettings
  nodeId: number
  log: Logger
  /** closes one session with a storage-queried length (the service's close operation) */
  closeSession: (s: FileSessionRecord) => Promise<void>
}

export class SessionManager {
  readonly stats = { scans: 0, pruned: 0, pruneFailed: 0 }

  constructor(private readonly o: SessionManagerOptions) {}

  /** Every write session (optionally of one client), in key order. */
  async listAll(filter?: (s: FileSessionRecord) => boolean, limit = 0): Promise<FileSessionRecord[]> {
    const out: FileSessionRecord[] = []
    const end = prefixEnd(PREFIX_SESSION)
    let begin: Buffer = PREFIX_SESSION
    for (;;) {
      const kvs = await this.o.kv.readOnly((txn) => txn.snapshotGetRange(begin, end, { limit: PAGE }))
      for (const kv of kvs) {
        const s = decodeSession(kv.value)
        if (s.inode === PRUNE_INODE) continue
        if (!filter || filter(s)) out.push(s)
        if (limit > 0 && out.length >= limit) return out
      }
      if (kvs.length < PAGE) return out
      begin = keyAfter(kvs[kvs.length - 1]!.key)
    }
  }

  /** One scan if this server is the first meta; returns how many sessions went. */
  async scan(): Promise<number> {
    const ri = this.o.mgmtd.cachedRouting
    if (!ri || ri.bootstrapping || firstMeta(ri) !== this.o.nodeId) return 0
    this.stats.scans++
    const started = nowUs()
    const active = await this.liveClients()
    const minAgeUs = this.o.settings.sessionPruneMinAgeMs * 1000
    const dead = await this.listAll((s) => !active.has(String(s.clientId).toLowerCase()) && s.timestamp + minAgeUs < started)
    let n = 0
    for (const s of dead) {
      this.o.log.warn('pruning write session of dead client', { inode: s.inode, client: s.clientId, session: s.session })
      if (await this.prune(s)) n++
    }
    return n
  }

  /**
   * Ids (lower case) of the clients mgmtd lists as alive: a client session
   * extended within sessionTimeoutMs. The scan prunes only sessions of
   * clients outside this set, and so does an explicit prune.
   */
  async liveClients(): Promise<Set<string>> {
    const { sessions } = await this.o.mgmtd.listClientSessions()
    const cutoff = Date.now() - this.o.settings.sessionTimeoutMs
    return new Set(sessions.filter((s) => s.lastExtend >= cutoff).map((s) => s.clientId.toLowerCase()))
  }

  /**
   * Prunes the sessions of one client (all of them, or the listed ones) —
   * only when mgmtd no longer lists the client as alive: the sessions of a
   * live writer are what keeps GC from removing the chunks of a file it
   * still writes (unlinked while open), and its later flush would write
   * chunks for an inode that no longer exists. A failure to ask mgmtd
   * fails the prune.
   */
  async pruneClient(clientId: string, only: string[]): Promise<number> {
    if ((await this.liveClients()).has(clientId.toLowerCase())) {
      throw new StrataError(
        'META_CLIENT_ALIVE',
        `client ${clientId} is alive (mgmtd lists its client session): its write sessions are pruned only once it is dead (mgmtd drops a client whose session it has not extended within its client session timeout)`,
      )
    }
    const want = new Set(only)
    const found = await this.listAll((s) => s.clientId === clientId && (want.size === 0 || want.has(s.session)))
    let n = 0
    for (const s of found) if (await this.prune(s)) n++
    return n
  }

  private async prune(s: FileSessionRecord): Promise<boolean> {
    try {
      if (this.o.settings.syncOnPruneSession) {
        try {
          await this.o.closeSession(s)
          this.stats.pruned++
          return true
        } catch (e) {
          if ((e as { code?: string }).code !== 'META_NOT_FOUND') throw e
        }
      }
      await this.o.kv.transact(
        async (txn) => {
          txn.clear(sessionKey(s.inode, s.session))
        },
        { frees: true },
      )
      this.stats.pruned++
      return true
    } catch (e) {
      this.stats.pruneFailed++
      this.o.log.warn('session prune failed', { inode: s.inode, session: s.session, err: e })
      return false
    }
  }
}
