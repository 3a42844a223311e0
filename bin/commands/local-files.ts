// Local files named on the command line (fs get/put, image export): errors in the
// catalogue's terms, and where writing a destination path lands. A regular file is
// replaced atomically (a temporary beside the file its symlinks end at, renamed over
// it); stdout, pipes, FIFOs, devices and /dev or /proc paths are written in place.
// /dev/stdout is a symlink into /proc: a rename "over" it would replace the symlink
// in /dev with a regular file for every process on the machine.

import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import type { Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import util from 'node:util'
import { StrataError, fromSystemError } from '../../fs/common/errors.js'

/**
 * A failed operation on a local file (put's source, get's destination) as the catalogue
 * error the command reports: its errno's code (ENOENT → NOT_FOUND, EACCES →
 * PERMISSION_DENIED, …), anything else LOCAL_IO_ERROR, which is not retryable (IO_ERROR
 * is a storage disk's, which the client retries on another replica). A temporary file's
 * name in the message is replaced by the path the user gave.
 */
export function localError(e: unknown, temp?: { tmp: string; dest: string }): unknown {
  if (e instanceof StrataError) return e
  const se = fromSystemError(e)
  if (!se) return e
  // the temporary's rename over the destination reads "rename over 'DEST'", not "rename 'DEST' -> 'DEST'"
  const reason = temp ? se.reason.split(`'${temp.tmp}' -> `).join('over ').split(temp.tmp).join(temp.dest) : se.reason
  return new StrataError(se.code === 'IO_ERROR' ? 'LOCAL_IO_ERROR' : se.code, reason, { cause: e })
}

/** fs.statSync that says null for a path that does not exist (other failures are localError's). */
export function localStat(p: string): fs.Stats | null {
  try {
    return fs.statSync(p)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw localError(e)
  }
}

/** Device and process paths (/dev/stdout, /dev/fd/N, /proc/self/fd/N) are written in place, never replaced by a rename. */
export function isDevicePath(p: string): boolean {
  return /^\/(dev|proc)\//.test(path.resolve(p))
}

/** Symlinks at the end of a local path, followed (relative targets from the link's directory) up to Linux's 40. */
export function followLocalLinks(p: string): string {
  let cur = path.resolve(p)
  for (let hops = 0; ; hops++) {
    let st: fs.Stats
    try {
      st = fs.lstatSync(cur)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return cur
      throw localError(e)
    }
    if (!st.isSymbolicLink()) return cur
    if (hops >= 40) throw new StrataError('INVALID_ARGUMENT', `${p}: too many levels of symbolic links`)
    cur = path.resolve(path.dirname(cur), fs.readlinkSync(cur))
  }
}

/** The directory a local file is to be created in: it must exist and be a directory. */
export function checkLocalDir(dir: string): void {
  const st = localStat(dir)
  if (!st) throw new StrataError('NOT_FOUND', `local directory ${dir} does not exist`)
  if (!st.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${dir} is not a directory`)
}

/** Whether `st` is the file open as descriptor `fd`. */
export function sameFile(st: fs.Stats, fd: number): boolean {
  try {
    const o = fs.fstatSync(fd)
    return o.dev === st.dev && o.ino === st.ino
  } catch {
    return false
  }
}

/** Where writing a local destination path lands (see the file comment). */
export type LocalDestination =
  /** this process's standard output (`-`, or /dev/stdout, /dev/fd/1 …): written in order, nothing printed into it */
  | { kind: 'stdout' }
  /** a pipe, FIFO, device or /dev, /proc path: opened and written in order, never replaced */
  | { kind: 'in-place'; path: string }
  /** a regular file (through symlinks) or a new one: a temporary beside `final`, renamed over it */
  | { kind: 'replace'; final: string; existing: fs.Stats | null }

/**
 * Classifies `dest` for writing. A directory is INVALID_ARGUMENT (callers that put a file
 * into a directory join the name first); a new file's directory must exist (NOT_FOUND).
 */
export function localDestination(dest: string, what = 'file'): LocalDestination {
  if (dest === '') throw new StrataError('INVALID_ARGUMENT', `the ${what} name is empty`)
  if (dest === '-') return { kind: 'stdout' }
  const st = localStat(dest)
  if (st?.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `${dest} is a directory`)
  if (st && isDevicePath(dest) && sameFile(st, 1)) return { kind: 'stdout' }
  if (st && (!st.isFile() || isDevicePath(dest))) return { kind: 'in-place', path: dest }
  if (!st && /\/\.{0,2}$/.test(dest)) throw new StrataError('NOT_FOUND', `local directory ${dest} does not exist`)
  const final = followLocalLinks(dest)
  checkLocalDir(path.dirname(final))
  const existing = localStat(final)
  if (existing && !existing.isFile()) throw new StrataError('INVALID_ARGUMENT', `${dest} is not a regular file`)
  return { kind: 'replace', final, existing }
}

/**
 * Opens an in-place destination (a pipe, FIFO, device) as a stream; a failure is localError's.
 * A FIFO is written as a socket (openFifoWriter), so that `signal` (Ctrl-C) can end a wait
 * for a reader, or for one that stopped reading.
 */
export async function openInPlace(p: string, signal: AbortSignal): Promise<Writable> {
  if (localStat(p)?.isFIFO()) return openFifoWriter(p, signal)
  const fh = await fs.promises.open(p, 'w').catch((e: unknown) => {
    throw localError(e)
  })
  const ws = fh.createWriteStream()
  // a failed write is reported to the writer by its callback; the stream's 'error' event must not crash the process
  ws.on('error', () => undefined)
  return ws
}

/**
 * Ends a stream from openInPlace and waits for its descriptor to be closed (a write error was
 * the writer's to report); once `signal` is aborted it is closed at once, since a reader that
 * stopped reading would keep the end waiting.
 */
export async function closeInPlace(ws: Writable, signal?: AbortSignal): Promise<void> {
  if (!signal?.aborted) {
    ws.end()
    await finished(ws, signal ? { signal } : {}).catch(() => undefined)
  }
  ws.destroy()
}

/**
 * A FIFO to read from, as a socket on a non-blocking descriptor. A stream of fs reads
 * would block a libuv pool thread in read(2) until a writer writes or leaves, and
 * process.exit joins those threads: Ctrl-C of `fs put FIFO` with an idle writer printed
 * CANCELLED and then never exited. epoll waits for a writer as the blocking open did
 * (no end of file before one has come and gone) and holds no thread.
 */
export function openFifoReader(p: string): net.Socket {
  let fd: number
  try {
    fd = fs.openSync(p, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK)
  } catch (e) {
    throw localError(e)
  }
  return new net.Socket({ fd, readable: true, writable: false })
}

/**
 * A FIFO to write to, as a socket on a non-blocking descriptor, once it has a reader
 * (as the blocking open waited for one; polled, since a non-blocking open without a
 * reader fails ENXIO). A blocking open or write would hold a libuv pool thread until a
 * reader came or read, and process.exit waits for those threads: Ctrl-C of `fs get
 * /f FIFO` with no reader, or with one that stopped reading, never exited.
 */
export async function openFifoWriter(p: string, signal: AbortSignal): Promise<net.Socket> {
  for (;;) {
    signal.throwIfAborted()
    try {
      const fd = fs.openSync(p, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK)
      const s = new net.Socket({ fd, readable: false, writable: true })
      // a failed write is reported to the writer by its callback; the 'error' event must not crash the process
      s.on('error', () => undefined)
      return s
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENXIO') throw localError(e)
    }
    await sleep(50, undefined, { signal })
  }
}

/**
 * A socket's system error (`write EPIPE`) in the words fs calls use (`EPIPE: broken pipe,
 * write`), so a FIFO written as a socket fails as any other local file does.
 */
export function fsStyleError(e: unknown): unknown {
  const ne = e as NodeJS.ErrnoException
  const known = typeof ne?.errno === 'number' ? util.getSystemErrorMap().get(ne.errno) : undefined
  if (!known || typeof ne.syscall !== 'string') return e
  return Object.assign(new Error(`${known[0]}: ${known[1]}, ${ne.syscall}`, { cause: e }), { code: ne.code, errno: ne.errno, syscall: ne.syscall })
}
