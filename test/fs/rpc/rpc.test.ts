import test from 'ava'
import net from 'node:net'
import { RpcServer, RpcClient, encodeFrame, FrameDecoder } from '../../../fs/rpc/index.js'
import { UNKNOWN_METHOD_STATS } from '../../../fs/rpc/server.js'
import { StrataError, isStrataError } from '../../../fs/common/errors.js'
import { MgmtdMethod, ServiceId } from '../../../fs/common/services.js'

const SVC = 42

async function setup(t: any, opts: { maxFrameBytes?: number } = {}) {
  const server = new RpcServer({ name: 'test', ...opts })
  const seen: { aborted: number } = { aborted: 0 }
  server.addService(SVC, {
    1: (p: any) => ({ echo: p }),
    2: async (p: any, ctx) => {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, p.ms)
        ctx.signal.addEventListener('abort', () => {
          seen.aborted++
          clearTimeout(t)
          resolve()
        })
      })
      return { slept: p.ms }
    },
    3: () => {
      throw new StrataError('CHUNK_NOT_COMMIT', 'pending update', { detail: { updateVer: 3 } })
    },
    4: (p: any) => Buffer.alloc(p.size, 1),
    5: () => {
      throw new TypeError('boom')
    },
    // looks at its signal only after a while: a cancel that came first must show
    7: () => ({ big: 2n ** 64n }),
    6: async (p: any, ctx) => {
      await new Promise((r) => setTimeout(r, p.ms))
      if (ctx.signal.aborted) seen.aborted++
      return null
    },
  })
  const address = await server.listen()
  const client = new RpcClient({ ...opts, defaultTimeoutMs: 5000 })
  t.teardown(async () => {
    client.close()
    await server.close()
  })
  return { server, client, address, seen }
}

test('round trip and many requests in flight on one connection', async (t) => {
  const { client, address, server } = await setup(t)
  const results = await Promise.all(Array.from({ length: 500 }, (_, i) => client.call<any>(address, SVC, 1, { i, big: 2n ** 60n, buf: Buffer.from([i & 255]) })))
  t.is(results.length, 500)
  results.forEach((r, i) => {
    t.is(r.echo.i, i)
    t.is(r.echo.big, 2n ** 60n)
    t.deepEqual(r.echo.buf, Buffer.from([i & 255]))
  })
  const stats: any = await client.stats(address)
  t.is(stats.connections, 1, 'all calls shared one connection')
  t.is(stats.methods['42.1'].calls, 500)
  t.truthy(server.address)
})

test('errors cross the wire as {code, message} with detail', async (t) => {
  const { client, address } = await setup(t)
  const e = await t.throwsAsync(client.call(address, SVC, 3, null))
  t.true(isStrataError(e, 'CHUNK_NOT_COMMIT'))
  t.is((e as StrataError).reason, 'pending update')
  t.deepEqual((e as StrataError).detail, { updateVer: 3 })
  const e2 = await t.throwsAsync(client.call(address, SVC, 5, null))
  t.true(isStrataError(e2, 'INTERNAL'))
  t.true(isStrataError(await t.throwsAsync(client.call(address, 999, 1, null)), 'RPC_UNKNOWN_SERVICE'))
  t.true(isStrataError(await t.throwsAsync(client.call(address, SVC, 99, null)), 'RPC_UNKNOWN_METHOD'))
})

test('calls of unknown services and methods share one stats entry: as many entries after 2N distinct ones as after N', async (t) => {
  const { client, address } = await setup(t)
  const N = 200
  const unknownCalls = async (from: number) => {
    for (let i = from; i < from + N; i++) {
      t.true(isStrataError(await t.throwsAsync(client.call(address, 1000 + i, i, null)), 'RPC_UNKNOWN_SERVICE'))
      t.true(isStrataError(await t.throwsAsync(client.call(address, SVC, 1000 + i, null)), 'RPC_UNKNOWN_METHOD'))
    }
  }
  await client.call(address, SVC, 1, null)
  await client.stats(address) // counted from the next reply on
  await unknownCalls(0)
  const afterN = Object.keys(((await client.stats(address)) as any).methods).length
  await unknownCalls(N)
  const stats: any = await client.stats(address)
  t.is(Object.keys(stats.methods).length, afterN)
  t.deepEqual(Object.keys(stats.methods).sort(), ['42.1', UNKNOWN_METHOD_STATS, 'stats'].sort())
  t.is(stats.methods[UNKNOWN_METHOD_STATS].calls, 4 * N)
  t.is(stats.methods[UNKNOWN_METHOD_STATS].errors, 4 * N)
})

test('deadline: caller gets TIMEOUT and the server handler is aborted', async (t) => {
  const { client, address, seen } = await setup(t)
  await client.call(address, SVC, 1, 'warm up') // connect first: the deadline is about the request
  const e = await t.throwsAsync(client.call(address, SVC, 2, { ms: 5000 }, { timeoutMs: 100 }))
  t.true(isStrataError(e, 'TIMEOUT'))
  await new Promise((r) => setTimeout(r, 100))
  t.is(seen.aborted, 1)
  // the connection is still usable
  t.deepEqual(await client.call(address, SVC, 1, 'ok'), { echo: 'ok' })
})

test('cancellation through AbortSignal', async (t) => {
  const { client, address, seen } = await setup(t)
  await client.call(address, SVC, 1, 'warm up')
  const ac = new AbortController()
  const p = client.call(address, SVC, 2, { ms: 5000 }, { signal: ac.signal })
  setTimeout(() => ac.abort(), 50)
  t.true(isStrataError(await t.throwsAsync(p), 'CANCELLED'))
  // the cancel frame reaches the handler after the caller has its answer: wait for it however loaded the machine is
  for (const until = Date.now() + 10_000; seen.aborted === 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 20))
  t.is(seen.aborted, 1)
})

test('a handler that reads its signal only after the caller cancelled sees it aborted', async (t) => {
  const { client, address, seen } = await setup(t)
  // connected first: an abort while the connection is still being made never sends the call (the test below),
  // which on a loaded machine the 50 ms could otherwise hit
  t.deepEqual(await client.call(address, SVC, 1, 0), { echo: 0 })
  const ac = new AbortController()
  const p = client.call(address, SVC, 6, { ms: 300 }, { signal: ac.signal })
  setTimeout(() => ac.abort(), 50)
  t.true(isStrataError(await t.throwsAsync(p), 'CANCELLED'))
  // the handler looks after its 300 ms sleep, however late the scheduler runs it
  for (const until = Date.now() + 10_000; seen.aborted === 0 && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50))
  t.is(seen.aborted, 1)
})

test('a call aborted while its connection is being made is cancelled and never sent', async (t) => {
  const { client, address } = await setup(t)
  const ac = new AbortController()
  // the client has no connection to the server yet: the abort lands while call() awaits it
  const p = client.call(address, SVC, 6, { ms: 50 }, { signal: ac.signal })
  ac.abort()
  t.true(isStrataError(await t.throwsAsync(p), 'CANCELLED'))
  // the connection made meanwhile serves the next call
  t.deepEqual(await client.call(address, SVC, 1, 2), { echo: 2 })
})

test('oversized frame is refused before buffering and only that connection closes', async (t) => {
  const { client, address } = await setup(t, { maxFrameBytes: 1024 * 1024 })
  const [host, port] = address.split(':')
  const sock = net.connect({ host: host!, port: Number(port) })
  await new Promise((r) => sock.once('connect', r))
  const closed = new Promise((r) => sock.once('close', r))
  const header = Buffer.alloc(4)
  header.writeUInt32BE(2 * 1024 * 1024)
  sock.write(header) // only the header: the server must not wait for 2 MiB
  await closed
  t.pass('server closed the offending connection')
  // the process keeps serving others
  t.deepEqual(await client.call(address, SVC, 1, 1), { echo: 1 })
  // client side: a request larger than the cap is refused locally with a clear code
  const e = await t.throwsAsync(client.call(address, SVC, 1, Buffer.alloc(2 * 1024 * 1024)))
  t.true(isStrataError(e, 'RPC_FRAME_TOO_LARGE'))
  // a reply larger than the cap comes back as an error, not silence
  const e2 = await t.throwsAsync(client.call(address, SVC, 4, { size: 2 * 1024 * 1024 }))
  t.true(isStrataError(e2, 'RPC_FRAME_TOO_LARGE'))
})

test('malformed frame closes that connection only', async (t) => {
  const { client, address } = await setup(t)
  const [host, port] = address.split(':')
  for (const garbage of [Buffer.from([0, 0, 0, 3, 0xc1, 0xc1, 0xc1]), Buffer.from([0, 0, 0, 1, 0x05]), Buffer.from([0, 0, 0, 0])]) {
    const sock = net.connect({ host: host!, port: Number(port) })
    await new Promise((r) => sock.once('connect', r))
    const closed = new Promise((r) => sock.once('close', r))
    sock.write(garbage)
    await closed
  }
  t.deepEqual(await client.call(address, SVC, 1, 'still'), { echo: 'still' })
})

test('frame decoder splits arbitrary chunk boundaries', (t) => {
  const frames = [1, 2, 3].map((i) => encodeFrame({ id: i, service: 1, method: 1, flags: 1, payload: Buffer.alloc(i * 1000, i) }))
  const all = Buffer.concat(frames)
  const dec = new FrameDecoder(1 << 20)
  const out: Buffer[] = []
  for (let i = 0; i < all.length; i += 7) out.push(...dec.push(all.subarray(i, i + 7)))
  t.is(out.length, 3)
})

test('fault hooks over the admin RPC: delay, fail, drop, clear', async (t) => {
  const { client, address } = await setup(t)
  const f = await client.setFault(address, { service: SVC, method: 1, kind: 'fail', code: 'TARGET_OFFLINE', count: 1 })
  t.is(f.kind, 'fail')
  t.true(isStrataError(await t.throwsAsync(client.call(address, SVC, 1, null)), 'TARGET_OFFLINE'))
  t.deepEqual(await client.call(address, SVC, 1, 'after'), { echo: 'after' }, 'count-limited fault expired')

  await client.setFault(address, { service: SVC, method: 1, kind: 'delay', delayMs: 200 })
  const t0 = performance.now()
  await client.call(address, SVC, 1, null)
  t.true(performance.now() - t0 >= 180)
  t.is((await client.clearFaults(address)).removed, 1)

  await client.setFault(address, { service: SVC, kind: 'drop', count: 1 })
  t.true(isStrataError(await t.throwsAsync(client.call(address, SVC, 1, null, { timeoutMs: 200 })), 'TIMEOUT'))
  t.deepEqual(await client.call(address, SVC, 1, 2), { echo: 2 })
  t.true(isStrataError(await t.throwsAsync(client.setFault(address, { service: SVC, kind: 'fail', code: 'NOPE' })), 'INVALID_ARGUMENT'))
})

test('reconnects with backoff after the server restarts on the same port', async (t) => {
  const server = new RpcServer()
  server.addService(SVC, { 1: (p: unknown) => p })
  const address = await server.listen()
  const port = Number(address.split(':')[1])
  const client = new RpcClient({ minBackoffMs: 20, maxBackoffMs: 100 })
  let server2: RpcServer | null = null
  t.teardown(async () => {
    client.close()
    await server.close()
    await server2?.close()
  })
  t.is(await client.call(address, SVC, 1, 1), 1)
  await server.close()
  const e = await t.throwsAsync(client.call(address, SVC, 1, 2, { timeoutMs: 300 }))
  t.true(isStrataError(e, ['RPC_CONNECTION_CLOSED', 'RPC_CONNECT_FAILED', 'TIMEOUT']))
  server2 = new RpcServer()
  server2.addService(SVC, { 1: (p: unknown) => p })
  await server2.listen(port)
  // backoff may delay the first attempt, but a call with a generous deadline gets through
  t.is(await client.call(address, SVC, 1, 3, { timeoutMs: 2000 }), 3)
})

test('connect failure is a retryable RPC_CONNECT_FAILED', async (t) => {
  const client = new RpcClient({ connectTimeoutMs: 500 })
  t.teardown(() => client.close())
  const probe = net.createServer()
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()))
  const port = (probe.address() as net.AddressInfo).port
  await new Promise<void>((r) => probe.close(() => r()))
  const e = await t.throwsAsync(client.call(`127.0.0.1:${port}`, ServiceId.Core, 1, null, { timeoutMs: 1000 }))
  t.true(isStrataError(e, 'RPC_CONNECT_FAILED'))
  t.true((e as StrataError).retryable)
  t.true(isStrataError(await t.throwsAsync(client.call('nonsense', 1, 1, null)), 'INVALID_ARGUMENT'))
})

test('close is idempotent and rejects in-flight calls', async (t) => {
  const { client, address, server } = await setup(t)
  await client.call(address, SVC, 1, 'warm up')
  const p = client.call(address, SVC, 2, { ms: 2000 })
  await new Promise((r) => setTimeout(r, 50))
  await Promise.all([server.close(), server.close()])
  t.true(isStrataError(await t.throwsAsync(p), ['RPC_CONNECTION_CLOSED', 'CLOSED']))
  client.close()
  client.close()
  t.true(isStrataError(await t.throwsAsync(client.call(address, SVC, 1, null)), 'CLOSED'))
})

test('a request the codec cannot encode fails at once with a non-retryable INVALID_ARGUMENT; the connection goes on', async (t) => {
  const { client, address } = await setup(t)
  const err = await t.throwsAsync(client.call(address, SVC, 1, { id: 2n ** 64n }))
  t.true(isStrataError(err))
  t.is((err as StrataError).code, 'INVALID_ARGUMENT')
  t.false((err as StrataError).retryable)
  t.regex(err!.message, /cannot encode the request: /)
  t.deepEqual(await client.call<any>(address, SVC, 1, { id: 2n ** 64n - 1n }), { echo: { id: 2n ** 64n - 1n } })
  // a reply the server cannot encode is its fault: INTERNAL, at once, not a silent wait for the deadline
  const rep = await t.throwsAsync(client.call(address, SVC, 7, {}))
  t.is((rep as StrataError).code, 'INTERNAL')
  t.regex(rep!.message, /cannot encode the reply/)
})

test('a TIMEOUT names the method (getRoutingInfo), not only its numbers', async (t) => {
  // a server that accepts and never answers
  const sockets: net.Socket[] = []
  const srv = net.createServer((s) => sockets.push(s))
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r))
  const address = `127.0.0.1:${(srv.address() as net.AddressInfo).port}`
  const client = new RpcClient()
  t.teardown(async () => {
    client.close()
    for (const s of sockets) s.destroy()
    await new Promise((r) => srv.close(r))
  })
  // 2 s, not less: the deadline covers the connect too, which a loaded machine (CI at load 19) can take long over
  const e = await t.throwsAsync(client.call(address, ServiceId.Mgmtd, MgmtdMethod.getRoutingInfo, {}, { timeoutMs: 2000 }))
  t.true(isStrataError(e, 'TIMEOUT'), String(e))
  t.regex(e!.message, new RegExp(`call getRoutingInfo \\(${ServiceId.Mgmtd}\\.${MgmtdMethod.getRoutingInfo}\\) to ${address} timed out`))
})
