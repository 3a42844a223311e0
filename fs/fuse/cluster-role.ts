// The 'fuse' role of `strata cluster up`: one FUSE daemon mounting the
// cluster's filesystem at DIR/mnt, started after meta (it needs a meta
// server), stopped before it, and its mount cleared on `cluster down` even
// when the daemon died. Skipped with --no-mount, or when no meta role is
// registered (nothing to mount yet), or when this machine has no FUSE.

import fs from 'node:fs'
import path from 'node:path'
import type { ClusterRoleSpec, RoleConfigContext } from '../admin/cluster.js'
import type { ClusterProcess, ClusterSettings } from '../admin/cluster-file.js'
import type { FuseDaemonConfig } from './config.js'
import { waitMounted } from './control.js'
import { checkMountpoint, daemonsFor, findMount, forceUnmount, isFuseMount, pidAlive } from './mounts.js'
import { fuseAvailable } from './native.js'

export const FUSE_ROLE = 'fuse'
/** node ids of FUSE daemons (clients in 3FS terms; the cluster file wants one per process) */
export const FUSE_NODE_ID_BASE = 30000
/** after meta (whatever order it registers with) */
export const FUSE_ROLE_ORDER = 1000

function configOf(p: ClusterProcess): FuseDaemonConfig | undefined {
  try {
    return JSON.parse(fs.readFileSync(p.configFile, 'utf8')) as FuseDaemonConfig
  } catch {
    return undefined
  }
}

/** /dev/fuse and a loadable fuse-native (libfuse2): without them `cluster up` runs without a mount. */
export function fuseUsable(): boolean {
  return fs.existsSync('/dev/fuse') && fuseAvailable().ok
}

export function fuseClusterRole(hasMeta: () => boolean): ClusterRoleSpec {
  return {
    role: FUSE_ROLE,
    order: FUSE_ROLE_ORDER,
    count: (s: ClusterSettings) => (s.mount && hasMeta() && fuseUsable() ? 1 : 0),
    nodeId: (i) => FUSE_NODE_ID_BASE + i,
    config(ctx: RoleConfigContext): Record<string, unknown> {
      const c: FuseDaemonConfig = {
        mountpoint: path.join(ctx.dir, 'mnt'),
        mgmtdAddresses: ctx.mgmtdAddresses,
        clusterDir: ctx.dir,
        nodeId: ctx.nodeId,
        listen: ctx.listen,
        stateFile: path.join(ctx.dataDir, 'state.json'),
        timers: { ...ctx.timers },
        // 3FS: design note 5 s, shipped config 30 s
        periodicSyncMs: ctx.settings.timers === 'production' ? 30_000 : 5_000,
      }
      return c as unknown as Record<string, unknown>
    },
    preflight(config: Record<string, unknown>): void {
      if (typeof config.mountpoint === 'string') checkMountpoint(config.mountpoint)
    },
    async ready(p: ClusterProcess, _s, deadline: number): Promise<void> {
      const c = configOf(p)
      if (!c?.stateFile) throw new Error(`${p.name}: config ${p.configFile} has no stateFile`)
      await waitMounted({ mountpoint: c.mountpoint, stateFile: c.stateFile, pid: p.pid!, logFile: p.logFile, deadline })
    },
    files: ['mnt'],
    async cleanup(p: ClusterProcess): Promise<void> {
      const c = configOf(p)
      if (!c) return
      const m = findMount(c.mountpoint)
      if (!m || !isFuseMount(m)) return
      // a live daemon (started by hand for this mount point) is not ours to cut off
      if (daemonsFor(c.mountpoint).some((d) => pidAlive(d.pid))) return
      await forceUnmount(c.mountpoint)
    },
  }
}
