// What the numbers were measured on: printed with every run and recorded in
// bench/RESULTS.md, because a throughput figure without its machine is noise.

import os from 'node:os'
import { execFileSync } from 'node:child_process'

export interface MachineInfo {
  nproc: number
  cpuModel: string
  memoryGiB: number
  kernel: string
  node: string
  /** filesystem the benchmark data lives on (cluster data dirs and the disk baseline alike) */
  dataDir: string
  disk: string
  /** 1/5/15-minute load averages when the run started and when it ended: other work skews every number */
  loadStart: number[]
  loadEnd?: number[]
}

function run(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).trim()
  } catch {
    return ''
  }
}

/** Device, filesystem, mount options and (for a whole-disk device) rotational flag and size. */
export function describeDisk(dir: string): string {
  const mnt = run('findmnt', ['-n', '-o', 'SOURCE,FSTYPE,OPTIONS', '--target', dir])
  if (!mnt) return run('df', ['-PT', dir]).split('\n')[1] ?? 'unknown'
  const [source = '?', fstype = '?', options = ''] = mnt.split(/\s+/)
  const parts = [`${source} ${fstype} (${options.split(',').filter((o) => /^(rw|ro|relatime|noatime|discard|data=|barrier|nobarrier)/.test(o)).join(',')})`]
  const dev = source.replace(/^\/dev\//, '')
  if (/^[a-z0-9]+$/.test(dev)) {
    const info = run('lsblk', ['-dno', 'SIZE,ROTA,MODEL', `/dev/${dev}`])
    if (info) {
      const [size, rota, ...model] = info.split(/\s+/)
      parts.push(`${size}, ${rota === '1' ? 'reported rotational' : 'non-rotational'}${model.length ? `, ${model.join(' ')}` : ''}`)
    }
  }
  return parts.join('; ')
}

export function machineInfo(dataDir: string): MachineInfo {
  const cpus = os.cpus()
  return {
    nproc: typeof os.availableParallelism === 'function' ? os.availableParallelism() : cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    memoryGiB: Math.round((os.totalmem() / 1024 ** 3) * 10) / 10,
    kernel: `${os.type()} ${os.release()} ${os.arch()}`,
    node: process.version,
    dataDir,
    disk: describeDisk(dataDir),
    loadStart: loadAverage(),
  }
}

export function loadAverage(): number[] {
  return os.loadavg().map((x) => Math.round(x * 100) / 100)
}
