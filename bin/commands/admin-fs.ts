// `strata admin` filesystem commands with 3FS admin_cli names and columns:
// mkdir, create, ls, stat, set-perm, rm, mv, gc-list, session-prune (and the
// --path form of query-chunk, wired in admin.ts). Logic in fs/admin/fs-ops.ts.
import type { Command } from 'commander'
import { withAdminSession } from '../../fs/admin/index.js'
import {
  adminCreate,
  adminGcList,
  adminLs,
  adminMkdir,
  adminMv,
  adminRm,
  adminSessionPrune,
  adminSetPerm,
  adminStat,
  parseGcCursor,
  parsePerm,
  queryChunkByPath,
  resolveLayoutArgs,
  withFsAdminSession,
  type FsAdminSession,
  type LayoutArgs,
} from '../../fs/admin/fs-ops.js'
import { checkMgmtdReachable } from '../../fs/client/index.js'
import { checkFileCreatePath } from '../../fs/client/file/flags.js'
import { StrataError } from '../../fs/common/errors.js'
import { printable } from '../../fs/common/printable.js'
import { InvalidArgumentError } from 'commander'
import { U32_MAX, UsageError, chainListArg, checkedArg, chunkSizeArg, dfsPathArg, intArg, out, printAction, printJson, printListing, uuidArg } from './output.js'
import { nameDirectories } from './fs.js'

export const U64_MAX = 0xffff_ffff_ffff_ffffn

/** the admin group's options every FS command reads */
export interface GlobalOpts {
  cluster?: string
  mgmtdAddress?: string
  timeout?: number
  json?: boolean
}

/**
 * Opens an admin session plus a file client from the admin group's global
 * options. As `fs` commands: a malformed mgmtd address is a usage error (the
 * option's parser) and a cluster whose mgmtd accepts no connection RPC_CONNECT_FAILED, both at once
 * (the meta client would otherwise retry, finding no meta server, for its
 * whole budget); --timeout is the budget of each meta or storage request.
 * `paths` are the DFS paths the command names (operands and --path values),
 * on which a refusal naming an inode is reported.
 */
export function fsSession(cmd: Command, run: (f: FsAdminSession, json: boolean) => Promise<void>, paths: string[] = []): Promise<void> {
  const g = cmd.optsWithGlobals() as GlobalOpts
  const mgmtdAddresses = g.mgmtdAddress ? g.mgmtdAddress.split(',').map((x) => x.trim()).filter(Boolean) : undefined
  return withAdminSession(
    { clusterDir: g.cluster ?? null, ...(mgmtdAddresses ? { mgmtdAddresses } : {}), ...(g.timeout ? { timeoutMs: g.timeout * 1000 } : {}) },
    async (s) => {
      await checkMgmtdReachable(s.mgmtdAddresses)
      return withFsAdminSession(s, async (f) => {
        try {
          return await run(f, !!g.json)
        } catch (e) {
          // meta names a directory by its inode: name it on the DFS paths the command was given
          // (relative ones too: they are taken from the root, as 3FS's admin_cli does), as `strata fs` does
          throw await nameDirectories(f.fs, e, paths)
        }
      })
    },
  )
}

function permArg(what: string): (v: string) => number {
  return (v: string) => {
    try {
      return parsePerm(v)
    } catch (e) {
      throw new InvalidArgumentError((e as StrataError).reason ?? `${what}: ${String(e)}`)
    }
  }
}

/** gc-list's -p: a malformed cursor is a usage error, as dump-session's -p is (it was INVALID_ARGUMENT, exit 1). */
const gcCursorArg = checkedArg(parseGcCursor)

function addLayoutOptions(c: Command): Command {
  return c
    .option('--chain-table-id <id>', 'chain table of the layout (1 to 2^32-1)', intArg('--chain-table-id', { min: 1, max: U32_MAX }))
    .option('--chain-table-ver <ver>', 'chain table version (0 to 2^32-1; default and 0: the latest; one that does not exist is MGMTD_CHAIN_TABLE_NOT_FOUND)', intArg('--chain-table-ver', { max: U32_MAX }))
    .option('--chain-list <ids>', 'explicit chains, comma separated (1,2,3); with a table: table indexes', chainListArg('--chain-list'))
    .option('--chunk-size <size>', 'chunk size, a power of two from 4K to 2G (64K, 1M …)', chunkSizeArg('--chunk-size'))
    .option('--stripe-size <n>', 'chains a file stripes over (1 to 2^32-1)', intArg('--stripe-size', { min: 1, max: U32_MAX }))
}

function layoutArgsOf(o: Record<string, unknown>): LayoutArgs {
  const a: LayoutArgs = {}
  if (o.chainTableId !== undefined) a.chainTableId = o.chainTableId as number
  if (o.chainTableVer !== undefined) a.chainTableVer = o.chainTableVer as number
  if (o.chainList !== undefined) a.chainList = o.chainList as number[]
  if (o.chunkSize !== undefined) a.chunkSize = o.chunkSize as number
  if (o.stripeSize !== undefined) a.stripeSize = o.stripeSize as number
  return a
}

export function registerAdminFsCommands(admin: Command): void {
  addLayoutOptions(
    admin
      .command('mkdir')
      .description('create a directory (3FS mkdir); layout flags set the default layout of its files')
      .argument('<path>', 'directory to create', dfsPathArg('path'))
      .option('-p, --recursive', 'create missing parents too (an existing PATH is still META_EXISTS, as in 3FS)')
      .option('-r', 'same as -p')
      .option('--perm <octal>', 'permission (default 0755)', permArg('--perm')),
  )
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
As 3FS's admin_cli mkdir, -p creates missing parents but an existing PATH,
directory or not, fails with META_EXISTS (\`strata fs mkdir -p\` follows
coreutils instead). Missing parents get the same layout as PATH.`,
    )
    .action((path: string, o, cmd: Command) =>
      fsSession(cmd, async (f, json) => {
        const recursive = !!o.recursive || !!o.r
        const layout = await resolveLayoutArgs(f, path, layoutArgsOf(o), { recursive })
        printAction(await adminMkdir(f, path, { recursive, ...(o.perm !== undefined ? { perm: o.perm } : {}), ...(layout ? { layout } : {}) }), json)
      }, [path]),
    )

  addLayoutOptions(
    admin
      .command('create')
      .description('create an empty file (3FS create); layout flags choose its chain table, chunk size and stripe')
      .argument('<path>', 'file to create', dfsPathArg('path'))
      .option('-p, --perm <octal>', 'permission (default 0644)', permArg('--perm')),
  )
    .option('--json', 'print JSON')
    .action((path: string, o, cmd: Command) => {
      // `/d/x/` names a directory: EISDIR as open(2) with O_CREAT, naming the path typed (meta would see `/d/x/.`)
      checkFileCreatePath(path)
      return fsSession(cmd, async (f, json) => {
        const layout = await resolveLayoutArgs(f, path, layoutArgsOf(o))
        printAction(await adminCreate(f, path, { ...(o.perm !== undefined ? { perm: o.perm } : {}), ...(layout ? { layout } : {}) }), json)
      }, [path])
    })

  admin
    .command('ls')
    .description('list a directory: Name Type Inode (-s adds Modified Length Permission)')
    .argument('[path]', 'directory', dfsPathArg('path'), '/')
    .option('-l, --limit <n>', 'at most this many entries', intArg('--limit', { min: 1 }))
    .option('-s, --status', 'also show each entry\'s inode attributes')
    .option('--json', 'print JSON records')
    .action((path: string, o, cmd: Command) =>
      fsSession(cmd, async (f, json) => printListing(await adminLs(f, path, { ...(o.limit !== undefined ? { limit: o.limit } : {}), status: !!o.status }), json), [path]),
    )

  admin
    .command('stat')
    .description('inode attributes: Type Inode NLink Permission IFlags Uid Gid Access Change Modified Length …; --display-layout adds Layout-* rows')
    .argument('<path>', 'path (or inode id with --inode)', dfsPathArg('path'))
    .option('-L, --follow-link', 'follow a symlink at the end of the path')
    .option('--display-layout', 'show the layout: Layout-ChainTable Layout-ChainTableVersion Layout-ChunkSize Layout-StripeSize Layout-Type … Layout-Chains')
    .option('--display-chain-list', 'same as --display-layout')
    .option('--inode', 'the argument is an inode id (decimal or 0x hex)')
    .option('--json', 'print JSON')
    .action((path: string, o, cmd: Command) => {
      // a malformed argument is a usage error, found before the cluster is contacted
      // (an id beyond u64 cannot even be encoded into the request)
      if (o.inode && (!/^\s*(0x[0-9a-fA-F]+|\d+)\s*$/.test(path) || BigInt(path.trim()) > U64_MAX)) {
        throw new UsageError(`stat --inode: ${JSON.stringify(path)} is not an inode id (decimal or 0x hex, at most 0xffffffffffffffff)`)
      }
      return fsSession(cmd, async (f, json) =>
        printAction(await adminStat(f, path, { follow: !!o.followLink, displayLayout: !!o.displayLayout || !!o.displayChainList, byInode: !!o.inode }), json),
        o.inode ? [] : [path],
      )
    })

  admin
    .command('set-perm')
    .description('change owner, group, permission or iflags (3FS set-perm)')
    .argument('<path>', 'path', dfsPathArg('path'))
    .option('-u, --uid <uid>', 'new owner (0 to 2^32-1)', intArg('--uid', { max: U32_MAX }))
    .option('-g, --gid <gid>', 'new group (0 to 2^32-1)', intArg('--gid', { max: U32_MAX }))
    .option('-p, --perm <octal>', 'new permission', permArg('--perm'))
    .option('--iflags <n>', 'new iflags (decimal or 0x hex, as stat prints them)', intArg('--iflags', { hex: true, max: U32_MAX }))
    .option('--json', 'print JSON')
    .action((path: string, o, cmd: Command) => {
      if (o.uid === undefined && o.gid === undefined && o.perm === undefined && o.iflags === undefined) {
        throw new UsageError('set-perm needs at least one of --uid, --gid, --perm, --iflags')
      }
      return fsSession(cmd, async (f, json) =>
        printAction(
          await adminSetPerm(f, path, {
            ...(o.uid !== undefined ? { uid: o.uid } : {}),
            ...(o.gid !== undefined ? { gid: o.gid } : {}),
            ...(o.perm !== undefined ? { perm: o.perm } : {}),
            ...(o.iflags !== undefined ? { iflags: o.iflags } : {}),
          }),
          json,
        ),
        [path],
      )
    })

  admin
    .command('rm')
    .description('remove a file, symlink or empty directory; -r a whole tree (moved to GC atomically); META_NO_LOCK when another client holds the hf3fs.lock of the parent, of the directory or of one inside the tree')
    .argument('<path>', 'path', dfsPathArg('path'))
    .option('-r, --recursive', 'remove a non-empty directory')
    .option('--json', 'print JSON')
    .action((path: string, o, cmd: Command) => fsSession(cmd, async (f, json) => printAction(await adminRm(f, path, { recursive: !!o.recursive }), json), [path]))

  admin
    .command('mv')
    .description('rename (POSIX semantics: an existing destination is replaced atomically); META_NO_LOCK when another client holds the hf3fs.lock of either parent or of a directory it would replace')
    .argument('<src>', 'source path', dfsPathArg('src'))
    .argument('<dst>', 'destination path', dfsPathArg('dst'))
    .option('--json', 'print JSON')
    .action((src: string, dst: string, _o, cmd: Command) => fsSession(cmd, async (f, json) => printAction(await adminMv(f, src, dst), json), [src, dst]))

  admin
    .command('gc-list')
    .description('removed files and trees waiting for GC: GcDir Name Inode Type OrigPath User RemovedAt (root only)')
    .option('-l, --limit <n>', 'at most this many entries (default: all)', intArg('--limit', { min: 1 }))
    .option('-p, --prev <GcDir/Name>', 'continue after this entry: its GcDir and Name joined by "/"', gcCursorArg)
    .option('--json', 'print JSON: {entries, more, next}')
    .addHelpText(
      'after',
      `
Entries are listed by GcDir, then Name. When -l cut the listing, a last row
"..." follows (as in 3FS); list the rest with -p GcDir/Name of the last row
before it (JSON: "more": true and "next": "GcDir/Name"). RemovedAt is when the
last link went; the Name's timestamp is when GC is due (it moves on each retry
of an entry that is still busy, e.g. a file open for writing). A -p that is not
GcDir/Name is a usage error. Only root (uid 0) may list: the GC root is
mode 0700 and OrigPath names files removed from private directories; other
users get META_NOT_PERMITTED.`,
    )
    .action((o, cmd: Command) =>
      fsSession(cmd, async (f, json) => {
        const r = await adminGcList(f, { ...(o.limit !== undefined ? { limit: o.limit } : {}), ...(o.prev !== undefined ? { prev: o.prev } : {}) })
        if (json) return printJson({ entries: r.records, more: r.more, next: r.next })
        printListing(r, false)
      }),
    )

  admin
    .command('session-prune')
    .description('remove write sessions of dead clients (not alive in mgmtd), or of one dead client (root only)')
    .option('--client-id <uuid>', 'prune this dead client\'s sessions (a client id is a UUID)', uuidArg('--client-id'))
    .option('--session <ids...>', 'only these sessions (needs --client-id)', sessionIdsArg)
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
A write session keeps GC from removing the chunks of a file that was unlinked
while open for writing; pruning it lets GC collect them. So only root (uid 0)
may prune (others get META_NOT_PERMITTED), and meta refuses to prune the
sessions of a client mgmtd still lists as alive, with or without --session
(META_CLIENT_ALIVE: "client ID is alive ..."): a live client closes its own
sessions. Meta prunes dead clients' sessions by itself too, once their mgmtd
client session has expired.`,
    )
    .action(async (o, cmd: Command) => {
      if (o.session && !o.clientId) throw new UsageError('session-prune: --session needs --client-id (sessions are per client)')
      return fsSession(cmd, async (f, json) =>
        printAction(await adminSessionPrune(f, { ...(o.clientId ? { clientId: o.clientId } : {}), ...(o.session ? { sessions: o.session } : {}) }), json),
      )
    })
}

/** `--session <ids...>`: an empty session id names no session (it would prune nothing, silently). */
function sessionIdsArg(v: string, prev: string[] | undefined): string[] {
  if (v.trim() === '') throw new InvalidArgumentError('--session ids must not be empty')
  return [...(prev ?? []), v]
}

/** `query-chunk --path P --chunk-index I` (called from admin.ts's query-chunk). */
export function queryChunkOfPath(cmd: Command, path: string, chunkIndex: number): Promise<void> {
  return fsSession(cmd, async (f, json) => {
    const r = await queryChunkByPath(f, path, chunkIndex)
    if (json) return printJson({ ...r.chunk, targets: r.records })
    out(`ChunkId ${r.chunk.chunkId} (${r.chunk.chunkName}) of ${printable(r.chunk.path)} chunk ${chunkIndex} on chain ${r.chunk.chainId}`)
    printListing(r, false)
  }, [path])
}
