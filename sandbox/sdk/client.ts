// The Strata SDK: sandboxes on a node daemon, over its HTTP API.
//
//   const strata = new Strata()                       // endpoint and token from the local cluster
//   const sb = await strata.sandboxes.create({ image: 'py:3.11', mounts: [...] })
//   const r = await sb.exec('python3 -c "print(1)"')  // { exitCode, stdout, stderr, truncated, durationMs, … }
//   await sb.delete()
//
// Exit codes are data; only infrastructure failures throw, as StrataError
// with a stable `code` (SANDBOX_GONE, QUOTA_EXCEEDED, CAPACITY_UNAVAILABLE,
// TIMEOUT, INVALID_ARGUMENT, …). Arguments are checked here first so bad
// input fails before a request is sent; the daemon checks everything again.
import fs from 'node:fs'
import path from 'node:path'
import { Readable, Writable } from 'node:stream'
import { StrataError, systemErrorWords } from '../../fs/common/errors.js'
import { readClusterFile, resolveClusterDir } from '../../fs/admin/index.js'
import type { FileEntry } from '../backends/agent/index.js'
import { MAX_JSON_BODY, TOKEN_FILE, SANDBOX_ROLE, WARNINGS_TRAILER, validateCreate, validateExec, validateListFilter } from '../daemon/index.js'
import type { CreateSandboxRequest, ExitEvent, ListFilter, NodeInfo, OutputEvent, SandboxInfo } from '../daemon/index.js'
import { MAX_TIMER_MS, checkCmd, checkData, intIn, isAbortSignal, isBool, isFunction, isString, isUser, options, passThrough, type Check } from './args.js'
import { DEFAULT_READ_MAX_BYTES, Transport, parseEndpoint, connectionErrors, ndjson, readAll } from './http.js'

export interface StrataOptions {
  /** http://host:port of a node daemon. Default: $STRATA_ENDPOINT, else the local cluster's. */
  endpoint?: string
  /** Default: $STRATA_TOKEN, else the local cluster's sandbox.token. */
  token?: string
  /** Cluster directory to read defaults from. Default: $STRATA_CLUSTER, else ~/.strata/cluster. */
  cluster?: string
  /** Deadline of non-streaming calls (exec runs as long as its own timeoutMs). Default 120000 ms. */
  timeoutMs?: number
}

const STRATA_OPTIONS: Record<string, Check> = { endpoint: isString, token: isString, cluster: isString, timeoutMs: intIn(1, MAX_TIMER_MS) }
const MAX_FILE_OFFSET = Number.MAX_SAFE_INTEGER
/** exec and spawn options the daemon checks (validateExec) */
const RUN_OPTIONS: Record<string, Check> = { timeoutMs: passThrough, cwd: passThrough, env: passThrough, user: passThrough, maxOutputBytes: passThrough, signal: isAbortSignal }
const EXEC_OPTIONS: Record<string, Check> = { ...RUN_OPTIONS, stdin: passThrough, onStdout: isFunction, onStderr: isFunction }
const READ_OPTIONS: Record<string, Check> = { offset: intIn(0, MAX_FILE_OFFSET), length: intIn(0, MAX_FILE_OFFSET), user: isUser, signal: isAbortSignal }

export interface ExecOptions {
  timeoutMs?: number
  cwd?: string
  env?: Record<string, string>
  user?: string
  /** Sent to the command's stdin, then EOF (at most a few MiB; stream larger input with spawn). */
  stdin?: string | Uint8Array
  /** Per stream; beyond it the head and tail are kept and `truncated` is set. Default 1 MiB. */
  maxOutputBytes?: number
  signal?: AbortSignal
  /** Called with each chunk as it arrives (the result still holds the capped output). */
  onStdout?: (chunk: Buffer) => void
  onStderr?: (chunk: Buffer) => void
}

export interface ReadOptions {
  /** Start here (bytes). Default 0. */
  offset?: number
  /** At most this many bytes. Default: to the end of the file. */
  length?: number
  user?: string
  signal?: AbortSignal
}

export interface ExecResult extends ExitEvent {
  /** stdout decoded as UTF-8 */
  stdout: string
  stderr: string
  stdoutBytes: Buffer
  stderrBytes: Buffer
  /** either stream went over maxOutputBytes; droppedStdout/droppedStderr say by how much */
  truncated: boolean
}

export type SpawnOptions = Omit<ExecOptions, 'stdin' | 'onStdout' | 'onStderr'>

export interface SandboxProcess {
  readonly pid: number
  /**
   * Consume both (or resume() the one you do not need): they share one connection.
   * They end when the command exits, or early when the connection or the sandbox goes; wait() says which.
   */
  readonly stdout: Readable
  readonly stderr: Readable
  /** write() sends to the command; end() closes its stdin */
  readonly stdin: Writable
  wait(): Promise<ExitEvent>
  kill(signal?: NodeJS.Signals | number): Promise<void>
}

export interface SandboxFileEntry extends Omit<FileEntry, 'mtimeNs'> {
  mtimeNs: bigint
}

export type CreateManyItem = { ok: true; sandbox: Sandbox } | { ok: false; error: StrataError }

/** Finds endpoint and token the way `new Strata()` does (options, environment, cluster directory). */
export function resolveConnection(o: StrataOptions = {}): { endpoint: string; token: string; fromCluster: boolean } {
  options(o, 'new Strata', STRATA_OPTIONS)
  let endpoint = o.endpoint ?? process.env.STRATA_ENDPOINT
  const fromCluster = !endpoint
  // a bad endpoint is the error to report, before a token is looked for in a cluster that may not exist
  if (endpoint) parseEndpoint(endpoint)
  let token = o.token ?? process.env.STRATA_TOKEN
  if (!endpoint || !token) {
    const dir = resolveClusterDir(o.cluster)
    if (!endpoint) {
      const c = readClusterFile(dir)
      const p = c.processes.find((x) => x.role === SANDBOX_ROLE)
      if (!p) throw new StrataError('NOT_FOUND', `the cluster at ${dir} runs no sandbox daemon (started with --no-sandbox or --no-mount?)`)
      endpoint = `http://${p.address}`
    }
    if (!token) {
      try {
        token = fs.readFileSync(path.join(dir, TOKEN_FILE), 'utf8').trim()
      } catch (e) {
        throw new StrataError('UNAUTHENTICATED', `no token given and none readable at ${path.join(dir, TOKEN_FILE)}: ${systemErrorWords(e)}`, { cause: e })
      }
    }
  }
  return { endpoint, token, fromCluster }
}

export class Strata {
  readonly sandboxes: Sandboxes
  readonly endpoint: string
  /** @internal */
  readonly transport: Transport

  constructor(o: StrataOptions = {}) {
    const { endpoint, token, fromCluster } = resolveConnection(o)
    this.endpoint = endpoint
    // an endpoint given outright may name no cluster at all: cluster advice would mislead
    const unreachableHint = fromCluster ? 'is the cluster up? strata cluster status' : 'is a sandbox daemon listening there? check the endpoint'
    this.transport = new Transport({ endpoint, token, unreachableHint, ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}) })
    this.sandboxes = new Sandboxes(this.transport)
  }

  /** The node: its sandbox counts, capacity and mounted layers. */
  node(): Promise<NodeInfo> {
    return this.transport.json<NodeInfo>({ method: 'GET', path: '/v1/node' })
  }

  /** Closes idle connections (the process can then exit). */
  close(): void {
    this.transport.close()
  }
}

export class Sandboxes {
  readonly #t: Transport

  constructor(t: Transport) {
    this.#t = t
  }

  /** Creates a sandbox; with an idempotencyKey a retried call returns the first call's sandbox. */
  async create(spec: CreateSandboxRequest & { signal?: AbortSignal }): Promise<Sandbox> {
    if (spec === null || typeof spec !== 'object' || Array.isArray(spec)) throw new StrataError('INVALID_ARGUMENT', 'create: the spec must be an object ({ image, … })')
    const { signal, ...req } = spec
    if (signal !== undefined) isAbortSignal(signal, 'create: signal')
    validateCreate(req)
    const info = await this.#t.json<SandboxInfo>({ method: 'POST', path: '/v1/sandboxes', json: req, ...(signal ? { signal } : {}) })
    return new Sandbox(this.#t, info)
  }

  /** `count` sandboxes of one spec in one request; each item succeeds or fails on its own. */
  async createMany(spec: CreateSandboxRequest, opts: { count: number; signal?: AbortSignal }): Promise<CreateManyItem[]> {
    validateCreate(spec)
    options(opts, 'createMany', { count: passThrough, signal: isAbortSignal })
    if (!Number.isSafeInteger(opts?.count) || opts.count < 1 || opts.count > 1024) throw new StrataError('INVALID_ARGUMENT', 'createMany: count must be an integer in [1, 1024]')
    const r = await this.#t.json<{ results: Array<{ ok: true; sandbox: SandboxInfo } | { ok: false; error: { code: string; message: string } }> }>({
      method: 'POST', path: '/v1/sandboxes/batch', json: { spec, count: opts.count }, timeoutMs: 600_000, ...(opts.signal ? { signal: opts.signal } : {}),
    })
    return r.results.map((x) => (x.ok ? { ok: true as const, sandbox: new Sandbox(this.#t, x.sandbox) } : { ok: false as const, error: StrataError.fromWire(x.error) }))
  }

  async list(filter: ListFilter = {}): Promise<Sandbox[]> {
    const f = validateListFilter(filter)
    const label = Object.entries(f.labels ?? {}).map(([k, v]) => `${k}=${v}`)
    const r = await this.#t.json<{ sandboxes: SandboxInfo[] }>({ method: 'GET', path: '/v1/sandboxes', query: { label, state: f.state } })
    return r.sandboxes.map((i) => new Sandbox(this.#t, i))
  }

  /** SANDBOX_NOT_FOUND if the node has no such sandbox. */
  async get(id: string): Promise<Sandbox> {
    return new Sandbox(this.#t, await this.#t.json<SandboxInfo>({ method: 'GET', path: `/v1/sandboxes/${sid(id)}` }))
  }
}

function sid(id: string): string {
  if (typeof id !== 'string') throw new StrataError('INVALID_ARGUMENT', `the sandbox id must be a string like sb-xxxxxxxxxxxx, not ${id === null ? 'null' : typeof id}`)
  if (!/^sb-[a-z0-9]{12}$/.test(id)) throw new StrataError('SANDBOX_NOT_FOUND', `no sandbox ${JSON.stringify(id)} (ids look like sb-xxxxxxxxxxxx)`)
  return id
}

function checkPath(p: unknown, what = 'path'): string {
  if (typeof p !== 'string' || !p.startsWith('/') || p.includes('\0')) throw new StrataError('INVALID_ARGUMENT', `${what} must be an absolute path inside the sandbox`)
  return p
}

function execBody(cmd: string | readonly string[], o: ExecOptions | SpawnOptions, withStdin: boolean): Record<string, unknown> {
  const what = withStdin ? 'exec' : 'spawn'
  checkCmd(cmd, `${what}: cmd`)
  if (!withStdin && o !== null && typeof o === 'object' && 'stdin' in o) {
    throw new StrataError('INVALID_ARGUMENT', 'spawn: stdin is not an option of spawn; write to the process\'s stdin (p.stdin.write, p.stdin.end) instead')
  }
  options(o, what, withStdin ? EXEC_OPTIONS : RUN_OPTIONS)
  const body: Record<string, unknown> = { cmd: typeof cmd === 'string' ? cmd : [...cmd] }
  if (o.env !== undefined) body.env = o.env
  if (o.cwd !== undefined) body.cwd = o.cwd
  if (o.user !== undefined) body.user = o.user
  if (o.timeoutMs !== undefined) body.timeoutMs = o.timeoutMs
  if (o.maxOutputBytes !== undefined) body.maxOutputBytes = o.maxOutputBytes
  const stdin = (o as ExecOptions).stdin
  if (withStdin && stdin !== undefined) {
    if (typeof stdin !== 'string' && !(stdin instanceof Uint8Array)) throw new StrataError('INVALID_ARGUMENT', 'stdin must be a string or bytes')
    body.stdin = Buffer.from(stdin).toString('base64')
  }
  validateExec(body, withStdin)
  // the daemon refuses a larger body with a bare 413; here the message can say which call and what to do
  const size = Buffer.byteLength(JSON.stringify(body))
  if (size > MAX_JSON_BODY) {
    throw new StrataError('INVALID_ARGUMENT', `${what}: the request is ${size} bytes, more than the daemon's ${MAX_JSON_BODY} (stdin travels base64-encoded in it: at most about 3 MiB); ${withStdin ? 'write larger input to the stdin of a spawned process (sb.spawn) instead' : 'pass less in cmd and env'}`, { detail: { bytes: size, max: MAX_JSON_BODY } })
  }
  return body
}

export class Sandbox {
  readonly id: string
  /** as of the last call that returned it (create, get, list, refresh, kill) */
  info: SandboxInfo
  readonly #t: Transport

  constructor(t: Transport, info: SandboxInfo) {
    this.#t = t
    this.id = info.id
    this.info = info
  }

  #p(rest = ''): string {
    return `/v1/sandboxes/${this.id}${rest}`
  }

  /** Fresh state from the node (including OOM kills so far). */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.#t.json<SandboxInfo>({ method: 'GET', path: this.#p() })
    return this.info
  }

  /** Counts as activity for the idle TTL; returns the SandboxInfo (also in `info`). */
  async keepalive(): Promise<SandboxInfo> {
    this.info = await this.#t.json<SandboxInfo>({ method: 'POST', path: this.#p('/keepalive') })
    return this.info
  }

  /** Runs a command to completion. A non-zero exit is in the result, not thrown. */
  async exec(cmd: string | readonly string[], o: ExecOptions = {}): Promise<ExecResult> {
    const body = execBody(cmd, o, true)
    o ??= {}
    const res = await this.#t.request({ method: 'POST', path: this.#p('/exec'), json: body, stream: true, ...(o.signal ? { signal: o.signal } : {}) })
    const out: Buffer[] = []
    const err: Buffer[] = []
    for await (const ev of ndjson<OutputEvent>(res, o.signal)) {
      if (ev.type === 'stdout' || ev.type === 'stderr') {
        const b = Buffer.from(ev.data, 'base64')
        if (ev.type === 'stdout') { out.push(b); o.onStdout?.(b) } else { err.push(b); o.onStderr?.(b) }
      } else if (ev.type === 'exit') {
        const { type: _t, ...exit } = ev
        const stdoutBytes = Buffer.concat(out)
        const stderrBytes = Buffer.concat(err)
        return {
          ...exit, stdoutBytes, stderrBytes, stdout: stdoutBytes.toString('utf8'), stderr: stderrBytes.toString('utf8'),
          truncated: exit.droppedStdout > 0 || exit.droppedStderr > 0,
        }
      } else if (ev.type === 'error') {
        throw StrataError.fromWire(ev)
      }
    }
    throw new StrataError('RPC_CONNECTION_CLOSED', `exec in ${this.id}: the output stream ended before the exit status`)
  }

  /** Starts a command and streams its output; stdin stays open until stdin.end(). */
  async spawn(cmd: string | readonly string[], o: SpawnOptions = {}): Promise<SandboxProcess> {
    const body = execBody(cmd, o, false)
    o ??= {}
    const { pid } = await this.#t.json<{ pid: number }>({ method: 'POST', path: this.#p('/processes'), json: body, ...(o.signal ? { signal: o.signal } : {}) })
    const t = this.#t
    const base = this.#p(`/processes/${pid}`)
    let res: import('node:http').IncomingMessage | undefined
    // one connection carries both streams: a full buffer on either pauses it, a read on either resumes it
    const stdout = new Readable({ read: () => { res?.resume() } })
    const stderr = new Readable({ read: () => { res?.resume() } })
    let exitResolve!: (e: ExitEvent) => void
    let exitReject!: (e: unknown) => void
    const exited = new Promise<ExitEvent>((a, b) => { exitResolve = a; exitReject = b })
    exited.catch(() => undefined)
    void (async () => {
      try {
        res = await t.request({ method: 'GET', path: `${base}/output`, stream: true, ...(o.signal ? { signal: o.signal } : {}) })
        for await (const ev of ndjson<OutputEvent>(res, o.signal)) {
          if (ev.type === 'stdout' || ev.type === 'stderr') {
            const r = ev.type === 'stdout' ? stdout : stderr
            // a stream its reader destroyed takes nothing more; the other one and the exit still come
            if (!r.destroyed && !r.push(Buffer.from(ev.data, 'base64'))) res.pause()
          } else if (ev.type === 'exit') {
            const { type: _t, ...exit } = ev
            stdout.push(null)
            stderr.push(null)
            exitResolve(exit)
            return
          } else if (ev.type === 'error') {
            throw StrataError.fromWire(ev)
          }
        }
        throw new StrataError('RPC_CONNECTION_CLOSED', `process ${pid} in ${this.id}: the output stream ended before the exit status`)
      } catch (e) {
        // the streams just end (an 'error' nobody listens for would crash the caller); wait() says why
        stdout.push(null)
        stderr.push(null)
        exitReject(e)
      }
    })()
    // each write is one PUT; writes are serialized by the Writable
    const stdin = new Writable({
      write: (chunk: Buffer, _e, cb) => { t.json({ method: 'PUT', path: `${base}/stdin`, body: chunk, stream: true }).then(() => cb(), cb) },
      final: (cb) => { t.json({ method: 'PUT', path: `${base}/stdin`, query: { eof: 1 }, body: Buffer.alloc(0) }).then(() => cb(), cb) },
    })
    stdin.on('error', () => undefined)
    return {
      pid,
      stdout,
      stderr,
      stdin,
      wait: () => exited,
      kill: async (signal: NodeJS.Signals | number = 'SIGTERM') => {
        if (typeof signal !== 'string' && !Number.isSafeInteger(signal)) throw new StrataError('INVALID_ARGUMENT', `kill: signal must be a name like 'SIGTERM' or a number, not ${typeof signal}`)
        await t.json({ method: 'POST', path: `${base}/signal`, json: { signal } })
      },
    }
  }

  readonly files = {
    /** The whole file (or a range) in memory; OUTPUT_LIMIT past `maxBytes` (default 256 MiB). */
    read: async (p: string, o: ReadOptions & { maxBytes?: number } = {}): Promise<Buffer> => {
      checkPath(p)
      options(o, 'files.read', { ...READ_OPTIONS, maxBytes: intIn(1, MAX_FILE_OFFSET) })
      const max = o.maxBytes ?? DEFAULT_READ_MAX_BYTES
      const res = await this.#t.request({ method: 'GET', path: this.#p('/files'), query: { path: p, offset: o.offset, length: o.length, user: o.user }, stream: true, ...(o.signal ? { signal: o.signal } : {}) })
      return readAll(res, o.signal, { maxBytes: max, what: `files.read ${p}` })
    },
    /** The file as a stream, with backpressure (no size limit: the caller reads as far as it wants). */
    readStream: async (p: string, o: ReadOptions = {}): Promise<Readable> => {
      checkPath(p)
      options(o, 'files.readStream', READ_OPTIONS)
      return this.#t.stream({ method: 'GET', path: this.#p('/files'), query: { path: p, offset: o.offset, length: o.length, user: o.user }, stream: true, ...(o.signal ? { signal: o.signal } : {}) })
    },
    write: async (p: string, data: string | Uint8Array | AsyncIterable<Uint8Array>, o: { mode?: number; mkdirs?: boolean; append?: boolean; exclusive?: boolean; user?: string; signal?: AbortSignal } = {}): Promise<{ bytes: number }> => {
      checkPath(p)
      checkData(data, 'files.write: data')
      options(o, 'files.write', { mode: intIn(0, 0o7777), mkdirs: isBool, append: isBool, exclusive: isBool, user: isUser, signal: isAbortSignal })
      return this.#t.json<{ bytes: number }>({
        method: 'PUT', path: this.#p('/files'), body: data, stream: true, ...(o.signal ? { signal: o.signal } : {}),
        query: { path: p, mode: o.mode?.toString(8), mkdirs: o.mkdirs ? 1 : undefined, append: o.append ? 1 : undefined, exclusive: o.exclusive ? 1 : undefined, user: o.user },
      })
    },
    list: async (p: string, o: { user?: string } = {}): Promise<SandboxFileEntry[]> => {
      checkPath(p)
      options(o, 'files.list', { user: isUser })
      const r = await this.#t.json<{ entries: Array<Record<string, unknown>> }>({ method: 'GET', path: this.#p('/files/list'), query: { path: p, user: o.user } })
      return r.entries.map(entryOf)
    },
    stat: async (p: string, o: { user?: string; followSymlinks?: boolean } = {}): Promise<SandboxFileEntry> => {
      checkPath(p)
      options(o, 'files.stat', { user: isUser, followSymlinks: isBool })
      return entryOf(await this.#t.json<Record<string, unknown>>({ method: 'GET', path: this.#p('/files/stat'), query: { path: p, user: o.user, follow: o.followSymlinks === undefined ? undefined : o.followSymlinks ? 1 : 0 } }))
    },
    mkdir: async (p: string, o: { parents?: boolean; mode?: number; user?: string } = {}): Promise<void> => {
      checkPath(p)
      options(o, 'files.mkdir', { parents: isBool, mode: intIn(0, 0o7777), user: isUser })
      await this.#t.json({ method: 'POST', path: this.#p('/files/mkdir'), json: { path: p, ...o } })
    },
    remove: async (p: string, o: { recursive?: boolean; force?: boolean; user?: string } = {}): Promise<void> => {
      checkPath(p)
      options(o, 'files.remove', { recursive: isBool, force: isBool, user: isUser })
      await this.#t.json({ method: 'POST', path: this.#p('/files/remove'), json: { path: p, ...o } })
    },
    rename: async (from: string, to: string, o: { noReplace?: boolean; user?: string } = {}): Promise<void> => {
      checkPath(from, 'from')
      checkPath(to, 'to')
      options(o, 'files.rename', { noReplace: isBool, user: isUser })
      await this.#t.json({ method: 'POST', path: this.#p('/files/rename'), json: { from, to, ...o } })
    },
    /**
     * A tar stream of a directory's contents (or of one file). An entry that cannot be read is
     * left out (bytes that fail mid-file are zeros) and `onWarning` is called with a StrataError
     * for it (the errno's code, the path in the sandbox in the message and `detail.path`) before
     * the stream ends. Without onWarning the stream fails at its end (after every byte of the
     * archive) with the first of them.
     */
    downloadTar: async (p: string, o: { user?: string; signal?: AbortSignal; onWarning?: (w: StrataError) => void } = {}): Promise<Readable> => {
      checkPath(p)
      options(o, 'files.downloadTar', { user: isUser, signal: isAbortSignal, onWarning: isFunction })
      const res = await this.#t.request({ method: 'GET', path: this.#p('/archive'), query: { path: p, user: o.user }, stream: true, ...(o.signal ? { signal: o.signal } : {}) })
      async function* body(): AsyncGenerator<Uint8Array> {
        yield* connectionErrors(res, o.signal)
        const ws = archiveWarnings(res.trailers[WARNINGS_TRAILER], p)
        if (ws.length && !o.onWarning) throw ws[0]
        for (const w of ws) o.onWarning!(w)
      }
      return Readable.from(body(), { objectMode: false })
    },
    /** Unpacks a tar stream into a directory (created if missing). */
    uploadTar: async (dir: string, tar: Uint8Array | AsyncIterable<Uint8Array>, o: { user?: string; preserveOwner?: boolean; signal?: AbortSignal } = {}): Promise<{ entries: number }> => {
      checkPath(dir, 'dir')
      if (typeof tar === 'string') throw new StrataError('INVALID_ARGUMENT', 'files.uploadTar: tar must be bytes or an async iterable of bytes (a tar stream), not a string')
      checkData(tar, 'files.uploadTar: tar')
      options(o, 'files.uploadTar', { user: isUser, preserveOwner: isBool, signal: isAbortSignal })
      return this.#t.json<{ entries: number }>({ method: 'PUT', path: this.#p('/archive'), body: tar, stream: true, query: { path: dir, user: o.user, owner: o.preserveOwner ? 1 : undefined }, ...(o.signal ? { signal: o.signal } : {}) })
    },
  }

  /** Stops the sandbox and frees its resources; the record stays (state 'stopped') until delete. */
  async kill(): Promise<SandboxInfo> {
    this.info = await this.#t.json<SandboxInfo>({ method: 'POST', path: this.#p('/kill') })
    return this.info
  }

  /**
   * Stops the sandbox if needed and removes it (SANDBOX_NOT_FOUND if it is
   * gone already). By default the call returns once mounts, cgroups and
   * directories are released; with `wait: false` it returns as soon as every
   * process of the sandbox is killed and the node releases the rest in the
   * background.
   */
  async delete(o: { wait?: boolean } = {}): Promise<void> {
    options(o, 'delete', { wait: isBool })
    await this.#t.json({ method: 'DELETE', path: this.#p(), query: { wait: o.wait === false ? 0 : undefined } })
  }
}

/** The archive route's Strata-Warnings trailer as errors (one more for those the daemon left off). */
function archiveWarnings(trailer: string | undefined, p: string): StrataError[] {
  if (trailer === undefined) return []
  let t: { count: number; warnings: Array<{ code: string; message: string; path?: string; errno?: string }> }
  try {
    t = JSON.parse(trailer) as typeof t
    if (!Number.isSafeInteger(t.count) || !Array.isArray(t.warnings)) throw new Error('not {count, warnings}')
  } catch (e) {
    throw new StrataError('RPC_BAD_FRAME', `files.downloadTar ${p}: malformed ${WARNINGS_TRAILER} trailer`, { cause: e })
  }
  const ws = t.warnings.map((w) => StrataError.fromWire({ code: w.code, message: w.message, detail: { ...(w.path !== undefined ? { path: w.path } : {}), ...(w.errno !== undefined ? { errno: w.errno } : {}) } }))
  const more = t.count - ws.length
  if (more > 0) ws.push(new StrataError('SANDBOX_FS_ERROR', `${p}: ${more} more ${more === 1 ? 'entry' : 'entries'} could not be archived (the daemon names the first ${ws.length})`, { detail: { omitted: more } }))
  return ws
}

function entryOf(e: Record<string, unknown>): SandboxFileEntry {
  return { ...(e as unknown as SandboxFileEntry), mtimeNs: BigInt(e.mtimeNs as string) }
}

