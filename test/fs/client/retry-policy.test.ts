// A stopped cluster refuses connections; a busy one can make a connect time
// out (a peer's full accept queue, or a client's event loop too late to see
// the connect). Only refusals may cut a failover short with
// CLUSTER_UNREACHABLE (ENOTCONN at the FUSE mount): a mount whose live meta
// server was slow to accept used to fail with ENOTCONN under load.
import test, { type ExecutionContext } from 'ava'
import { spawn } from 'node:child_process'
import net from 'node:net'
import { MetaClient } from '../../../fs/client/index.js'
import { clusterGone } from '../../../fs/client/retry-policy.js'
import { StrataError, isStrataError } from '../../../fs/common/errors.js'
import { MgmtdClient } from '../../../fs/mgmtd/index.js'
import { RpcClient, connectRefused } from '../../../fs/rpc/index.js'

/** A port nothing listens on (bound, then closed). */
async function refusingPort(): Promise<number> {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r))
  const port = (s.address() as net.AddressInfo).port
  await new Promise<void>((r) => s.close(() => r()))
  return port
}

/**
 * A listener that never accepts, its accept queue filled: the kernel drops
 * further SYNs, so a connect to it times out (as to a live peer too busy to
 * accept). python3: Node's servers always accept.
 */
async function stuckPort(t: ExecutionContext): Promise<number> {
  const py = spawn('python3', ['-c', "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(600)"], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    py.kill('SIGKILL')
  })
  const port = await new Promise<number>((resolve, reject) => {
    py.stdout.once('data', (d: Buffer) => resolve(Number(d.toString().trim())))
    py.once('exit', () => reject(new Error('python3 listener exited')))
  })
  const fillers: net.Socket[] = []
  t.teardown(() => {
    for (const s of fillers) s.destroy()
  })
  for (let i = 0; i < 16; i++) {
    const s = net.connect({ host: '127.0.0.1', port })
    s.on('error', () => {})
    fillers.push(s)
    const connected = await new Promise<boolean>((r) => {
      const timer = setTimeout(() => r(false), 500)
      s.once('connect', () => {
        clearTimeout(timer)
        r(true)
      })
    })
    if (!connected) return port
  }
  throw new Error('the accept queue never filled')
}

test('a refused connect and a timed-out one are told apart', async (t) => {
  const rpc = new RpcClient({ connectTimeoutMs: 300 })
  t.teardown(() => rpc.close())
  const refused = await t.throwsAsync(rpc.call(`127.0.0.1:${await refusingPort()}`, 1, 1, {}, { timeoutMs: 2000 }))
  t.true(isStrataError(refused, 'RPC_CONNECT_FAILED'))
  t.true(connectRefused(refused), refused?.message)
  const stuck = await t.throwsAsync(rpc.call(`127.0.0.1:${await stuckPort(t)}`, 1, 1, {}, { timeoutMs: 2000 }))
  t.true(isStrataError(stuck, 'RPC_CONNECT_FAILED'))
  t.regex(stuck!.message, /timed out/)
  t.false(connectRefused(stuck))
})

test('clusterGone: only a refusal, wrapped or not, with mgmtd refusing long enough', (t) => {
  const mgmtd = { unreachableForMs: () => 60_000 }
  const refused = new StrataError('RPC_CONNECT_FAILED', 'connect to x: ECONNREFUSED', { detail: { refused: true } })
  const timedOut = new StrataError('RPC_CONNECT_FAILED', 'connect to x timed out after 3000 ms', { detail: { refused: false } })
  t.like(clusterGone(refused, mgmtd, 5000, 'read'), { code: 'CLUSTER_UNREACHABLE' })
  t.like(clusterGone(new StrataError('RPC_CONNECT_FAILED', 'gave up', { cause: refused }), mgmtd, 5000, 'read'), { code: 'CLUSTER_UNREACHABLE' })
  t.is(clusterGone(timedOut, mgmtd, 5000, 'read'), null, 'a connect that timed out is a busy peer')
  t.is(clusterGone(new StrataError('TIMEOUT', 'slow'), mgmtd, 5000, 'read'), null)
  t.is(clusterGone(refused, { unreachableForMs: () => 1000 }, 5000, 'read'), null, 'mgmtd not gone long enough')
  t.is(clusterGone(refused, mgmtd, 0, 'read'), null, 'orphan timeout 0: never')
})

test('meta: with mgmtd refusing, one server refusing and one too busy to accept, the call is not cut short as CLUSTER_UNREACHABLE', async (t) => {
  const rpc = new RpcClient({ connectTimeoutMs: 300 })
  t.teardown(() => rpc.close())
  const mgmtd = new MgmtdClient({ addresses: [`127.0.0.1:${await refusingPort()}`], rpc, timeoutMs: 500 })
  await t.throwsAsync(mgmtd.refresh())
  t.true(mgmtd.unreachableForMs() >= 0)
  const meta = new MetaClient({
    mgmtd,
    rpc,
    addresses: [`127.0.0.1:${await refusingPort()}`, `127.0.0.1:${await stuckPort(t)}`],
    sessionExtendIntervalMs: 0,
    retry: { orphanTimeoutMs: 1, totalMs: 3000, attemptTimeoutMs: 1000 },
  })
  t.teardown(() => meta.close())
  const err = await t.throwsAsync(meta.stat({ path: { parent: 0n, path: '/' } }))
  // the old code took the busy server's timed-out connect for a refusal: CLUSTER_UNREACHABLE at once
  t.false(isStrataError(err, 'CLUSTER_UNREACHABLE'), err?.message)
  t.true(isStrataError(err, 'RPC_CONNECT_FAILED') || isStrataError(err, 'TIMEOUT'), err?.message)
})

test('meta: with mgmtd and every meta server refusing, the call ends as CLUSTER_UNREACHABLE', async (t) => {
  const rpc = new RpcClient({ connectTimeoutMs: 300 })
  t.teardown(() => rpc.close())
  const mgmtd = new MgmtdClient({ addresses: [`127.0.0.1:${await refusingPort()}`], rpc, timeoutMs: 500 })
  await t.throwsAsync(mgmtd.refresh())
  const meta = new MetaClient({
    mgmtd,
    rpc,
    addresses: [`127.0.0.1:${await refusingPort()}`, `127.0.0.1:${await refusingPort()}`],
    sessionExtendIntervalMs: 0,
    retry: { orphanTimeoutMs: 1, totalMs: 30_000, attemptTimeoutMs: 1000 },
  })
  t.teardown(() => meta.close())
  const err = await t.throwsAsync(meta.stat({ path: { parent: 0n, path: '/' } }))
  t.true(isStrataError(err, 'CLUSTER_UNREACHABLE'), err?.message)
})
