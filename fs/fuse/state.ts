// The state file a FUSE daemon writes once its mount is live: how `strata fs
// mount`, `cluster up` and tests learn that the mount is ready without
// touching it.

import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { replaceFile } from '../common/atomic-file.js'

export interface FuseState {
  pid: number
  mountpoint: string
  /** fusectl connection number (/sys/fs/fuse/connections/N) */
  connection: number
  mountedAt: string
  clientId: string
}

/** Reads a daemon's state file (undefined when missing or unreadable). */
export function readFuseState(file: string): FuseState | undefined {
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as FuseState
  } catch {
    return undefined
  }
}

export function writeFuseState(file: string, st: FuseState): void {
  fs.mkdirSync(path.dirname(file), { recursive: true })
  replaceFile(file, JSON.stringify(st, null, 2) + '\n')
}

// --- registry of live daemons by mount point (finds a --foreground daemon,
// whose command line names no config file)


export interface RegistryEntry {
  pid: number
  mountpoint: string
  configFile?: string
  /** the cluster directory whose DIR/mounts records this mount: `fs umount` of a mount whose daemon was killed finds it here */
  clusterDir?: string
}

/** /run/strata/fuse as root, else a per-user directory under the temp dir. */
export function registryDir(): string {
  const root = typeof process.getuid !== 'function' || process.getuid() === 0
  return root && fs.existsSync('/run') ? '/run/strata/fuse' : path.join(os.tmpdir(), `strata-fuse-${process.getuid?.() ?? 0}`)
}

function registryFile(mountpoint: string): string {
  return path.join(registryDir(), `${crypto.createHash('sha1').update(path.resolve(mountpoint)).digest('hex')}.json`)
}

export function registerDaemon(e: RegistryEntry): void {
  try {
    writeFuseState(registryFile(e.mountpoint), e as unknown as FuseState)
  } catch {
    // best effort: discovery falls back to scanning /proc
  }
}

export function unregisterDaemon(mountpoint: string, pid: number): void {
  const f = registryFile(mountpoint)
  try {
    const cur = JSON.parse(fs.readFileSync(f, 'utf8')) as RegistryEntry
    if (cur.pid === pid) fs.rmSync(f, { force: true })
  } catch {
    // gone already
  }
}

export function registeredDaemon(mountpoint: string): RegistryEntry | undefined {
  try {
    return JSON.parse(fs.readFileSync(registryFile(mountpoint), 'utf8')) as RegistryEntry
  } catch {
    return undefined
  }
}
