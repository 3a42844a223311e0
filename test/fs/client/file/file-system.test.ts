// The file API on a real cluster: open/read/write/close round trips, holes,
// namespace calls, write buffer behaviour seen from storage, O_TRUNC and
// truncate/extend, sessions.

import test, { type ExecutionContext } from 'ava'
import { setTimeout as sleep } from 'node:timers/promises'
import { isStrataError } from '../../../../fs/common/errors.js'
import { chunkIdOf, fileChunkRange } from '../../../../fs/common/chunk-id.js'
import { inodeStats } from '../../../../fs/client/index.js'
import { maxFileSize } from '../../../../fs/client/file/index.js'
import { ServiceId, StorageMethod } from '../../../../fs/common/services.js'
import { startFsCluster, patternBytes } from './helpers.js'

async function code(p: Promise<unknown>): Promise<string | undefined> {
  try {
    await p
    return undefined
  } catch (e) {
    return isStrataError(e) ? e.code : String(e)
  }
}

test.serial('write, close, read back; holes read as zeros, reads past EOF are short', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  await fs.mkdir('/d', { recursive: true })
  const fh = await fs.open('/d/f', 'w')
  t.truthy(fh.session)
  const a = patternBytes(200_000, 3)
  t.is(await fs.write(fh, a), a.length)
  // a second range after a 100 000-byte gap
  const b = patternBytes(5000, 4)
  await fs.write(fh, b, 300_000)
  await fs.close(fh)
  const st = await fs.stat('/d/f')
  t.is(st.file!.length, 305_000)
  const r = await fs.open('/d/f', 'r')
  t.is(r.session, undefined)
  const all = await fs.read(r, 400_000, 0)
  t.is(all.bytesRead, 305_000)
  t.deepEqual(all.buffer.subarray(0, 200_000), a)
  t.deepEqual(all.buffer.subarray(200_000, 300_000), Buffer.alloc(100_000))
  t.deepEqual(all.buffer.subarray(300_000), b)
  // sequential reads advance the position
  const p1 = await fs.read(r, 1000)
  const p2 = await fs.read(r, 1000)
  t.deepEqual(Buffer.concat([p1.buffer, p2.buffer]), a.subarray(0, 2000))
  t.is(r.position, 2000)
  // past EOF
  t.is((await fs.read(r, 100, 305_000)).bytesRead, 0)
  t.is((await fs.read(r, 100, 304_950)).bytesRead, 50)
  await fs.close(r)
  t.deepEqual(await fs.readFile('/d/f'), all.buffer.subarray(0, 305_000))
  // write on a read-only handle
  const ro = await fs.open('/d/f', 'r')
  t.true(isStrataError(await t.throwsAsync(fs.write(ro, 'x')), 'META_BAD_FILE'))
  await fs.close(ro)
})

test.serial('the write buffer coalesces small writes: nothing reaches storage until it fills or is flushed', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs({ periodicSyncMs: 0 })
  const fh = await fs.open('/buf', 'w')
  const chunkSize = fh.layout.chunkSize
  for (let i = 0; i < 100; i++) await fs.write(fh, Buffer.alloc(1000, i))
  t.is(fs.counters.flushes, 0)
  // the chunk is not on storage yet
  const stripe = await fs.io.stripe(fh.layout)
  const q = await c.m.storage.queryLastChunk(stripe[0]!, fileChunkRange(fh.inodeId))
  t.is(q.totalNumChunks, 0)
  // a non-contiguous write flushes the buffered 100 000 bytes first
  await fs.write(fh, Buffer.from('far'), 10 * chunkSize)
  t.is(fs.counters.flushes, 1)
  t.is(fs.counters.bytesWritten, 100_000)
  const st = await fs.fsync(fh)
  t.is(st.file!.length, 10 * chunkSize + 3)
  t.is(fs.counters.flushes, 2)
  // 1 MiB of contiguous writes: flushed as one full buffer
  const big = await fs.open('/big', 'w')
  const before = fs.counters.flushes
  for (let i = 0; i < 16; i++) await fs.write(big, Buffer.alloc(64 * 1024, i))
  t.is(fs.counters.flushes - before, 1)
  await fs.close(big)
  await fs.close(fh)
  const back = await fs.readFile('/big')
  t.is(back.length, 1 << 20)
  t.is(back[64 * 1024 * 5 + 7], 5)
})

test.serial('namespace: mkdir -p, readdir pages, rename, symlink/readlink, link, chmod/chown/utimes, unlink/rmdir/rm -r, statfs, lock', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  await fs.mkdir('/a/b/c', { recursive: true })
  t.is((await fs.stat('/a/b/c')).type, 'Directory')
  for (let i = 0; i < 30; i++) await fs.writeFile(`/a/f${String(i).padStart(2, '0')}`, `file ${i}`)
  const page = await fs.readdir('/a', { limit: 10 })
  t.is(page.entries.length, 10)
  t.true(page.more)
  const all = await fs.readdirAll('/a', { pageSize: 7, status: true })
  t.is(all.entries.length, 31)
  t.is(all.inodes.length, 31)
  t.deepEqual(all.entries[0]!.name, 'b')
  t.is(inodeStats(all.inodes[1]!).size, 'file 0'.length)
  await fs.rename('/a/f00', '/a/b/moved')
  t.false(await fs.exists('/a/f00'))
  t.is((await fs.readFile('/a/b/moved')).toString(), 'file 0')
  await fs.symlink('/a/b/moved', '/a/link')
  t.is(await fs.readlink('/a/link'), '/a/b/moved')
  t.is((await fs.lstat('/a/link')).type, 'Symlink')
  t.is((await fs.stat('/a/link')).type, 'File')
  await fs.link('/a/f01', '/a/hard')
  t.is((await fs.stat('/a/f01')).nlink, 2)
  t.is((await fs.chmod('/a/f01', 0o600)).acl.perm, 0o600)
  const own = await fs.chown('/a/f01', 1234, 5678)
  t.deepEqual([own.acl.uid, own.acl.gid], [1234, 5678])
  // -1 and (uid_t)-1 leave the id as it is (chown(2)); meta refuses 4294967295 as an owner
  t.deepEqual((await fs.chown('/a/f01', 0xffffffff, 77)).acl.uid, 1234)
  t.deepEqual((await fs.chown('/a/f01', 4321, 0xffffffff)).acl.gid, 77)
  t.deepEqual((await fs.chown('/a/f01', -1, 5678)).acl.uid, 4321)
  await fs.chown('/a/f01', 1234)
  const when = Date.UTC(2020, 0, 2, 3, 4, 5)
  const ut = await fs.utimes('/a/f01', when, when)
  t.is(Math.floor(ut.mtime / 1000), when)
  await fs.unlink('/a/hard')
  t.true(isStrataError(await t.throwsAsync(fs.unlink('/a/b')), 'META_IS_DIRECTORY'))
  t.true(isStrataError(await t.throwsAsync(fs.rmdir('/a/b')), 'META_NOT_EMPTY'))
  t.true(isStrataError(await t.throwsAsync(fs.rmdir('/a/f02')), 'META_NOT_DIRECTORY'))
  await fs.rmdir('/a/b/c')
  await fs.rm('/a', { recursive: true })
  t.false(await fs.exists('/a'))
  const sfs = await fs.statfs()
  t.true(typeof sfs.capacity === 'number')
  await fs.mkdir('/locked')
  const other = c.fs()
  await fs.lockDirectory('/locked', 'try_lock')
  t.true(isStrataError(await t.throwsAsync(other.writeFile('/locked/x', 'no')), 'META_NO_LOCK'))
  await fs.writeFile('/locked/y', 'yes')
  await fs.unlockDirectory('/locked')
  await other.writeFile('/locked/x', 'now')
  t.is((await fs.realpath('/locked/x')), '/locked/x')
})

test.serial('O_TRUNC, truncate shrink and extend: chunks past the end removed on every chain, zeros after extension', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  const data = patternBytes(5 * 65536 + 123, 9)
  const st0 = await fs.writeFile('/t', data)
  t.is(st0.file!.length, data.length)
  const tv0 = st0.file!.truncateVer
  // shrink to 100 bytes
  const st1 = await fs.truncate('/t', 100)
  t.is(st1.file!.length, 100)
  t.true(st1.file!.truncateVer > tv0)
  const layout = st1.file!.layout
  const stripe = await fs.io.stripe(layout)
  let chunks = 0
  for (const chain of new Set(stripe)) chunks += (await c.m.storage.queryLastChunk(chain, fileChunkRange(st1.id))).totalNumChunks
  t.is(chunks, 1)
  t.deepEqual(await fs.readFile('/t'), data.subarray(0, 100))
  // extend: zero-filled up to 200 000
  const st2 = await fs.truncate('/t', 200_000)
  t.is(st2.file!.length, 200_000)
  const back = await fs.readFile('/t')
  t.is(back.length, 200_000)
  t.deepEqual(back.subarray(0, 100), data.subarray(0, 100))
  t.deepEqual(back.subarray(100), Buffer.alloc(200_000 - 100))
  // the new last chunk exists with the right length
  const last = await c.m.storage.read(stripe[3 % layout.stripeSize]!, chunkIdOf(st2.id, 3), 0, 65536)
  t.is(last.length, 200_000 - 3 * 65536)
  // O_TRUNC on open: empty again, truncateVer bumped, writes after it are visible
  const fh = await fs.open('/t', 'w')
  t.is((await fs.fstat(fh)).file!.length, 0)
  await fs.write(fh, 'fresh')
  await fs.close(fh)
  const st3 = await fs.stat('/t')
  t.is(st3.file!.length, 5)
  t.true(st3.file!.truncateVer > st2.file!.truncateVer)
  t.is((await fs.readFile('/t')).toString(), 'fresh')
  // ftruncate through a handle, then keep writing: hints carry the new truncateVer
  const h = await fs.open('/t', 'r+')
  await fs.ftruncate(h, 2)
  await fs.write(h, 'XYZ', 2)
  await sleep(10)
  const st4 = await fs.fsync(h)
  t.is(st4.file!.length, 5)
  await fs.close(h)
  t.is((await fs.readFile('/t')).toString(), 'frXYZ')
})

test.serial('sessions: write opens carry one, read opens none; appends go to the end', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  const w = await fs.open('/s', 'w')
  const w2 = await fs.open('/s', 'r+')
  const r = await fs.open('/s', 'r')
  t.truthy(w.session)
  t.truthy(w2.session)
  t.not(w.session, w2.session)
  t.is(r.session, undefined)
  const sessions = (await fs.meta.listSessions({ inode: w.inodeId })).sessions
  t.deepEqual(new Set(sessions.map((s) => s.session)), new Set([w.session, w2.session]))
  t.true(sessions.every((s) => s.clientId === fs.clientId))
  await fs.close(w)
  await fs.close(w2)
  await fs.close(r)
  t.deepEqual((await fs.meta.listSessions({ inode: w.inodeId })).sessions, [])
  const a = await fs.open('/s', 'a')
  await fs.write(a, 'one')
  await fs.write(a, 'two', 0)
  await fs.close(a)
  t.is((await fs.readFile('/s')).toString(), 'onetwo')
})

test.serial('concurrent appenders through one client (open "a", write, close, over and over) lose no record', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  for (let trial = 0; trial < 4; trial++) {
    const p = `/appenders${trial}`
    await fs.close(await fs.open(p, 'w'))
    const writer = async (w: string) => {
      for (let i = 0; i < 40; i++) {
        const fh = await fs.open(p, 'a')
        await fs.write(fh, `${w}${i}\n`)
        await fs.close(fh)
      }
    }
    await Promise.all(['A', 'B', 'C'].map(writer))
    const lines = (await fs.readFile(p)).toString().split('\n').filter(Boolean)
    t.is(lines.length, 120, `trial ${trial}`)
    t.deepEqual(new Set(lines).size, 120, `trial ${trial}: every record once`)
  }
})

test.serial('the maximum file size: truncate or write past it is META_FILE_TOO_LARGE, a write crossing it is short', async (t) => {
  const c = await startFsCluster(t)
  const fs = c.fs()
  const fh = await fs.open('/huge', 'w+')
  const max = maxFileSize(fh.layout.chunkSize)
  for (const len of [max + 1, 2 ** 53 + 2]) t.is(await code(fs.ftruncate(fh, len)), 'META_FILE_TOO_LARGE', `truncate to ${len}`)
  t.is(await code(fs.truncate('/huge', max + 1)), 'META_FILE_TOO_LARGE')
  for (const pos of [max, 2 ** 53 + 2]) t.is(await code(fs.write(fh, 'x', pos)), 'META_FILE_TOO_LARGE', `write at ${pos}`)
  t.is(await code(fs.write(fh, 'x', -1)), 'META_INVALID_ARGUMENT')
  t.is(await fs.write(fh, 'xy', max - 1), 1, 'what fits is written')
  t.is((await fs.fsync(fh)).file!.length, max)
  t.is((await fs.read(fh, 2, max - 1)).buffer.subarray(0, 1).toString(), 'x')
  await fs.ftruncate(fh, 0)
  await fs.close(fh)
  t.is((await fs.stat('/huge')).file!.length, 0)
})

test.serial('meta failover: with two meta servers, file operations continue when the one in use goes away', async (t) => {
  const c = await startFsCluster(t, { metas: 2 })
  const fs = c.fs()
  // both servers are in routing info; the client uses one of them
  t.deepEqual([...(await fs.meta.servers())].sort(), [...c.m.metaAddresses].sort())
  const fh = await fs.open('/fo', 'w')
  await fs.write(fh, 'before')
  await fs.fsync(fh)
  const used = (await fs.meta.servers())[0]!
  const i = c.m.metaAddresses.indexOf(used)
  t.true(i >= 0)
  // in-process servers are closed, child processes SIGKILLed
  if (c.m.daemons.length) await c.m.daemons[i]!.close()
  else await c.m.c.kill(c.m.metaNames[i]!)
  // writes go to storage; sync/close/create go to the other meta server
  await fs.write(fh, '+after')
  t.is((await fs.fsync(fh)).file!.length, 12)
  await fs.close(fh)
  for (let i = 0; i < 20; i++) await fs.writeFile(`/fo-${i}`, `n${i}`)
  t.is((await fs.readdirAll('/')).entries.length, 21)
  t.is((await fs.readFile('/fo')).toString(), 'before+after')
  t.true(fs.meta.counters.failovers >= 1)
  t.not((await fs.meta.servers())[0], used)
})

/** Fault switches for the storage write RPC on every storage node of `c`, cleared at teardown. */
function storageWriteFaults(t: ExecutionContext, c: Awaited<ReturnType<typeof startFsCluster>>) {
  const storages = [...c.m.c.procs.keys()].filter((n) => n.startsWith('storage-')).map((n) => c.m.c.address(n))
  const setFaults = async (spec: { kind: 'delay' | 'fail'; delayMs?: number; code?: string }) => {
    for (const a of storages) await c.m.c.rpc.setFault(a, { service: ServiceId.Storage, method: StorageMethod.write, ...spec })
  }
  const clearFaults = async () => {
    for (const a of storages) await c.m.c.rpc.clearFaults(a)
  }
  t.teardown(clearFaults)
  return { setFaults, clearFaults }
}

test.serial('write-behind: a sequential writer goes on while full buffers are flushed, at most writeBehind at once; reads wait for them; a failure is reported once, by the next write or fsync', async (t) => {
  const c = await startFsCluster(t)
  const { setFaults, clearFaults } = storageWriteFaults(t, c)
  const fs = c.fs({ periodicSyncMs: 0, writeBehind: 2 })
  const fh = await fs.open('/wb', 'w')
  const data = patternBytes(6 * 1024 * 1024, 9)
  // slow storage writes keep the flushes visibly in flight
  await setFaults({ kind: 'delay', delayMs: 200 })
  let maxBehind = 0
  for (let off = 0; off < data.length; off += 128 * 1024) {
    await fs.write(fh, data.subarray(off, off + 128 * 1024))
    maxBehind = Math.max(maxBehind, fh.state.behind.size)
  }
  t.is(maxBehind, 2, 'two full buffers in flight at most, and the writer did not wait for each')
  t.true(fh.state.behind.size > 0)
  // a reader of the same file sees every byte written: the read waits for the flushes
  const rh = await fs.open('/wb', 'r')
  const back = await fs.read(rh, data.length, 0)
  t.is(back.bytesRead, data.length)
  t.true(back.buffer.equals(data))
  t.is(fh.state.behind.size, 0)
  await clearFaults()

  // a write over bytes still in flight waits for them: the later bytes win
  await setFaults({ kind: 'delay', delayMs: 200 })
  const over = patternBytes(1024 * 1024, 10)
  const inPieces = async (buf: Buffer, at: number) => {
    for (let off = 0; off < buf.length; off += 128 * 1024) await fs.write(fh, buf.subarray(off, off + 128 * 1024), at + off)
  }
  await inPieces(over, 0)
  t.is(fh.state.behind.size, 1)
  await fs.write(fh, Buffer.alloc(1, 0xee), 0)
  await fs.write(fh, Buffer.alloc(1, 0xdd), 1024 * 1024)
  await clearFaults()
  await fs.fsync(fh)
  const head = await fs.read(rh, 4, 0)
  t.deepEqual([...head.buffer.subarray(0, 4)], [0xee, ...over.subarray(1, 4)])
  t.is((await fs.read(rh, 1, 1024 * 1024)).buffer[0], 0xdd)

  // a flush behind that fails: write returns, the next write reports it, once
  await setFaults({ kind: 'fail', code: 'CHUNK_INVALID_RANGE' })
  await inPieces(patternBytes(1024 * 1024, 11), 8 * 1024 * 1024)
  while (fh.state.behind.size > 0) await sleep(10)
  t.true(isStrataError(await t.throwsAsync(fs.write(fh, Buffer.alloc(10), 20 * 1024 * 1024)), 'CHUNK_INVALID_RANGE'))
  await clearFaults()
  await fs.write(fh, Buffer.alloc(10, 1), 20 * 1024 * 1024)
  await fs.fsync(fh)
  // and by fsync when that comes first
  await setFaults({ kind: 'fail', code: 'CHUNK_INVALID_RANGE' })
  await inPieces(patternBytes(1024 * 1024, 12), 12 * 1024 * 1024)
  t.true(isStrataError(await t.throwsAsync(fs.fsync(fh)), 'CHUNK_INVALID_RANGE'))
  await clearFaults()
  await fs.fsync(fh)
  await fs.close(rh)
  await fs.close(fh)
  t.deepEqual((await fs.readFile('/wb')).subarray(0, 1), Buffer.alloc(1, 0xee))
})

test.serial('large writes to one file from several callers reach storage at the same time; an overlapping write waits for them; a failed one fails only its own call', async (t) => {
  const c = await startFsCluster(t)
  const { setFaults, clearFaults } = storageWriteFaults(t, c)
  const fs = c.fs({ periodicSyncMs: 0, writeBehind: 2 })
  const fh = await fs.open('/par', 'w')
  const MiB = 1024 * 1024
  const parts = [0, 1, 2].map((i) => patternBytes(2 * MiB, 20 + i))
  await setFaults({ kind: 'delay', delayMs: 300 })
  // three callers, three disjoint 2 MiB ranges: all in flight at once (the lock is not held while they are stored)
  const writes = parts.map((p, i) => fs.write(fh, p, i * 2 * MiB))
  let inFlight = 0
  for (let i = 0; i < 100 && inFlight < 3; i++) {
    await sleep(10)
    inFlight = fh.state.behind.size
  }
  t.is(inFlight, 3, 'the three writes were in flight together')
  // a write over the first range waits for it: its bytes win
  const over = Buffer.alloc(4096, 0xab)
  const overWrite = fs.write(fh, over, 0)
  t.deepEqual(await Promise.all(writes), [2 * MiB, 2 * MiB, 2 * MiB])
  await overWrite
  await clearFaults()
  await fs.fsync(fh)
  const back = await fs.readFile('/par')
  t.is(back.length, 6 * MiB)
  t.true(back.subarray(0, 4096).equals(over))
  t.true(back.subarray(4096, 2 * MiB).equals(parts[0]!.subarray(4096)))
  t.true(back.subarray(2 * MiB).equals(Buffer.concat(parts.slice(1))))

  // a large write whose storage write fails: that call throws, nothing is left for the next call to report
  await setFaults({ kind: 'fail', code: 'CHUNK_INVALID_RANGE' })
  t.true(isStrataError(await t.throwsAsync(fs.write(fh, parts[0]!, 8 * MiB)), 'CHUNK_INVALID_RANGE'))
  await clearFaults()
  t.is(fh.state.behind.size, 0)
  t.is(await fs.write(fh, Buffer.alloc(10, 1), 20 * MiB), 10)
  await fs.fsync(fh)
  await fs.close(fh)
})
