// Background daemons of a local cluster: spawn detached with output to a log
// file, check liveness (pid alive, not a zombie, and still running *our*
// config, so a recycled pid is not mistaken for the node), signal, wait.

import fs from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { pidAlive, scanDaemonProcesses, waitUntilGone } from '../common/daemon.js'
import { StrataError } from '../common/errors.js'
import type { ClusterProcess } from './cluster-file.js'

/** `<repo>/bin/strata.js`; STRATA_BIN overrides (e.g. an installed copy). */
export function strataBin(): string {
  return process.env.STRATA_BIN || fileURLToPath(new URL('../../../bin/strata.js', import.meta.url))
}

/** Starts `strata daemon <role> --config <file>` in its own process group, detached from us. */
export function spawnDaemon(p: ClusterProcess, extraEnv: NodeJS.ProcessEnv = {}): number {
  fs.mkdirSync(path.dirname(p.logFile), { recursive: true })
  const fd = fs.openSync(p.logFile, 'a')
  try {
    try {
      fs.writeSync(fd, `---- ${new Date().toISOString()} starting ${p.name} (${p.role}) on ${p.address}\n`)
    } catch (e) {
      // a full disk under the logs must not keep the cluster from starting (to free space through it)
      const code = (e as NodeJS.ErrnoException).code
      if (code !== 'ENOSPC' && code !== 'EDQUOT') throw e
    }
    const child = spawn(process.execPath, [strataBin(), 'daemon', p.role, '--config', p.configFile, '--name', p.name], {
      detached: true,
      stdio: ['ignore', fd, fd],
      cwd: path.dirname(p.configFile),
      env: { ...process.env, STRATA_LOG_LEVEL: 'info', ...extraEnv },
    })
    child.on('error', () => {}) // reported through liveness and the log
    child.unref()
    if (!child.pid) throw new StrataError('INTERNAL', `could not spawn ${p.name}`)
    return child.pid
  } finally {
    fs.closeSync(fd)
  }
}


/** True when `pid` runs and (where /proc exists) its command line names `configFile`. */
export function isAlive(pid: number | null | undefined, configFile?: string): boolean {
  if (!pidAlive(pid)) return false
  if (configFile) {
    try {
      const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')
      if (cmd.includes(configFile)) return true
      // a daemon started by hand may name its config relative to its working directory
      const i = cmd.indexOf('--config')
      const given = i >= 0 ? cmd[i + 1] : cmd.find((a) => a.startsWith('--config='))?.slice('--config='.length)
      if (!given || path.isAbsolute(given)) return false
      return path.resolve(fs.readlinkSync(`/proc/${pid}/cwd`), given) === configFile
    } catch {
      return false
    }
  }
  return true
}

/** Whether `file`'s real path (its directory's, if the file is gone) lies inside the real directory `realDir`. */
function realInside(file: string, realDir: string): boolean {
  let real: string
  try {
    real = fs.realpathSync(file)
  } catch {
    try {
      real = path.join(fs.realpathSync(path.dirname(file)), path.basename(file))
    } catch {
      return false
    }
  }
  return real.startsWith(realDir + path.sep)
}

/**
 * Every live `strata daemon <role> --config F` process whose config F lies
 * inside `dir` (a relative F is taken against the daemon's working
 * directory), as the cluster process it runs: what `cluster destroy --force`
 * stops when DIR/cluster.json cannot be read. A config merely named like
 * the directory (DIR-old/…) is not inside it; one reached through a symlink
 * to DIR (the cluster started as LINK/…, destroyed as DIR, or the reverse) is.
 */
export function daemonsUnder(dir: string): ClusterProcess[] {
  const root = path.resolve(dir)
  // the cluster may have been started through another path to DIR (a symlink, or DIR is one): the
  // config is inside DIR when its real path is inside DIR's real path
  let realRoot: string | null = null
  try {
    realRoot = fs.realpathSync(root)
  } catch {
    // DIR gone: only the names can match
  }
  const out: ClusterProcess[] = []
  for (const { pid, role, configFile, name: given } of scanDaemonProcesses()) {
    if (!configFile.startsWith(root + path.sep) && !(realRoot !== null && realInside(configFile, realRoot))) continue
    if (!isAlive(pid, configFile)) continue
    const name = given || path.basename(configFile, '.json')
    let nodeId = 0
    let address = ''
    try {
      const cfg = JSON.parse(fs.readFileSync(configFile, 'utf8')) as { nodeId?: unknown; listen?: unknown }
      if (typeof cfg.nodeId === 'number') nodeId = cfg.nodeId
      if (typeof cfg.listen === 'string') address = cfg.listen
    } catch {
      // config gone or unreadable: the process is still the cluster's
    }
    out.push({ name, role, nodeId, address, pid, configFile, logFile: path.join(root, 'logs', `${name}.log`), dataDir: '' })
  }
  return out
}

export function processAlive(p: ClusterProcess): boolean {
  return isAlive(p.pid, p.configFile)
}

export function signalProcess(p: ClusterProcess, signal: NodeJS.Signals): boolean {
  if (!processAlive(p)) return false
  try {
    process.kill(p.pid!, signal)
    return true
  } catch {
    return false
  }
}

/** Waits until every process is gone; returns the ones still alive at the deadline. */
export function waitExit(ps: ClusterProcess[], timeoutMs: number): Promise<ClusterProcess[]> {
  return waitUntilGone(ps, processAlive, timeoutMs)
}

/** SIGTERM, wait up to graceMs, then SIGKILL the stragglers. Returns names that needed SIGKILL. */
export async function stopProcesses(ps: ClusterProcess[], graceMs = 10_000): Promise<string[]> {
  for (const p of ps) signalProcess(p, 'SIGTERM')
  const left = await waitExit(ps, graceMs)
  for (const p of left) signalProcess(p, 'SIGKILL')
  const stuck = await waitExit(left, 5_000)
  if (stuck.length) throw new StrataError('TIMEOUT', `processes did not exit after SIGKILL: ${stuck.map((p) => `${p.name} (pid ${p.pid})`).join(', ')}`)
  return left.map((p) => p.name)
}

/** The last `lines` lines of a log file ('' if missing). */
export function logTail(file: string, lines = 20): string {
  try {
    const st = fs.statSync(file)
    const len = Math.min(st.size, 64 * 1024)
    const fd = fs.openSync(file, 'r')
    try {
      const buf = Buffer.alloc(len)
      fs.readSync(fd, buf, 0, len, st.size - len)
      const all = buf.toString('utf8').split('\n')
      if (all[all.length - 1] === '') all.pop()
      return all.slice(-lines).join('\n')
    } finally {
      fs.closeSync(fd)
    }
  } catch {
    return ''
  }
}
