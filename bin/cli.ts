// The `strata` command line. Each command group lives in its own module;
// this file only wires them into commander. A group's module (and what it
// imports: the sandbox daemon, FUSE, image code) is loaded only when that
// group runs, so `strata fs …` neither pays for nor can be broken by the
// sandbox daemon's modules. With no group named (`strata --help`, `strata
// help …`, an unknown command) every group is loaded, for the full listing.
import { Command } from 'commander'
import { RELEASE_VERSION } from '../fs/common/config.js'
import { StrataError } from '../fs/common/errors.js'
import { UsageError, describeFailure, exitQuietlyOnClosedPipes } from './commands/output.js'
import { nonUtf8Arguments } from './commands/raw-argv.js'
import { printable } from '../fs/common/printable.js'

type Register = (program: Command) => void | Promise<void>

/** `cluster up` starts a sandbox node daemon after the FUSE mount: its cluster role, for the groups that run clusters. */
async function withSandboxClusterRole(): Promise<void> {
  const [{ registerClusterRole }, { sandboxClusterRole }] = await Promise.all([import('../fs/admin/index.js'), import('../sandbox/daemon/index.js')])
  registerClusterRole(sandboxClusterRole)
}

// in the order `strata --help` lists them
const GROUPS: Array<[string, () => Promise<Register>]> = [
  ['daemon', async () => {
    const { addDaemonRole, registerDaemonCommand } = await import('./commands/daemon.js')
    addDaemonRole('sandbox', async () => {
      const { startSandboxDaemon } = await import('../sandbox/daemon/index.js')
      return (c, log) => startSandboxDaemon(c, log)
    })
    return registerDaemonCommand
  }],
  ['cluster', async () => {
    await withSandboxClusterRole()
    return (await import('./commands/cluster.js')).registerClusterCommands
  }],
  ['admin', async () => (await import('./commands/admin.js')).registerAdminCommands],
  ['fs', async () => {
    const [{ registerFsCommands }, { registerFsMountCommands }] = await Promise.all([import('./commands/fs.js'), import('./commands/fs-mount.js')])
    return (program) => void registerFsMountCommands(registerFsCommands(program))
  }],
  ['image', async () => (await import('./commands/image.js')).registerImageCommands],
  ['sandbox', async () => {
    await withSandboxClusterRole()
    return (await import('./commands/sandbox.js')).registerSandboxCommands
  }],
  ['serve', async () => {
    await withSandboxClusterRole()
    return (await import('./commands/sandbox.js')).registerServeCommand
  }],
]

/** A module that fails to load (a half-built dist/, a missing native addon) is one line and exit 1, not a Node stack trace. */
async function load(name: string, loader: () => Promise<Register>): Promise<Register> {
  try {
    return await loader()
  } catch (e) {
    throw new StrataError('INTERNAL', `cannot load the ${name} commands: ${e instanceof Error ? e.message : String(e)}`, { cause: e })
  }
}

/** The command group argv names: the first argument that is not an option (program options come before it). */
function groupOf(argv: string[]): string | undefined {
  return argv.slice(2).find((a) => !a.startsWith('-'))
}

async function main(): Promise<void> {
  const mangled = nonUtf8Arguments()
  if (mangled.length) {
    throw new UsageError(
      `argument ${JSON.stringify(mangled[0])} is not valid UTF-8 (U+FFFD marks its bad bytes): strata reads its command line as UTF-8, so it would name another file; rename the file, or go through stdin or stdout (fs put - DFS_PATH, fs get DFS_PATH -)`,
    )
  }
  const program = new Command()
  program
    .name('strata')
    .description('Strata: sandbox infrastructure on a 3FS-compatible distributed filesystem')
    .version(RELEASE_VERSION)
    // every usage error, commander's own (a missing argument, an unknown option, an
    // option parser's InvalidArgumentError) included, is one `strata: usage: …` line
    // (exit 2), like the ones the commands raise; the commands inherit this when they
    // are created below
    .showHelpAfterError(false)
    .configureOutput({ outputError: (str, write) => write(printable(str.replace(/^error: /, 'strata: usage: '), '\n')) })
    // program options only before the command, so subcommand options such as
    // `admin list-chains -v/--version` are not taken for the program's --version
    .enablePositionalOptions()
    // usage errors throw instead of exiting, so they can exit with code 2
    .exitOverride()

  const named = groupOf(process.argv)
  const wanted = GROUPS.filter(([name]) => name === named)
  for (const [name, loader] of wanted.length ? wanted : GROUPS) await (await load(name, loader))(program)

  // A stray argument (`cluster up /some/dir` instead of `--cluster /some/dir`)
  // is a usage error, not something to ignore silently.
  const strict = (c: Command): void => {
    c.allowExcessArguments(false)
    for (const sub of c.commands) strict(sub)
  }
  strict(program)

  exitQuietlyOnClosedPipes()
  await program.parseAsync(process.argv)
}

// Errors print `strata: CODE: message` and exit 1; usage errors exit 2.
main().catch((e: unknown) => {
  const { message, exitCode } = describeFailure(e)
  if (message) process.stderr.write(`${message}\n`)
  process.exit(exitCode)
})
