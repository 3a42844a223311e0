// Mounts made with `strata fs mount MNT --cluster DIR` belong to the
// cluster: `cluster status` lists them, `cluster down` / `destroy --force`
// stop their daemons before the servers; a mount whose cluster went away
// fails requests within seconds (ENOTCONN) instead of holding callers in D
// state for the 60 s failover budget, and works again once the cluster is
// back; `fs umount` stops the daemon whatever state its mount or config is in.
import fs from 'node:fs'
import path from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import test, { type ExecutionContext } from 'ava'
import { CLI, tmpDir, until } from '../../helpers/procs.js'
import { abortConnection, findMount, forceUnmount, FUSE_FSTYPE, pidAlive } from '../../../fs/fuse/mounts.js'
import { clusterGone } from '../../../fs/client/retry-policy.js'
import { StrataError } from '../../../fs/common/errors.js'
import { MgmtdClient } from '../../../fs/mgmtd/client.js'
import { RpcClient } from '../../../fs/rpc/index.js'
import { pickFreePorts } from '../../../fs/admin/ports.js'
import { fuseSkipReason, ok, run, sh } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

const strata = (args: string[]) => run(process.execPath, [CLI, ...args], { env: { STRATA_LOG_LEVEL: 'error' }, timeoutMs: 180_000 })

/** One storage node with one target: for the tests about mounts that kill no server (each such test starts a cluster, most of its cost). */
const SMALL = ['--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1']

/** A cluster in a temp dir (no sandbox daemon), destroyed with its mounts at teardown; `mnts` are cleared too if anything is left. */
async function cluster(t: ExecutionContext, mnts: string[], size: string[] = []): Promise<string> {
  const dir = path.join(tmpDir(t, 'strata-fuse-cm-'), 'c')
  t.teardown(async () => {
    await strata(['cluster', 'destroy', '--force', '--dir', dir])
    for (const p of [...mnts, path.join(dir, 'mnt')]) if (findMount(p)) await forceUnmount(p)
  })
  ok(t, await strata(['cluster', 'up', '--dir', dir, '--no-sandbox', ...size, '-q']), 'cluster up')
  return dir
}

/** `fs mount --foreground` as a child of the test, killed at teardown. */
/** `strata fs mount MNT --cluster DIR` (a background daemon); returns the daemon's pid. */
async function mountInBackground(t: ExecutionContext, dir: string, mnt: string): Promise<number> {
  const mount = await strata(['fs', 'mount', mnt, '--cluster', dir])
  ok(t, mount, 'fs mount')
  return Number(mount.stdout.trim())
}

async function foregroundMount(t: ExecutionContext, dir: string, mnt: string, records = 2): Promise<ChildProcess> {
  const child = spawn(process.execPath, [CLI, 'fs', 'mount', mnt, '--cluster', dir, '--foreground'], { stdio: 'ignore', env: { ...process.env, STRATA_LOG_LEVEL: 'error' } })
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  await until(() => findMount(mnt)?.fstype === FUSE_FSTYPE && fs.existsSync(path.join(dir, 'mounts')) && fs.readdirSync(path.join(dir, 'mounts')).length >= records, 30_000, `foreground mount at ${mnt}`)
  return child
}

t('cluster status lists fs mount mounts; cluster down stops them (background and --foreground) before the servers', async (t) => {
  const base = tmpDir(t, 'strata-fuse-cm-m-')
  const m2 = path.join(base, 'm2')
  const m3 = path.join(base, 'm3')
  const dir = await cluster(t, [m2, m3], SMALL)
  const pid = await mountInBackground(t, dir, m2)
  const fg = await foregroundMount(t, dir, m3)
  ok(t, await sh(`echo hello > ${m2}/hello && cat ${m3}/hello`), 'both mounts serve')

  const st = await strata(['cluster', 'status', '--dir', dir, '--json'])
  ok(t, st, 'cluster status --json')
  const mounts = (JSON.parse(st.stdout) as { mounts: Array<{ mountpoint: string; pid: number; alive: boolean; mounted: boolean; foreground?: boolean; logFile: string }> }).mounts
  t.deepEqual(mounts.map((m) => [m.mountpoint, m.pid, m.alive, m.mounted, !!m.foreground]).sort(), [[m2, pid, true, true, false], [m3, fg.pid!, true, true, true]].sort())
  t.true(fs.existsSync(mounts.find((m) => m.mountpoint === m2)!.logFile))
  const text = await strata(['cluster', 'status', '--dir', dir])
  t.regex(text.stdout, /mounts \(strata fs mount\):/)
  t.regex(text.stdout, new RegExp(`${m2}\\s+${pid}\\s+yes\\s+yes`))

  const down = await strata(['cluster', 'down', '--dir', dir])
  ok(t, down, 'cluster down')
  t.regex(down.stdout, new RegExp(`stopped mount ${m2}|stopped mount ${m3}`))
  t.false(pidAlive(pid), 'the fs mount daemon stopped')
  await until(() => fg.exitCode !== null || fg.signalCode !== null, 10_000, 'the --foreground mount exited')
  t.is(fg.exitCode, 0, 'the --foreground daemon stopped cleanly')
  t.falsy(findMount(m2))
  t.falsy(findMount(m3))
  // nothing hangs on the mount point afterwards: it is a plain directory again
  const ls = await sh(`timeout 10 ls ${m2}`)
  t.is(ls.code, 0, ls.stderr)
  t.deepEqual(fs.readdirSync(path.join(dir, 'mounts')), [], 'the records are gone')
  const st2 = JSON.parse((await strata(['cluster', 'status', '--dir', dir, '--json'])).stdout) as { mounts: unknown[] }
  t.deepEqual(st2.mounts, [])
})

t('Ctrl-C (SIGINT) of fs mount --foreground unmounts cleanly and exits 130; SIGTERM exits 0', async (t) => {
  const base = tmpDir(t, 'strata-fuse-cm-int-')
  const m2 = path.join(base, 'm2')
  const m3 = path.join(base, 'm3')
  const dir = await cluster(t, [m2, m3], SMALL)
  for (const [mnt, sig, code] of [[m2, 'SIGINT', 130], [m3, 'SIGTERM', 0]] as const) {
    const fg = await foregroundMount(t, dir, mnt, 1)
    ok(t, await sh(`echo hello > ${mnt}/f-${sig} && cat ${mnt}/f-${sig}`), `the mount serves (${sig})`)
    fg.kill(sig)
    await until(() => fg.exitCode !== null || fg.signalCode !== null, 30_000, `the --foreground mount exited after ${sig}`)
    t.is(fg.exitCode, code, `${sig}: exit ${code}`)
    t.falsy(findMount(mnt), `${sig}: unmounted`)
    t.deepEqual(fs.readdirSync(path.join(dir, 'mounts')), [], `${sig}: the record is gone`)
  }
  // what was written before each stop was flushed
  ok(t, await sh(`cat ${dir}/mnt/f-SIGINT ${dir}/mnt/f-SIGTERM`), 'both files read back through fuse-1')
})

t('cluster destroy --force stops fs mount daemons; destroy without --force refuses while one runs', async (t) => {
  const m2 = path.join(tmpDir(t, 'strata-fuse-cm-d-'), 'm2')
  const dir = await cluster(t, [m2], SMALL)
  const pid = await mountInBackground(t, dir, m2)
  // the servers stopped, the mount still runs: destroy refuses
  ok(t, await strata(['cluster', 'kill', '--dir', dir, '--node', 'mgmtd']), 'kill mgmtd')
  const refused = await strata(['cluster', 'destroy', '--dir', dir])
  t.is(refused.code, 1)
  t.regex(refused.stderr, /CLUSTER_RUNNING[\s\S]*fs mount/)
  t.true(pidAlive(pid))
  const d = await strata(['cluster', 'destroy', '--force', '--dir', dir])
  ok(t, d, 'cluster destroy --force')
  t.regex(d.stdout, new RegExp(`stopped ${m2}`))
  t.false(pidAlive(pid), 'the fs mount daemon stopped')
  t.falsy(findMount(m2))
  t.false(fs.existsSync(dir))
})

t('a FUSE daemon started by hand with strata daemon fuse and a clusterDir is listed by cluster status and stopped by cluster down', async (t) => {
  const base = tmpDir(t, 'strata-fuse-cm-h-')
  const m2 = path.join(base, 'm2')
  const dir = await cluster(t, [m2], SMALL)
  const file = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8')) as { mgmtdAddresses: string[] }
  // a config of the user's own, named relative to the daemon's working directory
  fs.writeFileSync(path.join(base, 'mine.json'), JSON.stringify({ mountpoint: m2, mgmtdAddresses: file.mgmtdAddresses, clusterDir: dir }))
  const child = spawn(process.execPath, [CLI, 'daemon', 'fuse', '--config', 'mine.json'], { cwd: base, stdio: 'ignore', env: { ...process.env, STRATA_LOG_LEVEL: 'error' } })
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  await until(() => findMount(m2)?.fstype === FUSE_FSTYPE && fs.existsSync(path.join(dir, 'mounts')) && fs.readdirSync(path.join(dir, 'mounts')).length === 1, 30_000, `hand-started mount at ${m2}`)
  ok(t, await sh(`echo hand > ${m2}/hand && cat ${dir}/mnt/hand`), 'the mount serves')
  const st = JSON.parse((await strata(['cluster', 'status', '--dir', dir, '--json'])).stdout) as { mounts: Array<{ mountpoint: string; pid: number; alive: boolean; mounted: boolean; configFile: string }> }
  t.deepEqual(st.mounts.map((m) => [m.mountpoint, m.pid, m.alive, m.mounted, m.configFile]), [[m2, child.pid!, true, true, path.join(base, 'mine.json')]])

  const down = await strata(['cluster', 'down', '--dir', dir])
  ok(t, down, 'cluster down')
  t.regex(down.stdout, new RegExp(`stopped mount ${m2}`))
  await exited
  t.is(child.exitCode, 0, 'the daemon stopped cleanly on SIGTERM')
  t.falsy(findMount(m2))
  t.deepEqual(fs.readdirSync(path.join(dir, 'mounts')), [], 'its record is gone')
})

t('a mount whose cluster is gone fails requests within seconds with ENOTCONN and serves again when the cluster is back', async (t) => {
  const m2 = path.join(tmpDir(t, 'strata-fuse-cm-o-'), 'm2')
  const dir = await cluster(t, [m2])
  const pid = await mountInBackground(t, dir, m2)
  ok(t, await sh(`echo hello > ${m2}/hello`), 'write')
  // every server of the cluster dies (SIGKILL: nothing tells the mount); the mount stays
  for (const n of ['fuse-1', 'meta-1', 'meta-2', 'storage-1', 'storage-2', 'storage-3', 'mgmtd']) ok(t, await strata(['cluster', 'kill', '--dir', dir, '--node', n]), `kill ${n}`)
  for (const cmd of [`ls ${m2}`, `cat ${m2}/hello`, `df ${m2}`, `stat ${m2}/nothing`, `echo x > ${m2}/new`]) {
    const r = await sh(`timeout 20 ${cmd}`)
    t.not(r.code, 0, cmd)
    t.not(r.code, 124, `${cmd} was still blocked after 20 s`)
    t.regex(r.stderr, /Transport endpoint is not connected/, cmd)
    t.log(`${cmd}: ${r.ms} ms`)
  }
  t.true(pidAlive(pid), 'the daemon itself is fine')
  t.is(findMount(m2)?.fstype, FUSE_FSTYPE)
  // the cluster comes back (same ports, same data): the same mount serves again
  ok(t, await strata(['cluster', 'up', '--dir', dir, '-q']), 'cluster up again')
  const back = await until(async () => {
    const r = await sh(`timeout 20 cat ${m2}/hello`)
    return r.code === 0 && r
  }, 20_000, 'the mount serving again')
  t.is(back.stdout.trim(), 'hello')
  ok(t, await strata(['fs', 'umount', m2]), 'fs umount')
  t.false(pidAlive(pid))
})

t('with mgmtd gone but a meta server and other replicas alive, requests still succeed (no ENOTCONN)', async (t) => {
  const base = tmpDir(t, 'strata-fuse-cm-p-')
  const m2 = path.join(base, 'm2')
  const dir = await cluster(t, [m2])
  ok(t, await strata(['fs', 'mount', m2, '--cluster', dir]), 'fs mount')
  ok(t, await sh(`head -c 9000000 /dev/urandom > ${base}/ref && cp ${base}/ref ${m2}/big && echo hello > ${m2}/hello`), 'write')
  for (const n of ['mgmtd', 'meta-1', 'storage-1']) ok(t, await strata(['cluster', 'kill', '--dir', dir, '--node', n]), `kill ${n}`)
  // past the orphan timeout: the mount must still fail over to meta-2 and to the live replicas
  await new Promise((r) => setTimeout(r, 7000))
  ok(t, await sh(`timeout 60 ls ${m2} && timeout 60 cat ${m2}/hello && timeout 60 cmp ${m2}/big ${base}/ref && timeout 60 df ${m2}`), 'reads with mgmtd, meta-1 and storage-1 dead')
})

t('fs umount of a mount whose daemon was SIGKILLed clears it and drops its record in the cluster directory', async (t) => {
  const m3 = path.join(tmpDir(t, 'strata-fuse-cm-k-'), 'm3')
  const dir = await cluster(t, [m3], SMALL)
  const pid = await mountInBackground(t, dir, m3)
  const records = () => fs.readdirSync(path.join(dir, 'mounts'))
  t.is(records().length, 1)
  process.kill(pid, 'SIGKILL')
  await until(() => !pidAlive(pid), 10_000, 'daemon gone')
  const st = await strata(['cluster', 'status', '--dir', dir, '--json'])
  ok(t, st, 'cluster status')
  const mounts = (JSON.parse(st.stdout) as { mounts: { mountpoint: string; alive: boolean; mounted: boolean }[] }).mounts
  t.like(mounts[0], { mountpoint: m3, alive: false, mounted: true }, 'status reports the dead mount')
  // no --cluster: the daemon is gone, so only what it registered names the cluster
  const u = await strata(['fs', 'umount', m3])
  ok(t, u, 'fs umount of a dead mount')
  t.regex(u.stdout, /cleared a dead mount/)
  t.falsy(findMount(m3))
  t.deepEqual(records(), [], 'the record is gone with the mount')
})

t('fs umount stops the daemon when its mount is dead or its config is gone', async (t) => {
  const base = tmpDir(t, 'strata-fuse-cm-u-')
  const m2 = path.join(base, 'm2')
  const dir = await cluster(t, [m2], SMALL)
  // a dead mount (connection aborted) whose daemon still runs
  const a = await strata(['fs', 'mount', m2, '--cluster', dir])
  ok(t, a, 'fs mount')
  const pidA = Number(a.stdout.trim())
  t.true(abortConnection(findMount(m2)!))
  t.regex((await sh(`timeout 10 ls ${m2} 2>&1 || true`)).stdout, /not connected/)
  const u1 = await strata(['fs', 'umount', m2])
  ok(t, u1, 'fs umount of a dead mount')
  t.regex(u1.stdout, new RegExp(`stopped pid ${pidA}`))
  t.false(pidAlive(pidA), 'its daemon is gone')
  t.falsy(findMount(m2))
  // the daemon's config was deleted under it (its cluster directory was wiped by hand)
  const b = await strata(['fs', 'mount', m2, '--cluster', dir])
  ok(t, b, 'fs mount again')
  const pidB = Number(b.stdout.trim())
  for (const f of fs.readdirSync(path.join(dir, 'config')).filter((f) => f.startsWith('mount-'))) fs.rmSync(path.join(dir, 'config', f))
  const u2 = await strata(['fs', 'umount', m2])
  ok(t, u2, 'fs umount without a config')
  t.regex(u2.stdout, new RegExp(`stopped pid ${pidB}`))
  t.notRegex(u2.stdout, /no daemon was running/)
  t.false(pidAlive(pidB), 'its daemon is gone')
  t.falsy(findMount(m2))
})

test('clusterGone: only a refused connection with mgmtd refusing connections for orphanTimeoutMs gives up', async (t) => {
  const [port] = await pickFreePorts(1)
  const rpc = new RpcClient({ connectTimeoutMs: 500, minBackoffMs: 10, maxBackoffMs: 10 })
  const mgmtd = new MgmtdClient({ addresses: [`127.0.0.1:${port}`], rpc })
  t.teardown(() => {
    mgmtd.close()
    rpc.close()
  })
  t.is(mgmtd.unreachableForMs(), 0)
  await t.throwsAsync(() => mgmtd.refresh(), { code: 'RPC_CONNECT_FAILED' } as never)
  await new Promise((r) => setTimeout(r, 60))
  t.true(mgmtd.unreachableForMs() >= 50)
  // what RpcClient makes of ECONNREFUSED (a connect that timed out says refused: false)
  const refused = new StrataError('RPC_CONNECT_FAILED', 'connect refused', { detail: { refused: true } })
  t.is(clusterGone(refused, mgmtd, 0, 'read'), null, '0 turns it off')
  t.is(clusterGone(refused, mgmtd, 60_000, 'read'), null, 'not for long enough yet')
  t.is(clusterGone(new StrataError('CHAIN_UNAVAILABLE', 'no serving target'), mgmtd, 10, 'read'), null, 'not for an answer of a live server')
  // a server that is there but slow (a loaded machine) is not a stopped cluster
  for (const code of ['TIMEOUT', 'RPC_CONNECTION_CLOSED', 'RPC_SEND_FAILED'] as const) t.is(clusterGone(new StrataError(code, 'slow'), mgmtd, 10, 'read'), null, code)
  const gone = clusterGone(refused, mgmtd, 10, 'read')
  t.is(gone?.code, 'CLUSTER_UNREACHABLE')
  t.is(gone?.cause, refused)
  // a mgmtd that answers (with anything) is there
  t.is(clusterGone(refused, { unreachableForMs: () => 0 }, 10, 'read'), null)
})
