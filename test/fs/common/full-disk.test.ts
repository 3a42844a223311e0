// A really full disk (a size-limited tmpfs made by each test) under what a
// daemon writes beside its data: its log (stderr) and small state files.
// Neither may end the daemon or keep a cluster from stopping and starting.
import test, { type ExecutionContext } from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { writeClusterFile, type ClusterFile } from '../../../fs/admin/cluster-file.js'
import { readFuseState, writeFuseState } from '../../../fs/fuse/state.js'
import { RpcClient } from '../../../fs/rpc/index.js'
import { CLI, freePort, tmpDir, until } from '../../helpers/procs.js'
import { fillDisk, smallTmpfs } from '../../helpers/small-disk.js'

/** A tmpfs of `size` mounted for this test, filled to the last byte; returns it and its filler file. */
function fullDisk(t: ExecutionContext, size: string, keep: Record<string, string> = {}): { dir: string; filler: string } {
  const dir = smallTmpfs(t, size, 'strata-full-')
  for (const [name, text] of Object.entries(keep)) fs.writeFileSync(path.join(dir, name), text)
  return { dir, filler: fillDisk(dir) }
}

const root = process.getuid?.() === 0

test('state files on a full disk: cluster.json and a FUSE state file are rewritten in place, a new one is NO_SPACE, no temp file stays', (t) => {
  if (!root) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const cluster = (pid: number | null) => ({ name: 'c', dir: '/x', processes: [{ name: 'mgmtd', pid }], mgmtdAddresses: ['127.0.0.1:1'] }) as unknown as ClusterFile
  const state = (pid: number) => ({ pid, mountpoint: '/x/mnt', connection: 40, mountedAt: new Date(0).toISOString(), clientId: 'c1' })
  const { dir } = fullDisk(t, '1m', { 'cluster.json': JSON.stringify(cluster(12345), null, 2) + '\n', 'state.json': JSON.stringify(state(12345), null, 2) + '\n' })
  // cluster down records the stopped processes; cluster up their new pids
  writeClusterFile(dir, cluster(null))
  t.deepEqual(JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8')), JSON.parse(JSON.stringify(cluster(null))))
  writeFuseState(path.join(dir, 'state.json'), state(678))
  t.deepEqual(readFuseState(path.join(dir, 'state.json')), state(678))
  t.throws(() => writeFuseState(path.join(dir, 'new.json'), state(1)), { code: 'NO_SPACE' })
  t.deepEqual(fs.readdirSync(dir).sort(), ['cluster.json', 'filler', 'state.json'])
})

test('a state file rewritten in place on a full disk that would need a new block keeps its old text and is NO_SPACE, not torn', (t) => {
  if (!root) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  // 4000 bytes hold one page of the tmpfs; a text of 5000 needs a second one, which is not there
  // (write(2) stores the first 4096 bytes and returns that count, no error)
  const cluster = (n: number) => ({ name: 'c', dir: '/x', processes: [{ name: 'mgmtd', pid: 1, note: 'x'.repeat(n) }], mgmtdAddresses: ['127.0.0.1:1'] }) as unknown as ClusterFile
  const before = JSON.stringify(cluster(3900), null, 2) + '\n'
  const { dir } = fullDisk(t, '1m', { 'cluster.json': before })
  t.throws(() => writeClusterFile(dir, cluster(4900)), { code: 'NO_SPACE' })
  t.is(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'), before)
  t.deepEqual(fs.readdirSync(dir).sort(), ['cluster.json', 'filler'])
})

test('a daemon whose log is on a full disk keeps running, and logs again once there is room', async (t) => {
  await daemonOnFullDisk(t, {})
})

// Node's own debug output (NODE_DEBUG), its warnings and lmdb-js's console.error go through
// process.stderr, whose ENOSPC 'error' the CLI's closed-pipe handler rethrew: exit 70
test('a daemon whose stderr stream fails on a full disk (NODE_DEBUG=net writes each connection there) keeps running', async (t) => {
  await daemonOnFullDisk(t, { NODE_DEBUG: 'net' })
})

async function daemonOnFullDisk(t: ExecutionContext, env: Record<string, string>): Promise<void> {
  if (!root) {
    t.pass('mounting a tmpfs needs root')
    return
  }
  const { dir, filler } = fullDisk(t, '1m')
  const data = tmpDir(t, 'strata-mgmtd-')
  const address = `127.0.0.1:${await freePort()}`
  const config = path.join(data, 'mgmtd.json')
  fs.writeFileSync(config, JSON.stringify({ nodeId: 1, dataDir: path.join(data, 'mgmtd'), listen: address }))
  const logFile = path.join(dir, 'mgmtd.log')
  const out = fs.openSync(logFile, 'a')
  const child = spawn(process.execPath, [CLI, 'daemon', 'mgmtd', '--config', config, '--name', 'mgmtd'], {
    stdio: ['ignore', out, out],
    env: { ...process.env, STRATA_LOG_LEVEL: 'info', ...env },
  })
  fs.closeSync(out)
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  t.teardown(() => void child.kill('SIGKILL'))
  const rpc = new RpcClient({ connectTimeoutMs: 1000, defaultTimeoutMs: 5000 })
  t.teardown(() => rpc.close())
  // it logged "listening" and "started" into the full disk on its way up: alive and serving
  const echo = await Promise.race([until(() => rpc.echo(address).catch(() => undefined), 30_000, 'mgmtd answers'), exited.then((c) => `exited ${c}`)])
  t.is(typeof echo, 'object', String(echo))
  t.is(fs.statSync(logFile).size, 0)
  fs.rmSync(filler)
  child.kill('SIGTERM')
  t.is(await exited, 0)
  t.regex(fs.readFileSync(logFile, 'utf8'), /stopped/)
}
