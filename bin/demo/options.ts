// Command line of `npm run demo` (node dist/bin/demo.js).

import { Command, InvalidArgumentError } from 'commander'

export interface DemoOptions {
  /** cluster directory; null: a fresh one under os.tmpdir() */
  dir: string | null
  /** leave the directory (configs, logs, data) behind */
  keep: boolean
  /** bulk data written through the client, in MiB (1 MiB chunks) */
  sizeMiB: number
  /** machine-readable summary on stdout; progress on stderr */
  json: boolean
}

export const DEFAULT_SIZE_MIB = 64
export const MAX_SIZE_MIB = 2048

function sizeArg(v: string): number {
  if (!/^\d+$/.test(v.trim())) throw new InvalidArgumentError(`expected a whole number of MiB, got "${v}"`)
  const n = Number(v)
  if (n < 1 || n > MAX_SIZE_MIB) throw new InvalidArgumentError(`must be between 1 and ${MAX_SIZE_MIB} MiB, got ${n}`)
  return n
}

export function parseOptions(argv: string[]): DemoOptions {
  const program = new Command()
    .name('npm run demo --')
    .description(
      'Strata end to end on this machine: brings up a local cluster (mgmtd + 3 storage\n' +
        'nodes, 2 chains x 3 replicas), writes and verifies data through the storage\n' +
        'client, shows that replicas agree, SIGKILLs a storage node under a running\n' +
        'writer, restarts it, watches it resync, then tears everything down and prints\n' +
        'a summary of every measured number.',
    )
    .option('--dir <dir>', 'cluster directory (must be empty or not exist; default: a new temp dir)')
    .option('--keep', 'keep the cluster directory (configs, logs, data) at the end')
    .option('--size <MiB>', 'bulk data to write, in MiB (1 MiB chunks)', sizeArg, DEFAULT_SIZE_MIB)
    .option('--json', 'print the summary as JSON on stdout (progress goes to stderr)')
    .helpOption('-h, --help', 'show this help')
    .showHelpAfterError()
    .allowExcessArguments(false)
    .addHelpText(
      'after',
      `
Examples:
  npm run demo
  npm run demo -- --size 256 --keep
  node dist/bin/demo.js --size 8 --json

Exit status: 0 when every check passed, 1 when a check or step failed,
2 for a usage error, 130 when interrupted (the cluster is torn down first).`,
    )
    .exitOverride((err) => {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.help' || err.code === 'commander.version') process.exit(0)
      process.exit(2)
    })
  program.parse(argv, { from: 'user' })
  const o = program.opts<{ dir?: string; keep?: boolean; size: number; json?: boolean }>()
  return { dir: o.dir ?? null, keep: !!o.keep, sizeMiB: o.size, json: !!o.json }
}
