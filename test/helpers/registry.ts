// A real OCI registry for tests: Debian's docker-registry (distribution 2.8)
// on 127.0.0.1:<free port> with its storage in a temp dir, optionally with
// token auth against a tiny bearer-token server run in the test process
// (RS256 JWTs signed with a self-signed cert made by openssl). Plus skopeo
// and umoci wrappers. Everything is stopped and removed at teardown.

import crypto from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { promisify } from 'node:util'
import type { ExecutionContext } from 'ava'
import { freePort, tmpDir, until } from './procs.js'

const run = promisify(execFile)

export async function sh(cmd: string, args: string[], opts: { cwd?: string } = {}): Promise<string> {
  try {
    const { stdout } = await run(cmd, args, { maxBuffer: 64 << 20, ...opts })
    return stdout
  } catch (e) {
    const err = e as { stderr?: string; message: string }
    throw new Error(`${cmd} ${args.join(' ')} failed: ${err.stderr || err.message}`)
  }
}

export const hasRegistryTools = ['/usr/bin/docker-registry', '/usr/bin/skopeo', '/usr/bin/umoci'].every((p) => fs.existsSync(p))

export interface TokenAuthConfig {
  realm: string
  service: string
  issuer: string
  rootcertbundle: string
}

/** An htpasswd file (bcrypt, which is all docker-registry accepts) for `users`, made by python3's crypt. */
export async function writeHtpasswd(file: string, users: Record<string, string>): Promise<void> {
  const script = 'import crypt, json, sys\nfor u, p in json.loads(sys.argv[1]).items(): print(u + ":" + crypt.crypt(p, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))'
  fs.writeFileSync(file, await sh('python3', ['-W', 'ignore', '-c', script, JSON.stringify(users)]))
}

export class TestRegistry {
  child: ChildProcess | null = null
  host = ''
  readonly configFile: string
  readonly dataDir: string
  readonly logFile: string

  constructor(
    readonly dir: string,
    readonly port: number,
    readonly auth?: TokenAuthConfig,
    /** Basic auth against this htpasswd file instead */
    readonly htpasswd?: string,
  ) {
    this.host = `127.0.0.1:${port}`
    this.dataDir = path.join(dir, 'data')
    this.configFile = path.join(dir, 'config.yml')
    this.logFile = path.join(dir, 'registry.log')
    fs.mkdirSync(this.dataDir, { recursive: true })
    const lines = [
      'version: 0.1',
      'log:',
      '  level: info',
      '  accesslog:',
      '    disabled: false',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${this.dataDir}`,
      '  delete:',
      '    enabled: true',
      'http:',
      `  addr: ${this.host}`,
    ]
    if (auth) {
      lines.push('auth:', '  token:', `    realm: ${auth.realm}`, `    service: ${auth.service}`, `    issuer: ${auth.issuer}`, `    rootcertbundle: ${auth.rootcertbundle}`)
    } else if (htpasswd) {
      lines.push('auth:', '  htpasswd:', '    realm: strata-test', `    path: ${htpasswd}`)
    }
    fs.writeFileSync(this.configFile, lines.join('\n') + '\n')
  }

  async start(): Promise<void> {
    const out = fs.openSync(this.logFile, 'a')
    this.child = spawn('/usr/bin/docker-registry', ['serve', this.configFile], { stdio: ['ignore', out, out] })
    fs.closeSync(out)
    const child = this.child
    await until(
      async () => {
        if (child.exitCode !== null) throw new Error(`docker-registry exited ${child.exitCode}: ${this.log()}`)
        const res = await fetch(`http://${this.host}/v2/`)
        await res.body?.cancel()
        return res.status === 200 || res.status === 401
      },
      20000,
      'docker-registry up',
    )
  }

  /** SIGKILL (default) or SIGTERM the registry; its storage stays. */
  stop(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.child
    this.child = null
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve()
    return new Promise((r) => {
      child.once('exit', () => r())
      child.kill(signal)
    })
  }

  log(): string {
    try {
      return fs.readFileSync(this.logFile, 'utf8')
    } catch {
      return ''
    }
  }

  /** The file holding a blob's bytes in the registry's filesystem storage. */
  blobFile(digest: string): string {
    const hex = digest.slice('sha256:'.length)
    return path.join(this.dataDir, 'docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data')
  }

  /** Tags of a repository as the registry's storage holds them. */
  tagsOnDisk(repo: string): string[] {
    try {
      return fs.readdirSync(path.join(this.dataDir, 'docker/registry/v2/repositories', repo, '_manifests/tags'))
    } catch {
      return []
    }
  }

  url(repoAndTag: string): string {
    return `docker://${this.host}/${repoAndTag}`
  }
}

/** `users`: Basic auth (htpasswd) for these user names and passwords. */
export async function startRegistry(t: ExecutionContext, opts: { auth?: TokenAuthConfig; users?: Record<string, string> } = {}): Promise<TestRegistry> {
  const dir = tmpDir(t, 'strata-registry-')
  let htpasswd: string | undefined
  if (opts.users) await writeHtpasswd((htpasswd = path.join(dir, 'htpasswd')), opts.users)
  const r = new TestRegistry(dir, await freePort(), opts.auth, htpasswd)
  t.teardown(() => r.stop())
  await r.start()
  return r
}

export interface TokenServer {
  realm: string
  service: string
  issuer: string
  certFile: string
  /** scopes asked for, one entry per token request, with the user ('' for anonymous) */
  requests: Array<{ user: string; scopes: string[]; granted: boolean }>
  auth: TokenAuthConfig
  close(): Promise<void>
}

function b64url(b: Buffer | string): string {
  return Buffer.from(b).toString('base64url')
}

/**
 * A bearer-token service in the distribution token-spec shape: GET
 * /token?service=…&scope=repository:NAME:ACTIONS with Basic credentials of
 * one of `users` answers {token} (a JWT the registry verifies against the
 * cert bundle); wrong credentials get 401; anonymous requests get a token
 * with no access (so the registry answers 401 insufficient_scope).
 */
export async function startTokenServer(t: ExecutionContext, users: Record<string, string>): Promise<TokenServer> {
  const dir = tmpDir(t, 'strata-token-')
  const keyFile = path.join(dir, 'key.pem')
  const certFile = path.join(dir, 'cert.pem')
  await sh('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyFile, '-out', certFile, '-days', '2', '-subj', '/CN=strata-test-token-issuer'])
  const key = crypto.createPrivateKey(fs.readFileSync(keyFile))
  const der = new crypto.X509Certificate(fs.readFileSync(certFile)).raw
  const service = 'strata-test-registry'
  const issuer = 'strata-test-issuer'
  const requests: TokenServer['requests'] = []
  const server = http.createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x')
    let user = ''
    const authz = req.headers.authorization
    if (authz?.startsWith('Basic ')) {
      const [name, pass] = Buffer.from(authz.slice(6), 'base64').toString('utf8').split(':')
      if (!name || users[name] === undefined || users[name] !== pass) {
        requests.push({ user: name ?? '', scopes: u.searchParams.getAll('scope'), granted: false })
        res.writeHead(401, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ details: 'bad credentials' }))
        return
      }
      user = name
    }
    const scopes = u.searchParams.getAll('scope')
    const access = user
      ? scopes.map((s) => {
          const [type, ...rest] = s.split(':')
          const actions = rest.pop()!.split(',')
          return { type, name: rest.join(':'), actions }
        })
      : []
    requests.push({ user, scopes, granted: access.length > 0 })
    const now = Math.floor(Date.now() / 1000)
    const header = { alg: 'RS256', typ: 'JWT', x5c: [der.toString('base64')] }
    const claims = { iss: issuer, sub: user, aud: u.searchParams.get('service') ?? service, exp: now + 300, nbf: now - 10, iat: now, jti: crypto.randomUUID(), access }
    const signing = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`
    const sig = crypto.sign('sha256', Buffer.from(signing), key)
    const token = `${signing}.${b64url(sig)}`
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ token, access_token: token, expires_in: 300, issued_at: new Date().toISOString() }))
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const port = (server.address() as { port: number }).port
  const close = () => new Promise<void>((r) => server.close(() => r()))
  t.teardown(close)
  const realm = `http://127.0.0.1:${port}/token`
  return { realm, service, issuer, certFile, requests, auth: { realm, service, issuer, rootcertbundle: certFile }, close }
}

/** skopeo copy with TLS verification off on both sides (the test registry speaks http). */
export async function skopeoCopy(src: string, dst: string, extra: string[] = []): Promise<void> {
  const args = ['copy', '--quiet', ...extra]
  if (src.startsWith('docker://')) args.push('--src-tls-verify=false')
  if (dst.startsWith('docker://')) args.push('--dest-tls-verify=false')
  await sh('skopeo', [...args, src, dst])
}

/** Reads the body of an http GET against the test registry (no auth). */
export async function registryGet(host: string, pathname: string, headers: Record<string, string> = {}): Promise<{ status: number; body: Buffer; headers: Headers }> {
  const res = await fetch(`http://${host}${pathname}`, { headers })
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()), headers: res.headers }
}

/**
 * A small OCI image built by umoci (an independent tool) in layout `layout`
 * under `tag`: each step mutates the unpacked rootfs and is repacked as one
 * layer. Returns the manifest digest from index.json.
 */
export async function umociImage(
  layout: string,
  tag: string,
  steps: Array<(rootfs: string) => void | Promise<void>>,
  opts: { architecture?: string; cmd?: string } = {},
): Promise<string> {
  if (!fs.existsSync(path.join(layout, 'index.json'))) await sh('umoci', ['init', '--layout', layout])
  await sh('umoci', ['new', '--image', `${layout}:${tag}`])
  // repack diffs against the image the bundle was unpacked from: one fresh bundle per layer
  for (const step of steps) {
    const bundle = fs.mkdtempSync(path.join(path.dirname(layout), 'bundle-'))
    fs.rmSync(bundle, { recursive: true })
    try {
      await sh('umoci', ['unpack', '--image', `${layout}:${tag}`, bundle])
      await step(path.join(bundle, 'rootfs'))
      await sh('umoci', ['repack', '--image', `${layout}:${tag}`, bundle])
    } finally {
      fs.rmSync(bundle, { recursive: true, force: true })
    }
  }
  await sh('umoci', ['config', '--image', `${layout}:${tag}`, '--os', 'linux', '--architecture', opts.architecture ?? 'amd64', '--config.cmd', opts.cmd ?? 'sh', '--config.env', 'PATH=/usr/bin:/bin'])
  return layoutDigest(layout, tag)
}

export function layoutDigest(layout: string, tag: string): string {
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string; annotations?: Record<string, string> }> }
  const m = index.manifests.find((d) => d.annotations?.['org.opencontainers.image.ref.name'] === tag)
  if (!m) throw new Error(`no ${tag} in ${layout}`)
  return m.digest
}

export function layoutBlob(layout: string, digest: string): Buffer {
  return fs.readFileSync(path.join(layout, 'blobs/sha256', digest.slice('sha256:'.length)))
}

export type ProxyAction =
  | 'pass'
  /** answer with this status (and headers/body) without asking the registry */
  | { status: number; headers?: Record<string, string>; body?: string }
  /** forward, then send the headers and about half of the body and reset the connection */
  | 'cut-body'
  /** read nothing of the request (an upload's body stays unread) and never answer: a server that hangs */
  | 'hang'
  /** forward, then send the headers and about half of the body and nothing more, the connection left open */
  | 'stall-body'

export interface FaultProxy {
  host: string
  /** every request seen: method, url, range header, authorization header */
  seen: Array<{ method: string; url: string; range?: string; authorization?: string }>
  close(): Promise<void>
}

/**
 * An HTTP proxy in front of a test registry that can fail requests: `decide`
 * sees each request (and how many came before it) and says what to do.
 */
export async function startFaultProxy(t: ExecutionContext, upstream: string, decide: (req: http.IncomingMessage, n: number) => ProxyAction): Promise<FaultProxy> {
  const seen: FaultProxy['seen'] = []
  const server = http.createServer((req, res) => {
    const entry: FaultProxy['seen'][number] = { method: req.method ?? '', url: req.url ?? '' }
    if (req.headers.range) entry.range = req.headers.range
    if (req.headers.authorization) entry.authorization = req.headers.authorization
    seen.push(entry)
    const action = decide(req, seen.length - 1)
    if (action === 'hang') return // the socket goes at teardown (closeAllConnections)
    if (action !== 'pass' && action !== 'cut-body' && action !== 'stall-body') {
      req.resume()
      res.writeHead(action.status, { 'content-type': 'application/json', ...action.headers })
      res.end(action.body ?? '')
      return
    }
    const [host, port] = upstream.split(':')
    const up = http.request({ host, port: Number(port), method: req.method, path: req.url, headers: req.headers }, (ur) => {
      res.writeHead(ur.statusCode ?? 502, ur.headers)
      if (action === 'pass') {
        ur.pipe(res)
        return
      }
      const total = Number(ur.headers['content-length'] ?? '0')
      let sent = 0
      ur.on('data', (chunk: Buffer) => {
        if (sent >= total / 2) return
        const part = chunk.subarray(0, Math.max(1, Math.floor(total / 2) - sent))
        sent += part.length
        res.write(part)
        if (sent >= total / 2) {
          ur.destroy()
          if (action === 'cut-body') res.socket?.destroy()
        }
      })
    })
    up.on('error', () => res.socket?.destroy())
    req.pipe(up)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  const port = (server.address() as { port: number }).port
  const close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections()
      server.close(() => r())
    })
  t.teardown(close)
  return { host: `127.0.0.1:${port}`, seen, close }
}

export interface SilentServer {
  port: number
  /** connections accepted so far */
  connections(): number
}

/**
 * A TCP listener on 127.0.0.1 that accepts every connection and never sends
 * a byte: the registry or object store that hangs. Closed (and every socket
 * destroyed) at teardown.
 */
export async function startSilentServer(t: ExecutionContext): Promise<SilentServer> {
  const sockets = new Set<net.Socket>()
  let accepted = 0
  const server = net.createServer((s) => {
    accepted++
    sockets.add(s)
    s.on('error', () => undefined)
    s.on('close', () => sockets.delete(s))
    s.resume()
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', resolve)
  })
  t.teardown(async () => {
    for (const s of sockets) s.destroy()
    await new Promise<void>((r) => server.close(() => r()))
  })
  return { port: (server.address() as net.AddressInfo).port, connections: () => accepted }
}

/** An http server on 127.0.0.1 handled by `handle`; closed at teardown. */
export async function serveHttp(t: ExecutionContext, handle: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<string> {
  const server = http.createServer(handle)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise<void>((r) => server.close(() => r()))
  })
  return `127.0.0.1:${(server.address() as { port: number }).port}`
}

/** How long `p` took to fail; a success is itself a failure of the test. */
export async function timedFailure<T>(p: Promise<T>): Promise<{ error: unknown; ms: number }> {
  const t0 = Date.now()
  try {
    await p
  } catch (error) {
    return { error, ms: Date.now() - t0 }
  }
  throw new Error('expected a failure')
}
