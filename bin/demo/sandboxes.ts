// The batch of sandboxes, through the SDK (sandbox/sdk) against the node
// daemon that `cluster up` started: one create on a cold node (it mounts the
// layers), the rest with createMany; in each, a first python3 command (the
// interpreter's pages come lazily from the image in the DFS), the toolkit's
// stats.py over the dataset at /data (checked against the host's numbers) and
// the write probe (EROFS on /data, /tmp writable); then every sandbox deleted.

import type { CreateSandboxRequest } from '../../sandbox/daemon/index.js'
import type { ExecResult, Sandbox, Strata } from '../../sandbox/sdk/index.js'
import { DATASET_DIR } from './dataset.js'
import { BASE_IMAGE, TOOLKIT_IMAGE, ref } from './images.js'
import { summarize, type LatencySummary } from './latency.js'
import { PROBE_PY, STATS_PY, compareStats, type DatasetStats } from './toolkit.js'

export const DATA_TARGET = '/data'
export const RUN_LABEL = 'strata-demo'
const EXEC_TIMEOUT_MS = 180_000

export function sandboxSpec(runId: string): CreateSandboxRequest {
  return {
    backend: 'container',
    base: ref(BASE_IMAGE),
    toolkits: [ref(TOOLKIT_IMAGE)],
    mounts: [{ source: DATASET_DIR, target: DATA_TARGET }],
    resources: { cpu: 1, memoryMiB: 256, pids: 128 },
    // should the demo die without its teardown, the daemon reclaims them anyway
    lifetime: { idleTtlSec: 900, maxLifetimeSec: 3600 },
    labels: { app: RUN_LABEL, run: runId },
  }
}

export interface CreateFigures {
  /** the first sandbox alone, on a node with no layer mounted yet (client wall / node-side) */
  cold: { wallMs: number; nodeMs: number }
  /** createMany of the rest */
  batch: { count: number; wallMs: number; node: LatencySummary; failed: number; perSec: number } | null
  /** node-side create times of every sandbox */
  all: LatencySummary
}

/**
 * Creates `count` sandboxes: one, then createMany(count - 1) while polling
 * the node's list (by the run's label) for progress. Every sandbox made is
 * passed to `made` at once, so a failure later still deletes it.
 */
export async function createSandboxes(strata: Strata, count: number, runId: string, update: (d: string) => void, made: (sb: Sandbox) => void): Promise<CreateFigures> {
  const spec = sandboxSpec(runId)
  update('1st sandbox (cold node: mounts the layers)')
  let t0 = performance.now()
  const first = await strata.sandboxes.create(spec)
  made(first)
  const cold = { wallMs: performance.now() - t0, nodeMs: first.info.createMs ?? NaN }
  if (count === 1) return { cold, batch: null, all: summarize([cold.nodeMs]) }

  const rest = count - 1
  update(`createMany(${rest})`)
  let polling = true
  const poll = (async () => {
    while (polling) {
      await new Promise((r) => setTimeout(r, 300))
      if (!polling) break
      const l = await strata.sandboxes.list({ labels: { run: runId } }).catch(() => null)
      if (l && polling) update(`createMany(${rest}): ${l.filter((s) => s.info.state === 'running').length - 1}/${rest} running, ${l.filter((s) => s.info.state === 'creating').length} creating`)
    }
  })()
  t0 = performance.now()
  let items
  try {
    items = await strata.sandboxes.createMany(spec, { count: rest })
  } finally {
    polling = false
    await poll
  }
  const wallMs = performance.now() - t0
  const failures: string[] = []
  const nodeMs: number[] = []
  for (const it of items) {
    if (it.ok) {
      made(it.sandbox)
      nodeMs.push(it.sandbox.info.createMs ?? NaN)
    } else failures.push(`${it.error.code}: ${it.error.message}`)
  }
  if (failures.length) throw new Error(`${failures.length} of ${rest} creates failed; first: ${failures[0]}`)
  return {
    cold,
    batch: { count: rest, wallMs, node: summarize(nodeMs), failed: failures.length, perSec: rest / (wallMs / 1000) },
    all: summarize([cold.nodeMs, ...nodeMs]),
  }
}

export interface SandboxRun {
  id: string
  /** client wall time of the sandbox's first command (python3 starting, importing what stats.py uses) */
  firstExecMs: number
  /** the agent's own measure of the same command */
  firstExecAgentMs: number
  /** client wall time of stats.py over /data */
  statsMs: number
  /** Python's time reading and hashing /data */
  readMs: number | null
  digest: string | null
  python: string | null
  statsOk: boolean
  differences: string[]
  probeMs: number
  probe: { dataset?: string; datasetError?: string; tmp?: string } | null
  probeOk: boolean
}

function parseJson(r: ExecResult): Record<string, unknown> | null {
  try {
    return JSON.parse(r.stdout.trim().split('\n').pop() ?? '') as Record<string, unknown>
  } catch {
    return null
  }
}

function why(r: ExecResult): string {
  const err = r.stderr.trim().split('\n').slice(-3).join(' | ')
  return `exit ${r.exitCode ?? r.signal}${r.timedOut ? ' (timed out)' : ''}${err ? `: ${err}` : ''}`
}

/** The modules stats.py imports: the first command loads them (and the interpreter) from the image. */
export const FIRST_CMD = ['python3', '-c', 'import hashlib, json, os, sys, time; print(sys.version.split()[0])']

/** The sandbox's first command: python3 starting cold (its pages come from the image's layer in the DFS). */
export async function runFirst(sb: Sandbox): Promise<Pick<SandboxRun, 'firstExecMs' | 'firstExecAgentMs' | 'python'>> {
  const t0 = performance.now()
  const r = await sb.exec(FIRST_CMD, { timeoutMs: EXEC_TIMEOUT_MS })
  const firstExecMs = performance.now() - t0
  if (r.exitCode !== 0) throw new Error(`python3 failed in ${sb.id}: ${why(r)}`)
  return { firstExecMs, firstExecAgentMs: r.durationMs, python: r.stdout.trim() }
}

/** stats.py over /data in one sandbox, compared with the host's numbers. */
export async function runStats(sb: Sandbox, expected: DatasetStats): Promise<Pick<SandboxRun, 'statsMs' | 'readMs' | 'digest' | 'statsOk' | 'differences'>> {
  const t0 = performance.now()
  const r = await sb.exec(['python3', STATS_PY, DATA_TARGET], { timeoutMs: EXEC_TIMEOUT_MS })
  const statsMs = performance.now() - t0
  const out = r.exitCode === 0 ? parseJson(r) : null
  const differences = r.exitCode !== 0 ? [`stats.py failed: ${why(r)}`] : compareStats(expected, out)
  return {
    statsMs,
    readMs: typeof out?.readMs === 'number' ? out.readMs : null,
    digest: typeof out?.digest === 'string' ? out.digest : null,
    statsOk: differences.length === 0,
    differences,
  }
}

/** The write probe: /data must refuse with EROFS, /tmp must take the write. */
export async function runProbe(sb: Sandbox): Promise<Pick<SandboxRun, 'probeMs' | 'probe' | 'probeOk'>> {
  const t0 = performance.now()
  const r = await sb.exec(['python3', PROBE_PY, DATA_TARGET], { timeoutMs: EXEC_TIMEOUT_MS })
  const probeMs = performance.now() - t0
  const out = parseJson(r) as SandboxRun['probe']
  return { probeMs, probe: out ?? { dataset: `no output (${why(r)})` }, probeOk: r.exitCode === 0 && out?.dataset === 'EROFS' && out?.tmp === 'ok' }
}

/** Runs `fn` on every item with all of them in flight; `tick` after each. */
export async function each<T, R>(items: readonly T[], fn: (x: T, i: number) => Promise<R>, tick: (done: number) => void): Promise<R[]> {
  let done = 0
  return Promise.all(
    items.map(async (x, i) => {
      const r = await fn(x, i)
      tick(++done)
      return r
    }),
  )
}
