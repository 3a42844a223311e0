// `strata fs` and the filesystem commands of `strata admin` as an operator
// runs them (child processes) against a real cluster: mgmtd and storage
// processes plus meta servers, found by the CLI through routing info.

import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { layoutChainIndexes, type Layout } from '../../fs/common/layout.js'
import { startMetaCluster, useSharedMetaCluster, type MetaCluster } from '../helpers/meta-cluster.js'
import { spawn } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import { STRATA, ok, strata, table } from './helpers.js'
import { freePort } from '../helpers/procs.js'
import type { ExecutionContext } from 'ava'

const CLUSTER = { chunkSize: 65536, stripeSize: 2 }

// One cluster for the serial tests that leave its processes alone (a cluster
// start is most of such a test's cost); each starts from an empty root.
let shared: MetaCluster
useSharedMetaCluster(test, CLUSTER, (m) => (shared = m))

async function cluster(t: ExecutionContext): Promise<{ m: MetaCluster; args: string[]; dir: string }> {
  await shared.emptyRoot()
  return withLocalDir(t, shared)
}

/** A cluster of the test's own, for a test that kills its processes. */
async function ownCluster(t: ExecutionContext): Promise<{ m: MetaCluster; args: string[]; dir: string }> {
  return withLocalDir(t, await startMetaCluster(t, CLUSTER))
}

function withLocalDir(t: ExecutionContext, m: MetaCluster): { m: MetaCluster; args: string[]; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fs-cli-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return { m, dir, args: ['--mgmtd-address', m.c.mgmtdAddress] }
}

test.serial('fs put/get round trips (large, small, empty, stdin/stdout), ls, stat, mkdir -p, rm -r', async (t) => {
  t.timeout(5 * 60_000)
  const { args, dir } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  await ok(t, fsx('mkdir', '-p', '/data/sub'))
  // a 20 MiB file, not a multiple of the chunk size
  const big = randomBytes(20 * 1024 * 1024 + 4321)
  const small = Buffer.from('hello strata\n')
  fs.writeFileSync(path.join(dir, 'big.bin'), big)
  fs.writeFileSync(path.join(dir, 'small.txt'), small)
  fs.writeFileSync(path.join(dir, 'empty'), '')
  fs.chmodSync(path.join(dir, 'small.txt'), 0o640)
  const put = JSON.parse(await ok(t, fsx('put', '--json', path.join(dir, 'big.bin'), '/data/big.bin')))
  t.is(put.bytes, big.length)
  t.is(put.length, big.length)
  t.regex(put.inode, /^0x[0-9a-f]{16}$/)
  // into a directory: keeps the name and the local mode
  await ok(t, fsx('put', path.join(dir, 'small.txt'), '/data/sub/'))
  await ok(t, fsx('put', path.join(dir, 'empty'), '/data/empty'))
  const got = path.join(dir, 'big.out')
  await ok(t, fsx('get', '/data/big.bin', got))
  t.true(fs.readFileSync(got).equals(big))
  await ok(t, fsx('get', '/data/sub/small.txt', dir + '/'))
  t.deepEqual(fs.readFileSync(path.join(dir, 'small.txt')), small)
  await ok(t, fsx('get', '/data/empty', path.join(dir, 'empty.out')))
  t.is(fs.statSync(path.join(dir, 'empty.out')).size, 0)
  // stdout and stdin
  t.is(await ok(t, fsx('get', '/data/sub/small.txt', '-')), small.toString())
  const viaStdin = await strata(fsx('put', '-', '/data/stdin.txt'), { input: 'from stdin' })
  t.is(viaStdin.code, 0, viaStdin.stderr)
  t.is(await ok(t, fsx('get', '/data/stdin.txt', '-')), 'from stdin')

  // ls: names; -l long form; --json records
  const names = (await ok(t, fsx('ls', '/data'))).trim().split('\n')
  t.deepEqual(names, ['big.bin', 'empty', 'stdin.txt', 'sub'])
  const long = table(await ok(t, fsx('ls', '-l', '/data')))
  const bigRow = long.find((r) => r[r.length - 1] === 'big.bin')!
  t.is(bigRow[0]![0], '-')
  t.is(bigRow[4], String(big.length))
  t.is(long.find((r) => r[r.length - 1] === 'sub')![0]![0], 'd')
  const recs = JSON.parse(await ok(t, fsx('ls', '--json', '/data/sub')))
  t.is(recs.length, 1)
  t.like(recs[0], { name: 'small.txt', type: 'File', size: small.length, perm: '0640' })
  // stat
  const st = JSON.parse(await ok(t, fsx('stat', '--json', '/data/big.bin')))
  t.like(st, { path: '/data/big.bin', type: 'File', size: big.length, chunkSize: 65536, stripeSize: 2 })
  t.is(st.layout.chains.type, 'ChainRange')
  const text = table(await ok(t, fsx('stat', '/data/big.bin')))
  t.deepEqual(text.find((r) => r[0] === 'Size'), ['Size', String(big.length)])
  // errors: missing path → META_NOT_FOUND, exit 1
  const missing = await strata(fsx('stat', '/nope'))
  t.is(missing.code, 1)
  t.regex(missing.stderr, /META_NOT_FOUND/)
  // a bad local path is reported with a catalogue code, not Node's errno name
  const noDir = await strata(fsx('get', '/data/sub/small.txt', path.join(dir, 'no-such-dir', 'x')))
  t.is(noDir.code, 1)
  t.regex(noDir.stderr, /^strata: NOT_FOUND: local directory \S+\/no-such-dir does not exist$/m)
  const noLocal = await strata(fsx('put', path.join(dir, 'no-such-file'), '/data/x'))
  t.is(noLocal.code, 1)
  t.regex(noLocal.stderr, /^strata: NOT_FOUND: /m)
  // rm: a non-empty directory needs -r
  const notEmpty = await strata(fsx('rm', '/data'))
  t.is(notEmpty.code, 1)
  t.regex(notEmpty.stderr, /META_NOT_EMPTY/)
  await ok(t, fsx('rm', '/data/empty'))
  await ok(t, fsx('rm', '-r', '/data'))
  t.is((await ok(t, fsx('ls', '/'))).trim(), '')
  // usage error
  t.is((await strata(fsx('put', 'only-one-arg'))).code, 2)
})

test.serial('admin: create with stripe 2 → stat --display-layout → 5 chunks written land on the chains the layout predicts', async (t) => {
  t.timeout(5 * 60_000)
  const { m, args, dir } = await cluster(t)
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  await ok(t, adm('mkdir', '-p', '/x/y', '--perm', '0750'))
  await ok(t, adm('create', '--chain-table-id', '1', '--stripe-size', '2', '--chunk-size', '64K', '/x/y/f'))
  // text form: 3FS columns
  const rows = table(await ok(t, adm('stat', '--display-layout', '/x/y/f')))
  const kv = Object.fromEntries(rows.map((r) => [r[0], r.slice(1).join(' ')]))
  for (const k of ['Type', 'Inode', 'NLink', 'Permission', 'IFlags', 'Uid', 'Gid', 'Access', 'Change', 'Modified', 'Length']) t.true(k in kv, k)
  for (const k of ['Layout-ChainTable', 'Layout-ChainTableVersion', 'Layout-ChunkSize', 'Layout-StripeSize', 'Layout-Type', 'Layout-Chains']) t.true(k in kv, k)
  t.is(kv['Layout-Type'], 'ChainRange')
  t.is(kv['Layout-ChunkSize'], '65536')
  t.is(kv['Layout-StripeSize'], '2')
  t.is(kv['Length'], '0@0')
  // JSON: baseIndex and seed are exported; the chain list follows from them with the reference algorithm
  const st = JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', '/x/y/f')))
  const layout: Layout = {
    tableId: st.layout.tableId,
    tableVersion: st.layout.tableVersion,
    chunkSize: st.layout.chunkSize,
    stripeSize: st.layout.stripeSize,
    chains: { type: 'ChainRange', baseIndex: st.layout.baseIndex, shuffle: st.layout.shuffle, seed: BigInt(st.layout.seed) },
  }
  const tableChains = m.c.chains.map((c) => c.chainId)
  const predicted = layoutChainIndexes(layout).map((i) => tableChains[(i - 1) % tableChains.length]!)
  t.deepEqual(st.layout.chains, predicted)
  t.is(kv['Layout-Chains'], `[${predicted.join(', ')}]`)
  // write 5 chunks: put replaces the file with a new inode (written under a temporary name,
  // then renamed over it) that keeps the existing file's layout
  const data = randomBytes(5 * 65536)
  fs.writeFileSync(path.join(dir, 'five'), data)
  await ok(t, ['fs', ...args, 'put', path.join(dir, 'five'), '/x/y/f'])
  const put = JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', '/x/y/f')))
  t.deepEqual(put.layout.chains, predicted)
  t.is(put.layout.seed, st.layout.seed)
  const ino = BigInt(put.inode)
  for (let i = 0; i < 5; i++) {
    const q = JSON.parse(await ok(t, adm('query-chunk', '--path', '/x/y/f', '--chunk-index', String(i), '--json')))
    t.is(q.chainId, predicted[i % 2])
    const idBytes = Buffer.from(q.chunkId.replace(/-/g, ''), 'hex')
    const want = Buffer.alloc(16)
    want.writeBigUInt64BE(ino, 2)
    want.writeUInt32BE(i, 12)
    t.deepEqual(idBytes, want)
    t.is(q.chunkName, `${put.inode}-0-${i}`)
    t.is(q.targets.length, 3)
    for (const r of q.targets) {
      t.truthy(r.meta, `chunk ${i} missing on target ${r.targetId}`)
      t.is(r.meta.size, 65536)
      t.is(r.meta.commitVer, r.meta.updateVer)
    }
    // the other chain does not have it
    const other = tableChains.find((c) => c !== predicted[i % 2])!
    const miss = JSON.parse(await ok(t, adm('query-chunk', '-c', String(other), '--chunk', q.chunkId, '--json')))
    t.true(miss.targets.every((r: { meta: unknown }) => r.meta === null))
  }
  // the text form of query-chunk --path
  const qt = await ok(t, adm('query-chunk', '--path', '/x/y/f', '--chunk-index', '3'))
  t.regex(qt, new RegExp(`on chain ${predicted[1]}`))
  const usage = await strata(adm('query-chunk', '--path', '/x/y/f'))
  t.is(usage.code, 2)
})

test.serial('admin: ls -s, set-perm, mv, rm [-r], gc-list, session-prune', async (t) => {
  t.timeout(5 * 60_000)
  const { m, args } = await cluster(t)
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  await ok(t, adm('mkdir', '/d'))
  await ok(t, adm('create', '-p', '600', '/d/a'))
  await ok(t, adm('create', '/d/b'))
  // creating what exists, removing or renaming the root: clear errors, nothing changed
  for (const [a, re] of [
    [adm('create', '/d/b'), /^strata: META_EXISTS: /m],
    [adm('rm', '/'), /^strata: META_INVALID_ARGUMENT: the root directory cannot be removed/m],
    [adm('rm', '-r', '/'), /^strata: META_INVALID_ARGUMENT: the root directory cannot be removed/m],
    [adm('mv', '/', '/e'), /^strata: META_INVALID_ARGUMENT: the root directory cannot be renamed/m],
    [adm('mv', '/d', '/'), /^strata: META_INVALID_ARGUMENT: the root directory cannot be replaced/m],
  ] as const) {
    const r = await strata([...a])
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, re, a.join(' '))
  }
  // a file path ending like a directory: EISDIR naming the path typed, on an existing directory and a missing name alike
  for (const p of ['/d/', '/d/new/']) {
    const r = await strata(adm('create', p))
    t.is(r.code, 1, p)
    t.regex(r.stderr, new RegExp(`^strata: META_IS_DIRECTORY: ${p}: cannot create a file there`, 'm'))
  }
  const ls = table(await ok(t, adm('ls', '/d')))
  t.deepEqual(ls[0], ['Name', 'Type', 'Inode'])
  t.deepEqual(
    ls.slice(1).map((r) => [r[0], r[1]]),
    [
      ['a', 'File'],
      ['b', 'File'],
    ],
  )
  // ls -s --json: numbers under stat's field names (length, truncateVer; a symlink's target); the text keeps 3FS's length@truncateVer
  await m.client().symlink('/d/ln', '/d/a target')
  await ok(t, adm('mkdir', '/d/sub'))
  const lss = JSON.parse(await ok(t, adm('ls', '-s', '--json', '/d')))
  t.like(lss[0], { name: 'a', type: 'File', length: 0, truncateVer: 0, permission: '0600' })
  const stA = JSON.parse(await ok(t, adm('stat', '--json', '/d/a')))
  t.is(lss[0].length, stA.length)
  t.is(lss[0].truncateVer, stA.truncateVer)
  const lnRow = lss.find((r: { name: string }) => r.name === 'ln')
  t.like(lnRow, { type: 'Symlink', length: '/d/a target'.length, target: '/d/a target' })
  t.is(lnRow.target, JSON.parse(await ok(t, adm('stat', '--json', '/d/ln'))).target)
  const subRow = lss.find((r: { name: string }) => r.name === 'sub')
  t.like(subRow, { type: 'Directory' })
  t.false('length' in subRow, 'a directory has no length, as in stat')
  // text: a symlink's Length is its length (3FS printed the target there, which broke the columns)
  const lst = table(await ok(t, adm('ls', '-s', '/d')))
  t.deepEqual(lst[0], ['Name', 'Type', 'Inode', 'Modified', 'Length', 'Permission'])
  const col = (name: string) => lst.find((r) => r[0] === name)!
  t.is(col('a')[5], '0@0')
  t.is(col('ln')[5], String('/d/a target'.length))
  t.is(col('ln').length, 7, 'one cell per column')
  t.is(col('sub')[5], '-')
  await ok(t, adm('rm', '/d/ln'))
  await ok(t, adm('rm', '/d/sub'))
  t.is(JSON.parse(await ok(t, adm('ls', '-l', '1', '--json', '/d'))).length, 1)
  const sp = JSON.parse(await ok(t, adm('set-perm', '--uid', '1000', '--gid', '100', '--perm', '644', '/d/a', '--json')))
  t.like(sp, { uid: 1000, gid: 100, permission: '0644' })
  // --iflags takes hex as stat prints it (0x10 is FS_IMMUTABLE_FL: cleared again before the removes below)
  // set-perm --json gives iflags as stat (text and JSON) does
  t.like(JSON.parse(await ok(t, adm('set-perm', '--iflags', '0x10', '/d/a', '--json'))), { iflags: '0x00000010' })
  // the text line says what --iflags set
  t.regex(await ok(t, adm('set-perm', '--iflags', '0x10', '/d/a')), /^Set permission of \/d\/a: uid 1000 gid 100 perm 0644 iflags 0x00000010$/m)
  t.deepEqual(table(await ok(t, adm('stat', '/d/a'))).find((r) => r[0] === 'IFlags'), ['IFlags', '0x00000010'])
  t.is(JSON.parse(await ok(t, adm('stat', '--json', '/d/a'))).iflags, '0x00000010')
  // an immutable file keeps its mode and owner (EPERM, root too), and the refusal names the path given
  const imm = await strata(adm('set-perm', '--perm', '600', '/d/a'))
  t.is(imm.code, 1)
  t.regex(imm.stderr, /^strata: META_NOT_PERMITTED: file \/d\/a is immutable: its mode cannot change$/m)
  t.like(JSON.parse(await ok(t, adm('set-perm', '--iflags', '0', '/d/a', '--json'))), { iflags: '0x00000000' })
  await ok(t, adm('mv', '/d/a', '/d/c'))
  const st = JSON.parse(await ok(t, adm('stat', '--json', '/d/c')))
  t.like(st, { type: 'File', uid: 1000, gid: 100, permission: '0644' })
  t.is((await strata(adm('stat', '/d/a'))).code, 1)
  // stat by inode id
  const byId = JSON.parse(await ok(t, adm('stat', '--inode', '--json', st.inode)))
  t.is(byId.inode, st.inode)
  const nonEmpty = await strata(adm('rm', '/d'))
  t.is(nonEmpty.code, 1)
  await ok(t, adm('rm', '/d/b'))
  await ok(t, adm('rm', '-r', '/d'))
  const gc = JSON.parse(await ok(t, adm('gc-list', '--json')))
  t.true(Array.isArray(gc.entries))
  const gct = table(await ok(t, adm('gc-list')))
  t.deepEqual(gct[0], ['GcDir', 'Name', 'Inode', 'Type', 'OrigPath', 'User', 'RemovedAt'])
  const pr = JSON.parse(await ok(t, adm('session-prune', '--json')))
  t.is(typeof pr.pruned, 'number')
  // the largest --timeout: every timer holds it (before the bound, 99999999999 warned TimeoutOverflowWarning and became 1 ms)
  for (const a of [['admin', ...args, '--timeout', '2147483', 'ls', '/'], ['fs', ...args, '--timeout', '2147483', 'ls', '/']]) {
    const r = await strata(a)
    t.is(r.code, 0, `${a.join(' ')}: ${r.stderr}`)
    t.notRegex(r.stderr, /TimeoutOverflowWarning/, a.join(' '))
  }
  t.deepEqual(table(await ok(t, adm('session-prune')))[0]?.slice(0, 2), ['num', 'sessions'])
})

test('against a stopped cluster (nothing listens at the mgmtd address) fs and image commands fail at once, not after the retry budget', async (t) => {
  const port = await freePort()
  for (const args of [
    ['fs', 'ls', '/', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '600'],
    ['image', 'ls', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '600'],
  ]) {
    const r = await strata(args)
    t.is(r.code, 1, args.join(' '))
    t.regex(r.stderr, /^strata: RPC_CONNECT_FAILED: no mgmtd accepts connections at 127\.0\.0\.1:\d+: is the cluster running\?/m, args.join(' '))
  }
})

test.serial('fs --uid/--gid act with exactly the groups asked for: the caller\'s supplementary groups are not kept', async (t) => {
  t.timeout(3 * 60_000)
  const { args, dir } = await cluster(t)
  const secret = path.join(dir, 'secret')
  fs.writeFileSync(secret, 'root only\n')
  fs.chmodSync(secret, 0o640)
  // the cluster's root directory belongs to root: owned by root:root, 0640
  await ok(t, ['fs', ...args, 'put', secret, '/secret'])
  t.like(JSON.parse(await ok(t, ['fs', ...args, 'stat', '--json', '/secret'])), { uid: 0, gid: 0, perm: '0640' })
  const as = (...id: string[]) => ['fs', ...args, ...id, 'get', '/secret', '-']
  // the test runs as root, whose groups include 0: before the fix uid 1000 kept them and read the file
  const other = await strata(as('--uid', '1000', '--gid', '1000'))
  t.is(other.code, 1, other.stdout)
  // the refused file is named by the path given, not by its inode id
  t.regex(other.stderr, /^strata: META_NO_PERMISSION: uid 1000 has no r-- permission on file \/secret \(uid 0, gid 0, mode 0640\)$/m)
  t.is(await ok(t, as('--uid', '1000', '--gid', '1000', '--groups', '5,0')), 'root only\n')
  t.is(await ok(t, as('--uid', '1000', '--gid', '0')), 'root only\n')
  const noGroups = await strata(as('--uid', '1000', '--gid', '1000', '--groups', '5'))
  t.is(noGroups.code, 1)
  t.is((await strata(as('--uid', '1000', '--groups', 'x'))).code, 2)
})

test.serial('fs put is atomic: the target is the old file or the whole new one (SIGINT, chains down); --timeout bounds the failure', async (t) => {
  t.timeout(4 * 60_000)
  const { m, args, dir } = await ownCluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const v1 = randomBytes(300_000)
  fs.writeFileSync(path.join(dir, 'v1'), v1)
  await ok(t, fsx('put', path.join(dir, 'v1'), '/f'))
  const before = JSON.parse(await ok(t, fsx('stat', '--json', '/f')))
  const names = async () => (await ok(t, fsx('ls', '/'))).trim().split('\n').filter(Boolean)

  // an interrupted put: the new data is under a temporary name until the end, and goes with Ctrl-C
  const child = spawn(process.execPath, [STRATA, ...fsx('put', '-', '/f')], { stdio: ['pipe', 'pipe', 'pipe'] })
  t.teardown(() => void child.kill('SIGKILL'))
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  child.stdin.write(randomBytes(200_000))
  const deadline = Date.now() + 30_000
  let during: string[] = []
  while (Date.now() < deadline) {
    during = await names()
    if (during.some((n) => n.startsWith('.f.strata-put-'))) break
    await sleep(100)
  }
  t.true(during.some((n) => n.startsWith('.f.strata-put-')), during.join(' '))
  t.like(JSON.parse(await ok(t, fsx('stat', '--json', '/f'))), { inode: before.inode, size: v1.length })
  child.kill('SIGINT')
  t.is(await exited, 130, stderr)
  t.regex(stderr, /^strata: CANCELLED: fs put interrupted by SIGINT/m)
  t.deepEqual(await names(), ['f'])
  t.true((await getBytes(fsx('get', '/f', '-'))).equals(v1))

  // an overwrite that completes replaces the file as a whole (its layout and mode kept)
  const v2 = randomBytes(400_000)
  fs.writeFileSync(path.join(dir, 'v2'), v2)
  fs.chmodSync(path.join(dir, 'v2'), 0o600)
  await ok(t, fsx('put', path.join(dir, 'v2'), '/f'))
  const after = JSON.parse(await ok(t, fsx('stat', '--json', '/f')))
  t.like(after, { size: v2.length, perm: before.perm, chunkSize: before.chunkSize, stripeSize: before.stripeSize })
  t.not(after.inode, before.inode)
  t.true((await getBytes(fsx('get', '/f', '-'))).equals(v2))
  t.deepEqual(await names(), ['f'])

  // every storage node down: the put fails within about --timeout, and the old file stays
  for (const n of ['storage-1', 'storage-2', 'storage-3']) await m.c.kill(n)
  const t0 = Date.now()
  const failed = await strata(fsx('put', '--timeout', '3', path.join(dir, 'v1'), '/f'))
  const took = Date.now() - t0
  t.is(failed.code, 1, failed.stderr)
  t.regex(failed.stderr, /^strata: (CHAIN_UNAVAILABLE|RPC_CONNECT_FAILED|TIMEOUT|TARGET_OFFLINE): /m)
  // a hang guard, not timing: without --timeout applied the put would retry for the default 60 s
  t.log(`put --timeout 3 failed after ${took} ms`)
  t.true(took < 30_000, `put --timeout 3 took ${took} ms`)
  t.like(JSON.parse(await ok(t, fsx('stat', '--json', '/f'))), { inode: after.inode, size: v2.length })
  t.deepEqual(await names(), ['f'])
  const g0 = Date.now()
  const got = await strata(fsx('get', '--timeout', '3', '/f', path.join(dir, 'out')))
  t.is(got.code, 1)
  const gtook = Date.now() - g0
  t.log(`get --timeout 3 failed after ${gtook} ms`)
  t.true(gtook < 30_000, `get --timeout 3 took ${gtook} ms (the default budget: 60 s)`)
})

function getBytes(args: string[]): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [STRATA, ...args], { stdio: ['ignore', 'pipe', 'inherit'] })
    const parts: Buffer[] = []
    c.stdout.on('data', (d: Buffer) => parts.push(d))
    c.once('error', reject)
    c.once('exit', (code) => (code === 0 ? resolve(Buffer.concat(parts)) : reject(new Error(`strata ${args.join(' ')} exited ${code}`))))
  })
}

test.serial('multi-path fs rm / mkdir go on past a failing path (exit 1); create --chain-list takes the latest table version; mv file over a directory is EISDIR', async (t) => {
  t.timeout(3 * 60_000)
  const { args } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  await ok(t, fsx('mkdir', '/a', '/b', '/full'))
  await ok(t, fsx('mkdir', '/full/x'))
  const rm = await strata(fsx('rm', '/a', '/missing', '/full', '/b'))
  t.is(rm.code, 1)
  t.regex(rm.stderr, /^strata: META_NOT_FOUND: .*missing/m)
  t.regex(rm.stderr, /^strata: META_NOT_EMPTY: /m)
  t.deepEqual((await ok(t, fsx('ls', '/'))).trim().split('\n'), ['full'])
  const mk = await strata(fsx('mkdir', '/no/such', '/c', '/full', '/d'))
  t.is(mk.code, 1)
  t.regex(mk.stderr, /^strata: META_NOT_FOUND: /m)
  t.regex(mk.stderr, /^strata: META_EXISTS: /m)
  t.deepEqual((await ok(t, fsx('ls', '/'))).trim().split('\n'), ['c', 'd', 'full'])

  // --chain-list with --chain-table-id: --chain-table-ver defaults to the latest
  const cl = JSON.parse(await ok(t, adm('create', '--chain-table-id', '1', '--chain-list', '1', '--chunk-size', '64K', '--json', '/cl')))
  t.truthy(cl)
  const st = JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', '/cl')))
  t.like(st.layout, { tableId: 1, tableVersion: 1, chunkSize: 65536, stripeSize: 1 })
  const noTable = await strata(adm('create', '--chain-table-id', '7', '--chain-list', '1', '--chunk-size', '64K', '/cl2'))
  t.is(noTable.code, 1)
  t.regex(noTable.stderr, /^strata: MGMTD_CHAIN_TABLE_NOT_FOUND: chain table 7/m)

  // rename(2): a file over a directory is EISDIR whether it is empty or not
  const mv = await strata(adm('mv', '/cl', '/full'))
  t.is(mv.code, 1)
  t.regex(mv.stderr, /^strata: META_IS_DIRECTORY: /m)
})

test.serial('coreutils path endings: rm of DIR/. and DIR/.. is refused, FILE/ is ENOTDIR for rm, stat and get; DIR/ still works; a dangling symlink is named by the path given', async (t) => {
  t.timeout(3 * 60_000)
  const { args, dir, m } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  const local = path.join(dir, 'x')
  fs.writeFileSync(local, 'x\n')
  await ok(t, fsx('mkdir', '-p', '/rmdot/sub', '/rmdot3', '/ad/small'))
  await ok(t, fsx('put', local, '/rmdot/sub/f'))
  await ok(t, fsx('put', local, '/tsl'))
  for (const a of [fsx('rm', '-r', '/rmdot/.'), fsx('rm', '/rmdot3/.'), fsx('rm', '-r', '/rmdot/sub/..'), adm('rm', '-r', '/ad/small/.'), adm('rm', '/rmdot3/./')]) {
    const r = await strata(a)
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, /^strata: META_INVALID_ARGUMENT: /m, a.join(' '))
  }
  for (const a of [fsx('rm', '/tsl/'), fsx('rm', '-r', '/tsl/'), fsx('stat', '/tsl/'), fsx('get', '/tsl/', path.join(dir, 'out')), adm('rm', '/tsl/'), adm('stat', '/tsl/')]) {
    const r = await strata(a)
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, /^strata: META_NOT_DIRECTORY: /m, a.join(' '))
  }
  t.false(fs.existsSync(path.join(dir, 'out')))
  // a file used as a directory inside a path is named with the path, as a missing component is
  for (const a of [fsx('stat', '/tsl/x'), fsx('put', local, '/tsl/x'), fsx('get', '/tsl/x', path.join(dir, 'out')), fsx('ls', '/tsl/x'), fsx('mkdir', '-p', '/tsl/x/y'), adm('rm', '/tsl/x'), adm('mkdir', '/tsl/x')]) {
    const r = await strata(a)
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, /^strata: META_NOT_DIRECTORY: tsl in \/tsl\/x(\/y)? is not a directory$/m, a.join(' '))
  }
  // a dangling symlink followed (stat -L, get, admin set-perm) is named by the path given, not by
  // what failed inside its target ('nowhere in /nowhere/x not found')
  await m.client().symlink('/dangle', '/nowhere/x')
  for (const a of [fsx('stat', '-L', '/dangle'), fsx('get', '/dangle', path.join(dir, 'out')), adm('set-perm', '--perm', '600', '/dangle')]) {
    const r = await strata(a)
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, /^strata: META_NOT_FOUND: \/dangle is a dangling symlink \(to \/nowhere\/x\)$/m, a.join(' '))
  }
  const mid = await strata(fsx('stat', '/dangle/y'))
  t.regex(mid.stderr, /^strata: META_NOT_FOUND: dangle in \/dangle\/y is a dangling symlink \(to \/nowhere\/x\)$/m)
  t.is(JSON.parse(await ok(t, fsx('stat', '--json', '/dangle'))).type, 'Symlink', 'without -L: the link itself')
  await ok(t, fsx('rm', '/dangle'))
  // nothing was removed
  for (const p of ['/rmdot/sub/f', '/rmdot3', '/ad/small', '/tsl']) await ok(t, fsx('stat', p))
  // a trailing slash on a directory names the directory, as rmdir(2) and rm -r DIR/
  t.is(JSON.parse(await ok(t, fsx('stat', '--json', '/rmdot/'))).type, 'Directory')
  await ok(t, fsx('rm', '/rmdot3/'))
  await ok(t, fsx('rm', '-r', '/rmdot/'))
  await ok(t, adm('rm', '-r', '/ad/small/'))
  t.deepEqual((await ok(t, fsx('ls', '/'))).trim().split('\n'), ['ad', 'tsl'])
})

test.serial('admin stat and fs stat show who holds a directory lock (text and --json), and "-" / null when it is free', async (t) => {
  t.timeout(3 * 60_000)
  const { m, args } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  await ok(t, fsx('mkdir', '/ad'))
  const free = JSON.parse(await ok(t, adm('stat', '--json', '/ad')))
  t.is(free.lock, null)
  t.is(JSON.parse(await ok(t, fsx('stat', '--json', '/ad'))).lock, null)
  t.deepEqual(table(await ok(t, adm('stat', '/ad'))).find((r) => r[0] === 'Lock'), ['Lock', '-'])
  const holder = m.client()
  const dir = await holder.stat('/ad')
  await holder.lock(dir.id, 'try_lock')
  t.teardown(() => holder.lock(dir.id, 'clear').then(() => undefined, () => undefined))
  const st = JSON.parse(await ok(t, adm('stat', '--json', '/ad')))
  t.is(st.lock.client, holder.clientId)
  t.regex(st.lock.since, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/)
  const row = table(await ok(t, adm('stat', '/ad'))).find((r) => r[0] === 'Lock')
  t.is(row?.[1], holder.clientId)
  const fst = JSON.parse(await ok(t, fsx('stat', '--json', '/ad')))
  t.is(fst.lock.client, holder.clientId)
  t.true(Number.isFinite(Date.parse(fst.lock.since)))
  t.regex(await ok(t, fsx('stat', '/ad')), new RegExp(`^Lock +${holder.clientId} since `, 'm'))
  await holder.lock(dir.id, 'unlock')
  t.is(JSON.parse(await ok(t, adm('stat', '--json', '/ad'))).lock, null)
})

test.serial('names with control characters print escaped in text output (a newline is not a second entry, no ESC reaches the terminal); --json keeps them exact', async (t) => {
  t.timeout(3 * 60_000)
  const { args, dir } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const adm = (...a: string[]) => ['admin', ...args, ...a]
  const local = path.join(dir, 'x')
  fs.writeFileSync(local, 'x\n')
  const names = ['new\nline', 'esc\x1b[31mred', 'tab\there', 'plain']
  await ok(t, fsx('mkdir', '/n'))
  for (const n of names) await ok(t, fsx('put', local, `/n/${n}`))
  const shown = ['esc\\x1b[31mred', 'new\\nline', 'plain', 'tab\\there']
  const noControls = (s: string, what: string) => t.false(/[\x00-\x09\x0b-\x1f\x7f]/.test(s), `${what}: ${JSON.stringify(s)}`)
  const short = await ok(t, fsx('ls', '/n'))
  noControls(short, 'fs ls')
  t.deepEqual(short.trim().split('\n'), shown)
  const long = await ok(t, fsx('ls', '-l', '/n'))
  noControls(long, 'fs ls -l')
  t.deepEqual(table(long).map((r) => r[r.length - 1]), shown)
  for (const a of [adm('ls', '/n'), adm('ls', '-s', '/n')]) {
    const out = await ok(t, a)
    noControls(out, a.join(' '))
    t.deepEqual(table(out).slice(1).map((r) => r[0]), shown, a.join(' '))
  }
  const st = await ok(t, fsx('stat', '/n/new\nline'))
  noControls(st, 'fs stat')
  t.deepEqual(table(st).find((r) => r[0] === 'Path'), ['Path', '/n/new\\nline'])
  const put = await ok(t, fsx('put', local, '/n/esc\x1b[31mred'))
  noControls(put, 'fs put')
  t.regex(put, /-> \/n\/esc\\x1b\[31mred: 2 bytes/)
  // an error quoting the name
  const missing = await strata(fsx('stat', '/n/gone\x1b]0;title\x07'))
  t.is(missing.code, 1)
  noControls(missing.stderr, 'error')
  t.regex(missing.stderr, /^strata: META_NOT_FOUND: \/n\/gone\\x1b\]0;title\\a not found/m)
  // JSON is exact
  t.deepEqual(JSON.parse(await ok(t, fsx('ls', '--json', '/n'))).map((r: { name: string }) => r.name), [...names].sort())
  t.deepEqual(JSON.parse(await ok(t, adm('ls', '--json', '/n'))).map((r: { name: string }) => r.name), [...names].sort())
})
