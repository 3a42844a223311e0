// `strata admin` FS commands (and a few `fs` ones) as an operator runs them:
// mkdir -p with layout flags, chain table versions that do not exist,
// gc-list paging, address and timeout handling, usage errors, messages that
// name the caller's path, and what only root may do (session-prune, gc-list,
// as uid 65534 through setpriv).

import test, { type ExecutionContext } from 'ava'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { useSharedMetaCluster, type MetaCluster } from '../helpers/meta-cluster.js'
import { freePort } from '../helpers/procs.js'
import { STRATA, loneMgmtd, ok, strata, table, tempDir, until, type Run } from './helpers.js'

// longer than the gc-list test can take on a loaded machine: a busy entry renamed again
// between two listings changes its name, and the paging check failed so at 60 s
const RETRY_MS = 20 * 60_000

// One cluster for the serial tests (a cluster start is most of such a test's
// cost). They work in paths of their own; gc-list's test counts every GC entry,
// so it runs before the session-prune test, which leaves one (/lw).
// GC finds files still open for writing busy at once and renames their entries RETRY_MS ahead.
let shared: MetaCluster
useSharedMetaCluster(test, { chunkSize: 65536, stripeSize: 2, meta: { gcFileDelayMs: 0, gcRetryDelayMs: RETRY_MS } }, (m) => (shared = m))

function cluster() {
  const m = shared
  const args = ['--mgmtd-address', m.c.mgmtdAddress]
  return { m, args, adm: (...a: string[]) => ['admin', ...args, ...a], fsx: (...a: string[]) => ['fs', ...args, ...a] }
}

async function fails(t: ExecutionContext, args: string[], code: number, re: RegExp): Promise<void> {
  const r = await strata(args)
  t.is(r.code, code, `${args.join(' ')}: ${r.stderr}`)
  t.regex(r.stderr, re, args.join(' '))
}

test.serial('admin mkdir -p with layout flags, unknown chain tables and versions, 3FS mkdir -p on an existing directory, messages naming the path', async (t) => {
  t.timeout(3 * 60_000)
  const { adm, fsx } = cluster()

  // sizes alone with missing parents: the nearest existing ancestor's layout with those sizes, for every new component
  await ok(t, adm('mkdir', '-p', '--chunk-size', '64K', '--stripe-size', '1', '/lp/a/b'))
  for (const p of ['/lp', '/lp/a', '/lp/a/b']) {
    t.like(JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', p))).layout, { tableId: 1, chunkSize: 65536, stripeSize: 1 }, p)
  }
  await ok(t, adm('mkdir', '-p', '--chunk-size', '128K', '/lp/x/y'))
  t.like(JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', '/lp/x/y'))).layout, { chunkSize: 131072, stripeSize: 1 })
  await fails(t, adm('mkdir', '--chunk-size', '64K', '/nop/a'), 1, /^strata: META_NOT_FOUND: /m)

  // chain table versions that do not exist, and unknown tables: one code everywhere
  await ok(t, adm('mkdir', '/ad'))
  // a path that ends in '.' or '..' names no entry to remove or rename: refused naming the path and its role
  // (it said 'src: file name is .')
  for (const [args, role, p] of [
    [['rm', '/ad/.'], 'path', '/ad/.'],
    [['rm', '-r', '/ad/..'], 'path', '/ad/..'],
    [['mv', '/ad/.', '/ad2'], 'rename source', '/ad/.'],
    [['mv', '/ad', '/lp/..'], 'rename destination', '/lp/..'],
  ] as const) {
    await fails(t, adm(...args), 1, new RegExp(`^strata: META_INVALID_ARGUMENT: ${role} ${p.replace(/\./g, '\\.')} ends in '\\.\\.?', which names a directory, not an entry in one$`, 'm'))
  }
  await fails(t, fsx('rm', '/ad/.'), 1, /^strata: META_INVALID_ARGUMENT: path \/ad\/\. ends in '\.'/m)
  await ok(t, adm('stat', '/ad'))
  const notFound = (what: string) => new RegExp(`^strata: MGMTD_CHAIN_TABLE_NOT_FOUND: chain table ${what} not found$`, 'm')
  await fails(t, adm('create', '--chain-table-id', '1', '--chain-table-ver', '5', '--chunk-size', '64K', '--stripe-size', '1', '/ad/s3'), 1, notFound('1 version 5'))
  await fails(t, adm('create', '--chain-table-id', '1', '--chain-table-ver', '5', '--chain-list', '1', '--chunk-size', '64K', '/ad/s4'), 1, notFound('1 version 5'))
  await fails(t, adm('mkdir', '--chain-table-id', '1', '--chain-table-ver', '7', '--chunk-size', '64K', '--stripe-size', '1', '/ad/d7'), 1, notFound('1 version 7'))
  await fails(t, adm('create', '--chain-table-id', '9', '--chunk-size', '64K', '--stripe-size', '2', '/ad/f5'), 1, notFound('9'))
  await fails(t, adm('create', '--chain-table-id', '9', '--chain-list', '1', '--chunk-size', '64K', '/ad/f6'), 1, notFound('9'))
  // sizes alone that no layout allows: INVALID_ARGUMENT, as fs put and the other layout forms say (meta's META_INVALID_ARGUMENT before)
  const notPow2 = /^strata: INVALID_ARGUMENT: layout chunkSize 98304 is not a power of 2$/m
  await fails(t, adm('create', '--chunk-size', '96K', '/ad/np'), 1, notPow2)
  await fails(t, adm('mkdir', '-p', '--chunk-size', '96K', '/ad/npd/x'), 1, notPow2)
  await fails(t, fsx('put', '--chunk-size', '96K', '/etc/hostname', '/ad/npf'), 1, notPow2)
  // a chain list beyond the table or naming an index twice: refused, naming the table's size
  await fails(t, adm('create', '--chain-table-id', '1', '--chain-list', '1,70', '--chunk-size', '64K', '/ad/cl3'), 1, /^strata: META_INVALID_ARGUMENT: invalid layout: chain index 70 is beyond chain table 1 version 1, which has \d+ chains? \(indexes 1\.\.\d+\)$/m)
  await fails(t, adm('create', '--chain-table-id', '1', '--chain-list', '1,1', '--chunk-size', '64K', '/ad/cl4'), 1, /^strata: META_INVALID_ARGUMENT: invalid layout: the chain list names chain index 1 twice$/m)
  await fails(t, adm('stat', '/ad/cl3'), 1, /^strata: META_NOT_FOUND: /m)
  const dir = tempDir(t)
  const small = path.join(dir, 'small.txt')
  fs.writeFileSync(small, 'hello\n')
  await fails(t, fsx('put', '--chain-table-id', '9', '--chunk-size', '64K', '--stripe-size', '1', small, '/ad/p9'), 1, notFound('9'))
  t.deepEqual(table(await ok(t, adm('ls', '/ad'))), [['Name', 'Type', 'Inode']], 'nothing was created')
  // an existing version is kept
  await ok(t, adm('create', '--chain-table-id', '1', '--chain-table-ver', '1', '--chunk-size', '64K', '--stripe-size', '1', '/ad/v1'))
  t.like(JSON.parse(await ok(t, adm('stat', '--display-layout', '--json', '/ad/v1'))).layout, { tableId: 1, tableVersion: 1, stripeSize: 1 })

  // as 3FS admin_cli (mkdirs answers kExists even when recursive): an existing path fails; fs mkdir -p follows coreutils
  await fails(t, adm('mkdir', '-p', '/ad'), 1, /^strata: META_EXISTS: \/ad exists$/m)
  await ok(t, fsx('mkdir', '-p', '/ad'))

  // messages name the caller's path: not an inode id, not put's temporary
  await fails(t, adm('ls', '/ad/v1'), 1, /^strata: META_NOT_DIRECTORY: \/ad\/v1 is not a directory$/m)
  await fails(t, fsx('put', small, '/nodir/foo'), 1, /^strata: META_NOT_FOUND: nodir in \/nodir\/foo not found$/m)
  // a directory that is not empty is named by its path, as the other refusals name it (it said 'directory ad')
  await fails(t, adm('rm', '/ad'), 1, /^strata: META_NOT_EMPTY: directory \/ad is not empty$/m)
  await fails(t, fsx('rm', '/ad'), 1, /^strata: META_NOT_EMPTY: directory \/ad is not empty$/m)
})

test.serial('admin gc-list: more and a ... row when -l cuts the listing, -p GcDir/Name pages on, a bad -p is a usage error, RemovedAt stays', async (t) => {
  t.timeout(3 * 60_000)
  const { m, adm } = cluster()
  const c = m.client()
  await c.mkdirs('/g')
  const open: Array<{ id: bigint; session: string }> = []
  for (let i = 0; i < 5; i++) open.push({ id: (await c.create(`/g/f${i}`, { session: `s${i}` })).stat.id, session: `s${i}` })
  t.teardown(async () => {
    for (const f of open) await c.close(f.id, f.session, false).catch(() => undefined)
  })
  // removed while open for writing: GC finds them busy and renames them to a later due time
  for (let i = 0; i < 5; i++) await ok(t, adm('rm', `/g/f${i}`))
  const renamed = await until('every busy entry renamed by a retry', async () => {
    const r = JSON.parse(await ok(t, adm('gc-list', '--json')))
    return r.entries.length === 5 && r.entries.every((e: { name: string; removedAt: string }) => dueMs(e.name) - localMs(e.removedAt) > RETRY_MS / 2) && r
  })
  t.false(renamed.more)
  t.is(renamed.next, null)
  // RemovedAt is when the last link went: not in the future, unlike the due time in the name
  for (const e of renamed.entries as Array<{ name: string; removedAt: string }>) t.true(localMs(e.removedAt) <= Date.now(), `RemovedAt ${e.removedAt}`)
  t.deepEqual(JSON.parse(await ok(t, adm('gc-list', '--json'))).entries, renamed.entries, 'stable from call to call')

  const cut = JSON.parse(await ok(t, adm('gc-list', '-l', '2', '--json')))
  t.is(cut.entries.length, 2)
  t.true(cut.more)
  t.is(cut.next, `${cut.entries[1].gcDir}/${cut.entries[1].name}`)
  const text = table(await ok(t, adm('gc-list', '-l', '2')))
  t.is(text.length, 4, 'header, two rows, ...')
  t.deepEqual(text[3], ['...'])
  // page through with -p
  const names: string[] = []
  let page = cut
  for (;;) {
    names.push(...page.entries.map((e: { gcDir: string; name: string }) => `${e.gcDir}/${e.name}`))
    if (!page.more) break
    page = JSON.parse(await ok(t, adm('gc-list', '-l', '2', '-p', page.next, '--json')))
  }
  t.deepEqual(names, renamed.entries.map((e: { gcDir: string; name: string }) => `${e.gcDir}/${e.name}`), 'every entry once, in order')
  // a malformed cursor is a usage error, as dump-session's -p (it was INVALID_ARGUMENT, exit 1)
  await fails(t, adm('gc-list', '-p', 'bogus'), 2, /^strata: usage: .*bad gc-list cursor "bogus", expected GcDir\/Name/m)
  await fails(t, adm('gc-list', '-p', 'GC-Node-101.1/'), 2, /^strata: usage: .*bad gc-list cursor/m)
  await fails(t, adm('gc-list', '-p', ''), 2, /^strata: usage: .*bad gc-list cursor ""/m)
})

/** Runs `strata …args` as uid/gid 65534 with no groups (setpriv), as an unprivileged operator would. */
function asNobody(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, STRATA, ...args], { timeout: 90_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 128) : 0
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
  })
}

test.serial('admin session-prune and gc-list are root\'s; session-prune never takes a live client\'s sessions; set-perm refuses uid/gid 4294967295', async (t) => {
  t.timeout(3 * 60_000)
  const { m, adm } = cluster()
  // a live writer (it extends its mgmtd client session, as the FUSE daemon does) with a file open for writing, then unlinked
  const w = m.client()
  const f = (await w.create('/lw', { session: 'lw-1' })).stat
  t.teardown(() => w.close(f.id, 'lw-1', false).catch(() => undefined))
  await ok(t, adm('rm', '/lw'))

  const notPermitted = (what: string) => new RegExp(`^strata: META_NOT_PERMITTED: only root may ${what} \\(uid 65534\\)$`, 'm')
  const nobody = async (args: string[], re: RegExp) => {
    const r = await asNobody(args)
    t.is(r.code, 1, `${args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, re, args.join(' '))
  }
  await nobody(adm('session-prune', '--client-id', w.clientId), notPermitted('prune write sessions'))
  await nobody(adm('session-prune', '--client-id', w.clientId, '--session', 'lw-1'), notPermitted('prune write sessions'))
  await nobody(adm('gc-list'), notPermitted('list the GC directories'))
  // with nothing of a dead client to prune as well: the refusal does not depend on the cluster's state
  await nobody(adm('session-prune'), notPermitted('list write sessions'))
  await nobody(adm('dump-session'), notPermitted('list write sessions'))
  // a refusal names the directory on the path given, not by its inode (as strata fs does)
  await ok(t, adm('mkdir', '-p', '/priv/inner'))
  await ok(t, adm('set-perm', '--perm', '0700', '/priv'))
  await nobody(adm('ls', '/priv/inner'), /^strata: META_NO_PERMISSION: uid 65534 has no --x permission on directory \/priv \(/m)
  // also a relative path (taken from the root, as in 3FS), a path in an option, and either path of mv (by inode before)
  await ok(t, adm('create', '/priv/inner/f'))
  const privDir = (perm: string) => new RegExp(`^strata: META_NO_PERMISSION: uid 65534 has no ${perm} permission on directory /priv \\(`, 'm')
  await nobody(adm('ls', 'priv/inner'), privDir('--x'))
  await nobody(adm('ls', 'priv'), privDir('r--'))
  await nobody(adm('stat', 'priv/inner/f'), privDir('--x'))
  await nobody(adm('query-chunk', '--path', '/priv/inner/f', '--chunk-index', '0'), privDir('--x'))
  await ok(t, adm('create', '/mine'))
  await ok(t, adm('set-perm', '--uid', '65534', '/mine'))
  await nobody(adm('mv', '/mine', 'priv/g'), privDir('--x'))
  // root: not the sessions of a client mgmtd lists as alive, with or without --session
  const alive = new RegExp(`^strata: META_CLIENT_ALIVE: client ${w.clientId} is alive \\(mgmtd lists its client session\\)`, 'm')
  await fails(t, adm('session-prune', '--client-id', w.clientId), 1, alive)
  await fails(t, adm('session-prune', '--client-id', w.clientId, '--session', 'lw-1'), 1, alive)
  // without --client-id only dead clients are pruned: the live writer keeps its session
  t.is(JSON.parse(await ok(t, adm('session-prune', '--json'))).pruned, 0)
  t.deepEqual((await w.sessions({ inode: f.id })).map((s) => s.session), ['lw-1'])
  t.true(JSON.parse(await ok(t, adm('gc-list', '--json'))).entries.some((e: { origPath: string }) => e.origPath === '/lw'), 'root lists, the entry still waits')
  t.regex(await ok(t, adm('session-prune', '--help')), /only root \(uid 0\)\s+may prune/)
  t.regex(await ok(t, adm('gc-list', '--help')), /Only root \(uid 0\) may list/)

  // (uid_t)-1 is chown's "unchanged", never an owner
  await ok(t, adm('mkdir', '/ids'))
  await fails(t, adm('set-perm', '--uid', '4294967295', '/ids'), 1, /^strata: META_INVALID_ARGUMENT: uid 4294967295 is \(uid_t\)-1, chown's "unchanged" value, not a valid owner$/m)
  await fails(t, adm('set-perm', '--gid', '4294967295', '/ids'), 1, /^strata: META_INVALID_ARGUMENT: gid 4294967295 is \(gid_t\)-1, chown's "unchanged" value, not a valid group$/m)
  t.like(JSON.parse(await ok(t, adm('stat', '--json', '/ids'))), { uid: 0, gid: 0 })
})

/** ms of a GC entry name's µs timestamp */
function dueMs(name: string): number {
  return Number(/^[dLfS]-(\d{20})-/.exec(name)![1]) / 1000
}

/** ms of a `YYYY-MM-DD HH:MM:SS` local time (gc-list's RemovedAt) */
function localMs(s: string): number {
  return new Date(s.replace(' ', 'T')).getTime()
}

test('admin FS commands: a bad or unreachable --mgmtd-address fails at once; --timeout bounds them; session-prune --session needs --client-id; fs --mgmtd-address is parsed', async (t) => {
  t.timeout(2 * 60_000)
  const port = await freePort()
  for (const [args, code, re] of [
    [['admin', '--mgmtd-address', 'garbage', 'ls', '/'], 2, /^strata: usage: option '--mgmtd-address <addrs>' argument 'garbage' is invalid\. bad address "garbage", expected host:port$/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '30', 'ls', '/'], 1, /^strata: RPC_CONNECT_FAILED: no mgmtd accepts connections at 127\.0\.0\.1:\d+/m],
    [['fs', 'ls', '--mgmtd-address', 'garbage'], 2, /^strata: usage: option '--mgmtd-address <addrs>' argument 'garbage' is invalid\. bad address "garbage", expected host:port$/m],
    [['fs', 'ls', '--mgmtd-address', '127.0.0.1:99999'], 2, /^strata: usage: .*bad address "127\.0\.0\.1:99999", expected host:port$/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'session-prune', '--session', 'a', 'b'], 2, /^strata: usage: session-prune: --session needs --client-id/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'stat', '--inode', 'zz'], 2, /^strata: usage: stat --inode: "zz" is not an inode id/m],
    // beyond u64: as malformed as zz, refused before any request (it could not be encoded)
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'stat', '--inode', '18446744073709551616'], 2, /^strata: usage: stat --inode: "18446744073709551616" is not an inode id/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'stat', '--inode', '0x10000000000000000'], 2, /^strata: usage: stat --inode: "0x10000000000000000" is not an inode id/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'set-perm', '/x'], 2, /^strata: usage: set-perm needs at least one of/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'set-perm', '--iflags', '0x1g', '/x'], 2, /--iflags must be a non-negative integer \(decimal or 0x hex\), got "0x1g"/m],
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, 'set-perm', '--iflags', '0x100000000', '/x'], 2, /--iflags must be in \[0, 4294967295\]/m],
  ] as const) {
    await fails(t, [...args], code, re)
  }

  // a mgmtd that answers but knows no meta server: the command gives up after --timeout, not a fixed 15 s
  const { addr } = await loneMgmtd(t)
  // the budget applied is what is tested (before, a fixed 15 s retry budget ignored --timeout): the message names it
  const t0 = Date.now()
  await fails(t, ['admin', '--mgmtd-address', addr, '--timeout', '2', 'ls', '/'], 1, /^strata: RPC_CONNECT_FAILED: no meta server known.* gave up after \d+ attempts? in 2 s\)$/m)
  t.log(`--timeout 2 failed after ${Date.now() - t0} ms`)
})

/** `strata admin --mgmtd-address A …` where nothing listens at A: a value that got past parsing fails with RPC_CONNECT_FAILED, exit 1. */
async function deadAdmin(): Promise<(...a: string[]) => string[]> {
  const port = await freePort()
  return (...a: string[]) => ['admin', '--mgmtd-address', `127.0.0.1:${port}`, ...a]
}

const usage = (re: RegExp) => new RegExp(`^strata: usage: .*${re.source}`, 'm')

test('admin numbers beyond their real range, malformed or empty lists, empty paths and client ids: usage errors (exit 2) before the cluster is contacted', async (t) => {
  t.timeout(2 * 60_000)
  const adm = await deadAdmin()
  const u32 = (opt: string, min = 0) => usage(new RegExp(`${opt} must be in \\[${min}, 4294967295\\]`))
  const rows: Array<[string[], RegExp]> = [
    // ids and flag words that are u32 (as --iflags and --chain-table-id already were)
    [adm('set-perm', '--uid', '4294967296', '/x'), u32('--uid')],
    [adm('set-perm', '--gid', '4294967296', '/x'), u32('--gid')],
    [adm('mkdir', '--stripe-size', '4294967296', '/x'), u32('--stripe-size', 1)],
    [adm('create', '--stripe-size', '0', '/x'), u32('--stripe-size', 1)],
    [adm('create', '--chain-table-ver', '4294967296', '/x'), u32('--chain-table-ver')],
    [adm('query-chunk', '--path', '/x', '--chunk-index', '4294967296'), u32('--chunk-index')],
    [adm('query-chunk', '-c', '4294967296', '--chunk', '0x1-0-0'), u32('--chain-id', 1)],
    [adm('list-targets', '-c', '4294967296'), u32('--chain-id', 1)],
    [adm('update-chain', '4294967296', '1', '-m', 'add'), u32('chainId', 1)],
    [adm('offline-target', '--target-id', '1', '--node-id', '4294967296'), u32('--node-id', 1)],
    [adm('list-chains', '-t', '1', '-v', '4294967296'), u32('--version', 1)],
    [adm('init-cluster', '1', '1M', '4294967296'), u32('stripeSize', 1)],
    // chunk sizes: a layout holds a u32, so a power of two of at most 2G, and none below 4K (chunk size 1 was
    // taken: a put of a megabyte into it is a million chunk writes)
    [adm('create', '--chunk-size', '8G', '/x'), usage(/--chunk-size must be in \[4096, 2147483648\] \(4K to 2G/)],
    [adm('mkdir', '--chunk-size', '0', '/x'), usage(/--chunk-size must be in \[4096, 2147483648\]/)],
    [adm('create', '--chunk-size', '1', '/x'), usage(/--chunk-size must be in \[4096, 2147483648\] \(4K to 2G: chunk sizes are u32 powers of two, at least 4K\), got 1$/)],
    [adm('mkdir', '-p', '--chunk-size', '2K', '/x/y'), usage(/--chunk-size must be in \[4096, 2147483648\].*, got 2K$/)],
    [adm('create', '--chain-table-id', '1', '--stripe-size', '1', '--chunk-size', '512', '/x'), usage(/--chunk-size must be in \[4096, 2147483648\]/)],
    [adm('init-cluster', '1', '4G', '2'), usage(/chunkSize must be in \[4096, 2147483648\]/)],
    [adm('init-cluster', '1', '1', '2'), usage(/chunkSize must be in \[4096, 2147483648\]/)],
    [adm('create-target', '--node-id', '1', '--disk-index', '0', '--target-id', '1', '--chain-id', '1', '--chunk-size', '4G'), usage(/--chunk-size must be in \[4096, 2147483648\]/)],
    [adm('create-targets', '--node-id', '1', '--chunk-size', '1M', '1K'), usage(/--chunk-size must be in \[4096, 2147483648\].*, got 1K$/)],
    [['fs', ...adm().slice(1), 'put', '--chunk-size', '1', '/etc/hostname', '/x'], usage(/--chunk-size must be in \[4096, 2147483648\]/)],
    // chain lists: every element a chain id (or table index), none empty or dropped
    [adm('create', '--chain-list', 'abc', '--chunk-size', '64K', '/x'), usage(/--chain-list wants comma-separated chain ids .*; in "abc" element 1 is "abc"$/)],
    [adm('create', '--chain-list', '', '--chunk-size', '64K', '/x'), usage(/--chain-list .*; in "" element 1 is empty$/)],
    [adm('create', '--chain-list', '1000100001,,1000200001', '--chunk-size', '64K', '/x'), usage(/--chain-list .*; in "1000100001,,1000200001" element 2 is empty$/)],
    [adm('create', '--chain-list', '1,0', '--chunk-size', '64K', '/x'), usage(/element 2 is "0"$/)],
    [adm('dump-chunkmeta', '-c', '1,,2'), usage(/--chain-ids wants a comma-separated list .* no empty element, got "1,,2"$/)],
    [adm('create-targets', '--node-id', '1', '--disk-index', '0,'), usage(/--disk-index wants a comma-separated list .* no empty element/)],
    // permissions: octal up to 7777; a larger octal number was 'octal expected'
    [adm('set-perm', '-p', '17777', '/x'), usage(/invalid permission format: 17777 \(octal from 0 to 7777 expected\)$/)],
    [adm('mkdir', '--perm', '8', '/x'), usage(/invalid permission format: 8 \(octal from 0 to 7777 expected\)$/)],
    // chunk size lists: an empty element was dropped ('' sent no chunk size at all)
    [adm('create-targets', '--node-id', '1', '--chunk-size', '1M,,2M'), usage(/--chunk-size wants comma-separated chunk sizes \(64K, 1M …\) with no empty element, got "1M,,2M"$/)],
    [adm('create-targets', '--node-id', '1', '--chunk-size', ''), usage(/--chunk-size wants comma-separated chunk sizes .* got ""$/)],
    [adm('create-target', '--node-id', '1', '--disk-index', '0', '--target-id', '1', '--chain-id', '1', '--chunk-size', '1M,'), usage(/--chunk-size wants comma-separated chunk sizes/)],
    // empty paths and client ids name nothing
    [adm('create', ''), usage(/path is empty/)],
    [adm('mkdir', ''), usage(/path is empty/)],
    [adm('ls', ''), usage(/path is empty/)],
    [adm('mv', '', '/y'), usage(/src is empty/)],
    [adm('query-chunk', '--path', '', '--chunk-index', '0'), usage(/--path is empty/)],
    [adm('session-prune', '--client-id', ''), usage(/--client-id must be a client id, a UUID such as [0-9a-f-]{36}, got ""$/)],
    [adm('session-prune', '--client-id', 'not-a-uuid'), usage(/--client-id must be a client id, a UUID/)],
    [adm('session-prune', '--client-id', '0f8fad5b-d9cb-469f-a165-70867728950e', '--session', ''), usage(/--session ids must not be empty/)],
  ]
  for (const [args, re] of rows) await fails(t, args, 2, re)
})

test('admin options that name one thing two ways, where one would be ignored: refused together as usage errors', async (t) => {
  t.timeout(2 * 60_000)
  const adm = await deadAdmin()
  const rows: Array<[string[], RegExp]> = [
    // query-chunk --path silently ignored -c
    [adm('query-chunk', '--path', '/x', '--chunk-index', '0', '-c', '1'), usage(/query-chunk: --path\/--chunk-index and -c\/--chunk are two ways to name the chunk; -c cannot be used with --path/)],
    [adm('query-chunk', '--path', '/x', '--chunk-index', '0', '--chunk', '0x1-0-0'), usage(/--chunk cannot be used with --path/)],
    [adm('query-chunk', '-c', '1', '--chunk', '0x1-0-0', '--chunk-index', '3'), usage(/query-chunk: --chunk-index needs --path/)],
    [adm('list-targets', '--orphan', '-c', '1'), usage(/list-targets: --orphan lists the targets that belong to no chain; -c cannot be used with it/)],
    [adm('get-config', '-t', 'META', '--node-type', 'STORAGE'), usage(/get-config: -t META and --node-type STORAGE name different types/)],
    [adm('upload-chains', '-d', '--set-preferred-target-order'), usage(/upload-chains -d writes a template; --set-preferred-target-order cannot be used with it/)],
    [adm('upload-chain-table', '-d', '--desc', 'x'), usage(/upload-chain-table -d writes a template; --desc cannot be used with it/)],
  ]
  for (const [args, re] of rows) await fails(t, args, 2, re)
})

test('timer options of every group (--timeout, --grace, --wait): at most 2147483 s, what a timer holds, as a usage error; the largest works without TimeoutOverflowWarning', async (t) => {
  t.timeout(2 * 60_000)
  const port = await freePort()
  const adm = await deadAdmin()
  const dir = tempDir(t)
  // 99999999999 printed TimeoutOverflowWarning three times and the deadline became 1 ms
  const timer = (opt: string, min = 1) => usage(new RegExp(`${opt} must be in \\[${min}, 2147483\\] seconds \\(timers hold at most 2\\^31-1 ms\\), got \\d+$`))
  const rows: Array<[string[], RegExp]> = [
    [['admin', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '99999999999', 'ls', '/'], timer('--timeout')],
    [adm('list-nodes', '--timeout', '2147484'), timer('--timeout')],
    [['fs', 'ls', '/', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '2147484'], timer('--timeout')],
    [['image', 'ls', '--mgmtd-address', `127.0.0.1:${port}`, '--timeout', '2147484'], timer('--timeout')],
    [['cluster', 'up', '--dir', path.join(dir, 'c'), '--base-port', '65535', '--timeout', '2147484'], timer('--timeout')],
    [['cluster', 'start', '--dir', path.join(dir, 'c'), '--node', 'mgmtd', '--timeout', '2147484'], timer('--timeout')],
    [['cluster', 'down', '--dir', path.join(dir, 'c'), '--grace', '2147484'], timer('--grace', 0)],
    [['fs', 'umount', path.join(dir, 'mnt'), '--wait', '2147484'], timer('--wait')],
  ]
  for (const [args, re] of rows) await fails(t, args, 2, re)
  t.false(fs.existsSync(path.join(dir, 'c')), 'cluster up refused before it made anything')
  const { A } = await loneMgmtd(t)
  const r = await strata([...A, '--timeout', '2147483', 'list-nodes'])
  t.is(r.code, 0, r.stderr)
  t.notRegex(r.stderr, /TimeoutOverflowWarning/)
})

test('admin create PATH/: a path that must name a file but ends like a directory is META_IS_DIRECTORY naming the path typed', async (t) => {
  const adm = await deadAdmin()
  // EISDIR as open(2) with O_CREAT says; meta alone saw /d1/x/. and answered "path: file name is ."
  for (const p of ['/d1/x/', '/d1/x/.', '/']) {
    await fails(t, adm('create', p), 1, new RegExp(`^strata: META_IS_DIRECTORY: ${p.replace(/\./g, '\\.')}: cannot create a file there: a path ending in .* names a directory$`, 'm'))
  }
})

test('admin FS commands\' --help states each default once (ls said "directory (default /) (default: "/")")', async (t) => {
  for (const c of ['mkdir', 'create', 'ls', 'stat', 'set-perm', 'rm', 'mv', 'gc-list', 'session-prune', 'query-chunk']) {
    const help = await strata(['admin', c, '--help'])
    t.is(help.code, 0, c)
    t.notRegex(help.stdout.replace(/\s+/g, ' '), /\(default [^)]*\) \(default: /, c)
  }
})

test('strata admin --help says the filesystem commands act as the calling user (no --uid/--gid/--groups)', async (t) => {
  const help = await strata(['admin', '--help'])
  t.is(help.code, 0)
  const text = help.stdout.replace(/\s+/g, ' ')
  t.regex(text, /filesystem commands .* act as the calling user: each request carries this process's uid, gid and supplementary groups/)
  t.regex(text, /no --uid\/--gid\/--groups/)
})
