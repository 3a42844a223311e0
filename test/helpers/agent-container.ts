// Runs the static agent as PID 1 of a real runc container, the way the
// container backend will: the host creates the listening control socket
// outside the rootfs, passes it as fd 3 (`runc run -d --preserve-fds 1`),
// closes its own copy, and talks to the agent through AgentClient. Docker's
// default capability set (no CAP_SYS_PTRACE, no CAP_SYS_ADMIN), pid, mount,
// ipc, uts and network namespaces, Docker's masked and read-only /proc paths.
import { execFileSync, spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { ExecutionContext } from 'ava'
import { native } from '../../fs/common/native.js'
import { AgentClient, agentBinaryPath } from '../../sandbox/backends/agent/index.js'
import { REPO, tmpDir, until } from './procs.js'

export const hasRunc = (() => {
  try { execFileSync('runc', ['--version']); return process.getuid?.() === 0 } catch { return false }
})()

const DOCKER_CAPS = ['CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID',
  'CAP_SETUID', 'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE']

export interface AgentContainerOptions {
  rootfs: string
  /** Extra bind mounts (host source -> container destination). */
  binds?: Array<{ source: string; destination: string; readonly?: boolean }>
  agentArgs?: string[]
  /** Misconfiguration on purpose: bind-mount the control socket into the sandbox at this path. */
  leakSocketTo?: string
  /** Extra env for the agent (and so for every exec). */
  env?: string[]
  /** Run to be torn down by the test (default) or leave teardown to the caller. */
  cleanup?: () => void
}

export interface AgentContainer {
  client: AgentClient
  id: string
  /** Host pid of the agent (PID 1 inside). */
  hostPid: number
  dir: string
  socketPath: string
  logFile: string
  runc(...args: string[]): string
  /** Processes of the container's pid namespace, seen from the host. */
  procs(): Array<{ hostPid: number; comm: string; state: string; ppid: number }>
  /** The agent's peak and current resident set (kB). */
  rss(): { hwmKb: number; rssKb: number }
  /** The container's pids cgroup: tasks now, and how many forks the limit refused so far. */
  pids(): { current: number; refused: number }
  log(): string
}

function procStat(pid: number): { comm: string; state: string; ppid: number } | null {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const close = s.lastIndexOf(')')
    const rest = s.slice(close + 2).split(' ')
    return { comm: s.slice(s.indexOf('(') + 1, close), state: rest[0]!, ppid: Number(rest[1]) }
  } catch {
    return null
  }
}

export async function startAgentContainer(t: ExecutionContext, opts: AgentContainerOptions): Promise<AgentContainer> {
  const dir = tmpDir(t, 'strata-agent-')
  const id = `strata-agent-test-${crypto.randomBytes(4).toString('hex')}`
  const state = path.join(dir, 'runc-state')
  const bundle = path.join(dir, 'bundle')
  const socketPath = path.join(dir, 'agent.sock')
  const logFile = path.join(dir, 'agent.log')
  fs.mkdirSync(bundle)
  fs.chmodSync(dir, 0o700)
  const config = {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: ['/.strata/agent', ...(opts.agentArgs ?? [])],
      env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', 'LANG=C.UTF-8', ...(opts.env ?? [])],
      cwd: '/',
      capabilities: { bounding: DOCKER_CAPS, effective: DOCKER_CAPS, permitted: DOCKER_CAPS },
      noNewPrivileges: true,
    },
    root: { path: opts.rootfs, readonly: false },
    hostname: 'sandbox',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/.strata/agent', type: 'bind', source: agentBinaryPath(), options: ['bind', 'ro', 'nosuid', 'nodev'] },
      ...(opts.leakSocketTo ? [{ destination: opts.leakSocketTo, type: 'bind', source: socketPath, options: ['bind'] }] : []),
      ...(opts.binds ?? []).map((b) => ({ destination: b.destination, type: 'bind', source: b.source, options: ['bind', ...(b.readonly === false ? [] : ['ro'])] })),
    ],
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      resources: { devices: [{ allow: false, access: 'rwm' }], pids: { limit: 512 } },
      maskedPaths: ['/proc/acpi', '/proc/asound', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list',
        '/proc/timer_stats', '/proc/sched_debug', '/sys/firmware', '/proc/scsi'],
      readonlyPaths: ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'],
    },
  }
  fs.writeFileSync(path.join(bundle, 'config.json'), JSON.stringify(config))
  const runc = (...args: string[]): string => execFileSync('runc', ['--root', state, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }).toString()

  const listenFd = native().unixListen(socketPath, 128)
  const logFd = fs.openSync(logFile, 'a')
  let started = false
  t.teardown(() => {
    if (started) {
      try { runc('kill', id, 'KILL') } catch {}
      try { runc('delete', '-f', id) } catch (e) { t.log(`runc delete ${id}: ${(e as Error).message}`) }
    }
    opts.cleanup?.()
  })
  try {
    const child = spawn('runc', ['--root', state, 'run', '-d', '--preserve-fds', '1', '--bundle', bundle, id], {
      stdio: ['ignore', logFd, logFd, listenFd],
    })
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)))
    started = true
    if (code !== 0) throw new Error(`runc run exited ${code}: ${fs.readFileSync(logFile, 'utf8')}`)
  } finally {
    fs.closeSync(listenFd) // the agent holds the only copy from here on
    fs.closeSync(logFd)
  }
  const st = JSON.parse(runc('state', id)) as { pid: number; status: string }
  const client = new AgentClient(socketPath)
  t.teardown(() => client.close())
  await until(() => client.ping().then(() => true), 10000, 'agent ping')
  const nsOf = (pid: number | string): string | null => { try { return fs.readlinkSync(`/proc/${pid}/ns/pid`) } catch { return null } }
  const ns = nsOf(st.pid)
  return {
    client,
    id,
    hostPid: st.pid,
    dir,
    socketPath,
    logFile,
    runc,
    procs: () => {
      const out: Array<{ hostPid: number; comm: string; state: string; ppid: number }> = []
      for (const p of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(p) || nsOf(p) !== ns) continue
        const s = procStat(Number(p))
        if (s) out.push({ hostPid: Number(p), ...s })
      }
      return out
    },
    rss: () => {
      const s = fs.readFileSync(`/proc/${st.pid}/status`, 'utf8')
      return { hwmKb: Number(/VmHWM:\s+(\d+)/.exec(s)?.[1]), rssKb: Number(/VmRSS:\s+(\d+)/.exec(s)?.[1]) }
    },
    log: () => fs.readFileSync(logFile, 'utf8'),
    pids: () => {
      const rel = /^\d+:pids:(.*)$/m.exec(fs.readFileSync(`/proc/${st.pid}/cgroup`, 'utf8'))?.[1]
      if (rel === undefined) throw new Error(`no pids cgroup for ${st.pid}`)
      const dir = path.join('/sys/fs/cgroup/pids', rel)
      const events = fs.readFileSync(path.join(dir, 'pids.events'), 'utf8')
      return { current: Number(fs.readFileSync(path.join(dir, 'pids.current'), 'utf8')), refused: Number(/^max (\d+)/m.exec(events)?.[1] ?? 0) }
    },
  }
}

let probePath: string | undefined

/** The attack probe (test/sandbox/backends/agent/probe.c), compiled static once per run. */
export function probeBinary(): string {
  if (probePath) return probePath
  const src = path.join(REPO, 'test/sandbox/backends/agent/probe.c')
  const hash = crypto.createHash('sha256').update(fs.readFileSync(src)).digest('hex').slice(0, 16)
  const out = path.join(os.tmpdir(), `strata-agent-probe-${hash}`)
  if (!fs.existsSync(out)) {
    const tmp = `${out}.${process.pid}`
    execFileSync('gcc', ['-static', '-O1', '-o', tmp, src])
    fs.renameSync(tmp, out)
  }
  probePath = out
  return out
}

/** Parses the probe's "name result" lines. */
export function parseProbe(out: string): Record<string, string> {
  const r: Record<string, string> = {}
  for (const line of out.split('\n')) {
    const i = line.indexOf(' ')
    if (i > 0) r[line.slice(0, i)] = line.slice(i + 1)
  }
  return r
}
