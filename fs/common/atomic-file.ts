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
    // not atomic: a crash here may tear the file; its readers say how to recover
    fs.writeSync(fd, data, 0, data.length, 0)
    if (old > data.length) fs.ftruncateSync(fd, data.length)
    fs.fsyncSync(fd)
  } catch (e) {
    throw full(e)
  } finally {
    fs.closeSync(fd)
  }
}
