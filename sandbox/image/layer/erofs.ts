// Directory → EROFS layer file with mkfs.erofs (erofs-utils 1.5), so that the
// same tree always gives the same bytes (a layer is named by their sha256):
//
//  - `-U <fixed uuid>`: the UUID is otherwise random;
//  - `SOURCE_DATE_EPOCH=<newest mtime in the tree + 1>`: the superblock build
//    time is otherwise the wall clock. mkfs *clamps* every mtime at or after
//    the epoch to the epoch (and forces extended inodes), so the epoch must lie
//    after every mtime for `--preserve-mtime` to keep all of them exactly;
//    `-T` cannot be used, it overwrites every mtime;
//  - mkfs sorts directory entries and shared xattrs itself; inline xattrs keep
//    the filesystem's listing order, which unpackLayer makes name order.
//
// erofs-utils 1.5 silently skips every entry whose name starts with
// "lost+found" (fixed upstream in b1dfb6e). An empty directory of that name is
// dropped; anything else of that name fails the build rather than lose data.
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { StrataError } from '../../../fs/common/errors.js'
import { sha256File } from './hash.js'
import type { BuildErofsOptions, BuildErofsResult } from './types.js'

export const EROFS_UUID = '5472a7a0-0000-4000-8000-000000000000'
const LOST_FOUND = 'lost+found'
const STDERR_MAX = 16 * 1024

/**
 * Newest mtime (whole seconds) of `dir` and everything under it; refuses names
 * mkfs.erofs 1.5 would drop. Synchronous calls: the tree was just written and
 * its metadata is in the page cache (a thread pool round trip per lstat cost
 * more than the lstat).
 */
export async function newestMtime(dir: string): Promise<number> {
  const sec = (p: string): number => Number(fs.lstatSync(p, { bigint: true }).mtimeNs / 1_000_000_000n)
  let max = sec(dir)
  const stack = [dir]
  while (stack.length) {
    const d = stack.pop()!
    for (const ent of fs.readdirSync(d, { withFileTypes: true })) {
      const p = d + '/' + ent.name
      if (ent.name.startsWith(LOST_FOUND)) {
        const empty = ent.isDirectory() && fs.readdirSync(p).length === 0
        if (!empty) {
          throw new StrataError(
            'IMAGE_BUILD_FAILED',
            `${p}: mkfs.erofs 1.5 skips every name starting with "${LOST_FOUND}"; only an empty directory may be dropped`,
          )
        }
        continue
      }
      const s = sec(p)
      if (s > max) max = s
      if (ent.isDirectory()) stack.push(p)
    }
  }
  return max
}

export { sha256File }

function runMkfs(args: string[], env: NodeJS.ProcessEnv): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('mkfs.erofs', args, { stdio: ['ignore', 'ignore', 'pipe'], env })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => {
      if (stderr.length < STDERR_MAX) stderr += d.toString()
    })
    child.once('error', (e) => reject(new StrataError('IMAGE_BUILD_FAILED', `mkfs.erofs could not be started: ${e.message}`, { cause: e })))
    child.once('close', (code, signal) => {
      if (code === 0) resolve()
      else {
        reject(
          new StrataError('IMAGE_BUILD_FAILED', `mkfs.erofs ${signal ?? `exit ${code}`}: ${stderr.trim()}`, {
            detail: { stderr: stderr.slice(0, STDERR_MAX), code, signal },
          }),
        )
      }
    })
  })
}

/**
 * Builds an EROFS image of `dir` at `outFile` (written to a temporary sibling,
 * renamed into place when complete). The same tree gives the same bytes; per-file
 * mtimes are kept to the nanosecond. mkfs.erofs failure → IMAGE_BUILD_FAILED with
 * its stderr.
 */
export async function buildErofs(dir: string, outFile: string, opts: BuildErofsOptions = {}): Promise<BuildErofsResult> {
  return build(dir, outFile, opts, true) as Promise<BuildErofsResult>
}

/**
 * buildErofs without hashing the result: for a caller that hashes the file
 * while it does something else with it (an import hashes it while uploading).
 */
export async function buildErofsFile(dir: string, outFile: string, opts: BuildErofsOptions = {}): Promise<{ size: number }> {
  return build(dir, outFile, opts, false)
}

async function build(dir: string, outFile: string, opts: BuildErofsOptions, hash: boolean): Promise<{ size: number; digest?: string }> {
  if (opts.compress !== undefined && opts.compress !== 'lz4' && opts.compress !== 'lz4hc') {
    throw new TypeError(`buildErofs: compress must be 'lz4' or 'lz4hc'`)
  }
  let st: fs.Stats
  try {
    st = await fs.promises.lstat(dir)
  } catch (e) {
    throw new StrataError('IMAGE_BUILD_FAILED', `${dir}: ${(e as Error).message}`, { cause: e })
  }
  if (!st.isDirectory()) throw new StrataError('IMAGE_BUILD_FAILED', `${dir} is not a directory`)
  const epoch = (await newestMtime(dir)) + 1
  const tmp = path.join(path.dirname(outFile), `.${path.basename(outFile)}.${process.pid}.${crypto.randomBytes(4).toString('hex')}.tmp`)
  const args = ['--quiet', `-U${EROFS_UUID}`, '--preserve-mtime']
  if (opts.compress) args.push(`-z${opts.compress}`)
  args.push(tmp, dir)
  try {
    await runMkfs(args, { ...process.env, SOURCE_DATE_EPOCH: String(epoch) })
    const r = hash ? await sha256File(tmp) : { size: (await fs.promises.stat(tmp)).size }
    await fs.promises.rename(tmp, outFile)
    return r
  } catch (e) {
    await fs.promises.rm(tmp, { force: true })
    if (e instanceof StrataError) throw e
    throw new StrataError('IMAGE_BUILD_FAILED', `${outFile}: ${(e as Error).message}`, { cause: e })
  }
}

/** Where an EROFS image's superblock starts, and the bytes of it `erofsIsPlain` reads. */
export const EROFS_SUPERBLOCK_OFFSET = 1024
export const EROFS_SUPERBLOCK_BYTES = 128
/** feature_incompat bit of images with chunk-based files */
const EROFS_FEATURE_CHUNKED_FILE = 0x4

/**
 * Whether the superblock (EROFS_SUPERBLOCK_BYTES from EROFS_SUPERBLOCK_OFFSET)
 * is that of a layer built without compression: no incompatible feature but
 * chunked files (tarToErofs's sparse files) and no compression algorithms, as
 * tarToErofs and mkfs.erofs without -z write it. A compressed build (-zlz4, -zlz4hc: the LZ4 zero-padding feature at
 * least) and anything that is not an EROFS superblock are not. lz4 and lz4hc
 * layers cannot be told apart this way.
 */
export function erofsIsPlain(sb: Buffer): boolean {
  if (sb.length < EROFS_SUPERBLOCK_BYTES || sb.readUInt32LE(0) !== 0xe0f5e1e2) return false
  // feature_incompat at 0x50 (CHUNKED_FILE, 0x4, is tarToErofs's sparse files: still uncompressed);
  // u.available_compr_algs / lz4_max_distance at 0x54
  return (sb.readUInt32LE(0x50) & ~EROFS_FEATURE_CHUNKED_FILE) === 0 && sb.readUInt16LE(0x54) === 0
}
