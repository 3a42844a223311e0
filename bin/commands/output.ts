// Printing and argument helpers shared by the `cluster` and `admin` command
// groups: text tables or JSON, TTY progress lines, usage errors (exit 2).

import fs from 'node:fs'
import { InvalidArgumentError } from 'commander'
import { StrataError, fromSystemError, isStrataError } from '../../fs/common/errors.js'
import { formatListing, formatTable, parseSize, parseUint, type ActionResult, type Listing, type ProgressSink } from '../../fs/admin/index.js'
import { parseImageRef } from '../../sandbox/image/types.js'
import { parseAddress } from '../../fs/rpc/index.js'
import { parseChunkIdString } from '../../fs/common/chunk-id.js'
import { printable } from '../../fs/common/printable.js'
import { MAX_CHUNK_SIZE, MIN_CHUNK_SIZE } from '../../fs/common/layout.js'

/** A mistake in how the command was invoked: printed as `strata: usage: …`, exit code 2. */
export class UsageError extends Error {
  readonly exitCode = 2
  constructor(message: string) {
    super(message)
    this.name = 'UsageError'
  }
}

/** How a shell reports a process that SIGPIPE ended: 128 + 13. */
export const EXIT_SIGPIPE = 141

/**
 * A reader that goes away early (`strata … | head`) ends the command as
 * SIGPIPE ends a Unix tool: quietly, exit 141. Without this the next write to
 * the closed pipe surfaces as an unhandled EPIPE 'error' with a stack trace.
 */
export function exitQuietlyOnClosedPipes(): void {
  process.stdout.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code === 'EPIPE') process.exit(EXIT_SIGPIPE)
    throw e
  })
  process.stderr.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e
  })
}

export function out(text: string): void {
  process.stdout.write(text.endsWith('\n') || text === '' ? text : text + '\n')
}

export function printJson(v: unknown): void {
  out(JSON.stringify(v, null, 2))
}

export function printListing(l: Listing<unknown>, json: boolean | undefined): void {
  if (json) printJson(l.records)
  else out(formatListing(l))
}

export function printAction(r: ActionResult<unknown>, json: boolean | undefined): void {
  if (json) printJson(r.result)
  else out(formatTable(r.lines))
}

// --- argument parsers for commander (failures are usage errors)

export function intArg(what: string, opts: { min?: number; max?: number; hex?: boolean } = {}): (v: string) => number {
  return (v: string) => {
    try {
      return parseUint(v, what, opts)
    } catch (e) {
      throw new InvalidArgumentError((e as StrataError).reason ?? String(e))
    }
  }
}

/**
 * A parser for an option that takes one value, beside options that repeat
 * (compose's --base and --workspace next to --toolkit): given twice it is a
 * usage error instead of the last one silently winning, which drops a part
 * the user meant to stack.
 */
export function onceArg(flag: string, hint: string): (v: string, prev: string | undefined) => string {
  return (v: string, prev: string | undefined) => {
    if (prev !== undefined) throw new InvalidArgumentError(`${flag} is given once (${JSON.stringify(prev)}, then ${JSON.stringify(v)}); ${hint}`)
    return v
  }
}

/** A parser that keeps the string, refusing what `check` throws on as a usage error. */
export function checkedArg(check: (v: string) => unknown): (v: string) => string {
  return (v: string) => {
    try {
      check(v)
    } catch (e) {
      throw new InvalidArgumentError((e as StrataError).reason ?? String(e))
    }
    return v
  }
}

/** `--mgmtd-address` / `--meta-address`: a comma-separated host:port list, checked here. */
export const addressListArg = checkedArg((v) => {
  let n = 0
  for (const a of v.split(',')) {
    if (a.trim() === '') continue
    parseAddress(a.trim())
    n++
  }
  // an empty list would silently fall back to the cluster directory
  if (n === 0) throw new StrataError('INVALID_ARGUMENT', `an address list needs at least one host:port, got ${JSON.stringify(v)}`)
})

/** `--cluster` / `--dir`: a directory; '' would silently fall back to $STRATA_CLUSTER or ~/.strata/cluster. */
export function dirArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v === '') throw new InvalidArgumentError(`${what} is empty (a cluster directory; leave the option out to use $STRATA_CLUSTER, then ~/.strata/cluster)`)
    if (v.includes('\0')) throw new InvalidArgumentError(`${what} contains a NUL byte`)
    return v
  }
}

/** A local file (or directory) to read or write: '' would otherwise read as "none given" and the command would fall back silently. */
export function fileArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v === '') throw new InvalidArgumentError(`${what} is empty (a file path)`)
    if (v.includes('\0')) throw new InvalidArgumentError(`${what} contains a NUL byte`)
    return v
  }
}

/** A required name (a process of a cluster…): not empty. */
export function nameArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v.trim() === '') throw new InvalidArgumentError(`${what} is empty`)
    return v
  }
}

/** `--chunk`: a chunk id in either of its written forms. */
export const chunkIdArg = checkedArg(parseChunkIdString)

/**
 * A comma-separated list (repeatable). With `strict` an empty element (`1,,2`,
 * `1,`, ``) is a usage error instead of being dropped: ids an operator typed
 * are never skipped silently.
 */
export function intListArg(what: string, opts: { min?: number; max?: number; strict?: boolean } = {}): (v: string, prev: number[] | undefined) => number[] {
  const one = intArg(what, opts)
  return (v, prev) => {
    const parts = v.split(',')
    if (opts.strict && parts.some((x) => x.trim() === '')) {
      throw new InvalidArgumentError(`${what} wants a comma-separated list of integers in [${opts.min ?? 0}, ${opts.max ?? Number.MAX_SAFE_INTEGER}] with no empty element, got ${JSON.stringify(v)}`)
    }
    return [...(prev ?? []), ...parts.filter(Boolean).map(one)]
  }
}

/** 3FS ids that are u32: chain ids, chain table ids and versions, node ids, uids and gids, flag words. */
export const U32_MAX = 0xffff_ffff

/**
 * The largest delay Node's timers hold: 2^31-1 ms. A longer one is cut to
 * 1 ms with a TimeoutOverflowWarning, so a deadline beyond it would fire at once.
 */
export const MAX_TIMER_MS = 0x7fff_ffff
/** MAX_TIMER_MS in whole seconds (2147483 s, about 24.8 days). */
export const MAX_TIMER_SECONDS = Math.floor(MAX_TIMER_MS / 1000)

/**
 * A whole number of seconds that becomes a timer (`--timeout`, `--grace`, …):
 * beyond MAX_TIMER_SECONDS is a usage error that says why.
 */
export function timerSecondsArg(what: string, opts: { min?: number } = {}): (v: string) => number {
  const min = opts.min ?? 1
  return (v: string) => {
    const s = v.trim()
    if (!/^\d+$/.test(s)) throw new InvalidArgumentError(`${what} must be a whole number of seconds in [${min}, ${MAX_TIMER_SECONDS}], got ${JSON.stringify(v)}`)
    const n = Number(s)
    if (n < min || n > MAX_TIMER_SECONDS) {
      throw new InvalidArgumentError(`${what} must be in [${min}, ${MAX_TIMER_SECONDS}] seconds (timers hold at most 2^31-1 ms), got ${s}`)
    }
    return n
  }
}

/**
 * A new layout's chunk size: a size (64K, 1M, 65536) from 4K to 2G, the range
 * fs/common/layout.ts sets (at most 2^31, the largest power of two a layout's
 * u32 holds; at least 4K, see MIN_CHUNK_SIZE there). The power-of-two rule is
 * the operation's (INVALID_ARGUMENT, exit 1).
 */
export function chunkSizeArg(what: string): (v: string) => number {
  const size = sizeArg(what)
  return (v: string) => {
    const n = size(v)
    if (n < MIN_CHUNK_SIZE || n > MAX_CHUNK_SIZE) {
      throw new InvalidArgumentError(`${what} must be in [${MIN_CHUNK_SIZE}, ${MAX_CHUNK_SIZE}] (4K to 2G: chunk sizes are u32 powers of two, at least 4K), got ${v}`)
    }
    return n
  }
}

/** `--chunk-size 64K,1M` (repeatable): an empty element (`1M,,2M`, ``) is a usage error, not dropped (`` sent no chunk size at all). */
export function chunkSizeListArg(what: string): (v: string, prev: number[] | undefined) => number[] {
  const one = chunkSizeArg(what)
  return (v, prev) => {
    const parts = v.split(',')
    if (parts.some((x) => x.trim() === '')) throw new InvalidArgumentError(`${what} wants comma-separated chunk sizes (64K, 1M …) with no empty element, got ${JSON.stringify(v)}`)
    return [...(prev ?? []), ...parts.map(one)]
  }
}

/**
 * `--chain-list 1,2,3`: chain ids (u32, from 1), or with a chain table its
 * 1-based indexes; an empty list or element is a usage error.
 */
export function chainListArg(what: string): (v: string) => number[] {
  return (v: string) => {
    const parts = v.split(',')
    return parts.map((x, i) => {
      const s = x.trim()
      const n = Number(s)
      if (!/^\d+$/.test(s) || n < 1 || n > U32_MAX) {
        const el = s === '' ? `element ${i + 1} is empty` : `element ${i + 1} is ${JSON.stringify(x)}`
        throw new InvalidArgumentError(`${what} wants comma-separated chain ids (or chain table indexes), each an integer in [1, ${U32_MAX}]; in ${JSON.stringify(v)} ${el}`)
      }
      return n
    })
  }
}

/** A path argument of a DFS command: not empty, no NUL byte (neither names anything). */
export function dfsPathArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v === '') throw new InvalidArgumentError(`${what} is empty (a DFS path such as /dir/file)`)
    if (v.includes('\0')) throw new InvalidArgumentError(`${what} contains a NUL byte`)
    return v
  }
}

/** The variadic form of dfsPathArg (`rm`, `mkdir`): commander hands each value with those before it. */
export function dfsPathsArg(what: string): (v: string, prev: string[] | undefined) => string[] {
  const one = dfsPathArg(what)
  return (v, prev) => [...(prev ?? []), one(v)]
}

/**
 * A local directory argument (a mount point): an empty one would be resolved
 * against the working directory, so `fs mount "$UNSET"` would mount over it.
 */
export function localDirArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v === '') throw new InvalidArgumentError(`${what} is empty (a local directory such as /mnt/strata)`)
    if (v.includes('\0')) throw new InvalidArgumentError(`${what} contains a NUL byte`)
    return v
  }
}

/** A client id as clients make them (MetaClient, FUSE daemon: randomUUID), as 3FS's ClientId is a Uuid. */
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
export function uuidArg(what: string): (v: string) => string {
  return (v: string) => {
    if (!UUID_RE.test(v.trim())) throw new InvalidArgumentError(`${what} must be a client id, a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e, got ${JSON.stringify(v)}`)
    return v.trim().toLowerCase()
  }
}

export function sizeArg(what: string): (v: string) => number {
  return (v: string) => {
    try {
      return parseSize(v, what)
    } catch (e) {
      throw new InvalidArgumentError((e as StrataError).reason ?? String(e))
    }
  }
}

export function sizeListArg(what: string): (v: string, prev: number[] | undefined) => number[] {
  const one = sizeArg(what)
  return (v, prev) => [...(prev ?? []), ...v.split(',').filter(Boolean).map(one)]
}

export function choiceArg<T extends string>(what: string, choices: readonly T[]): (v: string) => T {
  return (v: string) => {
    const hit = choices.find((c) => c.toLowerCase() === v.toLowerCase())
    if (!hit) throw new InvalidArgumentError(`${what} must be one of ${choices.join(', ')}`)
    return hit
  }
}

/** Reads an input file; a missing file is the operator's mistake, not the cluster's. */
/** Writes a local output file; a failure names what and where, as readInput does (ENOENT → NOT_FOUND, EISDIR → INVALID_ARGUMENT, …). */
export function writeOutput(file: string, text: string, what: string): void {
  try {
    fs.writeFileSync(file, text)
  } catch (e) {
    const code = fromSystemError(e)?.code ?? 'IO_ERROR'
    throw new StrataError(code, `cannot write ${what} to ${file}: ${(e as Error).message}`, { cause: e })
  }
}

export function readInput(file: string, what: string): string {
  try {
    return fs.readFileSync(file, 'utf8')
  } catch (e) {
    // the catalogue's mapping of local errnos (ENOENT → NOT_FOUND, EISDIR → INVALID_ARGUMENT, …)
    const code = fromSystemError(e)?.code ?? 'IO_ERROR'
    throw new StrataError(code, `cannot read ${what} ${file}: ${(e as Error).message}`, { cause: e })
  }
}

/**
 * Progress of a long command on stderr. On a TTY one line per stage is
 * rewritten as the stage advances; otherwise a single line is printed when a
 * stage ends (nothing with quiet).
 */
export function progressReporter(opts: { quiet?: boolean; stream?: NodeJS.WriteStream } = {}): ProgressSink {
  const stream = opts.stream ?? process.stderr
  const tty = !!stream.isTTY
  const started = new Map<string, number>()
  const secs = (stage: string) => `${((Date.now() - (started.get(stage) ?? Date.now())) / 1000).toFixed(1)}s`
  return (e) => {
    if (opts.quiet) return
    if (e.state === 'start') started.set(e.stage, Date.now())
    if (tty) {
      const line =
        e.state === 'start'
          ? `… ${e.stage}`
          : e.state === 'update'
            ? `… ${e.stage}: ${e.detail ?? ''} (${secs(e.stage)})`
            : e.state === 'done'
              ? `✓ ${e.stage}${e.detail ? `: ${e.detail}` : ''} (${secs(e.stage)})\n`
              : `✗ ${e.stage}${e.detail ? `: ${e.detail}` : ''} (${secs(e.stage)})\n`
      stream.write(`\r\x1b[K${line}`)
    } else if (e.state === 'done' || e.state === 'fail') {
      stream.write(`${e.state === 'done' ? 'ok' : 'FAILED'}: ${e.stage}${e.detail ? `: ${e.detail}` : ''} (${secs(e.stage)})\n`)
    }
  }
}

/** Exit code and message for anything a command threw. */
export function describeFailure(e: unknown): { message: string; exitCode: number } {
  const d = failureOf(e)
  // messages quote names and paths; a log tail they carry keeps its lines
  return { message: printable(d.message, '\n'), exitCode: d.exitCode }
}

function failureOf(e: unknown): { message: string; exitCode: number } {
  if (e instanceof UsageError) return { message: `strata: usage: ${e.message}`, exitCode: 2 }
  if (isStrataError(e)) return { message: `strata: ${e.message}`, exitCode: 1 }
  const err = e as { code?: string; message?: string; exitCode?: number }
  if (typeof err?.code === 'string' && err.code.startsWith('commander.')) {
    // commander already printed its message; help and version are not errors
    const ok = err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || (err.code === 'commander.help' && err.exitCode === 0)
    return { message: '', exitCode: ok ? 0 : 2 }
  }
  // a local file operation that failed (a bad path given on the command line) gets its catalogue code
  const sys = fromSystemError(e)
  if (sys) return { message: `strata: ${sys.message}`, exitCode: 1 }
  return { message: `strata: ${err?.message ?? String(e)}`, exitCode: 1 }
}

/** `IMAGE=COUNT` of --warm-pool, collected into a warmPool list. */
export function warmPoolArg(v: string, prev: Array<{ image: string; count: number }> | undefined): Array<{ image: string; count: number }> {
  const eq = v.lastIndexOf('=')
  const count = Number(v.slice(eq + 1))
  if (eq <= 0 || !/^\d+$/.test(v.slice(eq + 1)) || count < 1 || count > 1024) {
    throw new InvalidArgumentError(`--warm-pool wants IMAGE=COUNT with COUNT in [1, 1024], not ${JSON.stringify(v)}`)
  }
  const image = v.slice(0, eq)
  try {
    // the image store's own parser: a reference it would refuse is a mistake now, not a refill retried forever
    parseImageRef(image)
  } catch (e) {
    throw new InvalidArgumentError(`--warm-pool ${JSON.stringify(v)}: ${(e as StrataError).reason ?? String(e)}`)
  }
  return [...(prev ?? []), { image, count }]
}
