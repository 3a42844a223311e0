// Command line of `npm run demo` (node dist/bin/demo.js).

import { Command, InvalidArgumentError } from 'commander'

export interface DemoOptions {
  /** cluster directory; null: a fresh one under os.tmpdir() */
  dir: string | null
  /** leave the directory (configs, logs, data) behind */
  keep: boolean
  /** sandboxes in the batch */
  sandboxes: number
  /** size of the dataset published into the DFS, in MiB */
  sizeMiB: number
  /** machine-readable summary on stdout; progress on stderr */
  json: boolean
}

export const DEFAULT_SANDBOXES = 8
export const MAX_SANDBOXES = 64
export const DEFAULT_SIZE_MIB = 4
export const MAX_SIZE_MIB = 256

function intArg(name: string, min: number, max: number, unit = ''): (v: string) => number {
  return (v: string) => {
    if (!/^\d+$/.test(v.trim())) throw new InvalidArgumentError(`${name}: expected a whole number${unit}, got "${v}"`)
    const n = Number(v)
    if (n < min || n > max) throw new InvalidArgumentError(`${name} must be between ${min} and ${max}${unit}, got ${n}`)
    return n
  }
}

export function parseOptions(argv: string[]): DemoOptions {
  const program = new Command()
    .name('npm run demo --')
    .description(
      'Strata\'s main job on this machine: brings up the embedded single-node cluster\n' +
        '(mgmtd, storage, meta, FUSE mount, sandbox daemon), builds a Debian bookworm\n' +
        'base image with python3 from Debian packages (debootstrap minbase, cached in\n' +
        '/var/cache/strata/rootfs after the first run) and a toolkit layer, imports both\n' +
        'into the DFS image store, publishes a dataset into the DFS, creates a batch of\n' +
        'container sandboxes with the dataset mounted read-only at /data, runs a Python\n' +
        'program in each that checksums the dataset (checked against the host\'s numbers)\n' +
        'and tries to write to it, prints per-stage timings and the bytes the sandboxes\n' +
        'fetched from the DFS, then deletes everything.',
    )
    .option('--dir <dir>', 'cluster directory (must be empty or not exist; default: a new temp dir)')
    .option('--keep', 'keep the cluster directory (configs, logs, data) at the end')
    .option('--sandboxes <n>', `sandboxes in the batch (1-${MAX_SANDBOXES})`, intArg('--sandboxes', 1, MAX_SANDBOXES), DEFAULT_SANDBOXES)
    .option('--size <MiB>', `size of the dataset published into the DFS (1-${MAX_SIZE_MIB} MiB)`, intArg('--size', 1, MAX_SIZE_MIB, ' MiB'), DEFAULT_SIZE_MIB)
    .option('--json', 'print the summary as JSON on stdout (progress goes to stderr)')
    .helpOption('-h, --help', 'show this help')
    .showHelpAfterError()
    .allowExcessArguments(false)
    .addHelpText(
      'after',
      `
Needs root, /dev/fuse, runc, mkfs.erofs and (for the first build of the base
image) debootstrap with access to a Debian mirror ($STRATA_DEBIAN_MIRROR,
default http://deb.debian.org/debian); scripts/setup.sh installs the tools.

Examples:
  npm run demo
  npm run demo -- --sandboxes 16 --size 32 --keep
  node dist/bin/demo.js --sandboxes 2 --json

Exit status: 0 when every check passed, 1 when a check or step failed,
2 for a usage error or a missing prerequisite, 130 when interrupted (everything
is torn down first).`,
    )
    .exitOverride((err) => {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.help' || err.code === 'commander.version') process.exit(0)
      process.exit(2)
    })
  program.parse(argv, { from: 'user' })
  const o = program.opts<{ dir?: string; keep?: boolean; sandboxes: number; size: number; json?: boolean }>()
  return { dir: o.dir ?? null, keep: !!o.keep, sandboxes: o.sandboxes, sizeMiB: o.size, json: !!o.json }
}
