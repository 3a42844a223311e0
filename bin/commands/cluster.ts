// `strata cluster up|down|status|kill|start|destroy`: a local all-in-one
// cluster of background daemons under one directory.
import { InvalidArgumentError, type Command } from 'commander'
import type { StrataError } from '../../fs/common/errors.js'
import {
  clusterDestroy,
  clusterDown,
  clusterKill,
  clusterStart,
  clusterStatus,
  clusterUp,
  DEFAULT_CHUNK_SIZE,
  formatSize,
  formatTable,
  interruptible,
  parseSignal,
  resolveClusterDir,
  type ClusterFile,
  type ClusterStatus,
  type TimerProfile,
} from '../../fs/admin/index.js'
import { choiceArg, dirArg, nameArg, intArg, out, printJson, progressReporter, chunkSizeArg, timerSecondsArg, warmPoolArg } from './output.js'
import { exitOnInterrupt } from './fs.js'

interface DirOpts {
  dir?: string
  cluster?: string
}

const DIR_HELP = `Cluster directory: --dir or --cluster (not empty), else $STRATA_CLUSTER, else ~/.strata/cluster.`

function count(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`
}

function dirOf(o: DirOpts): string {
  return resolveClusterDir(o.dir ?? o.cluster)
}

function processTable(c: ClusterFile): string {
  return formatTable([
    ['Name', 'Role', 'NodeId', 'Address', 'Pid', 'Log'],
    ...c.processes.map((p) => [p.name, p.role, String(p.nodeId), p.address, p.pid ? String(p.pid) : '-', p.logFile]),
  ])
}

function statusText(st: ClusterStatus): string {
  let s = `cluster ${st.name} at ${st.dir}: ${st.running ? 'running' : 'stopped'}\n`
  s += formatTable([
    ['Name', 'Role', 'NodeId', 'Address', 'Pid', 'Alive', 'Status'],
    ...st.processes.map((p) => [p.name, p.role, String(p.nodeId), p.address, p.pid ? String(p.pid) : '-', p.alive ? 'yes' : 'no', p.nodeStatus ?? 'N/A']),
  ])
  if (st.mounts.length) {
    s += 'mounts (strata fs mount):\n'
    s += formatTable([
      ['Mountpoint', 'Pid', 'Alive', 'Mounted', 'Log'],
      ...st.mounts.map((m) => [m.mountpoint, String(m.pid), m.alive ? 'yes' : 'no', m.mounted ? 'yes' : 'no', m.logFile || (m.foreground ? '(foreground)' : '-')]),
    ])
  }
  if (st.mgmtd.reachable) {
    const c = st.chains!
    s += `mgmtd: reachable, routing info version ${st.mgmtd.routingInfoVersion}\n`
    s += `chains: ${c.total} total, ${c.serving} SERVING, ${c.syncing} SYNCING, ${c.degraded} degraded, ${c.unavailable} UNAVAILABLE\n`
    if (c.chains.length) {
      const width = Math.max(...c.chains.map((x) => x.targets.length))
      s += formatTable([['ChainId', 'ChainVersion', 'Status', ...Array<string>(width).fill('Target')], ...c.chains.map((x) => [String(x.chainId), String(x.chainVersion), x.status, ...x.targets])])
    }
    // a target held offline stays so until someone acts: say which and why
    for (const p of c.problems) s += `chain ${p.chainId}: target ${p.targetId} ${p.publicState}-${p.localState}: ${p.reason}\n`
  } else {
    s += `mgmtd: not reachable${st.mgmtd.error ? ` (${st.mgmtd.error})` : ''}\n`
  }
  return s
}

export function registerClusterCommands(program: Command): void {
  const cluster = program
    .command('cluster')
    .description('run a local all-in-one cluster (mgmtd + storage nodes) as background daemons')
    .enablePositionalOptions(false)
    .option('--dir <dir>', 'cluster directory (config/, logs/, data/, cluster.json)', dirArg('--dir'))
    .option('--cluster <dir>', 'same as --dir', dirArg('--cluster'))
    .addHelpText('after', `\n${DIR_HELP}`)

  cluster
    .command('up')
    .description('create, start and bootstrap a cluster (or start a stopped one again with its saved configs)')
    .option('--storage-nodes <n>', 'number of storage nodes', intArg('--storage-nodes', { min: 1, max: 999 }), 3)
    .option('--targets-per-node <m>', 'storage targets per node (one per disk index)', intArg('--targets-per-node', { min: 1, max: 999 }), 2)
    .option('--replicas <r>', 'replicas per chain (distinct nodes; nodes*targets must be a multiple)', intArg('--replicas', { min: 1, max: 99 }), 3)
    .option('--chunk-size <size>', 'default file chunk size, a power of two from 4K to 2G (64K, 1M, 4MiB, 65536)', chunkSizeArg('--chunk-size'), DEFAULT_CHUNK_SIZE)
    .option('--stripe-size <k>', 'default stripe size (default: min(chains, 16))', intArg('--stripe-size', { min: 1 }))
    .option('--chain-table-id <id>', 'id of the chain table to create', intArg('--chain-table-id', { min: 1, max: 0xffffffff }), 1)
    .option('--base-port <port>', 'fixed ports: mgmtd gets port, storage-i port+i (default: free ports)', intArg('--base-port', { min: 1, max: 65535 }))
    .option('--no-mount', 'do not start a FUSE mount (recorded for the fuse role)')
    .option('--no-sandbox', 'do not start the sandbox daemon (recorded for the sandbox role)')
    .option('--warm-pool <image=count>', 'the sandbox daemon keeps COUNT sandboxes of IMAGE started ahead of the creates (repeatable; see strata serve --help)', warmPoolArg)
    .option('--no-bootstrap', 'only start the processes; run init-cluster, create-target, upload-chains… yourself (DIR/config has the CSVs)')
    .option('--timers <profile>', 'daemon timers: local (test scale, seconds) or production (3FS defaults)', choiceArg<TimerProfile>('--timers', ['local', 'production']), 'local')
    .option('--timeout <seconds>', 'give up bootstrapping after this long (default 60, production 300)', timerSecondsArg('--timeout'))
    .option('--name <name>', 'cluster name (default: the directory name)', nameArg('--name'))
    .option('--keep-on-failure', 'leave the processes running when the bootstrap fails')
    .option('-q, --quiet', 'no progress output')
    .option('--json', 'print the cluster description as JSON')
    .addHelpText(
      'after',
      `
Starts mgmtd (node 1) and storage-1..N (nodes 10001..) detached, with configs in
DIR/config, logs in DIR/logs and data in DIR/data, then bootstraps like 3FS's
deploy guide: init-cluster, create-target on every node, upload-chains,
upload-chain-table, and waits until every chain is SERVING with every target
UPTODATE. Ids follow 3FS's deploy generator (see docs/cli.md). Ports are picked
once and kept, so a node restarted later keeps its address.
On a directory whose cluster is stopped, starts it again (settings ignored),
waiting for every target but those their node holds offline (a diverged resync:
docs/cli.md, "A resync that cannot finish"), each named in a "not serving" line.
Refuses a directory whose cluster runs (CLUSTER_RUNNING).
Ctrl-C or SIGTERM stops what was started (unless --keep-on-failure) and exits
130/143 with "strata: CANCELLED: cluster up interrupted by SIGINT while …".
${DIR_HELP}`,
    )
    .action(async (o, cmd: Command) => {
      const g = cmd.optsWithGlobals() as DirOpts & Record<string, unknown>
      const r = await exitOnInterrupt(interruptible('cluster up', (signal) => clusterUp({
        dir: dirOf(g),
        storageNodes: o.storageNodes,
        targetsPerNode: o.targetsPerNode,
        replicas: o.replicas,
        chunkSize: o.chunkSize,
        ...(o.stripeSize !== undefined ? { stripeSize: o.stripeSize } : {}),
        chainTableId: o.chainTableId,
        basePort: o.basePort ?? null,
        mount: o.mount,
        sandbox: o.sandbox,
        ...(o.warmPool ? { warmPool: o.warmPool } : {}),
        timers: o.timers,
        bootstrap: o.bootstrap,
        ...(o.timeout ? { timeoutMs: o.timeout * 1000 } : {}),
        ...(o.name ? { name: o.name } : {}),
        keepOnFailure: !!o.keepOnFailure,
        progress: progressReporter({ quiet: !!o.quiet || !!o.json }),
        signal,
      })))
      if (o.json) return printJson({ ...r.cluster, restarted: r.restarted, elapsedMs: r.elapsedMs, ...(r.heldOffline ? { heldOffline: r.heldOffline } : {}) })
      const c = r.cluster
      const st = c.settings
      out(`cluster ${c.name} ${r.restarted ? 'restarted' : st.bootstrap === false ? 'started (not bootstrapped)' : 'ready'} in ${(r.elapsedMs / 1000).toFixed(1)}s at ${c.dir}`)
      out(processTable(c))
      if (st.bootstrap === false && !r.restarted) {
        out(`planned layout: ${c.dir}/config/chains.csv, chain-table.csv, create_target_cmd.txt`)
      } else {
        out(
          `chain table ${st.chainTableId}: ${count(c.layout.chains.length, 'chain')} x ${count(st.replicas, 'replica')} on ${count(st.storageNodes, 'storage node')} x ${count(st.targetsPerNode, 'target')}; chunk ${formatSize(st.chunkSize)}, stripe ${st.stripeSize}`,
        )
      }
      out(`mgmtd: ${c.mgmtdAddresses.join(',')}`)
      out(`use it: export STRATA_CLUSTER=${c.dir}`)
      for (const p of r.heldOffline ?? []) out(`not serving: chain ${p.chainId}: target ${p.targetId} is held offline by its node: ${p.reason}`)
    })

  cluster
    .command('down')
    .description('stop every process (SIGTERM, then SIGKILL after the grace period); data is kept')
    .addHelpText('after', '\nMounts made with `strata fs mount MNT --cluster DIR` (recorded in DIR/mounts) are stopped first:\ntheir daemons flush and unmount while meta and storage still serve them; a mount a dead daemon left is cleared.')
    .option('--grace <seconds>', 'seconds to wait after SIGTERM before SIGKILL', timerSecondsArg('--grace', { min: 0 }), 10)
    .option('--json', 'print the result as JSON')
    .action(async (o, cmd: Command) => {
      const r = await clusterDown({ dir: dirOf(cmd.optsWithGlobals()), graceMs: o.grace * 1000 })
      if (o.json) return printJson(r)
      const all = [...r.unmounted.map((m) => `mount ${m}`), ...r.stopped]
      out(all.length ? `stopped ${all.join(', ')}${r.killed.length ? ` (SIGKILL: ${r.killed.join(', ')})` : ''}` : `nothing was running in ${r.dir}`)
    })

  cluster
    .command('status')
    .description('every process (name, role, node id, address, pid, alive, mgmtd status), the `fs mount` mounts of the cluster and a chain summary (with each target its node holds offline, and why)')
    .option('--json', 'print as JSON')
    .action(async (o, cmd: Command) => {
      const st = await clusterStatus({ dir: dirOf(cmd.optsWithGlobals()) })
      if (o.json) return printJson(st)
      out(statusText(st))
    })

  cluster
    .command('kill')
    .description('send a signal to one process (default SIGKILL) and wait for it to exit')
    .requiredOption('--node <name>', 'process name, e.g. storage-2 or mgmtd', nameArg('--node'))
    .option('--signal <sig>', 'KILL, TERM, INT, STOP, CONT, HUP, QUIT, USR1, USR2 (or a number)', (v: string) => {
      try {
        return parseSignal(v)
      } catch (e) {
        throw new InvalidArgumentError((e as StrataError).reason)
      }
    }, 'KILL')
    .option('--json', 'print the result as JSON')
    .action(async (o, cmd: Command) => {
      const r = await clusterKill({ dir: dirOf(cmd.optsWithGlobals()), node: o.node, signal: o.signal })
      if (o.json) return printJson(r)
      out(`sent ${r.signal} to ${r.name} (pid ${r.pid})${r.exited ? '; it exited' : ''}`)
    })

  cluster
    .command('start')
    .description('start one stopped process again with its saved config and port')
    .requiredOption('--node <name>', 'process name, e.g. storage-2', nameArg('--node'))
    .option('--timeout <seconds>', 'wait this long for it to answer and (storage) to connect to mgmtd', timerSecondsArg('--timeout'), 30)
    .option('--json', 'print the result as JSON')
    .action(async (o, cmd: Command) => {
      const r = await clusterStart({ dir: dirOf(cmd.optsWithGlobals()), node: o.node, timeoutMs: o.timeout * 1000 })
      if (o.json) return printJson(r)
      out(`started ${r.name} (pid ${r.pid}) on ${r.address}`)
    })

  cluster
    .command('destroy')
    .description('delete the cluster directory (configs, logs, data); refuses a running cluster (or a live `fs mount` of it) unless --force')
    .option('--force', 'stop the cluster and its `fs mount` mounts first if they run; also cleans up a directory whose cluster.json is corrupt')
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      `
A cluster.json that is not a cluster description (BAD_CONFIG) is refused
without --force. With --force the directory is cleaned up without it: the
\`fs mount\` daemons recorded in DIR/mounts and every \`strata daemon ROLE
--config F\` process whose F is inside DIR are stopped (SIGTERM, SIGKILL after
5 s; later roles, then storage, then mgmtd), whatever is mounted below DIR is
detached, and DIR's config/, logs/, data/, mounts/ and cluster.json are removed.
Nothing outside DIR is touched. A directory with no sign of a Strata cluster
(no config/mgmtd.json, no daemon or mount of it) is left alone (BAD_CONFIG).
${DIR_HELP}`,
    )
    .action(async (o, cmd: Command) => {
      const r = await clusterDestroy({ dir: dirOf(cmd.optsWithGlobals()), force: !!o.force })
      if (o.json) return printJson(r)
      if (r.unreadableDescription) out(`${r.dir}/cluster.json was not a cluster description (${r.unreadableDescription}); found the cluster's processes by their configs under ${r.dir}`)
      out(`destroyed cluster at ${r.dir}${r.stopped.length ? ` (stopped ${r.stopped.join(', ')})` : ''}`)
    })
}
