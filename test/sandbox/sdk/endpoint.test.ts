// The SDK and `strata sandbox` pointed at something that is not a Strata
// sandbox daemon: real HTTP servers on this machine answering the way a
// web server, someone else's JSON API, a dying server or a non-HTTP service
// would. Each is NOT_A_STRATA_DAEMON (or RPC_CONNECTION_CLOSED for a server
// that closes without answering) naming the URL and the status, and no body
// is shown. A server that answers with the daemon's Strata-Api header and an
// error body is still read as the daemon's error.
import http from 'node:http'
import net, { type AddressInfo } from 'node:net'
import test, { type ExecutionContext } from 'ava'
import { isStrataError } from '../../../fs/common/errors.js'
import { Strata } from '../../../sandbox/sdk/index.js'
import { strata } from '../../bin/helpers.js'

const HTML = '<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n'

/** A real HTTP server on a free port, closed at teardown. */
async function httpServer(t: ExecutionContext, h: http.RequestListener): Promise<string> {
  const s = http.createServer(h)
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => { s.closeAllConnections(); s.close(() => r()) }))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}

/** A TCP server that does `onConn` with each connection. */
async function tcpServer(t: ExecutionContext, onConn: (c: net.Socket) => void): Promise<string> {
  const socks = new Set<net.Socket>()
  const s = net.createServer((c) => {
    socks.add(c)
    c.on('error', () => undefined)
    c.on('close', () => socks.delete(c))
    onConn(c)
  })
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => { for (const c of socks) c.destroy(); s.close(() => r()) }))
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`
}

async function failure(f: () => Promise<unknown>): Promise<{ code: string; message: string }> {
  try {
    await f()
    return { code: 'OK', message: '' }
  } catch (e) {
    if (isStrataError(e)) return { code: e.code, message: e.reason }
    throw e
  }
}

const html = (status: number): http.RequestListener => (_req, res) => {
  res.writeHead(status, { 'content-type': 'text/html', server: 'nginx/1.24.0' })
  res.end(HTML)
}

for (const [what, listener, status, type] of [
  ['a web server\'s HTML 404', html(404), '404 Not Found', 'text/html'],
  ['a web server\'s HTML 200 (a catch-all page)', html(200), '200 OK', 'text/html'],
  ['someone else\'s JSON API answering 200', ((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ sandboxes: [], id: 'sb-000000000000', ok: true }))
  }) as http.RequestListener, '200 OK', 'application/json'],
  ['someone else\'s JSON error shaped like ours', ((_req, res) => {
    res.writeHead(401, { 'content-type': 'application/json; charset=utf-8' })
    res.end(JSON.stringify({ code: 'UNAUTHENTICATED', message: 'not yours' }))
  }) as http.RequestListener, '401 Unauthorized', 'application/json'],
] as const) {
  test(`SDK: ${what} is NOT_A_STRATA_DAEMON with the URL and the status, without the body`, async (t) => {
    const endpoint = await httpServer(t, listener)
    const s = new Strata({ endpoint, token: 't' })
    t.teardown(() => s.close())
    for (const call of [() => s.sandboxes.list(), () => s.sandboxes.get('sb-000000000000'), () => s.node()]) {
      const f = await failure(call)
      t.is(f.code, 'NOT_A_STRATA_DAEMON', f.message)
      t.regex(f.message, new RegExp(`^${endpoint} is not a Strata sandbox daemon: GET ${endpoint}/v1/\\S+ answered HTTP ${status} \\(${type}\\)`))
      t.notRegex(f.message, /<html|nginx|not yours|sandboxes":/)
    }
  })
}

test('SDK: a server that closes the connection without answering is RPC_CONNECTION_CLOSED, saying so', async (t) => {
  const endpoint = await tcpServer(t, (c) => c.once('data', () => c.destroy()))
  const s = new Strata({ endpoint, token: 't' })
  t.teardown(() => s.close())
  const f = await failure(() => s.sandboxes.list())
  t.is(f.code, 'RPC_CONNECTION_CLOSED', f.message)
  t.regex(f.message, new RegExp(`GET ${endpoint}/v1/sandboxes: the endpoint closed the connection without answering .*not a Strata sandbox daemon`))
})

test('SDK: a service that does not speak HTTP is NOT_A_STRATA_DAEMON', async (t) => {
  const endpoint = await tcpServer(t, (c) => c.once('data', () => c.end('SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\n')))
  const s = new Strata({ endpoint, token: 't' })
  t.teardown(() => s.close())
  const f = await failure(() => s.sandboxes.list())
  t.is(f.code, 'NOT_A_STRATA_DAEMON', f.message)
  t.regex(f.message, /answered with something that is not HTTP/)
  t.notRegex(f.message, /SSH|Protocol mismatch/)
})

test('SDK: an answer with the Strata-Api header is the daemon\'s (its error code, or RPC_BAD_FRAME for a body that is not one)', async (t) => {
  const endpoint = await httpServer(t, (req, res) => {
    res.setHeader('strata-api', 'v1')
    if (req.url === '/v1/sandboxes') {
      res.writeHead(401, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ code: 'UNAUTHENTICATED', message: 'wrong bearer token' }))
    } else {
      res.writeHead(502, { 'content-type': 'text/html' })
      res.end(HTML)
    }
  })
  const s = new Strata({ endpoint, token: 't' })
  t.teardown(() => s.close())
  t.deepEqual(await failure(() => s.sandboxes.list()), { code: 'UNAUTHENTICATED', message: 'wrong bearer token' })
  const f = await failure(() => s.node())
  t.is(f.code, 'RPC_BAD_FRAME', f.message)
  t.notRegex(f.message, /<html|nginx/)
})

test('CLI: --endpoint and $STRATA_ENDPOINT at a web server: strata: NOT_A_STRATA_DAEMON naming the URL, status and where the endpoint came from, exit 1', async (t) => {
  const endpoint = await httpServer(t, html(404))
  const flag = await strata(['sandbox', '--endpoint', endpoint, '--token', 'x', 'ls'], { env: { STRATA_LOG_LEVEL: 'error' }, timeoutMs: 60_000 })
  t.is(flag.code, 1, flag.stderr)
  t.is(flag.stdout, '')
  t.is(flag.stderr, `strata: NOT_A_STRATA_DAEMON: ${endpoint} is not a Strata sandbox daemon: GET ${endpoint}/v1/sandboxes answered HTTP 404 Not Found (text/html), without the daemon's Strata-Api header (check --endpoint)\n`)
  const env = await strata(['sandbox', 'inspect', 'sb-000000000000'], { env: { STRATA_LOG_LEVEL: 'error', STRATA_ENDPOINT: endpoint, STRATA_TOKEN: 'x' }, timeoutMs: 60_000 })
  t.is(env.code, 1, env.stderr)
  t.regex(env.stderr, /^strata: NOT_A_STRATA_DAEMON: .* answered HTTP 404 Not Found \(text\/html\), .*\(check \$STRATA_ENDPOINT\)\n$/)
  t.notRegex(env.stderr, /<html|nginx/)
})

test('nothing listening at an endpoint given outright: RPC_CONNECT_FAILED without cluster advice (SDK), naming --endpoint or $STRATA_ENDPOINT (CLI)', async (t) => {
  // a port that was just free: bind, read it, close
  const free = await new Promise<number>((r) => {
    const s = net.createServer()
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as AddressInfo).port
      s.close(() => r(port))
    })
  })
  const endpoint = `http://127.0.0.1:${free}`
  const sdk = new Strata({ endpoint, token: 'x' })
  t.teardown(() => sdk.close())
  const f = await failure(() => sdk.sandboxes.list())
  t.is(f.code, 'RPC_CONNECT_FAILED')
  t.is(f.message, `cannot reach the sandbox daemon at ${endpoint}: ECONNREFUSED (is a sandbox daemon listening there? check the endpoint)`)
  const flag = await strata(['sandbox', '--endpoint', endpoint, '--token', 'x', 'ls'], { env: { STRATA_LOG_LEVEL: 'error' }, timeoutMs: 60_000 })
  t.is(flag.code, 1, flag.stderr)
  t.is(flag.stderr, `strata: RPC_CONNECT_FAILED: cannot reach the sandbox daemon at ${endpoint}: ECONNREFUSED (is a sandbox daemon listening there? check --endpoint)\n`)
  const env = await strata(['sandbox', 'ls'], { env: { STRATA_LOG_LEVEL: 'error', STRATA_ENDPOINT: endpoint, STRATA_TOKEN: 'x' }, timeoutMs: 60_000 })
  t.is(env.code, 1, env.stderr)
  t.regex(env.stderr, /\(is a sandbox daemon listening there\? check \$STRATA_ENDPOINT\)\n$/)
  t.notRegex(flag.stderr + env.stderr, /cluster up/)
})

test('SDK: a bad endpoint with no token is INVALID_ARGUMENT about the endpoint, not UNAUTHENTICATED about a cluster that is not there', (t) => {
  const saved = { STRATA_TOKEN: process.env.STRATA_TOKEN, STRATA_CLUSTER: process.env.STRATA_CLUSTER }
  delete process.env.STRATA_TOKEN
  process.env.STRATA_CLUSTER = '/nonexistent/strata-cluster'
  try {
    for (const endpoint of ['ftp://x', 'not a url']) {
      const e = t.throws(() => new Strata({ endpoint }))
      t.true(isStrataError(e, 'INVALID_ARGUMENT'), `${endpoint}: ${String(e)}`)
      t.regex(e!.message, /endpoint/)
    }
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
})
