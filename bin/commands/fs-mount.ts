// `strata fs mount MNT` and `strata fs umount MNT`: the FUSE mount of a
// cluster. mount starts `strata daemon fuse --config F` detached (unless
// --foreground), records it in the cluster directory (DIR/mounts, so that
// `cluster down` stops it), waits until the kernel has the mount and prints
// the daemon's pid; umount stops that daemon (it unmounts and flushes),
// whether its mount is alive or dead, and clears a mount whose daemon died.
import fs from 'node:fs'
import path from 'node:path'
import type { Command } from 'commander'
import { InvalidArgumentError } from 'commander'
import { createLogger } from '../../fs/common/log.js'
import { runDaemon } from '../../fs/common/daemon.js'
import { mountBackground, mountRecord, planMount, preflightMount, unmountFs, writeMountConfig, type MountOptions } from '../../fs/fuse/control.js'
import { forgetMount, recordMount } from '../../fs/fuse/cluster-mounts.js'
import { intArg, localDirArg, MAX_TIMER_MS, MAX_TIMER_SECONDS, out, printJson, sizeArg, timerSecondsArg, UsageError } from './output.js'
import { MAX_WRITE_BUFFER_SIZE } from '../../fs/client/index.js'
import { fsUser } from './fs.js'

interface MountCliOpts {
  cluster?: string
  uid?: number
  gid?: number
  groups?: number[]
  json?: boolean
  attrTimeout?: number
  entryTimeout?: number
  periodicSyncMs?: number
  writeBuffer?: number
  writeBehind?: number
  readonly?: boolean
  allowOther?: boolean
  defaultPermissions?: boolean
  opTimeout?: number
  orphanTimeout?: number
  foreground?: boolean
  waitTimeout?: number
}

/** Seconds, fractions allowed; `timer`: it becomes a timer, so at most what one holds (2^31-1 ms). */
function secondsArg(what: string, opts: { timer?: boolean } = {}): (v: string) => number {
  return (v: string) => {
    const n = Number(v)
    if (!/^\d+(\.\d+)?$/.test(v.trim()) || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError(`${what} must be a non-negative number of seconds, got "${v}"`)
    if (opts.timer && n * 1000 > MAX_TIMER_MS) throw new InvalidArgumentError(`${what} must be in [0, ${MAX_TIMER_SECONDS}] seconds (timers hold at most 2^31-1 ms), got ${v.trim()}`)
    return n
  }
}

function writeBufferArg(v: string): number {
  const n = sizeArg('--write-buffer')(v)
  if (n > MAX_WRITE_BUFFER_SIZE) throw new InvalidArgumentError(`--write-buffer must be at most 64M, got "${v}"`)
  return n
}

/**
 * The directories of `mountpoint` that do not exist yet (the daemon creates them), deepest
 * first, so that a mount that does not come up can remove what it made and nothing else.
 */
function missingDirs(mountpoint: string): string[] {
  const missing: string[] = []
  for (let d = path.resolve(mountpoint); !fs.existsSync(d); d = path.dirname(d)) {
    missing.push(d)
    if (path.dirname(d) === d) break
  }
  return missing
}

/** Removes the directories missingDirs listed, as long as they are empty (rmdir never takes anything else). */
function removeMissingDirs(dirs: string[]): void {
  for (const d of dirs) {
    try {
      fs.rmdirSync(d)
    } catch {
      return
    }
  }
}

/** Adds mount/umount to the `fs` command group (creates the group when it does not exist yet). */
export function registerFsMountCommands(parent: Command): void {
  const g = parent.name() === 'fs' ? parent : (parent.commands.find((c) => c.name() === 'fs') ?? parent.command('fs').description('the DFS as files'))

  g.command('mount')
    .description('mount the cluster\'s filesystem with FUSE (a background daemon; prints its pid)')
    .argument('<mountpoint>', 'directory to mount on (created when missing)', localDirArg('the mount point'))
    .option('--attr-timeout <s>', 'kernel attribute cache and daemon path cache lifetime in seconds (0: no caching)', secondsArg('--attr-timeout'))
    .option('--entry-timeout <s>', 'kernel name cache lifetime in seconds (0: no caching)', secondsArg('--entry-timeout'))
    .option('--periodic-sync-ms <n>', 'send length hints and flush write buffers this often (0: off; default 5000)', intArg('--periodic-sync-ms', { min: 0 }))
    .option('--write-buffer <size>', "per-file write buffer (default 1M, at most 64M; raised to the file's chunk size up to 16M so each flush is whole chunks; 0: write through)", writeBufferArg)
    .option('--write-behind <n>', 'full write buffers of one file flushed to storage while the writer goes on (default 4; 0: each waits for storage)', intArg('--write-behind', { min: 0 }))
    .option('--readonly', 'refuse every change with EROFS')
    .option('--no-allow-other', 'only the mounting user may use the mount (default: others too, when root)')
    .option('--default-permissions', 'let the kernel check permission bits for each caller')
    .option('--op-timeout <s>', 'fail a FUSE request after this many seconds (default 0: never; storage failover then shows as latency)', secondsArg('--op-timeout', { timer: true }))
    .option('--orphan-timeout <s>', 'once mgmtd has refused connections this long (the cluster is stopped), requests whose servers are unreachable fail with ENOTCONN instead of waiting out the 60 s failover budget (default 5; 0: wait)', secondsArg('--orphan-timeout', { timer: true }))
    .option('--wait-timeout <s>', 'how long to wait for the mount to come up', timerSecondsArg('--wait-timeout'), 60)
    .option('--foreground', 'run the daemon in this process until SIGTERM (exit 0) or Ctrl-C (exit 130)')
    .addHelpText(
      'after',
      '\nThe identity of every request is the mount\'s (--uid/--gid/--groups of `strata fs`, default the caller\'s):\nfuse-native does not tell the daemon who calls. Stop with: strata fs umount MOUNTPOINT\n' +
        'The mount is recorded in the cluster directory (DIR/mounts/<name>.json): `strata cluster status` lists it,\n`strata cluster down` and `cluster destroy --force` stop its daemon (it flushes and unmounts) before the servers.',
    )
    .action(async (mountpoint: string, _o: unknown, cmd: Command) => {
      const o = cmd.optsWithGlobals() as MountCliOpts
      // the daemon finds the cluster through its directory: these were dropped silently, so
      // `fs --mgmtd-address A mount M` mounted whatever $STRATA_CLUSTER or ~/.strata/cluster held
      for (const [key, flag, hint] of [
        ['mgmtdAddress', '--mgmtd-address', 'give the cluster directory with --cluster'],
        ['metaAddress', '--meta-address', 'the daemon finds meta servers in routing info'],
        ['timeout', '--timeout', 'use --wait-timeout for how long to wait for the mount'],
      ] as const) {
        if (cmd.parent?.getOptionValueSource(key) === 'cli') throw new UsageError(`fs mount does not take ${flag} (${hint})`)
      }
      const mo: MountOptions = {
        mountpoint,
        cluster: o.cluster ?? null,
        ...(o.attrTimeout !== undefined ? { attrTimeout: o.attrTimeout } : {}),
        ...(o.entryTimeout !== undefined ? { entryTimeout: o.entryTimeout } : {}),
        ...(o.periodicSyncMs !== undefined ? { periodicSyncMs: o.periodicSyncMs } : {}),
        ...(o.writeBuffer !== undefined ? { writeBufferSize: o.writeBuffer } : {}),
        ...(o.writeBehind !== undefined ? { writeBehind: o.writeBehind } : {}),
        ...fsUser(o),
        ...(o.readonly ? { readonly: true } : {}),
        ...(o.allowOther === false ? { allowOther: false } : {}),
        ...(o.defaultPermissions ? { defaultPermissions: true } : {}),
        ...(o.opTimeout !== undefined ? { opTimeoutMs: Math.round(o.opTimeout * 1000) } : {}),
        ...(o.orphanTimeout !== undefined ? { extra: { orphanTimeoutMs: Math.round(o.orphanTimeout * 1000) } } : {}),
        timeoutMs: (o.waitTimeout ?? 60) * 1000,
      }
      // a mount that does not come up leaves only its log: not the mount point directory the daemon made
      const created = missingDirs(mountpoint)
      if (o.foreground) {
        const plan = planMount(mo)
        await preflightMount(plan)
        writeMountConfig(plan)
        const log = createLogger('fuse')
        const { startFuseDaemon } = await import('../../fs/fuse/daemon.js')
        await runDaemon(log, async () => {
          const d = await startFuseDaemon(plan.config, log).catch((e: unknown) => {
            removeMissingDirs(created)
            throw e
          })
          // recorded in the cluster directory, so `cluster down` stops this process too
          recordMount(plan.clusterDir, mountRecord(plan, process.pid, true))
          out(`mounted ${d.mountpoint} (pid ${process.pid}); stop with Ctrl-C or: strata fs umount ${d.mountpoint}`)
          return {
            close: async () => {
              try {
                await d.close()
              } finally {
                forgetMount(plan.clusterDir, plan.name, process.pid)
              }
            },
          }
        })
        return
      }
      const r = await mountBackground(mo).catch((e: unknown) => {
        removeMissingDirs(created)
        throw e
      })
      if (o.json) printJson(r)
      else out(`${r.pid}`)
    })

  g.command('umount')
    .alias('unmount')
    .description('unmount: stop the FUSE daemon serving the mount point (SIGTERM: it flushes and unmounts), whether its mount is alive or dead; clear a mount whose daemon died')
    .argument('<mountpoint>', 'the mount point', localDirArg('the mount point'))
    .option('--wait <s>', 'seconds to wait for the daemon to exit after SIGTERM before SIGKILL (a daemon that survives SIGKILL is an error)', timerSecondsArg('--wait'), 20)
    .action(async (mountpoint: string, _o: unknown, cmd: Command) => {
      const o = cmd.opts() as { wait?: number }
      const g = cmd.optsWithGlobals() as MountCliOpts
      const r = await unmountFs(mountpoint, { timeoutMs: (o.wait ?? 20) * 1000, ...(g.cluster ? { clusterDir: g.cluster } : {}) })
      if (g.json) printJson(r)
      else {
        const notes = [
          ...(r.stopped.length ? [`stopped pid ${r.stopped.join(', ')}`] : []),
          ...(r.killed.length ? [`SIGKILL: pid ${r.killed.join(', ')}`] : []),
          ...(r.forced ? [r.stopped.length ? 'cleared the mount it left' : 'cleared a dead mount, no daemon was running'] : []),
        ]
        out(`unmounted ${r.mountpoint}${notes.length ? ` (${notes.join('; ')})` : ''}`)
      }
    })
}
