// The `strata` command line. Each command group lives in its own module;
// this file only wires them into commander.
import { Command } from 'commander'
import { RELEASE_VERSION } from '../fs/common/config.js'
import { registerDaemonCommand } from './commands/daemon.js'

const program = new Command()
program
  .name('strata')
  .description('Strata: sandbox infrastructure on a 3FS-compatible distributed filesystem')
  .version(RELEASE_VERSION)
  .showHelpAfterError()

registerDaemonCommand(program)

program.parseAsync(process.argv).catch((e: unknown) => {
  const err = e as { code?: string; message?: string }
  process.stderr.write(`strata: ${err.message ?? String(e)}\n`)
  process.exit(typeof err.code === 'string' && err.code.startsWith('commander.') ? 2 : 1)
})
