// 3FS service ids and method ids. The numbering is kept from 3FS so that
// traces and fault hooks read the same as theirs; the payloads are ours
// (msgpack objects, see the protocol.ts of each part).

export const ServiceId = {
  Storage: 3,
  Meta: 4,
  Mgmtd: 217,
  Core: 10001,
} as const

export type ServiceName = keyof typeof ServiceId

/** StorageSerde (service 3). */
export const StorageMethod = {
  batchRead: 1,
  write: 2,
  update: 3,
  queryLastChunk: 5,
  truncateChunks: 6,
  removeChunks: 7,
  syncStart: 8,
  syncDone: 9,
  spaceInfo: 10,
  createTarget: 11,
  queryChunk: 12,
  getAllChunkMetadata: 13,
  offlineTarget: 16,
  removeTarget: 17,
  /** ours, for tests: make a target's data writes fail as a full or broken disk would */
  setDiskFault: 100,
} as const

/** MgmtdSerde (service 217). initCluster is ours: 3FS's admin writes it to FDB directly. */
export const MgmtdMethod = {
  getPrimaryMgmtd: 1,
  heartbeat: 3,
  registerNode: 4,
  getRoutingInfo: 5,
  setConfig: 6,
  getConfig: 7,
  setChainTable: 8,
  enableNode: 9,
  disableNode: 10,
  extendClientSession: 11,
  listClientSessions: 12,
  setNodeTags: 13,
  unregisterNode: 14,
  setChains: 15,
  setUniversalTags: 16,
  getUniversalTags: 17,
  getConfigVersions: 18,
  getClientSession: 19,
  rotateLastSrv: 20,
  listOrphanTargets: 21,
  setPreferredTargetOrder: 22,
  rotateAsPreferredOrder: 23,
  updateChain: 24,
  initCluster: 100,
  getClusterInfo: 101,
} as const

/** MetaSerde (service 4). Ids ≥ 100 are ours (admin helpers 3FS's admin_cli does through FDB). */
export const MetaMethod = {
  statFs: 1,
  stat: 2,
  create: 3,
  mkdirs: 4,
  symlink: 5,
  hardLink: 6,
  remove: 7,
  open: 8,
  sync: 9,
  close: 10,
  rename: 11,
  list: 12,
  truncate: 13,
  getRealPath: 14,
  setAttr: 15,
  pruneSession: 16,
  dropUserCache: 17,
  authenticate: 18,
  lockDirectory: 19,
  batchStat: 20,
  batchStatByPath: 21,
  gcList: 100,
  listSessions: 101,
  dumpInodes: 102,
  dumpSessions: 103,
  abandon: 104,
} as const

/** Core service (10001), served by every process. Fault hooks are ours (ids ≥ 100). */
export const CoreMethod = {
  echo: 1,
  getConfig: 2,
  renderConfig: 3,
  hotUpdateConfig: 4,
  getLastConfigUpdateRecord: 5,
  shutdown: 6,
  setFault: 100,
  clearFaults: 101,
  listFaults: 102,
  stats: 103,
} as const

export function methodName(service: number, method: number): string {
  const table: Record<string, number> | undefined =
    service === ServiceId.Storage
      ? StorageMethod
      : service === ServiceId.Mgmtd
        ? MgmtdMethod
        : service === ServiceId.Meta
          ? MetaMethod
          : service === ServiceId.Core
            ? CoreMethod
            : undefined
  if (table) for (const [k, v] of Object.entries(table)) if (v === method) return k
  return `${service}.${method}`
}
