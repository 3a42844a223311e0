// The `strata` command line. Each command group lives in its own module;
// this file only wires them into commander.
import { Command } from 'commander'
import { RELEASE_VERSION } from '../fs/common/config.js'
import { addDaemonRole, registerDaemonCommand } from './commands/daemon.js'
import { registerClusterCommands } from './commands/cluster.js'
import { registerAdminCommands } from './commands/admin.js'
import { registerFsCommands } from './commands/fs.js'
import { registerFsMountCommands } from './commands/fs-mount.js'
import { registerImageCommands } from './commands/image.js'
import { registerSandboxCommands, registerServeCommand } from './commands/sandbox.js'
import { registerClusterRole } from '../fs/admin/index.js'
import { sandboxClusterRole } from '../sandbox/daemon/index.js'
import { describeFailure, exitQuietlyOnClosedPipes } from './commands/output.js'

const program = new Command()
program
  .name('strata')
  .description('Strata: sandbox infrastructure on a 3FS-compatible distributed filesystem')
  .version(RELEASE_VERSION)
  .showHelpAfterError()
  // program options only before the command, so subcommand options such as
  // `admin list-chains -v/--version` are not taken for the program's --version
  .enablePositionalOptions()
  // usage errors throw instead of exiting, so they can exit with code 2
  .exitOverride()

// `cluster up` starts a sandbox node daemon after the FUSE mount
registerClusterRole(sandboxClusterRole)
addDaemonRole('sandbox', async () => {
  const { startSandboxDaemon } = await import('../sandbox/daemon/index.js')
  return (c, log) => startSandboxDaemon(c, log)
})
registerDaemonCommand(program)
registerClusterCommands(program)
registerAdminCommands(program)
registerFsMountCommands(registerFsCommands(program))
registerImageCommands(program)
registerSandboxCommands(program)
registerServeCommand(program)

// A stray argument (`cluster up /some/dir` instead of `--cluster /some/dir`)
// is a usage error, not something to ignore silently.
const strict = (c: Command): void => {
  c.allowExcessArguments(false)
  for (const sub of c.commands) strict(sub)
}
strict(program)

exitQuietlyOnClosedPipes()

// Errors print `strata: CODE: message` and exit 1; usage errors exit 2.
program.parseAsync(process.argv).catch((e: unknown) => {
  const { message, exitCode } = describeFailure(e)
  if (message) process.stderr.write(`${message}\n`)
  process.exit(exitCode)
})
