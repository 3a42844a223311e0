// `strata sandbox create|exec|ls|inspect|kill|rm|cp` (clients of a node
// daemon, through the SDK) and `strata serve` (a node daemon in the
// foreground).
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { InvalidArgumentError, type Command } from 'commander'
import { formatTable, readClusterFile, resolveClusterDir } from '../../fs/admin/index.js'
import { runDaemon } from '../../fs/common/daemon.js'
import { StrataError, fromSystemError, isStrataError, systemErrorWords } from '../../fs/common/errors.js'
import { createLogger } from '../../fs/common/log.js'
import { MAX_EXEC_TIMEOUT_MS, parseListen, probeListen, sandboxStateDir, startSandboxDaemon, TOKEN_FILE, validateCreate, validateExec, validateListFilter, type CreateSandboxRequest, type ExecRequest, type ExitEvent, type SandboxInfo } from '../../sandbox/daemon/index.js'
import { extractTarSafely, writeSparse } from '../../sandbox/sdk/extract.js'
import { FIRST_READ, openLocalFile, packDirectory } from '../../sandbox/sdk/pack.js'
import { Strata, type SandboxProcess } from '../../sandbox/sdk/index.js'
import { localDestination } from './local-files.js'
import { UsageError, dirArg, choiceArg as commanderChoiceArg, describeFailure, intArg as commanderIntArg, out, printJson, warmPoolArg as commanderWarmPoolArg } from './output.js'

// The shared parsers throw commander's InvalidArgumentError, which commander
// prints as `error: option '…' argument '…' is invalid.` and the whole help.
// Here every bad option is a UsageError instead: `strata: usage: …`, exit 2.
function usage<A extends unknown[], R>(parse: (...a: A) => R): (...a: A) => R {
  return (...a: A) => {
    try {
      return parse(...a)
    } catch (e) {
      if (e instanceof InvalidArgumentError) throw new UsageError(e.message)
      throw e
    }
  }
}
const intArg = (what: string, o: { min?: number; max?: number } = {}) => usage(commanderIntArg(what, o))
const choiceArg = <T extends string>(what: string, choices: readonly T[]) => usage(commanderChoiceArg(what, choices))
const warmPoolArg = usage(commanderWarmPoolArg)

/** commander's own errors (a missing argument, an unknown option) in the same form, without the help. */
function usageOutput(c: Command): Command {
  return c.showHelpAfterError(false).configureOutput({ outputError: (str, write) => write(str.replace(/^error: /, 'strata: usage: ')) })
}

/** `--listen HOST:PORT`, checked before anything is created (the default state dir is named after the port). */
function listenArg(v: string): string {
  try {
    parseListen(v)
  } catch (e) {
    throw new UsageError(`--listen: ${(e as StrataError).reason}`)
  }
  return v
}

/**
 * A local file operation that failed, in words and with its path
 * (`cannot read /x: no such file or directory`) rather than Node's
 * `ENOENT: no such file or directory, stat '/x'`; the code is the
 * catalogue's for the errno.
 */
function localError(e: unknown, what: string): unknown {
  const sys = fromSystemError(e)
  if (!sys) return e
  return new StrataError(sys.code, `${what}: ${systemErrorWords(e)}`, { cause: e })
}

function local<T>(what: string, fn: () => T): T {
  try {
    return fn()
  } catch (e) {
    throw localError(e, what)
  }
}

interface ClientOpts {
  cluster?: string
  endpoint?: string
  token?: string
}

/** Where the endpoint came from, for messages: the option, the variable or the cluster directory. */
function endpointSource(g: ClientOpts): string {
  return g.endpoint !== undefined ? '--endpoint' : process.env.STRATA_ENDPOINT !== undefined ? '$STRATA_ENDPOINT' : 'the cluster\'s cluster.json'
}

function client(cmd: Command): Strata {
  const g = cmd.optsWithGlobals() as ClientOpts
  try {
    // given at all, even empty: --token '' is refused, not read as "no token" (which fell back to DIR/sandbox.token)
    return new Strata({ ...(g.cluster ? { cluster: g.cluster } : {}), ...(g.endpoint !== undefined ? { endpoint: g.endpoint } : {}), ...(g.token !== undefined ? { token: g.token } : {}) })
  } catch (e) {
    // the constructor refuses only malformed options (--endpoint notaurl); a missing cluster or token keeps its code.
    // The message names where the bad value came from.
    if (isStrataError(e, 'INVALID_ARGUMENT')) {
      const reason = (e as StrataError).reason
      const from = /\btoken\b/i.test(reason) ? '--token' : endpointSource(g)
      throw new UsageError(`${from}: ${reason}`)
    }
    throw e
  }
}

async function withClient<T>(cmd: Command, fn: (s: Strata) => Promise<T>): Promise<T> {
  const s = client(cmd)
  try {
    return await fn(s)
  } catch (e) {
    // the SDK says "check the endpoint"; here it is named as the user gave it
    if (isStrataError(e, ['NOT_A_STRATA_DAEMON', 'RPC_CONNECT_FAILED'])) {
      throw new StrataError(e.code, e.reason.replace('check the endpoint)', `check ${endpointSource(cmd.optsWithGlobals() as ClientOpts)})`), { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
    }
    throw e
  } finally {
    s.close()
  }
}

function kvArg(what: string) {
  return (v: string, prev: Record<string, string> = {}): Record<string, string> => {
    const eq = v.indexOf('=')
    if (eq <= 0) throw new UsageError(`${what} ${JSON.stringify(v)} must be KEY=VALUE`)
    return { ...prev, [v.slice(0, eq)]: v.slice(eq + 1) }
  }
}

function mountArg(v: string, prev: Array<{ source: string; target: string }> = []): Array<{ source: string; target: string }> {
  const i = v.indexOf(':')
  if (i <= 0 || i === v.length - 1) throw new UsageError(`--mount ${JSON.stringify(v)} must be DFS_PATH:TARGET`)
  return [...prev, { source: v.slice(0, i), target: v.slice(i + 1) }]
}

function collect(v: string, prev: string[] = []): string[] {
  return [...prev, v]
}

function ago(iso: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000))
  return s < 120 ? `${s}s` : s < 7200 ? `${Math.round(s / 60)}m` : `${Math.round(s / 3600)}h`
}

function stateText(i: SandboxInfo): string {
  return i.state === 'stopped' && i.stop ? `stopped (${i.stop.reason})` : i.state
}

function sandboxTable(list: SandboxInfo[]): string {
  return formatTable([
    ['ID', 'State', 'Image', 'Created', 'Labels'],
    ...list.map((i) => [i.id, stateText(i), i.image?.ref ?? i.composedOf?.map((c) => c.ref).join('+') ?? i.layers.map((l) => l.kind).join('+'), ago(i.createdAt), Object.entries(i.labels).map(([k, v]) => `${k}=${v}`).join(',') || '-']),
  ])
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8, SIGKILL: 9, SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15 }

/** `ID:/path` → in the sandbox; anything else is local. */
function splitCpArg(s: string): { id: string; path: string } | null {
  const m = /^(sb-[a-z0-9]{12}):(\/.*)$/.exec(s)
  return m ? { id: m[1]!, path: m[2]! } : null
}

const TYPE_NAMES: Record<string, string> = { char: 'a character device', block: 'a block device', fifo: 'a fifo', socket: 'a socket', symlink: 'a dangling symlink', unknown: 'a special file' }

/**
 * A DST ending in `/` names a directory, as for cp and docker cp: a file is
 * copied into it only if it exists, never made a file of that name (nor,
 * in a sandbox, made a directory of it before the write fails).
 */
function notADirectory(dst: string, exists: boolean): void {
  if (!/\/\.?$/.test(dst)) return
  if (exists) throw new StrataError('INVALID_ARGUMENT', `${dst}: not a directory`)
  throw new StrataError('NOT_FOUND', `${dst}: no such directory (a DST ending in / must be an existing directory)`)
}

/** Copies SRC to DST (one side ID:/path); says where it went, and whether that was this process's stdout (nothing more is printed there). */
async function copy(s: Strata, src: string, dst: string): Promise<{ target: string; toStdout?: boolean }> {
  const from = splitCpArg(src)
  const to = splitCpArg(dst)
  if (!!from === !!to) throw new UsageError('exactly one of SRC and DST must be ID:/path (a sandbox path)')
  if (from) {
    const sb = await s.sandboxes.get(from.id)
    // a symlink SRC is followed (the link's target is copied), as for an upload
    const st = await sb.files.stat(from.path, { followSymlinks: true })
    const localDst = path.resolve(dst)
    const localIsDir = fs.existsSync(localDst) && local(`cannot read ${localDst}`, () => fs.statSync(localDst)).isDirectory()
    const target = localIsDir ? path.join(localDst, path.posix.basename(from.path)) : localDst
    if (st.type === 'file') {
      if (!localIsDir) notADirectory(dst, fs.existsSync(localDst))
      // as large as it is now: a file that keeps growing (a log) cannot make the copy endless; but at
      // least its first 64 KiB, as a directory download reads them, so a /proc or /sys file (stat
      // size 0 or 4096) comes with what it holds
      const length = Math.max(st.size, FIRST_READ)
      // as cp does: a symlink DST is written through (the file it names, dangling or not, not the
      // link replaced), and a device, fifo or socket DST is written into, never replaced by a file
      // (cp ID:/f /dev/null as root would otherwise put a regular file at /dev/null); /dev/stdout is
      // this process's standard output (a rename "over" it would replace the machine's symlink)
      const where = localDestination(target)
      if (where.kind === 'stdout') {
        const src = await sb.files.readStream(from.path, { length })
        for await (const c of src as AsyncIterable<Buffer>) await new Promise<void>((res, rej) => process.stdout.write(c, (e) => (e ? rej(e) : res())))
        return { target, toStdout: true }
      }
      if (where.kind === 'in-place') {
        await pipeline(await sb.files.readStream(from.path, { length }), fs.createWriteStream(where.path)).catch((e: unknown) => { throw localError(e, `cannot write ${target}`) })
        return { target }
      }
      const dest = where.final
      const tmp = `${dest}.strata-cp-${process.pid}`
      try {
        // runs of zeros are left as holes: a sparse file stays sparse here (the transfer carries the zeros)
        const fh = await fsp.open(tmp, 'wx', 0o600).catch((e: unknown) => { throw localError(e, `cannot write ${target}`) })
        try {
          await writeSparse(fh, await sb.files.readStream(from.path, { length }))
        } catch (e) {
          throw localError(e, `cannot write ${target}`)
        } finally {
          await fh.close()
        }
        // its permission bits, as docker cp keeps them, without setuid, setgid and sticky
        local(`cannot write ${target}`, () => {
          fs.chmodSync(tmp, st.mode & 0o777)
          fs.renameSync(tmp, dest)
        })
      } finally {
        fs.rmSync(tmp, { force: true })
      }
      return { target }
    }
    if (st.type !== 'dir') {
      throw new StrataError('INVALID_ARGUMENT', `${src} is ${TYPE_NAMES[st.type] ?? 'a special file'}: only regular files and directories are copied (symlinks to them are followed)`)
    }
    // a directory: its contents land in DST (created), or in DST/<name> when DST exists
    local(`cannot create the directory ${target}`, () => fs.mkdirSync(target, { recursive: true }))
    // what cannot be read in the sandbox is left out and named, the rest is copied, and the
    // exit code is 1 at the end, as tar does (docker cp would say nothing)
    const onWarning = (w: StrataError) => {
      process.stderr.write(`strata: ${w.code}: ${from.id}:${w.reason}\n`)
      process.exitCode = 1
    }
    await extractTarSafely(await sb.files.downloadTar(from.path, { onWarning }), target, {
      onSkip: (name, why) => process.stderr.write(`strata: skipped ${path.posix.join(from.path, name)}: ${why}\n`),
    })
    return { target }
  }
  // the local side first: a missing SRC fails before anything is asked of the daemon
  const localSrc = path.resolve(src)
  const lst = local(`cannot read ${localSrc}`, () => fs.statSync(localSrc))
  const sb = await s.sandboxes.get(to!.id)
  let remoteType: string | undefined
  try {
    remoteType = (await sb.files.stat(to!.path, { followSymlinks: true })).type
  } catch (e) {
    if (!isStrataError(e, 'NOT_FOUND')) throw e
  }
  const remoteIsDir = remoteType === 'dir'
  const target = remoteIsDir ? path.posix.join(to!.path, path.basename(localSrc)) : to!.path
  if (lst.isFile()) {
    if (!remoteIsDir) notADirectory(dst, remoteType !== undefined)
    // opened before anything is sent: a file this user cannot read fails as a local error
    // (PERMISSION_DENIED, in words), not as the upload's 'reading the request body failed';
    // and sent as large as it is now, so a growing file cannot make the copy endless
    const f = await openLocalFile(localSrc)
    try {
      await sb.files.write(target, f.stream, { mode: lst.mode & 0o7777, mkdirs: true })
    } finally {
      await f.close()
    }
    return { target: `${sb.id}:${target}` }
  }
  if (!lst.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${src} is neither a file nor a directory`)
  // as for a download: what cannot be read here is left out and named, the rest is copied, and
  // the exit code is 1 at the end
  const tar = new PassThrough()
  // the directory itself is read before anything is sent (an unreadable SRC fails the copy);
  // after that, whichever side fails first says what went wrong, and the other fails because of it
  let first: { e: unknown } | undefined
  const packed = packDirectory(localSrc, tar, {
    onWarning: (w) => {
      process.stderr.write(`strata: ${w.code}: ${w.reason}\n`)
      process.exitCode = 1
    },
    onSkip: (p, why) => process.stderr.write(`strata: skipped ${p}: ${why}\n`),
  }).catch((e: unknown) => {
    first ??= { e }
    tar.destroy(e as Error)
  })
  const uploaded = sb.files.uploadTar(target, tar).catch((e: unknown) => {
    first ??= { e }
    tar.destroy()
  })
  await Promise.all([packed, uploaded])
  if (first) throw first.e
  return { target: `${sb.id}:${target}` }
}

/** How long a command whose output nobody reads any more gets to die of SIGPIPE before SIGKILL. */
const SIGPIPE_GRACE_MS = 2000
/** What a command killed by SIGPIPE exits with in a shell, and what exec exits with once its output is cut. */
const EXIT_SIGPIPE = 128 + 13

/**
 * Copies a process's stdout and stderr to ours. When a reader of ours goes
 * away (\`| head -1\`: EPIPE), the command is sent SIGPIPE, as it would get
 * locally, then SIGKILL if it lives on; what it still writes is discarded.
 * Resolves with whether an output of ours broke.
 */
function pumpOutput(p: SandboxProcess): { broken: () => boolean; done: Promise<void> } {
  let broken = false
  const onBroken = () => {
    if (broken) return
    broken = true
    p.stdout.resume()
    p.stderr.resume()
    const kill = (sig: NodeJS.Signals) => p.kill(sig).catch(() => undefined)
    void kill('SIGPIPE')
    const t = setTimeout(() => void kill('SIGKILL'), SIGPIPE_GRACE_MS)
    t.unref()
    void p.wait().finally(() => clearTimeout(t)).catch(() => undefined)
  }
  const pump = (from: NodeJS.ReadableStream, to: NodeJS.WriteStream) => new Promise<void>((resolve) => {
    // stays attached: a write still queued when the command exits may fail after 'end'
    to.on('error', onBroken)
    from.on('data', (c: Buffer) => {
      if (broken) return
      if (!to.write(c, (e) => { if (e) onBroken() })) {
        from.pause()
        to.once('drain', () => from.resume())
      }
    })
    from.once('end', resolve)
  })
  const done = Promise.all([pump(p.stdout, process.stdout), pump(p.stderr, process.stderr)]).then(() => undefined)
  return { broken: () => broken, done }
}

/** The exit status a shell would give the command (see the exec help). */
function execExitCode(exit: ExitEvent): number {
  return exit.timedOut ? 124 : exit.exitCode ?? 128 + (SIGNALS[exit.signal ?? ''] ?? 0)
}

/**
 * Runs `fn` for every id, in order, whatever the others did: a failure is
 * printed (`strata: CODE: message (id)`) and makes the exit code 1, and the
 * results of the ids that worked are returned for printing.
 */
async function eachId<T>(ids: string[], fn: (id: string) => Promise<T>): Promise<T[]> {
  const done: T[] = []
  for (const id of ids) {
    try {
      done.push(await fn(id))
    } catch (e) {
      const { message } = describeFailure(e)
      process.stderr.write(`${message}${message.includes(id) ? '' : ` (${id})`}\n`)
      process.exitCode = 1
    }
  }
  return done
}

/** Usage errors (exit 2) for what the daemon's own checks refuse in a spec, before anything is sent. */
function checkSpecLocally(spec: CreateSandboxRequest): void {
  try {
    validateCreate(spec)
  } catch (e) {
    if (isStrataError(e, ['INVALID_ARGUMENT', 'IMAGE_INVALID_REFERENCE'])) throw new UsageError(optionName((e as StrataError).reason))
    throw e
  }
}

/** The same for exec's options (--cwd rel, --env, --user), with the daemon's exec checks. */
function checkExecLocally(req: ExecRequest): void {
  try {
    validateExec(req, false)
  } catch (e) {
    if (isStrataError(e, 'INVALID_ARGUMENT')) throw new UsageError(optionName((e as StrataError).reason))
    throw e
  }
}

/** The validator's field names, as the CLI's options. */
function optionName(msg: string): string {
  return msg
    .replace(/^mounts\[\d+\]\.(source|target)/, (_m, f: string) => `--mount ${f === 'source' ? 'DFS_PATH' : 'TARGET'}`)
    .replace(/^(hostname|workdir|user|image|base|workspace|idempotencyKey|cwd)\b/, (m) => `--${m.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase())}`)
    .replace(/^toolkits\[\d+\]/, '--toolkit').replace(/^env\b/, '--env').replace(/^labels\b/, '--label')
}

export function registerSandboxCommands(program: Command): void {
  const g = usageOutput(program.command('sandbox'))
    .description('sandboxes on a node daemon: create, exec, ls, inspect, kill, rm, cp')
    .enablePositionalOptions(false)
    .option('--cluster <dir>', 'cluster directory to find the daemon and token in (default: $STRATA_CLUSTER, then ~/.strata/cluster)', dirArg('--cluster'))
    .option('--endpoint <url>', 'daemon URL, http://host:port (default: $STRATA_ENDPOINT, then the cluster\'s)')
    .option('--token <token>', 'bearer token (default: $STRATA_TOKEN, then DIR/sandbox.token)')
    .addHelpText('after', `
Errors print "strata: CODE: message" and exit 1 (usage errors exit 2).
An endpoint where another server answers is NOT_A_STRATA_DAEMON.
The HTTP API behind these commands is documented in docs/sandbox-api.md.`)

  g.command('create')
    .description('create a sandbox (or --count of them) and print its id')
    .option('--image <ref>', 'image in the store: NAME[:TAG] or NAME@sha256:…')
    .option('--base <ref>', 'compose layers instead: the base image …')
    .option('--workspace <ref>', '… then a workspace image …')
    .option('--toolkit <ref>', '… then toolkit images (repeatable)', collect)
    .option('--mount <src:target>', 'read-only DFS dataset, DFS_PATH:PATH_IN_SANDBOX (repeatable)', mountArg)
    .option('--cpu <n>', 'CPUs, 0.01 to 1024 (fractional allowed)', (v: string) => {
      const n = Number(v)
      if (!Number.isFinite(n) || n < 0.01 || n > 1024) throw new UsageError('--cpu must be a number in [0.01, 1024]')
      return n
    })
    .option('--memory <mib>', 'memory limit in MiB (8 to 16777216)', intArg('--memory', { min: 8, max: 16 * 1024 * 1024 }))
    .option('--pids <n>', 'process limit (8 to 4194304)', intArg('--pids', { min: 8, max: 4 * 1024 * 1024 }))
    .option('--idle-ttl <sec>', 'reclaim after this many seconds without API activity (up to a year)', intArg('--idle-ttl', { min: 1, max: 365 * 86400 }))
    .option('--max-lifetime <sec>', 'reclaim this many seconds after creation (up to a year)', intArg('--max-lifetime', { min: 1, max: 365 * 86400 }))
    .option('--env <k=v>', 'environment variable (repeatable)', kvArg('--env'))
    .option('--label <k=v>', 'label (repeatable)', kvArg('--label'))
    .option('--workdir <path>', 'default working directory of commands')
    .option('--user <user>', 'default user of commands')
    .option('--network <mode>', 'none (loopback only, the default) or host', choiceArg('--network', ['none', 'host'] as const))
    .option('--hostname <name>', 'host name inside the sandbox (default: the id)')
    .option('--idempotency-key <key>', 'a retried create with the same key returns the same sandbox')
    .option('--count <n>', 'create this many, 1 to 1024 (partial success is reported per item)', intArg('--count', { min: 1, max: 1024 }))
    .option('--json', 'print the sandbox (or the per-item results) as JSON')
    .addHelpText('after', `
Examples:
  strata sandbox create --image py:3.11 --mount /datasets/mnist:/data --memory 512 --json
  strata sandbox create --base debian:bookworm --toolkit tools:v1 --label job=j1 --count 8`)
    .action(async (o, cmd: Command) => {
      const spec: CreateSandboxRequest = {
        ...(o.image ? { image: o.image } : {}),
        ...(o.base ? { base: o.base } : {}),
        ...(o.workspace ? { workspace: o.workspace } : {}),
        ...(o.toolkit ? { toolkits: o.toolkit } : {}),
        ...(o.mount ? { mounts: o.mount } : {}),
        ...(o.cpu !== undefined || o.memory !== undefined || o.pids !== undefined
          ? { resources: { ...(o.cpu !== undefined ? { cpu: o.cpu } : {}), ...(o.memory !== undefined ? { memoryMiB: o.memory } : {}), ...(o.pids !== undefined ? { pids: o.pids } : {}) } }
          : {}),
        ...(o.idleTtl !== undefined || o.maxLifetime !== undefined
          ? { lifetime: { ...(o.idleTtl !== undefined ? { idleTtlSec: o.idleTtl } : {}), ...(o.maxLifetime !== undefined ? { maxLifetimeSec: o.maxLifetime } : {}) } }
          : {}),
        ...(o.env ? { env: o.env } : {}),
        ...(o.label ? { labels: o.label } : {}),
        // given at all, even empty: the local check refuses '' (it was dropped, and a retried create
        // with --idempotency-key '' made a second sandbox)
        ...(o.workdir !== undefined ? { workdir: o.workdir } : {}),
        ...(o.user !== undefined ? { user: o.user } : {}),
        ...(o.network ? { network: o.network } : {}),
        ...(o.hostname !== undefined ? { hostname: o.hostname } : {}),
        ...(o.idempotencyKey !== undefined ? { idempotencyKey: o.idempotencyKey } : {}),
      }
      if (!spec.image && !spec.base) throw new UsageError('give --image or --base')
      if (spec.image && spec.base) throw new UsageError('give --image or --base, not both')
      if (spec.image && (spec.workspace || spec.toolkits)) throw new UsageError('--workspace and --toolkit go with --base, not --image')
      checkSpecLocally(spec)
      await withClient(cmd, async (s) => {
        if (o.count !== undefined) {
          const r = await s.sandboxes.createMany(spec, { count: o.count })
          if (o.json) printJson(r.map((x) => (x.ok ? { ok: true, sandbox: x.sandbox.info } : { ok: false, error: x.error.toWire() })))
          // ids on stdout, one per created sandbox; each failure on stderr as every error is printed
          else for (const x of r) x.ok ? out(x.sandbox.id) : process.stderr.write(`strata: ${x.error.code}: ${x.error.reason}\n`)
          if (r.some((x) => !x.ok)) process.exitCode = 1
          return
        }
        const sb = await s.sandboxes.create(spec)
        if (o.json) printJson(sb.info)
        else out(sb.id)
      })
    })

  g.command('exec')
    .description('run a command in a sandbox, streaming its output; exits with its exit code')
    .argument('<id>', 'sandbox id')
    .argument('<cmd...>', 'the command and its arguments (after --); one argument with spaces runs through /bin/sh -c')
    .option('-i, --interactive', 'forward this process\'s stdin to the command (otherwise stdin is empty)')
    .option('--cwd <path>', 'working directory')
    .option('--env <k=v>', 'environment variable (repeatable)', kvArg('--env'))
    .option('--user <user>', 'run as this user')
    .option('--timeout <sec>', `kill the command after this many seconds, at most ${MAX_EXEC_TIMEOUT_MS / 1000} (exit code 124)`, intArg('--timeout', { min: 1, max: MAX_EXEC_TIMEOUT_MS / 1000 }))
    .addHelpText('after', `
Exit code: the command's; 128+N when killed by signal N; 124 on --timeout;
127 when the command (or --cwd, or --user) is not found, 126 when it may not be run;
141 when this command's stdout or stderr is closed by its reader (| head): the
command then gets SIGPIPE (SIGKILL 2 s later if it lives on).
A command the OOM killer killed (137) is also reported on stderr:
"strata: killed: out of memory (limit N MiB)".
Example: strata sandbox exec sb-0123456789ab -- python3 -c 'print(1)'`)
    .action(async (id: string, argv: string[], o, cmd: Command) => {
      const command = argv.length === 1 && /\s/.test(argv[0]!) ? argv[0]! : argv
      const opts = {
        ...(o.cwd !== undefined ? { cwd: o.cwd as string } : {}), ...(o.env ? { env: o.env as Record<string, string> } : {}), ...(o.user !== undefined ? { user: o.user as string } : {}),
        ...(o.timeout ? { timeoutMs: (o.timeout as number) * 1000 } : {}),
      }
      checkExecLocally({ cmd: command, ...opts })
      await withClient(cmd, async (s) => {
        const sb = await s.sandboxes.get(id)
        let p
        try {
          p = await sb.spawn(command, opts)
        } catch (e) {
          // as a shell does: 127 for a command that is not there, 126 for one that may not run
          if (isStrataError(e, ['NOT_FOUND', 'SANDBOX_PERMISSION_DENIED'])) {
            process.stderr.write(`strata: ${(e as Error).message}\n`)
            process.exitCode = isStrataError(e, 'NOT_FOUND') ? 127 : 126
            return
          }
          throw e
        }
        if (o.interactive) void pipeline(process.stdin, p.stdin).catch(() => undefined)
        else p.stdin.end()
        const out = pumpOutput(p)
        let exit: ExitEvent
        try {
          exit = await p.wait()
        } finally {
          await out.done
          if (o.interactive) process.stdin.destroy()
        }
        if (out.broken()) {
          process.exitCode = EXIT_SIGPIPE
          return
        }
        if (exit.oomKilled) {
          const limit = sb.info.resources.memoryMiB
          process.stderr.write(`strata: killed: out of memory${limit !== undefined ? ` (limit ${limit} MiB)` : ''}\n`)
        }
        process.exitCode = execExitCode(exit)
      })
    })

  g.command('ls')
    .description('list sandboxes on the node')
    .option('--label <k=v>', 'only sandboxes with this label (repeatable: all must match)', kvArg('--label'))
    .option('--state <state>', 'creating, running or stopped', choiceArg('--state', ['creating', 'running', 'stopped'] as const))
    .option('--json', 'print as JSON')
    .action(async (o, cmd: Command) => {
      const filter = { ...(o.label ? { labels: o.label } : {}), ...(o.state ? { state: o.state } : {}) }
      try {
        validateListFilter(filter)
      } catch (e) {
        // what the daemon would refuse is a usage error before anything is sent, as for create
        if (isStrataError(e, 'INVALID_ARGUMENT')) throw new UsageError(optionName((e as StrataError).reason))
        throw e
      }
      await withClient(cmd, async (s) => {
        const list = (await s.sandboxes.list(filter)).map((x) => x.info)
        if (o.json) printJson(list)
        else out(list.length ? sandboxTable(list) : 'no sandboxes')
      })
    })

  g.command('inspect')
    .description('everything the node knows about a sandbox (JSON)')
    .argument('<id>', 'sandbox id')
    .option('--json', 'print as JSON (the default; accepted for symmetry)')
    .action(async (id: string, _o, cmd: Command) => {
      await withClient(cmd, async (s) => printJson(await (await s.sandboxes.get(id)).refresh()))
    })

  g.command('kill')
    .description('stop sandboxes and free their resources; their records stay (state stopped) until rm')
    .argument('<ids...>', 'sandbox ids')
    .option('--json', 'print the stopped sandboxes as JSON')
    .action(async (ids: string[], o, cmd: Command) => {
      await withClient(cmd, async (s) => {
        // like rm: every id is tried, each failure reported, and what was stopped still printed
        const done = await eachId(ids, async (id) => (await s.sandboxes.get(id)).kill())
        if (o.json) printJson(done)
        else for (const i of done) out(`${i.id} ${stateText(i)}`)
      })
    })

  g.command('rm')
    .description('stop and remove sandboxes (processes, mounts, cgroups, directories)')
    .argument('<ids...>', 'sandbox ids')
    .option('--json', 'print the removed ids as JSON')
    .action(async (ids: string[], o, cmd: Command) => {
      await withClient(cmd, async (s) => {
        const removed = await eachId(ids, async (id) => {
          await (await s.sandboxes.get(id)).delete()
          return id
        })
        if (o.json) printJson({ removed })
        else for (const id of removed) out(id)
      })
    })

  g.command('cp')
    .description('copy a file or directory between this machine and a sandbox (one side is ID:/path)')
    .argument('<src>', 'local path or ID:/path')
    .argument('<dst>', 'local path or ID:/path')
    .option('--json', 'print the destination as JSON')
    .addHelpText('after', `
Like docker cp: when DST is an existing directory the source goes inside it
under its own name, else it becomes DST; a DST ending in / must be an
existing directory when SRC is a file. Directories travel as tar streams.
Regular files and directories only (a symlink SRC is followed; other special
files are refused). Downloads from a sandbox never create device nodes, fifos
or sockets (each is skipped with a note on stderr), drop setuid, setgid and
sticky bits, keep the other permission bits, and belong to you.
As with tar, what a directory download cannot read in the sandbox (an
unreadable file or directory, much of /proc) is left out and named on stderr
("strata: CODE: ID:/path: …; skipped"), the rest is copied, and the exit code
is 1; bytes that fail mid-file are zeros (named too). An upload does the same
with what you cannot read here ("strata: PERMISSION_DENIED: /path: cannot
open: permission denied; skipped"; a directory is sent empty); sockets are
skipped with a note. A SRC that cannot be read itself fails the copy.
Sparse files stay sparse on the receiving side, both ways (runs of zeros over
whole 4 KiB blocks become holes); the transfer still carries the zeros.
Examples:
  strata sandbox cp ./app sb-0123456789ab:/work
  strata sandbox cp sb-0123456789ab:/work/out.json .`)
    .action(async (src: string, dst: string, o, cmd: Command) => {
      await withClient(cmd, async (s) => {
        const { target, toStdout } = await copy(s, src, dst)
        if (toStdout) return
        if (o.json) printJson({ copied: target })
        else out(target)
      })
    })
}

export function registerServeCommand(program: Command): void {
  usageOutput(program.command('serve'))
    .description('run a sandbox node daemon in the foreground (cluster up starts one; see docs/sandbox-api.md)')
    .option('--cluster <dir>', 'cluster whose DFS and FUSE mount (DIR/mnt) it uses (default: $STRATA_CLUSTER, then ~/.strata/cluster)', dirArg('--cluster'))
    .option('--listen <host:port>', 'address of the HTTP API (port 0: a free port, named in the log and the state dir)', listenArg, '127.0.0.1:7410')
    .option('--state-dir <dir>', 'registry, layer mounts and sandboxes (default: DIR/data/serve-<port>, or /run/strata/serve-<port>-<hash> when that is too long for socket paths)')
    .option('--token-file <file>', 'bearer token file, created (mode 0600) if missing (default: DIR/sandbox.token)')
    .option('--fuse-mnt <dir>', 'the node\'s FUSE mount of the DFS (default: DIR/mnt)')
    .option('--node-id <name>', 'node name: image-store lease holder and cgroup parent /strata/<name>', `node-serve`)
    .option('--runtime <bin>', 'OCI runtime binary', 'runc')
    .option('--max-sandboxes <n>', 'refuse creates beyond this many live sandboxes (QUOTA_EXCEEDED)', intArg('--max-sandboxes', { min: 1 }))
    .option('--reserve-memory <mib>', 'refuse creates when MemAvailable would drop below this (CAPACITY_UNAVAILABLE)', intArg('--reserve-memory', { min: 0 }))
    .option('--reserve-disk <mib>', 'refuse creates when the state filesystem would have less free', intArg('--reserve-disk', { min: 0 }))
    .option('--reserve-pids <n>', 'refuse creates when fewer threads than this would be left', intArg('--reserve-pids', { min: 0 }))
    .option('--reap-interval <ms>', 'how often dead, idle and expired sandboxes are looked for', intArg('--reap-interval', { min: 50 }), 1000)
    .option('--warm-pool <image=count>', 'keep COUNT sandboxes of IMAGE started ahead of the creates that take them (repeatable; see below)', warmPoolArg)
    .addHelpText('after', `
SIGTERM stops the API and leaves sandboxes running; the next daemon on the
same --state-dir re-adopts them.

Warm pool: with --warm-pool py:3.11=8 the daemon keeps 8 sandboxes of py:3.11
started, with the node's default resources and no network. A create of that
image that asks for nothing else a started sandbox cannot get (no mounts, env,
workdir, user or hostname; the same resources and network) takes one of them
and the pool refills in the background; its result has "pooled": true. Other
creates start a sandbox as usual. GET /v1/node shows each pool. Pools with
other resources or network: the daemon config's warmPool
(docs/sandbox-api.md).`)
    .action(async (o) => {
      const dir = resolveClusterDir(o.cluster)
      const c = readClusterFile(dir)
      // a busy or foreign address fails now, before the state dir is made (and as listen() would say it).
      // Port 0 becomes the port the kernel picked, so that the state dir (named after the port) is this
      // daemon's own and not shared by every daemon started with :0
      const port = await probeListen(o.listen)
      const listen = parseListen(o.listen).port === 0 ? o.listen.replace(/:0+$/, `:${port}`) : o.listen
      const dataDir = path.join(dir, 'data', `serve-${port}`)
      const log = createLogger('sandbox')
      await runDaemon(log, () => startSandboxDaemon({
        nodeId: o.nodeId,
        listen,
        mgmtdAddresses: c.mgmtdAddresses,
        fuseMnt: o.fuseMnt ?? path.join(dir, 'mnt'),
        stateDir: o.stateDir ?? sandboxStateDir(dir, dataDir),
        tokenFile: o.tokenFile ?? path.join(dir, TOKEN_FILE),
        runtime: o.runtime,
        reapIntervalMs: o.reapInterval,
        ...(o.warmPool ? { warmPool: o.warmPool } : {}),
        limits: {
          ...(o.maxSandboxes !== undefined ? { maxSandboxes: o.maxSandboxes } : {}),
          ...(o.reserveMemory !== undefined ? { reserveMemoryMiB: o.reserveMemory } : {}),
          ...(o.reserveDisk !== undefined ? { reserveDiskMiB: o.reserveDisk } : {}),
          ...(o.reservePids !== undefined ? { reservePids: o.reservePids } : {}),
        },
      }, log), { closeTimeoutMs: 30_000, throwStartError: true })
    })
}

