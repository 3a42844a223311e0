// The OCI runtime spec (config.json) of a container sandbox: the static agent
// bind-mounted read-only at /.strata/agent as the process, own pid, mount, ipc,
// uts and (unless network 'host') network namespaces, cgroup limits, Docker's
// default capability set, masked and read-only /proc and /sys paths,
// no-new-privileges and a default-allow seccomp profile that denies what
// Docker's profile denies to an unprivileged container (see seccomp.ts).
import type { SandboxResources, NetworkMode } from '../types.js'
import { seccompProfile } from './seccomp.js'

export const AGENT_PATH_IN_SANDBOX = '/.strata/agent'

/** Docker's default capability set. */
export const DOCKER_CAPS = [
  'CAP_CHOWN', 'CAP_DAC_OVERRIDE', 'CAP_FSETID', 'CAP_FOWNER', 'CAP_MKNOD', 'CAP_NET_RAW', 'CAP_SETGID', 'CAP_SETUID',
  'CAP_SETFCAP', 'CAP_SETPCAP', 'CAP_NET_BIND_SERVICE', 'CAP_SYS_CHROOT', 'CAP_KILL', 'CAP_AUDIT_WRITE',
] as const

/** Docker's default masked paths (bind of /dev/null or an empty read-only tmpfs). */
export const MASKED_PATHS = [
  '/proc/asound', '/proc/acpi', '/proc/kcore', '/proc/keys', '/proc/latency_stats', '/proc/timer_list', '/proc/timer_stats',
  '/proc/sched_debug', '/proc/scsi', '/sys/firmware', '/sys/devices/virtual/powercap',
]

/** Docker's default read-only paths. */
export const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger']

export const CPU_PERIOD_US = 100_000

export interface OciSpecInput {
  rootfsDir: string
  agentBinary: string
  agentArgs: string[]
  env: Record<string, string>
  workdir: string
  hostname: string
  network: NetworkMode
  resources: SandboxResources
  cgroupsPath: string
  /** host files bind-mounted at /etc/hosts and /etc/hostname (see etcHosts); either may be left out */
  etcFiles?: { hosts?: string; hostname?: string }
}

/**
 * The sandbox's /etc/hosts, as Docker writes one: images rarely carry one
 * (debootstrap's minbase writes none), and without it `localhost` does not
 * resolve, which under network none is the only address there is. The
 * hostname maps to 127.0.1.1 as on Debian: on the loopback in any network
 * namespace, and not 127.0.0.1's reverse name.
 */
export function etcHosts(hostname: string): string {
  return [
    '127.0.0.1\tlocalhost',
    '::1\tlocalhost ip6-localhost ip6-loopback',
    'fe00::0\tip6-localnet',
    'ff00::0\tip6-mcastprefix',
    'ff02::1\tip6-allnodes',
    'ff02::2\tip6-allrouters',
    `127.0.1.1\t${hostname}`,
    '',
  ].join('\n')
}

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

/**
 * The OCI cpu resources of `cpu` CPUs: a CFS quota of that many, and a weight
 * of 1024 per CPU, which cgroup v1's cpu.shares caps at 262144 (256 CPUs:
 * runc refused a larger one, so a create asking for 257–1024 CPUs failed).
 */
export function cpuResources(cpu: number): { shares: number; quota: number; period: number } {
  return { shares: Math.min(262144, Math.max(2, Math.round(1024 * cpu))), quota: Math.max(1000, Math.round(cpu * CPU_PERIOD_US)), period: CPU_PERIOD_US }
}

export function ociSpec(i: OciSpecInput): Record<string, unknown> {
  const env: Record<string, string> = { PATH: DEFAULT_PATH, HOME: '/root', HOSTNAME: i.hostname, ...i.env }
  const namespaces: Array<{ type: string }> = [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }]
  if (i.network === 'none') namespaces.push({ type: 'network' })
  const r = i.resources
  const resources: Record<string, unknown> = { devices: [{ allow: false, access: 'rwm' }] }
  if (r.memoryMiB !== undefined) {
    const bytes = Math.floor(r.memoryMiB * 1024 * 1024)
    // swap = limit: memory+swap capped at the same value, so no swapping past the limit
    resources.memory = { limit: bytes, swap: bytes }
  }
  if (r.cpu !== undefined) resources.cpu = cpuResources(r.cpu)
  if (r.pids !== undefined) resources.pids = { limit: r.pids }
  const caps = [...DOCKER_CAPS]
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: [AGENT_PATH_IN_SANDBOX, ...i.agentArgs],
      env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      cwd: i.workdir,
      capabilities: { bounding: caps, effective: caps, permitted: caps },
      noNewPrivileges: true,
    },
    root: { path: i.rootfsDir, readonly: false },
    hostname: i.hostname,
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'] },
      { destination: '/dev/pts', type: 'devpts', source: 'devpts', options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'] },
      { destination: '/dev/shm', type: 'tmpfs', source: 'shm', options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'] },
      { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
      { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ['nosuid', 'noexec', 'nodev', 'ro'] },
      { destination: '/sys/fs/cgroup', type: 'cgroup', source: 'cgroup', options: ['nosuid', 'noexec', 'nodev', 'relatime', 'ro'] },
      { destination: AGENT_PATH_IN_SANDBOX, type: 'bind', source: i.agentBinary, options: ['bind', 'ro', 'nosuid', 'nodev'] },
      // the sandbox's own files over the image's, writable as in Docker (a change stays in the sandbox's state dir)
      ...(['hosts', 'hostname'] as const).flatMap((f) => {
        const source = i.etcFiles?.[f]
        return source ? [{ destination: `/etc/${f}`, type: 'bind', source, options: ['bind', 'rw', 'nosuid', 'nodev', 'noexec'] }] : []
      }),
    ],
    linux: {
      namespaces,
      cgroupsPath: i.cgroupsPath,
      resources,
      maskedPaths: MASKED_PATHS,
      readonlyPaths: READONLY_PATHS,
      seccomp: seccompProfile(),
    },
  }
}
