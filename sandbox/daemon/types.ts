// The node daemon's API shapes: what the HTTP API takes and returns as JSON
// (docs/sandbox-api.md), shared by the daemon and the SDK so the two cannot
// drift apart.
import type { BackendKind, NetworkMode } from '../backends/index.js'
import type { ExitInfo } from '../backends/agent/index.js'

export interface DatasetMountSpec {
  /** absolute path in the DFS (a directory or a regular file) */
  source: string
  /** absolute path inside the sandbox */
  target: string
}

export interface ResourceSpec {
  /** CPUs, fractional allowed (a CFS quota). Default: the node's default. */
  cpu?: number
  memoryMiB?: number
  pids?: number
}

export interface LifetimeSpec {
  /** Reclaim the sandbox after this many seconds without API activity (exec, files, processes). */
  idleTtlSec?: number
  /** Reclaim the sandbox this many seconds after it was created, busy or not. */
  maxLifetimeSec?: number
}

export interface CreateSandboxRequest {
  /** Only 'container' on this node for now. Default 'container'. */
  backend?: BackendKind
  /** An image in the node's store: NAME[:TAG] or NAME@sha256:… . Exclusive with base. */
  image?: string
  /** Layered like `strata image compose`: the base image's layers, then workspace's, then each toolkit's. */
  base?: string
  workspace?: string
  toolkits?: string[]
  /** Read-only bind mounts of DFS paths. */
  mounts?: DatasetMountSpec[]
  resources?: ResourceSpec
  lifetime?: LifetimeSpec
  /** Added to the image's environment (the image's values are the defaults). */
  env?: Record<string, string>
  /** Default cwd of commands. Default: the image's workdir, else '/'. */
  workdir?: string
  /** Default user of commands. Default: the image's user, else root. */
  user?: string
  labels?: Record<string, string>
  /** 'none' (default): loopback only. */
  network?: NetworkMode
  hostname?: string
  /**
   * The same key within 24 h returns the sandbox the first request made
   * (IDEMPOTENCY_MISMATCH if the request differs), so a retried create never
   * makes two sandboxes.
   */
  idempotencyKey?: string
}

export type SandboxState = 'creating' | 'running' | 'stopped'

export type StopReason =
  /** the sandbox's init (the agent) exited on its own */
  | 'exited'
  /** the kernel OOM killer killed the sandbox's init */
  | 'oom'
  /** kill was called */
  | 'killed'
  | 'idle_ttl'
  | 'max_lifetime'
  /** the daemon found its runtime state gone after a restart */
  | 'lost'

export interface SandboxInfo {
  id: string
  backend: BackendKind
  state: SandboxState
  /** set when state is 'stopped' */
  stop?: { reason: StopReason; at: string; message: string; oomKills: number }
  createdAt: string
  /** create returned (the agent answered) */
  startedAt?: string
  lastActivityAt: string
  /** milliseconds the create took on the node (resolve, rootfs, runtime, agent) */
  createMs?: number
  labels: Record<string, string>
  image?: { ref: string; digest: string }
  /** a sandbox made from base/workspace/toolkits: each image as given, its manifest digest, in layer order */
  composedOf?: Array<{ kind: string; ref: string; digest: string }>
  layers: Array<{ digest: string; kind: string; size: number }>
  mounts: DatasetMountSpec[]
  resources: ResourceSpec
  lifetime: LifetimeSpec
  env: Record<string, string>
  workdir: string
  user: string
  network: NetworkMode
  hostname: string
  /** host pid of the sandbox's init */
  pid?: number
  /** processes the OOM killer killed in this sandbox so far */
  oomKills: number
  idempotencyKey?: string
  /**
   * true when create handed out a sandbox of the node's warm pool, started
   * before the request (createMs is then the time to hand it out)
   */
  pooled?: boolean
  /** set on the node's record while a deletion releases resources (never returned by the API) */
  deleted?: boolean
}

export interface ExecRequest {
  /** A string runs through /bin/sh -c; an array is argv. */
  cmd: string | string[]
  env?: Record<string, string>
  cwd?: string
  user?: string
  timeoutMs?: number
  /** per stream; head and tail are kept */
  maxOutputBytes?: number
  /** base64; exec only (a process takes stdin through its own endpoint) */
  stdin?: string
}

/** One line of an exec or process output stream (application/x-ndjson). */
export type OutputEvent =
  | { type: 'started'; pid: number }
  | { type: 'stdout' | 'stderr'; data: string /* base64 */ }
  | ({ type: 'exit' } & ExitEvent)
  | { type: 'error'; code: string; message: string }

/** How a command ended, as the agent reports it (without coreDumped, which a signal name already implies). */
export type ExitEvent = Omit<ExitInfo, 'coreDumped'> & {
  /**
   * The command died of SIGKILL (not its timeout) and the sandbox's memory
   * cgroup counted an OOM kill while it ran: the OOM killer killed it (or,
   * rarely, killed another process of the sandbox at the same moment the
   * command was SIGKILLed by someone else).
   */
  oomKilled: boolean
}

export interface ListFilter {
  labels?: Record<string, string>
  state?: SandboxState
}

export interface CreateManyResult {
  results: Array<{ ok: true; sandbox: SandboxInfo } | { ok: false; error: { code: string; message: string } }>
}

export interface NodeInfo {
  version: string
  nodeId: string
  /** `deleting`: deletions still releasing mounts, cgroups and directories in the background */
  sandboxes: { running: number; stopped: number; creating: number; deleting: number }
  /** the warm pools of the node's config: sandboxes started ahead of the creates that will take them */
  pool: WarmPoolInfo[]
  capacity: {
    memAvailableMiB: number
    memTotalMiB: number
    reserveMemoryMiB: number
    threads: number
    threadsMax: number
    diskFreeMiB: number
    reserveDiskMiB: number
    maxSandboxes: number
  }
  layers: Array<{ digest: string; users: number }>
}

/**
 * A warm pool: `count` sandboxes of `image` kept started on the node. A create
 * takes one instead of starting a sandbox when it asks for nothing a started
 * sandbox cannot still get: the same image (the digest its tag names now),
 * the same resources and network (after the node's defaults), and no mounts,
 * env, workdir, user or hostname. Labels, lifetime and idempotency keys are
 * the daemon's and apply as usual. The pool refills in the background.
 */
export interface WarmPoolSpec {
  image: string
  count: number
  resources?: ResourceSpec
  network?: NetworkMode
}

export interface WarmPoolInfo {
  image: string
  resources: ResourceSpec
  network: NetworkMode
  /** the configured count */
  target: number
  ready: number
  building: number
  /** creates served from the pool since the daemon started */
  claims: number
  /** manifest digest of the sandboxes ready now (null while none is) */
  digest: string | null
  /** why the last refill failed (cleared by the next success); refills are retried every few seconds */
  lastError?: string
}
