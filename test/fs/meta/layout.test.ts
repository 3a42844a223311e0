// Layout assignment at create, against a real cluster: ChainRange with a
// round-robin base index, a safe seed and the table's latest version;
// per-directory layouts; the 'I' directory counter; and the §2.6 placement
// math checked end to end (chunks written where the math says, length found
// by meta's storage query).

import test from 'ava'
import { chunkIdOf } from '../../../fs/common/chunk-id.js'
import { isSafeSeed, shufflePermutation } from '../../../fs/common/shuffle.js'
import type { Layout } from '../../../fs/common/layout.js'
import { useSharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { codeOf } from '../../helpers/meta-client.js'
import { until } from '../../helpers/procs.js'

const FS_CHAIN_ALLOCATION_FL = 0x1000
const FS_NEW_CHUNK_ENGINE = 0x1
const FS_HUGE_FILE_FL = 0x40000
const CHUNK = 65536

/** §2.6: stripe chain ids from (baseIndex, seed) and the table, computed independently of fs/meta. */
function expectedChains(table: number[], layout: Layout): number[] {
  if (layout.chains.type !== 'ChainRange') throw new Error('not a ChainRange')
  const perm = layout.chains.shuffle ? shufflePermutation(layout.chains.seed, layout.stripeSize) : [...Array(layout.stripeSize).keys()]
  return perm.map((p) => table[(layout.chains.type === 'ChainRange' ? layout.chains.baseIndex + p - 1 : 0) % table.length]!)
}

let m!: MetaCluster
useSharedMetaCluster(test, { chains: 4, stripeSize: 2 }, (c) => (m = c))

test.serial('layout assignment, directory layouts and placement math', async (t) => {
  const c = m.client()
  const table = m.c.chains.map((x) => x.chainId)

  // inherited from the root's Empty layout: ChainRange, round robin by stripe
  const layouts: Layout[] = []
  for (let i = 0; i < 6; i++) layouts.push((await c.create(`/f${i}`, { flags: { access: 'r', create: true } })).stat.file!.layout)
  const first = layouts[0]!
  t.is(first.tableId, 1)
  t.is(first.tableVersion, 1)
  t.is(first.chunkSize, CHUNK)
  t.is(first.stripeSize, 2)
  t.is(first.chains.type, 'ChainRange')
  const bases = layouts.map((l) => (l.chains.type === 'ChainRange' ? l.chains.baseIndex : -1))
  t.true((bases[0]! - 1) % 2 === 0, `first base ${bases[0]} starts at a multiple of the stripe`)
  for (let i = 1; i < bases.length; i++) t.is(bases[i], ((bases[i - 1]! - 1 + 2) % 4) + 1, `base indexes ${bases.join(',')}`)
  for (const l of layouts) {
    if (l.chains.type !== 'ChainRange') continue
    t.is(l.chains.shuffle, 1)
    t.is(typeof l.chains.seed, 'bigint')
    t.true(isSafeSeed(l.chains.seed, 2), `seed ${l.chains.seed} is safe`)
  }

  // placement: write 2.5 chunks where the math says; meta finds the exact length there
  const f = await c.create('/placed', { flags: { access: 'w', create: true }, session: 's-placed' })
  const layout = f.stat.file!.layout
  const stripe = expectedChains(table, layout)
  const sizes = [CHUNK, CHUNK, 1000]
  for (let i = 0; i < sizes.length; i++) {
    await m.storage.write(stripe[i % stripe.length]!, chunkIdOf(f.stat.id, i), 0, Buffer.alloc(sizes[i]!, i + 1), CHUNK)
  }
  const closed = await c.close(f.stat.id, 's-placed', true)
  t.is(closed.file!.length, 2 * CHUNK + 1000)
  t.is(closed.file!.truncateVer, 0)
  for (let i = 0; i < sizes.length; i++) {
    const q = await m.storage.queryLastChunk(stripe[i % stripe.length]!, { begin: chunkIdOf(f.stat.id, i), end: chunkIdOf(f.stat.id, i + 1) })
    t.truthy(q.lastChunkId, `chunk ${i} on chain ${stripe[i % stripe.length]}`)
  }

  // a directory with its own default layout (mkdirs with layout), inherited by files
  await c.mkdirs('/big', { layout: { tableId: 1, tableVersion: 0, chunkSize: 2 * CHUNK, stripeSize: 4, chains: { type: 'Empty' } } })
  const inBig = (await c.create('/big/x', { flags: { access: 'r', create: true } })).stat.file!.layout
  t.is(inBig.chunkSize, 2 * CHUNK)
  t.is(inBig.stripeSize, 4)
  t.is(inBig.chains.type, 'ChainRange')
  t.deepEqual([...expectedChains(table, inBig)].sort(), [...table].sort())
  // setAttr layout on a directory; not on a file
  await c.mkdirs('/one')
  await c.setAttr('/one', { layout: { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 1, chains: { type: 'Empty' } } })
  t.is((await c.create('/one/y', { flags: { access: 'r', create: true } })).stat.file!.layout.stripeSize, 1)
  t.is(await codeOf(c.setAttr('/f0', { layout: { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 1, chains: { type: 'Empty' } } })), 'META_NOT_DIRECTORY')
  // explicit layouts: a chain list is kept as given; invalid ones are refused
  const listed = await c.create('/listed', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 1, chunkSize: CHUNK, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [4, 1] } } })
  t.deepEqual(listed.stat.file!.layout.chains, { type: 'ChainList', chainIndexes: [4, 1] })
  t.is(await codeOf(c.create('/bad1', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 1, chunkSize: CHUNK, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [0, 1] } } })), 'META_INVALID_ARGUMENT')
  // an index beyond the table (the data path would wrap it onto another chain) and a repeated one are refused
  const beyond = c.create('/bad3', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 1, chunkSize: CHUNK, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [1, 5] } } })
  const e1 = await t.throwsAsync(beyond)
  t.is((e1 as { code?: string }).code, 'META_INVALID_ARGUMENT')
  t.regex(e1!.message, /chain index 5 is beyond chain table 1 version 1, which has 4 chains/)
  const twice = c.create('/bad4', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 1, chunkSize: CHUNK, stripeSize: 2, chains: { type: 'ChainList', chainIndexes: [2, 2] } } })
  const e2 = await t.throwsAsync(twice)
  t.is((e2 as { code?: string }).code, 'META_INVALID_ARGUMENT')
  t.regex(e2!.message, /names chain index 2 twice/)
  t.is(await codeOf(c.stat('/bad3')), 'META_NOT_FOUND')
  t.is(await codeOf(c.create('/bad2', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 0, chunkSize: 3000, stripeSize: 2, chains: { type: 'Empty' } } })), 'META_INVALID_ARGUMENT')
  // a stripe wider than the table
  t.is(await codeOf(c.create('/wide', { flags: { access: 'r', create: true }, layout: { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 8, chains: { type: 'Empty' } } })), 'META_INVALID_ARGUMENT')
  t.is(await codeOf(c.create('/notable', { flags: { access: 'r', create: true }, layout: { tableId: 7, tableVersion: 0, chunkSize: CHUNK, stripeSize: 1, chains: { type: 'Empty' } } })), 'MGMTD_CHAIN_TABLE_NOT_FOUND')

  // 'I': the directory's own persisted counter, inherited by subdirectories
  const dirI = await c.mkdirs('/I')
  await c.setAttr('/I', { iflags: FS_CHAIN_ALLOCATION_FL })
  const ibases: number[] = []
  for (let i = 0; i < 3; i++) {
    const l = (await c.create(`/I/f${i}`, { flags: { access: 'r', create: true } })).stat.file!.layout
    ibases.push(l.chains.type === 'ChainRange' ? l.chains.baseIndex : -1)
  }
  for (let i = 1; i < 3; i++) t.is(ibases[i], ((ibases[i - 1]! - 1 + 2) % 4) + 1)
  const dirAfter = await c.statById(dirI.id)
  t.is(dirAfter.directory!.chainAllocCounter, (ibases[2]! - 1 + 2) % 4)
  t.is((await c.mkdirs('/I/sub')).acl.iflags & FS_CHAIN_ALLOCATION_FL, FS_CHAIN_ALLOCATION_FL)

  // a new chain table version: new files take the latest
  await m.c.mgmtd.setChainTable({ chainTableId: 1, chains: [...table].reverse() })
  const v2 = await until(async () => {
    const l = (await c.create(`/v2-${Date.now()}`, { flags: { access: 'r', create: true } })).stat.file!.layout
    return l.tableVersion === 2 ? l : undefined
  }, 10000, 'table version 2 used')
  t.is(v2.tableVersion, 2)
})

test.serial('a chain table or table version that does not exist is MGMTD_CHAIN_TABLE_NOT_FOUND; a given version is the one allocated from', async (t) => {
  const c = m.client()
  const empty = (tableId: number, tableVersion: number) => ({ tableId, tableVersion, chunkSize: CHUNK, stripeSize: 1, chains: { type: 'Empty' as const } })
  const r = { flags: { access: 'r' as const, create: true } }
  const err = async (p: Promise<unknown>) => {
    try {
      await p
      return 'OK'
    } catch (e) {
      return `${(e as { code: string }).code}: ${(e as { reason: string }).reason}`
    }
  }
  // files: Empty (allocated at create) and ChainList layouts
  t.is(await err(c.create('/v5', { ...r, layout: empty(1, 5) })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 1 version 5 not found')
  t.is(await err(c.create('/t9', { ...r, layout: empty(9, 0) })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 9 not found')
  const listV5 = { tableId: 1, tableVersion: 5, chunkSize: CHUNK, stripeSize: 1, chains: { type: 'ChainList' as const, chainIndexes: [1] } }
  t.is(await err(c.create('/l5', { ...r, layout: listV5 })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 1 version 5 not found')
  // directories store an Empty layout: it is checked all the same (mkdirs and set-layout)
  t.is(await err(c.mkdirs('/d7', { layout: empty(1, 7) })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 1 version 7 not found')
  t.is(await err(c.mkdirs('/d9', { layout: empty(9, 0) })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 9 not found')
  await c.mkdirs('/dv')
  t.is(await err(c.setAttr('/dv', { layout: empty(1, 7) })), 'MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 1 version 7 not found')
  // an existing version is kept and allocated from
  const d1 = await c.mkdirs('/d1', { layout: empty(1, 1) })
  t.is(d1.directory!.layout.tableVersion, 1)
  t.is((await c.create('/d1/f', r)).stat.file!.layout.tableVersion, 1)
  t.is((await c.create('/v1', { ...r, layout: empty(1, 1) })).stat.file!.layout.tableVersion, 1)
  // list names the path it was given, not an inode id
  t.is(await err(c.list('/v1')), 'META_NOT_DIRECTORY: /v1 is not a directory')
})

test.serial("inheritable iflags ('I' 0x1000, 's' 0x1) go to every new file and directory below, other flags to none (ref §2.3)", async (t) => {
  const c = m.client()
  await c.mkdirs('/inh-s')
  // the acceptance case: 's' alone
  await c.setAttr('/inh-s', { iflags: FS_NEW_CHUNK_ENGINE })
  t.is((await c.create('/inh-s/f', { flags: { access: 'r', create: true } })).stat.acl.iflags, FS_NEW_CHUNK_ENGINE, 'file')
  t.is((await c.mkdirs('/inh-s/d')).acl.iflags, FS_NEW_CHUNK_ENGINE, 'directory')
  t.is((await c.create('/inh-s/d/g', { flags: { access: 'w', create: true } })).stat.acl.iflags, FS_NEW_CHUNK_ENGINE, 'file two levels down')
  t.is((await c.mkdirs('/inh-s/p/q', { recursive: true })).acl.iflags, FS_NEW_CHUNK_ENGINE, 'mkdir -p')
  // both, next to one that is not inherited
  await c.mkdirs('/inh-all')
  await c.setAttr('/inh-all', { iflags: FS_NEW_CHUNK_ENGINE | FS_CHAIN_ALLOCATION_FL | FS_HUGE_FILE_FL })
  t.is((await c.create('/inh-all/f', { flags: { access: 'r', create: true } })).stat.acl.iflags, FS_NEW_CHUNK_ENGINE | FS_CHAIN_ALLOCATION_FL)
  t.is((await c.mkdirs('/inh-all/d')).acl.iflags, FS_NEW_CHUNK_ENGINE | FS_CHAIN_ALLOCATION_FL)
  // a symlink's acl is fixed (0777, no flags), as in 3FS
  t.is((await c.symlink('/inh-all/l', 'f')).acl.iflags, 0)
  // none set: none inherited
  await c.mkdirs('/inh-none')
  t.is((await c.create('/inh-none/f', { flags: { access: 'r', create: true } })).stat.acl.iflags, 0)
  t.is((await c.mkdirs('/inh-none/d')).acl.iflags, 0)
})

test.serial('a directory layout whose stripe exceeds its table is kept, as in 3FS; files in it fail at create, naming both numbers', async (t) => {
  const c = m.client()
  // 3FS MkdirsOp checks an Empty layout's fields only (ChainAllocator::checkLayoutValid): with
  // version 0 the directory follows the table's latest version, which may be widened later
  const wide = { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 8, chains: { type: 'Empty' as const } }
  t.is((await c.mkdirs('/wide8', { layout: wide })).directory!.layout.stripeSize, 8)
  const e = await t.throwsAsync(c.create('/wide8/f', { flags: { access: 'r', create: true } }))
  t.is((e as { code?: string }).code, 'META_INVALID_ARGUMENT')
  t.regex((e as { reason?: string }).reason ?? '', /try to allocate 8 chains from table 1, found 4/)
  t.is(await codeOf(c.stat('/wide8/f')), 'META_NOT_FOUND')
})

test.serial('a new layout names a chunk size from 4K to 2G: smaller ones (1 was taken) are refused by create, mkdirs and setAttr', async (t) => {
  const c = m.client()
  const empty = (chunkSize: number): Layout => ({ tableId: 1, tableVersion: 0, chunkSize, stripeSize: 1, chains: { type: 'Empty' } })
  const listed = (chunkSize: number): Layout => ({ tableId: 1, tableVersion: 1, chunkSize, stripeSize: 1, chains: { type: 'ChainList', chainIndexes: [1] } })
  await c.mkdirs('/cs')
  const refused = async (p: Promise<unknown>, what: string) => {
    const e = await t.throwsAsync(p, undefined, what)
    t.is((e as { code?: string }).code, 'META_INVALID_ARGUMENT', what)
    t.regex((e as { reason?: string }).reason ?? '', /invalid layout: layout chunkSize must be a power of two from 4K to 2G \(4096 to 2147483648\), got \d+$/, what)
  }
  for (const size of [1, 2, 1024, 2048]) {
    await refused(c.create(`/cs/f${size}`, { flags: { access: 'r', create: true }, layout: empty(size) }), `create ${size}`)
    await refused(c.create(`/cs/l${size}`, { flags: { access: 'r', create: true }, layout: listed(size) }), `create chain list ${size}`)
    await refused(c.mkdirs(`/cs/d${size}`, { layout: empty(size) }), `mkdirs ${size}`)
    await refused(c.setAttr('/cs', { layout: empty(size) }), `setAttr ${size}`)
  }
  t.deepEqual((await c.list('/cs')).entries, [])
  // the bounds themselves are taken
  t.is((await c.create('/cs/min', { flags: { access: 'r', create: true }, layout: empty(4096) })).stat.file!.layout.chunkSize, 4096)
  t.is((await c.mkdirs('/cs/max', { layout: empty(2 ** 31) })).directory!.layout.chunkSize, 2 ** 31)
})
