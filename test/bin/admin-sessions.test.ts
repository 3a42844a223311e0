// `strata admin list-clients` and `strata admin dump-session` as an operator
// uses them to find the client id session-prune needs: a real file client
// process (`strata fs put -` holding its file open for writing) and a FUSE
// daemon with a file open through the mount show up in both; once killed
// they leave list-clients after mgmtd's client session timeout while their
// write sessions stay in dump-session until session-prune removes them.
// Paging, filters, --output and usage errors.

import test, { type ExecutionContext } from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import { useSharedMetaCluster, type MetaCluster } from '../helpers/meta-cluster.js'
import { freePort } from '../helpers/procs.js'
import { fuseSkipReason, mountFuse } from '../fs/fuse/helpers.js'
import { STRATA, ok, strata, table, tempDir, until } from './helpers.js'
import type { ClientRow } from '../../fs/admin/client-sessions.js'

const LIST_CLIENTS_HEADER = ['ClientId', 'ClientStart', 'SessionStart', 'LastExtend', 'ConfigVersion', 'Hostname', 'Description', 'Tags', 'ReleaseVersion']
const DUMP_SESSION_HEADER = ['InodeId', 'ClientId', 'SessionId', 'Timestamp']

/** list-clients --json rows: the library's rows as JSON */
type ClientJson = ClientRow
interface SessionJson {
  inodeId: string
  clientId: string
  sessionId: string
  timestamp: number
}

// One cluster for the serial tests (a cluster start is most of such a test's
// cost). They count every write session, so each closes or prunes the ones it
// opened before the next starts.
// No automatic pruning of dead clients' sessions: the tests show them and prune them by hand.
let shared: MetaCluster
useSharedMetaCluster(test, { chunkSize: 65536, stripeSize: 1, meta: { sessionScanIntervalMs: 600_000 } }, (m) => (shared = m))

function cluster(): { m: MetaCluster; adm: (...a: string[]) => string[]; fsx: (...a: string[]) => string[] } {
  const m = shared
  const args = ['--mgmtd-address', m.c.mgmtdAddress]
  return { m, adm: (...a: string[]) => ['admin', ...args, ...a], fsx: (...a: string[]) => ['fs', ...args, ...a] }
}

async function clients(t: ExecutionContext, adm: (...a: string[]) => string[]): Promise<ClientJson[]> {
  return (JSON.parse(await ok(t, adm('list-clients', '--json'))) as { clients: ClientJson[] }).clients
}

async function sessions(t: ExecutionContext, adm: (...a: string[]) => string[], ...a: string[]): Promise<{ sessions: SessionJson[]; more: boolean; next: string | null }> {
  return JSON.parse(await ok(t, adm('dump-session', '--json', ...a)))
}

async function fails(t: ExecutionContext, args: string[], code: number, re: RegExp): Promise<void> {
  const r = await strata(args)
  t.is(r.code, code, `${args.join(' ')}: ${r.stderr}`)
  t.regex(r.stderr, re, args.join(' '))
  t.notRegex(r.stderr, /^\s+at /m, 'no stack trace')
}

/** `strata fs put - DFS_PATH` with stdin kept open: a file client process holding a write session. */
function heldPut(t: ExecutionContext, fsx: (...a: string[]) => string[], dfsPath: string): ChildProcess {
  const child = spawn(process.execPath, [STRATA, ...fsx('put', '-', dfsPath)], { stdio: ['pipe', 'ignore', 'ignore'] })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  child.stdin!.on('error', () => undefined)
  child.stdin!.write('some bytes\n')
  return child
}

test.serial('list-clients and dump-session: a file client process holding a file open shows up in both; killed, it leaves list-clients and session-prune --client-id removes its session', async (t) => {
  t.timeout(4 * 60_000)
  const { m, adm, fsx } = cluster()
  await ok(t, adm('mkdir', '/w'))

  const put = heldPut(t, fsx, '/w/held')
  const me = await until(
    'the put process in list-clients',
    async () => (await clients(t, adm)).find((c) => c.description === `strata file client pid ${put.pid}`),
    30_000,
  )
  t.is(me.type, 'CLIENT')
  t.is(me.pid, put.pid!)
  t.is(me.releaseVersion, '0.1.0')
  t.true(typeof me.clientStart === 'number' && me.clientStart <= me.sessionStart + 1000, 'ClientStart reported')
  t.true(me.lastExtend >= me.sessionStart)

  // text: 3FS's columns; the client's row carries its id, host, description and release
  const text = await ok(t, adm('list-clients'))
  const lines = text.split('\n').filter(Boolean)
  t.deepEqual(lines[0]!.trim().split(/\s+/), LIST_CLIENTS_HEADER)
  const line = lines.find((l) => l.startsWith(me.clientId))
  t.truthy(line, text)
  t.regex(line!, new RegExp(`^${me.clientId}\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+0\\s+\\S+\\s+strata file client pid ${put.pid}\\s+\\[\\]\\s+0\\.1\\.0$`))

  // its write session: on the put's temporary file
  const mine = await until('the put session in dump-session', async () => {
    const r = await sessions(t, adm, '--client-id', me.clientId)
    return r.sessions.length === 1 ? r.sessions[0] : undefined
  })
  const tmpName = table(await ok(t, adm('ls', '/w'))).find((r) => r[0]!.startsWith('.held.strata-put-'))
  t.truthy(tmpName, 'the put writes a temporary')
  t.is(mine.inodeId, tmpName![2], 'the session is on the temporary file')
  t.true(Math.abs(mine.timestamp / 1000 - Date.now()) < 60_000, 'timestamp in µs')
  const dumped = table(await ok(t, adm('dump-session', '--client-id', me.clientId)))
  t.deepEqual(dumped[0], DUMP_SESSION_HEADER)
  t.deepEqual(dumped.slice(1).map((r) => r.slice(0, 3)), [[mine.inodeId, me.clientId, mine.sessionId]])
  t.deepEqual((await sessions(t, adm, '--inode', mine.inodeId)).sessions, [mine])
  t.deepEqual((await sessions(t, adm, '--inode', String(BigInt(mine.inodeId)))).sessions, [mine], 'decimal inode')

  // more writers (an in-test client that stays alive): paging with -l and -p over all of them
  const c = m.client()
  await c.mkdirs('/p')
  const open: bigint[] = []
  t.teardown(async () => {
    for (const [i, id] of open.entries()) await c.close(id, `s${i}`, false).catch(() => undefined)
  })
  for (let i = 0; i < 5; i++) open.push((await c.create(`/p/f${i}`, { session: `s${i}` })).stat.id)
  const all = (await sessions(t, adm)).sessions
  t.is(all.length, 6)
  t.is((await sessions(t, adm, '--client-id', c.clientId)).sessions.length, 5)
  const seen: SessionJson[] = []
  let prev: string | null = null
  for (let pages = 0; pages < 10; pages++) {
    const r: { sessions: SessionJson[]; more: boolean; next: string | null } = await sessions(t, adm, '-l', '4', ...(prev ? ['-p', prev] : []))
    seen.push(...r.sessions)
    t.true(r.sessions.length <= 4)
    if (!r.more) {
      t.is(r.next, null)
      break
    }
    const last = r.sessions[r.sessions.length - 1]!
    t.is(r.next, `${last.inodeId}/${last.sessionId}`)
    prev = r.next
  }
  t.deepEqual(seen, all, 'the pages list every session once, in order')
  const cut = await ok(t, adm('dump-session', '-l', '2'))
  const cutRows = table(cut)
  t.is(cutRows.length, 4, cut)
  t.deepEqual(cutRows[3], ['...'])
  // a page that ends exactly at the last session says nothing more follows
  t.false((await sessions(t, adm, '-l', '6')).more)
  t.false((await sessions(t, adm, '--client-id', c.clientId, '-l', '5')).more)
  t.true((await sessions(t, adm, '--client-id', c.clientId, '-l', '4')).more)

  // --output: JSON lines into a new file; an existing one is refused
  const dir = tempDir(t)
  const outFile = path.join(dir, 'sessions.jsonl')
  t.regex(await ok(t, adm('dump-session', '--output', outFile)), /^Dumped 6 sessions to /)
  t.deepEqual(fs.readFileSync(outFile, 'utf8').trim().split('\n').map((l) => JSON.parse(l)), all)
  await fails(t, adm('dump-session', '--output', outFile), 2, /^strata: usage: dump-session: output file .* already exists$/m)

  // the put process dies: mgmtd drops its client session after the timeout (2 s in tests) …
  put.kill('SIGKILL')
  await until('the killed client gone from list-clients', async () => !(await clients(t, adm)).some((x) => x.clientId === me.clientId), 30_000)
  t.true((await clients(t, adm)).some((x) => x.clientId === c.clientId), 'the live client stays')
  // … its write session stays until pruned, and dump-session shows whose it is
  t.deepEqual((await sessions(t, adm, '--client-id', me.clientId)).sessions, [mine])
  t.regex(await ok(t, adm('session-prune', '--client-id', me.clientId)), /num sessions\s+1/)
  t.deepEqual((await sessions(t, adm, '--client-id', me.clientId)).sessions, [])
  t.deepEqual(table(await ok(t, adm('dump-session', '--client-id', me.clientId))), [DUMP_SESSION_HEADER])
  t.is((await sessions(t, adm)).sessions.length, 5)
})

test.serial('list-clients and dump-session: a FUSE daemon with a file open for writing; killed, its client session expires and session-prune removes the orphaned write session', async (t) => {
  const skip = fuseSkipReason()
  if (skip) {
    t.log(`skipped: ${skip}`)
    t.pass()
    return
  }
  t.timeout(4 * 60_000)
  const { m, adm } = cluster()
  const mnt = await mountFuse(t, m)
  const fuse = await until('the FUSE daemon in list-clients', async () => (await clients(t, adm)).find((c) => c.pid === mnt.pid), 30_000)
  t.is(fuse.type, 'FUSE')
  t.is(fuse.description, `strata fuse ${mnt.mnt} pid ${mnt.pid}`)

  // a shell holds a file open for writing through the mount
  const holder = spawn('bash', ['-c', 'exec 3>"$1/held"; echo data >&3; exec sleep 600', 'bash', mnt.mnt], { stdio: 'ignore' })
  t.teardown(() => {
    holder.kill('SIGKILL')
  })
  const mine = await until('the FUSE write session', async () => {
    const r = await sessions(t, adm, '--client-id', fuse.clientId)
    return r.sessions.length === 1 ? r.sessions[0] : undefined
  })
  const st = JSON.parse(await ok(t, adm('stat', '--json', '/held'))) as { inode: string }
  t.is(mine.inodeId, st.inode, 'the session is on /held')

  // the daemon dies with the file open: its client session expires, its write session stays
  await mnt.kill()
  holder.kill('SIGKILL')
  await until('the killed FUSE daemon gone from list-clients', async () => !(await clients(t, adm)).some((c) => c.clientId === fuse.clientId), 30_000)
  t.deepEqual((await sessions(t, adm, '--inode', mine.inodeId)).sessions, [mine])
  // session-prune without --client-id takes every client list-clients no longer shows
  t.regex(await ok(t, adm('session-prune')), /num sessions\s+1/)
  t.deepEqual((await sessions(t, adm)).sessions, [])
})

test('list-clients and dump-session: usage errors exit 2, an unreachable mgmtd exits 1, never a stack trace', async (t) => {
  const port = await freePort()
  const A = ['admin', '--mgmtd-address', `127.0.0.1:${port}`]
  await fails(t, [...A, 'dump-session', '--inode', 'zz'], 2, /^strata: usage: .*"zz" is not an inode id/m)
  await fails(t, [...A, 'dump-session', '--inode', '0x1ffffffffffffffff'], 2, /^strata: usage: .*is not an inode id/m)
  await fails(t, [...A, 'dump-session', '-p', 'garbage'], 2, /^strata: usage: .*bad dump-session cursor "garbage", expected InodeId\/SessionId/m)
  await fails(t, [...A, 'dump-session', '-l', '0'], 2, /^strata: usage: /m)
  const S = '0f8fad5b-d9cb-469f-a165-70867728950e'
  await fails(t, [...A, 'dump-session', '--inode', '0x10', '-p', `0x11/${S}`], 2, /^strata: usage: dump-session: -p names a session of another inode than --inode$/m)
  // one session id after the inode: nothing more, nothing less
  for (const bad of [`0x11/${S}/extra`, '0x11/', `0x11/a b`]) await fails(t, [...A, 'dump-session', '-p', bad], 2, /^strata: usage: .*bad dump-session cursor/m)
  // a client id is a UUID; '' used to turn the filter off and list every session
  for (const bad of ['notuuid', '']) await fails(t, [...A, 'dump-session', '--client-id', bad], 2, /^strata: usage: .*--client-id must be a client id, a UUID/m)
  // --output: an empty name, and anything already there (a dangling symlink included) are usage errors
  const dir = tempDir(t)
  fs.symlinkSync(path.join(dir, 'nowhere'), path.join(dir, 'dangling'))
  await fails(t, [...A, 'dump-session', '--output', ''], 2, /^strata: usage: .*--output is empty \(a file path\)$/m)
  await fails(t, [...A, 'dump-session', '--output', path.join(dir, 'dangling')], 2, /^strata: usage: dump-session: output file .* already exists$/m)
  t.false(fs.existsSync(path.join(dir, 'nowhere')))
  await fails(t, [...A, 'list-clients', '--bogus'], 2, /^strata: usage: /m)
  await fails(t, [...A, 'list-clients'], 1, /^strata: RPC_CONNECT_FAILED: /m)
  await fails(t, [...A, 'dump-session'], 1, /^strata: RPC_CONNECT_FAILED: /m)
  const help = await strata(['admin', 'dump-session', '--help'])
  t.is(help.code, 0)
  t.regex(help.stdout, /--client-id/)
  t.regex(help.stdout, /session-prune --client-id/)
  t.regex((await strata(['admin', 'list-clients', '--help'])).stdout, /ClientId\s+ClientStart\s+SessionStart\s+LastExtend\s+ConfigVersion\s+Hostname\s+Description\s+Tags\s+ReleaseVersion/)
})
