// The 'sandbox' role of `strata cluster up`: one node daemon serving the
// sandbox API, started after the FUSE mount it builds rootfs from (so only
// when the cluster mounts its filesystem), unless `--no-sandbox`. Its bearer
// token is created at cluster up in DIR/sandbox.token (mode 0600), where the
// SDK and CLI find it. `cluster down` first asks the daemon to remove every
// sandbox (their layers are read through the FUSE mount that is about to go),
// and clears what is left by hand if the daemon was already dead.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { StrataError } from '../../fs/common/errors.js'
import type { ClusterRoleSpec, RoleConfigContext } from '../../fs/admin/index.js'
import type { ClusterProcess, ClusterSettings } from '../../fs/admin/index.js'
import { fuseUsable } from '../../fs/fuse/index.js'
import type { SandboxDaemonConfig } from './daemon.js'
import { ensureToken } from './daemon.js'
import { reclaimOffline } from './service.js'

export const SANDBOX_ROLE = 'sandbox'
export const SANDBOX_NODE_ID_BASE = 40000
/** after the FUSE role (1000) */
export const SANDBOX_ROLE_ORDER = 2000
export const TOKEN_FILE = 'sandbox.token'

/**
 * Unix socket paths below the state dir must stay under 108 bytes; long
 * cluster paths move it to /run/strata/<name>-<hash>, named after the data
 * dir (sandbox-1, serve-7410) and the cluster, so the cluster's daemon and a
 * `strata serve` of the same cluster never share one (they did: both were
 * /run/strata/sandbox-<hash>).
 */
export function sandboxStateDir(clusterDir: string, dataDir: string): string {
  if (Buffer.byteLength(dataDir) <= 72) return dataDir
  const h = crypto.createHash('sha256').update(path.resolve(clusterDir)).digest('hex').slice(0, 12)
  return path.join('/run/strata', `${path.basename(dataDir)}-${h}`)
}

function onPath(bin: string): boolean {
  return (process.env.PATH ?? '/usr/bin:/bin').split(':').some((d) => {
    try {
      fs.accessSync(path.join(d, bin), fs.constants.X_OK)
      return true
    } catch {
      return false
    }
  })
}

function configOf(p: ClusterProcess): SandboxDaemonConfig | undefined {
  try {
    return JSON.parse(fs.readFileSync(p.configFile, 'utf8')) as SandboxDaemonConfig
  } catch {
    return undefined
  }
}

/** The sandbox API of a cluster directory: endpoint and token, as the SDK and CLI find them. */
export function clusterEndpoint(dir: string, processes: ClusterProcess[]): { endpoint: string; token: string } | null {
  const p = processes.find((x) => x.role === SANDBOX_ROLE)
  if (!p) return null
  const tokenFile = path.join(dir, TOKEN_FILE)
  if (!fs.existsSync(tokenFile)) return null
  return { endpoint: `http://${p.address}`, token: fs.readFileSync(tokenFile, 'utf8').trim() }
}

export const sandboxClusterRole: ClusterRoleSpec = {
  role: SANDBOX_ROLE,
  order: SANDBOX_ROLE_ORDER,
  count: (s: ClusterSettings) => (s.sandbox !== false && s.mount !== false && fuseUsable() && onPath('runc') ? 1 : 0),
  nodeId: (i) => SANDBOX_NODE_ID_BASE + i,
  config(ctx: RoleConfigContext): Record<string, unknown> {
    const tokenFile = path.join(ctx.dir, TOKEN_FILE)
    ensureToken(tokenFile)
    const c: SandboxDaemonConfig = {
      // unique per cluster directory: several local clusters share this machine's cgroup tree
      nodeId: `node-${ctx.nodeId}-${crypto.createHash('sha256').update(path.resolve(ctx.dir)).digest('hex').slice(0, 8)}`,
      listen: ctx.listen,
      mgmtdAddresses: ctx.mgmtdAddresses,
      fuseMnt: path.join(ctx.dir, 'mnt'),
      stateDir: sandboxStateDir(ctx.dir, ctx.dataDir),
      tokenFile,
      ...(ctx.settings.warmPool?.length ? { warmPool: ctx.settings.warmPool } : {}),
    }
    return c as unknown as Record<string, unknown>
  },
  async ready(p: ClusterProcess, _s, deadline: number): Promise<void> {
    for (;;) {
      try {
        const r = await fetch(`http://${p.address}/v1/health`, { signal: AbortSignal.timeout(1000) })
        if (r.ok) return
      } catch {
        // not listening yet
      }
      if (p.pid) {
        try {
          process.kill(p.pid, 0)
        } catch {
          throw new StrataError('INTERNAL', `${p.name} (pid ${p.pid}) exited during startup; see ${p.logFile}`)
        }
      }
      if (Date.now() > deadline) throw new StrataError('TIMEOUT', `${p.name} did not answer on ${p.address} in time; see ${p.logFile}`)
      await sleep(100)
    }
  },
  files: [TOKEN_FILE],
  async beforeStop(p: ClusterProcess): Promise<void> {
    const c = configOf(p)
    if (!c) return
    const token = fs.readFileSync(c.tokenFile, 'utf8').trim()
    await fetch(`http://${p.address}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(600_000) })
  },
  async cleanup(p: ClusterProcess): Promise<void> {
    const c = configOf(p)
    if (!c) return
    await reclaimOffline(c.stateDir, { ...(c.runtime ? { runtime: c.runtime } : {}), cgroupParent: `/strata/${c.nodeId}` })
  },
}
