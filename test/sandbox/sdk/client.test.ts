// The SDK's local argument checks, without a daemon: every entry point given
// a wrong type, a value out of range or a misspelt option fails at once with
// INVALID_ARGUMENT naming the field (never a TypeError, never a silently
// dropped option). The endpoint is a closed port, so a call that got past
// its checks would fail with RPC_CONNECT_FAILED instead and the test would
// say so.
import test from 'ava'
import { isStrataError } from '../../../fs/common/errors.js'
import type { SandboxInfo } from '../../../sandbox/daemon/index.js'
import { Sandbox, Strata } from '../../../sandbox/sdk/index.js'

const ENDPOINT = 'http://127.0.0.1:9'

function client(): Strata {
  return new Strata({ endpoint: ENDPOINT, token: 't' })
}

function sandbox(s: Strata): Sandbox {
  const info = { id: 'sb-000000000000', resources: {}, state: 'running' } as unknown as SandboxInfo
  return new Sandbox(s.transport, info)
}

/** The call's failure: its code and message (or 'OK'); anything but a StrataError fails the test. */
async function failure(f: () => unknown): Promise<{ code: string; message: string }> {
  try {
    await f()
    return { code: 'OK', message: '' }
  } catch (e) {
    if (isStrataError(e)) return { code: e.code, message: e.message }
    throw e
  }
}

// [what, the call, a word its message must contain]
type Case = [string, (s: Strata, sb: Sandbox) => unknown, RegExp]
const any = (v: unknown) => v as never

const CASES: Case[] = [
  ['new Strata: unknown option', () => new Strata(any({ endpoint: ENDPOINT, token: 't', tiemoutMs: 5 })), /tiemoutMs/],
  ['new Strata: negative timeoutMs', () => new Strata({ endpoint: ENDPOINT, token: 't', timeoutMs: -5 }), /timeoutMs/],
  ['new Strata: timeoutMs not a number', () => new Strata(any({ endpoint: ENDPOINT, token: 't', timeoutMs: '5' })), /timeoutMs/],
  ['new Strata: endpoint not a string', () => new Strata(any({ endpoint: 42, token: 't' })), /endpoint/],
  ['new Strata: options not an object', () => new Strata(any('http://x')), /options/],
  ['create: spec not an object', (s) => s.sandboxes.create(any(null)), /spec/],
  ['create: unknown field', (s) => s.sandboxes.create(any({ image: 'bb:1', imag: 'x' })), /imag/],
  ['create: signal not a signal', (s) => s.sandboxes.create(any({ image: 'bb:1', signal: 'x' })), /signal/],
  ['create: relative mount source', (s) => s.sandboxes.create({ image: 'bb:1', mounts: [{ source: 'datasets', target: '/x' }] }), /mounts\[0\]\.source/],
  ['createMany: unknown option', (s) => s.sandboxes.createMany({ image: 'bb:1' }, any({ count: 2, cuont: 3 })), /cuont/],
  ['createMany: count 0', (s) => s.sandboxes.createMany({ image: 'bb:1' }, { count: 0 }), /count/],
  ['list: misspelt labels', (s) => s.sandboxes.list(any({ lables: { a: 'b' } })), /lables/],
  ['list: a label key no sandbox can have', (s) => s.sandboxes.list({ labels: { 'bad key!': 'x' } }), /labels/],
  ['list: a label value not a string', (s) => s.sandboxes.list(any({ labels: { a: 1 } })), /labels\.a/],
  ['list: unknown state', (s) => s.sandboxes.list(any({ state: 'zombie' })), /state/],
  ['get: id not a string', (s) => s.sandboxes.get(any(42)), /id/],
  ['exec: cmd a number', (_s, sb) => sb.exec(any(42)), /cmd/],
  ['exec: cmd with a non-string', (_s, sb) => sb.exec(any(['echo', 1])), /cmd/],
  ['exec: cmd empty array', (_s, sb) => sb.exec([]), /cmd/],
  ['exec: misspelt timeoutMs', (_s, sb) => sb.exec('true', any({ timeout: 5 })), /timeout/],
  ['exec: timeoutMs out of range', (_s, sb) => sb.exec('true', { timeoutMs: 605_000_000 }), /timeoutMs/],
  ['exec: onStdout not a function', (_s, sb) => sb.exec('true', any({ onStdout: 'x' })), /onStdout/],
  // it was sent, and the daemon's 413 said only `the JSON body exceeds 4194304 bytes`
  ['exec: stdin larger than a request can carry', (_s, sb) => sb.exec(['wc', '-c'], { stdin: new Uint8Array(5 << 20) }), /exec: the request is \d+ bytes.*sb\.spawn/],
  ['exec: stdin a number', (_s, sb) => sb.exec('cat', any({ stdin: 42 })), /stdin/],
  ['exec: options not an object', (_s, sb) => sb.exec('true', any(5)), /options/],
  ['spawn: stdin is not an option', (_s, sb) => sb.spawn(['cat'], any({ stdin: 'x' })), /stdin/],
  ['spawn: unknown option', (_s, sb) => sb.spawn(['cat'], any({ cwdd: '/' })), /cwdd/],
  ['spawn: cmd an object', (_s, sb) => sb.spawn(any({ cmd: 'x' })), /cmd/],
  ['files.read: relative path', (_s, sb) => sb.files.read('relative'), /path/],
  ['files.read: path a number', (_s, sb) => sb.files.read(any(1)), /path/],
  ['files.read: negative offset', (_s, sb) => sb.files.read('/x', { offset: -1 }), /offset/],
  ['files.read: maxBytes 0', (_s, sb) => sb.files.read('/x', { maxBytes: 0 }), /maxBytes/],
  ['files.read: unknown option', (_s, sb) => sb.files.read('/x', any({ max: 5 })), /max/],
  ['files.readStream: length a string', (_s, sb) => sb.files.readStream('/x', any({ length: '5' })), /length/],
  ['files.write: data a number', (_s, sb) => sb.files.write('/x', any(42)), /data/],
  ['files.write: data null', (_s, sb) => sb.files.write('/x', any(null)), /data/],
  ['files.write: misspelt mkdirs', (_s, sb) => sb.files.write('/x', 'y', any({ mkdir: true })), /mkdir/],
  ['files.write: mode out of range', (_s, sb) => sb.files.write('/x', 'y', { mode: 0o17777 }), /mode/],
  ['files.write: append not a boolean', (_s, sb) => sb.files.write('/x', 'y', any({ append: 1 })), /append/],
  ['files.list: unknown option', (_s, sb) => sb.files.list('/x', any({ recursive: true })), /recursive/],
  ['files.stat: misspelt followSymlinks', (_s, sb) => sb.files.stat('/x', any({ follow: false })), /follow/],
  ['files.mkdir: mode a string', (_s, sb) => sb.files.mkdir('/x', any({ mode: '0755' })), /mode/],
  ['files.remove: force not a boolean', (_s, sb) => sb.files.remove('/x', any({ force: 'yes' })), /force/],
  ['files.rename: relative to', (_s, sb) => sb.files.rename('/x', 'y'), /to/],
  ['files.rename: unknown option', (_s, sb) => sb.files.rename('/x', '/y', any({ overwrite: false })), /overwrite/],
  ['files.downloadTar: user empty', (_s, sb) => sb.files.downloadTar('/x', { user: '' }), /user/],
  ['files.uploadTar: tar a string', (_s, sb) => sb.files.uploadTar('/x', any('not a tar')), /tar/],
  ['files.uploadTar: misspelt preserveOwner', (_s, sb) => sb.files.uploadTar('/x', new Uint8Array(1024), any({ owner: true })), /owner/],
  ['delete: wait not a boolean', (_s, sb) => sb.delete(any({ wait: 0 })), /wait/],
  ['delete: unknown option', (_s, sb) => sb.delete(any({ force: true })), /force/],
]

for (const [what, call, field] of CASES) {
  test(`${what} is INVALID_ARGUMENT naming the field`, async (t) => {
    const s = client()
    t.teardown(() => s.close())
    const f = await failure(() => call(s, sandbox(s)))
    t.is(f.code, 'INVALID_ARGUMENT', `${what}: ${f.code} ${f.message}`)
    t.regex(f.message, field)
  })
}

test('the checks let good arguments through (they reach the transport)', async (t) => {
  const s = client()
  t.teardown(() => s.close())
  const sb = sandbox(s)
  for (const call of [
    () => s.sandboxes.list({ labels: { job: 'j1' }, state: 'running' }),
    () => sb.exec(['true'], { timeoutMs: 5, onStdout: () => undefined, signal: new AbortController().signal }),
    () => sb.files.read('/x', { offset: 0, length: 5, maxBytes: 10 }),
    () => sb.files.write('/x', new Uint8Array([1]), { mkdirs: true, mode: 0o644 }),
    () => sb.delete({ wait: false }),
  ]) t.is((await failure(call)).code, 'RPC_CONNECT_FAILED')
})
