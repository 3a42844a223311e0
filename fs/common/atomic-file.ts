// Small state files (cluster.json, a FUSE daemon's state) replaced whole.
// They sit next to the data, on a disk that may be full: then no temp file
// can be written, and a cluster that cannot record its pids could be neither
// stopped cleanly nor started again to free space through it.

import fs from 'node:fs'
import { StrataError } from './errors.js'

/**
 * Replaces `file` with `text` atomically (temp file + rename). On a full disk
 * it rewrites the existing file in place instead, in the blocks it already
 * holds (these files change by a few pids and words, not in size), and only
 * when even that fails is it NO_SPACE. The temp file never stays behind.
 */
export function replaceFile(file: string, text: string): void {
  const tmp = `${file}.${process.pid}.tmp`
  try {
    fs.writeFileSync(tmp, text)
    fs.renameSync(tmp, file)
  } catch (e) {
    fs.rmSync(tmp, { force: true })
    if (!isNoSpace(e)) throw e
    rewriteInPlace(file, text, e)
  }
}

function isNoSpace(e: unknown): boolean {
  const code = (e as NodeJS.ErrnoException)?.code
  return code === 'ENOSPC' || code === 'EDQUOT'
}

function rewriteInPlace(file: string, text: string, first: unknown): void {
  const full = (cause: unknown) => new StrataError('NO_SPACE', `cannot write ${file}: the disk is full; free some space on it`, { cause })
  let fd: number
  try {
    fd = fs.openSync(file, 'r+')
  } catch {
    throw full(first)
  }
  try {
    const data = Buffer.from(text)
    const old = fs.fstatSync(fd).size
    if (data.length > old) {
      // The part beyond the old end needs new blocks, which a full disk may
      // not have (write(2) then stores what fits and says so by its count, no
      // error): it goes first, so when it does not fit the old text is intact.
      try {
        writeAll(fd, data.subarray(old), old)
      } catch (e) {
        fs.ftruncateSync(fd, old)
        throw e
      }
    }
    // not atomic: a crash here may tear the file; its readers say how to recover
    writeAll(fd, data.subarray(0, Math.min(old, data.length)), 0)
    if (old > data.length) fs.ftruncateSync(fd, data.length)
    fs.fsyncSync(fd)
  } catch (e) {
    throw full(e)
  } finally {
    fs.closeSync(fd)
  }
}

/** Writes all of `data` at `pos`; a write that stores less than asked for and then nothing is ENOSPC. */
function writeAll(fd: number, data: Buffer, pos: number): void {
  let done = 0
  while (done < data.length) {
    const n = fs.writeSync(fd, data, done, data.length - done, pos + done)
    if (n <= 0) throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' })
    done += n
  }
}
