// MetaClient against fake servers (RpcServers answering service 4, and a
// fake mgmtd): ReqBase filling, one request uuid per logical operation reused
// by every retry, failover on transport errors, retryable codes, server
// choice from routing info, client-session extension.

import test from 'ava'
import { setTimeout as sleep } from 'node:timers/promises'
import { RpcServer, RpcClient } from '../../../../fs/rpc/index.js'
import { MetaMethod, MgmtdMethod, ServiceId } from '../../../../fs/common/services.js'
import { StrataError, isStrataError } from '../../../../fs/common/errors.js'
import { MgmtdClient } from '../../../../fs/mgmtd/client.js'
import type { NodeInfo, RoutingInfo } from '../../../../fs/common/types.js'
import { MetaClient, metaServersOf } from '../../../../fs/client/index.js'

interface Seen {
  server: string
  method: number
  req: Record<string, any>
}

async function fakeMeta(name: string, seen: Seen[], behave: (method: number, req: any, n: number) => unknown = () => ({ stat: { id: 1n } })) {
  const server = new RpcServer({ name })
  let n = 0
  const methods: Record<number, (p: any) => unknown> = {}
  for (const id of Object.values(MetaMethod)) {
    methods[id] = async (p: any) => {
      seen.push({ server: name, method: id, req: p })
      return behave(id, p, n++)
    }
  }
  server.addService(ServiceId.Meta, methods)
  const address = await server.listen(0)
  return { server, address }
}

function node(nodeId: number, type: NodeInfo['type'], status: NodeInfo['status'], address: string): NodeInfo {
  return { nodeId, type, status, hostname: 'h', pid: 1, address, tags: [], lastHeartbeatTime: Date.now(), configVersion: 0, releaseVersion: '' }
}

async function fakeMgmtd(nodes: NodeInfo[], sessions: unknown[]) {
  const server = new RpcServer({ name: 'mgmtd' })
  let version = 1
  const ri = (): RoutingInfo => ({ routingInfoVersion: version, bootstrapping: false, nodes: Object.fromEntries(nodes.map((n) => [String(n.nodeId), n])), chainTables: {}, chains: {}, targets: {} })
  server.addService(ServiceId.Mgmtd, {
    [MgmtdMethod.getRoutingInfo]: () => ({ info: ri() }),
    [MgmtdMethod.extendClientSession]: (p: unknown) => {
      sessions.push(p)
      return { ok: true }
    },
  })
  const address = await server.listen(0)
  return {
    server,
    address,
    bump() {
      version++
    },
  }
}

test('ReqBase is filled; one request uuid per operation, reused on retries of retryable codes', async (t) => {
  const seen: Seen[] = []
  const { server, address } = await fakeMeta('m1', seen, (method, _req, n) => {
    if (method === MetaMethod.create && n < 2) throw new StrataError('KV_CONFLICT', 'try again')
    return { stat: { id: 5n, type: 'File' }, needTruncate: false }
  })
  t.teardown(() => server.close())
  const mc = new MetaClient({ addresses: [address], user: { uid: 1000, gid: 100, groups: [7] }, clientId: 'client-A', hostname: 'host-A', retry: { initialDelayMs: 1, fastDelayMs: 1 } })
  t.teardown(() => mc.close())
  const rsp = await mc.create({ path: { parent: 0n, path: '/f' }, flags: { access: 'w', create: true }, perm: 0o644 })
  t.is(rsp.stat.id, 5n)
  t.is(seen.length, 3)
  const uuids = new Set(seen.map((s) => s.req.uuid))
  t.is(uuids.size, 1, 'every retry carries the same request id')
  t.deepEqual(seen[0]!.req.user, { uid: 1000, gid: 100, groups: [7] })
  t.deepEqual(seen[0]!.req.client, { uuid: 'client-A', hostname: 'host-A' })
  t.deepEqual(seen[0]!.req.path, { parent: 0n, path: '/f' })
  // the next operation gets a new id
  await mc.stat({ path: { parent: 0n, path: '/f' } })
  t.false(uuids.has(seen[3]!.req.uuid))
  // an explicit uuid (a replayed close) is used as given
  await mc.closeFile({ inode: 5n, updateLength: false }, { uuid: 'replay-1' })
  t.is(seen[4]!.req.uuid, 'replay-1')
  // non-retryable codes are returned at once
  const before = seen.length
  const { server: s2, address: a2 } = await fakeMeta('m2', seen, () => {
    throw new StrataError('META_NOT_FOUND', 'nope')
  })
  t.teardown(() => s2.close())
  const mc2 = new MetaClient({ addresses: [a2] })
  t.teardown(() => mc2.close())
  t.true(isStrataError(await t.throwsAsync(mc2.stat({ path: { parent: 0n, path: '/x' } })), 'META_NOT_FOUND'))
  t.is(seen.length, before + 1)
})

test('fails over to another meta server when one is unreachable; the replay keeps its uuid', async (t) => {
  const seen: Seen[] = []
  const a = await fakeMeta('a', seen)
  const b = await fakeMeta('b', seen)
  t.teardown(() => b.server.close())
  const mc = new MetaClient({ addresses: [a.address, b.address], random: () => 0, retry: { initialDelayMs: 1, fastDelayMs: 1, rpcTimeoutMs: 500 } })
  t.teardown(() => mc.close())
  await mc.stat({ path: { parent: 0n } })
  t.is(seen[0]!.server, 'a')
  await a.server.close()
  await mc.stat({ path: { parent: 0n } })
  t.is(seen[seen.length - 1]!.server, 'b')
  t.true(mc.counters.failovers >= 1)
  // a timeout also fails over: b drops every create
  b.server.faults.add({ service: ServiceId.Meta, method: MetaMethod.create, kind: 'drop' })
  const c = await fakeMeta('c', seen)
  t.teardown(() => c.server.close())
  const mc2 = new MetaClient({ addresses: [b.address, c.address], random: () => 0, retry: { initialDelayMs: 1, fastDelayMs: 1, rpcTimeoutMs: 300 } })
  t.teardown(() => mc2.close())
  const n0 = seen.length
  await mc2.create({ path: { parent: 0n, path: '/g' }, flags: { access: 'r', create: true }, perm: 0o644 })
  const creates = seen.slice(n0).filter((s) => s.method === MetaMethod.create)
  t.is(creates[creates.length - 1]!.server, 'c')
  // b never answered the dropped request; the request that reached c has the id the client first used
  t.is(new Set(creates.map((s) => s.req.uuid)).size, 1)
})

test('servers come from routing info (connected META nodes); the client session is extended with mgmtd', async (t) => {
  const seen: Seen[] = []
  const m1 = await fakeMeta('m1', seen)
  const m2 = await fakeMeta('m2', seen)
  t.teardown(() => m1.server.close())
  t.teardown(() => m2.server.close())
  const sessions: any[] = []
  const nodes = [
    node(1, 'MGMTD', 'PRIMARY_MGMTD', '127.0.0.1:1'),
    node(50, 'META', 'HEARTBEAT_FAILED', m1.address),
    node(51, 'META', 'HEARTBEAT_CONNECTED', m2.address),
    node(10001, 'STORAGE', 'HEARTBEAT_CONNECTED', '127.0.0.1:2'),
  ]
  const mg = await fakeMgmtd(nodes, sessions)
  t.teardown(() => mg.server.close())
  const rpc = new RpcClient()
  t.teardown(() => rpc.close())
  const mgmtd = new MgmtdClient({ addresses: [mg.address], rpc })
  t.teardown(() => mgmtd.close())
  t.deepEqual(metaServersOf(await mgmtd.refresh()), [m2.address])
  const mc = new MetaClient({ mgmtd, clientId: 'cid-1', sessionExtendIntervalMs: 50, nodeType: 'FUSE' })
  t.teardown(() => mc.close())
  await mc.stat({ path: { parent: 0n } })
  t.is(seen[0]!.server, 'm2')
  for (let i = 0; i < 100 && sessions.length < 3; i++) await sleep(50)
  t.true(sessions.length >= 3, `extended ${sessions.length} times`)
  t.like(sessions[0], { clientId: 'cid-1', nodeType: 'FUSE', pid: process.pid })
  mc.close()
  const n = sessions.length
  await sleep(150)
  t.is(sessions.length, n, 'no extension after close')
  // no connected META node and no fallback: a retryable failure until the deadline
  nodes[2]!.status = 'HEARTBEAT_FAILED'
  mg.bump()
  await mgmtd.refresh()
  const mc2 = new MetaClient({ mgmtd, sessionExtendIntervalMs: 0, retry: { totalMs: 300, initialDelayMs: 10 } })
  t.teardown(() => mc2.close())
  t.true(isStrataError(await t.throwsAsync(mc2.stat({ path: { parent: 0n } })), 'RPC_CONNECT_FAILED'))
  // … unless fallback addresses are given
  const mc3 = new MetaClient({ mgmtd, sessionExtendIntervalMs: 0, fallbackAddresses: [m1.address] })
  t.teardown(() => mc3.close())
  await mc3.stat({ path: { parent: 0n } })
  t.is(seen[seen.length - 1]!.server, 'm1')
})
