import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { startMgmtd, MgmtdClient, type HeartbeatTarget } from '../../../fs/mgmtd/index.js'
import { isStrataError } from '../../../fs/common/errors.js'
import { MgmtdMethod } from '../../../fs/common/services.js'
import type { RoutingInfo } from '../../../fs/common/types.js'
import { listNodes, openAdminSession } from '../../../fs/admin/index.js'

// generous fail interval: on a loaded 2-core machine a healthy heartbeat can be late by hundreds of ms
const timers = { heartbeatIntervalMs: 100, heartbeatFailIntervalMs: 1500, chainUpdateIntervalMs: 30, newChainBootstrapMs: 1500, clientSessionTimeoutMs: 300 }

function tmp(t: any): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-mgmtd-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function until<T>(fn: () => Promise<T | undefined | false>, ms = 30000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error('condition not reached in time')
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** A fake-free storage node: a heartbeat loop reporting the given target states. */
/** A mgmtd (node 1) in a temp dir with a client of it, both closed at teardown. */
async function mgmtdWithClient(t: any) {
  const dir = tmp(t)
  const m = await startMgmtd({ nodeId: 1, dataDir: dir, listen: '127.0.0.1:0', timers })
  const client = new MgmtdClient({ addresses: [m.address] })
  t.teardown(async () => {
    client.close()
    await m.close()
  })
  return { dir, m, client }
}

function heartbeater(client: MgmtdClient, nodeId: number, targets: () => HeartbeatTarget[]) {
  let hb = Date.now()
  let stopped = false
  const loop = async () => {
    while (!stopped) {
      try {
        await client.heartbeat({ nodeId, type: 'STORAGE', hbVersion: ++hb, timestamp: Date.now(), address: `127.0.0.1:${nodeId}`, hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't', targets: targets() })
      } catch {
        // mgmtd may be restarting
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  void loop()
  return () => {
    stopped = true
  }
}

const chainOf = (ri: RoutingInfo, id: number) => ri.chains[id]!

test('chain state follows heartbeats: failure, sync, serving; versions bump only on change', async (t) => {
  const dir = tmp(t)
  const m = await startMgmtd({ nodeId: 1, dataDir: dir, listen: '127.0.0.1:0', timers })
  const client = new MgmtdClient({ addresses: [m.address] })
  const stops: Array<() => void> = []
  t.teardown(async () => {
    stops.forEach((s) => s())
    client.close()
    await m.close()
  })
  const local: Record<number, 'ONLINE' | 'UPTODATE' | 'OFFLINE'> = { 101: 'ONLINE', 201: 'ONLINE', 301: 'ONLINE' }
  const mk = (tid: number): HeartbeatTarget => ({ targetId: tid, localState: local[tid]!, chainId: 1, diskIndex: 0, usedSize: 0 })
  stops.push(heartbeater(client, 10001, () => [mk(101)]))
  const stop2 = heartbeater(client, 10002, () => [mk(201)])
  stops.push(heartbeater(client, 10003, () => [mk(301)]))
  await until(async () => (await client.refresh()).targets === undefined || Object.keys((await client.listClientSessions()).sessions).length >= 0)
  await client.setChains({ chains: [{ chainId: 1, targets: [101, 201, 301] }] })
  const tv = await client.setChainTable({ chainTableId: 1, chains: [1] })
  t.is(tv.chainTableVersion, 1)
  t.is((await client.setChainTable({ chainTableId: 1, chains: [1] })).chainTableVersion, 1, 'same table content: same version')
  let ri = await client.refresh()
  t.is(chainOf(ri, 1).chainVersion, 1)
  t.deepEqual(chainOf(ri, 1).targets.map((x) => x.publicState), ['SERVING', 'SERVING', 'SERVING'])
  // storage would now report UPTODATE
  local[101] = local[201] = local[301] = 'UPTODATE'
  await new Promise((r) => setTimeout(r, 300))
  ri = await client.refresh()
  t.is(chainOf(ri, 1).chainVersion, 1, 'no change, no bump')

  // node 10002 stops heartbeating → its target goes OFFLINE and moves to the end
  stop2()
  ri = await until(async () => {
    const r = await client.refresh()
    return chainOf(r, 1).targets.at(-1)!.targetId === 201 && chainOf(r, 1).targets.at(-1)!.publicState === 'OFFLINE' ? r : undefined
  })
  t.deepEqual(chainOf(ri, 1).targets.map((x) => x.targetId), [101, 301, 201])
  const v2 = chainOf(ri, 1).chainVersion
  t.true(v2 > 1)
  t.is(ri.nodes[10002]!.status, 'HEARTBEAT_FAILED')

  // it comes back ONLINE → SYNCING, then UPTODATE → SERVING
  local[201] = 'ONLINE'
  stops.push(heartbeater(client, 10002, () => [mk(201)]))
  ri = await until(async () => {
    const r = await client.refresh()
    return chainOf(r, 1).targets.at(-1)!.publicState === 'SYNCING' ? r : undefined
  })
  t.true(chainOf(ri, 1).chainVersion > v2)
  const v3 = chainOf(ri, 1).chainVersion
  local[201] = 'UPTODATE'
  ri = await until(async () => {
    const r = await client.refresh()
    return chainOf(r, 1).targets.every((x) => x.publicState === 'SERVING') ? r : undefined
  })
  t.true(chainOf(ri, 1).chainVersion > v3)
  t.is(ri.nodes[10002]!.status, 'HEARTBEAT_CONNECTED')
  t.is(ri.nodes[1]!.status, 'PRIMARY_MGMTD')
})

test('invalid requests are refused with codes', async (t) => {
  const { client } = await mgmtdWithClient(t)
  await client.setChains({ chains: [{ chainId: 1, targets: [1, 2] }] })
  t.true(isStrataError(await t.throwsAsync(client.setChains({ chains: [{ chainId: 2, targets: [2, 3] }] })), 'MGMTD_INVALID_CHAIN'), 'target reused')
  t.true(isStrataError(await t.throwsAsync(client.setChains({ chains: [{ chainId: 3, targets: [4, 4] }] })), 'MGMTD_INVALID_CHAIN'), 'duplicate target')
  t.true(isStrataError(await t.throwsAsync(client.setChains({ chains: [{ chainId: 1, targets: [1, 5] }] })), 'MGMTD_INVALID_CHAIN'), 'existing chain changed')
  t.true(isStrataError(await t.throwsAsync(client.setChainTable({ chainTableId: 1, chains: [9] })), 'MGMTD_CHAIN_NOT_FOUND'))
  t.true(isStrataError(await t.throwsAsync(client.initCluster({ chainTableId: 1, chunkSize: 1000, stripeSize: 1 })), 'INVALID_ARGUMENT'))
  // the root layout is every new file's default: held to a new layout's chunk sizes, 4K to 2G (1 was taken;
  // so were 2^32 and 3 x 2^32, which the bit test took for powers of two)
  for (const chunkSize of [1, 2048, 2 ** 32, 3 * 2 ** 32]) {
    const e = await t.throwsAsync(client.initCluster({ chainTableId: 1, chunkSize, stripeSize: 1 }))
    t.true(isStrataError(e, 'INVALID_ARGUMENT'), String(chunkSize))
    t.regex(e!.message, /chunkSize must be a power of two from 4K to 2G/)
  }
  await client.initCluster({ chainTableId: 1, chunkSize: 65536, stripeSize: 2 })
  t.true(isStrataError(await t.throwsAsync(client.initCluster({ chainTableId: 1, chunkSize: 65536, stripeSize: 2 })), 'MGMTD_ALREADY_INITIALIZED'))
  const hb = { nodeId: 7, type: 'STORAGE' as const, hbVersion: 5, timestamp: Date.now(), address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't' }
  await client.heartbeat(hb)
  t.true(isStrataError(await t.throwsAsync(client.heartbeat(hb)), 'MGMTD_STALE_HEARTBEAT'))
  t.true(isStrataError(await t.throwsAsync(client.heartbeat({ ...hb, hbVersion: 6, timestamp: Date.now() - 3_600_000 })), 'MGMTD_CLOCK_SKEW'))
  t.true(isStrataError(await t.throwsAsync(client.heartbeat({ ...hb, hbVersion: 7, type: 'META' })), 'INVALID_ARGUMENT'))
  await client.disableNode({ nodeId: 7 })
  t.true(isStrataError(await t.throwsAsync(client.heartbeat({ ...hb, hbVersion: 8 })), 'MGMTD_NODE_DISABLED'))
  // the chain updater may have bumped the version meanwhile (its targets never reported): compare relative
  const before = (await client.refresh()).chains[1]!.chainVersion
  const removed = (await client.updateChain({ chainId: 1, targetId: 1, mode: 'remove' })).chainVersion
  t.true(removed > before)
  t.true(isStrataError(await t.throwsAsync(client.updateChain({ chainId: 1, targetId: 2, mode: 'remove' })), 'MGMTD_REFUSED'), 'only target')
  t.true(isStrataError(await t.throwsAsync(client.updateChain({ chainId: 1, targetId: 2, mode: 'add' })), 'MGMTD_TARGET_EXISTED'))
  t.true(isStrataError(await t.throwsAsync(client.updateChain({ chainId: 9, targetId: 2, mode: 'add' })), 'MGMTD_CHAIN_NOT_FOUND'))
  // a target no storage node reported: refused, the chain untouched (it used to join as 999(OFFLINE))
  const chain = (await client.refresh()).chains[1]!
  const unknown = await t.throwsAsync(client.updateChain({ chainId: 1, targetId: 999, mode: 'add' }))
  t.true(isStrataError(unknown, 'MGMTD_TARGET_NOT_FOUND'), String(unknown))
  t.regex(unknown!.message, /target 999 is unknown to mgmtd/)
  const after = (await client.refresh()).chains[1]!
  t.deepEqual(after.targets, chain.targets)
  t.true(after.chainVersion <= chain.chainVersion + 1, 'only the chain updater may have bumped it')
})

test('restart continues the routing version and does not flap targets that keep heartbeating', async (t) => {
  const dir = tmp(t)
  let m = await startMgmtd({ nodeId: 1, dataDir: dir, listen: '127.0.0.1:0', timers })
  const port = Number(m.address.split(':')[1])
  const client = new MgmtdClient({ addresses: [m.address] })
  const local = { 101: 'UPTODATE', 201: 'UPTODATE' } as const
  const stops = [
    heartbeater(client, 10001, () => [{ targetId: 101, localState: local[101], chainId: 1, diskIndex: 0, usedSize: 0 }]),
    heartbeater(client, 10002, () => [{ targetId: 201, localState: local[201], chainId: 1, diskIndex: 0, usedSize: 0 }]),
  ]
  t.teardown(async () => {
    stops.forEach((s) => s())
    client.close()
    await m.close()
  })
  await client.setChains({ chains: [{ chainId: 1, targets: [101, 201] }] })
  await client.setChainTable({ chainTableId: 1, chains: [1] })
  await new Promise((r) => setTimeout(r, 300))
  const before = await client.refresh()
  await m.close()
  await new Promise((r) => setTimeout(r, 150)) // shorter than the fail interval
  m = await startMgmtd({ nodeId: 1, dataDir: dir, listen: `127.0.0.1:${port}`, timers })
  await new Promise((r) => setTimeout(r, 3500)) // well past the fail interval
  const after = await client.refresh()
  t.true(after.routingInfoVersion >= before.routingInfoVersion, 'version continues')
  t.deepEqual(after.chains[1], before.chains[1], 'chain unchanged: no flapping')
  t.is(after.chainTables[1]![1]!.chains[0], 1)
})

test('real mgmtd process: SIGKILL and restart keeps state', async (t) => {
  const dir = tmp(t)
  const cfg = path.join(dir, 'mgmtd.json')
  const probe = await startMgmtd({ nodeId: 1, dataDir: path.join(dir, 'probe'), listen: '127.0.0.1:0', timers })
  const port = Number(probe.address.split(':')[1])
  await probe.close()
  fs.writeFileSync(cfg, JSON.stringify({ nodeId: 1, dataDir: path.join(dir, 'data'), listen: `127.0.0.1:${port}`, timers }))
  const cli = path.resolve('bin/strata.js')
  const spawnIt = () => spawn(process.execPath, [cli, 'daemon', 'mgmtd', '--config', cfg], { stdio: ['ignore', 'ignore', 'pipe'] })
  let p = spawnIt()
  t.teardown(() => {
    p.kill('SIGKILL')
  })
  const client = new MgmtdClient({ addresses: [`127.0.0.1:${port}`] })
  t.teardown(() => client.close())
  await until(async () => client.clusterInfo().then(() => true, () => false))
  await client.setChains({ chains: [{ chainId: 5, targets: [51] }] })
  const v1 = (await client.refresh()).routingInfoVersion
  p.kill('SIGKILL')
  await new Promise((r) => p.once('exit', r))
  p = spawnIt()
  const ri = await until(async () => client.refresh().catch(() => undefined))
  t.truthy(ri.chains[5])
  t.true(ri.routingInfoVersion >= v1)
  // SIGTERM is an orderly stop with exit code 0
  p.kill('SIGTERM')
  const code = await new Promise((r) => p.once('exit', (c) => r(c)))
  t.is(code, 0)
})

test('list-nodes: the primary mgmtd has no heartbeat time (N/A, as in 3FS); a heartbeating node has its last one', async (t) => {
  const { m, client } = await mgmtdWithClient(t)
  const ts = Date.now()
  await client.heartbeat({ nodeId: 7, type: 'STORAGE', hbVersion: 1, timestamp: ts, address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't' })
  const s = openAdminSession({ mgmtdAddresses: [m.address] })
  t.teardown(() => s.close())
  const l = await listNodes(s)
  const col = l.header.indexOf('LastHeartbeatTime')
  const row = (id: number) => l.rows.find((r) => r[0] === String(id))!
  t.is(row(1)[col], 'N/A')
  t.is(l.records.find((r) => r.nodeId === 1)!.lastHeartbeatTime, 0)
  t.regex(row(7)[col]!, /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/)
  t.true(l.records.find((r) => r.nodeId === 7)!.lastHeartbeatTime > 0)
})

test('register-node of an id already registered answers MGMTD_REGISTER_FAIL (3FS kRegisterFail) naming the node', async (t) => {
  const { client } = await mgmtdWithClient(t)
  await client.registerNode({ nodeId: 8, type: 'META' })
  const dup = await t.throwsAsync(client.registerNode({ nodeId: 8, type: 'STORAGE' }))
  t.true(isStrataError(dup, 'MGMTD_REGISTER_FAIL'), String(dup))
  t.regex(dup!.message, /node id 8 is already registered \(type META, status HEARTBEAT_CONNECTING\)/)
  const self = await t.throwsAsync(client.registerNode({ nodeId: 1, type: 'META' }))
  t.true(isStrataError(self, 'MGMTD_REGISTER_FAIL'), String(self))
  t.regex(self!.message, /type MGMTD, status PRIMARY_MGMTD/)
  t.is((await client.refresh()).nodes[8]!.type, 'META', 'unchanged')
})

test('unregister-node refuses live nodes: the primary mgmtd itself, a heartbeating node, one disabled a moment ago', async (t) => {
  const { client } = await mgmtdWithClient(t)
  const self = await t.throwsAsync(client.unregisterNode({ nodeId: 1 }))
  t.true(isStrataError(self, 'MGMTD_REFUSED'), String(self))
  t.regex(self!.message, /primary mgmtd/)
  t.truthy((await client.refresh()).nodes[1], 'mgmtd is still listed')

  const hb = { nodeId: 7, type: 'STORAGE' as const, hbVersion: 1, timestamp: Date.now(), address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't' }
  await client.heartbeat(hb)
  t.true(isStrataError(await t.throwsAsync(client.unregisterNode({ nodeId: 7 })), 'MGMTD_REFUSED'), 'connected')
  await client.disableNode({ nodeId: 7 })
  t.true(isStrataError(await t.throwsAsync(client.unregisterNode({ nodeId: 7 })), 'MGMTD_REFUSED'), 'disabled, but heartbeated within the fail interval')

  // a node that never heartbeated (registered only) can be forgotten
  await client.registerNode({ nodeId: 8, type: 'META' })
  await client.unregisterNode({ nodeId: 8 })
  t.falsy((await client.refresh()).nodes[8])
  t.true(isStrataError(await t.throwsAsync(client.unregisterNode({ nodeId: 8 })), 'MGMTD_NODE_NOT_FOUND'))
})

test('unregister-node refuses a dead storage node whose targets chains still list (3FS); its orphan targets do not hold it', async (t) => {
  const { client } = await mgmtdWithClient(t)
  const stop9 = heartbeater(client, 9, () => [{ targetId: 91, localState: 'UPTODATE', chainId: 0, diskIndex: 0, usedSize: 0 }])
  const stop10 = heartbeater(client, 10, () => [{ targetId: 101, localState: 'UPTODATE', chainId: 0, diskIndex: 0, usedSize: 0 }])
  t.teardown(() => {
    stop9()
    stop10()
  })
  await until(async () => {
    const orphans = (await client.call<{ targets: Array<{ targetId: number }> }>(MgmtdMethod.listOrphanTargets, {})).targets.map((x) => x.targetId)
    return orphans.includes(91) && orphans.includes(101)
  })
  await client.setChains({ chains: [{ chainId: 9, targets: [91] }] })
  stop9()
  stop10()
  await until(async () => {
    const ri = await client.refresh()
    return ri.nodes[9]?.status === 'HEARTBEAT_FAILED' && ri.nodes[10]?.status === 'HEARTBEAT_FAILED'
  })
  const refused = await t.throwsAsync(client.unregisterNode({ nodeId: 9 }))
  t.true(isStrataError(refused, 'MGMTD_REFUSED'), String(refused))
  t.regex(refused!.message, /holds target 91 of chain 9/)
  t.truthy((await client.refresh()).nodes[9], 'still registered')
  // node 10's target is in no chain: the node may go
  await client.unregisterNode({ nodeId: 10 })
  t.falsy((await client.refresh()).nodes[10])
})

test('update-chain add answers the chain as committed, the new target OFFLINE (3FS UpdateChainRsp), before the updater moves it on', async (t) => {
  const { client } = await mgmtdWithClient(t)
  await client.heartbeat({
    nodeId: 10001, type: 'STORAGE', hbVersion: 1, timestamp: Date.now(), address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't',
    targets: [101, 601].map((targetId) => ({ targetId, localState: 'UPTODATE' as const, chainId: targetId === 101 ? 1 : 0, diskIndex: 0, usedSize: 5 })),
  })
  await client.setChains({ chains: [{ chainId: 1, targets: [101] }] })
  const rsp = await client.updateChain({ chainId: 1, targetId: 601, mode: 'add' })
  t.truthy(rsp.chain, 'the response carries the chain')
  t.is(rsp.chain!.chainVersion, rsp.chainVersion)
  t.deepEqual(rsp.chain!.targets.map((x) => x.targetId), [101, 601])
  t.is(rsp.chain!.targets[1]!.publicState, 'OFFLINE')
})

test('a target its storage node stops reporting is forgotten (orphan) or OFFLINE at once (in a chain); update-chain add refuses it', async (t) => {
  const { dir, m, client } = await mgmtdWithClient(t)
  const orphans = async () => (await client.call<{ targets: Array<{ targetId: number }> }>(MgmtdMethod.listOrphanTargets, {})).targets.map((x) => x.targetId).sort()
  let hbv = 0
  const report = (tids: number[]) =>
    client.heartbeat({
      nodeId: 10001, type: 'STORAGE', hbVersion: ++hbv, timestamp: Date.now(), address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't',
      targets: tids.map((targetId) => ({ targetId, localState: 'UPTODATE' as const, chainId: targetId === 101 ? 1 : 9, diskIndex: 0, usedSize: 5 })),
    })
  await report([101, 601])
  await client.setChains({ chains: [{ chainId: 1, targets: [101] }] })
  t.deepEqual(await orphans(), [601])
  // 601 removed on the node (remove-target): the next heartbeat lacks it
  await report([101])
  t.deepEqual(await orphans(), [], 'forgotten at once, not kept as a stale orphan')
  const add = await t.throwsAsync(client.updateChain({ chainId: 1, targetId: 601, mode: 'add' }))
  t.true(isStrataError(add, 'MGMTD_TARGET_NOT_FOUND'), String(add))
  t.deepEqual((await client.refresh()).chains[1]!.targets.map((x) => x.targetId), [101], 'chain unchanged')
  // a chain target the node stops reporting goes OFFLINE at once
  await report([])
  const ri = await client.refresh()
  t.is(ri.targets[101]!.localState, 'OFFLINE')
  // and the forgetting is persisted: a restarted mgmtd does not bring 601 back
  await m.close()
  const m2 = await startMgmtd({ nodeId: 1, dataDir: dir, listen: '127.0.0.1:0', timers })
  const c2 = new MgmtdClient({ addresses: [m2.address] })
  t.teardown(async () => {
    c2.close()
    await m2.close()
  })
  t.deepEqual((await c2.call<{ targets: unknown[] }>(MgmtdMethod.listOrphanTargets, {})).targets, [])
})

test("a target's offline reason is published as its node reports it, and goes when the node stops reporting it or the target", async (t) => {
  const { client } = await mgmtdWithClient(t)
  let hbv = 0
  const report = (targets: Array<{ targetId: number; offlineReason?: unknown }>) =>
    client.heartbeat({
      nodeId: 10001, type: 'STORAGE', hbVersion: ++hbv, timestamp: Date.now(), address: 'x:1', hostname: 'h', pid: 1, configVersion: 0, releaseVersion: 't',
      targets: targets.map((x) => ({ ...x, localState: x.offlineReason ? ('OFFLINE' as const) : ('UPTODATE' as const), chainId: 1, diskIndex: 0, usedSize: 5 })) as HeartbeatTarget[],
    })
  await report([{ targetId: 101 }, { targetId: 102 }])
  await client.setChains({ chains: [{ chainId: 1, targets: [101, 102] }] })
  const v0 = (await client.refresh()).routingInfoVersion
  await report([{ targetId: 101 }, { targetId: 102, offlineReason: 'resync from target 101 found 1 diverged chunk(s)' }])
  let ri = await client.refresh()
  t.true(ri.routingInfoVersion > v0, 'a new reason is a visible change')
  t.is(ri.targets[102]!.offlineReason, 'resync from target 101 found 1 diverged chunk(s)')
  t.false('offlineReason' in ri.targets[101]!)
  // the node restarted: no reason any more
  await report([{ targetId: 101 }, { targetId: 102 }])
  t.false('offlineReason' in (await client.refresh()).targets[102]!)
  // removed on its node (remove-target): not reported, so no reason either
  await report([{ targetId: 101 }, { targetId: 102, offlineReason: 'offline-target' }])
  t.is((await client.refresh()).targets[102]!.offlineReason, 'offline-target')
  await report([{ targetId: 101 }])
  ri = await client.refresh()
  t.is(ri.targets[102]!.localState, 'OFFLINE')
  t.false('offlineReason' in ri.targets[102]!)
  for (const bad of [42, 'x'.repeat(2001)]) {
    const e = await t.throwsAsync(report([{ targetId: 101, offlineReason: bad }]))
    t.true(isStrataError(e, 'INVALID_ARGUMENT'), String(e))
  }
})

test('init-cluster over an earlier init: another chain table must exist, the stripe must fit its chains', async (t) => {
  const { client } = await mgmtdWithClient(t)
  // the first init comes before any chain table (deploy order), and so may a second with the same table
  await client.initCluster({ chainTableId: 1, chunkSize: 65536, stripeSize: 1 })
  await client.initCluster({ chainTableId: 1, chunkSize: 65536, stripeSize: 2, allowExisted: true })
  t.true(isStrataError(await t.throwsAsync(client.initCluster({ chainTableId: 9, chunkSize: 65536, stripeSize: 1, allowExisted: true })), 'MGMTD_CHAIN_TABLE_NOT_FOUND'), 'another table that does not exist')
  await client.setChains({ chains: [{ chainId: 1, targets: [101] }, { chainId: 2, targets: [201] }] })
  await client.setChainTable({ chainTableId: 1, chains: [1, 2] })
  const missing = await t.throwsAsync(client.initCluster({ chainTableId: 77, chunkSize: 65536, stripeSize: 1, allowExisted: true }))
  t.true(isStrataError(missing, 'MGMTD_CHAIN_TABLE_NOT_FOUND'), String(missing))
  const wide = await t.throwsAsync(client.initCluster({ chainTableId: 1, chunkSize: 65536, stripeSize: 5, allowExisted: true }))
  t.true(isStrataError(wide, 'INVALID_ARGUMENT'), String(wide))
  t.regex(wide!.message, /exceeds the 2 chains of table 1/)
  await client.initCluster({ chainTableId: 1, chunkSize: 1 << 20, stripeSize: 2, allowExisted: true })
  t.like((await client.clusterInfo()).init, { chainTableId: 1, chunkSize: 1 << 20, stripeSize: 2 })
})
