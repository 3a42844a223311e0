// `strata fs mount` / `strata fs umount`: start a FUSE daemon for a cluster
// in the background, record it in the cluster directory (so `cluster down`
// stops it) and wait until the kernel has the mount, or stop the daemon
// serving a mount point (and clear a mount whose daemon died).
// Nothing here touches the mounted filesystem itself: readiness comes from
// the daemon's state file and /proc/self/mountinfo.

import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { waitUntilGone } from '../common/daemon.js'
import { StrataError } from '../common/errors.js'
import { readClusterFile, resolveClusterDir, type ClusterProcess } from '../admin/cluster-file.js'
import { logTail, spawnDaemon } from '../admin/process.js'
import type { FuseDaemonConfig } from './config.js'
import { readFuseState, registeredDaemon, unregisterDaemon } from './state.js'
import { forgetMount, recordMount, type MountRecord } from './cluster-mounts.js'
import { checkMgmtdReachable } from '../client/reachability.js'
import { canonicalMountpoint } from './mountpoint-path.js'
import { FUSE_FSTYPE, checkMountpoint, daemonsFor, findMount, forceUnmount, isFuseMount, mountName, pidAlive, waitUnmounted } from './mounts.js'

export { mountName }

export interface MountOptions {
  mountpoint: string
  /** cluster directory (default: $STRATA_CLUSTER, ~/.strata/cluster) */
  cluster?: string | null
  attrTimeout?: number
  entryTimeout?: number
  periodicSyncMs?: number
  writeBufferSize?: number
  writeBehind?: number
  uid?: number
  gid?: number
  /** supplementary groups (the daemon's default: the caller's when uid is the caller's, else none) */
  groups?: number[]
  readonly?: boolean
  allowOther?: boolean
  defaultPermissions?: boolean
  opTimeoutMs?: number
  /** more daemon settings, merged last */
  extra?: Partial<FuseDaemonConfig>
  /** wait this long for the mount (default 60 s) */
  timeoutMs?: number
}

export interface MountPlan {
  name: string
  /** the cluster directory: its DIR/mounts/<name>.json records the mount while it runs */
  clusterDir: string
  config: FuseDaemonConfig
  configFile: string
  logFile: string
  stateFile: string
  dataDir: string
}

/** Where a mount's config, log and state live in the cluster directory, and its config. */
export function planMount(o: MountOptions): MountPlan {
  const mnt = canonicalMountpoint(o.mountpoint)
  const dir = resolveClusterDir(o.cluster)
  const cluster = readClusterFile(dir)
  const name = mountName(mnt)
  const dataDir = path.join(dir, 'data', name)
  const stateFile = path.join(dataDir, 'state.json')
  const metas = cluster.processes.filter((p) => p.role === 'meta').map((p) => p.address)
  const config: FuseDaemonConfig = {
    mountpoint: mnt,
    mgmtdAddresses: cluster.mgmtdAddresses,
    clusterDir: dir,
    stateFile,
    ...(metas.length ? { metaFallbackAddresses: metas } : {}),
    ...(o.attrTimeout !== undefined ? { attrTimeout: o.attrTimeout } : {}),
    ...(o.entryTimeout !== undefined ? { entryTimeout: o.entryTimeout } : {}),
    ...(o.periodicSyncMs !== undefined ? { periodicSyncMs: o.periodicSyncMs } : {}),
    ...(o.writeBufferSize !== undefined ? { writeBufferSize: o.writeBufferSize } : {}),
    ...(o.writeBehind !== undefined ? { writeBehind: o.writeBehind } : {}),
    ...(o.uid !== undefined ? { uid: o.uid } : {}),
    ...(o.gid !== undefined ? { gid: o.gid } : {}),
    ...(o.groups !== undefined ? { groups: o.groups } : {}),
    ...(o.readonly !== undefined ? { readonly: o.readonly } : {}),
    ...(o.allowOther !== undefined ? { allowOther: o.allowOther } : {}),
    ...(o.defaultPermissions !== undefined ? { defaultPermissions: o.defaultPermissions } : {}),
    ...(o.opTimeoutMs !== undefined ? { opTimeoutMs: o.opTimeoutMs } : {}),
    ...(cluster.settings?.timers === 'production' ? { periodicSyncMs: o.periodicSyncMs ?? 30_000 } : {}),
    ...o.extra,
  }
  return { name, clusterDir: dir, config, configFile: path.join(dir, 'config', `${name}.json`), logFile: path.join(dir, 'logs', `${name}.log`), stateFile, dataDir }
}

/**
 * What `fs mount` checks before it writes or starts anything: a mount point
 * FUSE can use, and a cluster whose mgmtd accepts connections (a stopped
 * cluster is reported at once, as the other fs commands do, instead of
 * after the whole wait for the mount).
 */
export async function preflightMount(plan: MountPlan): Promise<void> {
  checkMountpoint(plan.config.mountpoint)
  await checkMgmtdReachable(plan.config.mgmtdAddresses)
}

export function writeMountConfig(plan: MountPlan): void {
  fs.mkdirSync(path.dirname(plan.configFile), { recursive: true })
  fs.mkdirSync(plan.dataDir, { recursive: true })
  fs.writeFileSync(plan.configFile, JSON.stringify(plan.config, null, 2) + '\n')
}

/**
 * Waits until the daemon `pid` has mounted: its state file names it and the
 * mount table has a Strata FUSE mount there. Fails fast when it exits.
 */
export async function waitMounted(o: { mountpoint: string; stateFile: string; pid: number; logFile?: string; deadline: number; isAlive?: () => boolean }): Promise<void> {
  const mnt = canonicalMountpoint(o.mountpoint)
  const alive = o.isAlive ?? (() => pidAlive(o.pid))
  for (;;) {
    const st = readFuseState(o.stateFile)
    const m = findMount(mnt)
    if (st && st.pid === o.pid && m && m.fstype === FUSE_FSTYPE) return
    if (!alive()) {
      const tail = o.logFile ? logTail(o.logFile, 20) : ''
      throw new StrataError('INTERNAL', `FUSE daemon (pid ${o.pid}) exited before ${mnt} was mounted${tail ? `\n--- last lines of ${o.logFile}:\n${tail}` : ''}`)
    }
    if (Date.now() > o.deadline) {
      const tail = o.logFile ? logTail(o.logFile, 20) : ''
      throw new StrataError('TIMEOUT', `${mnt} was not mounted in time by pid ${o.pid}${tail ? `\n--- last lines of ${o.logFile}:\n${tail}` : ''}`)
    }
    await sleep(50)
  }
}

/** What DIR/mounts/<name>.json says about a mount (fs/fuse/cluster-mounts.ts). */
export function mountRecord(plan: MountPlan, pid: number, foreground = false): MountRecord {
  return {
    name: plan.name,
    mountpoint: plan.config.mountpoint,
    pid,
    configFile: plan.configFile,
    // a --foreground daemon logs to the terminal of `fs mount`
    logFile: foreground ? '' : plan.logFile,
    stateFile: plan.stateFile,
    ...(foreground ? { foreground: true } : {}),
    startedAt: new Date().toISOString(),
  }
}

export interface MountResult {
  mountpoint: string
  pid: number
  configFile: string
  logFile: string
  stateFile: string
}

/** Starts `strata daemon fuse --config F` detached and waits until the mount is live. */
export async function mountBackground(o: MountOptions): Promise<MountResult> {
  const plan = planMount(o)
  const mnt = plan.config.mountpoint
  const live = daemonsFor(mnt)
  if (live.length) throw new StrataError('CLUSTER_RUNNING', `${mnt} is already served by FUSE daemon pid ${live.map((d) => d.pid).join(', ')}`)
  await preflightMount(plan)
  writeMountConfig(plan)
  fs.rmSync(plan.stateFile, { force: true })
  const proc: ClusterProcess = { name: plan.name, role: 'fuse', nodeId: 0, address: mnt, pid: null, configFile: plan.configFile, logFile: plan.logFile, dataDir: plan.dataDir }
  const pid = spawnDaemon(proc)
  // recorded before it is up: a `cluster down` meanwhile stops it too
  recordMount(plan.clusterDir, mountRecord(plan, pid))
  try {
    await waitMounted({ mountpoint: mnt, stateFile: plan.stateFile, pid, logFile: plan.logFile, deadline: Date.now() + (o.timeoutMs ?? 60_000) })
  } catch (e) {
    if (pidAlive(pid)) {
      try {
        process.kill(pid, 'SIGTERM')
      } catch {
        // gone
      }
      await waitPidsGone([pid], 10_000)
    }
    // nothing of a mount that never came up stays behind but its log, which the error quotes
    forgetMount(plan.clusterDir, plan.name, pid)
    fs.rmSync(plan.configFile, { force: true })
    fs.rmSync(plan.dataDir, { recursive: true, force: true })
    throw e
  }
  return { mountpoint: mnt, pid, configFile: plan.configFile, logFile: plan.logFile, stateFile: plan.stateFile }
}

export interface UnmountResult {
  mountpoint: string
  /** daemons that got SIGTERM */
  stopped: number[]
  /** daemons that needed SIGKILL */
  killed: number[]
  /** the mount had to be cleared by hand (dead or stuck daemon) */
  forced: boolean
}

const waitPidsGone = (pids: number[], timeoutMs: number): Promise<number[]> => waitUntilGone(pids, pidAlive, timeoutMs)

/** The cluster directory a daemon's config names (its `fs mount` record lives there), if the config is still readable. */
function clusterDirOf(configFile: string): string | undefined {
  try {
    const c = JSON.parse(fs.readFileSync(configFile, 'utf8')) as { clusterDir?: unknown }
    return typeof c.clusterDir === 'string' ? c.clusterDir : undefined
  } catch {
    return undefined
  }
}

/**
 * `strata fs umount MNT`: SIGTERM to the daemon serving MNT (it unmounts and
 * flushes), SIGKILL after timeoutMs; then, if a FUSE mount is still there
 * (dead or killed daemon), abort its connection and lazy-unmount it. The
 * daemon is stopped whether its mount was alive or already dead; one that
 * survives SIGKILL is an error (TIMEOUT), never reported as unmounted.
 * Drops the mount's record in its cluster directory (`cluster status`).
 */
export async function unmountFs(mountpoint: string, o: { timeoutMs?: number; clusterDir?: string } = {}): Promise<UnmountResult> {
  const mnt = canonicalMountpoint(mountpoint)
  const daemons = daemonsFor(mnt)
  const m = findMount(mnt)
  if (!daemons.length && !m) throw new StrataError('NOT_FOUND', `${mnt} is not mounted`)
  if (!daemons.length && m && !isFuseMount(m)) throw new StrataError('INVALID_ARGUMENT', `${mnt} is a ${m.fstype} mount, not a Strata FUSE mount`)
  const pids = daemons.map((d) => d.pid)
  // a daemon that was SIGKILLed left its registry entry: the only trace of the cluster that records its mount
  const reg = registeredDaemon(mnt)
  const clusterDirs = new Set([...daemons.map((d) => clusterDirOf(d.configFile)), reg?.clusterDir, o.clusterDir].filter((d): d is string => !!d))
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGTERM')
    } catch {
      // already gone
    }
  }
  const killed = await waitPidsGone(pids, o.timeoutMs ?? 20_000)
  for (const pid of killed) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // gone
    }
  }
  const stuck = killed.length ? await waitPidsGone(killed, 5000) : []
  if (stuck.length) throw new StrataError('TIMEOUT', `FUSE daemon pid ${stuck.join(', ')} serving ${mnt} is still alive after SIGTERM and SIGKILL`)
  let forced = false
  if (!(await waitUnmounted(mnt, pids.length ? 1000 : 0))) {
    const left = findMount(mnt)
    if (left && isFuseMount(left)) {
      forced = true
      if (!(await forceUnmount(mnt))) throw new StrataError('INTERNAL', `could not clear the mount at ${mnt}`)
    }
  }
  for (const dir of clusterDirs) forgetMount(dir, mountName(mnt))
  if (reg && !pidAlive(reg.pid)) unregisterDaemon(mnt, reg.pid)
  return { mountpoint: mnt, stopped: pids, killed, forced }
}
