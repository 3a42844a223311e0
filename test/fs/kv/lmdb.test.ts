// The lmdb engine: the conformance suite, engine-specific behaviour (shared
// env per process, log pruning -> KV_TXN_TOO_OLD, key limits, persistence),
// and real multi-process scenarios — several processes on one env, a process
// SIGKILLed while it holds the host-wide write lock or an open snapshot.

import test, { type ExecutionContext } from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { isStrataError } from '../../../fs/common/errors.js'
import { openLmdbKv, type KvEngine, type LmdbKvEngine, type LmdbKvOptions, type ReadWriteTxn } from '../../../fs/kv/index.js'
import { registerKvConformance } from './conformance.js'

// dist/test/fs/kv -> repository root
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../..')
const KV_MODULE = path.join(REPO, 'dist/fs/kv/index.js')

const B = (s: string): Buffer => Buffer.from(s, 'latin1')
const S = (b: Buffer | undefined): string | undefined => (b === undefined ? undefined : b.toString('latin1'))
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))
/** these tests are about semantics; a loaded machine may fsync slowly */
const PATIENT = { timeoutMs: 120_000 }

function tmpDir(t: ExecutionContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-kv-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function open(t: ExecutionContext, opts: LmdbKvOptions): Promise<LmdbKvEngine> {
  const e = await openLmdbKv(opts)
  t.teardown(() => e.close())
  return e
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32BE(n)
  return b
}

async function increment(t: ReadWriteTxn, key: Buffer): Promise<number> {
  const v = await t.get(key)
  const n = (v ? v.readUInt32BE(0) : 0) + 1
  t.set(key, u32(n))
  return n
}

async function readU32(e: KvEngine, k: string): Promise<number | undefined> {
  const v = await e.readOnly((r) => r.get(B(k)))
  return v?.readUInt32BE(0)
}

registerKvConformance(test, 'lmdb', async (t) => openLmdbKv({ path: tmpDir(t) }))
// 'nosync' commits synchronously on the event loop instead of through lmdb-js's batched write thread
registerKvConformance(test, 'lmdb nosync', async (t) => openLmdbKv({ path: tmpDir(t), durability: 'nosync' }))

// ---------------------------------------------------------------- engine specifics

test('lmdb: two handles on one path in one process share data, versions and conflicts', async (t) => {
  const dir = tmpDir(t)
  const a = await open(t, { path: dir })
  const b = await open(t, { path: dir })
  let attempts = 0
  await a.transact(async (tx) => {
    attempts++
    await tx.get(B('k'))
    if (attempts === 1) await b.transact(async (u) => u.set(B('k'), B('from-b')))
    tx.set(B('o'), B('1'))
  }, PATIENT)
  t.is(attempts, 2)
  await a.close()
  t.is(S(await b.readOnly((r) => r.get(B('k')))), 'from-b')
  await b.transact(async (tx) => tx.set(B('k2'), B('1')))
  t.is(S(await b.readOnly((r) => r.get(B('k2')))), '1')
})

test('lmdb: data and the version counter survive close and reopen (the path is a directory even with a dot)', async (t) => {
  const dir = path.join(tmpDir(t), 'meta.kv')
  const a = await openLmdbKv({ path: dir })
  const { info } = await a.transactWithInfo(async (tx) => tx.set(B('k'), B('v')))
  await a.close()
  const b = await open(t, { path: dir })
  t.is(S(await b.readOnly((r) => r.get(B('k')))), 'v')
  const again = await b.transactWithInfo(async (tx) => tx.set(B('k'), B('w')))
  t.true(again.info.commitVersion! > info.commitVersion!)
  t.true(fs.statSync(dir).isDirectory())
  t.true(fs.existsSync(path.join(dir, 'data.mdb')))
})

test('lmdb: processes must agree on nosync vs synced durability', async (t) => {
  const dir = tmpDir(t)
  const a = await open(t, { path: dir })
  const inProc = await t.throwsAsync(openLmdbKv({ path: dir, durability: 'nosync' }))
  t.true(isStrataError(inProc, 'BAD_CONFIG'), String(inProc))
  const c = await open(t, { path: dir, durability: 'committed' })
  await c.transact(async (tx) => tx.set(B('k'), B('1')))
  await a.close()
  await c.close()
  const later = await t.throwsAsync(openLmdbKv({ path: dir, durability: 'nosync' }))
  t.true(isStrataError(later, 'BAD_CONFIG'), String(later))
})

test('lmdb: a transaction older than the retained commit log fails KV_TXN_TOO_OLD, which transact retries', async (t) => {
  const e = await open(t, { path: tmpDir(t), logRetentionMs: 20 })
  const stale = async (tx: ReadWriteTxn, first: boolean): Promise<void> => {
    await tx.get(B('k'))
    if (first) {
      // two unrelated commits, the first one older than the retention window when the second prunes it
      await e.transact(async (u) => u.set(B('other1'), B('1')))
      await sleep(60)
      await e.transact(async (u) => u.set(B('other2'), B('1')))
    }
    tx.set(B('k'), B('mine'))
  }
  let attempts = 0
  await e.transact((tx) => stale(tx, ++attempts === 1), PATIENT)
  t.is(attempts, 2)
  t.is(e.stats().tooOld, 1)
  t.is(S(await e.readOnly((r) => r.get(B('k')))), 'mine')
  const err = await t.throwsAsync(e.transact((tx) => stale(tx, true), { ...PATIENT, maxRetries: 0 }))
  t.true(isStrataError(err, 'KV_TXN_TOO_OLD'), String(err))
  t.true(isStrataError(err) && err.retryable)
})

test('lmdb: the commit log is bounded by maxLogEntries', async (t) => {
  const e = await open(t, { path: tmpDir(t), maxLogEntries: 3 })
  for (let i = 0; i < 20; i++) await e.transact(async (tx) => tx.set(B(`k${i}`), B('1')))
  const st = e.stats()
  t.is(st.commitVersion, 20n)
  t.true(st.logEntries <= 3, `${st.logEntries} log entries`)
})

test('lmdb: keys up to 1978 bytes; longer range bounds still select the right keys', async (t) => {
  const e = await open(t, { path: tmpDir(t) })
  const a1978 = B('a'.repeat(1978))
  const a1977b = B('a'.repeat(1977) + 'b')
  await e.transact(async (tx) => {
    tx.set(a1978, B('x'))
    tx.set(a1977b, B('y'))
    const err = t.throws(() => tx.set(B('a'.repeat(1979)), B('z')))
    t.true(isStrataError(err, 'KV_VALUE_TOO_LARGE'), String(err))
  })
  const a1979 = B('a'.repeat(1979))
  const lens = (kvs: Array<{ key: Buffer }>): string[] => kvs.map((kv) => S(kv.key)!.slice(1975))
  await e.readOnly(async (r) => {
    t.deepEqual(lens(await r.getRange(a1979, B('b'))), ['aab'])
    t.deepEqual(lens(await r.getRange(B('a'), a1979)), ['aaa'])
    t.deepEqual(lens(await r.getRange(a1979, B('b'), { reverse: true })), ['aab'])
    t.deepEqual(lens(await r.getRange(B('a'), a1979, { reverse: true })), ['aaa'])
    t.deepEqual(lens(await r.getRange(B('a'), B('b'), { reverse: true })), ['aab', 'aaa'])
  })
  // conflict ranges may end past the key limit too (keyAfter of a maximal key)
  let attempts = 0
  await e.transact(async (tx) => {
    attempts++
    await tx.getRange(B('a'), B('b'), { limit: 1 }) // reads [a, a1978 + 0x00)
    if (attempts === 1) await e.transact(async (u) => u.set(a1978, B('x2')))
    tx.set(B('o'), B('1'))
  }, PATIENT)
  t.is(attempts, 2)
})

// ---------------------------------------------------------------- multiple processes

const WORKER = `
import fs from 'node:fs'
import readline from 'node:readline'
const { openLmdbKv } = await import(process.env.KV_MODULE)
const [mode, dir, ...rest] = process.argv.slice(2)
const B = (s) => Buffer.from(s, 'latin1')
const say = (s) => fs.writeSync(1, s + '\\n')
const u32 = (n) => { const b = Buffer.alloc(4); b.writeUInt32BE(n); return b }
const increment = async (t, key) => { const v = await t.get(key); const n = (v ? v.readUInt32BE(0) : 0) + 1; t.set(key, u32(n)); return n }

if (mode === 'inc') {
  const kv = await openLmdbKv({ path: dir, durability: rest[2] || 'flushed' })
  const total = Number(rest[0]), concurrency = Number(rest[1])
  let next = 0
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < total) { next++; await kv.transact((t) => increment(t, B('ctr')), { timeoutMs: 120000 }) }
  }))
  say('done ' + JSON.stringify(kv.stats(), (k, v) => typeof v === 'bigint' ? String(v) : v))
  await kv.close()
} else if (mode === 'hold-write') {
  // blocks forever inside the lmdb write transaction after 50 of its writes
  const kv = await openLmdbKv({ path: dir, durability: rest[0] || 'flushed', testHooks: { onApply(stage, n) {
    if (stage === 'write' && n === 50) { say('holding'); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0) }
  } } })
  await kv.transact(async (t) => {
    await t.get(B('ctr'))
    for (let i = 0; i < 200; i++) t.set(B('big/' + String(i).padStart(3, '0')), Buffer.alloc(100, 1))
    t.set(B('ctr'), u32(999))
  })
  say('committed?!')
} else if (mode === 'hold-read') {
  // reads, then never commits: holds an lmdb read snapshot until killed
  const kv = await openLmdbKv({ path: dir })
  setInterval(() => {}, 1000)
  await kv.transact(async (t) => {
    await t.getRange(B('r/'), B('r0'))
    await increment(t, B('ctr'))
    say('read')
    await new Promise(() => {})
  })
} else if (mode === 'reopen') {
  // opens the env, reads, closes it, over and over (a pause of rest[1] ms between) until told to stop
  let stop = false, n = 0
  const pause = Number(rest[1] || 0)
  readline.createInterface({ input: process.stdin }).on('line', (l) => { if (l === 'stop') stop = true })
  while (!stop) {
    const kv = await openLmdbKv({ path: dir, durability: rest[0] || 'flushed' })
    await kv.readOnly((t) => t.get(B('ctr')))
    await kv.close()
    n++
    await new Promise((r) => (pause ? setTimeout(r, pause) : setImmediate(r)))
  }
  say('reopened ' + n)
  process.exit(0)
} else if (mode === 'set-on-go') {
  const kv = await openLmdbKv({ path: dir })
  const rl = readline.createInterface({ input: process.stdin })
  for await (const line of rl) {
    if (line !== 'go') continue
    await kv.transact(async (t) => t.set(B(rest[0]), B('child')))
    say('done')
    break
  }
  rl.close()
  await kv.close()
}
`

interface Worker {
  child: ChildProcess
  lines: string[]
  waitFor(prefix: string, ms?: number): Promise<string>
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
}

function startWorker(t: ExecutionContext, scriptDir: string, args: string[]): Worker {
  const script = path.join(scriptDir, 'kv-worker.mjs')
  if (!fs.existsSync(script)) fs.writeFileSync(script, WORKER)
  const child = spawn(process.execPath, [script, ...args], {
    env: { ...process.env, KV_MODULE },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  const lines: string[] = []
  const waiters: Array<{ prefix: string; resolve: (l: string) => void }> = []
  let stderr = ''
  child.stderr!.on('data', (d) => (stderr += String(d)))
  readline.createInterface({ input: child.stdout! }).on('line', (l) => {
    lines.push(l)
    for (const w of [...waiters]) if (l.startsWith(w.prefix)) w.resolve(l)
  })
  // 'close', not 'exit': 'exit' may come before the last lines of stdout were read
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.on('close', (code, signal) => r({ code, signal })))
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  return {
    child,
    lines,
    exited,
    waitFor(prefix, ms = 20_000) {
      const seen = lines.find((l) => l.startsWith(prefix))
      if (seen) return Promise.resolve(seen)
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`worker ${args[0]}: no '${prefix}' within ${ms} ms; stdout ${JSON.stringify(lines)} stderr ${stderr}`)), ms)
        waiters.push({
          prefix,
          resolve: (l) => {
            clearTimeout(timer)
            resolve(l)
          },
        })
        void exited.then(({ code, signal }) => {
          if (!lines.some((l) => l.startsWith(prefix))) {
            clearTimeout(timer)
            reject(new Error(`worker ${args[0]} exited (${code ?? signal}) without '${prefix}'; stderr ${stderr}`))
          }
        })
      })
    },
  }
}

for (const durability of ['flushed', 'nosync'] as const) {
  test(`lmdb multi-process (${durability}): two processes incrementing one counter 300 times each end at exactly 600`, async (t) => {
    const dir = tmpDir(t)
    const e = await open(t, { path: path.join(dir, 'env'), durability })
    const w1 = startWorker(t, dir, ['inc', path.join(dir, 'env'), '300', '3', durability])
    const w2 = startWorker(t, dir, ['inc', path.join(dir, 'env'), '300', '3', durability])
    const [d1, d2] = await Promise.all([w1.waitFor('done', 120_000), w2.waitFor('done', 120_000)])
    t.log(d1)
    t.log(d2)
    t.deepEqual(await w1.exited, { code: 0, signal: null })
    t.deepEqual(await w2.exited, { code: 0, signal: null })
    t.is(await readU32(e, 'ctr'), 600)
  })
}

// lmdb-js's mdb_env_open rolls the env's shared "last txnid" back to what it read at open: an open
// racing a commit of another process made later writers start from an old snapshot (lost
// increments, SIGSEGV in lmdb, MDB_BAD_TXN) until opens and commits were gated (OpenGate).
test('lmdb multi-process: a process opening and closing the env over and over while two others commit corrupts nothing', async (t) => {
  const dir = tmpDir(t)
  const env = path.join(dir, 'env')
  const e = await open(t, { path: env, durability: 'nosync' })
  // (a pause between opens: each open waits for commits in flight and holds new ones back)
  const r = startWorker(t, dir, ['reopen', env, 'nosync', '2'])
  const w1 = startWorker(t, dir, ['inc', env, '400', '3', 'nosync'])
  const w2 = startWorker(t, dir, ['inc', env, '400', '3', 'nosync'])
  const [d1, d2] = await Promise.all([w1.waitFor('done', 120_000), w2.waitFor('done', 120_000)])
  r.child.stdin!.write('stop\n')
  const reopened = Number((await r.waitFor('reopened')).split(' ')[1])
  t.log(d1, d2, `reopened ${reopened}`)
  t.deepEqual(await w1.exited, { code: 0, signal: null })
  t.deepEqual(await w2.exited, { code: 0, signal: null })
  t.deepEqual(await r.exited, { code: 0, signal: null })
  t.true(reopened > 0)
  t.is(await readU32(e, 'ctr'), 800)
})

test('lmdb multi-process: a process SIGKILLed while holding the write lock mid-commit leaves nothing behind and others proceed', async (t) => {
  const dir = tmpDir(t)
  const env = path.join(dir, 'env')
  const e = await open(t, { path: env })
  await e.transact(async (tx) => tx.set(B('ctr'), u32(0)))
  const w = startWorker(t, dir, ['hold-write', env])
  await w.waitFor('holding')
  // our commit needs the host-wide write lock the worker holds: it waits (without blocking our event loop)
  let settled = false
  const mine = e.transact((tx) => increment(tx, B('ctr')), PATIENT).finally(() => (settled = true))
  await sleep(300)
  t.false(settled, 'commit waited for the write lock')
  t.is(await readU32(e, 'ctr'), 0, 'reads do not wait')
  w.child.kill('SIGKILL')
  t.is((await w.exited).signal, 'SIGKILL')
  t.is(await mine, 1)
  t.is(await readU32(e, 'ctr'), 1)
  t.deepEqual(await e.readOnly((r) => r.getRange(B('big/'), B('big0'))), [], 'none of the killed transaction is visible')
  t.false(w.lines.includes('committed?!'))
  // and the env keeps working for everyone, including new processes
  const w2 = startWorker(t, dir, ['inc', env, '20', '2'])
  await w2.waitFor('done')
  for (let i = 0; i < 10; i++) await e.transact((tx) => increment(tx, B('ctr')), PATIENT)
  t.is(await readU32(e, 'ctr'), 31)
})

test('lmdb multi-process (nosync, synchronous commits): a process SIGKILLed inside its write transaction leaves nothing behind', async (t) => {
  const dir = tmpDir(t)
  const env = path.join(dir, 'env')
  const e = await open(t, { path: env, durability: 'nosync' })
  await e.transact(async (tx) => tx.set(B('ctr'), u32(0)))
  const w = startWorker(t, dir, ['hold-write', env, 'nosync'])
  await w.waitFor('holding')
  // (a synchronous commit here would block this event loop until the lock is free, so only read)
  t.is(await readU32(e, 'ctr'), 0)
  w.child.kill('SIGKILL')
  t.is((await w.exited).signal, 'SIGKILL')
  t.is(await e.transact((tx) => increment(tx, B('ctr')), PATIENT), 1)
  t.deepEqual(await e.readOnly((r) => r.getRange(B('big/'), B('big0'))), [])
  for (let i = 0; i < 10; i++) await e.transact((tx) => increment(tx, B('ctr')), PATIENT)
  t.is(await readU32(e, 'ctr'), 11)
})

test('lmdb multi-process: a process SIGKILLed between its reads and its commit does not wedge others', async (t) => {
  const dir = tmpDir(t)
  const env = path.join(dir, 'env')
  const e = await open(t, { path: env })
  await e.transact(async (tx) => {
    tx.set(B('ctr'), u32(0))
    tx.set(B('r/a'), B('1'))
  })
  const w = startWorker(t, dir, ['hold-read', env])
  await w.waitFor('read')
  // the worker's snapshot is still open: commits go on regardless
  for (let i = 0; i < 20; i++) await e.transact((tx) => increment(tx, B('ctr')), PATIENT)
  w.child.kill('SIGKILL')
  await w.exited
  for (let i = 0; i < 20; i++) await e.transact((tx) => increment(tx, B('ctr')), PATIENT)
  t.is(await readU32(e, 'ctr'), 40, 'the killed transaction never committed')
  const w2 = startWorker(t, dir, ['inc', env, '20', '2'])
  await w2.waitFor('done')
  t.is(await readU32(e, 'ctr'), 60)
})

test('lmdb multi-process: a range read conflicts with an insert committed by another process', async (t) => {
  const dir = tmpDir(t)
  const env = path.join(dir, 'env')
  const e = await open(t, { path: env })
  await e.transact(async (tx) => {
    tx.set(B('r/a'), B('1'))
    tx.set(B('r/c'), B('1'))
  })
  const w = startWorker(t, dir, ['set-on-go', env, 'r/b'])
  let attempts = 0
  const seen = await e.transact(async (tx) => {
    attempts++
    const kvs = await tx.getRange(B('r/a'), B('r/d'))
    if (attempts === 1) {
      w.child.stdin!.write('go\n')
      await w.waitFor('done')
    }
    tx.set(B('count'), B(String(kvs.length)))
    return kvs.map((kv) => S(kv.key))
  }, PATIENT)
  t.is(attempts, 2)
  t.deepEqual(seen, ['r/a', 'r/b', 'r/c'])
  t.is(S(await e.readOnly((r) => r.get(B('count')))), '3')
  t.deepEqual(await w.exited, { code: 0, signal: null })
})
