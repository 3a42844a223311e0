// Container backend: one OCI bundle per sandbox, run by an OCI runtime (runc
// by default; the binary is configurable) with its state under the sandbox's
// own stateDir (`--root <stateDir>/runc`).
//
// Layout of a sandbox's stateDir (mode 0700, never visible inside the sandbox):
//   sandbox.json   what adopt() needs (id, runtime, cgroup path, defaults)
//   bundle/        config.json (the rootfs is referenced by absolute path)
//   runc/          the runtime's state root
//   agent.sock     the agent's control socket: created here by the host with
//                  unixListen and handed to the agent as fd 3
//                  (`run -d --preserve-fds 1`); the host closes its copy, so
//                  the agent holds the only listening descriptor
//   agent.log      the agent's stdout/stderr; runtime.log: the runtime's log
//
// OOM kills are read from the sandbox's memory cgroup (cgroup v1
// memory.oom_control `oom_kill`, v2 memory.events `oom_kill`), which exists
// until delete. The init's exit code is not known to this backend (the
// runtime detaches it and it is reaped by the host's init), so `exitCode` is
// left out of the status.
//
// create() fails with SANDBOX_START_FAILED when the sandbox could not be
// started, with `detail.stage` saying where: 'runtime' (the runtime could not
// be run or exited non-zero), 'agent' (the agent exited before answering, or
// did not answer within startTimeoutMs) or 'start' (anything else on the way,
// e.g. the control socket), and `detail.output` the tail of the agent's and
// the runtime's logs. Not SANDBOX_EXEC_FAILED: that one means a command inside
// a running sandbox could not be started, and callers treat the two apart.
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { StrataError } from '../../../fs/common/errors.js'
import { native } from '../../../fs/common/native.js'
import { AgentClient, agentBinaryPath } from '../agent/index.js'
import type { SandboxBackend, SandboxHandle, SandboxSpec, SandboxStatus } from '../types.js'
import { etcHosts, ociSpec } from './spec.js'

export { AGENT_PATH_IN_SANDBOX, DOCKER_CAPS, MASKED_PATHS, READONLY_PATHS, cpuResources, ociSpec } from './spec.js'
export { DENIED_SYSCALLS, seccompProfile } from './seccomp.js'

const execFileP = promisify(execFile)

const ID_RE = /^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$/
const SUN_PATH_MAX = 107

export interface ContainerBackendOptions {
  /** OCI runtime binary (name on PATH or absolute path). Default 'runc'. */
  runtime?: string
  /** Static agent binary on the host. Default build/Release/strata-agent. */
  agentBinary?: string
  /** Extra agent arguments (e.g. ['--grace-ms', '2000']). */
  agentArgs?: string[]
  /** Parent of every sandbox's cgroup (absolute cgroup path). Default '/strata'. */
  cgroupParent?: string
  /** How long create waits for the agent to answer a ping. Default 15000 ms. */
  startTimeoutMs?: number
}

interface Meta {
  version: 1
  id: string
  runtime: string
  cgroupsPath: string
  user: string
  workdir: string
}

/**
 * Whether the runtime can bind a file at /etc/NAME: it creates a missing
 * mount point, which fails on a read-only /etc (a dataset mounted there), so
 * then only an existing file is covered. Nothing in the rootfs is written or
 * followed from the host here.
 */
function canMountEtcFile(rootfsDir: string, name: string): boolean {
  const etc = path.join(rootfsDir, 'etc')
  try {
    fs.accessSync(etc, fs.constants.W_OK)
    return true
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EROFS') return true
  }
  try {
    return fs.lstatSync(path.join(etc, name)).isFile()
  } catch {
    return false
  }
}

export class ContainerBackend implements SandboxBackend {
  readonly kind = 'container' as const
  readonly runtime: string
  readonly agentBinary: string
  readonly #agentArgs: string[]
  readonly #cgroupParent: string
  readonly #startTimeoutMs: number

  constructor(opts: ContainerBackendOptions = {}) {
    this.runtime = opts.runtime ?? 'runc'
    this.agentBinary = opts.agentBinary ?? agentBinaryPath()
    this.#agentArgs = opts.agentArgs ?? []
    this.#cgroupParent = (opts.cgroupParent ?? '/strata').replace(/\/+$/, '')
    this.#startTimeoutMs = opts.startTimeoutMs ?? 15000
  }

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    validate(spec)
    if (!fs.existsSync(this.agentBinary)) throw new StrataError('NOT_FOUND', `agent binary ${this.agentBinary} is missing (npm run build)`)
    const stateDir = path.resolve(spec.stateDir)
    const socketPath = path.join(stateDir, 'agent.sock')
    if (Buffer.byteLength(socketPath) > SUN_PATH_MAX) {
      throw new StrataError('INVALID_ARGUMENT', `stateDir ${stateDir} is too long for a unix socket path (${SUN_PATH_MAX} bytes at most for ${socketPath})`)
    }
    fs.mkdirSync(stateDir, { recursive: true, mode: 0o700 })
    fs.chmodSync(stateDir, 0o700)
    const bundle = path.join(stateDir, 'bundle')
    const runcRoot = path.join(stateDir, 'runc')
    if (fs.existsSync(path.join(stateDir, 'sandbox.json'))) throw new StrataError('ALREADY_EXISTS', `stateDir ${stateDir} already holds a sandbox`)
    fs.mkdirSync(bundle, { recursive: true })
    fs.mkdirSync(runcRoot, { recursive: true, mode: 0o700 })
    const workdir = spec.workdir ?? '/'
    const hostname = spec.hostname ?? spec.id.slice(0, 63)
    // in the state dir, bind-mounted by the runtime (as Docker does): the image's own are hidden, not changed
    const etcFiles: { hosts?: string; hostname?: string } = {}
    for (const [f, text] of [['hosts', etcHosts(hostname)], ['hostname', `${hostname}\n`]] as const) {
      if (!canMountEtcFile(spec.rootfsDir, f)) continue
      etcFiles[f] = path.join(stateDir, f)
      fs.writeFileSync(etcFiles[f]!, text, { mode: 0o644 })
    }
    const meta: Meta = {
      version: 1, id: spec.id, runtime: this.runtime, cgroupsPath: `${this.#cgroupParent}/${spec.id}`,
      user: spec.user ?? 'root', workdir,
    }
    const config = ociSpec({
      rootfsDir: path.resolve(spec.rootfsDir),
      agentBinary: path.resolve(this.agentBinary),
      agentArgs: this.#agentArgs,
      env: spec.env ?? {},
      workdir,
      hostname,
      etcFiles,
      network: spec.network ?? 'none',
      resources: spec.resources ?? {},
      cgroupsPath: meta.cgroupsPath,
    })
    fs.writeFileSync(path.join(bundle, 'config.json'), JSON.stringify(config, null, 1))
    fs.writeFileSync(path.join(stateDir, 'sandbox.json'), JSON.stringify(meta))
    const handle = new ContainerSandbox(meta, stateDir)
    try {
      fs.rmSync(socketPath, { force: true })
      const listenFd = native().unixListen(socketPath, 512)
      const logFd = fs.openSync(path.join(stateDir, 'agent.log'), 'a', 0o600)
      try {
        const child = spawn(this.runtime, [
          '--root', runcRoot, '--log', path.join(stateDir, 'runtime.log'),
          'run', '-d', '--preserve-fds', '1', '--pid-file', path.join(stateDir, 'init.pid'), '--bundle', bundle, spec.id,
        ], { stdio: ['ignore', logFd, logFd, listenFd] })
        // not 'close': the container inherits the runtime's stdout and stderr
        const code = await new Promise<number | null>((resolve, reject) => {
          child.once('error', (e: NodeJS.ErrnoException) => reject(new StrataError('SANDBOX_START_FAILED', `cannot run ${this.runtime} for sandbox ${spec.id}: ${e.code ?? e.message}`,
            { cause: e, detail: { stage: 'runtime', errno: e.code ?? null, output: '' } })))
          child.once('exit', (c) => resolve(c))
        })
        if (code !== 0) {
          const output = startOutput(stateDir)
          throw new StrataError('SANDBOX_START_FAILED', `${this.runtime} run ${spec.id} exited ${code}: ${output || 'no output'}`,
            { detail: { stage: 'runtime', exitCode: code, output } })
        }
      } finally {
        fs.closeSync(listenFd) // the agent holds the only copy from here on
        fs.closeSync(logFd)
      }
      handle.pid = Number(fs.readFileSync(path.join(stateDir, 'init.pid'), 'utf8').trim())
      await handle.waitForAgent(this.#startTimeoutMs)
      return handle
    } catch (e) {
      // read the logs before delete() removes the stateDir with them
      const output = startOutput(stateDir)
      await handle.delete().catch(() => {})
      if (e instanceof StrataError && e.code === 'SANDBOX_START_FAILED') throw e
      throw new StrataError('SANDBOX_START_FAILED', `starting sandbox ${spec.id}: ${(e as Error).message}`, { cause: e, detail: { stage: 'start', output } })
    }
  }

  /**
   * Removes this backend's cgroup parent (`cgroupParent`) from every cgroup
   * hierarchy where it is empty: the runtime removes each sandbox's own
   * cgroup, not the parents it created. Non-empty or missing ones are left.
   */
  removeEmptyCgroupParent(): void {
    const parts = this.#cgroupParent.split('/').filter(Boolean)
    for (const root of cgroupMounts()) {
      // deepest first: /strata/<node>, then /strata if nothing else uses it
      for (let i = parts.length; i > 0; i--) {
        try {
          fs.rmdirSync(path.join(root, ...parts.slice(0, i)))
        } catch {
          break
        }
      }
    }
  }

  async adopt(id: string, stateDir: string): Promise<SandboxHandle> {
    stateDir = path.resolve(stateDir)
    let meta: Meta
    try {
      meta = JSON.parse(fs.readFileSync(path.join(stateDir, 'sandbox.json'), 'utf8')) as Meta
    } catch (e) {
      throw new StrataError('SANDBOX_GONE', `no sandbox state at ${stateDir}`, { cause: e })
    }
    if (meta.id !== id) throw new StrataError('INVALID_ARGUMENT', `${stateDir} holds sandbox ${meta.id}, not ${id}`)
    const handle = new ContainerSandbox(meta, stateDir)
    const st = await handle.runtimeState()
    if (!st) throw new StrataError('SANDBOX_GONE', `the runtime no longer knows sandbox ${id}`)
    handle.pid = st.pid
    return handle
  }
}

function validate(spec: SandboxSpec): void {
  const bad = (m: string): never => { throw new StrataError('INVALID_ARGUMENT', m) }
  if (typeof spec !== 'object' || spec === null) bad('spec must be an object')
  if (typeof spec.id !== 'string' || !ID_RE.test(spec.id)) bad(`sandbox id must match ${ID_RE}`)
  if (typeof spec.rootfsDir !== 'string' || !path.isAbsolute(spec.rootfsDir)) bad('rootfsDir must be an absolute path')
  let st: fs.Stats | undefined
  try { st = fs.statSync(spec.rootfsDir) } catch { /* below */ }
  if (!st?.isDirectory()) bad(`rootfsDir ${spec.rootfsDir} is not a directory`)
  if (typeof spec.stateDir !== 'string' || spec.stateDir.length === 0) bad('stateDir must be a path')
  if (spec.workdir !== undefined && (typeof spec.workdir !== 'string' || !spec.workdir.startsWith('/') || spec.workdir.includes('\0'))) bad('workdir must be an absolute path')
  if (spec.user !== undefined && (typeof spec.user !== 'string' || spec.user.length === 0)) bad('user must be a non-empty string')
  if (spec.network !== undefined && spec.network !== 'none' && spec.network !== 'host') bad(`network must be 'none' or 'host'`)
  if (spec.hostname !== undefined && (typeof spec.hostname !== 'string' || !/^[a-zA-Z0-9]([a-zA-Z0-9.-]{0,62})$/.test(spec.hostname))) bad('hostname is not a valid host name')
  for (const [k, v] of Object.entries(spec.env ?? {})) {
    if (!/^[^=\0]+$/.test(k) || typeof v !== 'string' || v.includes('\0')) bad(`env ${k}: names must be non-empty without '=' or NUL, values strings without NUL`)
  }
  const r = spec.resources ?? {}
  if (r.cpu !== undefined && !(typeof r.cpu === 'number' && Number.isFinite(r.cpu) && r.cpu >= 0.01 && r.cpu <= 1024)) bad('resources.cpu must be a number in [0.01, 1024]')
  if (r.memoryMiB !== undefined && !(Number.isInteger(r.memoryMiB) && r.memoryMiB >= 8)) bad('resources.memoryMiB must be an integer >= 8')
  if (r.pids !== undefined && !(Number.isInteger(r.pids) && r.pids >= 8)) bad('resources.pids must be an integer >= 8')
}

function tail(file: string, n = 4096): string {
  try {
    const s = fs.readFileSync(file, 'utf8')
    return s.slice(-n).trim()
  } catch {
    return ''
  }
}

/** What a failed start left in the logs: the agent's output (it says why it stopped), else the runtime's. */
function startOutput(stateDir: string): string {
  return tail(path.join(stateDir, 'agent.log'), 2048) || tail(path.join(stateDir, 'runtime.log'), 2048)
}

/** Mount points of every cgroup hierarchy (v1 controllers and the v2 unified one). */
let cgroupMountList: string[] | undefined

function cgroupMounts(): string[] {
  if (cgroupMountList) return cgroupMountList
  const out = new Set<string>()
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ')
    if (!pre || !post) continue
    const fstype = post.split(' ')[0]
    if (fstype === 'cgroup' || fstype === 'cgroup2') out.add(pre.split(' ')[4]!)
  }
  cgroupMountList = [...out]
  return cgroupMountList
}

let memCgroupRoot: { dir: string; v2: boolean } | null | undefined

/** Where the memory controller is mounted (v1 memory hierarchy, else the v2 unified one). */
function memoryCgroupRoot(): { dir: string; v2: boolean } | null {
  if (memCgroupRoot !== undefined) return memCgroupRoot
  memCgroupRoot = null
  let v2: string | undefined
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ')
    if (!pre || !post) continue
    const mountPoint = pre.split(' ')[4]!
    const [fstype, , opts] = post.split(' ')
    if (fstype === 'cgroup' && opts?.split(',').includes('memory')) {
      memCgroupRoot = { dir: mountPoint, v2: false }
      return memCgroupRoot
    }
    if (fstype === 'cgroup2' && v2 === undefined) v2 = mountPoint
  }
  if (v2 && fs.existsSync(path.join(v2, 'cgroup.controllers')) && fs.readFileSync(path.join(v2, 'cgroup.controllers'), 'utf8').includes('memory')) {
    memCgroupRoot = { dir: v2, v2: true }
  }
  return memCgroupRoot
}

class ContainerSandbox implements SandboxHandle {
  readonly id: string
  readonly backend = 'container' as const
  readonly agent: AgentClient
  readonly stateDir: string
  readonly defaults: { user: string; workdir: string }
  pid = 0
  readonly #meta: Meta
  #deleted = false
  #lastOomKills = 0

  constructor(meta: Meta, stateDir: string) {
    this.#meta = meta
    this.id = meta.id
    this.stateDir = stateDir
    this.defaults = { user: meta.user, workdir: meta.workdir }
    this.agent = new AgentClient(path.join(stateDir, 'agent.sock'))
  }

  async #runtime(...args: string[]): Promise<string> {
    const { stdout } = await execFileP(this.#meta.runtime, ['--root', path.join(this.stateDir, 'runc'), ...args], { maxBuffer: 16 * 1024 * 1024 })
    return stdout
  }

  /** The runtime's view: null when it no longer knows the container. */
  async runtimeState(): Promise<{ pid: number; status: string } | null> {
    try {
      return JSON.parse(await this.#runtime('state', this.id)) as { pid: number; status: string }
    } catch {
      return null
    }
  }

  async waitForAgent(timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs
    let last: unknown
    for (;;) {
      try {
        await this.agent.ping({ timeoutMs: Math.max(500, end - Date.now()) })
        return
      } catch (e) {
        last = e
      }
      const st = await this.runtimeState()
      if (!st || st.status === 'stopped') {
        const output = startOutput(this.stateDir)
        throw new StrataError('SANDBOX_START_FAILED', `the agent of sandbox ${this.id} exited during startup: ${output || 'no output'}`,
          { cause: last, detail: { stage: 'agent', output } })
      }
      // Not SANDBOX_AGENT_UNREACHABLE (retryable): create() deletes the sandbox after this, so there is
      // no agent left to retry against; the failure is the start's.
      if (Date.now() > end) {
        const output = startOutput(this.stateDir)
        throw new StrataError('SANDBOX_START_FAILED', `the agent of sandbox ${this.id} did not answer within ${timeoutMs} ms: ${(last as Error)?.message}`,
          { cause: last, detail: { stage: 'agent', timeoutMs, output } })
      }
      await new Promise((r) => setTimeout(r, 10))
    }
  }

  oomKills(): number {
    return this.#oomKills()
  }

  #oomKills(): number {
    const root = memoryCgroupRoot()
    if (!root) return 0
    const dir = path.join(root.dir, this.#meta.cgroupsPath)
    try {
      const s = fs.readFileSync(path.join(dir, root.v2 ? 'memory.events' : 'memory.oom_control'), 'utf8')
      const m = /^oom_kill (\d+)$/m.exec(s)
      if (m) this.#lastOomKills = Number(m[1])
    } catch { /* cgroup gone: keep the last value seen */ }
    return this.#lastOomKills
  }

  async status(): Promise<SandboxStatus> {
    const st = this.#deleted ? null : await this.runtimeState()
    const oomKills = this.#oomKills()
    const running = st !== null && (st.status === 'running' || st.status === 'paused' || st.status === 'created')
    return { state: running ? 'running' : 'stopped', oomKilled: oomKills > 0, oomKills }
  }

  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    if (this.#deleted) throw new StrataError('SANDBOX_GONE', `sandbox ${this.id} was deleted`)
    try {
      await this.#runtime('kill', this.id, signal.replace(/^SIG/, ''))
    } catch (e) {
      const st = await this.runtimeState()
      if (!st) throw new StrataError('SANDBOX_GONE', `sandbox ${this.id} no longer exists`, { cause: e })
      if (st.status === 'stopped') return
      throw new StrataError('INTERNAL', `${this.#meta.runtime} kill ${this.id}: ${(e as Error).message}`, { cause: e })
    }
  }

  /**
   * Removes the cgroups and runtime state of this container once its init is
   * dead: the kernel has killed every other process of its pid namespace by
   * then, so the cgroups are empty (a task still leaving makes rmdir EBUSY for
   * a moment). False when something is not as expected; the caller then asks
   * the runtime.
   */
  async #removeStopped(): Promise<boolean> {
    const stateFile = path.join(this.stateDir, 'runc', this.id, 'state.json')
    if (!fs.existsSync(stateFile)) return false
    for (const root of cgroupMounts()) {
      const dir = path.join(root, this.#meta.cgroupsPath)
      for (let attempt = 0; ; attempt++) {
        try {
          fs.rmdirSync(dir)
          break
        } catch (e) {
          const code = (e as NodeJS.ErrnoException).code
          if (code === 'ENOENT') break
          if (code !== 'EBUSY' || attempt >= 100) return false
          await new Promise((r) => setTimeout(r, 5))
        }
      }
    }
    fs.rmSync(path.join(this.stateDir, 'runc', this.id), { recursive: true, force: true })
    return true
  }

  async delete(): Promise<void> {
    if (this.#deleted) return
    this.agent.close()
    this.#oomKills()
    if (fs.existsSync(path.join(this.stateDir, 'runc', this.id))) {
      // Kill the init ourselves and watch it go: `delete --force` would too, but then polls for
      // its exit in 100 ms steps. Only a pid still in this sandbox's cgroup is ours to kill
      // (a dead init's pid may belong to someone else by now).
      if (this.pid > 0 && alive(this.pid) && inCgroup(this.pid, this.#meta.cgroupsPath)) {
        try {
          process.kill(this.pid, 'SIGKILL')
        } catch { /* gone already */ }
        const end = Date.now() + 5000
        while (alive(this.pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 2))
      }
      // dead by our kill or on its own (a pid not alive is not reused yet, so it is the init's)
      const initGone = this.pid > 0 && !alive(this.pid)
      // With the init seen dead, what is left of a stopped container is its empty cgroups and
      // its state directory: removing them here is what `runc delete` would do, without
      // starting a runtime process (~30 ms here). Anything unexpected falls back to the runtime,
      // and `--force` covers a container that still runs (it then kills it itself).
      if (!(initGone && (await this.#removeStopped()))) {
        try {
          await this.#runtime('delete', '--force', this.id)
        } catch (e) {
          if (await this.runtimeState()) throw new StrataError('INTERNAL', `${this.#meta.runtime} delete ${this.id}: ${(e as Error).message}`, { cause: e })
        }
      }
    }
    // the runtime removes the cgroup; make sure the init is gone before the directory goes
    if (this.pid > 0) {
      const end = Date.now() + 5000
      while (alive(this.pid) && Date.now() < end) await new Promise((r) => setTimeout(r, 10))
    }
    fs.rmSync(this.stateDir, { recursive: true, force: true })
    this.#deleted = true
  }
}

/** Whether `pid` is a member of the cgroup at `cgroupsPath` (in any hierarchy). */
function inCgroup(pid: number, cgroupsPath: string): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').some((l) => l.slice(l.indexOf(':', l.indexOf(':') + 1) + 1) === cgroupsPath)
  } catch {
    return false
  }
}

function alive(pid: number): boolean {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return s.slice(s.lastIndexOf(')') + 2, s.lastIndexOf(')') + 3) !== 'Z'
  } catch {
    return false
  }
}
