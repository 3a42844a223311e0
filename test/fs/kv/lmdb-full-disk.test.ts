// The lmdb engine on a really full filesystem (a size-limited tmpfs made by
// the test): a commit that cannot be written is NO_SPACE for that
// transaction only. lmdb-js reports it as EIO and also rejects promises
// nobody waits for; unhandled, those ended every meta server sharing the env.

import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { openLmdbKv } from '../../../fs/kv/index.js'

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
