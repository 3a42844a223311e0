// A Debian root filesystem built offline-capable from Debian's packages with
// `debootstrap --variant=minbase`, cached on local disk after the first build:
// the demo's and the benchmarks' realistic base image. The cache entry is keyed
// by suite and package list, built in a scratch directory and renamed into
// place, so an interrupted build never leaves a half tree behind.
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { StrataError } from '../../fs/common/errors.js'
import { native } from '../../fs/common/native.js'
import { detachAllUnder, pidAlive } from '../../fs/fuse/index.js'

export const DEFAULT_ROOTFS_CACHE = process.env.STRATA_ROOTFS_CACHE ?? '/var/cache/strata/rootfs'
export const DEFAULT_MIRROR = process.env.STRATA_DEBIAN_MIRROR ?? 'http://deb.debian.org/debian'

export interface DebianRootfsOptions {
  suite?: string
  /** extra packages (`--include`) */
  include?: string[]
  cacheDir?: string
  mirror?: string
  /** one line per debootstrap stage (I: lines) */
  onLine?: (line: string) => void
}

export interface DebianRootfs {
  dir: string
  cached: boolean
  buildMs: number
}

/** Where the tree for these options is cached (whether or not it was built yet). */
export function debianRootfsDir(opts: Pick<DebianRootfsOptions, 'suite' | 'include' | 'cacheDir'> = {}): string {
  const suite = opts.suite ?? 'bookworm'
  const include = [...new Set(opts.include ?? [])].sort()
  const key = crypto.createHash('sha256').update(JSON.stringify({ suite, include, variant: 'minbase' })).digest('hex').slice(0, 16)
  return path.join(opts.cacheDir ?? DEFAULT_ROOTFS_CACHE, `debian-${suite}-${key}`)
}

/** flock(2) operations (sys/file.h) */
const LOCK_EX = 2
const LOCK_NB = 4

export async function ensureDebianRootfs(opts: DebianRootfsOptions = {}): Promise<DebianRootfs> {
  const suite = opts.suite ?? 'bookworm'
  const include = [...new Set(opts.include ?? [])].sort()
  const cacheDir = opts.cacheDir ?? DEFAULT_ROOTFS_CACHE
  const dir = debianRootfsDir({ suite, include, cacheDir })
  // the completion marker sits beside the tree, so the tree holds only the image
  const marker = `${dir}.complete`
  if (fs.existsSync(marker) && fs.existsSync(dir)) return { dir, cached: true, buildMs: 0 }
  if (process.getuid?.() !== 0) throw new StrataError('IMAGE_NEEDS_ROOT', 'debootstrap needs root')
  fs.mkdirSync(cacheDir, { recursive: true })
  // One builder at a time: a second one would replace the tree under the first one's users.
  const lockFd = fs.openSync(`${dir}.lock`, 'a')
  try {
    const addon = native()
    while (!addon.flock(lockFd, LOCK_EX | LOCK_NB)) await new Promise((r) => setTimeout(r, 500))
    if (fs.existsSync(marker) && fs.existsSync(dir)) return { dir, cached: true, buildMs: 0 }
    return await buildDebianRootfs(suite, include, cacheDir, dir, marker, opts)
  } finally {
    // closing the descriptor releases the lock
    fs.closeSync(lockFd)
  }
}

async function buildDebianRootfs(suite: string, include: string[], cacheDir: string, dir: string, marker: string, opts: DebianRootfsOptions): Promise<DebianRootfs> {
  const scratch = `${dir}.building-${process.pid}`
  sweepStaleRootfsBuilds(cacheDir)
  removeTree(scratch)
  const args = ['--variant=minbase', ...(include.length ? [`--include=${include.join(',')}`] : []), suite, scratch, opts.mirror ?? DEFAULT_MIRROR]
  const t0 = Date.now()
  try {
    await run('debootstrap', args, opts.onLine)
    // apt caches are not part of the environment and only inflate the image
    fs.rmSync(path.join(scratch, 'var/cache/apt/archives'), { recursive: true, force: true })
    fs.mkdirSync(path.join(scratch, 'var/cache/apt/archives/partial'), { recursive: true })
    fs.rmSync(marker, { force: true })
    fs.rmSync(dir, { recursive: true, force: true })
    fs.renameSync(scratch, dir)
    fs.writeFileSync(marker, JSON.stringify({ suite, include, builtAt: new Date().toISOString() }) + '\n')
  } catch (e) {
    removeTree(scratch)
    throw e
  }
  return { dir, cached: false, buildMs: Date.now() - t0 }
}

/**
 * Removes a build directory. debootstrap mounts /proc and /sys inside the
 * tree it builds, and a build killed midway leaves them mounted: they are
 * detached first, so the removal never reaches into the host's /proc or /sys.
 */
function removeTree(dir: string): void {
  const left = detachAllUnder(dir)
  if (left.length) throw new StrataError('IMAGE_BUILD_FAILED', `cannot detach ${left.join(', ')} before removing ${dir}`)
  fs.rmSync(dir, { recursive: true, force: true })
}

/** Removes the build directories (`*.building-PID`) of builds whose process is gone, mounts and all. */
export function sweepStaleRootfsBuilds(cacheDir: string): void {
  for (const name of fs.readdirSync(cacheDir)) {
    const m = /\.building-(\d+)$/.exec(name)
    if (!m || Number(m[1]) === process.pid || pidAlive(Number(m[1]))) continue
    removeTree(path.join(cacheDir, name))
  }
}

function run(cmd: string, args: string[], onLine?: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] })
    let tail = ''
    const take = (b: Buffer) => {
      const s = b.toString()
      tail = (tail + s).slice(-4000)
      if (onLine) for (const l of s.split('\n')) if (l.startsWith('I: ')) onLine(l.slice(3))
    }
    child.stdout.on('data', take)
    child.stderr.on('data', take)
    child.on('error', (e) => reject(new StrataError('IMAGE_BUILD_FAILED', `${cmd} could not start: ${e.message}`, { cause: e })))
    child.on('close', (code, sig) => {
      if (code === 0) resolve()
      else reject(new StrataError('IMAGE_BUILD_FAILED', `${cmd} exited ${code ?? sig}: ${tail.trim().split('\n').slice(-5).join(' | ')}`))
    })
  })
}
