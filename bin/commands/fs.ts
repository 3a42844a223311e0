// `strata fs put|get|ls|stat|mkdir|rm`: file operations on the DFS through
// the file client (meta for names, storage for bytes), no mount needed.
// `strata fs mount|umount` are added by the FUSE part on the command this
// module returns (see registerFsCommands).
import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import type { Command } from 'commander'
import { readClusterFile, resolveClusterDir, formatTable, interruptExitCode, interruptible, raceAbort } from '../../fs/admin/index.js'
import { inodeHex, metaAddressesOf, parseLayoutArgs, parsePerm, permString } from '../../fs/admin/fs-ops.js'
import { FileSystem, checkMgmtdReachable, inodeStats, normalizePath, plainPath, joinPath, baseName, dirName } from '../../fs/client/index.js'
import { StrataError } from '../../fs/common/errors.js'
import { printable } from '../../fs/common/printable.js'
import { MIN_CHUNK_SIZE, type Layout } from '../../fs/common/layout.js'
import type { Inode } from '../../fs/meta/protocol.js'
import { InvalidArgumentError } from 'commander'
import { fsStyleError, isDevicePath, localDestination, localError, localStat, openFifoReader, openFifoWriter, sameFile } from './local-files.js'
import { createProgress, NO_PROGRESS, type ProgressSink, type ProgressTask } from '../../fs/common/progress.js'
import { addressListArg, dirArg, dfsPathArg, dfsPathsArg, intArg, intListArg, out, printJson, chunkSizeArg, timerSecondsArg } from './output.js'
import { MAX_ID, NGROUPS_MAX } from '../../fs/common/user-ids.js'

interface FsGlobalOpts {
  cluster?: string
  mgmtdAddress?: string
  metaAddress?: string
  timeout?: number
  uid?: number
  gid?: number
  groups?: number[]
  json?: boolean
}

/**
 * The identity of every request: the caller's, or exactly what --uid/--gid/--groups
 * say. Acting as another user must not keep the caller's supplementary groups (as
 * root that would be group 0, and with it every root:root file with group bits).
 */
export function fsUser(g: { uid?: number; gid?: number; groups?: number[] }): { uid?: number; gid?: number; groups?: number[] } | undefined {
  if (g.uid === undefined && g.gid === undefined && g.groups === undefined) return undefined
  return { ...(g.uid !== undefined ? { uid: g.uid } : {}), ...(g.gid !== undefined ? { gid: g.gid } : {}), groups: g.groups ?? [] }
}

/** `--uid`/`--gid`: a u32 id below (uid_t)-1 (MAX_ID); anything else is a usage error at parse time. */
function idArg(what: string): (v: string) => number {
  return intArg(what, { max: MAX_ID })
}

/**
 * `--groups 1,2` (repeatable): an empty element (`1,,2`, `1,`, ``) is a usage error, as a
 * malformed one is, instead of being dropped, and so are more than NGROUPS_MAX in all.
 */
function idListArg(what: string): (v: string, prev: number[] | undefined) => number[] {
  const list = intListArg(what, { max: MAX_ID, strict: true })
  return (v, prev) => {
    const all = list(v, prev)
    if (all.length > NGROUPS_MAX) throw new InvalidArgumentError(`${what} lists ${all.length} groups; the kernel allows at most ${NGROUPS_MAX} (NGROUPS_MAX)`)
    return all
  }
}

/** Bytes moved per call by put/get. */
const IO_STEP = 8 * 1024 * 1024

/**
 * A FileSystem for one command: mgmtd addresses from --mgmtd-address or the
 * cluster directory (cluster.json), meta servers from routing info (falling
 * back to the meta processes cluster.json lists, or --meta-address).
 */
export async function withFileSystem<T>(cmd: Command, fn: (fs: FileSystem, json: boolean) => Promise<T>, paths: string[] = []): Promise<T> {
  const g = cmd.optsWithGlobals() as FsGlobalOpts
  const split = (s?: string) => (s ? s.split(',').map((x) => x.trim()).filter(Boolean) : [])
  let mgmtdAddresses = split(g.mgmtdAddress)
  let metaFallback: string[] = []
  if (mgmtdAddresses.length === 0 || !g.metaAddress) {
    const dir = resolveClusterDir(g.cluster)
    try {
      const c = readClusterFile(dir)
      if (mgmtdAddresses.length === 0) mgmtdAddresses = c.mgmtdAddresses
      metaFallback = metaAddressesOf(c)
    } catch (e) {
      if (mgmtdAddresses.length === 0) throw e
    }
  }
  await checkMgmtdReachable(mgmtdAddresses)
  const timeoutMs = (g.timeout ?? 60) * 1000
  const user = fsUser(g)
  const fsys = new FileSystem({
    mgmtdAddresses,
    ...(split(g.metaAddress).length ? { metaAddresses: split(g.metaAddress) } : {}),
    ...(metaFallback.length ? { metaFallbackAddresses: metaFallback } : {}),
    ...(user ? { user } : {}),
    // a one-shot command closes everything it opens: close carries the lengths
    periodicSyncMs: 0,
    metaRetry: { totalMs: timeoutMs },
    storageRetry: { deadlineMs: timeoutMs, readDeadlineMs: timeoutMs },
  })
  let result: T
  try {
    result = await fn(fsys, !!g.json)
  } catch (e) {
    const named = await nameDirectories(fsys, e, paths)
    // Failing because the cluster does not answer, closing what is still open would
    // wait as long again (a write handle's close asks storage for the length): the
    // command ends after a bounded try, and meta prunes the sessions of a client
    // that stopped extending them.
    await bounded(fsys.shutdown(), CLEANUP_MS)
    throw named
  }
  await fsys.shutdown()
  return result
}

/** A local path argument: '' names no file (it was `INVALID_ARGUMENT:  is not a regular file`, exit 1). */
function localPathArg(what: string): (v: string) => string {
  return (v: string) => {
    if (v === '') throw new InvalidArgumentError(`${what} is empty (a local path, or - for stdin/stdout)`)
    return v
  }
}

/**
 * Meta names a directory or file in a refusal by its inode (`no write permission on directory
 * 0x0000000000000000`, `no r-- permission on file 0x…`): where the command knows the path the
 * user gave, the error names it on that path instead (`directory /`, `file /secret`), found by
 * stat'ing the path and its ancestors.
 */
export async function nameDirectories(fsys: FileSystem, e: unknown, paths: string[]): Promise<unknown> {
  if (!(e instanceof StrataError) || e.retryable) return e
  // meta names the inode it refused ('file 0x…' for a read of a file, 'directory 0x…'): the user typed a path
  const m = /\b(directory|file) (0x[0-9a-f]{1,16})\b/.exec(e.reason)
  if (!m) return e
  const want = BigInt(m[2]!)
  for (const p of paths) {
    let parts: string[]
    try {
      parts = plainPath(p).split('/').filter(Boolean)
    } catch {
      continue
    }
    for (let i = 0; i <= parts.length; i++) {
      const dir = '/' + parts.slice(0, i).join('/')
      const id = await bounded2(fsys.stat(dir).then((st) => st.id))
      if (id === want) return new StrataError(e.code, e.reason.split(`${m[1]} ${m[2]}`).join(`${m[1]} ${dir}`), { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
    }
  }
  return e
}

/** `p`'s value, or undefined when it fails or takes longer than CLEANUP_MS. */
async function bounded2<T>(p: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined
  const v = await Promise.race([p.catch(() => undefined), new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), CLEANUP_MS)))])
  clearTimeout(timer)
  return v
}

/**
 * put's and get's progress: a bar on stderr when it is a terminal; otherwise nothing, the
 * summary line being the one line a log needs (and --json prints only the JSON).
 */
function transferProgress(json: boolean, signal: AbortSignal): ProgressSink & { stop(): void } {
  return createProgress({ quiet: json || !process.stderr.isTTY, signal })
}

interface GetResult {
  path: string
  local: string
  bytes: number
  seconds: number
  /** the data went to this process's stdout (`-`, /dev/stdout): no summary line is printed into it */
  toStdout?: boolean
}

/**
 * `fs get`: a regular-file destination (new, or an existing file, through symlinks) is
 * written to a temporary file beside it (.NAME.strata-get-XXXXXXXX), fsynced and renamed
 * over it, so that it is either the old file or the complete copy; a failed or
 * interrupted get removes the temporary. Anything else (stdout, a pipe, a FIFO, a
 * character device, a path under /dev or /proc) is written in order as the data comes.
 */
async function getFile(fsys: FileSystem, dfsPath: string, local: string, signal: AbortSignal, progress: ProgressSink = NO_PROGRESS): Promise<GetResult> {
  const fh = await fsys.open(dfsPath, 'r')
  const t0 = Date.now()
  let bytes = 0
  const length = fh.inode.file?.length ?? 0
  // started by the copy, once the destination is known to be usable
  let task: ProgressTask | undefined
  let finished = false
  /** Reads the DFS file from the start and hands every block to `write` with its offset. */
  const copy = async (write: (buf: Buffer, offset: number) => Promise<void>) => {
    task ??= progress.start(normalizePath(dfsPath), length)
    for (;;) {
      signal.throwIfAborted()
      const want = Math.max(1, Math.min(IO_STEP, Math.max(length - bytes, 64 * 1024)))
      const r = await fsys.read(fh, want, bytes)
      if (r.bytesRead === 0) break
      await write(r.buffer.subarray(0, r.bytesRead), bytes)
      bytes += r.bytesRead
      task.tick(r.bytesRead)
      if (r.bytesRead < want && bytes >= length) break
    }
  }
  try {
    // into LOCAL/<name> when LOCAL is a directory
    const localSt = local === '-' ? null : localStat(local)
    const dest = localSt?.isDirectory() ? path.join(local, baseName(dfsPath)) : local
    const where = localDestination(dest)
    if (where.kind === 'stdout') {
      await raceAbort(copy((buf) => new Promise<void>((res, rej) => process.stdout.write(buf, (e) => (e ? rej(e) : res())))), signal)
      finished = true
      return { path: normalizePath(dfsPath), local, bytes, seconds: (Date.now() - t0) / 1000, toStdout: true }
    }
    if (where.kind === 'in-place' && localStat(dest)?.isFIFO()) {
      // a FIFO: written through a socket, so neither waiting for a reader nor a reader that
      // stopped reading holds a pool thread that would keep an interrupted get from exiting
      const s = await openFifoWriter(dest, signal)
      try {
        const toStdout = sameFile(fs.statSync(dest), 1)
        await raceAbort(
          (async () => {
            await copy((buf) => new Promise<void>((res, rej) => s.write(buf, (e) => (e ? rej(fsStyleError(e)) : res()))))
            await new Promise<void>((res) => s.end(res))
          })(),
          signal,
        )
        finished = true
        return { path: normalizePath(dfsPath), local: dest, bytes, seconds: (Date.now() - t0) / 1000, toStdout }
      } catch (e) {
        throw localError(e)
      } finally {
        s.destroy()
      }
    }
    if (where.kind === 'in-place') {
      // a pipe, FIFO, character device or /dev path: written in order, in place (cp does the same)
      const h = await raceAbort(fs.promises.open(dest, 'w'), signal).catch((e: unknown) => {
        throw localError(e)
      })
      let toStdout = false
      try {
        toStdout = sameFile(await h.stat(), 1)
        await raceAbort(copy((buf) => writeAll(h, buf, null)), signal)
      } catch (e) {
        throw localError(e)
      } finally {
        await h.close().catch(() => undefined)
      }
      finished = true
      return { path: normalizePath(dfsPath), local: dest, bytes, seconds: (Date.now() - t0) / 1000, toStdout }
    }
    // a regular file, or a new one: a temporary beside the file the path ends at, renamed over it
    const { final, existing } = where
    const tmp = path.join(path.dirname(final), `.${path.basename(final)}.strata-get-${randomBytes(4).toString('hex')}`)
    let h: fs.promises.FileHandle | undefined
    try {
      // a new file gets the DFS file's permission bits less the umask, as cp gives it the source's
      h = await fs.promises.open(tmp, 'wx', existing ? 0o600 : fh.inode.acl.perm & 0o777)
      const out = h
      await raceAbort(
        (async () => {
          await copy((buf, offset) => writeAll(out, buf, offset))
          if (existing) {
            // the replacement keeps the replaced file's owner (where allowed) and permission
            if (existing.uid !== process.getuid?.() || existing.gid !== process.getgid?.()) await out.chown(existing.uid, existing.gid).catch(() => undefined)
            await out.chmod(existing.mode & 0o7777)
          }
          await out.sync()
        })(),
        signal,
      )
      await h.close()
      h = undefined
      signal.throwIfAborted()
      await fs.promises.rename(tmp, final)
    } catch (e) {
      await h?.close().catch(() => undefined)
      await fs.promises.unlink(tmp).catch(() => undefined)
      throw localError(e, { tmp, dest: final })
    }
    await syncDir(path.dirname(final))
    finished = true
    return { path: normalizePath(dfsPath), local: dest, bytes, seconds: (Date.now() - t0) / 1000 }
  } finally {
    // a copy that failed is not shown as done (an interrupted one says so by itself)
    task?.done(finished || signal.aborted ? undefined : 'failed')
    await fsys.close(fh)
  }
}

/** Writes all of `buf` (a short write goes on where it stopped); position null writes at the file's offset. */
async function writeAll(h: fs.promises.FileHandle, buf: Buffer, position: number | null): Promise<void> {
  for (let done = 0; done < buf.length; ) {
    const { bytesWritten } = await h.write(buf, done, buf.length - done, position === null ? null : position + done)
    done += bytesWritten
  }
}

/** fsync of a directory after a rename in it (best effort: some filesystems refuse it). */
async function syncDir(dir: string): Promise<void> {
  try {
    const d = await fs.promises.open(dir, 'r')
    await d.sync().finally(() => d.close())
  } catch {
    // the rename itself is done
  }
}

/** How long cleaning up after a failed command may take (closing files, removing put's temporary). */
export const CLEANUP_MS = 5000

/** Prints an interruption by SIGINT/SIGTERM as the error it is and exits 128+n, as a shell reports it. */
export async function exitOnInterrupt<T>(p: Promise<T>): Promise<T> {
  try {
    return await p
  } catch (e) {
    const code = interruptExitCode(e)
    if (code === null) throw e
    process.stderr.write(`strata: ${printable((e as Error).message, '\n')}\n`)
    process.exit(code)
  }
}

/** Resolves (never rejects) once `p` settled or `ms` passed, whichever is first. */
async function bounded(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  await Promise.race([p.catch(() => undefined), new Promise<void>((r) => (timer = setTimeout(r, ms)))])
  clearTimeout(timer)
}

interface PutResult {
  local: string
  path: string
  bytes: number
  length: number
  inode: string
  seconds: number
}

/**
 * `fs put`: copies into a temporary file in the target's directory, syncs and
 * closes it, then renames it over the target, so that the target is either the
 * old file or the complete new one. On failure or interruption the temporary
 * goes again (best effort, bounded by CLEANUP_MS).
 */
async function putFile(
  fsys: FileSystem,
  local: string,
  dfsPath: string,
  o: { mode?: number; chainTableId?: number; chunkSize?: number; stripeSize?: number },
  signal: AbortSignal,
  names: string[] = [],
  progress: ProgressSink = NO_PROGRESS,
): Promise<PutResult> {
  let fromStdin = local === '-'
  // stdin, a pipe, a FIFO, a character device: read in order, as it comes; the new file is 0644
  let sequential = fromStdin
  let localMode = 0o644
  let size: number | undefined
  let fifo = false
  if (!fromStdin) {
    let st: fs.Stats
    try {
      st = fs.statSync(local)
    } catch (e) {
      throw localError(e)
    }
    if (st.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${local} is a directory`)
    if (st.isFile() && !isDevicePath(local)) {
      localMode = st.mode & 0o7777
      size = st.size
    } else sequential = true
    fifo = st.isFIFO()
    // this process's stdin under another name (/dev/stdin, /dev/fd/0): read as stdin (a socket there cannot be opened again)
    if (sequential && isDevicePath(local) && sameFile(st, 0)) fromStdin = true
  }
  const named = await dfsTarget(fsys, dfsPath, local === '-' ? 'stdin' : path.basename(local))
  names.push(named)
  // a symlink is followed to the file it names, which is replaced, or created when the link dangles
  const { path: target, inode: existing } = await followDfsLinks(fsys, named)
  if (existing && (existing.type !== 'File' || !existing.file)) throw new StrataError('META_IS_DIRECTORY', `${target} is not a regular file (${existing.type})`)
  // a replaced file's layout goes to the new one, unless its chunk size is one a new layout may not
  // name (below 4K, from 3FS or from before the rule): then the directory's, as for a new file
  const kept = existing?.file?.layout
  const layout = (await layoutFor(fsys, target, o)) ?? (kept && kept.chunkSize >= MIN_CHUNK_SIZE ? kept : undefined)
  const mode = o.mode ?? (existing ? existing.acl.perm & 0o7777 : localMode)
  const dir = target.replace(/\/[^/]*$/, '') || '/'
  const tmp = joinPath(dir, `.${baseName(target)}.strata-put-${randomBytes(4).toString('hex')}`)
  signal.throwIfAborted()
  const t0 = Date.now()
  const fh = await fsys.open(tmp, 'wx', mode, layout ? { layout } : {}).catch((e: unknown) => {
    // the temporary is ours, not the caller's: report a missing or non-directory parent with the target's path
    if (e instanceof StrataError && e.reason.includes(tmp)) throw new StrataError(e.code, e.reason.split(tmp).join(target), { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
    throw e
  })
  let bytes = 0
  const task = progress.start(target, size)
  const copy = async (): Promise<Inode> => {
    if (sequential) {
      const src = fromStdin ? process.stdin : fifo ? openFifoReader(local) : fs.createReadStream(local, { highWaterMark: 1 << 20 })
      try {
        for await (const chunk of src) {
          signal.throwIfAborted()
          await fsys.write(fh, chunk as Buffer, bytes)
          bytes += (chunk as Buffer).length
          task.tick((chunk as Buffer).length)
        }
      } finally {
        if (!fromStdin) src.destroy()
      }
    } else {
      const h = await fs.promises.open(local, 'r')
      try {
        // read the next block while the previous one is being written
        let a = Buffer.allocUnsafe(IO_STEP)
        let b = Buffer.allocUnsafe(IO_STEP)
        let r = await h.read(a, 0, IO_STEP, 0)
        while (r.bytesRead > 0) {
          signal.throwIfAborted()
          const [w, next] = await Promise.all([fsys.write(fh, a.subarray(0, r.bytesRead), bytes), h.read(b, 0, IO_STEP, bytes + r.bytesRead)])
          bytes += w
          task.tick(w)
          r = next
          ;[a, b] = [b, a]
        }
      } finally {
        await h.close()
      }
    }
    const synced = await fsys.fsync(fh)
    await fsys.close(fh)
    signal.throwIfAborted()
    await fsys.rename(tmp, target).catch((e: unknown) => {
      throw replaceError(e, tmp, target)
    })
    return synced
  }
  let st: Inode
  try {
    st = await raceAbort(copy(), signal)
    task.done()
  } catch (e) {
    // a copy that failed is not shown as done (an interrupted one says so by itself)
    task.done(signal.aborted ? undefined : 'failed')
    // the target is untouched; the temporary goes (its chunks with it, through meta's GC)
    await bounded(
      (async () => {
        await fsys.unlink(tmp).catch(() => undefined)
        await fsys.close(fh, { discard: true })
      })(),
      CLEANUP_MS,
    )
    throw localError(e)
  }
  return { local, path: target, bytes, length: st.file?.length ?? 0, inode: inodeHex(st.id), seconds: (Date.now() - t0) / 1000 }
}

/**
 * Meta refuses put's rename of its temporary over the target in the words of a rename
 * (`cannot move NAME: sticky directory owned by another user`); the user moved nothing:
 * the error names the target and says it cannot be replaced.
 */
function replaceError(e: unknown, tmp: string, target: string): unknown {
  if (!(e instanceof StrataError) || e.retryable) return e
  const why = e.reason.replace(/^cannot move [^:]*: /, '').split(tmp).join(target)
  return new StrataError(e.code, `cannot replace ${target}: ${why}`, { cause: e, ...(e.detail ? { detail: e.detail } : {}) })
}

/** Symlinks do not nest deeper than this at the end of a put's target (Linux's MAXSYMLINKS). */
const MAX_LINK_HOPS = 40

/**
 * Follows symlinks at the end of a DFS path as open(O_CREAT) does: to the file the last
 * one names (relative targets from the link's directory), which may not exist (a dangling
 * link: the file is created there). Returns that path and its inode, or null when missing.
 */
async function followDfsLinks(fsys: FileSystem, p: string): Promise<{ path: string; inode: Inode | null }> {
  let cur = p
  for (let hops = 0; ; hops++) {
    let st: Inode
    try {
      st = await fsys.lstat(cur)
    } catch (e) {
      if (e instanceof StrataError && e.code === 'META_NOT_FOUND') return { path: cur, inode: null }
      throw e
    }
    if (st.type !== 'Symlink' || !st.symlink) return { path: cur, inode: st }
    if (hops >= MAX_LINK_HOPS) throw new StrataError('META_TOO_MANY_SYMLINKS', `${p}: too many levels of symbolic links`)
    const to = st.symlink.target
    cur = to.startsWith('/') ? normalizePath(to) : joinPath(dirName(cur), to)
  }
}

/**
 * Runs `fn` for every path as coreutils' rm and mkdir do: a failure that is
 * about the path (missing, not empty, permission…) is printed and the next
 * path goes on; the caller exits 1 at the end when any failed. A failure of
 * the cluster itself (a retryable code: unreachable, timed out) ends the
 * command at once: every later path would wait out the same budget.
 */
async function eachPath(fsys: FileSystem, paths: string[], fn: (p: string) => Promise<void>): Promise<number> {
  let failed = 0
  for (const p of paths) {
    try {
      await fn(p)
    } catch (err) {
      const e = await nameDirectories(fsys, err, [p])
      if (!(e instanceof StrataError) || e.retryable || paths.length === 1) throw e
      process.stderr.write(`strata: ${printable(e.message, '\n')}\n`)
      failed++
    }
  }
  return failed
}

function permArg(v: string): number {
  try {
    return parsePerm(v)
  } catch (e) {
    throw new InvalidArgumentError((e as StrataError).reason)
  }
}

/** Dfs path of a put/get target: into a directory keeps the source's base name. */
async function dfsTarget(fsys: FileSystem, dfsPath: string, localName: string): Promise<string> {
  if (dfsPath.endsWith('/')) return joinPath(dfsPath, localName)
  try {
    const st = await fsys.stat(dfsPath)
    if (st.type === 'Directory') return joinPath(dfsPath, localName)
  } catch (e) {
    if (!(e instanceof StrataError) || e.code !== 'META_NOT_FOUND') throw e
  }
  return normalizePath(dfsPath)
}

function typeChar(i: Inode): string {
  return i.type === 'Directory' ? 'd' : i.type === 'Symlink' ? 'l' : '-'
}

function modeString(i: Inode): string {
  const p = i.acl.perm
  const rwx = (b: number, s: boolean, sc: string) => (b & 4 ? 'r' : '-') + (b & 2 ? 'w' : '-') + (s ? (b & 1 ? sc : sc.toUpperCase()) : b & 1 ? 'x' : '-')
  return typeChar(i) + rwx((p >> 6) & 7, !!(p & 0o4000), 's') + rwx((p >> 3) & 7, !!(p & 0o2000), 's') + rwx(p & 7, !!(p & 0o1000), 't')
}

function isoTime(us: number): string {
  return new Date(Math.floor(us / 1000)).toISOString()
}

/** JSON record of an inode: ids as 0x hex, times as ISO strings. */
export function inodeRecord(name: string, i: Inode): Record<string, unknown> {
  const s = inodeStats(i)
  return {
    name,
    type: i.type,
    inode: inodeHex(i.id),
    size: s.size,
    ...(i.file ? { truncateVer: i.file.truncateVer, chunkSize: i.file.layout.chunkSize, stripeSize: i.file.layout.stripeSize } : {}),
    perm: permString(i.acl.perm),
    mode: modeString(i),
    nlink: i.nlink,
    uid: i.acl.uid,
    gid: i.acl.gid,
    atime: isoTime(i.atime),
    mtime: isoTime(i.mtime),
    ctime: isoTime(i.ctime),
    ...(i.symlink ? { target: i.symlink.target } : {}),
  }
}

function layoutOpts(c: Command): Command {
  return c
    .option('--chain-table-id <id>', 'chain table of the new file', intArg('--chain-table-id', { min: 1, max: 0xffffffff }))
    .option('--chunk-size <size>', 'chunk size of the new file, a power of two from 4K to 2G (64K, 1M …)', chunkSizeArg('--chunk-size'))
    // a layout's stripe size is a u32, as admin create's: beyond it a usage error, as there
    .option('--stripe-size <n>', 'chains the new file stripes over (1 to 2^32-1)', intArg('--stripe-size', { min: 1, max: 0xffff_ffff }))
}

async function layoutFor(fsys: FileSystem, target: string, o: { chainTableId?: number; chunkSize?: number; stripeSize?: number }): Promise<Layout | undefined> {
  if (o.chainTableId === undefined && o.chunkSize === undefined && o.stripeSize === undefined) return undefined
  const parent = plainPath(target).replace(/\/[^/]*$/, '') || '/'
  const base = (await fsys.stat(parent)).directory?.layout
  const chainTableId = o.chainTableId ?? base?.tableId
  const chunkSize = o.chunkSize ?? base?.chunkSize
  const stripeSize = o.stripeSize ?? base?.stripeSize
  if (chainTableId === undefined || chunkSize === undefined || stripeSize === undefined) {
    throw new StrataError('INVALID_ARGUMENT', 'the parent directory has no default layout: give --chain-table-id, --chunk-size and --stripe-size')
  }
  return parseLayoutArgs({ chainTableId, chunkSize, stripeSize })
}

/** Registers `strata fs …` and returns the group so later parts can add subcommands (mount, umount). */
export function registerFsCommands(program: Command): Command {
  const g = program
    .command('fs')
    .description('file operations on the DFS through meta and storage (no mount needed)')
    .enablePositionalOptions(false)
    .option('--cluster <dir>', 'cluster directory (default: $STRATA_CLUSTER, then ~/.strata/cluster)', dirArg('--cluster'))
    .option('--mgmtd-address <addrs>', 'mgmtd host:port list (comma separated) instead of a cluster directory', addressListArg)
    .option('--meta-address <addrs>', 'meta server host:port list (default: META nodes in routing info)', addressListArg)
    .option('--timeout <seconds>', 'how long each DFS request may retry before the command fails (put/get: each 8 MiB block); a failing command ends within about this long, plus at most 5 s of cleanup', timerSecondsArg('--timeout'), 60)
    .option('--uid <uid>', 'act as this uid, 0 to 4294967294 (default: the caller\'s)', idArg('--uid'))
    .option('--gid <gid>', 'act as this gid, 0 to 4294967294 (default: the caller\'s)', idArg('--gid'))
    .option('--groups <gids>', 'supplementary groups, comma separated, each 0 to 4294967294, at most 65536 in all (repeatable; default: the caller\'s; none besides --gid when --uid or --gid is given)', idListArg('--groups'))
    .option('--json', 'print JSON')
    .addHelpText('after', '\nErrors print "strata: CODE: message" and exit 1; usage errors exit 2.')

  layoutOpts(
    g
      .command('put')
      .description('copy a local file, pipe or FIFO into the DFS (into DFS_PATH/<name> when DFS_PATH is a directory); "-" reads stdin')
      .argument('<local>', 'local file, or - for stdin', localPathArg('<local>'))
      .argument('<dfsPath>', 'destination in the DFS', dfsPathArg('<dfsPath>'))
      .option('--mode <octal>', 'permission of the new file (default: the local file\'s)', permArg)
      .option('--json', 'print JSON'),
  )
    .addHelpText(
      'after',
      `
The copy is atomic: the data goes to a temporary file next to the target
(.NAME.strata-put-XXXXXXXX), is synced and closed, and only then renamed over
the target. A failed or interrupted put (error, --timeout, Ctrl-C, SIGTERM)
removes the temporary file (best effort) and leaves the target as it was.
An existing target keeps its layout and permission unless --mode or the layout
options say otherwise (a chunk size below 4K, which a new layout may not name,
gives way to the directory's layout); the new file belongs to the caller. A symlink target is
followed (the file it names is replaced, or created when the link dangles).
LOCAL may be anything readable but a directory: a regular file, or stdin ("-",
/dev/stdin), a pipe or a FIFO, read in order (a new file is then 0644).
On a terminal a progress bar is drawn on stderr; otherwise only the summary.`,
    )
    .action((local: string, dfsPath: string, o, cmd: Command) => {
      // the paths a refusal may name a directory of (the target is known once resolved)
      const names = [dfsPath]
      return exitOnInterrupt(
        interruptible('fs put', (signal) =>
          withFileSystem(
            cmd,
            async (fsys, json) => {
              const progress = transferProgress(json, signal)
              let r: PutResult
              try {
                r = await putFile(fsys, local, dfsPath, o, signal, names, progress)
              } finally {
                progress.stop()
              }
              if (json) return printJson(r)
              out(printable(`${local} -> ${r.path}: ${r.bytes} bytes in ${r.seconds.toFixed(2)} s`))
            },
            names,
          ),
        ),
      )
    })

  g.command('get')
    .description('copy a DFS file to a local file (into LOCAL/<name> when LOCAL is a directory); "-" writes stdout')
    .argument('<dfsPath>', 'file in the DFS', dfsPathArg('<dfsPath>'))
    .argument('<local>', 'local destination, or - for stdout', localPathArg('<local>'))
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
A regular-file destination is replaced atomically: the data goes to a temporary
file beside it (.NAME.strata-get-XXXXXXXX), is fsynced, and only then renamed
over it (a symlink is followed: the file it points to is replaced). A failed or
interrupted get (error, --timeout, Ctrl-C, SIGTERM) removes the temporary file
and leaves the destination as it was. A new file gets the DFS file's permission
less the umask; a replaced one keeps its permission (and owner, where allowed).
Stdout, pipes, FIFOs, character devices and paths under /dev and /proc are
written in place, in order. On a terminal a progress bar is drawn on stderr;
otherwise only the summary.`,
    )
    .action((dfsPath: string, local: string, _o, cmd: Command) =>
      exitOnInterrupt(
        interruptible('fs get', (signal) =>
          withFileSystem(
            cmd,
            async (fsys, json) => {
              const progress = transferProgress(json, signal)
              let r: GetResult
              try {
                r = await getFile(fsys, dfsPath, local, signal, progress)
              } finally {
                progress.stop()
              }
              if (r.toStdout) return
              if (json) return printJson({ path: r.path, local: r.local, bytes: r.bytes, seconds: r.seconds })
              out(printable(`${r.path} -> ${r.local}: ${r.bytes} bytes in ${r.seconds.toFixed(2)} s`))
            },
            [dfsPath],
          ),
        ),
      ),
    )

  g.command('ls')
    .description('list a directory (or show one file); -l long format: mode nlink uid gid size mtime name')
    .argument('[path]', 'DFS path', dfsPathArg('path'), '/')
    .option('-l, --long', 'long format')
    .option('-L, --dereference', 'show what symlinks point to, not the links (the path given and, with -l, the entries)')
    .option('--json', 'print JSON records')
    .addHelpText(
      'after',
      `
As coreutils ls: a symlink given as PATH is followed when it points to a
directory, whose entries are listed, except with -l, which shows the link itself
(PATH/ or -L list the directory). As ls -b, control characters in names are
printed as C escapes (a\\nb, \\x1b); --json gives names exactly.`,
    )
    .action((p: string, o, cmd: Command) =>
      withFileSystem(
        cmd,
        async (fsys, json) => {
          let st = await fsys.lstat(p)
          // coreutils: a command-line symlink is followed unless -l (or -d/-F) says to show the link; -L always follows
          if (st.type === 'Symlink' && (o.dereference || !o.long)) {
            try {
              st = await fsys.stat(p)
            } catch (e) {
              // a dangling link is shown as the link itself, unless -L asked for what it names
              if (o.dereference || !(e instanceof StrataError) || e.code !== 'META_NOT_FOUND') throw e
            }
          }
          let items: Array<{ name: string; inode: Inode | null; type: string }>
          if (st.type !== 'Directory') items = [{ name: baseName(p), inode: st, type: st.type }]
          else {
            const all = await fsys.readdirAll(p, { status: !!o.long || json })
            items = all.entries.map((e, i) => ({ name: e.name, inode: all.inodes[i] ?? null, type: e.type }))
            if (o.dereference && (o.long || json)) {
              for (const x of items) {
                if (x.type !== 'Symlink') continue
                const to = await fsys.stat(joinPath(p, x.name)).catch(() => null)
                if (to) Object.assign(x, { inode: to, type: to.type })
              }
            }
          }
          if (json) {
            return printJson(items.map((x) => (x.inode ? inodeRecord(x.name, x.inode) : { name: x.name, type: x.type })))
          }
          if (!o.long) return out(items.map((x) => printable(x.name)).join('\n'))
          out(
            formatTable(
              items.map((x) => {
                const i = x.inode
                if (!i) return ['?', '?', '?', '?', '?', '?', x.name]
                const s = inodeStats(i)
                const when = new Date(s.mtimeMs).toISOString().replace('T', ' ').slice(0, 16)
                return [modeString(i), String(i.nlink), String(i.acl.uid), String(i.acl.gid), String(s.size), when, i.symlink ? `${x.name} -> ${i.symlink.target}` : x.name]
              }),
            ),
          )
        },
        [p],
      ),
    )

  g.command('stat')
    .description('attributes of a path (a symlink itself unless -L)')
    .argument('<path>', 'DFS path', dfsPathArg('path'))
    .option('-L, --dereference', 'follow a symlink at the end of the path')
    .option('--json', 'print JSON')
    .action((p: string, o, cmd: Command) =>
      withFileSystem(cmd, async (fsys, json) => {
        const st = o.dereference ? await fsys.stat(p) : await fsys.lstat(p)
        const rec = inodeRecord(normalizePath(p), st)
        if (json) {
          const layout = st.file?.layout ?? st.directory?.layout
          return printJson({
            ...rec,
            path: normalizePath(p),
            // who holds the directory's lock (lockDirectory / hf3fs.lock), null when free
            ...(st.directory ? { lock: st.directory.lock ? { client: st.directory.lock.client, since: isoTime(st.directory.lock.since) } : null } : {}),
            ...(layout ? { layout: { ...layout, chains: layout.chains.type === 'ChainRange' ? { ...layout.chains, seed: layout.chains.seed.toString() } : layout.chains } } : {}),
          })
        }
        const rows: string[][] = [
          ['Path', normalizePath(p)],
          ['Type', st.type],
          ['Inode', inodeHex(st.id)],
          ['Size', String(rec.size)],
          ...(st.file ? [['Length', `${st.file.length}@${st.file.truncateVer}`], ['ChunkSize', String(st.file.layout.chunkSize)], ['StripeSize', String(st.file.layout.stripeSize)]] : []),
          ['Mode', `${rec.mode} (${rec.perm})`],
          ['NLink', String(st.nlink)],
          ['Uid', String(st.acl.uid)],
          ['Gid', String(st.acl.gid)],
          ['Access', String(rec.atime)],
          ['Modify', String(rec.mtime)],
          ['Change', String(rec.ctime)],
          ...(st.symlink ? [['Target', st.symlink.target]] : []),
          ...(st.directory ? [['Lock', st.directory.lock ? `${st.directory.lock.client} since ${isoTime(st.directory.lock.since)}` : '-']] : []),
        ]
        out(formatTable(rows))
      }, [p]),
    )

  g.command('mkdir')
    .description('create directories; a path that fails is reported and the others are still made (exit 1)')
    .argument('<paths...>', 'DFS paths', dfsPathsArg('a path'))
    .option('-p, --parents', 'create missing parents; no error if it exists')
    .option('--mode <octal>', 'permission (default 0755)', permArg)
    .option('--json', 'print JSON')
    .action((paths: string[], o, cmd: Command) =>
      withFileSystem(cmd, async (fsys, json) => {
        const made: Array<Record<string, unknown>> = []
        const failed = await eachPath(fsys, paths, async (p) => {
          try {
            const st = await fsys.mkdir(p, { mode: o.mode ?? 0o755, recursive: !!o.parents })
            made.push(inodeRecord(normalizePath(p), st))
          } catch (e) {
            if (o.parents && e instanceof StrataError && e.code === 'META_EXISTS' && (await fsys.stat(p)).type === 'Directory') return
            throw e
          }
        })
        if (json) printJson(made)
        if (failed) process.exitCode = 1
      }),
    )

  g.command('rm')
    .description('remove files, symlinks and empty directories; -r whole trees; a path that fails is reported and the others still go (exit 1); META_NO_LOCK when another client holds the hf3fs.lock of the parent, of the directory or of one inside the tree')
    .argument('<paths...>', 'DFS paths', dfsPathsArg('a path'))
    .option('-r, --recursive', 'remove directories and their contents')
    .option('-f, --force', 'ignore paths that do not exist')
    .option('--json', 'print JSON')
    .action((paths: string[], o, cmd: Command) =>
      withFileSystem(cmd, async (fsys, json) => {
        const removed: string[] = []
        const failed = await eachPath(fsys, paths, async (p) => {
          try {
            if (!o.recursive) {
              const st = await fsys.lstat(p)
              if (st.type === 'Directory') await fsys.rmdir(p)
              else await fsys.unlink(p)
            } else await fsys.rm(p, { recursive: true })
            removed.push(normalizePath(p))
          } catch (e) {
            if (o.force && e instanceof StrataError && e.code === 'META_NOT_FOUND') return
            throw e
          }
        })
        if (json) printJson({ removed })
        if (failed) process.exitCode = 1
      }),
    )

  return g
}
