// The lmdb engine on a really full filesystem (a size-limited tmpfs made by
// the test): a commit that cannot be written is NO_SPACE for that
// transaction only. lmdb-js reports it as EIO and also rejects promises
// nobody waits for; unhandled, those ended every meta server sharing the env.

import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { openLmdbKv } from '../../../fs/kv/index.js'
import { DEFAULT_RESERVE_BYTES } from '../../../fs/kv/lmdb.js'
import { smallTmpfs } from '../../helpers/small-disk.js'

test.serial('a commit on a full disk fails with NO_SPACE, leaves no unhandled rejection, and commits work again once space is freed', async (t) => {
  if (process.getuid?.() !== 0) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-kv-full-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=4m', 'tmpfs', dir])
  t.teardown(() => execFileSync('umount', ['-l', dir]))
  const unhandled: unknown[] = []
  const onUnhandled = (e: unknown): void => void unhandled.push(e)
  process.on('unhandledRejection', onUnhandled)
  t.teardown(() => void process.off('unhandledRejection', onUnhandled))

  const filler = path.join(dir, 'filler')
  fs.writeFileSync(filler, Buffer.alloc(1024 * 1024, 1))
  const kv = await openLmdbKv({ path: path.join(dir, 'kv') })
  t.teardown(() => kv.close())
  const value = Buffer.alloc(8000, 2)
  const key = (i: number): Buffer => Buffer.from(`key-${String(i).padStart(6, '0')}`)
  let committed = 0
  let failure: unknown
  // several transactions at once, so they share lmdb-js batches as meta's do
  for (let i = 0; failure === undefined && i < 10_000; i += 4) {
    const results = await Promise.allSettled([0, 1, 2, 3].map((j) => kv.transact(async (txn) => txn.set(key(i + j), value))))
    for (const r of results) {
      if (r.status === 'fulfilled') committed++
      else failure ??= r.reason
    }
  }
  t.is((failure as { code?: string })?.code, 'NO_SPACE', String(failure))
  t.true(committed > 0)
  // lmdb rejects its own promises from its write thread's callback; give them turns to surface
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 10))
  t.deepEqual(unhandled.map(String), [])

  fs.rmSync(filler)
  await kv.transact(async (txn) => txn.set(Buffer.from('after'), value))
  const back = await kv.readOnly(async (txn) => ({ after: await txn.get(Buffer.from('after')), first: await txn.get(key(0)) }))
  t.deepEqual(back.after, value)
  t.deepEqual(back.first, value)
})


test.serial('on a full disk a transaction that frees space commits into the reserve; creates stay NO_SPACE; the reserve comes back with room', async (t) => {
  if (process.getuid?.() !== 0) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const dir = smallTmpfs(t, '16m')
  const kvDir = path.join(dir, 'kv')
  const reserve = path.join(kvDir, 'strata-kv.reserve')
  const kv = await openLmdbKv({ path: kvDir })
  t.teardown(() => kv.close())
  t.is(fs.statSync(reserve).size, DEFAULT_RESERVE_BYTES, 'made at open')
  // something else takes half the disk (lmdb never gives pages back to the filesystem: room comes back by removing this)
  const filler = path.join(dir, 'filler')
  fs.writeFileSync(filler, Buffer.alloc(8 * 1024 * 1024, 1))

  // the KV itself fills the disk (all but the reserve)
  const value = Buffer.alloc(8000, 2)
  const key = (i: number): Buffer => Buffer.from(`key-${String(i).padStart(6, '0')}`)
  let n = 0
  let failure: unknown
  for (; failure === undefined && n < 100_000; n += 4) {
    const results = await Promise.allSettled([0, 1, 2, 3].map((j) => kv.transact(async (txn) => txn.set(key(n + j), value))))
    failure = results.find((r) => r.status === 'rejected')?.reason
  }
  t.is((failure as { code?: string })?.code, 'NO_SPACE', String(failure))
  // a batch of four big values did not fit; small ones fill the pages lmdb has left (big values need contiguous ones)
  const small = Buffer.alloc(100, 3)
  for (failure = undefined; failure === undefined && n < 100_000; n++) {
    failure = await kv.transact(async (txn) => txn.set(key(n), small)).then(
      () => undefined,
      (e: unknown) => e,
    )
  }
  t.is((failure as { code?: string })?.code, 'NO_SPACE', String(failure))
  const create = (): Promise<unknown> => kv.transact(async (txn) => txn.set(Buffer.from('new'), value))
  await t.throwsAsync(create(), { code: 'NO_SPACE' })
  t.true(fs.existsSync(reserve), 'a create does not spend the reserve')

  await kv.transact(async (txn) => txn.clearRange(key(0), key(Math.floor(n / 2))), { frees: true })
  t.false(fs.existsSync(reserve), 'the removal was committed into the reserve')
  t.is(await kv.readOnly((txn) => txn.get(key(0))), undefined)
  await create() // into the pages the removal freed
  t.deepEqual(await kv.readOnly((txn) => txn.get(Buffer.from('new'))), value)

  // room on the filesystem again: a later commit makes the reserve again
  fs.rmSync(filler)
  await kv.transact(async (txn) => txn.clearRange(key(Math.floor(n / 2)), key(n)), { frees: true })
  for (let i = 0; i < 200 && !fs.existsSync(reserve); i++) {
    await new Promise((r) => setTimeout(r, 50))
    await kv.transact(async (txn) => txn.set(Buffer.from('tick'), Buffer.from([i & 255])))
  }
  t.is(fs.statSync(reserve).size, DEFAULT_RESERVE_BYTES, 'made again')
  t.deepEqual(
    fs.readdirSync(kvDir).filter((f) => f.endsWith('.tmp')),
    [],
  )
})

test.serial('opening a new KV on a full disk fails with NO_SPACE instead of ending the process', async (t) => {
  if (process.getuid?.() !== 0) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const dir = smallTmpfs(t, '1m')
  execFileSync('sh', ['-c', `cat /dev/zero > ${dir}/filler 2>/dev/null || true`])
  // in a process of its own: lmdb used to die of SIGBUS creating its lock file
  const kvIndex = new URL('../../../fs/kv/index.js', import.meta.url).href
  const script = `
    process.on('unhandledRejection', (e) => { console.log('UNHANDLED ' + e); process.exit(3) })
    const { openLmdbKv } = await import(${JSON.stringify(kvIndex)})
    try { await openLmdbKv({ path: process.argv[1] }); console.log('OPENED') } catch (e) { console.log(String(e)) }
  `
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script, path.join(dir, 'kv')], { encoding: 'utf8', timeout: 60_000 })
  t.is(r.signal, null, `ended by ${r.signal}`)
  t.is(r.status, 0, r.stdout + r.stderr)
  t.regex(r.stdout, /NO_SPACE: cannot create the KV at /, r.stdout)
})

test.serial('two processes sharing a full env both free space: one spends the reserve, the other commits all the same', async (t) => {
  if (process.getuid?.() !== 0) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const dir = smallTmpfs(t, '16m')
  const kvDir = path.join(dir, 'kv')
  const kv = await openLmdbKv({ path: kvDir })
  t.teardown(() => kv.close())
  fs.writeFileSync(path.join(dir, 'filler'), Buffer.alloc(8 * 1024 * 1024, 1))
  const key = (i: number): Buffer => Buffer.from(`key-${String(i).padStart(6, '0')}`)
  let n = 0
  for (const size of [8000, 100]) {
    for (let failure: unknown; failure === undefined && n < 100_000; n++) {
      failure = await kv.transact(async (txn) => txn.set(key(n), Buffer.alloc(size, 2))).then(
        () => undefined,
        (e: unknown) => e,
      )
      if (failure !== undefined) t.is((failure as { code?: string }).code, 'NO_SPACE', String(failure))
    }
  }
  t.true(fs.existsSync(path.join(kvDir, 'strata-kv.reserve')))

  // the other process removes the first half while this one removes the second, at once
  const kvIndex = new URL('../../../fs/kv/index.js', import.meta.url).href
  const script = `
    const { openLmdbKv } = await import(${JSON.stringify(kvIndex)})
    const kv = await openLmdbKv({ path: process.argv[1] })
    const key = (i) => Buffer.from('key-' + String(i).padStart(6, '0'))
    process.stdout.write('ready\\n')
    process.stdin.once('data', async () => {
      try { await kv.transact(async (txn) => txn.clearRange(key(0), key(${Math.floor(n / 2)})), { frees: true }); console.log('REMOVED') }
      catch (e) { console.log(String(e)) }
      await kv.close()
    })
  `
  const child = spawn(process.execPath, ['--input-type=module', '-e', script, kvDir], { stdio: ['pipe', 'pipe', 'inherit'] })
  t.teardown(() => void child.kill('SIGKILL'))
  let out = ''
  child.stdout.on('data', (d: Buffer) => (out += d.toString()))
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)))
  for (let i = 0; i < 600 && !out.includes('ready'); i++) await new Promise((r) => setTimeout(r, 50))
  t.true(out.includes('ready'), out)
  child.stdin.end('go\n')
  const mine = kv.transact(async (txn) => txn.clearRange(key(Math.floor(n / 2)), key(n)), { frees: true })
  await t.notThrowsAsync(mine)
  t.is(await exited, 0)
  t.regex(out, /REMOVED/, out)
  t.deepEqual(await kv.readOnly((txn) => txn.getRange(key(0), key(n))), [])
})
