import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { ERRORS, StrataError, isStrataError, toStrataError } from '../../../fs/common/errors.js'
import { REPO } from '../../helpers/procs.js'

test('every error code is documented in docs/errors.md and nothing stale is', (t) => {
  const doc = fs.readFileSync(path.join(REPO, 'docs/errors.md'), 'utf8')
  const documented = new Set([...doc.matchAll(/^\| `([A-Z0-9_]+)` \|/gm)].map((m) => m[1]))
  for (const code of Object.keys(ERRORS)) t.true(documented.has(code), `${code} missing from docs/errors.md (run node scripts/gen-errors-doc.mjs)`)
  for (const code of documented) t.true(code! in ERRORS, `${code} documented but not in the catalogue`)
})

test('wire round trip keeps code, message and detail; unknown codes become INTERNAL', (t) => {
  const e = new StrataError('CHUNK_NOT_COMMIT', 'pending', { detail: { v: 1 } })
  const back = StrataError.fromWire(e.toWire())
  t.is(back.code, 'CHUNK_NOT_COMMIT')
  t.is(back.reason, 'pending')
  t.deepEqual(back.detail, { v: 1 })
  t.true(back.retryable)
  const unknown = StrataError.fromWire({ code: 'WHAT', message: 'x' })
  t.is(unknown.code, 'INTERNAL')
  t.true(unknown.message.includes('WHAT'))
})

test('toStrataError maps disk errno codes and keeps the cause', (t) => {
  const enospc = Object.assign(new Error('no space'), { code: 'ENOSPC' })
  const e = toStrataError(enospc)
  t.is(e.code, 'NO_SPACE')
  t.is(e.cause, enospc)
  t.true(isStrataError(toStrataError(Object.assign(new Error('io'), { code: 'EIO' })), 'IO_ERROR'))
  t.is(toStrataError('plain').code, 'INTERNAL')
})
