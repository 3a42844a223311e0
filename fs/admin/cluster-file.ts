// Where a local cluster lives and what `DIR/cluster.json` records about it.
//
//   DIR/cluster.json          name, settings, processes, mgmtd addresses, layout
//   DIR/config/<name>.json    each process's daemon config (kept across restarts)
//   DIR/logs/<name>.log       each process's stdout+stderr (appended)
//   DIR/data/<name>/          each process's data directory
//   DIR/mounts/<name>.json    each running `strata fs mount` of the cluster (fs/fuse/cluster-mounts.ts)

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { StrataError, fromSystemError } from '../common/errors.js'
import { replaceFile } from '../common/atomic-file.js'
import type { ClusterLayout } from './placement.js'

export const CLUSTER_FILE = 'cluster.json'
export const CLUSTER_ENV = 'STRATA_CLUSTER'

/**
 * The cluster directory a command talks to: the explicit option (`--dir` or
 * `--cluster`), else `$STRATA_CLUSTER`, else `~/.strata/cluster`. Always absolute.
 */
export function resolveClusterDir(explicit?: string | null, env: NodeJS.ProcessEnv = process.env): string {
  const chosen = explicit || env[CLUSTER_ENV] || path.join(os.homedir(), '.strata', 'cluster')
  return path.resolve(chosen)
}

export type ProcessRole = 'mgmtd' | 'storage' | 'meta' | 'fuse' | (string & {})

export interface ClusterProcess {
  name: string
  role: ProcessRole
  nodeId: number
  /** host:port of the process's RPC server; fixed for the cluster's lifetime */
  address: string
  /** pid of the last start; liveness is checked against the config path in /proc */
  pid: number | null
  configFile: string
  logFile: string
  dataDir: string
  startedAt?: number
}

export type TimerProfile = 'local' | 'production'

export interface ClusterSettings {
  storageNodes: number
  targetsPerNode: number
  replicas: number
  chunkSize: number
  stripeSize: number
  chainTableId: number
  basePort: number | null
  mount: boolean
  sandbox: boolean
  /** warm pools of the sandbox daemon (`--warm-pool IMAGE=COUNT`); absent in older cluster files */
  warmPool?: Array<{ image: string; count: number }>
  timers: TimerProfile
  /** false: processes only; the operator runs init-cluster, create-target, upload-chains… */
  bootstrap: boolean
}

export interface ClusterFile {
  version: 1
  name: string
  /** ISO time of `cluster up` */
  created: string
  dir: string
  settings: ClusterSettings
  processes: ClusterProcess[]
  mgmtdAddresses: string[]
  /** the targets and chains `cluster up` created */
  layout: ClusterLayout
  /** 'creating' until the first `cluster up` finished; a failed one leaves it so the next up starts over */
  state?: 'creating' | 'ready'
}

export function clusterFilePath(dir: string): string {
  return path.join(dir, CLUSTER_FILE)
}

export function clusterExists(dir: string): boolean {
  return fs.existsSync(clusterFilePath(dir))
}

export function readClusterFile(dir: string): ClusterFile {
  const file = clusterFilePath(dir)
  let text: string
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') {
      throw new StrataError('CLUSTER_NOT_FOUND', `no cluster at ${dir} (missing ${CLUSTER_FILE}); start one with: strata cluster up --dir ${dir}`)
    }
    // a --dir that is a file (ENOTDIR) is the caller's mistake, like any local path (docs/errors.md)
    const code = fromSystemError(e)?.code ?? 'IO_ERROR'
    throw new StrataError(code, `cannot read ${file}: ${(e as Error).message}`, { cause: e })
  }
  try {
    const c = JSON.parse(text) as ClusterFile
    if (!c || !Array.isArray(c.processes) || !Array.isArray(c.mgmtdAddresses)) throw new Error('missing processes or mgmtdAddresses')
    return c
  } catch (e) {
    // the processes and mounts it started may still run: destroy --force finds them without it
    throw new StrataError(
      'BAD_CONFIG',
      `${file} is not a cluster description: ${(e as Error).message}; restore it, or stop what the cluster runs and delete ${dir} with: strata cluster destroy --force --dir ${dir}`,
      { cause: e },
    )
  }
}

/** Writes cluster.json atomically; in place on a full disk (see replaceFile). */
export function writeClusterFile(dir: string, c: ClusterFile): void {
  replaceFile(clusterFilePath(dir), JSON.stringify(c, null, 2) + '\n')
}

export function findProcess(c: ClusterFile, name: string): ClusterProcess {
  const p = c.processes.find((x) => x.name === name)
  if (!p) throw new StrataError('NOT_FOUND', `no process "${name}" in cluster ${c.dir}; known: ${c.processes.map((x) => x.name).join(', ')}`)
  return p
}
