// Codec of the agent protocol, the addon's unixListen, and the agent run as
// an ordinary child process (not PID 1: no peer check, a child subreaper).
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { native } from '../../../../fs/common/native.js'
import { AgentClient, agentBinaryPath } from '../../../../sandbox/backends/agent/index.js'
import { F, FrameDecoder, Fields, K, MAX_PAYLOAD, R, encodeFields, encodeFrame } from '../../../../sandbox/backends/agent/protocol.js'
import { tmpDir, until } from '../../../helpers/procs.js'

test('frames and fields: encode, decode across split and coalesced chunks', (t) => {
  const a = encodeFrame(F.EXEC, [[K.ARG, 'echo'], [K.ARG, 'hé'], [K.TIMEOUT_MS, 1500], [K.MAX_OUTPUT, 2n ** 40n]])
  t.is(a.readUInt32BE(0), a.length - 4)
  t.is(a[4], F.EXEC)
  const b = encodeFrame(R.DATA, Buffer.from('raw bytes'))
  const c = encodeFrame(F.EOF)
  t.deepEqual([...c], [0, 0, 0, 1, F.EOF])
  const all = Buffer.concat([a, b, c])
  for (const cut of [1, 3, 5, 7, a.length, a.length + 2, all.length - 1]) {
    const d = new FrameDecoder()
    const frames = [...d.push(all.subarray(0, cut)), ...d.push(all.subarray(cut))]
    t.deepEqual(frames.map((f) => f.type), [F.EXEC, R.DATA, F.EOF], `cut at ${cut}`)
    t.is(d.buffered, 0)
    const f = new Fields(frames[0]!.payload)
    t.is(f.str(K.ARG), 'echo')
    t.is(f.num(K.TIMEOUT_MS), 1500)
    t.is(f.bigint(K.MAX_OUTPUT), 2n ** 40n)
    t.is(frames[1]!.payload.toString(), 'raw bytes')
  }
  // byte by byte
  const d = new FrameDecoder()
  const got: number[] = []
  for (const byte of all) for (const f of d.push(Buffer.from([byte]))) got.push(f.type)
  t.deepEqual(got, [F.EXEC, R.DATA, F.EOF])
})

test('decoder and fields reject malformed input with SANDBOX_PROTOCOL_ERROR', (t) => {
  t.throws(() => new FrameDecoder().push(Buffer.from([0, 0, 0, 0, 1])), { code: 'SANDBOX_PROTOCOL_ERROR' })
  const big = Buffer.alloc(5)
  big.writeUInt32BE(MAX_PAYLOAD + 2)
  t.throws(() => new FrameDecoder().push(big), { code: 'SANDBOX_PROTOCOL_ERROR' })
  t.throws(() => new Fields(Buffer.from([K.PATH, 0, 0, 0, 9, 1])), { code: 'SANDBOX_PROTOCOL_ERROR' })
  t.throws(() => new Fields(Buffer.from([K.PATH, 0, 0])), { code: 'SANDBOX_PROTOCOL_ERROR' })
  t.throws(() => new Fields(encodeFields([[K.BYTES, 'abc']])).num(K.BYTES), { code: 'SANDBOX_PROTOCOL_ERROR' })
  t.throws(() => new Fields(encodeFields([[K.BYTES, 2n ** 60n]])).num(K.BYTES), { code: 'SANDBOX_PROTOCOL_ERROR' })
  t.throws(() => encodeFields([[K.PATH, 'a\0b']]), { code: 'INVALID_ARGUMENT' })
  t.throws(() => encodeFields([[K.MODE, -1]]), { instanceOf: RangeError })
  t.throws(() => encodeFrame(F.DATA, Buffer.alloc(MAX_PAYLOAD + 1)), { code: 'INVALID_ARGUMENT' })
})

const root = process.getuid?.() === 0

;(root ? test : test.skip)('unixListen: a 0600 listening socket fd; EADDRINUSE and ENAMETOOLONG', (t) => {
  const dir = tmpDir(t)
  const p = path.join(dir, 'l.sock')
  const fd = native().unixListen(p, 16)
  t.true(fd > 2)
  t.is(fs.statSync(p).mode & 0o777, 0o600)
  t.true(fs.statSync(p).isSocket())
  t.throws(() => native().unixListen(p), { code: 'EADDRINUSE' })
  t.throws(() => native().unixListen(path.join(dir, 'x'.repeat(120))), { code: 'ENAMETOOLONG' })
  t.throws(() => native().unixListen(p, 0), { instanceOf: RangeError })
  fs.closeSync(fd)
})

async function childAgent(t: import('ava').ExecutionContext, args: string[] = []): Promise<{ client: AgentClient; child: ReturnType<typeof spawn>; log: () => string }> {
  const dir = tmpDir(t)
  const sock = path.join(dir, 'agent.sock')
  const logFile = path.join(dir, 'agent.log')
  const fd = native().unixListen(sock)
  const logFd = fs.openSync(logFile, 'a')
  const child = spawn(agentBinaryPath(), args, { stdio: ['ignore', logFd, logFd, fd] })
  fs.closeSync(fd)
  fs.closeSync(logFd)
  t.teardown(() => { child.kill('SIGKILL') })
  const client = new AgentClient(sock)
  await until(() => client.ping().then(() => true), 5000, 'agent up')
  return { client, child, log: () => fs.readFileSync(logFile, 'utf8') }
}

;(root ? test : test.skip)('agent as an ordinary child: serves, reaps orphans as a subreaper, exits 0 on SIGTERM', async (t) => {
  const { client, child, log } = await childAgent(t)
  const pong = await client.ping()
  t.is(pong.pid, child.pid!)
  t.regex(log(), /pid1=0, peer check off/)
  const r = await client.exec('sleep 0.3 & echo $!')
  const orphan = Number(r.stdout.toString())
  await until(() => fs.readFileSync(`/proc/${orphan}/stat`, 'utf8').split(') ')[1]!.split(' ')[1] === String(child.pid), 3000, 'orphan re-parented to the agent')
  await until(() => !fs.existsSync(`/proc/${orphan}`), 5000, 'orphan reaped')
  const exited = new Promise<[number | null, string | null]>((res) => child.on('exit', (c, s) => res([c, s])))
  child.kill('SIGTERM')
  t.deepEqual(await exited, [0, null])
  await t.throwsAsync(client.ping(), { code: 'SANDBOX_GONE' })
})

;(root ? test : test.skip)('the agent refuses to start without a listening unix socket on fd 3', (t) => {
  const none = spawnSync(agentBinaryPath(), [], { stdio: ['ignore', 'pipe', 'pipe'] })
  t.is(none.status, 2)
  t.regex(none.stderr.toString(), /fd 3/)
  const fd = fs.openSync('/dev/null', 'r')
  const notSock = spawnSync(agentBinaryPath(), [], { stdio: ['ignore', 'pipe', 'pipe', fd] })
  fs.closeSync(fd)
  t.is(notSock.status, 2)
  t.regex(notSock.stderr.toString(), /not a listening socket/)
  t.is(spawnSync(agentBinaryPath(), ['--bogus'], { stdio: ['ignore', 'pipe', 'pipe'] }).status, 2)
})

;(root ? test : test.skip)('a request the protocol cannot carry (a NUL in user) fails that call or stream, never the process', async (t) => {
  const { client } = await childAgent(t)
  const user = 'a\0b'
  const streamError = (s: () => NodeJS.ReadableStream): Promise<unknown> => new Promise((resolve) => {
    try {
      const r = s()
      r.on('error', resolve)
      r.on('end', () => resolve(null))
      r.resume()
    } catch (e) {
      resolve(e)
    }
  })
  t.like(await streamError(() => client.files.readStream('/etc/passwd', { user })), { code: 'INVALID_ARGUMENT' })
  t.like(await streamError(() => client.files.downloadTar('/etc', { user })), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(client.files.read('/etc/passwd', { user }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(client.files.list('/', { user }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(client.exec(['true'], { user }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => client.spawn(['true'], { user }), { code: 'INVALID_ARGUMENT' })
  t.throws(() => client.spawn(['a\0b']), { code: 'INVALID_ARGUMENT' })
  // the client (and this process) still work; AVA fails the test on an unhandled rejection
  t.is((await client.exec(['echo', 'ok'])).stdout.toString(), 'ok\n')
})
