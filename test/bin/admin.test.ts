// `strata admin …` against real daemons: a lone mgmtd, the 3FS deploy flow
// run by hand on a --no-bootstrap cluster, and scenario 26 (operator surface).
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { crc32c } from '@node-rs/crc32'
import { chunkIdOf, formatChunkId, formatChunkIdHex } from '../../fs/common/chunk-id.js'
import { ServiceId, StorageMethod } from '../../fs/common/services.js'
import { RpcClient } from '../../fs/rpc/index.js'
import type { WriteReq } from '../../fs/storage/protocol.js'
import { loneMgmtd, ok, records, strata, table, tempDir, until } from './helpers.js'

test('a lone mgmtd: init-cluster, register-node, configs, CSV checks, usage errors (--mgmtd-address)', async (t) => {
  const { dir, A, child } = await loneMgmtd(t)

  t.regex(await ok(t, [...A, 'init-cluster', '1', '64K', '2']), /chain table 1, chunksize 65536/)
  t.regex(await ok(t, [...A, 'init-cluster', '1', '65536', '2']), /already initialized/, 'same settings again: a no-op')
  const again = await strata([...A, 'init-cluster', '1', '1M', '2'])
  t.is(again.code, 1)
  t.regex(again.stderr, /^strata: MGMTD_ALREADY_INITIALIZED: /)
  t.is((await strata([...A, 'init-cluster', '1', '65536', '2', '--allow-config-existed'])).code, 0)
  const tiny = await strata([...A, 'init-cluster', '1', '1000', '2'])
  t.is(tiny.code, 2, 'below 4K: a usage error')
  t.regex(tiny.stderr, /chunkSize must be in \[4096, 2147483648\]/)
  const odd = await strata([...A, 'init-cluster', '1', '5000', '2'])
  t.is(odd.code, 1, 'in range but not a power of two: the operation refuses it')
  t.regex(odd.stderr, /power of two/)

  t.regex(await ok(t, [...A, 'register-node', '50', 'META']), /Register node 50 of type META succeeded/)
  const dup = await strata([...A, 'register-node', '50', 'META'])
  t.is(dup.code, 1)
  // a registered node that never heartbeats turns HEARTBEAT_FAILED once the heartbeat timeout passes, which a loaded machine reaches before this line
  t.regex(dup.stderr, /^strata: MGMTD_REGISTER_FAIL: node id 50 is already registered \(type META, status HEARTBEAT_(CONNECTING|FAILED)\)/)
  const nodes = records(await ok(t, [...A, 'list-nodes']))
  t.deepEqual(
    nodes.map((n) => [n.Id, n.Type]),
    [
      ['1', 'MGMTD'],
      ['50', 'META'],
    ],
  )
  t.deepEqual(nodes.map((n) => n.LastHeartbeatTime), ['N/A', 'N/A'], 'mgmtd does not heartbeat to itself; node 50 never heartbeated')
  t.is(nodes[0]!.Status, 'PRIMARY_MGMTD')
  t.true(['HEARTBEAT_CONNECTING', 'HEARTBEAT_FAILED'].includes(nodes[1]!.Status as string), 'registered, never heartbeated')
  t.is((await strata([...A, 'register-node', '51', 'BOGUS'])).code, 2)

  // configs
  const conf = path.join(dir, 'storage.toml')
  fs.writeFileSync(conf, '[server]\nthreads = 4\n')
  t.deepEqual(table(await ok(t, [...A, 'set-config', '--type', 'STORAGE', '--file', conf, '--desc', 'first'])), [['Succeed'], ['ConfigVersion', '1']])
  const got = await ok(t, [...A, 'get-config', '--type', 'STORAGE'])
  t.regex(got, /NodeType\s+STORAGE\nConfigVersion\s+1\nConfigDesc\s+first\n\[server\]\nthreads = 4\n/)
  const outFile = path.join(dir, 'out.toml')
  await ok(t, [...A, 'get-config', '-t', 'STORAGE', '-o', outFile])
  t.is(fs.readFileSync(outFile, 'utf8'), '[server]\nthreads = 4\n')
  t.regex(await ok(t, [...A, 'get-config', '-t', 'FUSE']), /ConfigVersion\s+null/)
  t.deepEqual(JSON.parse(await ok(t, [...A, 'get-config', '-t', 'STORAGE', '--json'])), { nodeType: 'STORAGE', configVersion: 1, content: '[server]\nthreads = 4\n', desc: 'first', exists: true })
  t.is((await strata([...A, 'set-config', '--type', 'STORAGE'])).code, 2)

  // nothing exists yet: listings are headers only, CSVs naming unknown things are refused
  t.deepEqual(table(await ok(t, [...A, 'list-chains'])), [['ChainId', 'ChainTable', 'ChainTableVersion', 'ChainVersion', 'Status', 'PreferredOrder']])
  t.deepEqual(table(await ok(t, [...A, 'list-chain-tables'])), [['ChainTableId', 'ChainTableVersion', 'ChainCount', 'ReplicaCount', 'Desc']])
  t.deepEqual(JSON.parse(await ok(t, [...A, 'list-targets', '--json'])), [])
  const chains = path.join(dir, 'chains.csv')
  fs.writeFileSync(chains, 'ChainId,TargetId\n1,101\n')
  const unknown = await strata([...A, 'upload-chains', chains])
  t.is(unknown.code, 1)
  t.regex(unknown.stderr, /^strata: INVALID_ARGUMENT: invalid .*chains\.csv: line 2: unknown target 101/)
  const tableCsv = path.join(dir, 'table.csv')
  fs.writeFileSync(tableCsv, 'ChainId\n1\n')
  const noChain = await strata([...A, 'upload-chain-table', '1', tableCsv])
  t.is(noChain.code, 1)
  t.regex(noChain.stderr, /unknown chain 1/)

  // usage errors exit 2
  for (const args of [
    ['update-chain', '1', '2', '-m', 'sideways'],
    ['update-chain', '1'],
    ['list-chains', '-t', 'x'],
    ['list-chains', '-v', '2'],
    ['create-target', '--node-id', '1'],
    ['query-chunk', '--chunk', '00'],
    ['upload-chain-table', '1'],
    ['no-such-command'],
  ]) {
    const r = await strata([...A, ...args])
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
  }
  // no cluster description and no address: a clear error
  const none = await strata(['admin', '--cluster', path.join(dir, 'nothing'), 'list-nodes'])
  t.is(none.code, 1)
  t.regex(none.stderr, /^strata: CLUSTER_NOT_FOUND: /)
  // mgmtd gone: a transport error, exit 1
  child.kill('SIGKILL')
  await until('mgmtd gone', async () => child.exitCode !== null || child.signalCode !== null, 5000, 50)
  const down = await strata([...A, '--timeout', '2', 'list-nodes'])
  t.is(down.code, 1)
  t.regex(down.stderr, /^strata: RPC_CONNECT_FAILED: no mgmtd accepts connections at 127\.0\.0\.1:\d+: is the cluster running\?/)
})

test.serial('the 3FS deploy flow by hand: init-cluster, create-target, upload-chains, upload-chain-table; query-chunk, dump-chunkmeta, update-chain', async (t) => {
  const dir = path.join(tempDir(t), 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--no-bootstrap', '-q'])
  const A = ['admin', '--cluster', dir]
  const cfgDir = path.join(dir, 'config')
  await ok(t, [...A, 'init-cluster', '1', '65536', '2'])
  const cmds = fs.readFileSync(path.join(cfgDir, 'create_target_cmd.txt'), 'utf8').trim().split('\n')
  t.is(cmds.length, 6)
  for (const line of cmds) t.regex(await ok(t, [...A, ...line.split(' ')]), /^Create target \d+ on disk \d of 1000\d succeeded\n$/)
  await until('targets reported', async () => records(await ok(t, [...A, 'list-targets', '--orphan'])).length === 6)
  t.deepEqual(table(await ok(t, [...A, 'list-targets', '--orphan']))[0], ['TargetId', 'LocalState', 'NodeId', 'DiskIndex', 'UsedSize'])
  t.regex(await ok(t, [...A, 'upload-chains', path.join(cfgDir, 'chains.csv')]), /Upload 2 chains succeeded/)
  t.regex(await ok(t, [...A, 'upload-chain-table', '1', path.join(cfgDir, 'chain-table.csv'), '--desc', 'replica-3']), /Upload chain table 1 of version 1 succeeded/)
  const rows = await until('chains serving', async () => {
    const r = records(await ok(t, [...A, 'list-chains']))
    return r.length === 2 && r.every((x) => (x.Target as string[]).every((y) => y.endsWith('(SERVING-UPTODATE)'))) ? r : null
  })
  t.deepEqual(records(await ok(t, [...A, 'list-chain-tables'])).map((r) => [r.ChainTableId, r.ChainTableVersion, r.ChainCount, r.ReplicaCount, r.Desc]), [['1', '1', '2', '3', 'replica-3']])
  // same table again: no new version; dump-chains round-trips the CSV
  t.regex(await ok(t, [...A, 'upload-chain-table', '1', path.join(cfgDir, 'chain-table.csv')]), /of version 1 /)
  t.is(await ok(t, [...A, 'dump-chains']), fs.readFileSync(path.join(cfgDir, 'chains.csv'), 'utf8'))
  t.is(await ok(t, [...A, 'dump-chain-table', '1']), fs.readFileSync(path.join(cfgDir, 'chain-table.csv'), 'utf8'))

  // write one chunk through the head, then look at it on every replica
  const chainId = Number(rows[0]!.ChainId)
  const head = Number((rows[0]!.Target as string[])[0]!.split('(')[0])
  const nodes = JSON.parse(await ok(t, [...A, 'list-nodes', '--json']))
  const targets = JSON.parse(await ok(t, [...A, 'list-targets', '--json']))
  const headNode = targets.find((x: any) => x.targetId === head).nodeId
  const address = nodes.find((n: any) => n.nodeId === headNode).address
  const chainVer = JSON.parse(await ok(t, [...A, 'list-chains', '--json'])).find((c: any) => c.chainId === chainId).chainVersion
  const data = Buffer.alloc(10_000, 7)
  const chunkId = chunkIdOf(0x10n, 3)
  const rpc = new RpcClient()
  t.teardown(() => rpc.close())
  // createTarget's chunk sizes are held to a new layout's, 4K to 2G (1 was recorded)
  const badSizes = await t.throwsAsync(rpc.call(address, ServiceId.Storage, StorageMethod.createTarget, { targetId: head, chainId, diskIndex: 0, chunkSizes: [65536, 1] }))
  t.is((badSizes as { code?: string }).code, 'INVALID_ARGUMENT')
  t.regex(badSizes!.message, /a chunk size must be a power of two from 4K to 2G \(4096 to 2147483648\), got 1/)
  const req: WriteReq = {
    io: { key: { chainId, chainVer, chunkId }, offset: 0, length: data.length, chunkSize: 65536, data, updateVer: 0, updateType: 'WRITE', checksum: crc32c(data) },
    tag: { clientId: 'admin-test', requestId: 1, channel: { id: 1, seqnum: 1 } },
  }
  await rpc.call(address, ServiceId.Storage, StorageMethod.write, req)
  for (const id of [formatChunkId(chunkId), formatChunkIdHex(chunkId), chunkId.toString('hex')]) {
    const out = await ok(t, [...A, 'query-chunk', '-c', String(chainId), '--chunk', id])
    const lines = out.trim().split('\n')
    t.is(lines[0], `ChunkId ${formatChunkIdHex(chunkId)} on chain ${chainId}`)
    const q = records(lines.slice(1).join('\n'))
    t.deepEqual(q.map((r) => r.TargetId), (rows[0]!.Target as string[]).map((x) => x.split('(')[0]))
    for (const r of q) t.like(r, { Size: '10000', ChunkSize: '65536', CommitVer: '1', UpdateVer: '1', Checksum: q[0]!.Checksum, State: 'COMMIT', Error: 'OK' })
  }
  const qj = JSON.parse(await ok(t, [...A, 'query-chunk', '-c', String(chainId), '--chunk', formatChunkId(chunkId), '--json']))
  t.is(qj.targets.length, 3)
  t.is(qj.targets[0].meta.checksum, crc32c(data).toString(16).padStart(8, '0'))
  const missing = records((await ok(t, [...A, 'query-chunk', '-c', String(chainId), '--chunk', formatChunkId(chunkIdOf(0x10n, 4))])).split('\n').slice(1).join('\n'))
  t.true(missing.every((r) => r.Error === 'CHUNK_NOT_FOUND'))
  const badChunk = await strata([...A, 'query-chunk', '-c', String(chainId), '--chunk', 'zz'])
  t.is(badChunk.code, 2)
  t.regex(badChunk.stderr, /^strata: usage: option '--chunk <id>' argument 'zz' is invalid\. not a chunk id/)

  const dump = await ok(t, [...A, 'dump-chunkmeta'])
  t.deepEqual(table(dump)[0], ['ChainId', 'TargetId', 'ChunkId', 'Size', 'ChunkSize', 'CommitVer', 'UpdateVer', 'ChainVer', 'Checksum', 'State', 'RecycleState'])
  const dumped = records(dump)
  t.is(dumped.length, 3)
  t.true(dumped.every((r) => r.ChunkId === formatChunkIdHex(chunkId) && r.Size === '10000' && r.ChainId === String(chainId)))
  const metaDir = path.join(dir, 'chunkmeta')
  const dj = JSON.parse(await ok(t, [...A, 'dump-chunkmeta', '-c', String(chainId), '-m', metaDir, '--json']))
  t.is(dj.chunks.length, 3)
  t.is(fs.readdirSync(metaDir).length, 3)
  t.is(records(await ok(t, [...A, 'dump-chunkmeta', '-c', rows[1]!.ChainId as string])).length, 0)

  // update-chain remove / add: the target leaves (orphan), comes back WAITING/SYNCING and ends SERVING with the data
  const tail = Number((rows[0]!.Target as string[])[2]!.split('(')[0])
  const removed = table(await ok(t, [...A, 'update-chain', String(chainId), String(tail), '-m', 'remove']))
  t.deepEqual(removed[0], ['ChainId', String(chainId)])
  t.is(removed.filter((r) => r[0] === 'Target').length, 2)
  t.true(records(await ok(t, [...A, 'list-targets', '--orphan'])).some((r) => r.TargetId === String(tail)))
  const added = JSON.parse(await ok(t, [...A, 'update-chain', String(chainId), String(tail), '-m', 'add', '--json']))
  t.is(added.targets.length, 3)
  // as 3FS prints it: the chain as the update committed it, the added target OFFLINE
  t.like(added.targets[2], { targetId: tail, publicState: 'OFFLINE' })
  await until('re-added target serving', async () => {
    const c = JSON.parse(await ok(t, [...A, 'list-chains', '--json'])).find((x: any) => x.chainId === chainId)
    return c.targets.every((x: any) => x.publicState === 'SERVING' && x.localState === 'UPTODATE')
  })
  const after = records((await ok(t, [...A, 'query-chunk', '-c', String(chainId), '--chunk', formatChunkId(chunkId)])).split('\n').slice(1).join('\n'))
  t.true(after.every((r) => r.Size === '10000' && r.Error === 'OK'))
  // no LASTSRV head: as in 3FS, the chain is left as it is (same version) and that is no error
  const before = JSON.parse(await ok(t, [...A, 'list-chains', '--json'])).find((x: any) => x.chainId === chainId)
  const rot = JSON.parse(await ok(t, [...A, 'rotate-lastsrv', String(chainId), '--json']))
  t.is(rot.chainVersion, before.chainVersion)
  t.deepEqual(rot.targets.map((x: any) => x.targetId), before.targets.map((x: any) => x.targetId))
})

test.serial('scenario 26: headers, upload-chains -d, invalid CSVs rejected, offline-target of a sole replica needs --force', async (t) => {
  const dir = path.join(tempDir(t), 'c')
  // admin commands only: no FUSE mount or sandbox daemon to start and stop
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '2', '--targets-per-node', '1', '--replicas', '1', '--no-mount', '--no-sandbox', '-q'])
  const A = ['admin', '--cluster', dir]
  t.deepEqual(table(await ok(t, [...A, 'list-chains']))[0], ['ChainId', 'ChainTable', 'ChainTableVersion', 'ChainVersion', 'Status', 'PreferredOrder', 'Target'])
  t.deepEqual(table(await ok(t, [...A, 'list-targets']))[0], ['TargetId', 'ChainId', 'Role', 'PublicState', 'LocalState', 'NodeId', 'DiskIndex', 'UsedSize'])
  t.deepEqual(table(await ok(t, [...A, 'list-chain-tables']))[0], ['ChainTableId', 'ChainTableVersion', 'ChainCount', 'ReplicaCount', 'Desc'])
  t.deepEqual(table(await ok(t, [...A, 'list-nodes']))[0], ['Id', 'Type', 'Status', 'Hostname', 'Pid', 'Tags', 'LastHeartbeatTime', 'ConfigVersion', 'ReleaseVersion'])

  // templates
  const tmpl = await ok(t, [...A, 'upload-chains', '-d'])
  t.is(tmpl, 'ChainId,TargetId,TargetId\n123,100001,100101\n234,100002,100102\n')
  const tf = path.join(dir, 'template.csv')
  t.is(await ok(t, [...A, 'upload-chains', '--dump-template', tf]), `Dump template to ${tf} succeeded\n`)
  t.is(fs.readFileSync(tf, 'utf8'), tmpl)
  t.is(await ok(t, [...A, 'upload-chain-table', '-d']), 'ChainId\n123\n234\n')

  // invalid chain CSVs: non-zero exit, clear message, nothing changed
  const targets = JSON.parse(await ok(t, [...A, 'list-targets', '--json']))
  const [t1, t2] = targets.map((x: any) => x.targetId)
  const before = await ok(t, [...A, 'list-chains', '--json'])
  const cases: Array<[string, RegExp]> = [
    ['ChainId,TargetId\n900,12345\n', /unknown target 12345/],
    [`ChainId,TargetId,TargetId\n900,${t1},${t1}\n`, /duplicate target/],
    [`ChainId,TargetId\n900,${t1}\n901,${t1}\n`, /line 3: duplicate target/],
    [`ChainId,TargetId\n900,${t2}\n`, /already belongs to chain/],
    ['Chain,TargetId\n900,1\n', /column\[0\] expected 'ChainId'/],
    ['ChainId,TargetId\n900,abc\n', /"abc" is not a number/],
    ['ChainId,TargetId\n900\n', /expected 2 columns/],
    ['', /empty/],
  ]
  for (const [i, [csv, re]] of cases.entries()) {
    const f = path.join(dir, `bad${i}.csv`)
    fs.writeFileSync(f, csv)
    const r = await strata([...A, 'upload-chains', f])
    t.is(r.code, 1, csv)
    t.regex(r.stderr, /^strata: INVALID_ARGUMENT: invalid /)
    t.regex(r.stderr, re)
    t.is(r.stdout, '')
  }
  const badTable = path.join(dir, 'badtable.csv')
  fs.writeFileSync(badTable, 'ChainId,TargetId\n1,2\n')
  t.is((await strata([...A, 'upload-chain-table', '1', badTable])).code, 1)
  t.is(await ok(t, [...A, 'list-chains', '--json']), before)

  // a --node-id the target is not on: named as such, not asked ("no target on this node"), for offline and remove alike
  for (const cmd of ['offline-target', 'remove-target']) {
    const wrong = await strata([...A, cmd, '--target-id', String(t1), '--node-id', '10002'])
    t.is(wrong.code, 1, cmd)
    t.regex(wrong.stderr, new RegExp(`^strata: MGMTD_TARGET_NOT_FOUND: target ${t1} is on node 10001, not on node 10002`), cmd)
    const unknown = await strata([...A, cmd, '--target-id', '424242', '--node-id', '10002'])
    t.is(unknown.code, 1, cmd)
    t.regex(unknown.stderr, /^strata: TARGET_NOT_FOUND: storage node 10002 has no target 424242$/m, cmd)
  }
  // offline-target on the only SERVING replica: refused without --force
  const chainOfT1 = targets.find((x: any) => x.targetId === t1).chainId
  const refused = await strata([...A, 'offline-target', '--target-id', String(t1)])
  t.is(refused.code, 1)
  t.regex(refused.stderr, new RegExp(`^strata: MGMTD_REFUSED: target ${t1} is the only SERVING replica of chain ${chainOfT1}`))
  t.regex(await ok(t, [...A, 'list-chains']), /SERVING-UPTODATE/)
  t.regex(await ok(t, [...A, 'offline-target', '--target-id', String(t1), '--force']), new RegExp(`Offline target ${t1} of 10001 succeeded`))
  await until('chain unavailable', async () => {
    const c = JSON.parse(await ok(t, [...A, 'list-chains', '--json'])).find((x: any) => x.chainId === chainOfT1)
    return c.status === 'UNAVAILABLE' && c.targets[0].localState === 'OFFLINE'
  })
  const st = JSON.parse(await ok(t, ['cluster', 'status', '--dir', dir, '--json']))
  t.like(st.chains, { total: 2, serving: 1, unavailable: 1 })
  // the node holds it offline until it restarts: status says which target and why
  t.deepEqual(st.chains.problems, [{ chainId: chainOfT1, targetId: t1, publicState: 'LASTSRV', localState: 'OFFLINE', reason: 'offline-target' }])
  t.regex(await ok(t, ['cluster', 'status', '--dir', dir]), new RegExp(`^chain ${chainOfT1}: target ${t1} LASTSRV-OFFLINE: offline-target$`, 'm'))
  t.like(JSON.parse(await ok(t, [...A, 'list-targets', '--json'])).find((x: any) => x.targetId === t1), { offlineReason: 'offline-target' })
})

test('local path errors, u32 chain table ids, -d templates and CSV-only commands refusing --json', async (t) => {
  const { dir, A, cfg } = await loneMgmtd(t)

  // a directory where a file is wanted, a file where a directory is wanted: INVALID_ARGUMENT (docs/errors.md)
  const isDir = await strata([...A, 'upload-chains', dir])
  t.is(isDir.code, 1)
  t.regex(isDir.stderr, /^strata: INVALID_ARGUMENT: cannot read chains CSV .*EISDIR/m)
  const notDir = await strata(['cluster', 'status', '--dir', cfg])
  t.is(notDir.code, 1)
  t.regex(notDir.stderr, /^strata: INVALID_ARGUMENT: cannot read .*ENOTDIR/m)

  // upload-chain-table -d PATH needs no table id, as upload-chains -d; ids are u32
  const tpl = path.join(dir, 'tpl.csv')
  t.regex(await ok(t, [...A, 'upload-chain-table', '-d', tpl]), /Dump template to .*tpl\.csv succeeded/)
  t.is(fs.readFileSync(tpl, 'utf8'), 'ChainId\n123\n234\n')
  t.is(await ok(t, [...A, 'upload-chain-table', '-d']), 'ChainId\n123\n234\n')
  const big = await strata([...A, 'upload-chain-table', '4294967296', tpl])
  t.is(big.code, 2)
  t.regex(big.stderr, /tableId must be an integer in \[1, 4294967295\]/)
  t.is((await strata([...A, 'dump-chain-table', '4294967296'])).code, 2)
  const upBig = await strata(['cluster', 'up', '--dir', path.join(dir, 'c'), '--chain-table-id', '4294967296'])
  t.is(upBig.code, 2)
  t.false(fs.existsSync(path.join(dir, 'c', 'cluster.json')))

  // commands that write CSV refuse --json (theirs or the group's) instead of ignoring it
  for (const args of [
    ['dump-chains', '--json'],
    ['--json', 'dump-chains'],
    ['dump-chain-table', '1', '--json'],
    ['upload-chains', '-d', '--json'],
    ['upload-chain-table', '-d', '--json'],
  ]) {
    const r = await strata([...A, ...args])
    t.is(r.code, 2, args.join(' '))
    t.regex(r.stderr, /writes CSV; --json is not supported/, args.join(' '))
  }
})

test('init-cluster: 3FS\'s --X-config-path spellings, a missing config file leaves the cluster uninitialized, empty file and output paths are usage errors', async (t) => {
  const { dir, A } = await loneMgmtd(t)
  const cfg = path.join(dir, 'meta.toml')
  fs.writeFileSync(cfg, 'x = 1\n')
  // a config file that cannot be read: nothing is recorded (it used to init, then fail)
  const missing = await strata([...A, 'init-cluster', '1', '64K', '2', '--mgmtd', path.join(dir, 'nope.toml')])
  t.is(missing.code, 1, missing.stderr)
  t.regex(missing.stderr, /^strata: NOT_FOUND: cannot read MGMTD config /m)
  // so other values are still taken, with the 3FS spelling of the config options
  const init = await ok(t, [...A, 'init-cluster', '2', '64K', '1', '--meta-config-path', cfg, '--json'])
  t.like(JSON.parse(init), { configs: [{ nodeType: 'META', configVersion: 1 }] })
  t.regex(await ok(t, [...A, 'get-config', '-t', 'META']), /x = 1/)
  const both = await strata([...A, 'init-cluster', '2', '64K', '1', '--fuse', cfg, '--fuse-config-path', path.join(dir, 'other')])
  t.is(both.code, 2, both.stderr)
  // an output file that cannot be written: named, with the catalogue's code for the errno
  const unwritable: Array<[string[], RegExp]> = [
    [['upload-chains', '-d', dir], /^strata: INVALID_ARGUMENT: cannot write the template to .*: EISDIR/m],
    [['dump-chains', path.join(dir, 'no', 'x.csv')], /^strata: NOT_FOUND: cannot write the CSV to .*x\.csv: ENOENT/m],
    [['get-config', '-t', 'META', '-o', path.join(dir, 'no', 'meta.toml')], /^strata: NOT_FOUND: cannot write the META config to .*meta\.toml: ENOENT/m],
  ]
  for (const [args, re] of unwritable) {
    const r = await strata([...A, ...args])
    t.is(r.code, 1, `${args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, re, args.join(' '))
  }
  // '' as a file: a usage error, not "no file" (stdout, or the cluster layout for create-targets --chains)
  for (const args of [
    ['init-cluster', '2', '64K', '1', '--storage', ''],
    ['dump-chains', ''],
    ['dump-chain-table', '2', ''],
    ['upload-chains', '-d', ''],
    ['upload-chain-table', '-d', ''],
    ['upload-chain-table', '2', ''],
    ['get-config', '-t', 'META', '-o', ''],
    ['set-config', '-t', 'META', '-f', ''],
    ['dump-chunkmeta', '-m', ''],
    ['create-targets', '--node-id', '10001', '--chains', ''],
    ['dump-session', '--output', ''],
  ]) {
    const r = await strata([...A, ...args])
    t.is(r.code, 2, `${JSON.stringify(args)}: ${r.stdout}${r.stderr}`)
    t.regex(r.stderr, /^strata: usage: .* is empty/, JSON.stringify(args))
  }
})
