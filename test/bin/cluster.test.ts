// `strata cluster …` and the scenario-1 listings, against real daemons
// started by the real CLI in a temp directory.
import test from 'ava'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import { randomBytes } from 'node:crypto'
import path from 'node:path'
import { fuseUsable } from '../../fs/fuse/cluster-role.js'
import { isAlive } from '../../fs/admin/index.js'
import { STRATA, ok, records, strata, table, tempDir, until } from './helpers.js'
import { divergeChunk } from '../helpers/diverge.js'

// scenario 1 is about the DFS core: no FUSE mount; the two meta servers are part of every cluster
const STD = ['--storage-nodes', '3', '--targets-per-node', '2', '--replicas', '3', '--chunk-size', '64K', '--stripe-size', '2', '--no-mount', '-q']

function csvChains(dir: string): Array<{ chainId: string; targets: string[] }> {
  const [, ...lines] = fs.readFileSync(path.join(dir, 'config', 'chains.csv'), 'utf8').trim().split('\n')
  return lines.map((l) => {
    const [chainId, ...targets] = l.split(',')
    return { chainId: chainId!, targets }
  })
}

test.serial('scenario 1: cluster up bootstraps; list-nodes, list-chain-tables, list-chains, list-targets', async (t) => {
  const dir = path.join(tempDir(t), 'c')
  const up = await ok(t, ['cluster', 'up', '--dir', dir, ...STD])
  t.regex(up, /ready in/)
  const env = { STRATA_CLUSTER: dir }

  // cluster.json describes every process
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'))
  t.deepEqual(
    c.processes.map((p: any) => [p.name, p.role, p.nodeId]),
    [
      ['mgmtd', 'mgmtd', 1],
      ['storage-1', 'storage', 10001],
      ['storage-2', 'storage', 10002],
      ['storage-3', 'storage', 10003],
      ['meta-1', 'meta', 101],
      ['meta-2', 'meta', 102],
    ],
  )
  for (const p of c.processes) {
    t.true(fs.existsSync(p.configFile) && fs.existsSync(p.logFile), p.name)
    t.regex(p.address, /^127\.0\.0\.1:\d+$/)
    t.true(p.pid > 0)
  }
  t.deepEqual(c.mgmtdAddresses, [c.processes[0].address])
  t.is(c.settings.chunkSize, 65536)

  // list-nodes: mgmtd PRIMARY_MGMTD, three storage nodes HEARTBEAT_CONNECTED ($STRATA_CLUSTER picks the cluster)
  const nodesOut = await ok(t, ['admin', 'list-nodes'], { env })
  const nodes = table(nodesOut)
  t.deepEqual(nodes[0], ['Id', 'Type', 'Status', 'Hostname', 'Pid', 'Tags', 'LastHeartbeatTime', 'ConfigVersion', 'ReleaseVersion'])
  t.deepEqual(nodes.slice(1).map((r) => r.slice(0, 3)), [
    ['1', 'MGMTD', 'PRIMARY_MGMTD'],
    ['10001', 'STORAGE', 'HEARTBEAT_CONNECTED'],
    ['10002', 'STORAGE', 'HEARTBEAT_CONNECTED'],
    ['10003', 'STORAGE', 'HEARTBEAT_CONNECTED'],
    ['101', 'META', 'HEARTBEAT_CONNECTED'],
    ['102', 'META', 'HEARTBEAT_CONNECTED'],
  ].sort((a, b) => Number(a[0]) - Number(b[0])))
  const nodesJson = JSON.parse(await ok(t, ['admin', '--cluster', dir, 'list-nodes', '--json']))
  t.is(nodesJson.length, 6)
  t.is(nodesJson.find((n: any) => n.nodeId === 10001).pid, c.processes.find((p: any) => p.name === 'storage-1').pid)

  // list-chain-tables: table 1 version 1, 2 chains of 3 replicas
  const tables = table(await ok(t, ['admin', 'list-chain-tables', '--cluster', dir]))
  t.deepEqual(tables[0], ['ChainTableId', 'ChainTableVersion', 'ChainCount', 'ReplicaCount', 'Desc'])
  t.deepEqual(tables[1]!.slice(0, 4), ['1', '1', '2', '3'])

  // list-chains: SERVING, version >= 1, targets id(SERVING-UPTODATE) in CSV order
  const expected = csvChains(dir)
  t.is(expected.length, 2)
  for (const args of [['list-chains'], ['list-chains', '-t', '1'], ['list-chains', '-t', '1', '-v', '1']]) {
    const out = await ok(t, ['admin', '--cluster', dir, ...args])
    t.deepEqual(table(out)[0], ['ChainId', 'ChainTable', 'ChainTableVersion', 'ChainVersion', 'Status', 'PreferredOrder', 'Target', 'Target', 'Target'], args.join(' '))
    const rows = records(out)
    t.deepEqual(
      rows.map((r) => r.ChainId),
      expected.map((e) => e.chainId),
    )
    for (const [i, r] of rows.entries()) {
      t.is(r.Status, 'SERVING')
      t.is(r.ChainTable, '1')
      t.is(r.ChainTableVersion, '1')
      t.true(Number(r.ChainVersion) >= 1)
      t.deepEqual(r.Target, expected[i]!.targets.map((x) => `${x}(SERVING-UPTODATE)`))
    }
  }
  const chainsJson = JSON.parse(await ok(t, ['admin', '--cluster', dir, 'list-chains', '--json']))
  t.deepEqual(chainsJson[0].targets[0], { targetId: Number(expected[0]!.targets[0]), publicState: 'SERVING', localState: 'UPTODATE' })

  // list-targets: HEAD, MIDDLE, TAIL per chain in chain order
  const targetsOut = await ok(t, ['admin', '--cluster', dir, 'list-targets'])
  t.deepEqual(table(targetsOut)[0], ['TargetId', 'ChainId', 'Role', 'PublicState', 'LocalState', 'NodeId', 'DiskIndex', 'UsedSize'])
  const trs = records(targetsOut)
  t.is(trs.length, 6)
  for (const e of expected) {
    const mine = trs.filter((r) => r.ChainId === e.chainId)
    t.deepEqual(mine.map((r) => r.TargetId), e.targets)
    t.deepEqual(mine.map((r) => r.Role), ['HEAD', 'MIDDLE', 'TAIL'])
    for (const r of mine) t.deepEqual([r.PublicState, r.LocalState], ['SERVING', 'UPTODATE'])
  }
  t.deepEqual(
    records(await ok(t, ['admin', '--cluster', dir, 'list-targets', '-c', expected[1]!.chainId])).map((r) => r.Role),
    ['HEAD', 'MIDDLE', 'TAIL'],
  )
  t.is(records(await ok(t, ['admin', '--cluster', dir, 'list-targets', '--orphan'])).length, 0)

  // cluster status --json
  const st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.true(st.running)
  t.true(st.mgmtd.reachable)
  t.deepEqual(
    st.processes.map((p: any) => [p.name, p.role, p.alive, p.nodeStatus]),
    [
      ['mgmtd', 'mgmtd', true, 'PRIMARY_MGMTD'],
      ['storage-1', 'storage', true, 'HEARTBEAT_CONNECTED'],
      ['storage-2', 'storage', true, 'HEARTBEAT_CONNECTED'],
      ['storage-3', 'storage', true, 'HEARTBEAT_CONNECTED'],
      ['meta-1', 'meta', true, 'HEARTBEAT_CONNECTED'],
      ['meta-2', 'meta', true, 'HEARTBEAT_CONNECTED'],
    ],
  )
  for (const p of st.processes) t.true(typeof p.pid === 'number' && typeof p.address === 'string')
  t.like(st.chains, { total: 2, serving: 2, syncing: 0, unavailable: 0 })
  t.regex(await ok(t, ['cluster', 'status', '--dir', dir]), /chains: 2 total, 2 SERVING/)

  // a second `up` on a running cluster is refused
  const again = await strata(['cluster', 'up', '--dir', dir, '-q'])
  t.is(again.code, 1)
  t.regex(again.stderr, /^strata: CLUSTER_RUNNING: /)
})

test.serial('kill and start a storage node: its targets go OFFLINE, then recover to SERVING on the same address', async (t) => {
  const dir = path.join(tempDir(t), 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, ...STD])
  const before = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'))
  const s2 = before.processes.find((p: any) => p.name === 'storage-2')
  const killed = JSON.parse(await ok(t, ['cluster', 'kill', '--dir', dir, '--node', 'storage-2', '--json']))
  t.like(killed, { name: 'storage-2', pid: s2.pid, signal: 'SIGKILL', exited: true })

  let st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.false(st.processes.find((p: any) => p.name === 'storage-2').alive)
  t.true(st.processes.find((p: any) => p.name === 'storage-1').alive)

  // after the heartbeat fail interval its targets are OFFLINE at the tail, chains degraded, versions bumped
  const degraded = await until('storage-2 targets OFFLINE', async () => {
    const rows = records(await ok(t, ['admin', '--cluster', dir, 'list-chains']))
    return rows.every((r) => r.Status === 'SERVING(2/3)' && (r.Target as string[])[2]!.endsWith('(OFFLINE-OFFLINE)')) ? rows : null
  })
  for (const r of degraded) t.true(Number(r.ChainVersion) >= 2)
  const nodes = JSON.parse(await ok(t, ['admin', '--cluster', dir, 'list-nodes', '--json']))
  t.is(nodes.find((n: any) => n.nodeId === 10002).status, 'HEARTBEAT_FAILED')

  // starting it again while it runs elsewhere is refused; a stopped one starts on its old port
  const started = JSON.parse(await ok(t, ['cluster', 'start', '--dir', dir, '--node', 'storage-2', '--json']))
  t.is(started.address, s2.address)
  t.not(started.pid, s2.pid)
  const twice = await strata(['cluster', 'start', '--dir', dir, '--node', 'storage-2'])
  t.is(twice.code, 1)
  t.regex(twice.stderr, /already running/)
  await until('all chains SERVING again', async () => {
    const rows = records(await ok(t, ['admin', '--cluster', dir, 'list-chains']))
    return rows.every((r) => r.Status === 'SERVING' && (r.Target as string[]).every((x) => x.endsWith('(SERVING-UPTODATE)')))
  })
  st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.true(st.processes.every((p: any) => p.alive))

  const unknown = await strata(['cluster', 'kill', '--dir', dir, '--node', 'storage-9'])
  t.is(unknown.code, 1)
  t.regex(unknown.stderr, /strata: NOT_FOUND: no process "storage-9"/)
  // a signal that is not offered is a usage error, like any bad choice
  const bogus = await strata(['cluster', 'kill', '--dir', dir, '--node', 'storage-2', '--signal', 'BOGUS'])
  t.is(bogus.code, 2)
  t.regex(bogus.stderr, /unsupported signal "BOGUS"/)
})

test.serial('a replica with a diverged chunk: status names it, a restart of the cluster does not wait for it, remove-target + create-target restore it (docs/cli.md)', async (t) => {
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '3', '--targets-per-node', '1', '--chunk-size', '64K', '--no-mount', '-q'])
  const A = ['admin', '--cluster', dir]
  const file = path.join(base, 'f')
  fs.writeFileSync(file, randomBytes(200_000))
  await ok(t, ['fs', 'put', '--cluster', dir, file, '/f'])
  const [tail] = JSON.parse(await ok(t, [...A, 'list-targets', '--json'])).filter((r: any) => r.role === 'TAIL')
  const chunk = JSON.parse(await ok(t, [...A, 'dump-chunkmeta', '--json'])).chunks.find((m: any) => m.targetId === tail.targetId)
  await ok(t, ['cluster', 'kill', '--dir', dir, '--node', 'storage-3'])
  t.is(tail.nodeId, 10003)
  await divergeChunk(path.join(dir, 'data', 'storage-3', 'targets', String(tail.targetId)), tail.targetId, Buffer.from(chunk.chunkId.replace(/-/g, ''), 'hex'), 'checksum')
  await ok(t, ['cluster', 'start', '--dir', dir, '--node', 'storage-3'])
  const problem = new RegExp(`^chain ${tail.chainId}: target ${tail.targetId} OFFLINE-OFFLINE: resync from target \\d+ found 1 diverged chunk\\(s\\): ${chunk.chunkId} \\(checksum-mismatch\\); see docs/cli.md`, 'm')
  await until('the diverged tail held offline', async () => problem.test(await ok(t, ['cluster', 'status', '--dir', dir])))

  // a whole-cluster restart: the held target would never serve; up finishes and names it
  await ok(t, ['cluster', 'down', '--dir', dir])
  const up = await ok(t, ['cluster', 'up', '--dir', dir, '-q', '--timeout', '40'])
  t.regex(up, new RegExp(`^not serving: chain ${tail.chainId}: target ${tail.targetId} is held offline by its node: resync from target \\d+ found 1 diverged chunk`, 'm'))
  t.regex(await ok(t, ['cluster', 'status', '--dir', dir]), problem)

  // the procedure of docs/cli.md
  await ok(t, [...A, 'remove-target', '--node-id', '10003', '--target-id', String(tail.targetId)])
  await ok(t, [...A, 'create-target', '--node-id', '10003', '--disk-index', '0', '--target-id', String(tail.targetId), '--chain-id', String(tail.chainId)])
  await until('chain SERVING again', async () => {
    const st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
    return st.chains.serving === 1 && st.chains.problems.length === 0
  })
  const q = records((await ok(t, [...A, 'query-chunk', '-c', String(tail.chainId), '--chunk', chunk.chunkId])).split('\n').slice(1).join('\n'))
  t.deepEqual(q.map((r) => r.Checksum), [chunk.checksum, chunk.checksum, chunk.checksum], "every replica holds the predecessor's copy")
  const back = path.join(base, 'f.back')
  await ok(t, ['fs', 'get', '--cluster', dir, '/f', back])
  t.true(fs.readFileSync(back).equals(fs.readFileSync(file)))
})

test.serial('down keeps data and ports, up starts it again, destroy refuses a running cluster unless --force', async (t) => {
  const dir = path.join(tempDir(t), 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '2', '--targets-per-node', '1', '--replicas', '2', '--no-mount', '-q'])
  const first = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'))
  const down = JSON.parse(await ok(t, ['cluster', 'down', '--dir', dir, '--json']))
  t.deepEqual(down.stopped.sort(), ['meta-1', 'meta-2', 'mgmtd', 'storage-1', 'storage-2'])
  let st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.false(st.running)
  t.true(st.processes.every((p: any) => !p.alive))
  t.false(st.mgmtd.reachable)
  t.true(fs.existsSync(first.processes[0].dataDir))

  const up = JSON.parse(await ok(t, ['cluster', 'up', '--dir', dir, '--json']))
  t.true(up.restarted)
  t.deepEqual(
    up.processes.map((p: any) => p.address),
    first.processes.map((p: any) => p.address),
  )
  const rows = records(await ok(t, ['admin', '--cluster', dir, 'list-chains']))
  t.is(rows.length, 1)
  t.is(rows[0]!.Status, 'SERVING')
  st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.true(st.processes.every((p: any) => p.alive))

  const refused = await strata(['cluster', 'destroy', '--dir', dir])
  t.is(refused.code, 1)
  t.regex(refused.stderr, /^strata: CLUSTER_RUNNING: /)
  // something left mounted below the directory (like a `strata serve` daemon's layer mounts) is
  // detached first, so removing the tree never reaches into it, and the directory still goes
  const leftover = path.join(dir, 'data', 'serve-1', 'layers', 'l1')
  fs.mkdirSync(leftover, { recursive: true })
  execFileSync('mount', ['-t', 'tmpfs', 'tmpfs', leftover])
  t.teardown(() => { spawnSync('umount', ['-l', leftover]) })
  fs.writeFileSync(path.join(leftover, 'f'), 'x')
  await ok(t, ['cluster', 'destroy', '--dir', dir, '--force'])
  t.false(fs.existsSync(dir))
  t.false(fs.readFileSync('/proc/self/mountinfo', 'utf8').includes(leftover), 'the leftover mount is detached')
  const gone = await strata(['cluster', 'status', '--dir', dir])
  t.is(gone.code, 1)
  t.regex(gone.stderr, /^strata: CLUSTER_NOT_FOUND: /)
})

test('cluster up: invalid settings are usage or argument errors, nothing is started', async (t) => {
  const base = tempDir(t)
  const bad = await strata(['cluster', 'up', '--dir', path.join(base, 'a'), '--chunk-size', 'lots'])
  t.is(bad.code, 2)
  t.regex(bad.stderr, /--chunk-size/)
  // below 4K (chunk size 1 was taken): the range is a usage error
  const tiny = await strata(['cluster', 'up', '--dir', path.join(base, 'a'), '--chunk-size', '1'])
  t.is(tiny.code, 2)
  t.regex(tiny.stderr, /^strata: usage: .*--chunk-size must be in \[4096, 2147483648\]/)
  const r = await strata(['cluster', 'up', '--dir', path.join(base, 'b'), '--replicas', '4', '-q'])
  t.is(r.code, 1)
  t.regex(r.stderr, /^strata: INVALID_ARGUMENT: 4 replicas need at least 4 storage nodes/)
  const p2 = await strata(['cluster', 'up', '--dir', path.join(base, 'c'), '--chunk-size', '96K', '-q'])
  t.is(p2.code, 1)
  t.regex(p2.stderr, /power of two/)
  t.false(fs.existsSync(path.join(base, 'b', 'cluster.json')))
  // refused before anything starts: no DIR is left behind (nor parents it made), an existing DIR stays
  for (const d of ['a', 'b', 'c']) t.false(fs.existsSync(path.join(base, d)), d)
  const ports = await strata(['cluster', 'up', '--dir', path.join(base, 'p', 'q'), '--no-sandbox', '--no-mount', '--base-port', '65533', '-q'])
  t.is(ports.code, 1)
  t.regex(ports.stderr, /^strata: INVALID_ARGUMENT: --base-port 65533 leaves no room for \d+ ports/m)
  t.false(fs.existsSync(path.join(base, 'p')))
  fs.mkdirSync(path.join(base, 'mine'))
  t.is((await strata(['cluster', 'up', '--dir', path.join(base, 'mine'), '--no-sandbox', '--no-mount', '--base-port', '65533', '-q'])).code, 1)
  t.deepEqual(fs.readdirSync(path.join(base, 'mine')), [])
  const none = await strata(['cluster', 'status', '--dir', path.join(base, 'nothing')])
  t.is(none.code, 1)
  t.regex(none.stderr, /CLUSTER_NOT_FOUND/)
  // a file where DIR (or a directory above it) should be: named as such, not mkdir's raw EEXIST/ENOTDIR
  const file = path.join(base, 'file')
  fs.writeFileSync(file, 'x')
  for (const [d, why] of [[file, 'is a file, not a directory'], [path.join(file, 'sub'), 'has a file, not a directory, in its path']] as const) {
    const r = await strata(['cluster', 'up', '--dir', d, '-q'])
    t.is(r.code, 1, d)
    t.is(r.stderr, `strata: INVALID_ARGUMENT: cluster directory ${d} ${why}\n`)
  }
  t.is(fs.readFileSync(file, 'utf8'), 'x')
})

test.serial('every process killed without `cluster down`: `cluster up` starts them all again, twice', async (t) => {
  t.timeout(4 * 60_000)
  const dir = path.join(tempDir(t), 'c')
  // with the FUSE mount when this machine has FUSE: a killed daemon leaves a dead mount behind
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '2', '--targets-per-node', '1', '--replicas', '2', '--no-sandbox', '-q'])
  const names = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8')).processes.map((p: any) => p.name) as string[]
  const killAll = async () => {
    // clients first, mgmtd last, the order the tester used
    for (const n of [...names].reverse()) await ok(t, ['cluster', 'kill', '--dir', dir, '--node', n])
  }
  await killAll()
  const up = JSON.parse(await ok(t, ['cluster', 'up', '--dir', dir, '--json', '-q']))
  t.true(up.restarted)
  let st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.deepEqual(st.processes.filter((p: any) => !p.alive).map((p: any) => p.name), [])
  t.like(st.chains, { total: 1, serving: 1 })
  // a second time: pids recorded by the restart are stale again
  await killAll()
  await ok(t, ['cluster', 'up', '--dir', dir, '-q'])
  st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.true(st.processes.every((p: any) => p.alive))
})

const fuseTest = fuseUsable() && process.getuid?.() === 0 ? test.serial : test.skip

fuseTest('unusable mount points are refused before anything starts (cluster up, fs mount); fs mount on a stopped cluster fails at once', async (t) => {
  t.timeout(4 * 60_000)
  const base = tempDir(t)
  // a fresh cluster whose DIR/mnt already holds a file: nothing is started or written
  const fresh = path.join(base, 'fresh')
  fs.mkdirSync(path.join(fresh, 'mnt'), { recursive: true })
  fs.writeFileSync(path.join(fresh, 'mnt', 'oops'), '')
  const r0 = await strata(['cluster', 'up', '--dir', fresh, '--no-sandbox', '-q'])
  t.is(r0.code, 1)
  t.regex(r0.stderr, /^strata: INVALID_ARGUMENT: cannot start fuse-1: mount point \S+\/mnt is not empty \(1 entry: oops\)/m)
  t.false(fs.existsSync(path.join(fresh, 'cluster.json')))

  const dir = path.join(base, 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--no-sandbox', '-q'])
  const noMount = (d: string) => fs.readdirSync(path.join(d, 'config')).filter((f) => f.startsWith('mount-'))
  // fs mount on a regular file, under a file, on a non-empty directory: INVALID_ARGUMENT, nothing left behind
  const file = path.join(base, 'afile')
  fs.writeFileSync(file, 'x')
  const full = path.join(base, 'full')
  fs.mkdirSync(full)
  fs.writeFileSync(path.join(full, 'x'), '')
  for (const [mnt, re] of [
    [file, /mount point \S+ is not a directory/],
    [path.join(file, 'sub'), /a component of the path is not a directory/],
    [full, /mount point \S+ is not empty \(1 entry: x\)/],
  ] as const) {
    const r = await strata(['fs', 'mount', mnt, '--cluster', dir])
    t.is(r.code, 1, mnt)
    t.regex(r.stderr, /^strata: INVALID_ARGUMENT: /m, mnt)
    t.regex(r.stderr, re, mnt)
    t.notRegex(r.stderr, /\n\s+at /, 'no stack trace')
  }
  t.deepEqual(noMount(dir), [])

  // the restart of a stopped cluster whose mount point got a file: refused, nothing started
  await ok(t, ['cluster', 'down', '--dir', dir])
  fs.writeFileSync(path.join(dir, 'mnt', 'oops'), '')
  const r1 = await strata(['cluster', 'up', '--dir', dir, '-q'])
  t.is(r1.code, 1)
  t.regex(r1.stderr, /^strata: INVALID_ARGUMENT: cannot start fuse-1: mount point \S+\/mnt is not empty/m)
  t.false(JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json'])).running)

  // fs mount with the cluster stopped: at once, like the other fs commands
  const t0 = Date.now()
  const r2 = await strata(['fs', 'mount', path.join(base, 'm'), '--cluster', dir, '--wait-timeout', '600'])
  t.is(r2.code, 1)
  t.regex(r2.stderr, /^strata: RPC_CONNECT_FAILED: no mgmtd accepts connections/m)
  // a hang guard, not timing: waiting for the cluster would take the 10 min --wait-timeout or the 60 s retry budget
  t.log(`fs mount failed after ${Date.now() - t0} ms`)
  t.true(Date.now() - t0 < 30_000, `took ${Date.now() - t0} ms`)
  t.deepEqual(noMount(dir), [])

  // emptied again, it starts
  fs.rmSync(path.join(dir, 'mnt', 'oops'))
  await ok(t, ['cluster', 'up', '--dir', dir, '-q'])
  t.true(JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json'])).processes.every((p: any) => p.alive))
})

test.serial('SIGINT during a fresh cluster up stops what it started and says so; a later up starts over', async (t) => {
  t.timeout(3 * 60_000)
  const dir = path.join(tempDir(t), 'c')
  const child = spawn(process.execPath, [STRATA, 'cluster', 'up', '--dir', dir, '--storage-nodes', '2', '--targets-per-node', '1', '--replicas', '2', '--no-mount', '--no-sandbox'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, STRATA_CLUSTER: '' },
  })
  t.teardown(() => void child.kill('SIGKILL'))
  let stderr = ''
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
  // interrupted once mgmtd runs: the half-bootstrapped cluster the tester found left running
  const started = new Promise<void>((r) =>
    child.stderr.on('data', (d) => {
      stderr += d
      if (/ok: starting mgmtd/.test(stderr)) r()
    }),
  )
  await Promise.race([started, exited])
  child.kill('SIGINT')
  t.is(await exited, 130, stderr)
  t.regex(stderr, /^strata: CANCELLED: cluster up interrupted by SIGINT while [^;]+; stopped (\S+, )*mgmtd$/m)
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'))
  const st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.false(st.running, JSON.stringify(st.processes))
  for (const p of c.processes) t.is(p.pid, null, p.name)
  const up = JSON.parse(await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '2', '--targets-per-node', '1', '--replicas', '2', '--no-mount', '--no-sandbox', '--json', '-q']))
  t.false(up.restarted)
  t.is(up.state, 'ready')
})

test('destroy --force of a directory whose cluster.json is some other tool\'s (not a Strata cluster) removes nothing; a Strata one with no process left is cleaned up', async (t) => {
  const base = tempDir(t)
  const foreign = path.join(base, 'project')
  for (const sub of ['data', 'config', 'logs']) fs.mkdirSync(path.join(foreign, sub), { recursive: true })
  fs.writeFileSync(path.join(foreign, 'cluster.json'), '{"apiVersion": "v1", "kind": "Cluster"}\n')
  fs.writeFileSync(path.join(foreign, 'data', 'keep.db'), 'precious')
  fs.writeFileSync(path.join(foreign, 'config', 'app.yaml'), 'a: 1\n')
  fs.writeFileSync(path.join(foreign, 'logs', 'app.log'), 'log\n')
  const r = await strata(['cluster', 'destroy', '--force', '--dir', foreign])
  t.is(r.code, 1)
  t.regex(r.stderr, /^strata: BAD_CONFIG: .*does not look like a Strata cluster directory.*nothing was stopped or removed\n$/)
  for (const f of ['cluster.json', 'data/keep.db', 'config/app.yaml', 'logs/app.log']) t.true(fs.existsSync(path.join(foreign, f)), f)

  // what `cluster up` leaves before its daemons run (config/mgmtd.json), cluster.json cut short
  const dir = path.join(base, 'c')
  for (const sub of ['data/mgmtd', 'config', 'logs']) fs.mkdirSync(path.join(dir, sub), { recursive: true })
  fs.writeFileSync(path.join(dir, 'config', 'mgmtd.json'), JSON.stringify({ nodeId: 1, dataDir: path.join(dir, 'data', 'mgmtd'), listen: '127.0.0.1:1' }))
  fs.writeFileSync(path.join(dir, 'cluster.json'), '{"version": 1, "na')
  const d = await ok(t, ['cluster', 'destroy', '--force', '--dir', dir, '--json'])
  t.regex(JSON.parse(d).unreadableDescription, /JSON/)
  t.false(fs.existsSync(dir))
})

test('destroy --force with a corrupt cluster.json stops a daemon started through a symlink to DIR', async (t) => {
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  const link = path.join(base, 'link')
  for (const sub of ['data/mgmtd', 'data/storage-1', 'config', 'logs']) fs.mkdirSync(path.join(dir, sub), { recursive: true })
  fs.symlinkSync(dir, link)
  fs.writeFileSync(path.join(dir, 'config', 'mgmtd.json'), JSON.stringify({ nodeId: 1, dataDir: path.join(dir, 'data', 'mgmtd'), listen: '127.0.0.1:1' }))
  fs.writeFileSync(path.join(dir, 'config', 'storage-1.json'), JSON.stringify({ nodeId: 10001, dataDir: path.join(dir, 'data', 'storage-1'), listen: '127.0.0.1:2' }))
  // the cluster's storage daemon as `cluster up --dir LINK` would have started it (a stand-in that only waits)
  const daemon = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'strata.js', 'daemon', 'storage', '--config', path.join(link, 'config', 'storage-1.json'), '--name', 'storage-1'], { stdio: 'ignore' })
  t.teardown(() => { daemon.kill('SIGKILL') })
  const config = path.join(link, 'config', 'storage-1.json')
  await until('the stand-in daemon runs', async () => isAlive(daemon.pid, config))
  fs.writeFileSync(path.join(dir, 'cluster.json'), '{"version": 1, "na')
  const r = JSON.parse(await ok(t, ['cluster', 'destroy', '--force', '--dir', dir, '--json']))
  t.deepEqual(r.stopped, [`storage-1 (pid ${daemon.pid})`])
  t.false(isAlive(daemon.pid, config), 'the daemon was stopped before its data went')
  t.false(fs.existsSync(dir))
})

test.serial('a corrupt cluster.json: status, down and destroy name destroy --force; destroy --force stops the processes and mounts without it, nothing outside DIR', async (t) => {
  t.timeout(4 * 60_000)
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  const mount = fuseUsable() && process.getuid?.() === 0
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--no-sandbox', ...(mount ? [] : ['--no-mount']), '-q'])
  const c = JSON.parse(fs.readFileSync(path.join(dir, 'cluster.json'), 'utf8'))
  const procs: Array<{ pid: number; configFile: string }> = c.processes
  const mnt = path.join(dir, 'mnt')
  const mounted = () => fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').some((l) => l.split(' ')[4] === mnt)
  if (mount) t.true(mounted(), 'fuse-1 mounted DIR/mnt')
  // a daemon of another directory whose name starts like DIR's: never touched
  const other = `${dir}-old`
  fs.mkdirSync(path.join(other, 'config'), { recursive: true })
  fs.writeFileSync(path.join(other, 'config', 'storage-1.json'), '{}')
  const decoy = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', 'strata.js', 'daemon', 'storage', '--config', path.join(other, 'config', 'storage-1.json'), '--name', 'storage-1'], { stdio: 'ignore' })
  // cluster.json no longer names the processes: the teardown (tempDir) cannot find them, so it is done here
  t.teardown(() => {
    decoy.kill('SIGKILL')
    for (const p of procs) if (isAlive(p.pid, p.configFile)) process.kill(p.pid, 'SIGKILL')
    spawnSync('umount', ['-l', mnt])
  })
  fs.writeFileSync(path.join(dir, 'cluster.json'), '{"version": 1, "name": "c", "proc')

  for (const args of [['status'], ['down'], ['destroy']]) {
    const r = await strata(['cluster', ...args, '--dir', dir])
    t.is(r.code, 1, args[0])
    t.regex(r.stderr, /^strata: BAD_CONFIG: \S+\/cluster\.json is not a cluster description: .*; restore it, or stop what the cluster runs and delete \S+ with: strata cluster destroy --force --dir \S+\n$/, args[0])
  }
  t.true(procs.every((p) => isAlive(p.pid, p.configFile)), 'nothing was stopped')

  const d = await ok(t, ['cluster', 'destroy', '--dir', dir, '--force', '--json'])
  const r = JSON.parse(d)
  t.regex(r.unreadableDescription, /JSON/)
  t.deepEqual(r.stopped.map((s: string) => s.split(' ')[0]).sort(), c.processes.map((p: any) => p.name).sort())
  t.true(procs.every((p) => !isAlive(p.pid, p.configFile)), 'every process of the cluster is stopped')
  t.false(mounted(), 'no mount left below DIR')
  t.false(fs.existsSync(dir))
  t.is(decoy.exitCode, null, 'the other directory\'s daemon still runs')
  t.true(fs.existsSync(path.join(other, 'config', 'storage-1.json')))
})
