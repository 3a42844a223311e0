// Shared fixtures for the chunk engine tests: a fresh target directory per
// test, removed on teardown, and request builders.
import type { ExecutionContext } from 'ava'
import { promises as fsp } from 'node:fs'
import * as os from 'node:os'
import * as path from 'node:path'
import { crc32c } from '@node-rs/crc32'
import { ChunkEngine, type ApplyUpdateOptions } from '../../../../fs/storage/engine/index.js'
import type { UpdateIO, UpdateType } from '../../../../fs/storage/protocol.js'

export const CHUNK = 64 * 1024

export interface Fixture {
  dir: string
  engine: ChunkEngine
  /** Closes the current engine and opens the directory again. */
  reopen(opts?: { fsync?: boolean; targetId?: number }): Promise<ChunkEngine>
}

export async function setup(t: ExecutionContext, opts: { fsync?: boolean; targetId?: number; directWrites?: boolean } = {}): Promise<Fixture> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), 'strata-engine-'))
  const fx: Fixture = {
    dir,
    engine: await ChunkEngine.open({ dir, targetId: opts.targetId ?? 101, fsync: opts.fsync ?? false, directWrites: opts.directWrites }),
    async reopen(o = {}) {
      await fx.engine.close()
      fx.engine = await ChunkEngine.open({ dir, targetId: o.targetId ?? opts.targetId ?? 101, fsync: o.fsync ?? opts.fsync ?? false, directWrites: opts.directWrites })
      return fx.engine
    },
  }
  t.teardown(async () => {
    await fx.engine.close()
    await fsp.rm(dir, { recursive: true, force: true })
  })
  return fx
}

/** 16-byte chunk id: 4-byte prefix (think inode) + 12 bytes ending in n. */
export function cid(n: number, prefix = 0x1234): Buffer {
  const b = Buffer.alloc(16)
  b.writeUInt32BE(prefix, 0)
  b.writeUInt32BE(n, 12)
  return b
}

export function crc(b: Buffer): number {
  return crc32c(b) >>> 0
}

export function pattern(len: number, seed: number): Buffer {
  const b = Buffer.alloc(len)
  for (let i = 0; i < len; i++) b[i] = (seed * 31 + i * 7) & 0xff
  return b
}

export function writeIO(chunkId: Buffer, offset: number, data: Buffer, o: { updateVer?: number; chunkSize?: number; chainVer?: number; checksum?: number } = {}): UpdateIO {
  return {
    key: { chainId: 1, chainVer: o.chainVer ?? 1, chunkId },
    offset,
    length: data.length,
    chunkSize: o.chunkSize ?? CHUNK,
    data,
    updateVer: o.updateVer ?? 0,
    updateType: 'WRITE',
    checksum: o.checksum ?? crc(data),
  }
}

export function opIO(chunkId: Buffer, type: Exclude<UpdateType, 'WRITE'>, length: number, o: { updateVer?: number; chunkSize?: number } = {}): UpdateIO {
  return {
    key: { chainId: 1, chainVer: 1, chunkId },
    offset: 0,
    length,
    chunkSize: o.chunkSize ?? CHUNK,
    updateVer: o.updateVer ?? 0,
    updateType: type,
    checksum: 0,
  }
}

export function client(chainVer = 1): ApplyUpdateOptions {
  return { fromClient: true, isSyncing: false, chainVer, clientId: 'client-1', requestId: 7 }
}

export function forwarded(chainVer = 1): ApplyUpdateOptions {
  return { fromClient: false, isSyncing: false, chainVer, clientId: 'client-1', requestId: 7 }
}

export function syncing(chainVer = 1): ApplyUpdateOptions {
  return { fromClient: false, isSyncing: true, chainVer, clientId: 'resync', requestId: 0 }
}

/** Client write followed by commit, as a tail replica would do it. */
export async function writeCommit(engine: ChunkEngine, chunkId: Buffer, offset: number, data: Buffer, chainVer = 1) {
  const r = await engine.applyUpdate(writeIO(chunkId, offset, data), client(chainVer))
  return engine.commit(chunkId, r.updateVer, chainVer)
}

/** Names of data files a chunk has on disk. */
export async function chunkFiles(dir: string, chunkId: Buffer): Promise<string[]> {
  const hex = chunkId.toString('hex')
  const out: string[] = []
  const root = path.join(dir, 'chunks')
  for (const sub of await fsp.readdir(root)) {
    for (const name of await fsp.readdir(path.join(root, sub))) if (name.startsWith(hex + '.')) out.push(name)
  }
  return out.sort()
}
