// The interface every sandbox backend implements (container now; microvm, vm
// and fncall later). A backend turns a prepared root filesystem directory into
// a running, isolated sandbox whose PID 1 is the static agent, and hands back a
// handle: an AgentClient connected to that agent, the host pid of the
// sandbox's init, its status (including an OOM kill), kill and delete.
//
// Everything a backend keeps about a sandbox lives under the sandbox's
// `stateDir` (a directory the caller owns exclusively per sandbox), so a
// restarted daemon can `adopt(id, stateDir)` a sandbox that is still running.
// Backend-independent behaviour is checked by test/sandbox/backends/conformance.ts.
import type { AgentClient } from './agent/index.js'

export type BackendKind = 'container' | 'microvm' | 'vm' | 'fncall'

export type NetworkMode = 'none' | 'host'

export interface SandboxResources {
  /** CPUs (fractional allowed): a CFS quota of cpu × period, and cpu shares weighted by it. */
  cpu?: number
  /** Memory limit in MiB (memory + swap: no swap beyond it). The OOM killer acts inside the sandbox past it. */
  memoryMiB?: number
  /** Maximum number of processes/threads in the sandbox (the agent included). */
  pids?: number
}

export interface SandboxSpec {
  /** [a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}; unique on the node. */
  id: string
  /** The sandbox's root filesystem (e.g. a RootfsBuilder overlay); written to by the sandbox. */
  rootfsDir: string
  /** Environment of the agent and so the default environment of every exec. */
  env?: Record<string, string>
  /** Working directory of the agent and the default cwd of every exec (created if missing). Default '/'. */
  workdir?: string
  /**
   * Default identity for workload commands. The agent itself runs as root (it must, to switch users);
   * callers pass `handle.defaults.user` to exec/spawn/files. Default 'root'.
   */
  user?: string
  resources?: SandboxResources
  /** 'none' (default): own network namespace with loopback only. 'host': the host's network. */
  network?: NetworkMode
  /** Default: the sandbox id truncated to 63 characters. */
  hostname?: string
  /** Directory owned by this sandbox for bundle, runtime state, control socket and logs. Created if missing. */
  stateDir: string
}

export interface SandboxStatus {
  state: 'running' | 'stopped'
  /** The init (agent) exit code, when the backend knows it. */
  exitCode?: number
  /** Whether the kernel OOM killer killed any process of the sandbox. */
  oomKilled: boolean
  /** How many processes the OOM killer killed in this sandbox (0 when unknown). */
  oomKills: number
}

export interface SandboxHandle {
  readonly id: string
  readonly backend: BackendKind
  readonly agent: AgentClient
  /** Host pid of the sandbox's init (for a VM: of the hypervisor process). */
  readonly pid: number
  readonly stateDir: string
  /** Defaults from the spec that callers apply per request (the agent runs as root). */
  readonly defaults: { user: string; workdir: string }
  status(): Promise<SandboxStatus>
  /**
   * The OOM kills counted in the sandbox so far, read from its memory cgroup
   * without asking the runtime (cheap enough to read around every command);
   * the last value seen once the cgroup is gone, 0 when unknown.
   */
  oomKills(): number
  /** Signals the sandbox's init (default SIGKILL, which stops the whole sandbox). */
  kill(signal?: NodeJS.Signals): Promise<void>
  /** Stops the sandbox if needed and removes every trace of it (processes, cgroups, runtime state, stateDir). Idempotent. */
  delete(): Promise<void>
}

export interface SandboxBackend {
  readonly kind: BackendKind
  create(spec: SandboxSpec): Promise<SandboxHandle>
  /** Re-attaches to a sandbox created by an earlier process. SANDBOX_GONE if nothing is left of it. */
  adopt(id: string, stateDir: string): Promise<SandboxHandle>
}
