// fsx against the file client library, without FUSE (test/helpers/fsx.ts):
// the op lists of the FUSE fsx test (without the mmap ops) applied through
// FileSystem open/read/write/ftruncate/fsync/close, two read-write handles
// and an O_APPEND one on a file of 64 KiB chunks striped over 3 chains,
// against an in-memory model; `cross` ops fsync every handle and read the
// whole file through a second FileSystem (another client).
//
// More seeds: FSX_SEEDS=50 [FSX_SEED0=1000] [FSX_OPS=800] npx ava dist/test/fs/client/file/fsx.test.js
// A failing seed is shrunk to a short op list with FSX_SHRINK=1 (printed as JSON).

import test from 'ava'
import type { FileHandle, FileSystem } from '../../../../fs/client/index.js'
import { fsxOpCount, fsxSeeds, genOps, shrinkOps, type FsxOp, type FsxWrite } from '../../../helpers/fsx.js'
import { patternBytes } from '../../../helpers/random.js'
import { startFsCluster } from './helpers.js'

// FSX_CHUNK=4096 tries another chunk size (the file stays under 40 chunks)
const CHUNK = Number(process.env.FSX_CHUNK ?? 64 * 1024)
const LAYOUT = { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 3, chains: { type: 'Empty' as const } }

function firstDiff(a: Buffer, b: Buffer): number {
  const n = Math.min(a.length, b.length)
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i
  return n
}

/** Applies the ops to `path` through `fs` and a model; '' when they pass, else what failed. */
export async function runFsx(fs: FileSystem, other: FileSystem, path: string, ops: FsxOp[]): Promise<string> {
  let model = Buffer.alloc(0)
  const put = (off: number, b: Buffer) => {
    if (model.length < off + b.length) model = Buffer.concat([model, Buffer.alloc(off + b.length - model.length)])
    b.copy(model, off)
  }
  const cmp = (what: string, got: Buffer, want: Buffer): string => {
    if (got.equals(want)) return ''
    const at = firstDiff(got, want)
    return `${what}: ${got.length} bytes, expected ${want.length}; first difference at ${at}`
  }
  const readAll = async (fh: FileHandle, len: number, off: number) => (await fs.read(fh, len, off)).buffer
  const fds: FileHandle[] = [await fs.open(path, 'w+')]
  fds.push(await fs.open(path, 'r+'))
  let ap = await fs.open(path, 'a')
  let ro = await fs.open(path, 'r')
  let i = 0
  const fail = (msg: string) => `op ${i} ${JSON.stringify(ops[i] ?? 'end')}: ${msg}`
  try {
    for (; i < ops.length; i++) {
      const op = ops[i]!
      let err = ''
      switch (op.op) {
        case 'write':
        case 'mapwrite': {
          if (op.op === 'mapwrite' && op.off + op.len > model.length) break
          const b = patternBytes(op.len, op.seed)
          const n = await fs.write(fds[op.op === 'write' ? op.fd : 1]!, b, op.off)
          if (n !== b.length) err = `short write ${n}`
          put(op.off, b)
          break
        }
        case 'read':
        case 'mapread':
          err = cmp('read', await readAll(fds[op.op === 'read' ? op.fd : 0]!, op.len, op.off), model.subarray(op.off, op.off + op.len))
          break
        case 'truncate':
          await fs.ftruncate(fds[op.fd]!, op.size)
          model = op.size <= model.length ? model.subarray(0, op.size) : Buffer.concat([model, Buffer.alloc(op.size - model.length)])
          break
        case 'fsync':
          await fs.fsync(fds[op.fd]!)
          break
        case 'reopen':
          await fs.close(fds[op.fd]!)
          fds[op.fd] = await fs.open(path, 'r+')
          break
        case 'append': {
          const b = patternBytes(op.len, op.seed)
          const n = await fs.write(ap, b)
          if (n !== b.length) err = `short append ${n}`
          put(model.length, b)
          break
        }
        case 'cross': {
          for (const fh of [...fds, ap]) await fs.fsync(fh)
          const len = (await other.stat(path)).file!.length
          if (len !== model.length) err = `other client: length ${len}, model ${model.length}`
          else err = cmp('other client', await other.readFile(path), model)
          break
        }
        case 'solo': {
          for (const fh of [...fds, ap]) await fs.close(fh)
          const parts: Buffer[] = []
          for (let at = 0; ; ) {
            const b = await readAll(ro, op.piece, at)
            if (b.length === 0) break
            parts.push(b)
            at += b.length
          }
          err = cmp('sequential read-only read', Buffer.concat(parts), model)
          fds[0] = await fs.open(path, 'r+')
          fds[1] = await fs.open(path, 'r+')
          ap = await fs.open(path, 'a')
          break
        }
        case 'roread':
          err = cmp('read-only read', await readAll(ro, op.len, op.off), model.subarray(op.off, op.off + op.len))
          break
        case 'handoff': {
          for (const fh of [...fds, ap, ro]) await fs.close(fh)
          const ofh = await other.open(path, 'r+')
          try {
            if (op.size !== undefined) {
              await other.ftruncate(ofh, op.size)
              model = op.size <= model.length ? model.subarray(0, op.size) : Buffer.concat([model, Buffer.alloc(op.size - model.length)])
            } else {
              const b = patternBytes(op.len, op.seed)
              if ((await other.write(ofh, b, op.off)) !== b.length) err = 'short write through the other client'
              put(op.off, b)
            }
          } finally {
            await other.close(ofh)
          }
          fds[0] = await fs.open(path, 'r+')
          fds[1] = await fs.open(path, 'r+')
          ap = await fs.open(path, 'a')
          ro = await fs.open(path, 'r')
          break
        }
        case 'pair': {
          const { a, b } = op
          const ba = patternBytes(a.len, a.seed)
          const want = Buffer.from(model.subarray(b.off, b.off + b.len))
          const [na, rb] = await Promise.all([fs.write(fds[0]!, ba, a.off), b.op === 'write' ? fs.write(fds[1]!, patternBytes(b.len, b.seed), b.off) : readAll(fds[1]!, b.len, b.off)])
          if (na !== ba.length) err = `short write ${na}`
          put(a.off, ba)
          if (typeof rb === 'number') {
            if (rb !== b.len) err = `short write ${rb}`
            put(b.off, patternBytes(b.len, (b as FsxWrite).seed))
          }
          else err ||= cmp('read beside a write', rb, want)
          break
        }
        case 'check': {
          const len = (await fs.fstat(fds[op.fd]!)).file!.length
          if (len !== model.length) err = `fstat length ${len}, model ${model.length}`
          else err = cmp('check', await readAll(fds[op.fd]!, model.length + 4096, 0), model)
          break
        }
      }
      if (err) return fail(err)
    }
    for (const fh of [...fds, ap, ro]) await fs.close(fh)
    const len = (await other.stat(path)).file!.length
    if (len !== model.length) return fail(`after close: length ${len}, model ${model.length}`)
    const err = cmp('other client after close', await other.readFile(path), model)
    return err ? fail(err) : ''
  } catch (e) {
    return fail(`threw ${(e as Error).stack ?? String(e)}`)
  } finally {
    for (const fh of [...fds, ap, ro]) await fs.close(fh).catch(() => undefined)
  }
}

test('fsx through the file client: random ops on a 64 KiB-chunk striped file match the model, also through another client', async (t) => {
  t.timeout(20 * 60_000)
  const c = await startFsCluster(t, { chains: 3, stripeSize: 2 })
  // seeds take turns with the default write buffer, write-through, a small buffer flushed in place,
  // and length hints sent every few milliseconds (periodic syncs between any two ops)
  const variants = [c.fs(), c.fs({ writeBufferSize: 0 }), c.fs({ writeBufferSize: 100_000, writeBehind: 0 }), c.fs({ writeBufferSize: 100_000, periodicSyncMs: 3 })]
  const other = c.fs()
  await other.mkdir('/fsx', { layout: LAYOUT })
  const n = fsxOpCount(250)
  for (const seed of fsxSeeds(1, 4)) {
    const fs = variants[seed % variants.length]!
    const ops = genOps(seed, n, { chunkSize: CHUNK, maxLen: 40 * CHUNK, mmap: false })
    const err = await runFsx(fs, other, `/fsx/s${seed}`, ops)
    if (!err) {
      const l = (await fs.stat(`/fsx/s${seed}`)).file!.layout
      t.deepEqual([l.chunkSize, l.stripeSize], [CHUNK, 3])
      continue
    }
    let msg = `seed ${seed} (${ops.length} ops): ${err}`
    if (process.env.FSX_SHRINK) {
      let k = 0
      const min = await shrinkOps(ops, async (cand) => (await runFsx(fs, other, `/fsx/shrink-${seed}-${++k}`, cand)) !== '')
      msg += `\nshrunk to ${min.length} ops: ${JSON.stringify(min)}\n${await runFsx(fs, other, `/fsx/min-${seed}`, min)}`
    }
    t.fail(msg)
    if (!process.env.FSX_KEEP_GOING) break
  }
})
