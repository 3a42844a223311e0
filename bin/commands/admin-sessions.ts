// `strata admin list-clients` and `strata admin dump-session`: the client
// sessions mgmtd holds and the file write sessions meta holds, with 3FS
// admin_cli names and columns. Logic in fs/admin/client-sessions.ts.
import fs from 'node:fs'
import { InvalidArgumentError, type Command } from 'commander'
import { withAdminSession } from '../../fs/admin/index.js'
import { dumpSession, listClients, parseSessionCursor } from '../../fs/admin/client-sessions.js'
import { U64_MAX, fsSession, type GlobalOpts } from './admin-fs.js'
import { UsageError, checkedArg, fileArg, intArg, out, printJson, printListing, uuidArg } from './output.js'

function adminSession(cmd: Command, run: (s: Parameters<Parameters<typeof withAdminSession>[1]>[0], json: boolean) => Promise<void>): Promise<void> {
  const g = cmd.optsWithGlobals() as GlobalOpts
  const mgmtdAddresses = g.mgmtdAddress ? g.mgmtdAddress.split(',').map((x) => x.trim()).filter(Boolean) : undefined
  return withAdminSession(
    { clusterDir: g.cluster ?? null, ...(mgmtdAddresses ? { mgmtdAddresses } : {}), ...(g.timeout ? { timeoutMs: g.timeout * 1000 } : {}) },
    (s) => run(s, !!g.json),
  )
}

function inodeArg(v: string): bigint {
  if (!/^\s*(0x[0-9a-fA-F]+|\d+)\s*$/.test(v) || BigInt(v.trim()) > U64_MAX) {
    throw new InvalidArgumentError(`${JSON.stringify(v)} is not an inode id (decimal or 0x hex, at most 0xffffffffffffffff)`)
  }
  return BigInt(v.trim())
}

const cursorArg = checkedArg(parseSessionCursor)

export function registerAdminSessionCommands(admin: Command): void {
  admin
    .command('list-clients')
    .description('client sessions mgmtd holds (file clients, FUSE daemons): ClientId ClientStart SessionStart LastExtend ConfigVersion Hostname Description Tags ReleaseVersion')
    .option('--json', 'print JSON: {clients, bootstrapping}')
    .addHelpText(
      'after',
      `
Every file client and FUSE daemon extends a session with mgmtd while it lives
(every second); one that stopped extending is dropped after mgmtd's
clientSessionTimeoutMs. ClientId is what dump-session shows as the owner of a
write session and what session-prune --client-id takes. Description names
the client ("strata fuse <mountpoint> pid N", "strata file client pid N").
Ordered by Hostname, then Description, then ClientId (as 3FS). Times are UTC;
in the JSON they are ms since the epoch (clientStart null when the client did
not report it). While mgmtd bootstraps a last row "Mgmtd Bootstrapping  The
client list may be incomplete" follows (JSON: "bootstrapping": true).`,
    )
    .action((_o, cmd: Command) =>
      adminSession(cmd, async (s, json) => {
        const r = await listClients(s)
        if (json) return printJson({ clients: r.records, bootstrapping: r.bootstrapping })
        printListing(r, false)
      }),
    )

  admin
    .command('dump-session')
    .description('file write sessions meta holds (one per write open): InodeId ClientId SessionId Timestamp')
    .option('--client-id <uuid>', 'only the sessions of this client (as list-clients prints it; a UUID)', uuidArg('--client-id'))
    .option('--inode <id>', 'only the sessions of this inode (decimal or 0x hex)', inodeArg)
    .option('-l, --limit <n>', 'at most this many sessions (default: all)', intArg('--limit', { min: 1 }))
    .option('-p, --prev <InodeId/SessionId>', 'continue after this session (the last row of the previous page)', cursorArg)
    .option('--output <file>', 'write the sessions as JSON lines into this new file instead (3FS writes parquet there)', fileArg('--output'))
    .option('--json', 'print JSON: {sessions, more, next}')
    .addHelpText(
      'after',
      `
Sessions are listed in the order meta keeps them: by inode, then session.
When -l cut the listing a last row "..." follows; list the rest with
-p InodeId/SessionId of the last row before it (JSON: "more": true and
"next"). Timestamp is when the write open made the session (UTC; µs since the
epoch in the JSON). A session whose ClientId list-clients does not show
belongs to a dead client: meta prunes it after its session scan, or
session-prune --client-id ID removes it now. --output refuses an existing
file. A malformed --inode or -p is a usage error.`,
    )
    .action((o, cmd: Command) => {
      if (o.prev !== undefined && o.inode !== undefined && parseSessionCursor(o.prev).inode !== o.inode) {
        throw new UsageError('dump-session: -p names a session of another inode than --inode')
      }
      if (o.output !== undefined) {
        // lstat: a symlink there, dangling or not, is an existing file too
        if (fs.lstatSync(o.output, { throwIfNoEntry: false })) throw new UsageError(`dump-session: output file ${o.output} already exists`)
      }
      return fsSession(cmd, async (f, json) => {
        const r = await dumpSession(f, {
          ...(o.clientId !== undefined ? { clientId: o.clientId } : {}),
          ...(o.inode !== undefined ? { inode: o.inode } : {}),
          ...(o.limit !== undefined ? { limit: o.limit } : {}),
          ...(o.prev !== undefined ? { prev: o.prev } : {}),
          ...(o.output !== undefined ? { output: o.output } : {}),
        })
        if (o.output !== undefined) {
          if (json) return printJson({ output: o.output, sessions: r.written ?? 0, more: r.more, next: r.next })
          out(`Dumped ${r.written ?? 0} sessions to ${o.output}`)
          if (r.more) out(`more sessions follow: -p ${r.next}`)
          return
        }
        if (json) return printJson({ sessions: r.records, more: r.more, next: r.next })
        printListing(r, false)
      })
    })
}
