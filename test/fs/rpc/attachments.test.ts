// Large Buffers travel after the msgpack envelope (out of band) and come back
// as slices of the frame; small messages keep the plain one-envelope form.
import test, { type ExecutionContext } from 'ava'
import net from 'node:net'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createHash, randomBytes } from 'node:crypto'
import { native } from '../../../fs/common/index.js'
import { RpcServer, RpcClient, Connection, DirectReader, encodeFrame, encodeFrameParts, decodeEnvelope, FrameDecoder, FileSlice, AFTER_REPLY, ATTACHMENT_MIN_BYTES, type IncomingRequest } from '../../../fs/rpc/index.js'


/** A server on a free port and a client, both closed when the test ends; add services after. */
async function serverAndClient(t: ExecutionContext): Promise<{ server: RpcServer; address: string; client: RpcClient }> {
  const server = new RpcServer()
  const address = await server.listen()
  // the server shares this process with the file's other tests: on a loaded machine its accept can wait
  // on their work past the default 3 s connect timeout, which is not what these tests are about
  const client = new RpcClient({ connectTimeoutMs: 60_000 })
  t.teardown(async () => {
    client.close()
    await server.close()
  })
  return { server, address, client }
}

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
  const { server, address, client } = await serverAndClient(t)
  server.addService(42, { 1: (p: unknown) => p })
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

test('a sink receives reply attachments straight into the caller\'s buffers; the rest arrive as usual', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  server.addService(42, { 1: (p: unknown) => p })
  const a = randomBytes(3 * ATTACHMENT_MIN_BYTES + 5)
  const b = randomBytes(ATTACHMENT_MIN_BYTES)
  const c = randomBytes(5 * ATTACHMENT_MIN_BYTES)
  const destA = Buffer.alloc(a.length + 100, 0xaa)
  const destC = Buffer.alloc(c.length, 0xaa)
  let seen: { placeholders: number; lengths: readonly number[] } | undefined
  const r = await client.call<{ a: Buffer; mid: { b: Buffer; small: Buffer }; c: Buffer }>(address, 42, 1, { a, mid: { b, small: Buffer.from('x') }, c }, {
    sink: (payload, placeholders, lengths) => {
      const p = payload as { a: Buffer; c: Buffer }
      seen = { placeholders: placeholders.length, lengths }
      const out: Array<Buffer | undefined> = []
      out[placeholders.indexOf(p.a)] = destA.subarray(0, a.length)
      out[placeholders.indexOf(p.c)] = destC
      return out
    },
  })
  t.deepEqual(seen, { placeholders: 3, lengths: [a.length, b.length, c.length] })
  t.true(r.a.equals(a) && r.mid.b.equals(b) && r.c.equals(c))
  t.is(r.mid.small.toString(), 'x')
  t.is(r.a.buffer, destA.buffer, 'a was received in place')
  t.is(r.c.buffer, destC.buffer, 'c was received in place')
  t.not(r.mid.b.buffer, destA.buffer)
  t.true(destA.subarray(a.length).every((x) => x === 0xaa), 'nothing written past the placed range')
  // a sink that declines leaves the reply as it would be without one
  const plain = await client.call<Buffer>(address, 42, 1, a, { sink: () => null })
  t.true(plain.equals(a))
})

test('a sink can scatter one attachment over a list of buffers: the payload holds that list, a list that does not add up is ignored', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  server.addService(42, { 1: (p: unknown) => p })
  const a = randomBytes(4 * ATTACHMENT_MIN_BYTES + 3)
  const b = randomBytes(2 * ATTACHMENT_MIN_BYTES)
  // three pieces of one region in reverse memory order, guarded on both sides
  const region = Buffer.alloc(a.length + 300, 0xaa)
  const cut = [ATTACHMENT_MIN_BYTES + 1, 2 * ATTACHMENT_MIN_BYTES]
  const parts = [
    region.subarray(200 + a.length - cut[0]!, 200 + a.length),
    region.subarray(200 + a.length - cut[0]! - cut[1]!, 200 + a.length - cut[0]!),
    region.subarray(100, 100 + a.length - cut[0]! - cut[1]!),
  ]
  const tooShort = [Buffer.alloc(b.length - 1)]
  const r = await client.call<{ a: unknown; b: unknown }>(address, 42, 1, { a, b }, {
    sink: (payload, placeholders) => {
      const p = payload as { a: Buffer; b: Buffer }
      const out: Array<Buffer | Buffer[] | undefined> = []
      out[placeholders.indexOf(p.a)] = parts
      out[placeholders.indexOf(p.b)] = tooShort
      return out
    },
  })
  t.true(Array.isArray(r.a), 'the scattered attachment is delivered as its list')
  const list = r.a as Buffer[]
  t.is(list.length, 3)
  list.forEach((x, k) => t.is(x, parts[k]))
  t.true(Buffer.concat(list).equals(a), 'the bytes are across the list in order')
  t.true(Buffer.isBuffer(r.b) && (r.b as Buffer).equals(b), 'a list of the wrong size leaves that attachment to arrive as usual')
  t.true(region.subarray(0, 100).every((x) => x === 0xaa) && region.subarray(200 + a.length).every((x) => x === 0xaa), 'nothing written outside the list')
  t.true(region.subarray(100 + a.length - cut[0]! - cut[1]!, 200 + a.length - cut[0]! - cut[1]!).every((x) => x === 0xaa), 'nor between its pieces')
})

test('a placed reply whose call is given up mid-frame writes nothing more into the caller\'s buffer', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  const big = Buffer.alloc(64 * 1024 * 1024, 0x55)
  server.addService(42, { 1: () => big, 2: (p: unknown) => p })
  const dest = Buffer.alloc(big.length, 0xaa)
  const ac = new AbortController()
  const call = client.call(address, 42, 1, null, {
    signal: ac.signal,
    // abort right after the first socket read of the frame landed (microtasks run once that callback returns)
    sink: () => {
      queueMicrotask(() => ac.abort())
      return [dest]
    },
  })
  await t.throwsAsync(call, { code: 'CANCELLED' })
  const snapshot = Buffer.from(dest)
  const written = snapshot.indexOf(0xaa)
  t.true(written > 0 && written < big.length, `the abort came mid-frame (${written} bytes in)`)
  // the same connection goes on: the rest of the big frame is read (into scratch memory) before this reply
  t.deepEqual(await client.call(address, 42, 2, 'after'), 'after')
  t.true(dest.equals(snapshot), 'not one byte written after the call was given up')
})

test('large request frames are received into recycled buffers; a method that keeps nothing gives them back, and every request still sees its own bytes', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex')
  const later = () => new Promise((r) => setTimeout(r, 2))
  // hash after a pause, so other frames arrive (and reuse memory) while this handler still holds its data
  server.addService(42, { 1: async (p: { data: Buffer }) => { await later(); return digest(p.data) } }, { recycleRequests: [1] })
  server.addService(43, { 1: async (p: { data: Buffer }) => { await later(); return digest(p.data) } })
  const payloads = Array.from({ length: 48 }, () => randomBytes(1024 * 1024 + 17))
  for (let round = 0; round < 3; round++) {
    const got = await Promise.all(payloads.map((data) => client.call<string>(address, 42, 1, { data })))
    t.deepEqual(got, payloads.map(digest))
  }
  const s1 = server.framePool.stats()
  t.true(s1.hits > 0, `recycled frames were reused (${JSON.stringify(s1)})`)
  // not declared: frames are left to the GC, never handed out twice
  const before = server.framePool.stats()
  const got = await Promise.all(payloads.map((data) => client.call<string>(address, 43, 1, { data })))
  t.deepEqual(got, payloads.map(digest))
  t.true(server.framePool.stats().freeBytes <= before.freeBytes, 'nothing was given back')
})

test('accepted sockets receive in place on this Node (the server side of the fast path is not silently off)', async (t) => {
  const server = net.createServer({ pauseOnConnect: true })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => server.close())
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r))
  const { port } = server.address() as net.AddressInfo
  const client = net.connect({ host: '127.0.0.1', port })
  t.teardown(() => client.destroy())
  const sock = await accepted
  const reader = DirectReader.forAccepted(sock, 1 << 24, null)
  t.truthy(reader, 'net.Socket internals for onread are where Node 20 keeps them')
  const got = new Promise<IncomingRequest>((resolve) => {
    const conn = new Connection(sock, 1 << 24, resolve, null, reader)
    t.teardown(() => conn.close())
  })
  sock.resume()
  const big = randomBytes(ATTACHMENT_MIN_BYTES * 4 + 3)
  const frame = encodeFrame({ id: 1, service: 1, method: 1, flags: 1, payload: { big, small: 'x' } })
  for (let i = 0; i < frame.length; i += 10_000) client.write(frame.subarray(i, i + 10_000))
  const req = await got
  t.is(sock.listenerCount('data'), 0, 'bytes came through onread, not data events')
  const p = req.env.payload as { big: Buffer; small: string }
  t.true(p.big.equals(big))
  t.is(p.small, 'x')
  t.is(req.body!.length, frame.length - 4, 'the frame was received into one body of its own')
})

/** Plays a socket in onread mode: each read fills at most `maxRead` bytes of what the decoder offers. */
function feedInPlace(dec: FrameDecoder, bytes: Buffer, maxRead: number): Array<Buffer | { env: unknown }> {
  const out: Array<Buffer | { env: unknown }> = []
  let off = 0
  while (off < bytes.length) {
    const target = dec.readTarget()
    const n = Math.min(target.length, maxRead, bytes.length - off)
    bytes.copy(target, 0, off, off + n)
    off += n
    out.push(...dec.commitRead(n))
  }
  return out
}

test('in-place reception gives back slab bytes that a large frame only passed through, and never those a small frame still holds', (t) => {
  for (const placed of [false, true]) {
    const dec = new FrameDecoder(1 << 24)
    const into = Buffer.alloc(1024 * 1024)
    if (placed) dec.placer = (_env, _ph, lengths) => ({ into: lengths.map(() => into), live: () => true })
    const small = encodeFrame({ id: 1, service: 3, method: 1, flags: 2, payload: { tag: Buffer.from('first small frame') } })
    const data = randomBytes(1024 * 1024)
    const large = encodeFrame({ id: 2, service: 3, method: 1, flags: 2, payload: { data } })
    const next = encodeFrame({ id: 3, service: 3, method: 1, flags: 2, payload: { tag: Buffer.from('second small frame') } })
    const [first] = feedInPlace(dec, small, 64 * 1024) as Buffer[]
    // one read brings the large frame's header, envelope and its first ~60 KiB (most of the slab), as a socket read would
    const got = feedInPlace(dec, large, 60 * 1024)
    t.is(got.length, 1)
    const [second] = feedInPlace(dec, next, 64 * 1024) as Buffer[]
    t.is(second!.buffer, first!.buffer, `${placed ? 'placed' : 'whole'} frame: the next small frame reuses the slab`)
    t.deepEqual((decodeEnvelope(first!).payload as { tag: Buffer }).tag.toString(), 'first small frame', 'an earlier frame is intact')
    t.deepEqual((decodeEnvelope(second!).payload as { tag: Buffer }).tag.toString(), 'second small frame')
    const body = placed ? ((got[0] as { env: { payload: { data: Buffer } } }).env.payload.data) : (decodeEnvelope(got[0] as Buffer).payload as { data: Buffer }).data
    t.true(body.equals(data), 'the large frame arrived whole')
    if (placed) t.is(body.buffer, into.buffer)
  }
})

/** A file holding `content` in a fresh directory, open for reading; both gone at teardown. */
function tempFile(t: ExecutionContext, content: Buffer): { fd: number; dir: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-sendfile-'))
  fs.writeFileSync(path.join(dir, 'data'), content)
  const fd = fs.openSync(path.join(dir, 'data'), 'r')
  t.teardown(() => {
    fs.closeSync(fd)
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return { fd, dir }
}

test('a FileSlice in a reply reaches the caller as the file\'s bytes (sendfile), in order with the replies around it, and the file is released after', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  const content = randomBytes(3 * 1024 * 1024 + 123)
  const { fd } = tempFile(t, content)
  let released = 0
  server.addService(42, {
    // a slice of the file, with a small buffer before it and a large one after, as a batch reply would be
    1: (p: { off: number; len: number }) => ({
      head: Buffer.from(`slice ${p.off}`),
      data: new FileSlice(fd, p.off, p.len),
      tail: Buffer.alloc(ATTACHMENT_MIN_BYTES, p.off & 0xff),
      [AFTER_REPLY]: () => released++,
    }),
    2: (p: unknown) => p,
  })
  const calls: Array<Promise<void>> = []
  for (let i = 0; i < 40; i++) {
    const off = i * 65_537
    const len = Math.min(1 + ((i * 99_991) % (2 * 1024 * 1024)), content.length - off)
    calls.push(
      client.call<{ head: Buffer; data: Buffer; tail: Buffer }>(address, 42, 1, { off, len }).then((r) => {
        t.is(r.head.toString(), `slice ${off}`)
        t.true(r.data.equals(content.subarray(off, off + len)), `slice at ${off}, ${len} bytes`)
        t.true(r.tail.length === ATTACHMENT_MIN_BYTES && r.tail.every((x) => x === (off & 0xff)))
      }),
    )
    calls.push(client.call<string>(address, 42, 2, `small ${i}`).then((r) => void t.is(r, `small ${i}`)))
  }
  await Promise.all(calls)
  t.is(released, 40, 'every reply released its file range once written')
  // tools that encode a whole frame in memory read the slice
  t.deepEqual(encodeFrame({ id: 1, service: 1, method: 1, flags: 2, payload: { d: new FileSlice(fd, 5, 70_000) } }).subarray(-70_000), content.subarray(5, 70_005))
})

test('sendfile: a file shorter than the range fails with EOVERFLOW and the connection closes, not a hang; bad arguments are refused', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  const { fd } = tempFile(t, randomBytes(100_000))
  server.addService(42, { 1: () => ({ data: new FileSlice(fd, 0, 200_000) }) })
  await t.throwsAsync(client.call(address, 42, 1, null, { timeoutMs: 10_000 }), { code: 'RPC_CONNECTION_CLOSED' })
  const addon = native()
  t.throws(() => addon.sendfile(-1, fd, 0, 1, 1000), { code: 'EINVAL' })
  t.throws(() => addon.sendfile(0, fd, 0.5, 1, 1000), { code: 'EINVAL' })
  t.throws(() => addon.sendfileCached(0, -2, 0, 1), { code: 'EINVAL' })
  const e = await t.throwsAsync(addon.sendfile(fd, fd, 0, 10, 1000))
  t.true(['EBADF', 'EINVAL'].includes((e as NodeJS.ErrnoException).code ?? ''), 'a file open for reading is no place to send to')
})

test('a request can ask for its first attachment at an aligned offset; the server receives it at an aligned address', async (t) => {
  const { server, address, client } = await serverAndClient(t)
  const seen: boolean[] = []
  server.addService(42, { 1: (p: { data: Buffer }) => { seen.push(native().isAligned(p.data, 4096)); return createHash('sha256').update(p.data).digest('hex') } })
  for (const len of [ATTACHMENT_MIN_BYTES, 1024 * 1024, 1024 * 1024 + 4096]) {
    for (let extra = 0; extra < 3; extra++) {
      const data = randomBytes(len)
      // envelopes of different lengths need different padding
      const payload = { note: 'x'.repeat(extra * 37), data }
      const frame = encodeFrameParts({ id: 1, service: 42, method: 1, flags: 1, payload }, 4096)
      const envelopeEnd = 5 + (frame.parts[1] as Buffer).length
      const pad = frame.parts.length === 4 ? (frame.parts[2] as Buffer).length : 0
      t.is((envelopeEnd + pad) % 4096, 0, 'the first attachment starts at a multiple of 4096 in the body')
      const decoded = decodeEnvelope(Buffer.concat(frame.parts as Buffer[]).subarray(4)).payload as { data: Buffer }
      t.true(decoded.data.equals(data), 'the padded frame decodes to the same payload')
      t.is(await client.call<string>(address, 42, 1, payload, { alignAttachments: 4096 }), createHash('sha256').update(data).digest('hex'))
    }
  }
  t.true(seen.every(Boolean), `every payload arrived aligned (${seen.join(',')})`)
  t.throws(() => encodeFrameParts({ id: 1, service: 42, method: 1, flags: 1, payload: { data: randomBytes(ATTACHMENT_MIN_BYTES) } }, 1 << 20), { code: 'INVALID_ARGUMENT' })
})

/** A connected TCP pair on loopback: the sending end's descriptor and the receiving socket, paused. */
async function tcpPair(t: ExecutionContext): Promise<{ fd: number; sender: net.Socket; receiver: net.Socket }> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve))
  const sender = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1')
  await new Promise<void>((resolve) => sender.once('connect', resolve))
  const receiver = await accepted
  receiver.pause()
  t.teardown(() => {
    sender.destroy()
    receiver.destroy()
    server.close()
  })
  const fd = (sender as unknown as { _handle: { fd: number } })._handle.fd
  return { fd, sender, receiver }
}

function collect(s: net.Socket, bytes: number): Promise<Buffer> {
  const parts: Buffer[] = []
  let got = 0
  return new Promise((resolve, reject) => {
    s.on('data', (d: Buffer) => {
      parts.push(d)
      got += d.length
      if (got >= bytes) resolve(Buffer.concat(parts))
    })
    s.on('error', reject)
    s.resume()
  })
}

test('sendfileCached sends what fits at once and sendfileOnLoop the rest as the reader makes room; -1 for a range not in the page cache', async (t) => {
  const addon = native()
  const { fd, receiver } = await tcpPair(t)
  const content = randomBytes(24 * 1024 * 1024 + 321)
  const { fd: ffd, dir } = tempFile(t, content)
  const off = 4097
  const len = content.length - off
  const now = addon.sendfileCached(fd, ffd, off, len)
  // the reader is paused: the socket buffer (a few MiB at most) cannot take 24 MiB
  t.true(now > 0 && now < len, `sent ${now} of ${len} at once`)
  let settled = false
  const rest = addon.sendfileOnLoop(fd, ffd, off + now, len - now, 10_000).finally(() => (settled = true))
  await new Promise((r) => setTimeout(r, 200))
  t.false(settled, 'waits for room while the reader does not read')
  const [received] = await Promise.all([collect(receiver, len), rest])
  t.true(received.equals(content.subarray(off)), 'every byte arrives, in order')
  t.is(await addon.sendfileOnLoop(fd, ffd, 0, 0, 1000), undefined, 'nothing to send resolves at once')

  // a file dropped from the page cache is not sent on this thread
  const cold = path.join(dir, 'cold')
  fs.writeFileSync(cold, randomBytes(256 * 1024))
  const cfd = fs.openSync(cold, 'r')
  try {
    fs.fdatasyncSync(cfd)
    // POSIX_FADV_DONTNEED through dd: Node has no fadvise
    const dd = await import('node:child_process').then((cp) => cp.spawnSync('dd', [`if=${cold}`, 'iflag=nocache', 'count=0', 'status=none']))
    if (dd.status === 0) t.is(addon.sendfileCached(fd, cfd, 0, 256 * 1024), -1)
    else t.log('dd cannot drop pages here; the cold case is not checked')
  } finally {
    fs.closeSync(cfd)
  }
})

test('sendfileOnLoop: a reader that never reads fails it with ETIMEDOUT, a reader that goes away with EPIPE or ECONNRESET; bad arguments are refused', async (t) => {
  const addon = native()
  const { fd: ffd } = tempFile(t, randomBytes(32 * 1024 * 1024))
  {
    const { fd } = await tcpPair(t)
    const t0 = Date.now()
    const e = await t.throwsAsync(addon.sendfileOnLoop(fd, ffd, 0, 32 * 1024 * 1024, 300))
    t.is((e as NodeJS.ErrnoException).code, 'ETIMEDOUT')
    // a hang guard, not timing: the reader never reads, so without the 300 ms stall timeout this never ends
    t.log(`failed after ${Date.now() - t0} ms`)
    t.true(Date.now() - t0 < 60_000, 'gives up after the stall, not after the whole transfer')
  }
  {
    const { fd, receiver } = await tcpPair(t)
    const p = addon.sendfileOnLoop(fd, ffd, 0, 32 * 1024 * 1024, 10_000)
    setTimeout(() => receiver.destroy(), 100)
    const e = await t.throwsAsync(p)
    t.true(['EPIPE', 'ECONNRESET'].includes((e as NodeJS.ErrnoException).code ?? ''), String((e as Error).message))
  }
  {
    // the file ends before the range does
    const { fd, receiver } = await tcpPair(t)
    receiver.resume()
    const e = await t.throwsAsync(addon.sendfileOnLoop(fd, ffd, 32 * 1024 * 1024 - 10, 20, 10_000))
    t.is((e as NodeJS.ErrnoException).code, 'EOVERFLOW')
  }
  t.throws(() => addon.sendfileOnLoop(-1, ffd, 0, 1, 1000), { code: 'EINVAL' })
  t.throws(() => addon.sendfileOnLoop(0, ffd, 0, 1, 0), { code: 'EINVAL' })
  t.throws(() => addon.sendfileOnLoop(ffd, ffd, 1.5, 1, 1000), { code: 'EINVAL' })
})
