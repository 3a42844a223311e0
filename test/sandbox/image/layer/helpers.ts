// Helpers for the layer tests: tree snapshots to compare directory trees,
// tars crafted with tar-stream, mounts that tests tear down themselves.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import type { ExecutionContext } from 'ava'
import tarStream from 'tar-stream'
import type { Header } from 'tar-stream'
import { MNT, MS, native } from '../../../../fs/common/native.js'

export function tmpDir(t: ExecutionContext, prefix = 'strata-layer-'): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }))
  return d
}

export function mountedAt(dir: string): boolean {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === dir)
}

export function mountsUnder(dir: string): string[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m === dir || m.startsWith(dir + '/'))
}

/** Mounts and registers a teardown that unmounts (before the temp dirs are removed: teardowns run last-registered first). */
export function mount(t: ExecutionContext, source: string, target: string, fstype: string, data: string | null): void {
  fs.mkdirSync(target, { recursive: true })
  native().mount(source, target, fstype, MS.RDONLY, data)
  t.teardown(() => {
    if (mountedAt(target)) native().umount2(target, MNT.DETACH)
  })
}

export interface Node {
  type: string
  mode: string
  uid: number
  gid: number
  size?: number
  sha256?: string
  link?: string
  rdev?: string
  xattrs?: Record<string, string>
  mtime?: string
  /** Other paths of the same inode (hard links), sorted. */
  links?: string[]
}

export interface SnapshotOptions {
  /** Compare directory mtimes too (default false: implied directories and overlay merges make them differ). */
  dirMtimes?: boolean
  /** Paths whose attributes are ignored (only type kept), e.g. whiteout files. */
  typeOnly?: (rel: string) => boolean
  /** Skip the root's attributes. */
  skipRoot?: boolean
}

function typeOf(st: fs.Stats): string {
  if (st.isDirectory()) return 'dir'
  if (st.isFile()) return 'file'
  if (st.isSymbolicLink()) return 'symlink'
  if (st.isCharacterDevice()) return 'chr'
  if (st.isBlockDevice()) return 'blk'
  if (st.isFIFO()) return 'fifo'
  return 'other'
}

/** A comparable description of every entry under `root`, keyed by relative path ('.' is the root). */
export function snapshot(root: string, opts: SnapshotOptions = {}): Record<string, Node> {
  const out: Record<string, Node> = {}
  const inodes = new Map<string, string[]>()
  const walk = (abs: string, rel: string): void => {
    const st = fs.lstatSync(abs, { bigint: true })
    const plain = fs.lstatSync(abs)
    const type = typeOf(plain)
    if (opts.typeOnly?.(rel)) {
      out[rel] = { type, mode: '', uid: 0, gid: 0 }
    } else if (!(rel === '.' && opts.skipRoot)) {
      const n: Node = { type, mode: (Number(st.mode) & 0o7777).toString(8), uid: Number(st.uid), gid: Number(st.gid) }
      if (type === 'file') {
        n.size = Number(st.size)
        n.sha256 = crypto.createHash('sha256').update(fs.readFileSync(abs)).digest('hex')
      }
      if (type === 'symlink') n.link = fs.readlinkSync(abs)
      if (type === 'chr' || type === 'blk') n.rdev = String(st.rdev)
      const xa: Record<string, string> = {}
      for (const name of native().llistxattr(abs).sort()) {
        if (name.startsWith('trusted.overlay.') || name.startsWith('security.')) continue
        xa[name] = native().lgetxattr(abs, name).toString('hex')
      }
      if (Object.keys(xa).length) n.xattrs = xa
      if (type !== 'dir' || opts.dirMtimes) n.mtime = String(st.mtimeNs)
      if (type !== 'dir' && st.nlink > 1n) {
        const key = `${st.dev}:${st.ino}`
        inodes.set(key, [...(inodes.get(key) ?? []), rel])
      }
      out[rel] = n
    }
    if (type === 'dir') {
      for (const name of fs.readdirSync(abs).sort()) walk(path.join(abs, name), rel === '.' ? name : `${rel}/${name}`)
    }
  }
  walk(root, '.')
  for (const paths of inodes.values()) {
    for (const p of paths) out[p]!.links = paths.filter((x) => x !== p).sort()
  }
  return out
}

export type PackEntry = { header: Partial<Header> & { name: string; pax?: Record<string, string> }; data?: Buffer | string }

/** A tar made by tar-stream from the given entries (used to craft good and bad layers). */
export async function packTar(entries: PackEntry[]): Promise<Buffer> {
  const pack = tarStream.pack()
  const chunks: Buffer[] = []
  const done = (async () => {
    for await (const c of pack as AsyncIterable<Buffer>) chunks.push(c)
  })()
  for (const e of entries) {
    await new Promise<void>((resolve, reject) => {
      const cb = (err?: Error | null): void => (err ? reject(err) : resolve())
      if (e.data !== undefined) pack.entry(e.header as any, e.data, cb)
      else pack.entry(e.header as any, cb)
    })
  }
  pack.finalize()
  await done
  return Buffer.concat(chunks)
}

export function file(name: string, data: string | Buffer = '', extra: Partial<PackEntry['header']> = {}): PackEntry {
  return { header: { name, type: 'file', mode: 0o644, mtime: new Date(1_600_000_000_000), ...extra }, data }
}

export function dir(name: string, extra: Partial<PackEntry['header']> = {}): PackEntry {
  return { header: { name, type: 'directory', mode: 0o755, mtime: new Date(1_600_000_000_000), ...extra } }
}

export function symlink(name: string, target: string): PackEntry {
  return { header: { name, type: 'symlink', linkname: target, mode: 0o777, mtime: new Date(1_600_000_000_000) } }
}

export function hardlink(name: string, target: string): PackEntry {
  return { header: { name, type: 'link', linkname: target, mode: 0o644, mtime: new Date(1_600_000_000_000) } }
}

export function streamOf(buf: Buffer, chunk = 7000): Readable {
  const parts: Buffer[] = []
  for (let i = 0; i < buf.length; i += chunk) parts.push(buf.subarray(i, i + chunk))
  return Readable.from(parts, { objectMode: false })
}

export function sha256(buf: Buffer): string {
  return 'sha256:' + crypto.createHash('sha256').update(buf).digest('hex')
}

export async function readAll(r: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of r as AsyncIterable<Buffer>) chunks.push(c)
  return Buffer.concat(chunks)
}
