// `strata fs` against local files that are not plain regular files (pipes, FIFOs, /dev/stdout,
// symlinks, missing directories), get's atomic replacement of a local file, DFS symlinks at the
// end of put's target and ls's path, identities out of the u32 range, and errors that name the
// user's paths (child processes against a real cluster).

import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { spawn, spawnSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import type { ExecutionContext } from 'ava'
import { startMetaCluster, useSharedMetaCluster, type MetaCluster } from '../helpers/meta-cluster.js'
import { until } from '../helpers/procs.js'
import { FileSystem } from '../../fs/client/index.js'
import { fuseUsable } from '../../fs/fuse/cluster-role.js'
import { STRATA, ok, strata, tempDir } from './helpers.js'

const CLUSTER = { chunkSize: 65536, stripeSize: 2 }

// One cluster for the serial tests that leave its processes alone (a cluster
// start is most of such a test's cost); each starts from an empty root.
let shared: MetaCluster
useSharedMetaCluster(test, CLUSTER, (m) => (shared = m))

async function cluster(t: ExecutionContext): Promise<{ m: MetaCluster; args: string[]; dir: string; fsys: FileSystem }> {
  await shared.emptyRoot()
  return withClient(t, shared)
}

/** A cluster of the test's own, for a test that kills its processes. */
async function ownCluster(t: ExecutionContext): Promise<{ m: MetaCluster; args: string[]; dir: string; fsys: FileSystem }> {
  return withClient(t, await startMetaCluster(t, CLUSTER))
}

function withClient(t: ExecutionContext, m: MetaCluster): { m: MetaCluster; args: string[]; dir: string; fsys: FileSystem } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fs-local-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const fsys = new FileSystem({ mgmtdAddresses: [m.c.mgmtdAddress], metaAddresses: [...m.metaAddresses] })
  t.teardown(() => fsys.shutdown())
  return { m, dir, fsys, args: ['--mgmtd-address', m.c.mgmtdAddress] }
}

/** Runs strata with its stdout a pipe and collects every byte of it. */
function run(args: string[], opts: { input?: Buffer } = {}): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [STRATA, ...args], { stdio: ['pipe', 'pipe', 'pipe'] })
    const parts: Buffer[] = []
    let stderr = ''
    c.stdout.on('data', (d: Buffer) => parts.push(d))
    c.stderr.on('data', (d) => (stderr += d))
    c.once('error', reject)
    c.once('close', (code) => resolve({ code, stdout: Buffer.concat(parts), stderr }))
    c.stdin.end(opts.input ?? Buffer.alloc(0))
  })
}

const leftovers = (d: string) => fs.readdirSync(d).filter((n) => n.includes('.strata-get-'))

test('--uid, --gid and --groups beyond 4294967294, and malformed or too long --groups lists, are usage errors; fs mount with one creates nothing', async (t) => {
  const dir = tempDir(t)
  for (const id of [['--uid', '99999999999'], ['--uid', '4294967295'], ['--gid', '4294967296'], ['--groups', '1,4294967295'], ['--uid', '-1']]) {
    const r = await strata(['fs', ...id, '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
    t.is(r.code, 2, id.join(' '))
    t.regex(r.stderr, /^strata: usage: .*must be in \[0, 4294967294\]|^strata: usage: /m, id.join(' '))
  }
  // a malformed --groups list is refused, not read as a shorter one ('1,,2' was 1 and 2, '' no groups)
  const groupsUsage = (v: string) => new RegExp(`^strata: usage: option '--groups <gids>' argument '${v}' is invalid\\. --groups wants a comma-separated list of integers in \\[0, 4294967294\\] with no empty element, got "${v}"$`, 'm')
  for (const v of ['1,,2', '1,', ',', '', ' ']) {
    const r = await strata(['fs', '--groups', v, '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
    t.is(r.code, 2, v)
    t.regex(r.stderr, groupsUsage(v), v)
  }
  for (const v of ['x', '1,x', '-1', '1.5', '0x10', '4294967295']) {
    const r = await strata(['fs', '--groups', v, '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
    t.is(r.code, 2, v)
    t.regex(r.stderr, /^strata: usage: option '--groups <gids>' argument .* is invalid\. --groups must be (a non-negative integer|in \[0, 4294967294\])/m, v)
  }
  // more than NGROUPS_MAX (65536) in all, over repeated --groups (one argument cannot hold that many)
  const half = new Array(32769).fill('7').join(',')
  const many = await strata(['fs', '--groups', half, '--groups', half, '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
  t.is(many.code, 2)
  t.regex(many.stderr, /^strata: usage: .*--groups lists 65538 groups; the kernel allows at most 65536 \(NGROUPS_MAX\)$/m)
  const highest = await strata(['fs', '--uid', '4294967294', '--gid', '4294967294', '--groups', '4294967294', '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
  t.is(highest.code, 1, highest.stderr)
  t.regex(highest.stderr, /^strata: RPC_CONNECT_FAILED: /m)
  const mnt = path.join(dir, 'a', 'mnt')
  const r = await strata(['fs', '--uid', '99999999999', 'mount', mnt, '--cluster', dir])
  t.is(r.code, 2, r.stderr)
  t.false(fs.existsSync(path.join(dir, 'a')))
  const g = await strata(['fs', '--groups', '1,,2', 'mount', mnt, '--cluster', dir])
  t.is(g.code, 2, g.stderr)
  t.false(fs.existsSync(path.join(dir, 'a')))
  // options of strata fs that fs mount has no use for were dropped silently: with --mgmtd-address
  // it mounted whatever cluster $STRATA_CLUSTER or ~/.strata/cluster held
  for (const [flag, value] of [['--mgmtd-address', '127.0.0.1:1'], ['--meta-address', '127.0.0.1:1'], ['--timeout', '5']] as const) {
    const e = await strata(['fs', flag, value, 'mount', mnt], { env: { ...process.env, STRATA_CLUSTER: dir } })
    t.is(e.code, 2, e.stderr)
    t.regex(e.stderr, new RegExp(`^strata: usage: fs mount does not take ${flag} \\(`, 'm'))
  }
  t.false(fs.existsSync(path.join(dir, 'a')))
  // an empty path, local or in the DFS, is a usage error before anything is contacted
  // (ls, stat, rm and mkdir said META_INVALID_ARGUMENT, exit 1, rm and mkdir after acting on the
  // other paths; mount and umount took '' for the working directory)
  const cases = [['put', '/etc/hostname', ''], ['put', '', '/x'], ['get', '/x', ''], ['get', '', 'out'], ['ls', ''], ['stat', ''], ['rm', '/x', ''], ['mkdir', '-p', '/x', ''], ['mount', ''], ['umount', '']]
  for (const args of cases) {
    const e = await strata(['fs', '--mgmtd-address', '127.0.0.1:1', ...args], { cwd: dir })
    t.is(e.code, 2, `${args.join(' ')}: ${e.stderr}`)
    t.regex(e.stderr, /^strata: usage: .*is empty/m, args.join(' '))
  }
  t.deepEqual(fs.readdirSync(dir), [], 'nothing was made in the working directory')
  // put's --stripe-size is a u32, as admin create's (it was INVALID_ARGUMENT, exit 1, after reaching the cluster)
  const stripe = await strata(['fs', '--mgmtd-address', '127.0.0.1:1', 'put', '/etc/hostname', '/x', '--stripe-size', '4294967296'])
  t.is(stripe.code, 2, stripe.stderr)
  t.regex(stripe.stderr, /^strata: usage: .*--stripe-size must be in \[1, 4294967295\]/m)
})

test.serial('fs get: pipes, FIFOs and /dev/stdout are written in order; a regular file is replaced atomically and survives a failed or interrupted get', async (t) => {
  t.timeout(4 * 60_000)
  const { m, args, dir } = await ownCluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const data = randomBytes(300_000)
  fs.writeFileSync(path.join(dir, 'src'), data)
  fs.chmodSync(path.join(dir, 'src'), 0o640)
  await ok(t, fsx('put', path.join(dir, 'src'), '/m4'))

  // /dev/stdout when stdout is a pipe: every byte, and no summary line mixed into the data
  const viaDev = await run(fsx('get', '/m4', '/dev/stdout'))
  t.is(viaDev.code, 0, viaDev.stderr)
  t.true(viaDev.stdout.equals(data), `${viaDev.stdout.length} bytes`)
  // a FIFO with a reader
  const fifo = path.join(dir, 'fifo')
  spawnSync('mkfifo', [fifo])
  const reader = spawn('cat', [fifo], { stdio: ['ignore', 'pipe', 'inherit'] })
  const readBack: Buffer[] = []
  reader.stdout.on('data', (d: Buffer) => readBack.push(d))
  const readerDone = new Promise((r) => reader.once('close', r))
  const toFifo = await strata(fsx('get', '/m4', fifo))
  t.is(toFifo.code, 0, toFifo.stderr)
  await readerDone
  t.true(Buffer.concat(readBack).equals(data))
  t.true(fs.statSync(fifo).isFIFO(), 'the FIFO is still a FIFO')
  // a reader that goes away: the local write error is LOCAL_IO_ERROR (not retryable IO_ERROR)
  const shortReader = spawn('head', ['-c', '10', fifo], { stdio: ['ignore', 'ignore', 'inherit'] })
  const broken = await strata(fsx('get', '/m4', fifo))
  await new Promise((r) => (shortReader.exitCode !== null ? r(null) : shortReader.once('close', r)))
  t.is(broken.code, 1)
  t.regex(broken.stderr, /^strata: LOCAL_IO_ERROR: EPIPE/m)
  // a character device
  await ok(t, fsx('get', '/m4', '/dev/null'))

  // a new file: the DFS file's permission less the umask, as cp does
  const fresh = path.join(dir, 'fresh')
  await ok(t, fsx('get', '/m4', fresh))
  t.true(fs.readFileSync(fresh).equals(data))
  t.is(fs.statSync(fresh).mode & 0o777, 0o640 & ~process.umask())
  // an existing file, through a symlink: the file is replaced, keeps its permission, the link stays
  const keep = path.join(dir, 'keep')
  fs.writeFileSync(keep, 'precious\n')
  fs.chmodSync(keep, 0o604)
  fs.symlinkSync('keep', path.join(dir, 'lk'))
  await ok(t, fsx('get', '/m4', path.join(dir, 'lk')))
  t.true(fs.lstatSync(path.join(dir, 'lk')).isSymbolicLink())
  t.true(fs.readFileSync(keep).equals(data))
  t.is(fs.statSync(keep).mode & 0o7777, 0o604)
  // a missing local directory is named as such
  for (const p of [path.join(dir, 'nodir') + '/', path.join(dir, 'nodir', 'x')]) {
    const r = await strata(fsx('get', '/m4', p))
    t.is(r.code, 1, p)
    t.regex(r.stderr, new RegExp(`^strata: NOT_FOUND: local directory ${path.join(dir, 'nodir')}/? does not exist`, 'm'), p)
  }
  t.false(fs.existsSync(path.join(dir, 'nodir')))
  t.deepEqual(leftovers(dir), [])

  // every storage node down: the destination keeps its data, a new one is not created
  for (const n of ['storage-1', 'storage-2', 'storage-3']) await m.c.kill(n)
  fs.writeFileSync(keep, 'precious\n')
  const failed = await strata(fsx('--timeout', '2', 'get', '/m4', keep))
  t.is(failed.code, 1, failed.stderr)
  t.is(fs.readFileSync(keep, 'utf8'), 'precious\n')
  const failedNew = await strata(fsx('--timeout', '2', 'get', '/m4', path.join(dir, 'never')))
  t.is(failedNew.code, 1)
  t.false(fs.existsSync(path.join(dir, 'never')))
  t.deepEqual(leftovers(dir), [])
  // Ctrl-C while the data does not come: exit 130, the temporary goes, the file stays
  const child = spawn(process.execPath, [STRATA, ...fsx('--timeout', '60', 'get', '/m4', keep)], { stdio: ['ignore', 'ignore', 'pipe'] })
  t.teardown(() => void child.kill('SIGKILL'))
  let stderr = ''
  child.stderr.on('data', (d) => (stderr += d))
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  const deadline = Date.now() + 30_000
  while (leftovers(dir).length === 0 && Date.now() < deadline) await sleep(50)
  t.is(leftovers(dir).length, 1, 'the copy goes to a temporary beside the file')
  child.kill('SIGINT')
  t.is(await exited, 130, stderr)
  t.regex(stderr, /^strata: CANCELLED: fs get interrupted by SIGINT/m)
  t.is(fs.readFileSync(keep, 'utf8'), 'precious\n')
  t.deepEqual(leftovers(dir), [])
})

test.serial('fs put reads FIFOs and pipes in order; symlink targets (dangling, relative, absolute, chains) are followed; errors name the user\'s paths; mkdir /; ls of a symlink to a directory', async (t) => {
  t.timeout(4 * 60_000)
  const { args, dir, fsys } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  const get = async (p: string) => (await run(fsx('get', p, '-'))).stdout
  const data = randomBytes(200_000)

  // a FIFO with a writer, and a pipe as /dev/stdin
  const fifo = path.join(dir, 'fifo')
  spawnSync('mkfifo', [fifo])
  const writer = spawn(process.execPath, ['-e', `require('fs').writeFileSync(${JSON.stringify(fifo)}, Buffer.alloc(1000, 7))`], { stdio: 'inherit' })
  const fromFifo = JSON.parse(await ok(t, fsx('put', '--json', fifo, '/ff')))
  await new Promise((r) => (writer.exitCode !== null ? r(null) : writer.once('close', r)))
  t.is(fromFifo.bytes, 1000)
  t.true((await get('/ff')).equals(Buffer.alloc(1000, 7)))
  t.like(JSON.parse(await ok(t, fsx('stat', '--json', '/ff'))), { perm: '0644' })
  const viaStdin = await run(fsx('put', '/dev/stdin', '/fromstdin'), { input: data })
  t.is(viaStdin.code, 0, viaStdin.stderr)
  t.true((await get('/fromstdin')).equals(data))
  const isDir = await strata(fsx('put', dir, '/d'))
  t.is(isDir.code, 1)
  t.regex(isDir.stderr, /^strata: INVALID_ARGUMENT: .* is a directory/m)

  // a dangling symlink: the file it names is created, the link stays a link
  fs.writeFileSync(path.join(dir, 'v'), data)
  await ok(t, fsx('mkdir', '-p', '/pd/sub', '/pd/abs'))
  await fsys.symlink('sub/target', '/pd/dl')
  await fsys.symlink('/pd/abs/t2', '/pd/dla')
  await fsys.symlink('dl', '/pd/chain')
  await fsys.symlink('loop', '/pd/loop')
  for (const [link, file] of [
    ['/pd/dl', '/pd/sub/target'],
    ['/pd/dla', '/pd/abs/t2'],
  ]) {
    const r = JSON.parse(await ok(t, fsx('put', '--json', path.join(dir, 'v'), link)))
    t.is(r.path, file, link)
    t.is(JSON.parse(await ok(t, fsx('stat', '--json', link))).type, 'Symlink', link)
    t.true((await get(file)).equals(data), link)
  }
  // a chain of links to an existing file replaces that file
  fs.writeFileSync(path.join(dir, 'w'), 'new\n')
  const viaChain = JSON.parse(await ok(t, fsx('put', '--json', path.join(dir, 'w'), '/pd/chain')))
  t.is(viaChain.path, '/pd/sub/target')
  t.is((await get('/pd/sub/target')).toString(), 'new\n')
  t.is(JSON.parse(await ok(t, fsx('stat', '--json', '/pd/chain'))).type, 'Symlink')
  const loop = await strata(fsx('put', path.join(dir, 'w'), '/pd/loop'))
  t.is(loop.code, 1)
  t.regex(loop.stderr, /^strata: META_TOO_MANY_SYMLINKS: /m)
  t.deepEqual((await ok(t, fsx('ls', '/pd'))).trim().split('\n'), ['abs', 'chain', 'dl', 'dla', 'loop', 'sub'])

  // replacing another user's file in a sticky directory: the error names the target, not a move
  await ok(t, fsx('mkdir', '--mode', '1777', '/sticky'))
  await ok(t, fsx('put', path.join(dir, 'w'), '/sticky/newbyn'))
  const as1 = (...a: string[]) => fsx('--uid', '1', '--gid', '1', ...a)
  const sticky = await strata(as1('put', path.join(dir, 'w'), '/sticky/newbyn'))
  t.is(sticky.code, 1)
  t.regex(sticky.stderr, /^strata: META_NOT_PERMITTED: cannot replace \/sticky\/newbyn: sticky directory owned by another user$/m)
  t.deepEqual((await ok(t, fsx('ls', '/sticky'))).trim().split('\n'), ['newbyn'])
  // refusals name directories by the user's path, not by inode id
  await ok(t, fsx('mkdir', '--mode', '0700', '/priv'))
  await ok(t, fsx('mkdir', '/priv/sub'))
  for (const [a, re] of [
    [as1('put', path.join(dir, 'w'), '/x'), /^strata: META_NO_PERMISSION: uid 1 has no -w- permission on directory \/ \(/m],
    [as1('ls', '/priv'), /^strata: META_NO_PERMISSION: uid 1 has no r-- permission on directory \/priv \(/m],
    [as1('stat', '/priv/sub'), /^strata: META_NO_PERMISSION: uid 1 has no --x permission on directory \/priv \(/m],
    [as1('mkdir', '/priv/a', '/pd/b'), /^strata: META_NO_PERMISSION: uid 1 has no -w- permission on directory \/pd \(/m],
  ] as const) {
    const r = await strata([...a])
    t.is(r.code, 1, a.join(' '))
    t.regex(r.stderr, re, a.join(' '))
    t.notRegex(r.stderr, /directory 0x/, a.join(' '))
  }

  // mkdir of the root: -p accepts it, plain mkdir says it exists
  await ok(t, fsx('mkdir', '-p', '/'))
  const root = await strata(fsx('mkdir', '/'))
  t.is(root.code, 1)
  t.regex(root.stderr, /^strata: META_EXISTS: /m)

  // ls of a symlink to a directory: its entries (coreutils), the link itself with -l, the entries with -l LINK/ or -L
  await fsys.symlink('sub', '/pd/ldd')
  t.deepEqual((await ok(t, fsx('ls', '/pd/ldd'))).trim().split('\n'), ['target'])
  t.regex(await ok(t, fsx('ls', '-l', '/pd/ldd')), /^l\S+ .* ldd -> sub$/m)
  t.regex(await ok(t, fsx('ls', '-l', '/pd/ldd/')), /^-\S+ .* target$/m)
  t.regex(await ok(t, fsx('ls', '-l', '-L', '/pd/ldd')), /^-\S+ .* target$/m)
  t.deepEqual(JSON.parse(await ok(t, fsx('ls', '--json', '/pd/ldd'))).map((r: { name: string }) => r.name), ['target'])
  // -L -l shows what the entries point to; a dangling link given alone is shown as the link
  t.regex(await ok(t, fsx('ls', '-l', '-L', '/pd')), /^d\S+ .* ldd$/m)
  await fsys.symlink('nowhere', '/pd/gone')
  t.is((await ok(t, fsx('ls', '/pd/gone'))).trim(), 'gone')
})

const fuseTest = fuseUsable() && process.getuid?.() === 0 ? test.serial : test.skip

fuseTest('fs mount that does not come up removes the mount point directories it created', async (t) => {
  t.timeout(4 * 60_000)
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--no-sandbox', '--no-mount', '-q'])
  // no meta server: the daemon makes the mount point, then waits for meta and never mounts
  for (const n of ['meta-1', 'meta-2']) await ok(t, ['cluster', 'kill', '--node', n, '--dir', dir])
  const existing = path.join(base, 'existing')
  fs.mkdirSync(existing)
  for (const mnt of [path.join(base, 'made', 'deep', 'mnt'), existing]) {
    const r = await strata(['fs', 'mount', mnt, '--cluster', dir, '--wait-timeout', '3'])
    t.is(r.code, 1, r.stderr)
    t.regex(r.stderr, /^strata: (TIMEOUT|INTERNAL): /m)
  }
  t.false(fs.existsSync(path.join(base, 'made')), 'the directories it made are gone')
  t.true(fs.statSync(existing).isDirectory(), 'a directory that was there stays')
})

/** Whether process `pid` holds `file` open (a FIFO it waits on). */
function holds(pid: number, file: string): boolean {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === file
      } catch {
        return false
      }
    })
  } catch {
    return false
  }
}

test.serial('Ctrl-C of fs put from a FIFO whose writer is idle, and of fs get into a FIFO whose reader stopped reading: CANCELLED and exit 130', async (t) => {
  t.timeout(4 * 60_000)
  const { args, dir } = await cluster(t)
  const fsx = (...a: string[]) => ['fs', ...args, ...a]
  await ok(t, fsx('put', '-', '/big'), { input: 'x'.repeat(1 << 20) })
  // before, both printed CANCELLED and then never exited: process.exit waits for the libuv pool
  // thread that was blocked reading (writing) the FIFO
  for (const [what, cmd] of [['put', (f: string) => fsx('put', f, '/from-fifo')], ['get', (f: string) => fsx('get', '/big', f)]] as const) {
    const fifo = path.join(dir, `fifo-${what}`)
    spawnSync('mkfifo', [fifo])
    // the other end, held open by this process and never used
    const other = fs.openSync(fifo, fs.constants.O_RDWR)
    t.teardown(() => fs.closeSync(other))
    const c = spawn(process.execPath, [STRATA, ...cmd(fifo)], { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    c.stderr.on('data', (d) => (stderr += d))
    const exited = new Promise<number | null>((r) => c.once('exit', (code) => r(code)))
    t.teardown(() => {
      if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
    })
    await until(() => holds(c.pid!, fifo), 60_000, `fs ${what} opened the FIFO`)
    if (what === 'get') await sleep(500) // let it fill the pipe and block in a write
    c.kill('SIGINT')
    const code = await Promise.race([exited, sleep(60_000).then(() => 'still running after 60 s')])
    t.is(code, 130, `fs ${what}: ${stderr}`)
    t.regex(stderr, new RegExp(`^strata: CANCELLED: fs ${what} interrupted by SIGINT`, 'm'))
  }
  t.deepEqual((await ok(t, fsx('ls', '/'))).trim().split('\n'), ['big'], 'no put temporary or target left')
})

test.serial('fs get over a file the caller may not replace (another user\'s, in a sticky directory) names the file once, and leaves no temporary', async (t) => {
  t.timeout(3 * 60_000)
  const { args, dir } = await cluster(t)
  const src = path.join(dir, 'src')
  fs.writeFileSync(src, 'dfs\n')
  fs.chmodSync(src, 0o644)
  await ok(t, ['fs', ...args, 'put', src, '/f'])
  // mkdtemp's 0700 is closed to uid 65534: a sticky directory of its own, as /tmp is
  const sticky = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fs-sticky-'))
  t.teardown(() => fs.rmSync(sticky, { recursive: true, force: true }))
  fs.chmodSync(sticky, 0o1777)
  const theirs = path.join(sticky, 'theirs')
  fs.writeFileSync(theirs, 'root\n')
  fs.chmodSync(theirs, 0o644)
  const r = spawnSync('setpriv', ['--reuid', '65534', '--regid', '65534', '--clear-groups', process.execPath, STRATA, 'fs', ...args, 'get', '/f', theirs], { encoding: 'utf8', timeout: 90_000 })
  t.is(r.status, 1, r.stderr)
  // the temporary's rename over the file is what fails: it said "rename 'THEIRS' -> 'THEIRS'"
  t.is(r.stderr, `strata: PERMISSION_DENIED: EPERM: operation not permitted, rename over '${theirs}'\n`)
  t.is(fs.readFileSync(theirs, 'utf8'), 'root\n')
  t.deepEqual(leftovers(sticky), [])
})

fuseTest('fs mount and umount through a symlink to the mount point: the mount is found at the real path (it failed "not in the mount table" and left a dead mount)', async (t) => {
  t.timeout(4 * 60_000)
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--no-sandbox', '--no-mount', '-q'])
  const real = path.join(base, 'real')
  fs.mkdirSync(real)
  const link = path.join(base, 'link')
  fs.symlinkSync(real, link)
  const mounted = () => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === real)
  t.teardown(() => void spawnSync('umount', ['-l', real]))
  for (const [mountAs, umountAs] of [[link, link], [link, real], [real, link]] as const) {
    const r = await strata(['fs', 'mount', mountAs, '--cluster', dir])
    t.is(r.code, 0, r.stderr)
    t.true(mounted(), mountAs)
    const ls = spawnSync('ls', [link], { encoding: 'utf8' })
    t.is(ls.status, 0, ls.stderr)
    t.is(JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json'])).mounts[0]?.mountpoint, real)
    const u = await strata(['fs', 'umount', umountAs, '--cluster', dir])
    t.is(u.code, 0, u.stderr)
    t.regex(u.stdout, new RegExp(`^unmounted ${real} \\(stopped pid \\d+\\)`, 'm'), 'its daemon was running')
    t.false(mounted(), umountAs)
  }
})
