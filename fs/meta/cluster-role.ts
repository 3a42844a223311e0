// The meta role of `strata cluster up`: meta-1 and meta-2 (node ids 101, 102)
// start after the storage bootstrap and share one KV environment under
// DIR/data/kv. `--timers production` gives them 3FS's default GC and session
// timers, `local` the test-scale ones.

import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { ClusterRoleSpec } from '../admin/cluster.js'
import type { ClusterProcess } from '../admin/cluster-file.js'
import type { AdminSession } from '../admin/session.js'
import { StrataError } from '../common/errors.js'
import { RpcClient } from '../rpc/index.js'

export const META_NODE_ID_BASE = 100
export const META_SERVERS = 2

export const metaClusterRole: ClusterRoleSpec = {
  role: 'meta',
  order: 10,
  count: () => META_SERVERS,
  nodeId: (i) => META_NODE_ID_BASE + i,
  config: (ctx) => ({
    nodeId: ctx.nodeId,
    listen: ctx.listen,
    mgmtdAddresses: ctx.mgmtdAddresses,
    kvPath: path.join(ctx.dir, 'data', 'kv'),
    timers: ctx.timers,
    profile: ctx.settings.timers === 'production' ? 'production' : 'local',
  }),
  /** answers RPC (it listens only once the root directory exists) and heartbeats to mgmtd */
  async ready(p: ClusterProcess, s: AdminSession, deadline: number): Promise<void> {
    const rpc = new RpcClient({ connectTimeoutMs: 500, maxBackoffMs: 100 })
    try {
      for (;;) {
        let listening = false
        try {
          await rpc.echo(p.address, null, { timeoutMs: 1000 })
          listening = true
          const ri = await s.mgmtd.refresh()
          if (ri.nodes[String(p.nodeId)]?.status === 'HEARTBEAT_CONNECTED') return
        } catch {
          // not up yet
        }
        if (p.pid) {
          try {
            process.kill(p.pid, 0)
          } catch {
            throw new StrataError('INTERNAL', `${p.name} (pid ${p.pid}) exited during startup; see ${p.logFile}`)
          }
        }
        if (Date.now() > deadline) throw new StrataError('TIMEOUT', `${p.name} ${listening ? 'did not heartbeat to mgmtd' : `did not answer on ${p.address}`} in time; see ${p.logFile}`)
        await sleep(100)
      }
    } finally {
      rpc.close()
    }
  },
}
