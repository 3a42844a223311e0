// Helpers for the layer tests: tars crafted with tar-stream, the fixture's
// layers decompressed, mounts that tests tear down themselves. Tree
// snapshots are test/helpers/tree-compare.ts.
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import type { ExecutionContext, TestFn } from 'ava'
import tarStream from 'tar-stream'
import type { Header } from 'tar-stream'
import { MNT, MS, native } from '../../../../fs/common/native.js'
import { decompressStream } from '../../../../sandbox/image/layer/index.js'
import { useOciFixture } from '../../../helpers/oci-fixtures.js'

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

/**
 * The OCI fixture's layers as plain tars, lowest first: hooks registered on
 * `test` build the fixture (useOciFixture) and fill the returned array
 * before the first test.
 */
export function fixtureLayerTars(test: TestFn): Buffer[] {
  const tars: Buffer[] = []
  useOciFixture(test, async (fx) => {
    for (const l of fx.layers) tars.push(await readAll(await decompressStream(fs.createReadStream(l.blobPath), l.mediaType)))
  })
  return tars
}
