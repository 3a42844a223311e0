// Host-side client of the in-sandbox agent. Every request opens its own
// connection to the agent's control socket (a unix socket the backend created
// outside the sandbox), so requests never queue behind each other and a
// cancelled request is simply a closed connection (the agent kills an exec
// whose client went away).
//
// Exit codes are data: exec resolves with whatever the command did, including
// a non-zero exit, a signal or a timeout. Only infrastructure failures reject,
// with StrataError codes: SANDBOX_GONE (the socket or the agent is gone),
// SANDBOX_AGENT_UNREACHABLE (no answer, or the connection dropped mid-request),
// SANDBOX_PROTOCOL_ERROR, CANCELLED, and the codes of errors the agent reports
// (NOT_FOUND, SANDBOX_PERMISSION_DENIED, ...; the errno is in `detail`).
import net from 'node:net'
import os from 'node:os'
import { Readable, Writable } from 'node:stream'
import { StrataError, type ErrorCode } from '../../../fs/common/errors.js'
import {
  DATA_CHUNK, F, FLAG, Fields, FrameDecoder, K, MAX_OUTPUT_CAP, R, STDIN_WINDOW, agentError, encodeFrame,
  protocolError, type Field, type Frame,
} from './protocol.js'

export interface AgentClientInit {
  /** Give up connecting after this long (SANDBOX_AGENT_UNREACHABLE). Default 5000. */
  connectTimeoutMs?: number
}

/** Identity a request runs as. Default: the agent's (root in a container). */
export interface RunAs {
  /** A user name looked up in the sandbox's /etc/passwd, or a numeric uid. */
  user?: string | number
  uid?: number
  gid?: number
}

export interface ExecOptions extends RunAs {
  /** Added to (or, with `undefined`, removed from) the sandbox's environment. */
  env?: Record<string, string | undefined>
  /** Start from an empty environment instead of the sandbox's. */
  clearEnv?: boolean
  cwd?: string
  /** Streamed to the command's stdin, then EOF. Without it stdin is /dev/null. */
  stdin?: string | Uint8Array | AsyncIterable<Uint8Array>
  /** Kill the command's whole process group with SIGKILL after this long; the result says timedOut. */
  timeoutMs?: number
  /**
   * Per-stream cap. Past it the first ceil(n/2) and the last floor(n/2) bytes are kept and the
   * rest counted in droppedStdout/droppedStderr. exec: default 1 MiB, at most 64 MiB.
   * spawn: default none (output is streamed with backpressure instead).
   */
  maxOutputBytes?: number
  signal?: AbortSignal
}

export type SpawnOptions = Omit<ExecOptions, 'stdin'>

export interface ExitInfo {
  /** Exit status, or null when the command was killed by a signal. */
  exitCode: number | null
  /** Name of the signal that killed the command (e.g. 'SIGKILL'), else null. */
  signal: string | null
  coreDumped: boolean
  timedOut: boolean
  durationMs: number
  /** Bytes of each stream left out by the maxOutputBytes cap (0 when nothing was). */
  droppedStdout: number
  droppedStderr: number
  /** Bytes each stream produced in total. */
  totalStdout: number
  totalStderr: number
  /** pid of the command inside the sandbox. */
  pid: number
}

export interface ExecResult extends ExitInfo {
  /** With a cap: head and tail joined; the gap sits at offset ceil(maxOutputBytes / 2). */
  stdout: Buffer
  stderr: Buffer
  /** Either stream dropped bytes. */
  truncated: boolean
}

/**
 * A running command. stdout and stderr share one connection: consume both (or `resume()` the one you do
 * not need), or an unread stream eventually pauses the other — and, through the agent, the command.
 */
export interface AgentProcess {
  /** Resolves once the command runs (rejects if it could not be started). */
  readonly pid: Promise<number>
  readonly stdout: Readable
  readonly stderr: Readable
  /** Respects the agent's stdin window; end() closes the command's stdin. */
  readonly stdin: Writable
  /** Resolves at exit with the exit status; rejects if the command could not be started. */
  wait(): Promise<ExitInfo>
  /** Sends a signal to the command's process group (or only to the command with group: false). */
  kill(signal?: NodeJS.Signals | number, opts?: { group?: boolean }): void
}

export type FileType = 'file' | 'dir' | 'symlink' | 'char' | 'block' | 'fifo' | 'socket' | 'unknown'

export interface FileEntry {
  name: string
  /** Set by stat (the path asked for). */
  path?: string
  type: FileType
  size: number
  /** Permission bits with setuid/setgid/sticky. */
  mode: number
  mtimeMs: number
  mtimeNs: bigint
  uid: number
  gid: number
  nlink: number
  /** Symlink target. */
  target?: string
}

export interface ReadOptions extends RunAs {
  offset?: number
  length?: number
  /** Reject with OUTPUT_LIMIT rather than buffer more than this. Default 256 MiB. */
  maxBytes?: number
  signal?: AbortSignal
}

export interface WriteOptions extends RunAs {
  /** Permission bits; applied also when the file already exists. Default 0644 for new files. */
  mode?: number
  append?: boolean
  /** Create missing parent directories. */
  mkdirs?: boolean
  /** Fail with ALREADY_EXISTS if the file exists. */
  exclusive?: boolean
  signal?: AbortSignal
}

const TYPES: Record<string, FileType> = { f: 'file', d: 'dir', l: 'symlink', c: 'char', b: 'block', p: 'fifo', s: 'socket' }
const SIGNAL_NUMBERS = os.constants.signals as Record<string, number>
const SIGNAL_NAMES = new Map(Object.entries(SIGNAL_NUMBERS).map(([n, v]) => [v, n]))
const DEFAULT_EXEC_CAP = 1024 * 1024
const DEFAULT_READ_CAP = 256 * 1024 * 1024

function signalNumber(sig: NodeJS.Signals | number): number {
  const n = typeof sig === 'number' ? sig : SIGNAL_NUMBERS[sig]
  if (n === undefined || !Number.isInteger(n) || n < 1 || n > 64) throw new StrataError('INVALID_ARGUMENT', `unknown signal ${String(sig)}`)
  return n
}

function runAsFields(o: RunAs | undefined): Field[] {
  const f: Field[] = []
  if (!o) return f
  if (o.user !== undefined) f.push([K.USER, checkUser(o.user)])
  if (o.uid !== undefined) f.push([K.UID, checkId(o.uid, 'uid')])
  if (o.gid !== undefined) f.push([K.GID, checkId(o.gid, 'gid')])
  return f
}

// The protocol refuses what it cannot carry (NUL) only when a frame is encoded;
// refusing it here names the field instead.
function checkUser(u: string | number): string {
  const s = String(u)
  if (s.length === 0 || s.includes('\0')) throw new StrataError('INVALID_ARGUMENT', 'user must be a non-empty string without NUL')
  return s
}

function checkId(v: number, what: string): number {
  if (!Number.isInteger(v) || v < 0 || v > 0xfffffffe) throw new StrataError('INVALID_ARGUMENT', `${what} must be an integer in [0, 2^32-2]`)
  return v
}

function checkPath(p: unknown, what = 'path'): string {
  if (typeof p !== 'string' || p.length === 0) throw new StrataError('INVALID_ARGUMENT', `${what} must be a non-empty string`)
  if (p.includes('\0')) throw new StrataError('INVALID_ARGUMENT', `${what} must not contain NUL`)
  return p
}

function entryOf(f: Fields): FileEntry {
  const ns = BigInt.asIntN(64, f.bigint(K.MTIME_NS) ?? 0n)
  const e: FileEntry = {
    name: f.str(K.NAME) ?? '',
    type: TYPES[String.fromCharCode(f.num(K.TYPE) ?? 63)] ?? 'unknown',
    size: f.num(K.SIZE) ?? 0,
    mode: f.num(K.MODE) ?? 0,
    mtimeNs: ns,
    mtimeMs: Number(ns / 1000000n),
    uid: f.num(K.UID) ?? 0,
    gid: f.num(K.GID) ?? 0,
    nlink: f.num(K.NLINK) ?? 0,
  }
  const p = f.str(K.PATH)
  if (p !== undefined) e.path = p
  const t = f.str(K.TARGET)
  if (t !== undefined) e.target = t
  return e
}

function exitOf(f: Fields, pid: number): ExitInfo {
  const sig = f.num(K.TERM_SIGNAL)
  return {
    exitCode: f.num(K.EXIT_CODE) ?? null,
    signal: sig === undefined ? null : SIGNAL_NAMES.get(sig) ?? `SIG${sig}`,
    coreDumped: f.num(K.CORE_DUMPED) === 1,
    timedOut: f.num(K.TIMED_OUT) === 1,
    durationMs: f.num(K.DURATION_MS) ?? 0,
    droppedStdout: f.num(K.DROPPED_OUT) ?? 0,
    droppedStderr: f.num(K.DROPPED_ERR) ?? 0,
    totalStdout: f.num(K.TOTAL_OUT) ?? 0,
    totalStderr: f.num(K.TOTAL_ERR) ?? 0,
    pid,
  }
}

function asStrataError(e: unknown, code: ErrorCode): StrataError {
  return e instanceof StrataError ? e : new StrataError(code, (e as Error)?.message ?? String(e), { cause: e })
}

function cancelled(signal: AbortSignal): StrataError {
  return new StrataError('CANCELLED', 'the request was aborted', { cause: signal.reason })
}

async function* chunksOf(data: string | Uint8Array | AsyncIterable<Uint8Array>): AsyncIterable<Uint8Array> {
  if (typeof data === 'string') data = Buffer.from(data)
  if (data instanceof Uint8Array) {
    for (let i = 0; i < data.length; i += DATA_CHUNK) yield data.subarray(i, i + DATA_CHUNK)
    return
  }
  for await (const c of data) {
    const b = typeof c === 'string' ? Buffer.from(c) : c
    for (let i = 0; i < b.length; i += DATA_CHUNK) yield b.subarray(i, i + DATA_CHUNK)
  }
}

/**
 * One request on one connection: frames in, frames out, and a single way to
 * end (done or failed). Owners get frames through `onFrame`.
 */
class Call {
  readonly socket: net.Socket
  readonly #decoder = new FrameDecoder()
  #finished = false
  #onFrame: (fr: Frame) => void = () => {}
  #onEnd: (err: StrataError | null) => void = () => {}
  #abort: (() => void) | undefined
  #signal: AbortSignal | undefined

  private constructor(socket: net.Socket, signal: AbortSignal | undefined) {
    this.socket = socket
    this.#signal = signal
    socket.on('data', (chunk: Buffer) => {
      let frames: Frame[]
      try {
        frames = this.#decoder.push(chunk)
      } catch (e) {
        this.fail(e as StrataError)
        return
      }
      for (const fr of frames) {
        if (this.#finished) return
        try {
          this.#onFrame(fr)
        } catch (e) {
          this.fail(e instanceof StrataError ? e : protocolError((e as Error).message, e))
        }
      }
    })
    socket.on('error', (e: NodeJS.ErrnoException) => {
      // EPIPE while we were still sending: the agent may have replied with an
      // error and closed; that reply (if any) arrives before 'close'.
      if (e.code === 'EPIPE') return
      this.fail(new StrataError('SANDBOX_AGENT_UNREACHABLE', `agent connection failed: ${e.message}`, { cause: e }))
    })
    socket.on('close', () => this.fail(new StrataError('SANDBOX_AGENT_UNREACHABLE', 'the agent closed the connection before finishing the request (it died or the sandbox stopped)')))
    if (signal) {
      this.#abort = () => this.fail(cancelled(signal))
      signal.addEventListener('abort', this.#abort, { once: true })
    }
  }

  static async open(path: string, timeoutMs: number, signal?: AbortSignal): Promise<Call> {
    if (signal?.aborted) throw cancelled(signal)
    const socket = net.createConnection({ path })
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        socket.destroy()
        reject(new StrataError('SANDBOX_AGENT_UNREACHABLE', `no connection to the agent at ${path} within ${timeoutMs} ms`))
      }, timeoutMs)
      const onAbort = (): void => { socket.destroy(); reject(cancelled(signal!)) }
      signal?.addEventListener('abort', onAbort, { once: true })
      socket.once('connect', () => { clearTimeout(timer); signal?.removeEventListener('abort', onAbort); resolve() })
      socket.once('error', (e: NodeJS.ErrnoException) => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
        // The socket path is removed with the sandbox, and nobody listens on it
        // once the agent (the only holder of the listening fd) is dead.
        const code: ErrorCode = e.code === 'ENOENT' || e.code === 'ECONNREFUSED' ? 'SANDBOX_GONE' : 'SANDBOX_AGENT_UNREACHABLE'
        reject(new StrataError(code, `cannot connect to the agent at ${path}: ${e.code ?? e.message}`, { cause: e }))
      })
    })
    return new Call(socket, signal)
  }

  handle(onFrame: (fr: Frame) => void, onEnd: (err: StrataError | null) => void): void {
    this.#onFrame = onFrame
    this.#onEnd = onEnd
  }

  get finished(): boolean {
    return this.#finished
  }

  /** Writes a frame; resolves when the socket can take more. */
  async send(buf: Buffer): Promise<void> {
    if (this.#finished || this.socket.destroyed) return
    if (this.socket.write(buf)) return
    await new Promise<void>((resolve) => {
      const done = (): void => { this.socket.off('drain', done); this.socket.off('close', done); resolve() }
      this.socket.on('drain', done)
      this.socket.on('close', done)
    })
  }

  /**
   * Fire-and-forget send: a frame that cannot be encoded or sent fails this
   * call (its owner hears of it through onEnd), never the process through an
   * unhandled rejection.
   */
  post(frame: Buffer | (() => Buffer)): void {
    let buf: Buffer
    try {
      buf = typeof frame === 'function' ? frame() : frame
    } catch (e) {
      this.fail(asStrataError(e, 'INVALID_ARGUMENT'))
      return
    }
    this.send(buf).catch((e: unknown) => this.fail(asStrataError(e, 'SANDBOX_AGENT_UNREACHABLE')))
  }

  done(): void {
    this.#end(null)
  }

  fail(err: StrataError): void {
    this.#end(err)
  }

  #end(err: StrataError | null): void {
    if (this.#finished) return
    this.#finished = true
    if (this.#abort) this.#signal?.removeEventListener('abort', this.#abort)
    this.socket.destroy()
    this.#onEnd(err)
  }
}

interface ExecSinks {
  onStarted(pid: number): void
  onData(stream: 1 | 2, chunk: Buffer): void
  onExit(info: ExitInfo): void
  onError(err: StrataError): void
}

/** An exec on its connection: stdin with credit, signals, output frames. */
class ExecCall {
  readonly call: Call
  #pid = 0
  #credit = STDIN_WINDOW
  #creditWaiters: Array<() => void> = []
  #ended = false

  constructor(call: Call, sinks: ExecSinks) {
    this.call = call
    call.handle((fr) => {
      switch (fr.type) {
        case R.STARTED: {
          const f = new Fields(fr.payload)
          this.#pid = f.num(K.PID) ?? 0
          sinks.onStarted(this.#pid)
          return
        }
        case R.STDOUT: sinks.onData(1, fr.payload); return
        case R.STDERR: sinks.onData(2, fr.payload); return
        case R.GAP: return // the counts arrive with EXIT
        case R.WINDOW: {
          this.#credit += new Fields(fr.payload).num(K.BYTES) ?? 0
          const w = this.#creditWaiters
          this.#creditWaiters = []
          for (const r of w) r()
          return
        }
        case R.EXIT:
          this.#ended = true
          sinks.onExit(exitOf(new Fields(fr.payload), this.#pid))
          call.done()
          return
        case R.ERROR: {
          const f = new Fields(fr.payload)
          const errname = f.str(K.ERRNAME)
          // ENOENT from a failed start is a missing command (or shell, or cwd, or user)
          call.fail(agentError(f, errname === 'ENOENT' ? 'NOT_FOUND' : 'SANDBOX_EXEC_FAILED'))
          return
        }
        default:
          throw protocolError(`unexpected frame 0x${fr.type.toString(16)} during exec`)
      }
    }, (err) => {
      this.#ended = true
      const w = this.#creditWaiters
      this.#creditWaiters = []
      for (const r of w) r()
      if (err) sinks.onError(err)
    })
  }

  /** Sends stdin bytes within the agent's window. Returns false once the exec is over. */
  async write(chunk: Uint8Array): Promise<boolean> {
    let off = 0
    while (off < chunk.length) {
      if (this.#ended) return false
      if (this.#credit <= 0) {
        await new Promise<void>((r) => this.#creditWaiters.push(r))
        continue
      }
      const n = Math.min(chunk.length - off, this.#credit, DATA_CHUNK)
      this.#credit -= n
      await this.call.send(encodeFrame(F.DATA, chunk.subarray(off, off + n)))
      off += n
    }
    return !this.#ended
  }

  async end(): Promise<void> {
    if (!this.#ended) await this.call.send(encodeFrame(F.EOF))
  }

  kill(sig: number, group: boolean): void {
    if (this.#ended) return
    this.call.post(() => encodeFrame(F.SIGNAL, [[K.SIGNO, sig], [K.FLAGS, group ? FLAG.SIGNAL_GROUP : 0]]))
  }
}

function execFields(cmd: string | readonly string[], o: SpawnOptions, cap: number, stdin: boolean): Field[] {
  const f: Field[] = []
  if (typeof cmd === 'string') {
    if (cmd.length === 0) throw new StrataError('INVALID_ARGUMENT', 'the shell command is empty')
    f.push([K.SHELL, cmd])
  } else {
    if (!Array.isArray(cmd) || cmd.length === 0 || cmd.some((a) => typeof a !== 'string')) {
      throw new StrataError('INVALID_ARGUMENT', 'argv must be a non-empty array of strings')
    }
    if (cmd[0] === '') throw new StrataError('INVALID_ARGUMENT', 'argv[0] is empty')
    for (const a of cmd) f.push([K.ARG, a])
  }
  for (const [k, v] of Object.entries(o.env ?? {})) {
    if (k === '' || k.includes('=')) throw new StrataError('INVALID_ARGUMENT', `bad environment variable name ${JSON.stringify(k)}`)
    f.push([K.ENV, v === undefined ? k : `${k}=${v}`])
  }
  if (o.cwd !== undefined) f.push([K.CWD, checkPath(o.cwd, 'cwd')])
  f.push(...runAsFields(o))
  if (o.timeoutMs !== undefined) {
    if (!Number.isFinite(o.timeoutMs) || o.timeoutMs <= 0) throw new StrataError('INVALID_ARGUMENT', 'timeoutMs must be a positive number')
    f.push([K.TIMEOUT_MS, Math.ceil(o.timeoutMs)])
  }
  if (cap) f.push([K.MAX_OUTPUT, cap])
  f.push([K.FLAGS, (stdin ? FLAG.EXEC_STDIN : 0) | (o.clearEnv ? FLAG.EXEC_CLEAR_ENV : 0)])
  return f
}

function checkCap(v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt
  if (!Number.isInteger(v) || v < 1 || v > MAX_OUTPUT_CAP) {
    throw new StrataError('INVALID_ARGUMENT', `maxOutputBytes must be an integer in [1, ${MAX_OUTPUT_CAP}]`)
  }
  return v
}

export class AgentClient {
  readonly socketPath: string
  readonly #connectTimeoutMs: number
  readonly #calls = new Set<Call>()
  #closed = false

  constructor(socketPath: string, init: AgentClientInit = {}) {
    this.socketPath = checkPath(socketPath, 'socketPath')
    this.#connectTimeoutMs = init.connectTimeoutMs ?? 5000
  }

  async #open(signal?: AbortSignal): Promise<Call> {
    if (this.#closed) throw new StrataError('CLOSED', 'the agent client was closed')
    const call = await Call.open(this.socketPath, this.#connectTimeoutMs, signal)
    this.#calls.add(call)
    call.socket.once('close', () => this.#calls.delete(call))
    return call
  }

  /** Closes every open request (their promises reject with CLOSED; the agent kills their execs) and refuses new ones. */
  close(): void {
    this.#closed = true
    for (const c of this.#calls) c.fail(new StrataError('CLOSED', 'the agent client was closed'))
  }

  /** Round trip to the agent: its protocol version, its pid inside the sandbox, whether it is shutting down. */
  async ping(opts: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<{ version: number; pid: number; shuttingDown: boolean }> {
    const call = await this.#open(opts.signal)
    return new Promise((resolve, reject) => {
      const timer = opts.timeoutMs ? setTimeout(() => call.fail(new StrataError('TIMEOUT', `no reply to ping within ${opts.timeoutMs} ms`)), opts.timeoutMs) : undefined
      call.handle((fr) => {
        if (fr.type !== R.PONG) throw protocolError(`unexpected frame 0x${fr.type.toString(16)} in reply to ping`)
        const f = new Fields(fr.payload)
        resolve({ version: f.num(K.VERSION) ?? 0, pid: f.num(K.PID) ?? 0, shuttingDown: f.num(K.FLAGS) === 1 })
        call.done()
      }, (err) => { clearTimeout(timer); if (err) reject(err) })
      call.post(() => encodeFrame(F.PING))
    })
  }

  /**
   * Asks the agent to shut the sandbox down: SIGTERM to every process, up to
   * graceMs for them to exit, then SIGKILL; the agent then exits. Unlike a
   * SIGTERM sent to PID 1, this cannot be lost to a workload that keeps a
   * SIGTERM pending.
   */
  async shutdown(graceMs = 10000): Promise<void> {
    const call = await this.#open()
    await new Promise<void>((resolve, reject) => {
      call.handle((fr) => {
        if (fr.type === R.DONE) { resolve(); call.done(); return }
        if (fr.type === R.ERROR) { call.fail(agentError(new Fields(fr.payload), 'SANDBOX_GONE')); return }
        throw protocolError(`unexpected frame 0x${fr.type.toString(16)}`)
      }, (err) => { if (err) reject(err) })
      call.post(() => encodeFrame(F.SHUTDOWN, [[K.GRACE_MS, Math.max(0, Math.floor(graceMs))]]))
    })
  }

  /**
   * Runs a command to completion and buffers its output (capped, see maxOutputBytes). A string runs
   * through /bin/sh -c (NOT_FOUND if the sandbox has no /bin/sh); an array is argv, resolved on PATH.
   */
  async exec(cmd: string | readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const cap = checkCap(opts.maxOutputBytes, DEFAULT_EXEC_CAP)
    // encoded before connecting: a request the protocol cannot carry fails here, with no connection open
    const request = encodeFrame(F.EXEC, execFields(cmd, opts, cap, opts.stdin !== undefined))
    const call = await this.#open(opts.signal)
    const out: Buffer[] = []
    const err: Buffer[] = []
    let ec: ExecCall
    const result = new Promise<ExecResult>((resolve, reject) => {
      ec = new ExecCall(call, {
        onStarted: () => {},
        onData: (s, c) => (s === 1 ? out : err).push(c),
        onExit: (info) => resolve({
          ...info,
          stdout: Buffer.concat(out),
          stderr: Buffer.concat(err),
          truncated: info.droppedStdout > 0 || info.droppedStderr > 0,
        }),
        onError: reject,
      })
    })
    call.post(request)
    if (opts.stdin !== undefined) {
      const stdin = opts.stdin
      void (async () => {
        try {
          for await (const c of chunksOf(stdin)) if (!(await ec!.write(c))) return
          await ec!.end()
        } catch (e) {
          call.fail(new StrataError('INVALID_ARGUMENT', `reading stdin failed: ${(e as Error).message}`, { cause: e }))
        }
      })()
    }
    return result
  }

  /** Starts a command and streams its output; see AgentProcess. */
  spawn(cmd: string | readonly string[], opts: SpawnOptions = {}): AgentProcess {
    const cap = opts.maxOutputBytes === undefined ? 0 : checkCap(opts.maxOutputBytes, 0)
    // encoded here, so a request the protocol cannot carry throws to the caller rather than in the background
    const request = encodeFrame(F.EXEC, execFields(cmd, opts, cap, true))
    let ec: ExecCall | undefined
    let call: Call | undefined
    const pending: Array<() => void> = [] // kill()/stdin before the connection is up
    const paused = { 1: false, 2: false }
    const resume = (s: 1 | 2): void => {
      paused[s] = false
      if (!paused[1] && !paused[2]) call?.socket.resume()
    }
    const stdout = new Readable({ read: () => resume(1) })
    const stderr = new Readable({ read: () => resume(2) })
    let pidResolve!: (p: number) => void
    let pidReject!: (e: unknown) => void
    const pid = new Promise<number>((res, rej) => { pidResolve = res; pidReject = rej })
    pid.catch(() => {})
    let waitResolve!: (i: ExitInfo) => void
    let waitReject!: (e: unknown) => void
    const waited = new Promise<ExitInfo>((res, rej) => { waitResolve = res; waitReject = rej })
    waited.catch(() => {})
    const finishStreams = (): void => { stdout.push(null); stderr.push(null) }

    const whenOpen = (fn: (ec: ExecCall) => void): void => {
      if (ec) fn(ec)
      else pending.push(() => fn(ec!))
    }
    const stdin = new Writable({
      highWaterMark: DATA_CHUNK,
      write: (chunk: Buffer, _enc, cb) => whenOpen((e) => { e.write(chunk).then(() => cb(), cb) }),
      final: (cb) => whenOpen((e) => { e.end().then(() => cb(), cb) }),
    })
    stdin.on('error', () => {})

    void (async () => {
      try {
        call = await this.#open(opts.signal)
      } catch (e) {
        pidReject(e)
        waitReject(e)
        finishStreams()
        return
      }
      ec = new ExecCall(call, {
        onStarted: (p) => pidResolve(p),
        onData: (s, c) => {
          const r = s === 1 ? stdout : stderr
          if (!r.push(c)) { paused[s] = true; call!.socket.pause() }
        },
        onExit: (info) => { pidResolve(info.pid); finishStreams(); waitResolve(info) },
        onError: (e) => { pidReject(e); finishStreams(); waitReject(e) },
      })
      call.post(request)
      for (const p of pending.splice(0)) p()
    })().catch((e: unknown) => {
      // nothing above should throw; if something does, it ends this process, not the daemon
      const err = asStrataError(e, 'INTERNAL')
      if (call) call.fail(err)
      else { pidReject(err); waitReject(err); finishStreams() }
    })

    return {
      pid,
      stdout,
      stderr,
      stdin,
      wait: () => waited,
      kill: (sig: NodeJS.Signals | number = 'SIGTERM', o: { group?: boolean } = {}) => {
        const n = signalNumber(sig)
        whenOpen((e) => e.kill(n, o.group ?? true))
      },
    }
  }

  // ------------------------------------------------------------------ files

  /** One request whose reply is a stream of frames ending in DONE (or ERROR). */
  async #simple(type: number, fields: Field[], opts: { signal?: AbortSignal; onFrame?: (fr: Frame) => void; body?: AsyncIterable<Uint8Array> } = {}): Promise<Fields> {
    const request = encodeFrame(type, fields)
    const call = await this.#open(opts.signal)
    const done = new Promise<Fields>((resolve, reject) => {
      call.handle((fr) => {
        if (fr.type === R.DONE) { resolve(new Fields(fr.payload)); call.done(); return }
        if (fr.type === R.ERROR) { call.fail(agentError(new Fields(fr.payload), 'SANDBOX_FS_ERROR')); return }
        if (opts.onFrame) opts.onFrame(fr)
        else throw protocolError(`unexpected frame 0x${fr.type.toString(16)}`)
      }, (err) => { if (err) reject(err) })
    })
    done.catch(() => {})
    await call.send(request)
    if (opts.body) {
      try {
        for await (const c of opts.body) {
          if (call.finished) break
          await call.send(encodeFrame(F.DATA, c))
        }
        await call.send(encodeFrame(F.EOF))
      } catch (e) {
        call.fail(e instanceof StrataError ? e : new StrataError('INVALID_ARGUMENT', `reading the data to send failed: ${(e as Error).message}`, { cause: e }))
      }
    }
    return done
  }

  /** Opens a request whose reply is R_DATA frames, as a Readable with backpressure. */
  #dataStream(type: number, fields: Field[], signal?: AbortSignal, maxBytes?: number, onWarning?: (w: StrataError) => void): Readable {
    // encoded now: a request the protocol refuses throws to the caller instead of rejecting in the background
    const request = encodeFrame(type, fields)
    let call: Call | undefined
    let total = 0
    const r = new Readable({
      read: () => call?.socket.resume(),
      destroy: (err, cb) => { call?.fail(new StrataError('CANCELLED', 'stream destroyed')); cb(err) },
    })
    void (async () => {
      try {
        call = await this.#open(signal)
      } catch (e) {
        r.destroy(e as Error)
        return
      }
      call.handle((fr) => {
        if (fr.type === R.DATA) {
          total += fr.payload.length
          if (maxBytes !== undefined && total > maxBytes) {
            call!.fail(new StrataError('OUTPUT_LIMIT', `more than ${maxBytes} bytes`))
            return
          }
          if (!r.push(fr.payload)) call!.socket.pause()
          return
        }
        if (fr.type === R.DONE) { r.push(null); call!.done(); return }
        if (fr.type === R.WARN && type === F.TAR_GET) {
          const w = agentError(new Fields(fr.payload), 'SANDBOX_FS_ERROR')
          if (onWarning) onWarning(w)
          else call!.fail(w)
          return
        }
        if (fr.type === R.ERROR) { call!.fail(agentError(new Fields(fr.payload), 'SANDBOX_FS_ERROR')); return }
        throw protocolError(`unexpected frame 0x${fr.type.toString(16)}`)
      }, (err) => { if (err) r.destroy(err) })
      call.post(request)
    })().catch((e: unknown) => {
      // whatever goes wrong here fails this stream, never the process
      const err = asStrataError(e, 'INTERNAL')
      if (call) call.fail(err)
      else r.destroy(err)
    })
    return r
  }

  readonly files = {
    /** Whole file (or a range) into memory; OUTPUT_LIMIT past maxBytes (default 256 MiB). */
    read: async (path: string, opts: ReadOptions = {}): Promise<Buffer> => {
      const max = opts.maxBytes ?? DEFAULT_READ_CAP
      const chunks: Buffer[] = []
      for await (const c of this.#dataStream(F.FREAD, this.#readFields(path, opts), opts.signal, max)) chunks.push(c as Buffer)
      return Buffer.concat(chunks)
    },

    /** The file as a stream with backpressure. */
    readStream: (path: string, opts: Omit<ReadOptions, 'maxBytes'> = {}): Readable =>
      this.#dataStream(F.FREAD, this.#readFields(path, opts), opts.signal),

    /** Creates or truncates (or appends to) a file; resolves with the bytes written. Not atomic. */
    write: async (path: string, data: string | Uint8Array | AsyncIterable<Uint8Array>, opts: WriteOptions = {}): Promise<{ bytes: number }> => {
      const fields: Field[] = [[K.PATH, checkPath(path)], ...runAsFields(opts),
        [K.FLAGS, (opts.append ? FLAG.FWRITE_APPEND : 0) | (opts.mkdirs ? FLAG.FWRITE_MKDIRS : 0) | (opts.exclusive ? FLAG.FWRITE_EXCL : 0)]]
      if (opts.mode !== undefined) fields.push([K.MODE, checkMode(opts.mode)])
      const f = await this.#simple(F.FWRITE, fields, { signal: opts.signal, body: chunksOf(data) })
      return { bytes: f.num(K.BYTES) ?? 0 }
    },

    /** Entries of a directory (not . and ..), in directory order. Symlinks are not followed. */
    list: async (path: string, opts: RunAs & { signal?: AbortSignal } = {}): Promise<FileEntry[]> => {
      const out: FileEntry[] = []
      await this.#simple(F.FLIST, [[K.PATH, checkPath(path)], ...runAsFields(opts)], {
        signal: opts.signal,
        onFrame: (fr) => {
          if (fr.type !== R.ENTRY) throw protocolError(`unexpected frame 0x${fr.type.toString(16)} in a listing`)
          out.push(entryOf(new Fields(fr.payload)))
        },
      })
      return out
    },

    /** stat(2), or lstat(2) with followSymlinks: false. */
    stat: async (path: string, opts: RunAs & { followSymlinks?: boolean; signal?: AbortSignal } = {}): Promise<FileEntry> => {
      let entry: FileEntry | undefined
      await this.#simple(F.FSTAT, [[K.PATH, checkPath(path)], ...runAsFields(opts), [K.FLAGS, opts.followSymlinks === false ? FLAG.FSTAT_NOFOLLOW : 0]], {
        signal: opts.signal,
        onFrame: (fr) => {
          if (fr.type !== R.ENTRY) throw protocolError(`unexpected frame 0x${fr.type.toString(16)} in a stat reply`)
          entry = entryOf(new Fields(fr.payload))
        },
      })
      if (!entry) throw protocolError('stat reply without an entry')
      return entry
    },

    /** mkdir -p by default (parents: false fails with ALREADY_EXISTS / NOT_FOUND like mkdir(2)). */
    mkdir: async (path: string, opts: RunAs & { parents?: boolean; mode?: number; signal?: AbortSignal } = {}): Promise<void> => {
      const fields: Field[] = [[K.PATH, checkPath(path)], ...runAsFields(opts), [K.FLAGS, opts.parents === false ? 0 : FLAG.FMKDIR_PARENTS]]
      if (opts.mode !== undefined) fields.push([K.MODE, checkMode(opts.mode)])
      await this.#simple(F.FMKDIR, fields, { signal: opts.signal })
    },

    /** unlink/rmdir; recursive removes a tree (never following symlinks); force ignores a missing path. */
    remove: async (path: string, opts: RunAs & { recursive?: boolean; force?: boolean; signal?: AbortSignal } = {}): Promise<void> => {
      await this.#simple(F.FREMOVE, [[K.PATH, checkPath(path)], ...runAsFields(opts),
        [K.FLAGS, (opts.recursive ? FLAG.FREMOVE_RECURSIVE : 0) | (opts.force ? FLAG.FREMOVE_FORCE : 0)]], { signal: opts.signal })
    },

    /** rename(2); noReplace fails with ALREADY_EXISTS instead of replacing `to`. */
    rename: async (from: string, to: string, opts: RunAs & { noReplace?: boolean; signal?: AbortSignal } = {}): Promise<void> => {
      await this.#simple(F.FRENAME, [[K.PATH, checkPath(from, 'from')], [K.PATH2, checkPath(to, 'to')], ...runAsFields(opts),
        [K.FLAGS, opts.noReplace ? FLAG.FRENAME_NOREPLACE : 0]], { signal: opts.signal })
    },

    /**
     * Unpacks a tar stream (ustar, PAX, GNU) into `dir` (created if missing), streamed: nothing is
     * buffered whole on either side. Entries cannot escape `dir` (".." and paths through symlinks
     * are refused). Ownership from the archive is applied only with preserveOwner (as root).
     */
    uploadTar: async (dir: string, tar: Uint8Array | AsyncIterable<Uint8Array>, opts: RunAs & { preserveOwner?: boolean; signal?: AbortSignal } = {}): Promise<{ entries: number }> => {
      const f = await this.#simple(F.TAR_PUT, [[K.PATH, checkPath(dir, 'dir')], ...runAsFields(opts), [K.FLAGS, opts.preserveOwner ? FLAG.TARPUT_OWNER : 0]], {
        signal: opts.signal,
        body: chunksOf(tar),
      })
      return { entries: f.num(K.BYTES) ?? 0 }
    },

    /**
     * A ustar/PAX archive of a directory's contents (names relative to it, sorted) or of a single
     * file (under its base name), streamed with backpressure. An entry inside the directory that
     * cannot be read (opened, read, listed) is left out, or its unreadable bytes are zeros, and
     * `onWarning` is told (a StrataError with the errno's code, `detail.path` the name in the
     * archive); the archive goes on, as GNU tar's does. Without onWarning the first one fails
     * the stream. The single file of a request that cannot be read fails it.
     */
    downloadTar: (path: string, opts: RunAs & { signal?: AbortSignal; onWarning?: (w: StrataError) => void } = {}): Readable =>
      this.#dataStream(F.TAR_GET, [[K.PATH, checkPath(path)], ...runAsFields(opts)], opts.signal, undefined, opts.onWarning),
  }

  #readFields(path: string, opts: ReadOptions | Omit<ReadOptions, 'maxBytes'>): Field[] {
    const f: Field[] = [[K.PATH, checkPath(path)], ...runAsFields(opts)]
    if (opts.offset !== undefined) f.push([K.OFFSET, checkNonNeg(opts.offset, 'offset')])
    if (opts.length !== undefined) f.push([K.LENGTH, checkNonNeg(opts.length, 'length')])
    return f
  }
}

function checkMode(m: number): number {
  if (!Number.isInteger(m) || m < 0 || m > 0o7777) throw new StrataError('INVALID_ARGUMENT', 'mode must be an integer in [0, 0o7777]')
  return m
}

function checkNonNeg(v: number, what: string): number {
  if (!Number.isSafeInteger(v) || v < 0) throw new StrataError('INVALID_ARGUMENT', `${what} must be a non-negative integer`)
  return v
}
