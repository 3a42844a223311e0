// The mounts `strata fs mount MNT --cluster DIR` made, recorded in the
// cluster directory (DIR/mounts/<mount name>.json: pid, mount point, config,
// log) so that `cluster status` can list them and `cluster down` / `destroy`
// can stop them before the servers they depend on: a mount left running
// against a stopped cluster has nobody to answer its requests. The cluster's
// own `fuse-1` is not here; cluster.json tracks it like every other process.

import fs from 'node:fs'
import path from 'node:path'
import { waitUntilGone } from '../common/daemon.js'
import { StrataError } from '../common/errors.js'
import { isAlive } from '../admin/process.js'
import { daemonsFor, findMount, forceUnmount, isFuseMount, mountName, pidAlive } from './mounts.js'

export const MOUNTS_DIR = 'mounts'

export interface MountRecord {
  /** mountName(mountpoint): also the name of the daemon's config, log and data dir */
  name: string
  mountpoint: string
  pid: number
  configFile: string
  logFile: string
  stateFile: string
  /** `fs mount --foreground`: the pid is the `strata fs mount` process itself */
  foreground?: boolean
  startedAt: string
}

export interface MountRecordStatus extends MountRecord {
  /** the daemon process runs */
  alive: boolean
  /** a FUSE mount is at the mount point (alive or left dead) */
  mounted: boolean
}

function recordFile(clusterDir: string, name: string): string {
  return path.join(clusterDir, MOUNTS_DIR, `${name}.json`)
}

export function recordMount(clusterDir: string, r: MountRecord): void {
  const f = recordFile(clusterDir, r.name)
  fs.mkdirSync(path.dirname(f), { recursive: true })
  const tmp = `${f}.${process.pid}.tmp`
  fs.writeFileSync(tmp, JSON.stringify(r, null, 2) + '\n')
  fs.renameSync(tmp, f)
}

/** Removes the record of `name` (only if it still names `pid`, when given). */
export function forgetMount(clusterDir: string, name: string, pid?: number): void {
  const f = recordFile(clusterDir, name)
  try {
    if (pid !== undefined && (JSON.parse(fs.readFileSync(f, 'utf8')) as MountRecord).pid !== pid) return
    fs.rmSync(f, { force: true })
  } catch {
    // absent or unreadable: nothing to forget
  }
}

/**
 * Whether the recorded pid is still that daemon (a recycled pid is not): a
 * background daemon's command line names its config file, a --foreground one
 * is `strata … mount`.
 */
export function recordAlive(r: MountRecord): boolean {
  if (!r.foreground) return isAlive(r.pid, r.configFile)
  if (!pidAlive(r.pid)) return false
  try {
    const argv = fs.readFileSync(`/proc/${r.pid}/cmdline`, 'utf8').split('\0')
    return argv.some((a) => /strata(\.js)?$/.test(a)) && argv.includes('mount')
  } catch {
    return false
  }
}

/**
 * Every recorded mount with its liveness. prune: records of daemons that are
 * gone and left no mount behind are deleted (what `fs umount` or a crash
 * left); a dead daemon's leftover mount keeps its record until it is cleared.
 */
export function listClusterMounts(clusterDir: string, o: { prune?: boolean } = {}): MountRecordStatus[] {
  let names: string[]
  try {
    names = fs.readdirSync(path.join(clusterDir, MOUNTS_DIR)).filter((f) => f.endsWith('.json'))
  } catch {
    return []
  }
  const out: MountRecordStatus[] = []
  for (const f of names.sort()) {
    let r: MountRecord
    try {
      r = JSON.parse(fs.readFileSync(path.join(clusterDir, MOUNTS_DIR, f), 'utf8')) as MountRecord
      if (typeof r.mountpoint !== 'string' || typeof r.pid !== 'number') continue
    } catch {
      continue
    }
    const alive = recordAlive(r)
    const mounted = isFuseMount(findMount(r.mountpoint))
    if (o.prune && !alive && !mounted) {
      forgetMount(clusterDir, r.name, r.pid)
      continue
    }
    out.push({ ...r, alive, mounted })
  }
  return out
}

export interface StopMountsResult {
  /** mount points whose daemon got SIGTERM */
  stopped: string[]
  /** of those, the ones that needed SIGKILL */
  killed: string[]
  /** mount points left dead (daemon gone) that were cleared */
  cleared: string[]
}

const waitGone = (rs: MountRecord[], timeoutMs: number): Promise<MountRecord[]> => waitUntilGone(rs, recordAlive, timeoutMs)

/**
 * `cluster down` / `destroy`: SIGTERM every recorded mount daemon (it flushes
 * and unmounts while the cluster still serves it), SIGKILL after graceMs,
 * then clear what a dead or killed daemon left mounted and drop the records.
 */
export async function stopClusterMounts(clusterDir: string, o: { graceMs?: number } = {}): Promise<StopMountsResult> {
  const recs = listClusterMounts(clusterDir, { prune: true })
  const live = recs.filter((r) => r.alive)
  for (const r of live) {
    try {
      process.kill(r.pid, 'SIGTERM')
    } catch {
      // exited meanwhile
    }
  }
  const stragglers = await waitGone(live, o.graceMs ?? 10_000)
  for (const r of stragglers) {
    try {
      process.kill(r.pid, 'SIGKILL')
    } catch {
      // exited meanwhile
    }
  }
  const stuck = await waitGone(stragglers, 5000)
  if (stuck.length) throw new StrataError('TIMEOUT', `FUSE mount daemons did not exit after SIGKILL: ${stuck.map((r) => `${r.mountpoint} (pid ${r.pid})`).join(', ')}`)
  const cleared: string[] = []
  for (const r of recs) {
    const m = findMount(r.mountpoint)
    // another daemon may have taken the mount point over since: not ours to cut off
    if (m && isFuseMount(m) && !daemonsFor(r.mountpoint).length) {
      if (!(await forceUnmount(r.mountpoint))) throw new StrataError('INTERNAL', `could not clear the mount at ${r.mountpoint}`)
      if (!live.includes(r)) cleared.push(r.mountpoint)
    }
    forgetMount(clusterDir, r.name, r.pid)
  }
  return { stopped: live.map((r) => r.mountpoint), killed: stragglers.map((r) => r.mountpoint), cleared }
}

/**
 * `strata daemon fuse --config F` started by hand (not by `fs mount`, not
 * the cluster's own fuse-1): when F names a `clusterDir`, the daemon records
 * its own mount there once it is live, so that `cluster status` lists it and
 * `cluster down` stops it before the servers it needs. Returns what forgets
 * the record again at a clean stop (a killed daemon's record is pruned or its
 * dead mount cleared by the next `cluster down`).
 */
export function recordDaemonMount(o: { clusterDir?: string; configFile: string; mountpoint: string; stateFile?: string }): () => void {
  const none = () => {}
  if (!o.clusterDir) return none
  const configFile = path.resolve(o.configFile)
  const name = mountName(o.mountpoint)
  try {
    const cluster = JSON.parse(fs.readFileSync(path.join(o.clusterDir, 'cluster.json'), 'utf8')) as { processes?: { configFile?: string }[] }
    // cluster.json tracks its own processes (fuse-1)
    if (cluster.processes?.some((p) => p.configFile === configFile)) return none
  } catch {
    // no such cluster (yet): the daemon still names it, so record there anyway
  }
  try {
    const existing = JSON.parse(fs.readFileSync(recordFile(o.clusterDir, name), 'utf8')) as MountRecord
    // `fs mount` recorded this daemon before it started, with its log
    if (existing.pid === process.pid) return () => forgetMount(o.clusterDir!, name, process.pid)
  } catch {
    // no record yet
  }
  recordMount(o.clusterDir, { name, mountpoint: path.resolve(o.mountpoint), pid: process.pid, configFile, logFile: '', stateFile: o.stateFile ?? '', startedAt: new Date().toISOString() })
  return () => forgetMount(o.clusterDir!, name, process.pid)
}
