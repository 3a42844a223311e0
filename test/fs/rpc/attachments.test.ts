// Large Buffers travel after the msgpack envelope (out of band) and come back
// as slices of the frame; small messages keep the plain one-envelope form.
import test from 'ava'
import net from 'node:net'
import { randomBytes } from 'node:crypto'
import { RpcServer, RpcClient, encodeFrame, decodeEnvelope, FrameDecoder, ATTACHMENT_MIN_BYTES } from '../../../fs/rpc/index.js'

test('envelope with large and small buffers round-trips through encode, split decode and unpack', (t) => {
  const big1 = randomBytes(ATTACHMENT_MIN_BYTES)
  const big2 = randomBytes(3 * ATTACHMENT_MIN_BYTES + 7)
  const small = randomBytes(100)
  const frame = encodeFrame({ id: 7, service: 3, method: 1, flags: 1, payload: { a: big1, list: [small, { b: big2 }], n: 2n ** 60n } })
  const dec = new FrameDecoder(1 << 24)
  const bodies: Buffer[] = []
  for (let i = 0; i < frame.length; i += 4093) bodies.push(...dec.push(frame.subarray(i, i + 4093)))
  t.is(bodies.length, 1)
  const env = decodeEnvelope(bodies[0]!)
  const p = env.payload as { a: Buffer; list: [Buffer, { b: Buffer }]; n: bigint }
  t.deepEqual(p.a, big1)
  t.deepEqual(p.list[0], small)
  t.deepEqual(p.list[1].b, big2)
  t.is(p.n, 2n ** 60n)
})

test('a frame without large buffers is a plain msgpack envelope', (t) => {
  const frame = encodeFrame({ id: 1, service: 3, method: 1, flags: 1, payload: { x: Buffer.alloc(10) } })
  t.not(frame[4], 0xc1, 'no attachment marker')
})

test('an attachment reference beyond the attached bytes is refused; only that connection closes', async (t) => {
  const server = new RpcServer()
  server.addService(42, { 1: (p: unknown) => p })
  const address = await server.listen()
  const client = new RpcClient()
  t.teardown(async () => {
    client.close()
    await server.close()
  })
  const frame = encodeFrame({ id: 1, service: 42, method: 1, flags: 1, payload: Buffer.alloc(ATTACHMENT_MIN_BYTES, 1) })
  // cut the attached bytes short but keep the header consistent with the shorter body
  const cut = frame.subarray(0, frame.length - 1000)
  cut.writeUInt32BE(cut.length - 4, 0)
  const [host, port] = address.split(':')
  const sock = net.connect({ host: host!, port: Number(port) })
  await new Promise((r) => sock.once('connect', r))
  const closed = new Promise((r) => sock.once('close', r))
  sock.write(cut)
  await closed
  const big = randomBytes(2 * ATTACHMENT_MIN_BYTES)
  t.deepEqual(await client.call(address, 42, 1, big), big, 'the server still serves, large payloads included')
})
