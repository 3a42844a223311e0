// The conformance suite every KvEngine must pass (fs/kv/types.ts). An engine's
// test file calls registerKvConformance(test, 'name', makeEngine); each test
// gets a fresh, empty engine from makeEngine and closes it afterwards.
//
// Interleavings are made deterministic without timing: a transaction function
// commits a conflicting write through a second, nested `transact` call (a
// different transaction) between its reads and its writes, or two functions
// meet at a barrier after their reads on their first attempt.

import type { ExecutionContext, TestFn } from 'ava'
import { isStrataError } from '../../../fs/common/errors.js'
import type { KeyValue, KvEngine, ReadWriteTxn } from '../../../fs/kv/types.js'

type MakeEngine = (t: ExecutionContext) => Promise<KvEngine>

const B = (s: string): Buffer => Buffer.from(s, 'latin1')
const S = (b: Buffer | undefined): string | undefined => (b === undefined ? undefined : b.toString('latin1'))
const keysOf = (kvs: KeyValue[]): string[] => kvs.map((kv) => kv.key.toString('latin1'))
const pairsOf = (kvs: KeyValue[]): string[] => kvs.map((kv) => `${kv.key.toString('latin1')}=${kv.value.toString('latin1')}`)
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms))

function u32(n: number): Buffer {
  const b = Buffer.alloc(4)
  b.writeUInt32BE(n)
  return b
}

function barrier(parties: number): () => Promise<void> {
  let arrived = 0
  let open!: () => void
  const opened = new Promise<void>((r) => (open = r))
  return () => {
    if (++arrived === parties) open()
    return opened
  }
}

async function put(e: KvEngine, pairs: Record<string, string>): Promise<void> {
  await e.transact(async (t) => {
    for (const [k, v] of Object.entries(pairs)) t.set(B(k), B(v))
  })
}

async function read(e: KvEngine, k: string): Promise<string | undefined> {
  return e.readOnly(async (t) => S(await t.get(B(k))))
}

async function increment(t: ReadWriteTxn, key: Buffer): Promise<number> {
  const v = await t.get(key)
  const n = (v ? v.readUInt32BE(0) : 0) + 1
  t.set(key, u32(n))
  return n
}

/**
 * The engine with a generous default deadline: these tests are about
 * semantics, and a loaded machine may fsync slowly. Tests of TIMEOUT pass
 * their own timeoutMs.
 */
function patient(e: KvEngine): KvEngine {
  return {
    transact: (fn, o) => e.transact(fn, { timeoutMs: 120_000, ...o }),
    transactWithInfo: (fn, o) => e.transactWithInfo(fn, { timeoutMs: 120_000, ...o }),
    readOnly: (fn) => e.readOnly(fn),
    close: () => e.close(),
  }
}

export function registerKvConformance(test: TestFn, name: string, makeEngine: MakeEngine): void {
  const engine = async (t: ExecutionContext): Promise<KvEngine> => {
    const e = await makeEngine(t)
    t.teardown(() => e.close())
    return patient(e)
  }
  const title = (s: string): string => `${name}: ${s}`

  test(title('read-your-writes: set, clear and clearRange are visible to get and getRange, merged with the snapshot'), async (t) => {
    const e = await engine(t)
    const base: Record<string, string> = {}
    for (const k of ['k01', 'k02', 'k03', 'k04', 'k05', 'k06', 'k07', 'k08', 'k09', 'k10']) base[k] = `db-${k}`
    await put(e, base)
    const expected = ['k01=db-k01', 'k02=db-k02', 'k03=own-03', 'k035=own-035', 'k04=db-k04', 'k06=db-k06', 'k08=own-08', 'k09=db-k09', 'k10=db-k10']
    await e.transact(async (tx) => {
      tx.set(B('k03'), B('own-03'))
      tx.set(B('k035'), B('own-035'))
      tx.clear(B('k05'))
      tx.set(B('k075'), B('own-075'))
      tx.clearRange(B('k07'), B('k09')) // removes k07, k075 (own) and k08
      tx.set(B('k08'), B('own-08')) // written again after the clear
      t.is(S(await tx.get(B('k01'))), 'db-k01')
      t.is(S(await tx.get(B('k03'))), 'own-03')
      t.is(S(await tx.get(B('k035'))), 'own-035')
      t.is(await tx.get(B('k05')), undefined)
      t.is(await tx.get(B('k07')), undefined)
      t.is(await tx.get(B('k075')), undefined)
      t.is(S(await tx.get(B('k08'))), 'own-08')
      t.is(S(await tx.get(B('k09'))), 'db-k09')
      t.is(S(await tx.snapshotGet(B('k03'))), 'own-03')
      t.is(await tx.snapshotGet(B('k05')), undefined)

      t.deepEqual(pairsOf(await tx.getRange(B('k'), B('l'))), expected)
      t.deepEqual(pairsOf(await tx.snapshotGetRange(B('k'), B('l'))), expected)
      t.deepEqual(pairsOf(await tx.getRange(B('k'), B('l'), { limit: 0 })), expected)
      t.deepEqual(pairsOf(await tx.getRange(B('k'), B('l'), { limit: 3 })), expected.slice(0, 3))
      t.deepEqual(pairsOf(await tx.getRange(B('k'), B('l'), { reverse: true })), [...expected].reverse())
      t.deepEqual(pairsOf(await tx.getRange(B('k'), B('l'), { reverse: true, limit: 4 })), [...expected].reverse().slice(0, 4))
      t.deepEqual(keysOf(await tx.getRange(B('k035'), B('k08'))), ['k035', 'k04', 'k06'])
      t.deepEqual(keysOf(await tx.getRange(B('k035'), B('k08'), { reverse: true })), ['k06', 'k04', 'k035'])
      t.deepEqual(keysOf(await tx.getRange(B('k07'), B('k085'))), ['k08'])
      t.deepEqual(keysOf(await tx.snapshotGetRange(B('k03'), B('k04'), { reverse: true, limit: 1 })), ['k035'])
      t.deepEqual(await tx.getRange(B('k05'), B('k06')), [])
    })
    t.deepEqual(pairsOf(await e.readOnly((r) => r.getRange(B('k'), B('l')))), expected)
    t.deepEqual(keysOf(await e.readOnly((r) => r.getRange(B('k'), B('l'), { reverse: true, limit: 2 }))), ['k10', 'k09'])
  })

  test(title('randomized read-your-writes against a model (set, clear, clearRange, get, getRange with limit/reverse)'), async (t) => {
    const e = await engine(t)
    let seed = 12345
    const rnd = (): number => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
      return seed / 4294967296
    }
    const alphabet = ['a', 'b', 'c', '\u0000', '\u00ff']
    const key = (): string => {
      let k = 'm/'
      for (let i = 1 + Math.floor(rnd() * 2); i > 0; i--) k += alphabet[Math.floor(rnd() * alphabet.length)]
      return k
    }
    const model = new Map<string, string>()
    const modelRange = (m: Map<string, string>, b: string, en: string, limit: number, reverse: boolean): string[] => {
      let ks = [...m.keys()].filter((k) => k >= b && k < en).sort()
      if (reverse) ks = ks.reverse()
      if (limit > 0) ks = ks.slice(0, limit)
      return ks.map((k) => `${k}=${m.get(k)}`)
    }
    for (let round = 0; round < 25; round++) {
      await e.transact(async (tx) => {
        const local = new Map(model)
        for (let op = 0; op < 30; op++) {
          const x = rnd()
          if (x < 0.3) {
            const k = key()
            const v = `v${round}.${op}`
            tx.set(B(k), B(v))
            local.set(k, v)
          } else if (x < 0.4) {
            const k = key()
            tx.clear(B(k))
            local.delete(k)
          } else if (x < 0.47) {
            const [b, en] = [key(), key()].sort() as [string, string]
            tx.clearRange(B(b), B(en))
            for (const k of [...local.keys()]) if (k >= b && k < en) local.delete(k)
          } else if (x < 0.7) {
            const k = key()
            const snap = rnd() < 0.5
            t.is(S(await (snap ? tx.snapshotGet(B(k)) : tx.get(B(k)))), local.get(k), `get ${JSON.stringify(k)}`)
          } else {
            const [b, en] = [key(), key()].sort() as [string, string]
            const limit = rnd() < 0.5 ? 0 : 1 + Math.floor(rnd() * 3)
            const reverse = rnd() < 0.5
            const got = await (rnd() < 0.5 ? tx.getRange(B(b), B(en), { limit, reverse }) : tx.snapshotGetRange(B(b), B(en), { limit, reverse }))
            t.deepEqual(pairsOf(got), modelRange(local, b, en, limit, reverse), `range ${JSON.stringify([b, en, limit, reverse])}`)
          }
        }
        model.clear()
        for (const [k, v] of local) model.set(k, v)
      })
      t.deepEqual(pairsOf(await e.readOnly((r) => r.getRange(B('m/'), B('m0')))), modelRange(model, 'm/', 'm0', 0, false))
    }
  })

  test(title('keys are raw bytes in lexicographic order; values are returned byte-exact'), async (t) => {
    const e = await engine(t)
    const sorted = [[0x00], [0x00, 0x00], [0x00, 0x01], [0x01], [0x2f, 0xff], [0x30], [0x7f], [0x80], [0xfe, 0xff, 0xff], [0xff], [0xff, 0x00], [0xff, 0xff]].map((a) => Buffer.from(a))
    const shuffled = [5, 0, 11, 3, 9, 1, 7, 10, 2, 8, 6, 4].map((i) => sorted[i]!)
    const value = (k: Buffer): Buffer => Buffer.concat([Buffer.from([0x00, 0xff, 0x80]), k, Buffer.from([0x00])])
    const end = Buffer.from([0xff, 0xff, 0xff])
    const emptyValueKey = Buffer.from([0xff, 0xff, 0xff, 0x01])
    await e.transact(async (tx) => {
      for (const k of shuffled.slice(0, 6)) tx.set(k, value(k))
    })
    await e.transact(async (tx) => {
      for (const k of shuffled.slice(6)) tx.set(k, value(k))
      tx.set(emptyValueKey, Buffer.alloc(0)) // outside the ranges read below
      // own writes and committed data merge in byte order
      const all = await tx.getRange(Buffer.from([0x00]), end)
      t.deepEqual(
        all.map((kv) => kv.key.toString('hex')),
        sorted.map((k) => k.toString('hex')),
      )
    })
    const all = await e.readOnly((r) => r.getRange(Buffer.alloc(0), end))
    t.deepEqual(
      all.map((kv) => kv.key.toString('hex')),
      sorted.map((k) => k.toString('hex')),
    )
    for (const kv of all) t.true(kv.value.equals(value(kv.key)))
    const rev = await e.readOnly((r) => r.getRange(Buffer.from([0x00, 0x00]), Buffer.from([0xff, 0x00]), { reverse: true }))
    t.deepEqual(
      rev.map((kv) => kv.key.toString('hex')),
      ['ff', 'feffff', '80', '7f', '30', '2fff', '01', '0001', '0000'],
    )
    const ev = await e.readOnly((r) => r.get(emptyValueKey))
    t.true(Buffer.isBuffer(ev))
    t.is(ev!.length, 0)
    t.deepEqual(await e.readOnly((r) => r.getRange(B('b'), B('b'))), [])
    t.deepEqual(await e.readOnly((r) => r.getRange(B('c'), B('b'))), [])
  })

  test(title('snapshot isolation: a transaction does not see commits after its read version'), async (t) => {
    const e = await engine(t)
    await put(e, { x: '1' })
    await e.readOnly(async (r) => {
      t.is(S(await r.get(B('x'))), '1')
      await put(e, { x: '2', y: '2' })
      t.is(S(await r.get(B('x'))), '1')
      t.is(await r.get(B('y')), undefined)
      t.deepEqual(keysOf(await r.getRange(B('a'), B('z'))), ['x'])
    })
    t.is(await read(e, 'x'), '2')
    // in a read-write transaction, snapshot reads see the same snapshot and do not conflict
    let attempts = 0
    await e.transact(async (tx) => {
      attempts++
      t.is(S(await tx.snapshotGet(B('x'))), '2')
      if (attempts === 1) await put(e, { x: '3', z: '3' })
      t.is(S(await tx.snapshotGet(B('x'))), attempts === 1 ? '2' : '3')
      t.is(S(await tx.snapshotGet(B('z'))), attempts === 1 ? undefined : '3')
      tx.set(B('w'), B('1'))
    })
    t.is(attempts, 1)
  })

  test(title('a transaction begun after a commit resolved sees it; commit versions increase'), async (t) => {
    const e = await engine(t)
    const c1 = await e.transactWithInfo(async (tx) => tx.set(B('a'), B('1')))
    const c2 = await e.transactWithInfo(async (tx) => tx.set(B('b'), B('1')))
    t.is(typeof c1.info.commitVersion, 'bigint')
    t.true(c2.info.commitVersion! > c1.info.commitVersion!)
    const rv = await e.readOnly(async (r) => {
      t.is(S(await r.get(B('b'))), '1')
      return r.readVersion
    })
    t.true(rv >= c2.info.commitVersion!)
    const rv2 = await e.transact(async (tx) => tx.readVersion)
    t.true(rv2 >= c2.info.commitVersion!)
  })

  test(title('conflict on a key: of two read-modify-write transactions one reruns'), async (t) => {
    const e = await engine(t)
    const meet = barrier(2)
    const attempts = [0, 0]
    const run = (i: number) =>
      e.transact(async (tx) => {
        attempts[i]!++
        const v = await tx.get(B('ctr'))
        if (attempts[i] === 1) await meet()
        tx.set(B('ctr'), u32((v ? v.readUInt32BE(0) : 0) + 1))
      }, { timeoutMs: 120_000 })
    await Promise.all([run(0), run(1)])
    t.is(attempts[0]! + attempts[1]!, 3)
    t.is((await e.readOnly((r) => r.get(B('ctr'))))!.readUInt32BE(0), 2)

    // without retries the loser fails with KV_CONFLICT and its write is not applied
    const meet2 = barrier(2)
    const once = (v: string) =>
      e.transact(
        async (tx) => {
          await tx.get(B('k'))
          await meet2()
          tx.set(B('k'), B(v))
        },
        { maxRetries: 0 },
      )
    const res = await Promise.allSettled([once('a'), once('b')])
    const failed = res.filter((r) => r.status === 'rejected') as PromiseRejectedResult[]
    t.is(failed.length, 1)
    t.true(isStrataError(failed[0]!.reason, 'KV_CONFLICT'))
    const winner = res[0]!.status === 'fulfilled' ? 'a' : 'b'
    t.is(await read(e, 'k'), winner)
  })

  test(title('conflict on a range: a commit inside a range read makes the reader rerun'), async (t) => {
    const e = await engine(t)
    await put(e, { 'r/a': '1', 'r/c': '1' })
    let attempts = 0
    const seen = await e.transact(async (tx) => {
      attempts++
      const kvs = await tx.getRange(B('r/a'), B('r/d'))
      if (attempts === 1) await put(e, { 'r/b': '1' })
      tx.set(B('count'), B(String(kvs.length)))
      return keysOf(kvs)
    })
    t.is(attempts, 2)
    t.deepEqual(seen, ['r/a', 'r/b', 'r/c'])
    t.is(await read(e, 'count'), '3')

    // a clearRange by the other transaction conflicts with a point read inside it ...
    attempts = 0
    await e.transact(async (tx) => {
      attempts++
      await tx.get(B('r/b'))
      if (attempts === 1) await e.transact(async (u) => u.clearRange(B('r/a0'), B('r/b0')))
      tx.set(B('o1'), B('1'))
    })
    t.is(attempts, 2)
    // ... and with a range read it overlaps
    attempts = 0
    await e.transact(async (tx) => {
      attempts++
      await tx.getRange(B('r/c'), B('r/z'))
      if (attempts === 1) await e.transact(async (u) => u.clearRange(B('r/'), B('r/c0')))
      tx.set(B('o2'), B('1'))
    })
    t.is(attempts, 2)
    t.deepEqual(keysOf(await e.readOnly((r) => r.getRange(B('r/'), B('r0')))), [])
  })

  test(title('a limited getRange conflicts only on the part it actually read'), async (t) => {
    const e = await engine(t)
    await put(e, { 'r/a': '1', 'r/b': '1', 'r/c': '1', 'r/d': '1' })
    const run = async (reverse: boolean, other: string): Promise<number> => {
      let attempts = 0
      await e.transact(async (tx) => {
        attempts++
        const kvs = await tx.getRange(B('r/'), B('r0'), { limit: 2, reverse })
        t.is(kvs.length, 2)
        if (attempts === 1) await put(e, { [other]: '1' })
        tx.set(B('out'), B('1'))
      })
      return attempts
    }
    t.is(await run(false, 'r/e'), 1) // beyond the last key returned
    t.is(await run(false, 'r/b\u0000'), 1) // just after it
    t.is(await run(false, 'r/ab'), 2) // inside what was read
    // reverse now reads r/e, r/d
    t.is(await run(true, 'r/cc'), 1) // reverse: before the last key returned
    t.is(await run(true, 'r/d0'), 2) // inside what was read
  })

  test(title('no false conflicts: snapshot reads, disjoint keys, range end is exclusive, blind writes'), async (t) => {
    const e = await engine(t)
    await put(e, { k: '0', k1: '0', k2: '0', a: '0', c: '0' })
    const attemptsOf = async (body: (tx: ReadWriteTxn, first: boolean) => Promise<void>): Promise<number> => {
      let attempts = 0
      await e.transact(async (tx) => {
        attempts++
        await body(tx, attempts === 1)
      })
      return attempts
    }
    t.is(
      await attemptsOf(async (tx, first) => {
        await tx.snapshotGet(B('k'))
        await tx.snapshotGetRange(B('a'), B('z'))
        if (first) await put(e, { k: '1', b: '1' })
        tx.set(B('k'), B('mine'))
      }),
      1,
    )
    t.is(await read(e, 'k'), 'mine')
    t.is(
      await attemptsOf(async (tx, first) => {
        await tx.get(B('k1'))
        if (first) await put(e, { k2: '1' })
        tx.set(B('k1'), B('1'))
      }),
      1,
    )
    t.is(
      await attemptsOf(async (tx, first) => {
        await tx.getRange(B('a'), B('c'))
        if (first) await put(e, { c: '1', '0': '1' })
        tx.set(B('x'), B('1'))
      }),
      1,
    )
    // write-only transactions never conflict; the later commit wins
    t.is(
      await attemptsOf(async (tx, first) => {
        tx.set(B('blind'), B('mine'))
        if (first) await put(e, { blind: 'theirs' })
      }),
      1,
    )
    t.is(await read(e, 'blind'), 'mine')
  })

  test(title('write skew is prevented (serializable)'), async (t) => {
    const e = await engine(t)
    await put(e, { x: '1', y: '1' })
    const meet = barrier(2)
    let attempts = 0
    const doctor = (mine: string) =>
      e.transact(async (tx) => {
        const first = ++attempts <= 2
        const x = Number(S(await tx.get(B('x'))))
        const y = Number(S(await tx.get(B('y'))))
        if (first) await meet()
        if (x + y === 2) tx.set(B(mine), B('0')) // "the other one is still on call"
      })
    await Promise.all([doctor('x'), doctor('y')])
    const x = Number(await read(e, 'x'))
    const y = Number(await read(e, 'y'))
    t.is(x + y, 1)
    t.is(attempts, 3)
  })

  test(title('addReadConflict and addReadConflictRange conflict without reading'), async (t) => {
    const e = await engine(t)
    let attempts = 0
    await e.transact(async (tx) => {
      attempts++
      tx.addReadConflict(B('guard'))
      if (attempts === 1) await put(e, { guard: '1' })
      tx.set(B('o'), B('1'))
    })
    t.is(attempts, 2)
    attempts = 0
    await e.transact(async (tx) => {
      attempts++
      tx.addReadConflictRange(B('g/a'), B('g/c'))
      if (attempts === 1) await put(e, { 'g/b': '1' })
      tx.set(B('o'), B('2'))
    })
    t.is(attempts, 2)
    attempts = 0
    await e.transact(async (tx) => {
      attempts++
      tx.addReadConflictRange(B('g/a'), B('g/c'))
      if (attempts === 1) await put(e, { 'g/c': '1' }) // end is exclusive
      tx.set(B('o'), B('3'))
    })
    t.is(attempts, 1)
  })

  test(title('retries rerun the function until it commits: N concurrent increments end at exactly N'), async (t) => {
    const e = await engine(t)
    const N = 40
    let calls = 0
    const results = await Promise.all(
      Array.from({ length: N }, () =>
        e.transact(
          async (tx) => {
            calls++
            return increment(tx, B('ctr'))
          },
          { timeoutMs: 120_000 }, // semantics, not speed: a loaded machine may fsync slowly
        ),
      ),
    )
    t.is((await e.readOnly((r) => r.get(B('ctr'))))!.readUInt32BE(0), N)
    t.deepEqual(
      [...results].sort((a, b) => a - b),
      Array.from({ length: N }, (_, i) => i + 1),
    )
    t.true(calls > N, 'contention caused reruns')
  })

  test(title('maxRetries exhausted gives KV_CONFLICT; timeoutMs gives TIMEOUT; nothing of the failed function is committed'), async (t) => {
    const e = await engine(t)
    let attempts = 0
    const always = async (tx: ReadWriteTxn): Promise<void> => {
      attempts++
      await tx.get(B('hot'))
      await put(e, { hot: String(attempts) })
      tx.set(B('marker'), B('1'))
    }
    const err = await t.throwsAsync(e.transact(always, { maxRetries: 2, timeoutMs: 120_000 }))
    t.true(isStrataError(err, 'KV_CONFLICT'), String(err))
    t.is(attempts, 3)
    t.is(await read(e, 'marker'), undefined)

    attempts = 0
    const started = Date.now()
    const err2 = await t.throwsAsync(e.transact(always, { maxRetries: 1_000_000, timeoutMs: 300 }))
    t.true(isStrataError(err2, 'TIMEOUT'), String(err2))
    t.true(Date.now() - started < 30_000, 'gave up long before maxRetries')
    t.true(attempts >= 1)
    t.is(await read(e, 'marker'), undefined)

    // a function that outlives the deadline is not committed
    const err3 = await t.throwsAsync(
      e.transact(
        async (tx) => {
          tx.set(B('slow'), B('1'))
          await sleep(400)
        },
        { timeoutMs: 150 },
      ),
    )
    t.true(isStrataError(err3, 'TIMEOUT'), String(err3))
    t.is(await read(e, 'slow'), undefined)
  })

  test(title('versionstamps are unique and increasing across commits and in call order within one'), async (t) => {
    const e = await engine(t)
    const all: Buffer[] = []
    for (let i = 0; i < 3; i++) {
      const { info } = await e.transactWithInfo(async (tx) => {
        tx.setVersionstampedKey(B('vs/'), B(`a${i}`))
        tx.setVersionstampedValue(B(`val/${i}`), B('pre:'))
        tx.setVersionstampedKey(B('vs/'), B(`b${i}`))
        tx.set(B('plain'), B(String(i)))
      })
      t.is(info.versionstamps.length, 3)
      for (let j = 0; j < 3; j++) {
        const s = info.versionstamps[j]!
        t.is(s.length, 10)
        t.is(s.readBigUInt64BE(0), info.commitVersion!)
        if (j > 0) t.true(Buffer.compare(info.versionstamps[j - 1]!, s) < 0)
      }
      const val = await e.readOnly((r) => r.get(B(`val/${i}`)))
      t.true(val!.equals(Buffer.concat([B('pre:'), info.versionstamps[1]!])))
      all.push(...info.versionstamps)
    }
    for (let i = 1; i < all.length; i++) t.true(Buffer.compare(all[i - 1]!, all[i]!) < 0)
    t.is(new Set(all.map((s) => s.toString('hex'))).size, all.length)
    const vs = await e.readOnly((r) => r.getRange(B('vs/'), B('vs0')))
    t.deepEqual(
      vs.map((kv) => S(kv.value)),
      ['a0', 'b0', 'a1', 'b1', 'a2', 'b2'],
    )
    t.deepEqual(
      vs.map((kv) => kv.key.subarray(3).toString('hex')),
      [all[0], all[2], all[3], all[5], all[6], all[8]].map((s) => s!.toString('hex')),
    )
    // a transaction without versionstamps gets none
    const { info } = await e.transactWithInfo(async (tx) => tx.set(B('p'), B('1')))
    t.deepEqual(info.versionstamps, [])
  })

  test(title('read-only work never conflicts'), async (t) => {
    const e = await engine(t)
    await put(e, { k: 'old' })
    let calls = 0
    const v = await e.readOnly(async (r) => {
      calls++
      const before = S(await r.get(B('k')))
      await put(e, { k: 'new' })
      await r.getRange(B('a'), B('z'))
      return before
    })
    t.is(v, 'old')
    t.is(calls, 1)
    // a read-write transaction that wrote nothing commits nothing and never conflicts
    calls = 0
    const { result, info } = await e.transactWithInfo(async (tx) => {
      calls++
      const before = S(await tx.get(B('k')))
      await tx.getRange(B('a'), B('z'))
      await put(e, { k: 'newer' })
      return before
    })
    t.is(result, 'new')
    t.is(calls, 1)
    t.is(info.commitVersion, undefined)
    t.deepEqual(info.versionstamps, [])
  })

  test(title('errors thrown by the function propagate unchanged, are not retried, and commit nothing'), async (t) => {
    const e = await engine(t)
    let calls = 0
    const boom = new Error('boom')
    const err = await t.throwsAsync(
      e.transact(async (tx) => {
        calls++
        tx.set(B('k'), B('1'))
        throw boom
      }),
    )
    t.is(err, boom)
    t.is(calls, 1)
    t.is(await read(e, 'k'), undefined)
    // the transaction object is dead once the function returned
    let leaked: ReadWriteTxn | undefined
    await e.transact(async (tx) => {
      leaked = tx
    })
    await t.throwsAsync(leaked!.get(B('k')))
    t.throws(() => leaked!.set(B('k'), B('1')))
    t.is(await read(e, 'k'), undefined)
  })

  test(title('invalid keys and oversized values are rejected'), async (t) => {
    const e = await engine(t)
    await e.transact(async (tx) => {
      const empty = t.throws(() => tx.set(Buffer.alloc(0), B('v')))
      t.true(isStrataError(empty, 'INVALID_ARGUMENT'), String(empty))
      const bigValue = t.throws(() => tx.set(B('k'), Buffer.alloc(16 * 1024 * 1024)))
      t.true(isStrataError(bigValue, 'KV_VALUE_TOO_LARGE'), String(bigValue))
      const bigKey = t.throws(() => tx.set(Buffer.alloc(64 * 1024, 1), B('v')))
      t.true(isStrataError(bigKey, 'KV_VALUE_TOO_LARGE'), String(bigKey))
      // a DENT-shaped key: 4-byte prefix + 8-byte parent + a 255-byte name
      tx.set(Buffer.concat([B('DENT'), Buffer.alloc(8, 0xab), Buffer.alloc(255, 0x61)]), B('entry'))
    })
    const dent = await e.readOnly((r) => r.getRange(B('DENT'), B('DENU')))
    t.is(dent.length, 1)
    t.is(dent[0]!.key.length, 267)
  })

  test(title('close is idempotent and later calls fail with CLOSED'), async (t) => {
    const e = await engine(t)
    await put(e, { k: '1' })
    let resume!: () => void
    const paused = new Promise<void>((r) => (resume = r))
    const inflight = e.readOnly(async (r) => {
      await paused
      return r.get(B('k'))
    })
    await e.close()
    await e.close()
    resume()
    const e1 = await t.throwsAsync(inflight)
    t.true(isStrataError(e1, 'CLOSED'), String(e1))
    const e2 = await t.throwsAsync(e.transact(async (tx) => tx.set(B('k'), B('2'))))
    t.true(isStrataError(e2, 'CLOSED'), String(e2))
    const e3 = await t.throwsAsync(e.readOnly(async (r) => r.get(B('k'))))
    t.true(isStrataError(e3, 'CLOSED'), String(e3))
    const e4 = await t.throwsAsync(e.transactWithInfo(async () => 1))
    t.true(isStrataError(e4, 'CLOSED'), String(e4))
  })
}
