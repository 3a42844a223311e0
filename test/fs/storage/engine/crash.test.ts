// Torn writes and failing disks: simulated crashes between the persistent
// steps of an update, injected ENOSPC/EIO, and a real SIGKILL of a writer
// process followed by a consistency check of everything it left behind.
import test, { type ExecutionContext } from 'ava'
import { spawn } from 'node:child_process'
import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { isStrataError, type ErrorCode } from '../../../../fs/common/errors.js'
import { ChunkEngine } from '../../../../fs/storage/engine/index.js'
import { CHUNK, chunkFiles, cid, client, crc, forwarded, opIO, pattern, setup, syncing, writeCommit, writeIO } from './helpers.js'

async function rejectsWith(t: ExecutionContext, p: Promise<unknown>, expected: ErrorCode): Promise<void> {
  const e = await t.throwsAsync(p)
  t.true(isStrataError(e), String(e))
  if (isStrataError(e)) t.is(e.code, expected, e.message)
}

const crash = () => {
  throw new Error('power cut')
}

for (const hook of ['beforeDataWrite', 'afterDataWrite'] as const) {
  test(`a crash ${hook === 'beforeDataWrite' ? 'before' : 'after'} the data write leaves the chunk DIRTY across a restart`, async (t) => {
    const fx = await setup(t, { fsync: true })
    const id = cid(1)
    const a = pattern(3000, 1)
    await writeCommit(fx.engine, id, 0, a)
    fx.engine.faults[hook] = crash
    // a partial overwrite (new file) and, on another chunk, an in-place append
    await t.throwsAsync(fx.engine.applyUpdate(writeIO(id, 100, pattern(50, 2)), client()), { message: 'power cut' })
    const id2 = cid(2)
    await writeCommit(fx.engine, id2, 0, pattern(100, 3)).catch(() => undefined)
    fx.engine.faults[hook] = null

    const engine = await fx.reopen()
    t.is(engine.recovery.dirtyChunks, 2)
    if (hook === 'afterDataWrite') t.true(engine.recovery.orphanFilesRemoved >= 1)
    const meta = engine.getMeta(id)!
    t.like(meta, { state: 'DIRTY', commitVer: 1, updateVer: 2, size: 3000, checksum: crc(a) })
    // reads: not committed; uncommitted reads and the committed view give the last good bytes
    await rejectsWith(t, engine.read(id, 0, CHUNK), 'CHUNK_NOT_COMMIT')
    t.deepEqual((await engine.read(id, 0, CHUNK, { allowUncommitted: true })).data, a)
    const committed = await engine.readWholeChunk(id, { includePending: false })
    t.deepEqual(committed.data, a)
    t.is(committed.checksum, crc(a))
    // only the committed file survives the restart
    t.is((await chunkFiles(fx.dir, id)).length, 1)

    // client and forwarded updates and a plain commit are refused
    await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 4)), client()), 'CHUNK_NOT_CLEAN')
    await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(10, 4), { updateVer: 3 }), forwarded()), 'CHUNK_NOT_CLEAN')
    await rejectsWith(t, engine.applyUpdate(opIO(id, 'TRUNCATE', 5), client()), 'CHUNK_NOT_CLEAN')
    await rejectsWith(t, engine.commit(id, 2, 1), 'CHUNK_NOT_CLEAN')
    t.deepEqual(engine.getMeta(id), meta)

    // a syncing full-chunk write repairs it
    const b = pattern(2000, 5)
    const r = await engine.applyUpdate(writeIO(id, 0, b, { updateVer: 2 }), syncing())
    t.like(r, { state: 'CLEAN', commitVer: 1, updateVer: 2, checksum: crc(b) })
    await engine.commit(id, 2, 1)
    t.deepEqual((await engine.read(id, 0, CHUNK, { verifyChecksum: true })).data, b)
    t.is((await chunkFiles(fx.dir, id)).length, 1)

    // the chunk whose first write was torn: nothing committed, empty committed view
    t.like(engine.getMeta(id2), { state: 'DIRTY', commitVer: 0, updateVer: 1 })
    t.is((await engine.readWholeChunk(id2, { includePending: false })).data.length, 0)
  })
}

test('a torn in-place append never touches the committed bytes', async (t) => {
  const fx = await setup(t)
  const id = cid(1)
  const a = pattern(5000, 1)
  await writeCommit(fx.engine, id, 0, a)
  t.is((await chunkFiles(fx.dir, id)).length, 1)
  fx.engine.faults.afterDataWrite = crash
  await t.throwsAsync(fx.engine.applyUpdate(writeIO(id, 5000, pattern(3000, 2)), client()))
  const engine = await fx.reopen()
  t.is(engine.getMeta(id)!.state, 'DIRTY')
  const committed = await engine.readWholeChunk(id, { includePending: false })
  t.deepEqual(committed.data, a)
  // a sync that only re-sends the old bytes must not see the abandoned append
  const r = await engine.applyUpdate(writeIO(id, 0, a, { updateVer: 2 }), syncing())
  t.is(r.checksum, crc(a))
  await engine.commit(id, 2, 1)
  // and a later extension zero-fills instead of resurrecting the abandoned bytes
  const ex = await engine.applyUpdate(opIO(id, 'EXTEND', 8000), client())
  await engine.commit(id, ex.updateVer, 1)
  const data = (await engine.read(id, 0, CHUNK, { verifyChecksum: true })).data
  t.deepEqual(data, Buffer.concat([a, Buffer.alloc(3000)]))
})

test('resetUncommitted force-commits a DIRTY chunk to its last whole content', async (t) => {
  const fx = await setup(t)
  const id = cid(1)
  await writeCommit(fx.engine, id, 0, pattern(100, 1))
  await fx.engine.applyUpdate(writeIO(id, 100, pattern(100, 2), { updateVer: 2 }), forwarded())
  fx.engine.faults.beforeDataWrite = crash
  await t.throwsAsync(fx.engine.applyUpdate(writeIO(id, 0, pattern(10, 3), { updateVer: 3 }), forwarded()))
  const engine = await fx.reopen()
  t.like(engine.getMeta(id), { state: 'DIRTY', commitVer: 1, updateVer: 3 })
  t.is(await engine.resetUncommitted(2), 1)
  t.like(engine.getMeta(id), { state: 'COMMIT', commitVer: 3, updateVer: 3, chainVer: 2, size: 200 })
  t.deepEqual((await engine.read(id, 0, CHUNK, { verifyChecksum: true })).data, Buffer.concat([pattern(100, 1), pattern(100, 2)]))
  // and it takes client writes again
  await writeCommit(engine, id, 200, pattern(5, 4), 2)
  t.is(engine.getMeta(id)!.size, 205)
})

for (const fault of ['ENOSPC', 'EIO'] as const) {
  test(`${fault} fails the request with ${fault === 'ENOSPC' ? 'NO_SPACE' : 'IO_ERROR'} and changes nothing`, async (t) => {
    const { engine, dir } = await setup(t)
    const expected = fault === 'ENOSPC' ? 'NO_SPACE' : 'IO_ERROR'
    const id = cid(1)
    await writeCommit(engine, id, 0, pattern(4000, 1))
    const before = engine.getMeta(id)
    const files = await chunkFiles(dir, id)
    engine.faults.failWrites = fault
    // fresh file, copy-on-write rewrite, in-place append, zero-filled extension, a new chunk
    await rejectsWith(t, engine.applyUpdate(writeIO(id, 0, pattern(5000, 2)), client()), expected)
    await rejectsWith(t, engine.applyUpdate(writeIO(id, 10, pattern(10, 2)), client()), expected)
    await rejectsWith(t, engine.applyUpdate(writeIO(id, 4000, pattern(10, 2)), client()), expected)
    await rejectsWith(t, engine.applyUpdate(opIO(id, 'EXTEND', 9000), client()), expected)
    await rejectsWith(t, engine.applyUpdate(writeIO(cid(2), 0, pattern(10, 2)), client()), expected)
    t.deepEqual(engine.getMeta(id), before)
    t.is(engine.getMeta(cid(2)), null)
    t.deepEqual(await chunkFiles(dir, id), files)
    t.deepEqual(await chunkFiles(dir, cid(2)), [])
    t.like(await engine.spaceInfo(), { used: 4000, chunkCount: 1 })
    // reads and metadata-only updates still work on a full disk
    t.deepEqual((await engine.read(id, 0, CHUNK)).data, pattern(4000, 1))
    const tr = await engine.applyUpdate(opIO(id, 'TRUNCATE', 1000), client())
    await engine.commit(id, tr.updateVer, 1)
    // once the disk recovers the same updates go through
    engine.faults.failWrites = null
    await writeCommit(engine, id, 1000, pattern(10, 3))
    t.deepEqual((await engine.read(id, 0, CHUNK, { verifyChecksum: true })).data, Buffer.concat([pattern(1000, 1), pattern(10, 3)]))
  })
}

// ---------------------------------------------------------------- real crash

const here = path.dirname(fileURLToPath(import.meta.url))
// dist/test/fs/storage/engine → dist/fs/storage/engine/index.js
const engineModule = pathToFileURL(path.resolve(here, '../../../../fs/storage/engine/index.js')).href

const WRITER = `
import { ChunkEngine, crc32cOf } from ${JSON.stringify(engineModule)}
const [dir, fsyncArg, seedArg] = process.argv.slice(2)
const engine = await ChunkEngine.open({ dir, targetId: 7, fsync: fsyncArg === '1' })
const CHUNK = 32768
// xorshift32: the low bits of a power-of-two LCG cycle too fast for small moduli
let seed = Number(seedArg) | 1
const rnd = (n) => { seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5; return (seed >>> 0) % n }
const id = (i) => { const b = Buffer.alloc(16); b.writeUInt32BE(0xc0ffee, 0); b.writeUInt32BE(i, 12); return b }
const io = (chunkId, type, offset, data, len, updateVer) => ({
  key: { chainId: 1, chainVer: 1, chunkId }, offset, length: data ? data.length : len, chunkSize: CHUNK,
  data, updateVer, updateType: type, checksum: data ? crc32cOf(data) : 0,
})
const opts = (isSyncing) => ({ fromClient: !isSyncing, isSyncing, chainVer: 1, clientId: 'w', requestId: 1 })
let ops = 0
for (;;) {
  const i = rnd(6)
  const chunkId = id(i)
  const m = engine.getMeta(chunkId)
  if (m && m.state === 'DIRTY') {
    // what a predecessor's resync would do
    const full = Buffer.alloc(rnd(CHUNK), i + 1)
    await engine.applyUpdate(io(chunkId, 'WRITE', 0, full, 0, m.updateVer + 1), opts(true))
  } else if (m && m.commitVer !== m.updateVer) {
    // finish what the previous run left pending
  } else {
    const k = rnd(10)
    const size = m ? m.size : 0
    if (k < 6) {
      const off = [0, size, rnd(CHUNK)][rnd(3)] % CHUNK
      const len = 1 + rnd(Math.min(CHUNK - off, 8192))
      const data = Buffer.alloc(len)
      for (let j = 0; j < len; j++) data[j] = (ops + j) & 0xff
      await engine.applyUpdate(io(chunkId, 'WRITE', off, data, 0, 0), opts(false))
    } else if (k < 8) {
      await engine.applyUpdate(io(chunkId, 'TRUNCATE', 0, undefined, rnd(CHUNK), 0), opts(false))
    } else {
      await engine.applyUpdate(io(chunkId, 'EXTEND', 0, undefined, rnd(CHUNK), 0), opts(false))
    }
  }
  const now = engine.getMeta(chunkId)
  if (rnd(4) !== 0) {
    const c = await engine.commit(chunkId, now.updateVer, 1)
    // reported only after commit returned: the commit must survive the kill
    process.stdout.write('C ' + i + ' ' + c.commitVer + ' ' + c.checksum + ' ' + c.size + '\\n')
  }
  ops++
  if (ops % 20 === 0) process.stdout.write('N ' + ops + '\\n')
}
`

interface Logged {
  commitVer: number
  checksum: number
  size: number
}

async function runAndKill(t: ExecutionContext, dir: string, script: string, fsync: boolean, seed: number, killAfterOps: number): Promise<Map<number, Logged>> {
  const child = spawn(process.execPath, [script, dir, fsync ? '1' : '0', String(seed)], { stdio: ['ignore', 'pipe', 'pipe'] })
  const logged = new Map<number, Logged>()
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
  let buf = ''
  let killed = false
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()))
  child.stdout.on('data', (d: Buffer) => {
    buf += d.toString()
    let nl: number
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl)
      buf = buf.slice(nl + 1)
      const [kind, a, b, c, e] = line.split(' ')
      if (kind === 'C') logged.set(Number(a), { commitVer: Number(b), checksum: Number(c), size: Number(e) })
      if (kind === 'N' && Number(a) >= killAfterOps && !killed) {
        killed = true
        // kill at a moment unrelated to the writer's steps
        setTimeout(() => child.kill('SIGKILL'), seed % 7)
      }
    }
  })
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000)
  await exited
  clearTimeout(timer)
  t.true(killed, `writer died on its own: ${stderr}`)
  return logged
}

async function checkConsistent(t: ExecutionContext, engine: ChunkEngine, logged: Map<number, Logged>): Promise<{ dirty: number; pending: number }> {
  let dirty = 0
  let pending = 0
  for (const m of engine.getAllMetadata()) {
    const i = m.chunkId.readUInt32BE(12)
    t.true(['COMMIT', 'CLEAN', 'DIRTY'].includes(m.state))
    if (m.state === 'COMMIT') t.is(m.commitVer, m.updateVer)
    else t.true(m.updateVer > m.commitVer, `chunk ${i} ${m.state} v=${m.commitVer} u=${m.updateVer}`)
    if (m.state === 'DIRTY') dirty++
    else if (m.state === 'CLEAN') pending++
    // the committed version is always whole and matches its checksum
    const committed = await engine.readWholeChunk(m.chunkId, { includePending: false })
    t.is(crc(committed.data), committed.checksum, `chunk ${i} committed checksum`)
    if (m.state !== 'DIRTY') {
      // newest content too
      const latest = await engine.readWholeChunk(m.chunkId, { includePending: true })
      t.is(latest.data.length, m.size)
      t.is(crc(latest.data), m.checksum, `chunk ${i} latest checksum`)
    }
    if (m.state === 'COMMIT') {
      const r = await engine.read(m.chunkId, 0, CHUNK, { verifyChecksum: true })
      t.is(r.data.length, m.size)
    }
    // every commit the writer saw returning is durable
    const l = logged.get(i)
    if (l) {
      t.true(m.commitVer >= l.commitVer, `chunk ${i}: persisted commitVer ${m.commitVer} < acknowledged ${l.commitVer}`)
      if (m.commitVer === l.commitVer && m.state === 'COMMIT') {
        t.is(m.checksum, l.checksum, `chunk ${i} acknowledged checksum`)
        t.is(m.size, l.size)
      }
    }
  }
  return { dirty, pending }
}

for (const fsync of [false, true]) {
  test(`SIGKILL of a writer process leaves every chunk consistent (fsync ${fsync})`, async (t) => {
    t.timeout(120_000)
    const fx = await setup(t, { targetId: 7, fsync })
    await fx.engine.close()
    const script = path.join(fx.dir, 'writer.mjs')
    await fsp.writeFile(script, WRITER)
    const dataDir = path.join(fx.dir, 'target')
    let totalDirty = 0
    for (let round = 0; round < 4; round++) {
      const logged = await runAndKill(t, dataDir, script, fsync, 1000 + round * 17 + (fsync ? 5 : 0), 60 + round * 40)
      t.true(logged.size > 0)
      const engine = await ChunkEngine.open({ dir: dataDir, targetId: 7, fsync })
      try {
        const { dirty, pending } = await checkConsistent(t, engine, logged)
        totalDirty += dirty
        t.log(`round ${round}: ${engine.chunkCount()} chunks, ${dirty} dirty, ${pending} pending; recovery ${JSON.stringify(engine.recovery)}`)
        // files superseded just before the kill may linger; collecting them must not touch live data
        const collected = await engine.collectGarbage()
        t.log(`round ${round}: collected ${collected} unreferenced file(s)`)
        await checkConsistent(t, engine, logged)
      } finally {
        await engine.close()
      }
    }
    // the last state can still be force-committed and served
    const engine = await ChunkEngine.open({ dir: dataDir, targetId: 7, fsync })
    try {
      await engine.resetUncommitted(1)
      for (const m of engine.getAllMetadata()) {
        t.is(m.state, 'COMMIT')
        const r = await engine.read(m.chunkId, 0, CHUNK, { verifyChecksum: true })
        t.is(crc(r.data), m.checksum)
      }
    } finally {
      await engine.close()
    }
    t.log(`dirty chunks seen over all rounds: ${totalDirty}`)
  })
}
