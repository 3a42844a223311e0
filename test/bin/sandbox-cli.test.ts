// `strata sandbox …` the way a new user following the README runs it, every
// step a child process of the real CLI against a real cluster: cluster up
// (the token file, the daemon's per-cluster node name), image import of a
// busybox rootfs, sandbox create / exec (exit code, separate streams, -i stdin,
// 127 / 126 for a missing / non-executable command) / ls / inspect / cp (file and
// directory, both ways) / kill / rm, usage errors, a wrong token, --help of
// every subcommand, and finally cluster down leaving no mounts, runc state or
// cgroups of the cluster behind. Teardown runs `cluster down` and clears
// leftovers even when the test failed.
import test, { type ExecutionContext } from 'ava'
import { execFile, execFileSync, spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { forceUnmount } from '../../fs/fuse/mounts.js'
import { reclaimOffline } from '../../sandbox/daemon/index.js'
import { hasRunc } from '../helpers/agent-container.js'
import { busyboxRootfs, hasBusybox } from '../helpers/busybox-rootfs.js'
import { snapshotTree, type Tree } from '../helpers/tree-compare.js'
import { fuseSkipReason } from '../fs/fuse/helpers.js'
import { STRATA, ok, strata, tempDir, until, type Run } from './helpers.js'

const skip = fuseSkipReason() || (!hasRunc ? 'needs root and runc' : !hasBusybox ? 'needs busybox-static' : '')
const run = skip ? test.serial.skip : test.serial

const SUBCOMMANDS = ['create', 'exec', 'ls', 'inspect', 'kill', 'rm', 'cp']
const CGROUP_CONTROLLERS = ['memory', 'pids', 'cpu,cpuacct', 'cpu', 'cpuacct', 'cpuset', 'freezer', 'devices', 'blkio']

interface SandboxProc {
  stateDir: string
  nodeId: string
}

/** The sandbox daemon's state dir and node name, from the config `cluster up` wrote. */
function sandboxProc(dir: string): SandboxProc {
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as { processes: Array<{ role: string; configFile: string }> }
  const p = c.processes.find((x) => x.role === 'sandbox')
  if (!p) throw new Error(`cluster.json lists no sandbox process: ${JSON.stringify(c.processes)}`)
  const cfg = JSON.parse(fs.readFileSync(p.configFile, 'utf8')) as { stateDir: string; nodeId: string }
  return { stateDir: cfg.stateDir, nodeId: cfg.nodeId }
}

/** Mount points at or below any of `roots` (this test shares the daemons' mount namespace). */
function mountsUnder(roots: string[]): string[] {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')
    .map((l) => (l.split(' ')[4] ?? '').replace(/\\040/g, ' '))
    .filter((m) => m && roots.some((r) => m === r || m.startsWith(r + '/')))
}

/** cgroup directories of these sandboxes under /strata/<nodeId> in any v1 hierarchy. */
function cgroupsOf(nodeId: string, ids: string[]): string[] {
  const found: string[] = []
  for (const ctl of CGROUP_CONTROLLERS) {
    for (const id of ids) {
      const d = path.join('/sys/fs/cgroup', ctl, 'strata', nodeId, id)
      if (fs.existsSync(d)) found.push(d)
    }
  }
  return found
}

/** Files by relative path with what a copy must keep: type, permission bits, size and content, link target. */
function essentials(tree: Tree): Record<string, string> {
  const o: Record<string, string> = {}
  for (const [rel, e] of tree) {
    if (rel === '.') continue
    o[rel] = [e.type, e.type === 'symlink' ? '' : e.mode, e.size ?? '', e.sha256 ?? '', e.target ?? ''].join(' ')
  }
  return o
}

/**
 * The process state of a sandbox's init while it is alive ('R', 'S', 'D', …),
 * or null once it is gone or a zombie. A pid reused by another process
 * (not in the sandbox's cgroup) counts as gone.
 */
function initState(pid: number, id: string): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3)
    if (state === 'Z') return null
    return fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(id) ? state : null
  } catch {
    return null
  }
}

function failed(t: ExecutionContext, what: string, r: Run): void {
  t.fail(`${what}: exit ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`)
}

/**
 * A cluster dir for one test and the CLI bound to it (STRATA_CLUSTER); `up` runs
 * `cluster up` and finds the sandbox daemon. The teardown, registered after
 * tempDir's and so run first, stops the cluster and clears whatever a failed
 * run left: sandboxes (runc, rootfs and layer mounts), then the FUSE mount.
 */
function cliCluster(t: ExecutionContext, prefix: string) {
  const base = tempDir(t, prefix)
  const dir = path.join(base, 'c')
  const env = { STRATA_CLUSTER: dir, STRATA_LOG_LEVEL: 'error' }
  const cli = (args: string[], o: { input?: string; timeoutMs?: number } = {}) => strata(args, { env, timeoutMs: o.timeoutMs ?? 120_000, ...(o.input !== undefined ? { input: o.input } : {}) })
  const okCli = (args: string[], timeoutMs = 120_000) => ok(t, args, { env, timeoutMs })
  let proc: SandboxProc | undefined
  t.teardown(async () => {
    if (fs.existsSync(path.join(dir, 'cluster.json'))) {
      const down = await strata(['cluster', 'down', '--dir', dir], { env, timeoutMs: 180_000 })
      if (down.code !== 0) t.log(`teardown: cluster down exited ${down.code}: ${down.stderr}`)
    }
    if (proc) await reclaimOffline(proc.stateDir).catch((e) => t.log(`teardown: reclaimOffline: ${(e as Error).message}`))
    for (const m of mountsUnder([dir, ...(proc ? [proc.stateDir] : [])]).reverse()) await forceUnmount(m).catch(() => undefined)
    if (proc && !proc.stateDir.startsWith(dir + '/')) fs.rmSync(proc.stateDir, { recursive: true, force: true })
  })
  const up = async (args: string[]): Promise<SandboxProc> => {
    await okCli(['cluster', 'up', '--dir', dir, ...args, '-q'], 300_000)
    return (proc = sandboxProc(dir))
  }
  return { base, dir, env, cli, okCli, up }
}

run('a new user: cluster up, image import, sandbox create/exec/ls/inspect/cp/kill/rm, errors, --help, cluster down leaves nothing', async (t) => {
  t.timeout(15 * 60_000)
  const { base, dir, env, cli, okCli, up } = cliCluster(t, 'strata-sbcli-')

  // --- cluster up: one storage node, one replica; the sandbox daemon and its token come with it
  // with a warm pool of an image that does not exist yet: the daemon keeps retrying until it is imported
  const proc = await up(['--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--warm-pool', 'bb:1=1'])
  // the node name (cgroup parent /strata/<name>) carries a hash of the cluster dir, so local clusters do not share one
  t.is(proc.nodeId, `node-40001-${crypto.createHash('sha256').update(path.resolve(dir)).digest('hex').slice(0, 8)}`)
  const tokenFile = path.join(dir, 'sandbox.token')
  t.true(fs.existsSync(tokenFile), 'cluster up wrote DIR/sandbox.token')
  t.is(fs.statSync(tokenFile).mode & 0o777, 0o600)
  t.regex(fs.readFileSync(tokenFile, 'utf8'), /^[0-9a-f]{64}\n$/)

  // --- an image from a busybox rootfs directory
  const rootfs = busyboxRootfs(t)
  await okCli(['image', 'import', rootfs, '--name', 'bb:1'], 300_000)

  // the warm pool fills once the image is there
  const cluster = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as { processes: Array<{ role: string; address: string }> }
  const endpoint = `http://${cluster.processes.find((p) => p.role === 'sandbox')!.address}`
  const token = fs.readFileSync(tokenFile, 'utf8').trim()
  await until('the warm pool of bb:1 filled', async () => {
    const node = await (await fetch(`${endpoint}/v1/node`, { headers: { authorization: `Bearer ${token}` } })).json() as { pool: Array<{ image: string; ready: number }> }
    return node.pool.length === 1 && node.pool[0]!.image === 'bb:1' && node.pool[0]!.ready === 1
  }, 60_000)

  // --- create (a plain create of the pool's image takes the started sandbox)
  const created = JSON.parse(await okCli(['sandbox', 'create', '--image', 'bb:1', '--label', 'job=t', '--json']))
  const id: string = created.id
  t.regex(id, /^sb-[a-z0-9]{12}$/)
  t.like(created, { state: 'running', backend: 'container', labels: { job: 't' }, image: { ref: 'bb:1' }, pooled: true })
  t.true(created.pid > 0)
  // its cgroup exists while it runs (so the absence checked after cluster down means something)
  t.not(cgroupsOf(proc.nodeId, [id]).length, 0, `no cgroup of ${id} under /sys/fs/cgroup/*/strata/${proc.nodeId}`)

  // --- exec: the command's exit code, stdout and stderr kept apart
  const e7 = await cli(['sandbox', 'exec', id, '--', 'sh', '-c', 'echo out; echo err >&2; exit 7'])
  t.is(e7.code, 7, e7.stderr)
  t.is(e7.stdout, 'out\n')
  t.is(e7.stderr, 'err\n')
  // one argument with spaces runs through /bin/sh -c
  const shell = await cli(['sandbox', 'exec', id, '--', 'echo $((6 * 7)) | tr 4 x'])
  t.is(shell.code, 0, shell.stderr)
  t.is(shell.stdout, 'x2\n')
  // -i forwards stdin; without it the command's stdin is empty
  const piped = await cli(['sandbox', 'exec', '-i', id, '--', 'cat'], { input: 'data\n' })
  t.is(piped.code, 0, piped.stderr)
  t.is(piped.stdout, 'data\n')
  const noStdin = await cli(['sandbox', 'exec', id, '--', 'cat'], { input: 'ignored\n' })
  t.is(noStdin.code, 0, noStdin.stderr)
  t.is(noStdin.stdout, '')
  const sig = await cli(['sandbox', 'exec', id, '--', 'sh', '-c', 'kill -9 $$'])
  t.is(sig.code, 128 + 9, sig.stderr)
  // a command that cannot be started: 127 when it does not exist, 126 when it may not run (as a shell)
  const noCmd = await cli(['sandbox', 'exec', id, '--', 'no-such-command', 'arg'])
  t.is(noCmd.code, 127, noCmd.stdout + noCmd.stderr)
  t.regex(noCmd.stderr, /^strata: NOT_FOUND: /m)
  const notExec = await cli(['sandbox', 'exec', id, '--', '/etc/passwd'])
  t.is(notExec.code, 126, notExec.stdout + notExec.stderr)
  t.regex(notExec.stderr, /^strata: SANDBOX_PERMISSION_DENIED: /m)

  // --- ls and inspect
  const listed = JSON.parse(await okCli(['sandbox', 'ls', '--json', '--label', 'job=t']))
  t.deepEqual(listed.map((x: { id: string }) => x.id), [id])
  t.deepEqual(JSON.parse(await okCli(['sandbox', 'ls', '--json', '--label', 'job=other'])), [])
  const table = (await okCli(['sandbox', 'ls'])).trim().split('\n')
  t.deepEqual(table[0]!.split(/\s+/), ['ID', 'State', 'Image', 'Created', 'Labels'])
  t.true(table.some((l) => l.startsWith(id) && /\brunning\b/.test(l) && l.includes('bb:1') && l.includes('job=t')), table.join('\n'))
  const insp = JSON.parse(await okCli(['sandbox', 'inspect', id]))
  t.like(insp, { id, state: 'running', image: { ref: 'bb:1' }, labels: { job: 't' }, network: 'none', oomKills: 0 })
  t.regex(insp.image.digest, /^sha256:[0-9a-f]{64}$/)
  t.true(insp.layers.length >= 1)

  // --- cp a file in and back
  const local = path.join(base, 'local')
  fs.mkdirSync(local)
  const fileIn = path.join(local, 'blob.bin')
  fs.writeFileSync(fileIn, crypto.randomBytes(300 * 1024 + 5), { mode: 0o640 })
  t.is((await okCli(['sandbox', 'cp', fileIn, `${id}:/tmp/blob.bin`])).trim(), `${id}:/tmp/blob.bin`)
  const wc = await cli(['sandbox', 'exec', id, '--', 'wc', '-c', '/tmp/blob.bin'])
  t.is(wc.stdout.trim().split(/\s+/)[0], String(300 * 1024 + 5), wc.stderr)
  const fileBack = path.join(local, 'blob.back')
  t.is((await okCli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, fileBack])).trim(), fileBack)
  t.true(fs.readFileSync(fileBack).equals(fs.readFileSync(fileIn)), 'file bytes equal after the round trip')
  // DST a symlink (also a dangling one), a character device or a fifo: written through or into, as
  // cp does, never replaced by a regular file (cp ID:/f /dev/null as root replaced /dev/null)
  const linked = path.join(local, 'linked.bin')
  fs.writeFileSync(linked, 'old')
  fs.symlinkSync('linked.bin', path.join(local, 'link'))
  fs.symlinkSync('dangling.bin', path.join(local, 'dangling'))
  await okCli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, path.join(local, 'link')])
  await okCli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, path.join(local, 'dangling')])
  t.true(fs.lstatSync(path.join(local, 'link')).isSymbolicLink() && fs.lstatSync(path.join(local, 'dangling')).isSymbolicLink(), 'the links stay links')
  t.true(fs.readFileSync(linked).equals(fs.readFileSync(fileIn)) && fs.readFileSync(path.join(local, 'dangling.bin')).equals(fs.readFileSync(fileIn)))
  const nullDev = path.join(local, 'null')
  execFileSync('mknod', ['-m', '666', nullDev, 'c', '1', '3'])
  await okCli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, nullDev])
  t.true(fs.statSync(nullDev).isCharacterDevice(), 'a device DST stays the device')
  const fifo = path.join(local, 'fifo')
  execFileSync('mkfifo', [fifo])
  const reader = spawn('sh', ['-c', `cat ${fifo} | wc -c`], { stdio: ['ignore', 'pipe', 'inherit'] })
  let counted = ''
  reader.stdout!.on('data', (d: Buffer) => (counted += d.toString()))
  const readerDone = new Promise<void>((r) => reader.on('close', () => r()))
  await okCli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, fifo])
  await readerDone
  t.is(counted.trim(), String(300 * 1024 + 5), 'the bytes went into the fifo')
  t.true(fs.statSync(fifo).isFIFO(), 'a fifo DST stays the fifo')
  // /dev/stdout and /dev/fd/1 are this process's standard output: written into (a pipe, or the file a shell
  // redirected it to) with nothing else printed there; the old code made a temporary "beside" the pipe in /proc
  const viaStdout = await bash(`$STRATA sandbox cp ${id}:/tmp/blob.bin /dev/stdout | sha256sum; exit \${PIPESTATUS[0]}`, env)
  t.is(viaStdout.code, 0, viaStdout.stderr)
  t.is(viaStdout.stdout.split(' ')[0], crypto.createHash('sha256').update(fs.readFileSync(fileIn)).digest('hex'))
  const redirected = path.join(local, 'redirected.bin')
  const viaFd = await bash(`$STRATA sandbox cp ${id}:/tmp/blob.bin /dev/fd/1 > '${redirected}'`, env)
  t.is(viaFd.code, 0, viaFd.stderr)
  t.true(fs.readFileSync(redirected).equals(fs.readFileSync(fileIn)), 'only the file went to stdout')
  t.true(fs.lstatSync('/dev/stdout').isSymbolicLink())
  // into an existing directory: under its own name
  t.is(JSON.parse(await okCli(['sandbox', 'cp', fileIn, `${id}:/root`, '--json'])).copied, `${id}:/root/blob.bin`)
  const inRoot = await cli(['sandbox', 'exec', id, '--', 'cmp', '/root/blob.bin', '/tmp/blob.bin'])
  t.is(inRoot.code, 0, inRoot.stdout + inRoot.stderr)
  // a DST ending in / names a directory that must exist, as for cp and docker cp (a file of that name was
  // written here; in the sandbox the directory was made, then the write failed SANDBOX_IS_A_DIRECTORY)
  const slashed = await cli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, path.join(local, 'nodir') + '/'])
  t.is(slashed.code, 1, slashed.stderr)
  t.is(slashed.stderr, `strata: NOT_FOUND: ${path.join(local, 'nodir')}/: no such directory (a DST ending in / must be an existing directory)\n`)
  t.false(fs.existsSync(path.join(local, 'nodir')))
  const onFile = await cli(['sandbox', 'cp', `${id}:/tmp/blob.bin`, fileIn + '/'])
  t.is(onFile.stderr, `strata: INVALID_ARGUMENT: ${fileIn}/: not a directory\n`)
  const slashedIn = await cli(['sandbox', 'cp', fileIn, `${id}:/nodir/`])
  t.is(slashedIn.code, 1, slashedIn.stderr)
  t.is(slashedIn.stderr, `strata: NOT_FOUND: ${id}:/nodir/: no such directory (a DST ending in / must be an existing directory)\n`)
  t.is((await cli(['sandbox', 'exec', id, '--', 'test', '-e', '/nodir'])).code, 1, 'nothing made in the sandbox')
  t.is(JSON.parse(await okCli(['sandbox', 'cp', fileIn, `${id}:/root/`, '--json'])).copied, `${id}:/root/blob.bin`)

  // --- cp a directory in and back
  const tree = path.join(local, 'tree')
  fs.mkdirSync(path.join(tree, 'a/b'), { recursive: true })
  fs.mkdirSync(path.join(tree, 'empty'))
  fs.writeFileSync(path.join(tree, 'top.txt'), 'top\n')
  fs.writeFileSync(path.join(tree, 'a/b/deep.bin'), crypto.randomBytes(70_000))
  fs.writeFileSync(path.join(tree, 'a/run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 })
  fs.writeFileSync(path.join(tree, 'a/zero'), '')
  fs.symlinkSync('b/deep.bin', path.join(tree, 'a/link'))
  t.is((await okCli(['sandbox', 'cp', tree, `${id}:/work`])).trim(), `${id}:/work`)
  const ran = await cli(['sandbox', 'exec', id, '--', '/work/a/run.sh'])
  t.is(ran.stdout, 'ran\n', ran.stderr)
  const treeBack = path.join(local, 'tree.back')
  t.is((await okCli(['sandbox', 'cp', `${id}:/work`, treeBack])).trim(), treeBack)
  t.deepEqual(essentials(await snapshotTree(treeBack)), essentials(await snapshotTree(tree)))
  // and into an existing local directory: under its own name
  const into = path.join(local, 'into')
  fs.mkdirSync(into)
  t.is((await okCli(['sandbox', 'cp', `${id}:/work/a`, into])).trim(), path.join(into, 'a'))
  t.true(fs.readFileSync(path.join(into, 'a/b/deep.bin')).equals(fs.readFileSync(path.join(tree, 'a/b/deep.bin'))))
  const missing = await cli(['sandbox', 'cp', `${id}:/no/such/file`, path.join(local, 'x')])
  t.is(missing.code, 1)
  t.regex(missing.stderr, /^strata: NOT_FOUND: /m)

  // --- a second sandbox stays running for cluster down to reclaim
  const other = JSON.parse(await okCli(['sandbox', 'create', '--image', 'bb:1', '--label', 'job=left', '--json']))
  t.not(initState(other.pid, other.id), null, `the init of ${other.id} (pid ${other.pid}) runs in its cgroup`)

  // --- kill: the record stays (stopped, killed); exec is SANDBOX_GONE
  t.is((await okCli(['sandbox', 'kill', id])).trim(), `${id} stopped (killed)`)
  const gone = await cli(['sandbox', 'exec', id, '--', 'true'])
  t.is(gone.code, 1)
  t.regex(gone.stderr, /^strata: SANDBOX_GONE: /m)
  t.like(JSON.parse(await okCli(['sandbox', 'inspect', id])), { id, state: 'stopped', stop: { reason: 'killed' } })
  t.deepEqual(cgroupsOf(proc.nodeId, [id]), [], 'kill removed the cgroups')
  t.is(JSON.parse(await okCli(['sandbox', 'ls', '--json', '--state', 'stopped'])).length, 1)

  // --- rm: gone for good
  t.is((await okCli(['sandbox', 'rm', id])).trim(), id)
  const after = await cli(['sandbox', 'inspect', id])
  t.is(after.code, 1)
  t.regex(after.stderr, /^strata: SANDBOX_NOT_FOUND: /m)
  const rmAgain = await cli(['sandbox', 'rm', id])
  t.is(rmAgain.code, 1)
  t.regex(rmAgain.stderr, /^strata: SANDBOX_NOT_FOUND: /m)
  t.deepEqual(JSON.parse(await okCli(['sandbox', 'ls', '--json', '--label', 'job=t'])), [])

  // --- usage errors exit 2
  for (const args of [
    ['sandbox', 'create'],
    ['sandbox', 'create', '--image', 'bb:1', '--memory', 'lots'],
    ['sandbox', 'create', '--image', 'bb:1', '--label', 'novalue'],
    ['sandbox', 'create', '--image', 'bb:1', '--mount', '/datasets'],
    ['sandbox', 'create', '--image', 'bb:1', '--base', 'bb:1'],
    ['sandbox', 'create', '--image', 'bb:1', '--toolkit', 'bb:1'],
    ['sandbox', 'create', '--image', 'bb:1', '--memory', '1'],
    ['sandbox', 'create', '--image', 'bb:1', '--memory', '99999999'],
    ['sandbox', 'create', '--image', 'bb:1', '--cpu', '2000'],
    ['sandbox', 'exec'],
    ['sandbox', 'exec', other.id],
    ['sandbox', 'ls', '--state', 'sideways'],
    ['sandbox', 'cp', fileIn, path.join(local, 'y')],
    ['sandbox', 'frobnicate'],
  ]) {
    const r = await cli(args)
    if (r.code !== 2) failed(t, `${args.join(' ')} should be a usage error`, r)
  }
  // a well-formed request the daemon refuses is exit 1 with its code
  const noImage = await cli(['sandbox', 'create', '--image', 'nope:1'])
  t.is(noImage.code, 1)
  t.regex(noImage.stderr, /^strata: IMAGE_NOT_FOUND: /m)

  // --- a wrong token is refused (flag and environment)
  for (const r of [
    await cli(['sandbox', 'ls', '--token', 'wrong-token']),
    await strata(['sandbox', 'exec', other.id, '--', 'true'], { env: { ...env, STRATA_TOKEN: 'x'.repeat(64) } }),
  ]) {
    t.is(r.code, 1, r.stdout + r.stderr)
    t.regex(r.stderr, /^strata: UNAUTHENTICATED: /m)
  }

  // --- --help of every sandbox subcommand (and serve)
  for (const args of [['sandbox'], ...SUBCOMMANDS.map((c) => ['sandbox', c]), ['serve']]) {
    const r = await cli([...args, '--help'])
    if (r.code !== 0) failed(t, `${args.join(' ')} --help`, r)
    t.regex(r.stdout, /^Usage: strata /m, args.join(' '))
  }

  // --- cluster down: every sandbox reclaimed, no mounts, runc state or cgroups left
  const ids = [id, other.id as string]
  await okCli(['cluster', 'down', '--dir', dir], 180_000)
  t.deepEqual(mountsUnder([dir, proc.stateDir]), [], 'no mounts under the cluster dir or the sandbox state dir')
  t.deepEqual(cgroupsOf(proc.nodeId, ids), [], 'no cgroups of the cluster\'s sandboxes')
  const sbDir = path.join(proc.stateDir, 'sb')
  t.deepEqual(fs.existsSync(sbDir) ? fs.readdirSync(sbDir) : [], [], 'no sandbox (runc) state left')
  // the runtime SIGKILLs the init; once it is dead (or a zombie nobody reaped yet) it is gone
  const first = initState(other.pid, other.id)
  if (first !== null) t.log(`right after cluster down the init of ${other.id} (pid ${other.pid}) was still in state ${first}`)
  const state = await until('the init to exit', async () => initState(other.pid, other.id) === null, 5000, 100).then(() => null, () => initState(other.pid, other.id))
  t.is(state, null, `the init of ${other.id} (pid ${other.pid}) still runs after cluster down (state ${state})`)

  // --- destroy
  await okCli(['cluster', 'destroy', '--dir', dir])
  t.false(fs.existsSync(path.join(dir, 'cluster.json')))
})

/** Runs a bash script with the CLI as `$STRATA`; resolves with its streams and exit code. */
function bash(script: string, env: NodeJS.ProcessEnv, timeoutMs = 120_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile('bash', ['-c', script], { env: { ...process.env, ...env, STRATA: `${process.execPath} ${STRATA}` }, timeout: timeoutMs }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 128) : 0
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
  })
}

/** No JavaScript stack trace or unhandled error in a CLI's stderr. */
function noCrash(t: ExecutionContext, r: Run, what: string): void {
  t.notRegex(r.stderr, /^\s+at .+:\d+:\d+\)?$|Unhandled|node:internal|Error: write EPIPE/m, `${what}: ${r.stderr}`)
}

run('exec in a pipeline, OOM and a dying init; cp of an untrusted tree, special files and modes; local usage errors', async (t) => {
  t.timeout(15 * 60_000)
  const { base, env, cli, okCli, up } = cliCluster(t, 'strata-sbcli2-')
  await up(['--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1'])

  // an image whose tree holds what a download must never bring onto the host as it is
  const rootfs = busyboxRootfs(t)
  const h = path.join(rootfs, 'hostile')
  fs.mkdirSync(path.join(h, 'sub'), { recursive: true })
  execFileSync('mknod', [path.join(h, 'null'), 'c', '1', '3'])
  execFileSync('mknod', [path.join(h, 'loop'), 'b', '7', '0'])
  execFileSync('mkfifo', [path.join(h, 'fifo')])
  fs.writeFileSync(path.join(h, 'suid'), '#!/bin/sh\n', { mode: 0o755 })
  fs.chmodSync(path.join(h, 'suid'), 0o6755)
  fs.writeFileSync(path.join(h, 'private'), 'p\n')
  fs.chmodSync(path.join(h, 'private'), 0o640)
  fs.chownSync(path.join(h, 'private'), 1234, 1234)
  fs.writeFileSync(path.join(h, 'sub', 'x'), 'x\n')
  fs.linkSync(path.join(h, 'sub', 'x'), path.join(h, 'hard'))
  fs.symlinkSync('/etc/passwd', path.join(h, 'abs-link'))
  fs.chmodSync(path.join(h, 'sub'), 0o2755)
  fs.mkdirSync(path.join(h, 'sticky'))
  fs.chmodSync(path.join(h, 'sticky'), 0o1777)
  fs.mkdirSync(path.join(h, 'locked'))
  fs.writeFileSync(path.join(h, 'locked', 'inside'), 'i\n')
  fs.chmodSync(path.join(h, 'locked'), 0o700)
  fs.chownSync(path.join(h, 'locked'), 1234, 1234)
  await okCli(['image', 'import', rootfs, '--name', 'bad:1'], 300_000)
  const id = (await okCli(['sandbox', 'create', '--image', 'bad:1', '--memory', '32'])).trim()

  // --- exec | head: a quiet exit 141, and the command in the sandbox is killed
  const piped = await bash(`$STRATA sandbox exec ${id} -- yes | head -1; echo "status \${PIPESTATUS[0]}"`, env)
  t.is(piped.stdout, 'y\nstatus 141\n', piped.stderr)
  noCrash(t, piped, 'exec | head -1')
  t.is(piped.stderr, '')
  await until('the yes in the sandbox to be killed', async () => !(await cli(['sandbox', 'exec', id, '--', 'ps', '-o', 'args'])).stdout.split('\n').includes('yes'), 10_000)
  // the same when it is stderr whose reader goes
  const errPiped = await bash(`$STRATA sandbox exec ${id} -- sh -c 'yes >&2' 2>&1 >/dev/null | head -1; echo "status \${PIPESTATUS[0]}"`, env)
  t.is(errPiped.stdout, 'y\nstatus 141\n', errPiped.stderr)
  await until('the yes writing to stderr to be killed', async () => !(await cli(['sandbox', 'exec', id, '--', 'ps', '-o', 'args'])).stdout.includes('yes'), 10_000)
  // a command that ignores SIGPIPE is killed too
  const stubborn = await bash(`$STRATA sandbox exec ${id} -- sh -c 'trap "" PIPE; yes' | head -c 2; echo " status \${PIPESTATUS[0]}"`, env)
  t.is(stubborn.stdout, 'y\n status 141\n', stubborn.stderr)
  noCrash(t, stubborn, 'exec (SIGPIPE ignored) | head')

  // --- OOM: 137 with a note naming the limit
  const hog = await cli(['sandbox', 'exec', id, '--', 'x=aaaaaaaaaaaaaaaa; while true; do x="$x$x"; done'])
  t.is(hog.code, 137, hog.stderr)
  t.regex(hog.stderr, /^strata: killed: out of memory \(limit 32 MiB\)$/m)
  const killed = await cli(['sandbox', 'exec', id, '--', 'sh', '-c', 'kill -9 $$'])
  t.is(killed.code, 137)
  t.notRegex(killed.stderr, /out of memory/)

  // --- cp of the tree: no device nodes or fifos, no setuid/setgid/sticky, no foreign owners
  const out = path.join(base, 'out')
  const cp = await cli(['sandbox', 'cp', `${id}:/hostile`, out])
  t.is(cp.code, 0, cp.stderr)
  for (const n of ['null', 'loop', 'fifo']) {
    t.false(fs.existsSync(path.join(out, n)), `${n} was not created`)
    t.regex(cp.stderr, new RegExp(`^strata: skipped /hostile/${n}: `, 'm'))
  }
  const mode = (p: string) => fs.lstatSync(path.join(out, p)).mode & 0o7777
  t.is(mode('suid'), 0o755)
  t.is(mode('sub'), 0o755)
  t.is(mode('sticky'), 0o777)
  t.is(mode('private'), 0o640)
  t.is(fs.lstatSync(path.join(out, 'private')).uid, process.getuid!())
  t.is(fs.readlinkSync(path.join(out, 'abs-link')), '/etc/passwd')
  t.is(fs.statSync(path.join(out, 'hard')).ino, fs.statSync(path.join(out, 'sub', 'x')).ino)
  t.is(fs.readFileSync(path.join(out, 'hard'), 'utf8'), 'x\n')
  // single files keep their permission bits, without setuid/setgid
  const one = path.join(base, 'one')
  await okCli(['sandbox', 'cp', `${id}:/hostile/suid`, one])
  t.is(fs.statSync(one).mode & 0o7777, 0o755)
  await okCli(['sandbox', 'cp', `${id}:/hostile/private`, one])
  t.is(fs.statSync(one).mode & 0o7777, 0o640)
  // special files are refused, and nothing is created for them
  for (const src of ['/dev/zero', '/hostile/fifo', '/hostile/null']) {
    const target = path.join(base, 'special.out')
    const r = await cli(['sandbox', 'cp', `${id}:${src}`, target], { timeoutMs: 30_000 })
    t.is(r.code, 1, `${src}: ${r.stdout}${r.stderr}`)
    t.regex(r.stderr, /^strata: INVALID_ARGUMENT: .*(character device|fifo).*only regular files and directories/m)
    t.false(fs.existsSync(target), `nothing made for ${src}`)
  }

  // --- what the sandbox's user cannot read is left out and named with its code, the rest is copied, exit 1 (as tar)
  const asAlice = (await okCli(['sandbox', 'create', '--image', 'bad:1', '--user', 'alice'])).trim()
  const partial = path.join(base, 'partial')
  const pc = await cli(['sandbox', 'cp', `${asAlice}:/hostile`, partial])
  t.is(pc.code, 1, pc.stderr)
  noCrash(t, pc, 'cp of a partly unreadable tree')
  t.is(pc.stdout.trim(), partial)
  t.regex(pc.stderr, new RegExp(`^strata: SANDBOX_PERMISSION_DENIED: ${asAlice}:/hostile/private: cannot open: Permission denied; skipped$`, 'm'))
  t.regex(pc.stderr, new RegExp(`^strata: SANDBOX_PERMISSION_DENIED: ${asAlice}:/hostile/locked: cannot open the directory: Permission denied; its contents are skipped$`, 'm'))
  t.regex(pc.stderr, /^strata: skipped \/hostile\/fifo: /m)
  t.false(fs.existsSync(path.join(partial, 'private')))
  t.deepEqual(fs.readdirSync(path.join(partial, 'locked')), [])
  t.is(fs.readFileSync(path.join(partial, 'sub', 'x'), 'utf8'), 'x\n')
  t.is(fs.readFileSync(path.join(partial, 'hard'), 'utf8'), 'x\n')
  // the single file it cannot read fails the copy, and nothing is made for it
  const one1 = await cli(['sandbox', 'cp', `${asAlice}:/hostile/private`, path.join(base, 'private.out')])
  t.is(one1.code, 1, one1.stderr)
  t.regex(one1.stderr, /^strata: SANDBOX_PERMISSION_DENIED: /m)
  t.false(fs.existsSync(path.join(base, 'private.out')))
  await okCli(['sandbox', 'rm', asAlice])
  // --- the other way: what the invoking user cannot read here is left out and named with its code, the rest is
  // copied, exit 1 (it was IO_ERROR with tar's raw stderr, and an unreadable directory was not even created)
  const upTree = path.join(base, 'up')
  fs.chmodSync(base, 0o755)
  fs.mkdirSync(path.join(upTree, 'sub'), { recursive: true })
  fs.mkdirSync(path.join(upTree, 'closed'))
  fs.writeFileSync(path.join(upTree, 'a'), 'a\n')
  fs.writeFileSync(path.join(upTree, 'sub', 'secret'), 's\n', { mode: 0o600 })
  fs.writeFileSync(path.join(upTree, 'closed', 'f'), 'f\n')
  fs.symlinkSync('a', path.join(upTree, 'link'))
  fs.linkSync(path.join(upTree, 'a'), path.join(upTree, 'hard'))
  execFileSync('chown', ['-R', '65534:65534', upTree])
  fs.chownSync(path.join(upTree, 'sub', 'secret'), 0, 0)
  fs.chmodSync(path.join(upTree, 'closed'), 0)
  const daemon = JSON.parse(fs.readFileSync(path.join(env.STRATA_CLUSTER, 'cluster.json'), 'utf8')) as { processes: Array<{ role: string; address: string }> }
  const endpoint = `http://${daemon.processes.find((x) => x.role === 'sandbox')!.address}`
  const token = fs.readFileSync(path.join(env.STRATA_CLUSTER, 'sandbox.token'), 'utf8').trim()
  const asNobody = (src: string, dst: string) => bash(`setpriv --reuid=65534 --regid=65534 --clear-groups $STRATA sandbox --endpoint ${endpoint} --token ${token} cp ${src} ${dst}`, env)
  const upc = await asNobody(upTree, `${id}:/up`)
  t.is(upc.code, 1, upc.stderr)
  noCrash(t, upc, 'cp of a partly unreadable local tree')
  t.is(upc.stdout, `${id}:/up\n`)
  t.is(upc.stderr, [
    `strata: PERMISSION_DENIED: ${upTree}/closed: cannot open the directory: permission denied; its contents are skipped\n`,
    `strata: PERMISSION_DENIED: ${upTree}/sub/secret: cannot open: permission denied; skipped\n`,
  ].join(''))
  const landed = await cli(['sandbox', 'exec', id, '--', 'sh', '-c', 'cd /up && find . | sort && cat hard && readlink link && stat -c %h a'])
  t.is(landed.stdout, '.\n./a\n./closed\n./hard\n./link\n./sub\na\na\n2\n', landed.stderr)
  // a SRC that cannot be read itself fails the copy, and nothing is made for it
  fs.chmodSync(upTree, 0)
  const upNone = await asNobody(upTree, `${id}:/up-none`)
  fs.chmodSync(upTree, 0o755)
  t.is(upNone.code, 1, upNone.stderr)
  t.is(upNone.stderr, `strata: PERMISSION_DENIED: cannot read ${upTree}: permission denied\n`)
  t.is((await cli(['sandbox', 'exec', id, '--', 'test', '-e', '/up-none'])).code, 1)
  // so does a single file (it was INVALID_ARGUMENT: reading the request body failed: EACCES: …)
  const oneNone = await asNobody(path.join(upTree, 'sub', 'secret'), `${id}:/tmp/secret`)
  t.is(oneNone.code, 1, oneNone.stderr)
  t.is(oneNone.stderr, `strata: PERMISSION_DENIED: cannot read ${upTree}/sub/secret: permission denied\n`)
  t.is((await cli(['sandbox', 'exec', id, '--', 'test', '-e', '/tmp/secret'])).code, 1)
  // /proc of the sandbox's init: what it hides is named, the rest copied
  const proc1 = path.join(base, 'proc1')
  const pr = await cli(['sandbox', 'cp', `${id}:/proc/1`, proc1], { timeoutMs: 60_000 })
  t.is(pr.code, 1, pr.stderr)
  noCrash(t, pr, 'cp of /proc/1')
  t.regex(pr.stderr, new RegExp(`^strata: SANDBOX_PERMISSION_DENIED: ${id}:/proc/1/\\S+: cannot `, 'm'))
  t.regex(fs.readFileSync(path.join(proc1, 'status'), 'utf8'), /^Name:\t\S+\n/)
  // a single pseudo file too (stat says 0 bytes): what it holds
  const statusOut = path.join(base, 'status.out')
  await okCli(['sandbox', 'cp', `${id}:/proc/1/status`, statusOut])
  t.regex(fs.readFileSync(statusOut, 'utf8'), /^Name:\t\S+\n(.*\n)*Tgid:\t1\n/)

  // --- a sparse file stays sparse both ways, a single file and inside a directory (the transfer carries its zeros)
  const MiB = 1024 * 1024
  const sparseDir = path.join(base, 'sparse')
  fs.mkdirSync(sparseDir)
  const img = path.join(sparseDir, 'disk.img')
  const fd = fs.openSync(img, 'w')
  fs.writeSync(fd, Buffer.from('boot'), 0, 4, 0)
  fs.writeSync(fd, Buffer.from('end'), 0, 3, 64 * MiB - 3)
  fs.closeSync(fd)
  const imgSum = crypto.createHash('sha256').update(fs.readFileSync(img)).digest('hex')
  const inSandbox = async (p: string) => {
    const r = await cli(['sandbox', 'exec', id, '--', 'sh', '-c', `stat -c '%b %s' ${p}; sha256sum ${p}`])
    const [blocks, size, sum] = r.stdout.split(/\s+/)
    return { allocated: Number(blocks) * 512, size: Number(size), sum }
  }
  await okCli(['sandbox', 'cp', img, `${id}:/tmp/disk.img`])
  await okCli(['sandbox', 'cp', sparseDir, `${id}:/tmp/sparse-dir`])
  for (const p of ['/tmp/disk.img', '/tmp/sparse-dir/disk.img']) {
    const st = await inSandbox(p)
    t.like(st, { size: 64 * MiB, sum: imgSum }, p)
    t.true(st.allocated <= MiB, `${p}: ${st.allocated} bytes allocated in the sandbox for 7 bytes of data`)
  }
  const back = path.join(base, 'sparse-back')
  fs.mkdirSync(back)
  await okCli(['sandbox', 'cp', `${id}:/tmp/disk.img`, path.join(back, 'one.img')])
  await okCli(['sandbox', 'cp', `${id}:/tmp/sparse-dir`, path.join(back, 'dir')])
  for (const p of [path.join(back, 'one.img'), path.join(back, 'dir', 'disk.img')]) {
    const st = fs.statSync(p)
    t.is(st.size, 64 * MiB, p)
    t.true(st.blocks * 512 <= MiB, `${p}: ${st.blocks * 512} bytes allocated here for 7 bytes of data`)
    t.is(crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex'), imgSum, p)
  }

  // --- usage errors caught locally (exit 2); a reserved mount target is the daemon's code (exit 1)
  for (const args of [
    ['sandbox', 'exec', id, '--timeout', '604801', '--', 'true'],
    ['sandbox', 'create', '--image', 'bb:1', '--mount', 'datasets:/x'],
    ['sandbox', 'create', '--image', 'bb:1', '--hostname', 'a_b'],
  ]) {
    const r = await cli(args)
    if (r.code !== 2) failed(t, `${args.join(' ')} should be a usage error`, r)
  }
  for (const target of ['/proc', '/.strata/x', '/data/']) {
    const r = await cli(['sandbox', 'create', '--image', 'bad:1', '--mount', `/datasets:${target}`])
    t.is(r.code, 1, r.stderr)
    t.regex(r.stderr, /^strata: ROOTFS_BAD_MOUNT_TARGET: /m)
  }

  // --- the init dies under an exec: the sandbox is said to have stopped, and why
  const info = JSON.parse(await okCli(['sandbox', 'inspect', id])) as { pid: number }
  const pending = cli(['sandbox', 'exec', id, '--', 'sleep', '60'])
  await new Promise((r) => setTimeout(r, 1000))
  process.kill(info.pid, 'SIGKILL')
  const cut = await pending
  t.is(cut.code, 1, cut.stderr)
  t.regex(cut.stderr, /^strata: SANDBOX_GONE: sandbox sb-[a-z0-9]{12} stopped \((exited|oom): /m)
  t.notRegex(cut.stderr, /is running/)
  await okCli(['sandbox', 'rm', id])
})

test('usage errors print "strata: usage: …" (no commander help) and exit 2; local and start-up failures are "strata: CODE: message" in words', async (t) => {
  const base = tempDir(t, 'strata-sbcli-usage-')
  // a cluster description without a running cluster: enough for what fails before any daemon is asked
  const dir = path.join(base, 'c')
  fs.mkdirSync(dir)
  fs.writeFileSync(path.join(dir, 'cluster.json'), JSON.stringify({ processes: [{ role: 'sandbox', address: '127.0.0.1:1' }], mgmtdAddresses: ['127.0.0.1:1'] }))
  const env = { STRATA_CLUSTER: dir, STRATA_LOG_LEVEL: 'error' }
  const usage = async (args: string[], re: RegExp) => {
    const r = await strata(args, { env, timeoutMs: 60_000 })
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, re, args.join(' '))
    t.regex(r.stderr, /^strata: usage: /, args.join(' '))
    t.notRegex(r.stderr, /^error: |^Usage: |^\s+at /m, args.join(' '))
  }
  const id = 'sb-aaaaaaaaaaaa'
  await usage(['sandbox', 'create', '--image', 'bb:1', '--memory', '4'], /--memory must be in \[8, 16777216\], got 4/)
  await usage(['sandbox', 'ls', '--state', 'bogus'], /--state must be one of creating, running, stopped/)
  await usage(['sandbox', 'exec', '--timeout', '0', id, '--', 'true'], /--timeout must be in/)
  await usage(['sandbox', 'create', '--image', 'BAD::ref'], /--image: invalid image name/)
  await usage(['sandbox', 'exec', '--cwd', 'rel', id, '--', 'true'], /--cwd must be an absolute path/)
  await usage(['sandbox', '--endpoint', 'notaurl', '--token', 'x', 'ls'], /--endpoint: .*not a URL/)
  // an empty token is refused (it fell back to DIR/sandbox.token); a bad $STRATA_ENDPOINT is named as such
  await usage(['sandbox', '--token', '', 'ls'], /^strata: usage: --token: .*token must be a non-empty string/)
  {
    const r = await strata(['sandbox', '--token', 'x', 'ls'], { env: { ...env, STRATA_ENDPOINT: 'notaurl' }, timeoutMs: 60_000 })
    t.is(r.code, 2, r.stderr)
    t.regex(r.stderr, /^strata: usage: \$STRATA_ENDPOINT: endpoint "notaurl" is not a URL/)
  }
  await usage(['sandbox', 'exec'], /missing required argument 'id'/)
  // empty values are refused, not dropped (an empty --idempotency-key made a retry create a second sandbox)
  for (const opt of ['--user', '--workdir', '--hostname', '--idempotency-key']) await usage(['sandbox', 'create', '--image', 'bb:1', opt, ''], /^strata: usage: /)
  await usage(['sandbox', 'exec', id, '--', ''], /the program, must not be empty/)
  await usage(['sandbox', 'ls', '--label', 'bad key=1'], /invalid key "bad key"/)
  // the node's own files and a target given twice: ROOTFS_BAD_MOUNT_TARGET before anything is sent, as for /proc
  for (const [args, re] of [
    [['--mount', '/d:/etc/hostname'], /^strata: ROOTFS_BAD_MOUNT_TARGET: .*sandbox's own \/etc\/hostname/m],
    [['--mount', '/d:/x', '--mount', '/e:/x'], /^strata: ROOTFS_BAD_MOUNT_TARGET: dataset target \/x is given twice/m],
  ] as const) {
    const r = await strata(['sandbox', 'create', '--image', 'bb:1', ...args], { env, timeoutMs: 60_000 })
    t.is(r.code, 1, r.stderr)
    t.regex(r.stderr, re)
  }
  await usage(['sandbox', 'ls', '--bogus'], /unknown option '--bogus'/)
  await usage(['serve', '--warm-pool', 'BAD::x=2'], /--warm-pool "BAD::x=2": invalid image name/)
  await usage(['serve', '--listen', 'bogus'], /--listen: .*"bogus" is not HOST:PORT/)
  await usage(['serve', '--listen', '127.0.0.1:99999'], /--listen: .*not HOST:PORT with a port in \[0, 65535\]/)

  // serve on a busy port: the catalogue's code, no stack, and no state dir made for it
  const net = await import('node:net')
  const busy = net.createServer()
  await new Promise<void>((r) => busy.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => busy.close(() => r())))
  const port = (busy.address() as import('node:net').AddressInfo).port
  const inUse = await strata(['serve', '--listen', `127.0.0.1:${port}`], { env, timeoutMs: 60_000 })
  t.is(inUse.code, 1, inUse.stderr)
  t.is(inUse.stderr, `strata: INVALID_ARGUMENT: cannot listen on 127.0.0.1:${port}: the address is already in use\n`)
  t.false(fs.existsSync(path.join(dir, 'data')), 'no serve-<port> state dirs for addresses that were refused')

  // errors from local files say what failed in words, with the path
  const cp = await strata(['sandbox', '--endpoint', 'http://127.0.0.1:1', '--token', 'x', 'cp', path.join(base, 'nonexist'), `${id}:/tmp/x`], { env, timeoutMs: 60_000 })
  t.is(cp.code, 1, cp.stderr)
  t.is(cp.stderr, `strata: NOT_FOUND: cannot read ${path.join(base, 'nonexist')}: no such file or directory\n`)
  const noToken = await strata(['sandbox', 'ls'], { env, timeoutMs: 60_000 })
  t.is(noToken.code, 1, noToken.stderr)
  t.is(noToken.stderr, `strata: UNAUTHENTICATED: no token given and none readable at ${path.join(dir, 'sandbox.token')}: no such file or directory\n`)
})

run('kill and rm of several ids: every id is tried, each failure reported, the rest printed (--json too), exit 1', async (t) => {
  t.timeout(10 * 60_000)
  const { cli, okCli, up } = cliCluster(t, 'strata-sbcli3-')
  await up(['--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1'])
  await okCli(['image', 'import', busyboxRootfs(t), '--name', 'bb:1'], 300_000)
  const ids = (await okCli(['sandbox', 'create', '--image', 'bb:1', '--count', '3', '--label', 'm=3'])).trim().split('\n')
  t.is(ids.length, 3)
  const bad = 'sb-zzzzzzzzzzzz'
  // --count's per-item failures go to stderr as every error does; stdout keeps only ids
  const none = await cli(['sandbox', 'create', '--image', 'nosuch:1', '--count', '2'])
  t.is(none.code, 1, none.stderr)
  t.is(none.stdout, '')
  // each as `strata: CODE: message`, the code once (it was `IMAGE_NOT_FOUND: IMAGE_NOT_FOUND: no image …`)
  t.is(none.stderr, 'strata: IMAGE_NOT_FOUND: no image nosuch:1\n'.repeat(2))

  const k = await cli(['sandbox', 'kill', bad, ids[0]!, 'not-an-id', ids[1]!])
  t.is(k.code, 1, k.stderr)
  t.deepEqual(k.stdout.trim().split('\n'), [`${ids[0]} stopped (killed)`, `${ids[1]} stopped (killed)`])
  t.regex(k.stderr, new RegExp(`^strata: SANDBOX_NOT_FOUND: .*${bad}`, 'm'))
  t.regex(k.stderr, /^strata: SANDBOX_NOT_FOUND: .*not-an-id/m)
  const kj = await cli(['sandbox', 'kill', '--json', ids[2]!, bad])
  t.is(kj.code, 1, kj.stderr)
  t.deepEqual((JSON.parse(kj.stdout) as Array<{ id: string; state: string }>).map((x) => [x.id, x.state]), [[ids[2], 'stopped']])
  const states = JSON.parse(await okCli(['sandbox', 'ls', '--json', '--label', 'm=3'])) as Array<{ id: string; state: string }>
  t.deepEqual(states.map((x) => x.state), ['stopped', 'stopped', 'stopped'])

  const rm = await cli(['sandbox', 'rm', '--json', bad, ...ids])
  t.is(rm.code, 1, rm.stderr)
  t.deepEqual(JSON.parse(rm.stdout), { removed: ids })
  t.regex(rm.stderr, new RegExp(`^strata: SANDBOX_NOT_FOUND: .*${bad}`, 'm'))
  t.deepEqual(JSON.parse(await okCli(['sandbox', 'ls', '--json', '--label', 'm=3'])), [])
})
