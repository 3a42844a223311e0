// Admission control: a create is refused with a typed error when the node
// would run out of memory, pids or disk, rather than started and left to
// degrade every sandbox already on the node. The figures are the kernel's
// live ones (MemAvailable, the thread count against pid_max and threads-max,
// free blocks of the state filesystem), checked against reserves the node
// keeps for itself, plus what the new sandbox is expected to take at least.
import fs from 'node:fs'
import { StrataError } from '../../fs/common/errors.js'

export interface AdmissionLimits {
  /** memory the node keeps free for itself and the DFS daemons */
  reserveMemoryMiB: number
  /** free disk kept on the state directory's filesystem */
  reserveDiskMiB: number
  /** threads kept free below min(pid_max, threads-max) */
  reservePids: number
  /** sandboxes (running and creating) on the node */
  maxSandboxes: number
  /** per-sandbox ceilings on what a request may ask for */
  maxMemoryMiB: number
  maxPids: number
  maxCpu: number
}

export interface NodeCapacity {
  memAvailableMiB: number
  memTotalMiB: number
  threads: number
  threadsMax: number
  diskFreeMiB: number
}

/** What an idle sandbox costs at least (agent, runtime state, page tables): measured in bench/sandbox.ts. */
export const MIN_SANDBOX_MEMORY_MIB = 2
export const MIN_SANDBOX_DISK_MIB = 1
export const MIN_SANDBOX_PIDS = 2

function readInt(file: string): number {
  return Number(fs.readFileSync(file, 'utf8').trim())
}

export function nodeCapacity(stateDir: string): NodeCapacity {
  const mem = fs.readFileSync('/proc/meminfo', 'utf8')
  const kib = (name: string): number => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(mem)?.[1] ?? 0)
  // the 4th field of loadavg is runnable/total scheduling entities (threads)
  const threads = Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[3]?.split('/')[1] ?? 0)
  const threadsMax = Math.min(readInt('/proc/sys/kernel/pid_max'), readInt('/proc/sys/kernel/threads-max'))
  const st = fs.statfsSync(stateDir)
  return {
    memAvailableMiB: Math.floor(kib('MemAvailable') / 1024),
    memTotalMiB: Math.floor(kib('MemTotal') / 1024),
    threads,
    threadsMax,
    diskFreeMiB: Math.floor((st.bavail * st.bsize) / (1024 * 1024)),
  }
}

/** Refuses what exceeds a configured ceiling (QUOTA_EXCEEDED: asking again will not help). */
export function checkQuota(limits: AdmissionLimits, live: number, req: { memoryMiB?: number; pids?: number; cpu?: number }): void {
  // detail: which limit, its maximum, and what the create asked for (for the count: the count it would make)
  if (live >= limits.maxSandboxes) {
    throw new StrataError('QUOTA_EXCEEDED', `the node runs its maximum of ${limits.maxSandboxes} sandboxes (this create would make ${live + 1})`,
      { detail: { limit: 'maxSandboxes', max: limits.maxSandboxes, requested: live + 1 } })
  }
  const over = (what: string, asked: number, max: number): never => {
    throw new StrataError('QUOTA_EXCEEDED', `resources.${what} ${asked} exceeds the node's per-sandbox maximum ${max}`, { detail: { limit: `resources.${what}`, max, requested: asked } })
  }
  if (req.memoryMiB !== undefined && req.memoryMiB > limits.maxMemoryMiB) over('memoryMiB', req.memoryMiB, limits.maxMemoryMiB)
  if (req.pids !== undefined && req.pids > limits.maxPids) over('pids', req.pids, limits.maxPids)
  if (req.cpu !== undefined && req.cpu > limits.maxCpu) over('cpu', req.cpu, limits.maxCpu)
}

/** Refuses when the node lacks the room right now (CAPACITY_UNAVAILABLE: retry later or elsewhere). */
export function checkCapacity(limits: AdmissionLimits, cap: NodeCapacity, inFlight: number): void {
  const refuse = (resource: string, msg: string): never => {
    throw new StrataError('CAPACITY_UNAVAILABLE', msg, { detail: { resource, ...cap } })
  }
  const n = inFlight + 1
  if (cap.memAvailableMiB - n * MIN_SANDBOX_MEMORY_MIB < limits.reserveMemoryMiB) {
    refuse('memory', `the node has ${cap.memAvailableMiB} MiB available and keeps ${limits.reserveMemoryMiB} MiB in reserve`)
  }
  if (cap.threads + n * MIN_SANDBOX_PIDS > cap.threadsMax - limits.reservePids) {
    refuse('pids', `the node runs ${cap.threads} threads of at most ${cap.threadsMax} and keeps ${limits.reservePids} in reserve`)
  }
  if (cap.diskFreeMiB - n * MIN_SANDBOX_DISK_MIB < limits.reserveDiskMiB) {
    refuse('disk', `the state filesystem has ${cap.diskFreeMiB} MiB free and keeps ${limits.reserveDiskMiB} MiB in reserve`)
  }
}
