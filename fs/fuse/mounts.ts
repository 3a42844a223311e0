// Mount-table helpers that never touch the mounted filesystem itself: a
// synchronous call into a FUSE mount from the process that serves it
// deadlocks, and a call into a mount whose daemon hangs blocks forever, so
// everything here reads /proc/self/mountinfo, /proc/<pid>/cmdline and
// /sys/fs/fuse/connections, and unmounts with umount2 or a child process.

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { spawn, spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { pidAlive, scanDaemonProcesses } from '../common/daemon.js'
import { StrataError } from '../common/errors.js'
import { MNT, native } from '../common/native.js'
import { registeredDaemon } from './state.js'

export { pidAlive }

export const FUSE_SUBTYPE = 'strata'
export const FUSE_FSTYPE = `fuse.${FUSE_SUBTYPE}`
export const FUSECTL_DIR = '/sys/fs/fuse/connections'

export interface MountEntry {
  mountId: number
  major: number
  minor: number
  /** mount point, unescaped */
  mountpoint: string
  fstype: string
  source: string
  options: string
}

/** Undoes the octal escapes (\040 space, \011 tab, \012 newline, \134 backslash) of /proc mount tables. */
export function unescapeMountField(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)))
}

/** Parses /proc/<pid>/mountinfo text. */
export function parseMountinfo(text: string): MountEntry[] {
  const out: MountEntry[] = []
  for (const line of text.split('\n')) {
    if (!line) continue
    const fields = line.split(' ')
    const sep = fields.indexOf('-')
    if (sep < 6 || fields.length < sep + 3) continue
    const [maj, min] = fields[2]!.split(':').map(Number)
    out.push({
      mountId: Number(fields[0]),
      major: maj ?? 0,
      minor: min ?? 0,
      mountpoint: unescapeMountField(fields[4]!),
      options: fields[5]!,
      fstype: fields[sep + 1]!,
      source: unescapeMountField(fields[sep + 2]!),
    })
  }
  return out
}

export function readMounts(): MountEntry[] {
  try {
    return parseMountinfo(fs.readFileSync('/proc/self/mountinfo', 'utf8'))
  } catch {
    return []
  }
}

/** The topmost mount at `mountpoint` (absolute, normalized), if any. */
export function findMount(mountpoint: string, mounts: MountEntry[] = readMounts()): MountEntry | undefined {
  const want = path.resolve(mountpoint)
  let hit: MountEntry | undefined
  for (const m of mounts) if (m.mountpoint === want) hit = m
  return hit
}

export function isFuseMount(m: MountEntry | undefined): boolean {
  return !!m && (m.fstype === 'fuse' || m.fstype.startsWith('fuse.'))
}

/** The fusectl connection number of a FUSE mount (its anonymous device's minor). */
/** The st_dev (as stat with bigint gives it) of a mount with this major:minor (glibc's makedev). */
export function deviceNumber(major: number, minor: number): bigint {
  const ma = BigInt(major)
  const mi = BigInt(minor)
  return ((ma & 0xfffn) << 8n) | ((ma >> 12n) << 44n) | (mi & 0xffn) | ((mi >> 8n) << 20n)
}

export function connectionId(m: MountEntry): number {
  return m.major === 0 ? m.minor : (m.major << 20) | m.minor
}

/**
 * Sets the kernel readahead of a FUSE mount. libfuse's max_readahead can only
 * lower the kernel's default (128 KiB: the kernel takes the smaller of the
 * two), so a larger window is written to the mount's backing device info, as
 * `blockdev --setra` does for a disk. Root only; returns what the kernel now
 * uses, in bytes, or null when it could not be set.
 */
export function setKernelReadahead(m: MountEntry, bytes: number): number | null {
  const file = `/sys/class/bdi/${m.major}:${m.minor}/read_ahead_kb`
  try {
    fs.writeFileSync(file, String(Math.max(0, Math.floor(bytes / 1024))))
    return Number(fs.readFileSync(file, 'utf8').trim()) * 1024
  } catch {
    return null
  }
}

function ensureFusectl(): boolean {
  try {
    if (fs.existsSync(FUSECTL_DIR) && readMounts().some((m) => m.mountpoint === FUSECTL_DIR)) return true
    if (typeof process.getuid === 'function' && process.getuid() !== 0) return false
    native().mount('fusectl', FUSECTL_DIR, 'fusectl', 0, null)
    return true
  } catch {
    const r = spawnSync('mount', ['-t', 'fusectl', 'none', FUSECTL_DIR], { stdio: 'ignore', timeout: 5000 })
    return r.status === 0
  }
}

/**
 * Aborts a FUSE connection (echo 1 > /sys/fs/fuse/connections/N/abort): every
 * waiting and future request fails with ENOTCONN, so nothing blocks on a dead
 * or stuck daemon. Mounts fusectl when needed (root). Returns whether it worked.
 */
export function abortConnection(m: MountEntry): boolean {
  if (!isFuseMount(m) || !ensureFusectl()) return false
  try {
    fs.writeFileSync(path.join(FUSECTL_DIR, String(connectionId(m)), 'abort'), '1')
    return true
  } catch {
    return false
  }
}

function isRoot(): boolean {
  return typeof process.getuid !== 'function' || process.getuid() === 0
}

/** Lazy unmount right now, synchronously (MNT_DETACH does not wait for the daemon). For exit paths. */
export function detachNow(mountpoint: string): boolean {
  const mnt = path.resolve(mountpoint)
  if (isRoot()) {
    try {
      native().umount2(mnt, MNT.DETACH)
      return true
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EINVAL' && !findMount(mnt)) return true
    }
    if (spawnSync('umount', ['-l', '-c', mnt], { stdio: 'ignore', timeout: 5000 }).status === 0) return true
  }
  for (const bin of ['fusermount3', 'fusermount']) {
    if (spawnSync(bin, ['-u', '-z', mnt], { stdio: 'ignore', timeout: 5000 }).status === 0) return true
  }
  return !findMount(mnt)
}

function run(cmd: string, args: string[], timeoutMs: number): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    let stderr = ''
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] })
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('error', (e) => {
      clearTimeout(timer)
      resolve({ code: null, stderr: e.message })
    })
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stderr })
    })
  })
}

/**
 * Unmounts from a child process (`umount` as root, `fusermount3 -u`
 * otherwise), so the caller's event loop stays free to serve the requests
 * the unmount may cause. lazy: MNT_DETACH. Returns 'ok', 'busy' or 'error'.
 */
export async function unmountAsync(mountpoint: string, opts: { lazy?: boolean; timeoutMs?: number } = {}): Promise<{ result: 'ok' | 'busy' | 'error'; message: string }> {
  const mnt = path.resolve(mountpoint)
  const timeoutMs = opts.timeoutMs ?? 10_000
  const attempts: Array<[string, string[]]> = []
  if (isRoot()) attempts.push(['umount', [...(opts.lazy ? ['-l'] : []), '-c', mnt]])
  attempts.push(['fusermount3', ['-u', ...(opts.lazy ? ['-z'] : []), mnt]], ['fusermount', ['-u', ...(opts.lazy ? ['-z'] : []), mnt]])
  let last = ''
  for (const [cmd, args] of attempts) {
    const r = await run(cmd, args, timeoutMs)
    if (r.code === 0) return { result: 'ok', message: '' }
    if (!findMount(mnt)) return { result: 'ok', message: '' }
    last = r.stderr.trim() || `${cmd} failed`
    if (/busy/i.test(r.stderr)) return { result: 'busy', message: last }
    if (r.code !== null) break // the tool ran and refused: another tool will not do better
  }
  return { result: 'error', message: last }
}

/**
 * syncfs(2) of a mount from a child process (`sync -f MNT`): the kernel
 * writes the mount's dirty pages, those of a MAP_SHARED mapping written and
 * not msync'ed, to the daemon, whose event loop must stay free to take them.
 */
export function syncfsAsync(mountpoint: string, timeoutMs: number): Promise<{ ok: boolean; message: string }> {
  return new Promise((resolve) => {
    let stderr = ''
    const child = spawn('sync', ['-f', path.resolve(mountpoint)], { stdio: ['ignore', 'ignore', 'pipe'] })
    // a syncfs waiting on requests the cluster cannot answer sits in D state, where SIGKILL
    // waits too: the caller goes on after timeoutMs (its abort of the connection ends the wait)
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      resolve({ ok: false, message: `sync -f did not finish in ${timeoutMs} ms` })
    }, timeoutMs)
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('error', (e) => {
      clearTimeout(timer)
      resolve({ ok: false, message: e.message })
    })
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve(code === 0 ? { ok: true, message: '' } : { ok: false, message: stderr.trim() || `sync -f exited ${code}` })
    })
  })
}

/**
 * Clears a mount whose daemon is gone or stuck: abort the connection, then
 * lazy-unmount. Safe on a healthy mount too (its users get ENOTCONN).
 */
export async function forceUnmount(mountpoint: string): Promise<boolean> {
  const mnt = path.resolve(mountpoint)
  const m = findMount(mnt)
  if (!m) return true
  if (isFuseMount(m)) abortConnection(m)
  const r = await unmountAsync(mnt, { lazy: true })
  if (r.result === 'ok') return true
  return detachNow(mnt)
}

export async function waitUnmounted(mountpoint: string, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs
  for (;;) {
    if (!findMount(mountpoint)) return true
    if (Date.now() > end) return false
    await sleep(50)
  }
}

// --- finding the daemon that serves a mount point

export interface FuseDaemonProcess {
  pid: number
  configFile: string
  mountpoint: string
}

/** A `strata daemon fuse` process found in /proc: mountpoint null when its config is gone or unreadable. */
export interface FuseDaemonScan {
  pid: number
  configFile: string
  mountpoint: string | null
  /** its `--name` argument */
  name?: string
}

function readCmdline(pid: number): string[] | null {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter((x, i, a) => x !== '' || i < a.length - 1)
  } catch {
    return null
  }
}


/**
 * Detaches everything mounted at or below `dir`, deepest first (lazy: a
 * busy mount goes from the tree at once and away when its last user does),
 * so that removing the tree afterwards never reaches into a mount. Returns
 * the mount points still there (none when it worked).
 */
export function detachAllUnder(dir: string): string[] {
  const root = path.resolve(dir)
  const below = () => readMounts().filter((m) => m.mountpoint === root || m.mountpoint.startsWith(root + path.sep)).map((m) => m.mountpoint).reverse()
  for (const m of below()) detachNow(m)
  return below()
}


/** A file-name-safe name for a mount point: mount-<path with _>-<hash> (`fs mount` names the daemon, its config and log so). */
export function mountName(mountpoint: string): string {
  const mnt = path.resolve(mountpoint)
  const slug = mnt.replace(/^\/+/, '').replace(/[^A-Za-z0-9._-]+/g, '_').slice(-48) || 'root'
  const hash = crypto.createHash('sha1').update(mnt).digest('hex').slice(0, 8)
  return `mount-${slug}-${hash}`
}

/**
 * Every live `strata daemon fuse --config F` process with the mount point its
 * config names. A daemon whose config is gone or unreadable (its cluster
 * directory was destroyed under it) is listed with mountpoint null: it still
 * serves a mount, and `daemonsFor` matches it by its `--name`.
 */
export function listFuseDaemons(): FuseDaemonScan[] {
  const out: FuseDaemonScan[] = []
  for (const { pid, role, configFile: cfgPath, name } of scanDaemonProcesses()) {
    if (role !== 'fuse') continue
    if (!pidAlive(pid)) continue
    try {
      const cfg = JSON.parse(fs.readFileSync(cfgPath, 'utf8')) as { mountpoint?: unknown }
      if (typeof cfg.mountpoint === 'string') {
        out.push({ pid, configFile: cfgPath, mountpoint: path.resolve(cfg.mountpoint), ...(name ? { name } : {}) })
        continue
      }
    } catch {
      // unreadable or deleted config: listed without a mount point
    }
    out.push({ pid, configFile: cfgPath, mountpoint: null, ...(name ? { name } : {}) })
  }
  return out
}

/**
 * Live daemons serving (or configured for) this mount point: `strata daemon
 * fuse` processes (by their config, else by the `--name` `fs mount` gave
 * them) and daemons registered for the mount point (--foreground ones, and
 * any daemon whose config is gone), validated against the live pid.
 */
export function daemonsFor(mountpoint: string): FuseDaemonProcess[] {
  const want = path.resolve(mountpoint)
  const wantName = mountName(want)
  const out: FuseDaemonProcess[] = []
  const scan = listFuseDaemons()
  for (const d of scan) {
    if (d.mountpoint === want || (d.mountpoint === null && d.name === wantName)) out.push({ pid: d.pid, configFile: d.configFile, mountpoint: want })
  }
  const reg = registeredDaemon(want)
  // a recycled pid now serving another mount point (its config says so) is not this mount's daemon
  const elsewhere = (pid: number) => scan.some((d) => d.pid === pid && d.mountpoint !== null && d.mountpoint !== want)
  if (reg && reg.pid !== process.pid && !out.some((d) => d.pid === reg.pid) && pidAlive(reg.pid) && looksLikeStrata(reg.pid) && !elsewhere(reg.pid)) {
    out.push({ pid: reg.pid, configFile: reg.configFile ?? '', mountpoint: want })
  }
  return out
}

/** A recycled pid must not be taken for the daemon: its command line must be strata running a mount (`fs mount` or `daemon fuse`). */
function looksLikeStrata(pid: number): boolean {
  const argv = readCmdline(pid)
  if (!argv || !argv.some((a) => /strata(\.js)?$/.test(a))) return false
  const d = argv.indexOf('daemon')
  return argv.includes('mount') || (d >= 0 && argv[d + 1] === 'fuse')
}

export function notMounted(mountpoint: string): StrataError {
  return new StrataError('NOT_FOUND', `${mountpoint} is not a Strata mount and no daemon serves it`)
}

/**
 * Refuses a mount point FUSE cannot use, before anything is started or
 * written: libfuse does not mount over a non-empty directory (fuse-native
 * then reports only "fuse failed"), and a file is no mount point. A missing
 * directory is fine (it is created), and so is a FUSE mount a dead daemon
 * left there (the next daemon clears it) or a live one (refused later as
 * CLUSTER_RUNNING, naming its daemon).
 */
export function checkMountpoint(mountpoint: string): void {
  const mnt = path.resolve(mountpoint)
  const m = findMount(mnt)
  if (m) {
    if (isFuseMount(m)) return
    throw new StrataError('INVALID_ARGUMENT', `mount point ${mnt} is already a mount point (${m.fstype} ${m.source})`)
  }
  let st: fs.Stats
  try {
    st = fs.statSync(mnt)
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return
    if (code === 'ENOTDIR') throw new StrataError('INVALID_ARGUMENT', `mount point ${mnt}: a component of the path is not a directory`)
    throw new StrataError(code === 'EACCES' || code === 'EPERM' ? 'PERMISSION_DENIED' : 'IO_ERROR', `mount point ${mnt}: ${(e as Error).message}`)
  }
  if (!st.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `mount point ${mnt} is not a directory`)
  const entries = fs.readdirSync(mnt)
  if (entries.length) {
    const shown = entries.slice(0, 3).join(', ') + (entries.length > 3 ? ', …' : '')
    throw new StrataError('INVALID_ARGUMENT', `mount point ${mnt} is not empty (${entries.length} ${entries.length === 1 ? 'entry' : 'entries'}: ${shown}); FUSE mounts only on an empty directory`)
  }
}
