// `strata admin <command>`: 3FS admin_cli commands with the same names,
// arguments, CSV formats and column headers; `--json` prints records instead
// of the table. The logic lives in fs/admin; this file parses and prints.
import type { Command } from 'commander'
import {
  CHAIN_TABLE_CSV_TEMPLATE,
  CHAINS_CSV_TEMPLATE,
  createTarget,
  createTargets,
  dumpChainTable,
  dumpChains,
  dumpChunkMeta,
  getConfig,
  initCluster,
  listChainTables,
  listChains,
  listNodes,
  listOrphans,
  listTargets,
  offlineTarget,
  parseChainsCsv,
  parseNodeType,
  queryChunk,
  registerNode,
  removeTarget,
  rotateLastSrv,
  setConfig,
  unregisterNode,
  updateChain,
  uploadChainTable,
  uploadChains,
  withAdminSession,
  type AdminSession,
} from '../../fs/admin/index.js'
import { NODE_TYPES, type NodeType } from '../../fs/common/types.js'
import { StrataError } from '../../fs/common/errors.js'
import { checkMgmtdReachable } from '../../fs/client/index.js'
import { addressListArg, dirArg, fileArg, choiceArg, chunkIdArg, chunkSizeArg, chunkSizeListArg, dfsPathArg, intArg, intListArg, MAX_TIMER_SECONDS, out, printAction, printJson, printListing, readInput, timerSecondsArg, writeOutput, U32_MAX, UsageError } from './output.js'
import { queryChunkOfPath, registerAdminFsCommands } from './admin-fs.js'
import { registerAdminSessionCommands } from './admin-sessions.js'
import { registerAdminFsckCommand } from './admin-fsck.js'

interface GlobalOpts {
  cluster?: string
  mgmtdAddress?: string
  timeout?: number
  json?: boolean
}

type Run = (s: AdminSession, json: boolean) => Promise<void>

/** Opens a session from the global options, runs the command, closes it. */
function session(cmd: Command, run: Run): Promise<void> {
  const g = cmd.optsWithGlobals() as GlobalOpts
  const mgmtdAddresses = g.mgmtdAddress ? g.mgmtdAddress.split(',').map((x) => x.trim()).filter(Boolean) : undefined
  return withAdminSession(
    { clusterDir: g.cluster ?? null, ...(mgmtdAddresses ? { mgmtdAddresses } : {}), ...(g.timeout ? { timeoutMs: g.timeout * 1000 } : {}) },
    async (s) => {
      // a stopped cluster says so at once and in the words every other command uses
      await checkMgmtdReachable(s.mgmtdAddresses)
      return run(s, !!g.json)
    },
  )
}

/** For commands whose output is a CSV: --json (theirs or the group's) is refused, not silently ignored. */
function refuseJson(cmd: Command, name: string): void {
  if ((cmd.optsWithGlobals() as GlobalOpts).json) throw new UsageError(`${name} writes CSV; --json is not supported`)
}

/** 3FS's ids of chains, chain tables (and their versions) and nodes are u32; 0 names none of them. */
const u32Id = (what: string) => intArg(what, { min: 1, max: U32_MAX })

const NODE_TYPE_CHOICES = [...NODE_TYPES, 'CLIENT_AGENT'] as const

function nodeTypeArg(what: string): (v: string) => NodeType {
  const pick = choiceArg(what, NODE_TYPE_CHOICES)
  return (v: string) => parseNodeType(pick(v))
}

export function registerAdminCommands(program: Command): void {
  const admin = program
    .command('admin')
    .description('3FS admin_cli commands against a cluster (same names, arguments, CSV formats and columns)')
    .enablePositionalOptions(false)
    .option('--cluster <dir>', 'cluster directory (default: $STRATA_CLUSTER, then ~/.strata/cluster)', dirArg('--cluster'))
    .option('--mgmtd-address <addrs>', 'mgmtd host:port list (comma separated) instead of a cluster directory', addressListArg)
    .option('--timeout <seconds>', 'deadline of each RPC (FS commands: of each meta or storage request, retries included)', timerSecondsArg('--timeout'), 10)
    .option('--json', 'print JSON records instead of the table')
    .addHelpText(
      'after',
      `
Output is whitespace-aligned like admin_cli; --json (on any command) prints records.
Errors print "strata: CODE: message" and exit 1; usage errors exit 2 (a malformed
argument, or a number beyond its range: ids of chains, tables and nodes are u32,
--timeout at most ${MAX_TIMER_SECONDS} s, what a timer holds).

The filesystem commands (mkdir, create, ls, stat, set-perm, rm, mv, gc-list,
session-prune, query-chunk --path) act as the calling user: each request carries
this process's uid, gid and supplementary groups, and meta checks permissions
against them. Unlike \`strata fs\` they take no --uid/--gid/--groups.`,
    )

  // --- cluster and nodes

  admin
    .command('init-cluster')
    .description('record the root layout defaults (chain table, chunk size, stripe size) and optional per-type configs')
    .argument('<chainTableId>', 'chain table of the root directory layout', u32Id('chainTableId'))
    .argument('<chunkSize>', 'default chunk size, a power of two from 4K to 2G (65536, 64K, 1M)', chunkSizeArg('chunkSize'))
    .argument('<stripeSize>', 'default number of chains a file stripes over', intArg('stripeSize', { min: 1, max: U32_MAX }))
    .option('--mgmtd <file>', 'store this file as the MGMTD config', fileArg('--mgmtd'))
    .option('--mgmtd-config-path <file>', 'same as --mgmtd (3FS spelling)', fileArg('--mgmtd-config-path'))
    .option('--meta <file>', 'store this file as the META config', fileArg('--meta'))
    .option('--meta-config-path <file>', 'same as --meta (3FS spelling)', fileArg('--meta-config-path'))
    .option('--storage <file>', 'store this file as the STORAGE config', fileArg('--storage'))
    .option('--storage-config-path <file>', 'same as --storage (3FS spelling)', fileArg('--storage-config-path'))
    .option('--fuse <file>', 'store this file as the FUSE config', fileArg('--fuse'))
    .option('--fuse-config-path <file>', 'same as --fuse (3FS spelling)', fileArg('--fuse-config-path'))
    .option('--allow-config-existed', 'initialize again although the cluster was initialized')
    .option('--skip-config-check', 'accepted for compatibility (configs are not validated)')
    .option('--json', 'print JSON')
    .action((chainTableId: number, chunkSize: number, stripeSize: number, o, cmd: Command) => {
      const files: Array<{ type: NodeType; file: string }> = []
      for (const [opt, type] of [
        ['mgmtd', 'MGMTD'],
        ['meta', 'META'],
        ['storage', 'STORAGE'],
        ['fuse', 'FUSE'],
      ] as const) {
        const short = o[opt] as string | undefined
        const long = o[`${opt}ConfigPath`] as string | undefined
        if (short !== undefined && long !== undefined && short !== long) throw new UsageError(`init-cluster: --${opt} ${short} and --${opt}-config-path ${long} name different files; give one`)
        const file = short ?? long
        if (file !== undefined) files.push({ type, file })
      }
      return session(cmd, async (s, json) => {
        // every config file is read before anything is recorded: a missing one leaves the cluster as it was
        const contents = files.map(({ type, file }) => ({ type, content: readInput(file, `${type} config`) }))
        const r = await initCluster(s, { chainTableId, chunkSize, stripeSize, allowExisted: !!o.allowConfigExisted })
        const configs: Array<{ nodeType: NodeType; configVersion: number }> = []
        for (const { type, content } of contents) {
          const cr = await setConfig(s, type, content)
          configs.push(cr.result)
          r.lines.push([`Init config for ${type} version ${cr.result.configVersion}`])
        }
        if (json) printJson({ ...r.result, configs })
        else printAction(r, false)
      })
    })

  admin
    .command('list-nodes')
    .description('every node: Id Type Status Hostname Pid Tags LastHeartbeatTime ConfigVersion ReleaseVersion')
    .addHelpText('after', '\nLastHeartbeatTime is N/A for a node that never heartbeated and, as in 3FS, for the primary mgmtd (it does not heartbeat to itself).')
    .option('--json', 'print JSON records')
    .action((_o, cmd: Command) => session(cmd, async (s, json) => printListing(await listNodes(s), json)))

  admin
    .command('register-node')
    .description('register a node id with a type before it first heartbeats')
    .addHelpText('after', '\nAn id already registered (by register-node or a heartbeat) is refused with MGMTD_REGISTER_FAIL (3FS kRegisterFail).')
    .argument('<nodeId>', 'node id', u32Id('nodeId'))
    .argument('<type>', `node type: ${NODE_TYPES.join(' | ')}`, nodeTypeArg('type'))
    .option('--json', 'print JSON')
    .action((nodeId: number, type: NodeType, _o, cmd: Command) => session(cmd, async (s, json) => printAction(await registerNode(s, nodeId, type), json)))

  admin
    .command('unregister-node')
    .description('forget a node that no longer heartbeats (a storage node only once no chain lists its targets)')
    .argument('<nodeId>', 'node id', u32Id('nodeId'))
    .option('--json', 'print JSON')
    .action((nodeId: number, _o, cmd: Command) => session(cmd, async (s, json) => printAction(await unregisterNode(s, nodeId), json)))

  // --- targets

  admin
    .command('create-target')
    .description('create one storage target on a storage node (StorageSerde createTarget)')
    .requiredOption('--node-id <id>', 'storage node holding the target', u32Id('--node-id'))
    .requiredOption('--disk-index <d>', 'disk index on that node', intArg('--disk-index', { max: U32_MAX }))
    .requiredOption('--target-id <id>', 'target id', intArg('--target-id', { min: 1 }))
    .requiredOption('--chain-id <id>', 'chain the target will serve', u32Id('--chain-id'))
    .option('--chunk-size <sizes...>', 'chunk sizes the target prepares for, each a power of two from 4K to 2G (64K 1M …)', chunkSizeListArg('--chunk-size'))
    .option('--add-chunk-size', 'accepted for compatibility')
    .option('--use-new-chunk-engine', 'accepted for compatibility (there is one engine)')
    .option('--json', 'print JSON')
    .action((o, cmd: Command) =>
      session(cmd, async (s, json) =>
        printAction(await createTarget(s, { nodeId: o.nodeId, diskIndex: o.diskIndex, targetId: o.targetId, chainId: o.chainId, ...(o.chunkSize ? { chunkSizes: o.chunkSize } : {}) }), json),
      ),
    )

  admin
    .command('create-targets')
    .description("create all of a node's targets: per a chains CSV (ids decoded with the deploy formula), else per the cluster layout, else per routing info")
    .requiredOption('--node-id <id>', 'storage node', u32Id('--node-id'))
    .option('--disk-index <d...>', 'only these disk indexes', intListArg('--disk-index', { max: U32_MAX, strict: true }))
    .option('--chains <csv>', 'chains CSV (ChainId,TargetId,…) listing the targets', fileArg('--chains'))
    .option('--chunk-size <sizes...>', 'chunk sizes the targets prepare for, each a power of two from 4K to 2G', chunkSizeListArg('--chunk-size'))
    .option('--allow-existing-target', 'accepted for compatibility (re-creating an existing target is a no-op)')
    .option('--add-chunk-size', 'accepted for compatibility')
    .option('--use-new-chunk-engine', 'accepted for compatibility')
    .option('--json', 'print JSON')
    .action((o, cmd: Command) =>
      session(cmd, async (s, json) => {
        const chains = o.chains ? parseChainsCsv(readInput(o.chains, 'chains CSV'), o.chains) : undefined
        printAction(
          await createTargets(s, {
            nodeId: o.nodeId,
            ...(o.diskIndex ? { diskIndexes: o.diskIndex } : {}),
            ...(chains ? { chains } : {}),
            ...(o.chunkSize ? { chunkSizes: o.chunkSize } : {}),
          }),
          json,
        )
      }),
    )

  admin
    .command('list-targets')
    .description('targets in chain order: TargetId ChainId Role PublicState LocalState NodeId DiskIndex UsedSize')
    .option('-c, --chain-id <id>', 'only this chain', u32Id('--chain-id'))
    .option('--orphan', 'targets that belong to no chain: TargetId LocalState NodeId DiskIndex UsedSize')
    .option('--json', 'print JSON records (a target its node holds offline also has offlineReason)')
    .action((o, cmd: Command) => {
      if (o.orphan && o.chainId !== undefined) throw new UsageError('list-targets: --orphan lists the targets that belong to no chain; -c cannot be used with it')
      return session(cmd, async (s, json) => {
        if (o.orphan) return printListing(await listOrphans(s), json)
        printListing(await listTargets(s, o.chainId !== undefined ? { chainId: o.chainId } : {}), json)
      })
    })

  admin
    .command('offline-target')
    .description('take a target offline on its storage node; refused for the only SERVING replica of a chain unless --force')
    .requiredOption('--target-id <id>', 'target', intArg('--target-id', { min: 1 }))
    .option('--node-id <id>', 'its storage node (default: from routing info)', u32Id('--node-id'))
    .option('--force', 'also when it is the last SERVING replica (the chain becomes unavailable)')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
There is no online-target (3FS has none either): the target stays OFFLINE until
its storage node restarts (a local cluster: strata cluster kill --node storage-N
--signal TERM, then strata cluster start --node storage-N); it then resyncs from
the chain and serves again. Its offlineReason (list-targets --json, cluster
status) is "offline-target" meanwhile.

A target that a resync took offline because it holds diverged chunks comes back
the same way only to be taken offline again: replace its copy instead
(remove-target, then create-target; docs/cli.md, "A resync that cannot finish").`,
    )
    .action((o, cmd: Command) =>
      session(cmd, async (s, json) => printAction(await offlineTarget(s, { targetId: o.targetId, ...(o.nodeId ? { nodeId: o.nodeId } : {}), force: !!o.force }), json)),
    )

  admin
    .command('remove-target')
    .description('delete an OFFLINE target and its data from its storage node')
    .requiredOption('--node-id <id>', 'storage node', u32Id('--node-id'))
    .requiredOption('--target-id <id>', 'target', intArg('--target-id', { min: 1 }))
    .option('--force', 'also when the chain still lists it as not OFFLINE')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
A target held offline because a resync found diverged chunks on it is repaired
by removing it and creating it again, empty, with the same ids (create-target
--node-id N --disk-index D --target-id T --chain-id C): its chain resyncs it
whole (docs/cli.md, "A resync that cannot finish").`,
    )
    .action((o, cmd: Command) => session(cmd, async (s, json) => printAction(await removeTarget(s, { nodeId: o.nodeId, targetId: o.targetId, force: !!o.force }), json)))

  // --- chains and chain tables

  admin
    .command('upload-chains')
    .description('create chains from a CSV with header ChainId,TargetId,TargetId… (one chain per line, head first)')
    .argument('[csv-file-path]', 'the chains CSV (with -d: where to write the template; default stdout)', fileArg('csv-file-path'))
    .option('-d, --dump-template', 'write a template CSV instead of uploading')
    .option('--set-preferred-target-order', 'record the CSV order as the preferred target order')
    .option('--json', 'print JSON')
    .action((file: string | undefined, o, cmd: Command) => {
      if (o.dumpTemplate) {
        refuseJson(cmd, 'upload-chains -d')
        if (o.setPreferredTargetOrder) throw new UsageError('upload-chains -d writes a template; --set-preferred-target-order cannot be used with it')
        return dumpTemplate(file, CHAINS_CSV_TEMPLATE)
      }
      if (!file) throw new UsageError('upload-chains needs <csv-file-path> (or -d to print a template)')
      return session(cmd, async (s, json) => printAction(await uploadChains(s, readInput(file, 'chains CSV'), { source: file, setPreferredTargetOrder: !!o.setPreferredTargetOrder }), json))
    })

  admin
    .command('upload-chain-table')
    .description('upload a new version of a chain table from a CSV with header ChainId')
    .argument('[tableId]', 'chain table id (1 to 2^32-1; not needed with -d)', fileArg('tableId (with -d: the template path)'))
    .argument('[csv-file-path]', 'the chain table CSV (with -d: where to write the template; default stdout)', fileArg('csv-file-path'))
    .option('-d, --dump-template', 'write a template CSV instead of uploading: -d [PATH] (a table id before PATH is accepted and ignored)')
    .option('--desc <text>', 'description stored with this version')
    .option('--json', 'print JSON')
    .action((tableArg: string | undefined, file: string | undefined, o, cmd: Command) => {
      if (o.dumpTemplate) {
        refuseJson(cmd, 'upload-chain-table -d')
        if (o.desc !== undefined) throw new UsageError('upload-chain-table -d writes a template; --desc cannot be used with it')
        // `-d PATH` as upload-chains -d takes it; `-d ID PATH` as 3FS's admin_cli
        const dest = file ?? (tableArg !== undefined && !/^\d+$/.test(tableArg) ? tableArg : undefined)
        return dumpTemplate(dest, CHAIN_TABLE_CSV_TEMPLATE)
      }
      if (tableArg === undefined || !file) throw new UsageError('upload-chain-table needs <tableId> <csv-file-path> (or -d to print a template)')
      const tableId = Number(tableArg)
      if (!/^\d+$/.test(tableArg) || tableId < 1 || tableId > U32_MAX) throw new UsageError(`tableId must be an integer in [1, ${U32_MAX}], got "${tableArg}"`)
      return session(cmd, async (s, json) => printAction(await uploadChainTable(s, tableId, readInput(file, 'chain table CSV'), { source: file, ...(o.desc !== undefined ? { desc: o.desc } : {}) }), json))
    })

  admin
    .command('list-chains')
    .description('chains: ChainId ChainTable ChainTableVersion ChainVersion Status PreferredOrder Target… (targets as id(PUBLIC-LOCAL), head first)')
    .option('-t, --table-id <id>', 'only the chains of this chain table, in table order', u32Id('--table-id'))
    .option('-v, --version <ver>', 'with -t: this table version (default latest)', u32Id('--version'))
    .option('--json', 'print JSON records')
    .action((o, cmd: Command) => {
      if (o.version !== undefined && o.tableId === undefined) throw new UsageError('list-chains -v needs -t')
      return session(cmd, async (s, json) =>
        printListing(await listChains(s, { ...(o.tableId !== undefined ? { tableId: o.tableId } : {}), ...(o.version !== undefined ? { version: o.version } : {}) }), json),
      )
    })

  admin
    .command('list-chain-tables')
    .description('every chain table version: ChainTableId ChainTableVersion ChainCount ReplicaCount Desc')
    .option('--json', 'print JSON records')
    .action((_o, cmd: Command) => session(cmd, async (s, json) => printListing(await listChainTables(s), json)))

  admin
    .command('update-chain')
    .description('add a target to a chain (it joins OFFLINE and syncs) or remove one')
    .addHelpText('after', '\nPrints the chain as the update committed it (as 3FS does): an added target shows OFFLINE;\nlist-chains then shows it go WAITING, SYNCING and SERVING.')
    .argument('<chainId>', 'chain', u32Id('chainId'))
    .argument('<targetId>', 'target', intArg('targetId', { min: 1 }))
    .requiredOption('-m, --mode <mode>', 'add | remove', choiceArg('--mode', ['add', 'remove'] as const))
    .option('--json', 'print JSON')
    .action((chainId: number, targetId: number, o, cmd: Command) => session(cmd, async (s, json) => printAction(await updateChain(s, chainId, targetId, o.mode), json)))

  admin
    .command('rotate-lastsrv')
    .description('when the LASTSRV target of a chain is lost for good, make the next target LASTSRV')
    .argument('<chainId>', 'chain', u32Id('chainId'))
    .option('--json', 'print JSON')
    .action((chainId: number, _o, cmd: Command) => session(cmd, async (s, json) => printAction(await rotateLastSrv(s, chainId), json)))

  admin
    .command('dump-chains')
    .description('write the current chains as an upload-chains CSV (stdout without a file)')
    .argument('[csv-file-path]', 'output file', fileArg('csv-file-path'))
    .action((file: string | undefined, _o, cmd: Command) => {
      refuseJson(cmd, 'dump-chains')
      return session(cmd, async (s) => writeOrPrint(file, await dumpChains(s)))
    })

  admin
    .command('dump-chain-table')
    .description('write a chain table version as an upload-chain-table CSV (stdout without a file)')
    .argument('<tableId>', 'chain table', u32Id('tableId'))
    .argument('[csv-file-path]', 'output file', fileArg('csv-file-path'))
    .option('-v, --version <ver>', 'table version (default latest)', u32Id('--version'))
    .action((tableId: number, file: string | undefined, o, cmd: Command) => {
      refuseJson(cmd, 'dump-chain-table')
      return session(cmd, async (s) => writeOrPrint(file, await dumpChainTable(s, tableId, o.version)))
    })

  // --- chunks

  admin
    .command('query-chunk')
    .description("a chunk's metadata on every target of its chain (head first); --path/--chunk-index computes chain and chunk id from a file's layout")
    .option('-c, --chain-id <id>', 'chain holding the chunk', u32Id('--chain-id'))
    .option('--chunk <id>', 'chunk id: 32 hex digits (dashes allowed) or 0x<inode>-<track>-<index>', chunkIdArg)
    .option('--path <path>', 'instead of -c/--chunk: a file in the DFS …', dfsPathArg('--path'))
    .option('--chunk-index <i>', '… and the index of its chunk', intArg('--chunk-index', { max: U32_MAX }))
    .option('--json', 'print JSON records')
    .action((o, cmd: Command) => {
      // two ways to name the chunk: an option of the other way would be ignored, so it is refused
      if (o.path !== undefined && (o.chainId !== undefined || o.chunk !== undefined)) {
        throw new UsageError(`query-chunk: --path/--chunk-index and -c/--chunk are two ways to name the chunk; ${o.chainId !== undefined ? '-c' : '--chunk'} cannot be used with --path`)
      }
      if (o.path === undefined && o.chunkIndex !== undefined) throw new UsageError('query-chunk: --chunk-index needs --path (with -c, --chunk names the chunk)')
      if (o.path !== undefined) {
        if (o.chunkIndex === undefined) throw new UsageError('query-chunk --path needs --chunk-index')
        return queryChunkOfPath(cmd, o.path, o.chunkIndex)
      }
      if (o.chainId === undefined || o.chunk === undefined) throw new UsageError('query-chunk needs -c and --chunk (or --path and --chunk-index)')
      return session(cmd, async (s, json) => {
        const r = await queryChunk(s, o.chainId, o.chunk)
        if (json) return printJson({ chainId: o.chainId, chunkId: r.chunkId, targets: r.records })
        out(`ChunkId ${r.chunkId} on chain ${o.chainId}`)
        printListing(r, false)
      })
    })

  admin
    .command('dump-chunkmeta')
    .description('metadata of every chunk on the SERVING targets of some chains (all by default)')
    .option('-c, --chain-ids <ids...>', 'only these chains', intListArg('--chain-ids', { min: 1, max: U32_MAX, strict: true }))
    .option('-m, --chunkmeta-dir <dir>', 'also write <chain>-<target>.meta files (JSON lines) into this new directory', fileArg('--chunkmeta-dir'))
    .option('--json', 'print JSON records')
    .action((o, cmd: Command) =>
      session(cmd, async (s, json) => {
        const r = await dumpChunkMeta(s, { ...(o.chainIds ? { chainIds: o.chainIds } : {}), ...(o.chunkmetaDir ? { outDir: o.chunkmetaDir } : {}) })
        if (json) return printJson({ chunks: r.records, skipped: r.skipped, files: r.files })
        printListing(r, false)
        for (const sk of r.skipped) process.stderr.write(`skipped target ${sk.targetId} of chain ${sk.chainId}: ${sk.reason}\n`)
        for (const f of r.files) process.stderr.write(`saved ${f}\n`)
      }),
    )

  // --- configs

  admin
    .command('set-config')
    .description('store a new config version for a node type')
    .option('-t, --type <type>', `node type: ${NODE_TYPES.join(' | ')}`, nodeTypeArg('--type'))
    .option('-f, --file <file>', 'config file', fileArg('--file'))
    .option('--desc <text>', 'description of this version')
    .option('--json', 'print JSON')
    .action((o, cmd: Command) => {
      if (!o.type || !o.file) throw new UsageError('set-config: must specify -t and -f')
      return session(cmd, async (s, json) => printAction(await setConfig(s, o.type, readInput(o.file, 'config file'), o.desc), json))
    })

  admin
    .command('get-config')
    .description('the latest config of a node type (content to -o FILE, or printed after the table)')
    .option('-t, --type <type>', `node type: ${NODE_TYPES.join(' | ')}`, nodeTypeArg('--type'))
    .option('--node-type <type>', 'same as --type (3FS spelling)', nodeTypeArg('--node-type'))
    .option('-o, --output-file <file>', 'write the config content here', fileArg('--output-file'))
    .option('--json', 'print JSON')
    .action((o, cmd: Command) => {
      if (o.type !== undefined && o.nodeType !== undefined && o.type !== o.nodeType) throw new UsageError(`get-config: -t ${o.type} and --node-type ${o.nodeType} name different types; give one`)
      const type = o.type ?? o.nodeType
      if (!type) throw new UsageError('get-config: must specify -t')
      return session(cmd, async (s, json) => {
        const r = await getConfig(s, type)
        if (o.outputFile) {
          if (!r.result.exists) throw new StrataError('NOT_FOUND', `no config stored for ${type}`)
          writeOutput(o.outputFile, r.result.content, `the ${type} config`)
          r.lines.push(['OutputFile', o.outputFile])
        }
        if (json) return printJson(r.result)
        printAction(r, false)
        if (!o.outputFile && r.result.exists) out(r.result.content)
      })
    })

  registerAdminFsCommands(admin)
  registerAdminSessionCommands(admin)
  registerAdminFsckCommand(admin)
}

function dumpTemplate(file: string | undefined, template: string): void {
  if (!file) return out(template)
  writeOutput(file, template, 'the template')
  out(`Dump template to ${file} succeeded`)
}

function writeOrPrint(file: string | undefined, text: string): void {
  if (!file) return out(text)
  writeOutput(file, text, 'the CSV')
  out(`Dump to ${file} succeeded`)
}
