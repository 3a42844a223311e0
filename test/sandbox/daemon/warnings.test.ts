// The archive route's Strata-Warnings trailer: a download that meets any
// number of unreadable entries keeps only what the trailer carries (8 KiB)
// and counts the rest; it used to hold every warning until the stream ended.
import test from 'ava'
import { StrataError } from '../../../fs/common/errors.js'
import { MAX_WARNINGS_TRAILER, WarningsTrailer } from '../../../sandbox/daemon/warnings.js'

const warning = (i: number, name = `f${i}`) => new StrataError('SANDBOX_PERMISSION_DENIED', 'cannot open: Permission denied; skipped', { detail: { path: `/d/${name}`, errno: 'EACCES' } })

test('a hundred thousand warnings: every one counted, the first that fit in 8 KiB listed, nothing else kept', (t) => {
  const w = new WarningsTrailer()
  for (let i = 0; i < 100_000; i++) w.add(warning(i))
  const parsed = JSON.parse(w.toString()) as { count: number; warnings: Array<{ code: string; message: string; path: string; errno: string }> }
  t.is(parsed.count, 100_000)
  t.is(w.count, 100_000)
  t.is(parsed.warnings.length, w.listed)
  t.true(w.listed > 50 && w.listed < 200, `${w.listed} listed`)
  t.true(w.toString().length <= MAX_WARNINGS_TRAILER + 64)
  t.deepEqual(parsed.warnings[0], { code: 'SANDBOX_PERMISSION_DENIED', message: '/d/f0: cannot open: Permission denied; skipped', path: '/d/f0', errno: 'EACCES' })
  t.is(parsed.warnings.at(-1)!.path, `/d/f${w.listed - 1}`)
})

test('the list is a prefix: once one does not fit, a later smaller one is not listed; names are ASCII-escaped', (t) => {
  const w = new WarningsTrailer()
  w.add(warning(0, 'é'))
  w.add(warning(1, 'x'.repeat(MAX_WARNINGS_TRAILER)))
  w.add(warning(2))
  t.is(w.count, 3)
  t.is(w.listed, 1)
  t.true(/^[\x20-\x7e]*$/.test(w.toString()))
  t.is((JSON.parse(w.toString()) as { warnings: Array<{ path: string }> }).warnings[0]!.path, '/d/é')
})
