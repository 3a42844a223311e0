// meta's dumpSessions (admin dump-session) over an in-memory KV: key order,
// filters, cursors, the scan budget that ends a page early when a filter
// matches few records, prune requests skipped, request validation.

import test from 'ava'
import { StrataError } from '../../../fs/common/errors.js'
import { encodeSession } from '../../../fs/meta/codec.js'
import { dumpSessions, parseDumpSessionsReq } from '../../../fs/meta/dump-sessions.js'
import { PRUNE_INODE, sessionKey } from '../../../fs/meta/keys.js'
import type { DumpSessionsRsp, FileSessionRecord, InodeId } from '../../../fs/meta/protocol.js'
import { toInodeId } from '../../../fs/meta/service.js'
import { MemKv } from '../../helpers/mem-kv.js'

async function kvWith(records: FileSessionRecord[]): Promise<MemKv> {
  const kv = new MemKv()
  await kv.transact(async (txn) => {
    for (const s of records) txn.set(sessionKey(s.inode, s.session), encodeSession(s))
  })
  return kv
}

const rec = (inode: InodeId, session: string, clientId: string): FileSessionRecord => ({ inode, session, clientId, timestamp: 1_700_000_000_000_000 })

/** every page until more is false */
async function all(kv: MemKv, req: Record<string, unknown>, budget?: number): Promise<{ sessions: FileSessionRecord[]; pages: number }> {
  const out: FileSessionRecord[] = []
  let prev: DumpSessionsRsp['next'] = null
  for (let pages = 1; ; pages++) {
    const rsp = await dumpSessions(kv, parseDumpSessionsReq({ ...req, ...(prev ? { prev } : {}) }, toInodeId), budget)
    out.push(...rsp.sessions)
    if (!rsp.more) return { sessions: out, pages }
    prev = rsp.next
    if (pages > 100) throw new Error('no end')
  }
}

test('dumpSessions: key order, filters by inode and client, cursors, the scan budget, prune requests skipped', async (t) => {
  const records: FileSessionRecord[] = []
  for (let i = 1; i <= 30; i++) records.push(rec(BigInt(0x1000 + i), `s${i}`, i % 10 === 0 ? 'rare' : 'common'))
  records.push(rec(0x1005n, 'second', 'rare'))
  records.push(rec(PRUNE_INODE, 'prune-request', 'rare'))
  const kv = await kvWith(records)

  const everything = await all(kv, {})
  t.is(everything.sessions.length, 31, 'the prune request is not a session')
  t.is(everything.pages, 1)
  const keyOrder = [...everything.sessions].sort((a, b) => Buffer.compare(sessionKey(a.inode, a.session), sessionKey(b.inode, b.session)))
  t.deepEqual(everything.sessions, keyOrder)

  // small pages: same sessions, same order
  const paged = await all(kv, { limit: 4 })
  t.deepEqual(paged.sessions, everything.sessions)
  t.is(paged.pages, 8)
  // a page that ends on the last session says so
  t.false((await dumpSessions(kv, parseDumpSessionsReq({ limit: 31 }, toInodeId))).more)
  t.true((await dumpSessions(kv, parseDumpSessionsReq({ limit: 30 }, toInodeId))).more)

  // a filter that matches few: a small scan budget ends pages early, with a cursor, and nothing is lost
  const rare = await all(kv, { clientId: 'rare' }, 7)
  t.deepEqual(rare.sessions.map((s) => s.session).sort(), ['s10', 's20', 's30', 'second'].sort())
  t.true(rare.pages >= 4, `${rare.pages} pages`)
  const empty = await dumpSessions(kv, parseDumpSessionsReq({ clientId: 'rare' }, toInodeId), 3)
  t.deepEqual(empty.sessions, [])
  t.true(empty.more)
  t.truthy(empty.next)

  // one inode: a range of its own, with a cursor inside it
  const five = await all(kv, { inode: 0x1005n })
  t.deepEqual(five.sessions.map((s) => s.session).sort(), ['s5', 'second'])
  const firstOfFive = await dumpSessions(kv, parseDumpSessionsReq({ inode: 0x1005, limit: 1 }, toInodeId))
  t.true(firstOfFive.more)
  const restOfFive = await dumpSessions(kv, parseDumpSessionsReq({ inode: '0x1005', prev: firstOfFive.next }, toInodeId))
  t.deepEqual([...firstOfFive.sessions, ...restOfFive.sessions], five.sessions)
  t.false(restOfFive.more)
  t.deepEqual((await all(kv, { inode: 0x9999n })).sessions, [])
})

test('dumpSessions: malformed requests are META_INVALID_ARGUMENT', (t) => {
  const bad = (req: unknown, re: RegExp) => {
    const e = t.throws(() => parseDumpSessionsReq(req, toInodeId), { instanceOf: StrataError })
    t.is(e?.code, 'META_INVALID_ARGUMENT')
    t.regex(e?.message ?? '', re)
  }
  bad({ limit: -1 }, /limit/)
  bad({ limit: 'x' }, /limit/)
  bad({ inode: 'zz' }, /inode/)
  bad({ clientId: 7 }, /clientId/)
  bad({ prev: { inode: 1 } }, /prev/)
  bad({ inode: 1, prev: { inode: 2, session: 'a' } }, /prev is a session of inode 2/)
  t.is(parseDumpSessionsReq({ limit: 1_000_000 }, toInodeId).limit, 10_000)
  t.is(parseDumpSessionsReq(undefined, toInodeId).limit, 1000)
})
