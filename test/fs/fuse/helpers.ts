// FUSE test setup: a cluster with meta servers (test/helpers/meta-cluster.ts)
// and FUSE daemons as child processes of the test. The test process drives
// the mount only through child processes (shell, python3, fio, git, tar) or
// async fs calls, never synchronous ones: a blocked sync call would stall
// the test's event loop, and with it any in-process meta server the daemon
// is waiting on. Every mount is stopped and cleared at teardown, even when
// the test failed.

import fs from 'node:fs'
import path from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import type { ExecutionContext } from 'ava'
import type { FuseDaemonConfig } from '../../../fs/fuse/config.js'
import { waitMounted } from '../../../fs/fuse/control.js'
import { findMount, forceUnmount, waitUnmounted } from '../../../fs/fuse/mounts.js'
import { fuseAvailable } from '../../../fs/fuse/native.js'
import { startMetaCluster, type MetaCluster, type MetaClusterOptions } from '../../helpers/meta-cluster.js'
import { CLI, TEST_TIMERS } from '../../helpers/procs.js'

/** Why FUSE tests cannot run here ('' when they can). */
export function fuseSkipReason(): string {
  const a = fuseAvailable()
  if (!a.ok) return a.reason
  if (!fs.existsSync('/dev/fuse')) return '/dev/fuse is missing'
  if (typeof process.getuid === 'function' && process.getuid() !== 0) return 'FUSE tests mount as root'
  return ''
}

export interface FuseMount {
  mnt: string
  pid: number
  child: ChildProcess
  configFile: string
  logFile: string
  config: FuseDaemonConfig
  log(): string
  /** SIGTERM; the daemon unmounts and flushes. Resolves with its exit code. */
  stop(): Promise<number | null>
  /** SIGKILL the daemon and clear its dead mount */
  kill(): Promise<void>
  /** resolves with the exit code once the daemon exited */
  exited: Promise<number | null>
}

let seq = 0

/** Starts a FUSE daemon child process on the cluster and waits until the mount is live. */
export async function mountFuse(t: ExecutionContext, m: MetaCluster, o: Partial<FuseDaemonConfig> & { name?: string; env?: NodeJS.ProcessEnv } = {}): Promise<FuseMount> {
  const name = o.name ?? `mnt-${++seq}`
  const dir = m.c.dir
  const mnt = path.join(dir, name)
  const stateFile = path.join(dir, `${name}.state.json`)
  const { name: _n, env, ...rest } = o
  const config: FuseDaemonConfig = {
    mountpoint: mnt,
    mgmtdAddresses: [m.c.mgmtdAddress],
    metaFallbackAddresses: m.metaAddresses,
    stateFile,
    attrTimeout: 0.001,
    entryTimeout: 0.001,
    periodicSyncMs: 1000,
    timers: { routingRefreshMs: TEST_TIMERS.routingRefreshMs },
    storageRetry: { deadlineMs: 60_000, readDeadlineMs: 60_000 },
    metaRetry: { totalMs: 60_000 },
    ...rest,
  }
  const configFile = path.join(dir, 'config', `fuse-${name}.json`)
  const logFile = path.join(dir, 'logs', `fuse-${name}.log`)
  fs.mkdirSync(path.dirname(configFile), { recursive: true })
  fs.mkdirSync(path.dirname(logFile), { recursive: true })
  fs.writeFileSync(configFile, JSON.stringify(config, null, 2))
  const out = fs.openSync(logFile, 'a')
  const child = spawn(process.execPath, [CLI, 'daemon', 'fuse', '--config', configFile, '--name', `fuse-${name}`], {
    stdio: ['ignore', out, out],
    env: { ...process.env, STRATA_LOG_LEVEL: 'info', ...env },
  })
  fs.closeSync(out)
  let exitCode: number | null | undefined
  const exited = new Promise<number | null>((r) =>
    child.once('exit', (code, sig) => {
      exitCode = code ?? (sig ? 128 : null)
      r(exitCode)
    }),
  )
  const log = () => {
    try {
      return fs.readFileSync(logFile, 'utf8')
    } catch {
      return ''
    }
  }
  const clear = async () => {
    if (findMount(mnt)) await forceUnmount(mnt)
  }
  const stop = async (): Promise<number | null> => {
    if (exitCode === undefined) {
      child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000)
      await exited
      clearTimeout(timer)
    }
    if (!(await waitUnmounted(mnt, 2000))) await clear()
    return exitCode ?? null
  }
  const kill = async (): Promise<void> => {
    if (exitCode === undefined) {
      child.kill('SIGKILL')
      await exited
    }
    await clear()
  }
  t.teardown(async () => {
    await stop().catch(() => kill())
    if (findMount(mnt)) await clear()
  })
  try {
    await waitMounted({ mountpoint: mnt, stateFile, pid: child.pid!, logFile, deadline: Date.now() + 60_000, isAlive: () => exitCode === undefined })
  } catch (e) {
    t.log(log())
    throw e
  }
  return { mnt, pid: child.pid!, child, configFile, logFile, config, log, stop, kill, exited }
}

export interface FuseCluster {
  m: MetaCluster
  mount(o?: Partial<FuseDaemonConfig> & { name?: string; env?: NodeJS.ProcessEnv }): Promise<FuseMount>
}

export async function startFuseCluster(t: ExecutionContext, o: MetaClusterOptions = {}): Promise<FuseCluster> {
  const m = await startMetaCluster(t, o)
  return { m, mount: (mo) => mountFuse(t, m, mo) }
}

export interface ShResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  ms: number
}

/** Runs a bash script in a child process (never blocks the test's event loop). */
export function sh(script: string, o: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string } = {}): Promise<ShResult> {
  return run('bash', ['-euo', 'pipefail', '-c', script], o)
}

/** Runs a python3 script (argv after the script). */
export function py(script: string, args: string[] = [], o: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string } = {}): Promise<ShResult> {
  return run('python3', ['-c', script, ...args], o)
}

export function run(cmd: string, args: string[], o: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string } = {}): Promise<ShResult> {
  const t0 = Date.now()
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: o.cwd, env: { ...process.env, ...o.env }, stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    // a hang guard, not a timing check: a loaded machine (load 35 seen) ran git clone + fsck past 120 s
    const timer = setTimeout(() => child.kill('SIGKILL'), o.timeoutMs ?? 240_000)
    child.on('error', (e) => {
      clearTimeout(timer)
      resolve({ code: null, signal: null, stdout, stderr: stderr + e.message, ms: Date.now() - t0 })
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      resolve({ code, signal, stdout, stderr, ms: Date.now() - t0 })
    })
    if (o.input !== undefined) child.stdin.end(o.input)
    else child.stdin.end()
  })
}

/** Fails the test with the command's output when it did not exit 0. */
export function ok(t: ExecutionContext, r: ShResult, what: string): void {
  if (r.code !== 0) t.fail(`${what} exited ${r.code ?? r.signal}\nstdout:\n${r.stdout.slice(-4000)}\nstderr:\n${r.stderr.slice(-4000)}`)
  else t.pass(what)
}

export { patternBytes } from '../../helpers/random.js'

/**
 * A python helper the mount scripts share (they need `import errno`):
 * expect_err(ERRNO, fn, *args) passes when fn(*args) fails with exactly that errno.
 */
export const PY_EXPECT_ERR = String.raw`def expect_err(code, fn, *a):
    try:
        fn(*a)
    except OSError as e:
        assert e.errno == code, (fn.__name__, a, errno.errorcode.get(e.errno), 'want', errno.errorcode[code])
        return
    raise AssertionError(('no error', fn.__name__, a, 'want', errno.errorcode[code]))`
