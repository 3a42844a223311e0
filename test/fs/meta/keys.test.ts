// Pure pieces of fs/meta: the 3FS key layout byte for byte, GC entry names,
// path splitting, the in-memory KV used by in-process tests.

import test from 'ava'
import { dentryKey, idemKey, inodeAllocKey, inodeKey, metaServerKey, prefixEnd, sessionKey, uuidBytes } from '../../../fs/meta/keys.js'
import { formatGcEntry, gcDirName, parseGcEntry } from '../../../fs/meta/gc.js'
import { splitPath, filenameOf } from '../../../fs/meta/path.js'
import { simplifyPath } from '../../../fs/meta/ops.js'
import { ownerOf } from '../../../fs/meta/distributor.js'
import { MemKv } from '../../helpers/mem-kv.js'

test('key layout is 3FS\'s: 4-byte prefix, little-endian inode ids', (t) => {
  t.is(inodeKey(0x0102030405060708n).toString('hex'), Buffer.from('INOD').toString('hex') + '0807060504030201')
  t.is(dentryKey(0x1000n, 'abc').toString('hex'), Buffer.from('DENT').toString('hex') + '0010000000000000' + Buffer.from('abc').toString('hex'))
  const u = '0123456789abcdef0123456789abcdef'
  t.is(sessionKey(1n, '01234567-89ab-cdef-0123-456789abcdef').toString('hex'), Buffer.from('INOS').toString('hex') + '0100000000000000' + u)
  t.is(idemKey('01234567-89ab-cdef-0123-456789abcdef', 'ffffffff-ffff-ffff-ffff-ffffffffffff').toString('hex'), Buffer.from('IDEM').toString('hex') + u + 'f'.repeat(32))
  t.is(uuidBytes('not a uuid').length, 16)
  t.is(inodeAllocKey(7).toString(), 'SING-inode-alloc-7')
  t.is(metaServerKey(101).toString(), 'META-00000101')
  t.is(prefixEnd(Buffer.from([1, 0xff])).toString('hex'), '02')
})

test('GC entry names', (t) => {
  const name = formatGcEntry('S', 1_700_000_000_123_456, 0x20006n)
  t.is(name, 'S-00001700000000123456-0x0000000000020006')
  t.deepEqual(parseGcEntry(name), { type: 'S', timestampUs: 1_700_000_000_123_456, inode: 0x20006n })
  t.is(parseGcEntry('x-1-2'), null)
  t.is(gcDirName(101, 0), 'GC-Node-101')
  t.is(gcDirName(101, 3), 'GC-Node-101.3')
  // entries of one type sort by time
  t.true(formatGcEntry('d', 5, 1n) < formatGcEntry('d', 10, 0n))
})

test('paths split like boost::filesystem and simplify like 3FS', (t) => {
  t.deepEqual(splitPath('/'), ['/'])
  t.deepEqual(splitPath('/a//b/'), ['/', 'a', 'b', '.'])
  t.deepEqual(splitPath('a/./b'), ['a', '.', 'b'])
  t.is(filenameOf('/a/b'), 'b')
  t.is(filenameOf('/a/b/'), '.')
  t.is(simplifyPath(['/', 'a', '..', 'b', '.', 'c']), '/b/c')
  t.is(simplifyPath(['..', 'a']), '../a')
  t.is(simplifyPath(['/', '..']), '/')
})

test('rendezvous owner: stable, spread, moves only inodes of a leaving server', (t) => {
  const counts = new Map<number, number>()
  const before = new Map<bigint, number>()
  for (let i = 0n; i < 3000n; i++) {
    const o = ownerOf([101, 102, 103], i)!
    before.set(i, o)
    counts.set(o, (counts.get(o) ?? 0) + 1)
  }
  for (const n of counts.values()) t.true(n > 800 && n < 1200)
  for (const [i, o] of before) if (o !== 103) t.is(ownerOf([101, 102], i), o)
  t.is(ownerOf([], 1n), undefined)
})

test('in-memory KV: snapshot reads, read-your-writes, conflicts retry', async (t) => {
  const kv = new MemKv()
  const k = Buffer.from('k')
  await kv.transact(async (txn) => txn.set(k, Buffer.from('1')))
  let runs = 0
  const slow = kv.transact(async (txn) => {
    runs++
    const v = await txn.get(k)
    await new Promise((r) => setTimeout(r, 20))
    txn.set(k, Buffer.from(String(Number(v!.toString()) + 1)))
  })
  await kv.transact(async (txn) => {
    const v = await txn.get(k)
    txn.set(k, Buffer.from(String(Number(v!.toString()) + 10)))
  })
  await slow
  t.is(runs, 2)
  t.is((await kv.readOnly((txn) => txn.get(k)))!.toString(), '12')
  await kv.transact(async (txn) => {
    txn.set(Buffer.from('a1'), Buffer.from('x'))
    txn.set(Buffer.from('a2'), Buffer.from('y'))
    txn.clear(Buffer.from('a1'))
    t.deepEqual((await txn.getRange(Buffer.from('a'), Buffer.from('b'))).map((x) => x.key.toString()), ['a2'])
  })
})
