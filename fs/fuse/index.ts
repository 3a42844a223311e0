// FUSE mount of the Strata filesystem (3FS src/fuse on fuse-native).
export { startFuseDaemon, type FuseDaemon } from './daemon.js'
export { readFuseState, writeFuseState, type FuseState } from './state.js'
export { resolveFuseConfig, extraFuseOptions, fuseTimeout, FUSE_DEFAULTS, type FuseDaemonConfig, type ResolvedFuseConfig } from './config.js'
export { StrataFuseOps, inodeToStat, toStatfs, VIRT_DIR, VIRT_ROOT, RMRF_DIR, LOCK_XATTR, type FuseOpsOptions, type FuseOpsStats } from './ops.js'
export { toFuseErrno, errnoByName, E as FUSE_ERRNO } from './errno.js'
export { PathCache, parentOf, nameOf, childOf } from './path-cache.js'
export { loadFuse, fuseAvailable, fuseErrnoTable, type FuseOperations, type FuseStat, type FuseStatfs, type FuseOptions } from './native.js'
export {
  FUSE_FSTYPE,
  FUSE_SUBTYPE,
  parseMountinfo,
  readMounts,
  findMount,
  isFuseMount,
  connectionId,
  abortConnection,
  detachNow,
  detachAllUnder,
  unmountAsync,
  forceUnmount,
  waitUnmounted,
  listFuseDaemons,
  daemonsFor,
  pidAlive,
  type MountEntry,
  type FuseDaemonProcess,
} from './mounts.js'
export { mountBackground, unmountFs, planMount, mountName, waitMounted, type MountOptions, type MountResult, type UnmountResult } from './control.js'
export { recordDaemonMount } from './cluster-mounts.js'
export { fuseClusterRole, fuseUsable, FUSE_ROLE, FUSE_NODE_ID_BASE } from './cluster-role.js'
