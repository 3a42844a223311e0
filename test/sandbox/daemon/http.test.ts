// The HTTP API's input checks, through raw requests to a real daemon: every
// route refuses unknown query parameters before doing anything (reclaim
// included), bodies carry only known fields, `user` and `path` are checked at
// the boundary (a NUL in `user` once took the whole daemon down), and file
// paths must be absolute.
import http from 'node:http'
import test from 'ava'
import type { StrataError } from '../../../fs/common/errors.js'
import { startDaemon, useDaemonCluster, type Daemon } from './helpers.js'

const env = useDaemonCluster(test)

interface Reply {
  status: number
  code?: string
  message?: string
  text: string
  /** the Strata-Api header */
  api: string | null
}

async function api(d: Daemon, method: string, p: string, body?: unknown): Promise<Reply> {
  const raw = typeof body === 'string' || body instanceof Uint8Array
  const r = await fetch(`http://${d.address}${p}`, {
    method,
    headers: { authorization: `Bearer ${d.token}` },
    ...(body !== undefined ? { body: raw ? (body as string) : JSON.stringify(body) } : {}),
  })
  const text = await r.text()
  let j: { code?: string; message?: string } = {}
  try {
    j = JSON.parse(text) as typeof j
  } catch { /* a stream or no body */ }
  return { status: r.status, text, api: r.headers.get('strata-api'), ...(j.code ? { code: j.code } : {}), ...(j.message ? { message: j.message } : {}) }
}

async function exists(d: Daemon, id: string, p: string): Promise<boolean> {
  const r = await api(d, 'GET', `/v1/sandboxes/${id}/files/stat?path=${encodeURIComponent(p)}`)
  if (r.status === 404) return false
  if (r.status !== 200) throw new Error(`stat ${p}: ${r.text}`)
  return true
}

async function up(d: Daemon): Promise<void> {
  // the daemon process lives and answers
  if (d.child.exitCode !== null || d.child.signalCode !== null) throw new Error(`the daemon died: ${d.log()}`)
  const r = await fetch(`http://${d.address}/v1/health`)
  if (r.status !== 200) throw new Error(`health: ${r.status}`)
}

test.serial('a NUL (or an over-long value) in user is 400 INVALID_ARGUMENT on every route that takes one, and the daemon stays up', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const base = `/v1/sandboxes/${sb.id}`
  for (const user of ['a\0b', 'x'.repeat(65), '']) {
    const u = encodeURIComponent(user)
    const replies: Array<[string, Reply]> = [
      ['GET files', await api(d, 'GET', `${base}/files?path=/etc/passwd&user=${u}`)],
      ['GET archive', await api(d, 'GET', `${base}/archive?path=/etc&user=${u}`)],
      ['PUT files', await api(d, 'PUT', `${base}/files?path=/tmp/u&user=${u}`, 'x')],
      ['PUT archive', await api(d, 'PUT', `${base}/archive?path=/tmp/ua&user=${u}`, 'x')],
      ['list', await api(d, 'GET', `${base}/files/list?path=/&user=${u}`)],
      ['stat', await api(d, 'GET', `${base}/files/stat?path=/&user=${u}`)],
      ['mkdir', await api(d, 'POST', `${base}/files/mkdir`, { path: '/tmp/um', user })],
      ['remove', await api(d, 'POST', `${base}/files/remove`, { path: '/tmp/um', user })],
      ['rename', await api(d, 'POST', `${base}/files/rename`, { from: '/tmp/um', to: '/tmp/un', user })],
      ['exec', await api(d, 'POST', `${base}/exec`, { cmd: ['true'], user })],
      ['processes', await api(d, 'POST', `${base}/processes`, { cmd: ['true'], user })],
    ]
    for (const [what, r] of replies) t.like(r, { status: 400, code: 'INVALID_ARGUMENT' }, `${what} with user ${JSON.stringify(user)}`)
    await up(d)
  }
  t.false(await exists(d, sb.id, '/tmp/u'))
  t.is((await sb.exec(['echo', 'ok'])).stdout, 'ok\n')
  t.notRegex(d.log(), /unhandled rejection/)
  await sb.delete()
})

test.serial('an unknown query parameter is 400 on every route, listing the known ones, and the route does nothing', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1', labels: { t: 'q' } })
  const id = sb.id
  const base = `/v1/sandboxes/${id}`
  await sb.files.write('/tmp/keep', 'keep')
  const proc = await api(d, 'POST', `${base}/processes`, { cmd: ['cat'] })
  t.is(proc.status, 201)
  const pid = (JSON.parse(proc.text) as { pid: number }).pid
  const before = await sb.refresh()
  const routes: Array<[method: string, path: string, body?: unknown]> = [
    ['GET', '/v1/health'],
    ['GET', '/v1/node'],
    ['POST', '/v1/node/reclaim'],
    ['POST', '/v1/sandboxes', { image: 'bb:1' }],
    ['POST', '/v1/sandboxes/batch', { spec: { image: 'bb:1' }, count: 1 }],
    ['GET', '/v1/sandboxes'],
    ['GET', base],
    ['DELETE', base],
    ['POST', `${base}/kill`],
    ['POST', `${base}/keepalive`],
    ['POST', `${base}/exec`, { cmd: ['touch', '/tmp/exec-ran'] }],
    ['POST', `${base}/processes`, { cmd: ['touch', '/tmp/proc-ran'] }],
    ['GET', `${base}/processes/${pid}/output`],
    ['PUT', `${base}/processes/${pid}/stdin`, 'lost'],
    ['POST', `${base}/processes/${pid}/signal`, { signal: 'SIGKILL' }],
    ['GET', `${base}/files?path=/etc/passwd`],
    ['PUT', `${base}/files?path=/tmp/put-ran`, 'x'],
    ['GET', `${base}/files/list?path=/`],
    ['GET', `${base}/files/stat?path=/`],
    ['POST', `${base}/files/mkdir`, { path: '/tmp/mkdir-ran' }],
    ['POST', `${base}/files/remove`, { path: '/tmp/keep' }],
    ['POST', `${base}/files/rename`, { from: '/tmp/keep', to: '/tmp/moved' }],
    ['GET', `${base}/archive?path=/etc`],
    ['PUT', `${base}/archive?path=/tmp/archive-ran`, 'x'],
  ]
  for (const [method, p, body] of routes) {
    const r = await api(d, method, `${p}${p.includes('?') ? '&' : '?'}x=1`, body)
    t.like(r, { status: 400, code: 'INVALID_ARGUMENT', api: 'v1' }, `${method} ${p}`)
    t.regex(r.message ?? '', /unknown query parameter "x" \((known: |.* takes none)/, `${method} ${p}`)
  }
  // every answer says it is the daemon's (the SDK refuses one that does not): successes, unknown routes, 401s, 405s too
  for (const [method, p, status] of [['GET', '/v1/health', 200], ['GET', base, 200], ['GET', '/v1/nope', 404], ['PUT', '/v1/node', 405]] as const) {
    t.like(await api(d, method, p), { status, api: 'v1' }, `${method} ${p}`)
  }
  const noToken = await fetch(`http://${d.address}/v1/sandboxes`)
  t.is(noToken.status, 401)
  t.is(noToken.headers.get('strata-api'), 'v1')
  // the known ones are listed
  t.regex((await api(d, 'GET', `${base}/files/stat?path=/&x=1`)).message!, /known: path, user, follow/)
  // nothing happened: the sandbox was not reclaimed, killed, deleted or touched, and no sandbox was made
  const after = await sb.refresh()
  t.is(after.state, 'running')
  t.is(after.lastActivityAt, before.lastActivityAt)
  t.deepEqual((await d.sdk.sandboxes.list()).map((s) => s.id), [id])
  for (const f of ['/tmp/exec-ran', '/tmp/proc-ran', '/tmp/put-ran', '/tmp/mkdir-ran', '/tmp/moved', '/tmp/archive-ran']) t.false(await exists(d, id, f), f)
  t.true(await exists(d, id, '/tmp/keep'))
  // the process was neither signalled nor fed: what it echoes is only what comes now
  t.like(await api(d, 'PUT', `${base}/processes/${pid}/stdin?eof=1`, 'fed'), { status: 200 })
  const out = (await api(d, 'GET', `${base}/processes/${pid}/output`)).text.trim().split('\n').map((l) => JSON.parse(l) as { type: string; data?: string; exitCode?: number })
  t.is(out.filter((e) => e.type === 'stdout').map((e) => Buffer.from(e.data!, 'base64').toString()).join(''), 'fed')
  t.like(out.at(-1), { type: 'exit', exitCode: 0 })
  await sb.delete()
})

test.serial('bodies: signal takes only signal and a boolean group; kill, keepalive and reclaim take none (or {})', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const base = `/v1/sandboxes/${sb.id}`
  const proc = await api(d, 'POST', `${base}/processes`, { cmd: ['sleep', '60'] })
  const pid = (JSON.parse(proc.text) as { pid: number }).pid
  for (const body of [{ signal: 'SIGTERM', bogus: 1 }, { group: 'yes' }, { group: 1 }, [1], 'junk']) {
    t.like(await api(d, 'POST', `${base}/processes/${pid}/signal`, body), { status: 400, code: 'INVALID_ARGUMENT' }, JSON.stringify(body))
  }
  for (const route of ['kill', 'keepalive']) {
    for (const body of ['junk', { a: 1 }, [], 'null']) {
      t.like(await api(d, 'POST', `${base}/${route}`, body), { status: 400, code: 'INVALID_ARGUMENT' }, `${route} ${JSON.stringify(body)}`)
    }
  }
  t.like(await api(d, 'POST', '/v1/node/reclaim', { a: 1 }), { status: 400, code: 'INVALID_ARGUMENT' })
  t.like(await api(d, 'POST', '/v1/node/reclaim', 'junk'), { status: 400, code: 'INVALID_ARGUMENT' })
  t.is((await sb.refresh()).state, 'running')
  // the process still runs: a plain signal now ends it
  t.like(await api(d, 'POST', `${base}/processes/${pid}/signal`, { signal: 'SIGTERM', group: false }), { status: 200 })
  t.like(await api(d, 'POST', `${base}/keepalive`, {}), { status: 200 })
  t.like(await api(d, 'POST', `${base}/kill`, {}), { status: 200 })
  t.is((await sb.refresh()).state, 'stopped')
  await sb.delete()
})

test.serial('file routes refuse a relative path with 400 INVALID_ARGUMENT (paths are absolute in the sandbox)', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1', workdir: '/tmp' })
  const base = `/v1/sandboxes/${sb.id}`
  await sb.files.write('/tmp/rel', 'x')
  const replies: Array<[string, Reply]> = [
    ['PUT files', await api(d, 'PUT', `${base}/files?path=relx`, 'hello')],
    ['GET files', await api(d, 'GET', `${base}/files?path=rel`)],
    ['list', await api(d, 'GET', `${base}/files/list?path=.`)],
    ['stat', await api(d, 'GET', `${base}/files/stat?path=rel`)],
    ['GET archive', await api(d, 'GET', `${base}/archive?path=tmp`)],
    ['PUT archive', await api(d, 'PUT', `${base}/archive?path=reld`, 'x')],
    ['mkdir', await api(d, 'POST', `${base}/files/mkdir`, { path: 'reld' })],
    ['remove', await api(d, 'POST', `${base}/files/remove`, { path: 'rel' })],
    ['rename from', await api(d, 'POST', `${base}/files/rename`, { from: 'rel', to: '/tmp/x' })],
    ['rename to', await api(d, 'POST', `${base}/files/rename`, { from: '/tmp/rel', to: 'x' })],
  ]
  for (const [what, r] of replies) {
    t.like(r, { status: 400, code: 'INVALID_ARGUMENT' }, what)
    t.regex(r.message ?? '', /must be an absolute path/, what)
  }
  for (const f of ['/tmp/relx', '/relx', '/tmp/reld', '/reld', '/tmp/x']) t.false(await exists(d, sb.id, f), f)
  t.true(await exists(d, sb.id, '/tmp/rel'))
  await sb.delete()
})

test.serial('archive download: entries the sandbox user cannot read are listed in the Strata-Warnings trailer (capped, with the count) and the rest comes; the SDK reports them through onWarning, or fails at the end without it', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  // as alice: a root-only file and directory, then 300 root-only files with long names (more than the trailer holds)
  const r = await sb.exec('mkdir -p /t/many /t/shut && echo a > /t/a && echo s > /t/secret && chmod 600 /t/secret && echo in > /t/shut/in && chmod 700 /t/shut && cd /t/many && for i in $(seq 1 300); do f=f-$i-ünï-$(printf "%0100d" 0); echo x > $f; chmod 600 $f; done')
  t.is(r.exitCode, 0, r.stderr)

  // the raw route: a 200 tar with the trailer (node:http, since fetch does not show trailers)
  const raw = await new Promise<{ status: number; trailer: string; bytes: number; declared: string }>((resolve, reject) => {
    http.get(`http://${d.address}/v1/sandboxes/${sb.id}/archive?path=/t&user=alice`, { headers: { authorization: `Bearer ${d.token}` } }, (res) => {
      let bytes = 0
      res.on('data', (c: Buffer) => (bytes += c.length))
      res.on('end', () => resolve({ status: res.statusCode!, trailer: res.trailers['strata-warnings'] ?? '', bytes, declared: String(res.headers.trailer) }))
      res.on('error', reject)
    }).on('error', reject)
  })
  t.is(raw.status, 200)
  t.is(raw.declared.toLowerCase(), 'strata-warnings')
  t.true(raw.trailer.length <= 8 * 1024 + 64, `${raw.trailer.length} bytes of trailer`)
  t.regex(raw.trailer, /^[\x20-\x7e]+$/, 'the trailer is ASCII (non-ASCII names are \\u escapes)')
  const tr = JSON.parse(raw.trailer) as { count: number; warnings: Array<{ code: string; message: string; path: string; errno: string }> }
  t.is(tr.count, 302)
  t.true(tr.warnings.length > 2 && tr.warnings.length < 302, `${tr.warnings.length} listed`)
  t.deepEqual(tr.warnings[0], { code: 'SANDBOX_PERMISSION_DENIED', message: `/t/many/f-1-ünï-${'0'.repeat(100)}: cannot open: Permission denied; skipped`, path: `/t/many/f-1-ünï-${'0'.repeat(100)}`, errno: 'EACCES' })

  // the SDK: every listed one, then one for those left off
  const ws: StrataError[] = []
  const names: string[] = []
  for await (const c of await sb.files.downloadTar('/t', { user: 'alice', onWarning: (w) => ws.push(w) })) void c
  t.is(ws.length, tr.warnings.length + 1)
  t.like(ws.at(-1), { code: 'SANDBOX_FS_ERROR', detail: { omitted: 302 - tr.warnings.length } })
  t.regex(ws.at(-1)!.message, /^SANDBOX_FS_ERROR: \/t: \d+ more entries could not be archived/)
  // a small tree: exactly the two
  await sb.exec('rm -rf /t/many')
  const two: StrataError[] = []
  const tarBytes: Buffer[] = []
  for await (const c of await sb.files.downloadTar('/t', { user: 'alice', onWarning: (w) => two.push(w) })) tarBytes.push(c as Buffer)
  t.deepEqual(two.map((w) => [w.code, w.message, w.detail?.path]), [
    ['SANDBOX_PERMISSION_DENIED', 'SANDBOX_PERMISSION_DENIED: /t/secret: cannot open: Permission denied; skipped', '/t/secret'],
    ['SANDBOX_PERMISSION_DENIED', 'SANDBOX_PERMISSION_DENIED: /t/shut: cannot open the directory: Permission denied; its contents are skipped', '/t/shut'],
  ])
  const tarNames = (await import('node:child_process')).execFileSync('tar', ['-tf', '-'], { input: Buffer.concat(tarBytes) }).toString().trim().split('\n')
  names.push(...tarNames)
  t.deepEqual(names, ['a', 'shut/'])
  // without onWarning: every byte, then the first warning as the stream's error
  let got = 0
  const e = await t.throwsAsync(async () => { for await (const c of await sb.files.downloadTar('/t', { user: 'alice' })) got += (c as Buffer).length })
  t.like(e, { code: 'SANDBOX_PERMISSION_DENIED', detail: { path: '/t/secret' } })
  t.is(got, Buffer.concat(tarBytes).length)
  // as root nothing is refused: no warnings, no error
  for await (const c of await sb.files.downloadTar('/t')) void c
  await sb.delete()
})

test.serial('a client that closes a byte stream early (| head) is not logged as a failed request', async (t) => {
  const d = await startDaemon(t, env)
  const sb = await d.sdk.sandboxes.create({ image: 'bb:1' })
  const tenBytes = (p: string) => new Promise<void>((resolve, reject) => {
    const req = http.get(`http://${d.address}${p}`, { headers: { authorization: `Bearer ${d.token}` } }, (res) => {
      res.once('data', () => {
        req.destroy()
        resolve()
      })
    })
    req.on('error', (e) => (req.destroyed ? undefined : reject(e)))
  })
  for (let i = 0; i < 10; i++) {
    await tenBytes(`/v1/sandboxes/${sb.id}/files?path=/dev/zero`)
    await tenBytes(`/v1/sandboxes/${sb.id}/archive?path=/bin`)
  }
  t.is((await sb.exec('echo after')).stdout, 'after\n')
  // (the daemon handles each close after the client's destroy: give the last ones a moment to be logged)
  await new Promise((r) => setTimeout(r, 1000))
  t.notRegex(d.log(), /request failed/)
  await sb.delete()
})
