// mgmtd's persistent state in its own lmdb environment. Key prefixes follow
// 3FS's KV layout (SING, NODE, CHIT, CHIF, TGIF, CONF) so a dump reads like
// theirs. Every mutation is one lmdb transaction, written before the change
// becomes visible in memory or over RPC.

import { open, type RootDatabase } from 'lmdb'
import type { ChainInfo, ChainTable, NodeInfo, NodeType } from '../common/types.js'
import type { ClientSession, ClusterInit } from './protocol.js'

export interface StoredTarget {
  targetId: number
  chainId: number
  nodeId: number
  diskIndex: number
}

export interface StoredConfig {
  nodeType: NodeType
  configVersion: number
  content: string
  desc: string
}

export interface PersistedState {
  routingInfoVersion: number
  init: ClusterInit | null
  nodes: NodeInfo[]
  chainTables: ChainTable[]
  chains: ChainInfo[]
  targets: StoredTarget[]
  configs: StoredConfig[]
  sessions: ClientSession[]
  /** chain ids with their creation time, for the new-chain bootstrap grace */
  chainCreatedAt: Record<string, number>
}

export type Mutation =
  | { kind: 'version'; value: number }
  | { kind: 'init'; value: ClusterInit }
  | { kind: 'node'; value: NodeInfo }
  | { kind: 'delNode'; nodeId: number }
  | { kind: 'chainTable'; value: ChainTable }
  | { kind: 'chain'; value: ChainInfo; createdAt?: number }
  | { kind: 'target'; value: StoredTarget }
  | { kind: 'delTarget'; targetId: number }
  | { kind: 'config'; value: StoredConfig }
  | { kind: 'session'; value: ClientSession }
  | { kind: 'delSession'; clientId: string }

export class MgmtdStore {
  private constructor(private readonly db: RootDatabase) {}

  static open(path: string): MgmtdStore {
    // The whole state is small; sync writes keep "acknowledged ⇒ persisted".
    const db = open({ path, compression: false, noSync: false })
    return new MgmtdStore(db)
  }

  load(): PersistedState {
    const s: PersistedState = {
      routingInfoVersion: (this.db.get('SING-RoutingInfoVersion') as number | undefined) ?? 0,
      init: (this.db.get('SING-ClusterInit') as ClusterInit | undefined) ?? null,
      nodes: [],
      chainTables: [],
      chains: [],
      targets: [],
      configs: [],
      sessions: [],
      chainCreatedAt: {},
    }
    for (const { key, value } of this.db.getRange({ start: 'A', end: 'z' })) {
      const k = String(key)
      if (k.startsWith('NODE-')) s.nodes.push(value as NodeInfo)
      else if (k.startsWith('CHIT-')) s.chainTables.push(value as ChainTable)
      else if (k.startsWith('CHIF-')) {
        const v = value as { chain: ChainInfo; createdAt: number }
        s.chains.push(v.chain)
        s.chainCreatedAt[String(v.chain.chainId)] = v.createdAt
      } else if (k.startsWith('TGIF-')) s.targets.push(value as StoredTarget)
      else if (k.startsWith('CONF-')) s.configs.push(value as StoredConfig)
      else if (k.startsWith('CLIS-')) s.sessions.push(value as ClientSession)
    }
    return s
  }

  apply(mutations: Mutation[], chainCreatedAt: (chainId: number) => number): void {
    if (mutations.length === 0) return
    this.db.transactionSync(() => {
      for (const m of mutations) {
        switch (m.kind) {
          case 'version':
            this.db.putSync('SING-RoutingInfoVersion', m.value)
            break
          case 'init':
            this.db.putSync('SING-ClusterInit', m.value)
            break
          case 'node':
            this.db.putSync(`NODE-${m.value.nodeId}`, m.value)
            break
          case 'delNode':
            this.db.removeSync(`NODE-${m.nodeId}`)
            break
          case 'chainTable':
            this.db.putSync(`CHIT-${m.value.chainTableId}-${m.value.chainTableVersion}`, m.value)
            break
          case 'chain':
            this.db.putSync(`CHIF-${m.value.chainId}`, { chain: m.value, createdAt: m.createdAt ?? chainCreatedAt(m.value.chainId) })
            break
          case 'target':
            this.db.putSync(`TGIF-${m.value.targetId}`, m.value)
            break
          case 'delTarget':
            this.db.removeSync(`TGIF-${m.targetId}`)
            break
          case 'config':
            this.db.putSync(`CONF-${m.value.nodeType}`, m.value)
            break
          case 'session':
            this.db.putSync(`CLIS-${m.value.clientId}`, m.value)
            break
          case 'delSession':
            this.db.removeSync(`CLIS-${m.clientId}`)
            break
        }
      }
    })
  }

  async close(): Promise<void> {
    await this.db.close()
  }
}
