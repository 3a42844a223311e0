// `strata daemon ROLE --config FILE`: runs one cluster process in the
// foreground. `strata cluster up` starts these in the background; operators
// may also run them under their own supervisor.
import fs from 'node:fs'
import type { Command } from 'commander'
import { createLogger } from '../../fs/common/log.js'
import { runDaemon } from '../../fs/common/daemon.js'
import { StrataError } from '../../fs/common/errors.js'
import { UsageError } from './output.js'

type Starter = (config: any, log: ReturnType<typeof createLogger>, configFile: string) => Promise<{ close(): Promise<void> }>

// Each role's code is loaded only when that role runs: a command that starts
// no daemon should not pay for loading them (lmdb and every service).
const roles: Record<string, () => Promise<Starter>> = {
  mgmtd: async () => {
    const { startMgmtd } = await import('../../fs/mgmtd/index.js')
    return (c: import('../../fs/mgmtd/index.js').MgmtdConfig, log) => startMgmtd(c, log)
  },
  storage: async () => {
    const { startStorage } = await import('../../fs/storage/index.js')
    return (c: import('../../fs/storage/index.js').StorageConfig, log) => startStorage(c, log)
  },
  meta: async () => {
    const { startMeta } = await import('../../fs/meta/index.js')
    return (c: import('../../fs/meta/index.js').MetaConfig, log) => startMeta(c, log)
  },
  fuse: async () => {
    const { startFuseDaemon, recordDaemonMount } = await import('../../fs/fuse/index.js')
    return async (c: import('../../fs/fuse/index.js').FuseDaemonConfig, log, configFile) => {
      const d = await startFuseDaemon(c, log)
      // started by hand: `cluster status` lists it and `cluster down` stops it (fs/fuse/cluster-mounts.ts)
      const forget = recordDaemonMount({ clusterDir: d.config.clusterDir, configFile, mountpoint: d.mountpoint, stateFile: d.config.stateFile })
      return {
        close: async () => {
          await d.close()
          forget()
        },
      }
    }
  },
}

/** Later parts add their roles here (storage, meta, fuse, sandbox daemon). */
export function addDaemonRole(name: string, load: () => Promise<Starter>): void {
  roles[name] = load
}

// What `strata daemon --help` says about each role's JSON config: the keys a
// daemon refuses to start without, then the ones operators reach for. The
// types are the reference (named below); `strata cluster up` writes a complete
// config of every process to DIR/config/<name>.json, the easiest start.
const ROLE_HELP = `
Roles and their config (JSON; * = required; the files named hold the full type):
  mgmtd    the cluster manager (fs/mgmtd/main.ts MgmtdConfig)
             *nodeId (positive integer), *dataDir, listen (host:port, default 127.0.0.1:0),
             timers (LOCAL_TIMERS by default), allowHeartbeatFromUnregistered (default true)
  storage  one storage node (fs/storage/main.ts StorageConfig)
             *nodeId, *dataDir, *mgmtdAddresses (["host:port", …]), listen, timers,
             fsync, directWrites, zeroCopyReads (all default true)
  meta     one metadata server; all of a cluster share one KV (fs/meta/main.ts MetaConfig)
             *nodeId, *mgmtdAddresses, *kvPath (the shared KV directory), listen, timers,
             kvDurability (flushed|committed|nosync), profile (local|production), and every
             meta setting of fs/meta/config.ts (docs/meta.md "Settings")
  fuse     one FUSE mount (fs/fuse/config.ts FuseDaemonConfig)
             *mountpoint (absolute), *mgmtdAddresses, stateFile (absolute, outside the mount),
             clusterDir (its meta servers become fallbacks), nodeId + listen (RPC server),
             readonly, uid/gid/groups, allowOther, attrTimeout, entryTimeout, periodicSyncMs,
             writeBufferSize, timers (defaults: FUSE_DEFAULTS; docs/fuse.md)
  sandbox  the node's sandbox daemon and HTTP API (sandbox/daemon/daemon.ts SandboxDaemonConfig)
             *nodeId (a name), *listen, *mgmtdAddresses, *fuseMnt (this node's FUSE mount),
             *stateDir, *tokenFile (created when missing), endpointFile, and the service
             settings runtime, limits, defaultResources, warmPool, … (docs/sandbox-api.md)

A config that is missing a required key or has a bad value fails with BAD_CONFIG.
Copies of working configs: DIR/config/<name>.json of a cluster made by \`strata cluster up\`.
More: docs/cli.md, docs/meta.md, docs/fuse.md, docs/sandbox-api.md.
`

export function registerDaemonCommand(program: Command): void {
  program
    .command('daemon')
    .description('run one cluster process in the foreground (roles: mgmtd, storage, meta, fuse, sandbox)')
    .argument('<role>', 'which process to run')
    .requiredOption('--config <file>', 'JSON config file of this process')
    .option('--name <name>', 'name used in logs (default: the role)')
    .addHelpText('after', ROLE_HELP)
    .action(async (role: string, opts: { config: string; name?: string }) => {
      const load = roles[role]
      if (!load) throw new UsageError(`unknown role "${role}"; known: ${Object.keys(roles).join(', ')}`)
      let config: unknown
      try {
        config = JSON.parse(fs.readFileSync(opts.config, 'utf8'))
      } catch (e) {
        throw new StrataError('BAD_CONFIG', `cannot read config ${opts.config}: ${(e as Error).message}`, { cause: e })
      }
      const log = createLogger(opts.name ?? role)
      const start = await load()
      // a start-up failure is `strata: CODE: message` (exit 1), in the daemon's log too when cluster up started it
      await runDaemon(log, () => start(config, log, opts.config), { throwStartError: true })
    })
}
