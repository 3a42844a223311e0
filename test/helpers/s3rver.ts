// A real S3 server for tests: npm `s3rver` on 127.0.0.1 and a random port,
// storing objects in a temp directory; stopped and removed at teardown.
//
// s3rver 3.7.1 does not implement ListMultipartUploads (answers
// NotImplemented) or ListParts (MethodNotAllowed). With `listUploads` this
// helper answers those two requests itself from s3rver's own upload
// directory (BUCKET/._S3rver_uploads/<id>/{key,N,N.md5}), so that tests can
// drive the resume path real S3 takes; without it the server behaves exactly
// as s3rver does and push falls back to its local upload journal.
//
// With `rateBytesPerSec` clients reach s3rver through a TCP proxy that
// passes at most that many bytes per second per connection and direction,
// so that a test can kill a transfer while it is in flight.
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Transform, type TransformCallback } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRequire } from 'node:module'
import type { ExecutionContext } from 'ava'

interface KoaCtx {
  method: string
  path: string
  query: Record<string, string | string[] | undefined>
  status: number
  type: string
  body: unknown
  req: IncomingMessage
  res: ServerResponse
}
type KoaMiddleware = (ctx: KoaCtx, next: () => Promise<void>) => Promise<void>

interface S3rverInstance {
  logger: { silent: boolean }
  run(): Promise<AddressInfo>
  close(): Promise<void>
  httpServer?: Server
  middleware: KoaMiddleware[]
}

const S3rver = createRequire(import.meta.url)('s3rver') as new (opts: Record<string, unknown>) => S3rverInstance

/** Credentials s3rver accepts. */
export const S3RVER_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' }

export interface TestS3 {
  endpoint: string
  bucket: string
  /** s3rver's storage directory */
  dir: string
  port: number
  /** path of an object's bytes in s3rver's directory (for tampering) */
  objectPath(key: string): string
  /** env for a child process (credentials, endpoint, region) */
  env: Record<string, string>
  /** stops the server and cuts every open connection (a failing endpoint) */
  stop(): Promise<void>
  /** starts it again on the same port and directory */
  start(): Promise<void>
  /** requests the server has received, as `METHOD path?query` */
  requests: string[]
  /** parts of unfinished multipart uploads that s3rver has fully received */
  uploadedParts(): number
  /** bytes the throttling proxy has passed from the server to clients (0 without one) */
  bytesDown(): number
}

const xml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')

function listingMiddleware(dir: string): KoaMiddleware {
  return async (ctx, next) => {
    if (ctx.method !== 'GET') return next()
    const segs = ctx.path.split('/').filter(Boolean).map(decodeURIComponent)
    const bucket = segs[0]
    if (!bucket) return next()
    const uploadsDir = path.join(dir, bucket, '._S3rver_uploads')
    if (segs.length === 1 && 'uploads' in ctx.query) {
      const prefix = typeof ctx.query.prefix === 'string' ? ctx.query.prefix : ''
      const rows: string[] = []
      for (const id of fs.existsSync(uploadsDir) ? fs.readdirSync(uploadsDir) : []) {
        let key: string
        try {
          key = fs.readFileSync(path.join(uploadsDir, id, 'key'), 'utf8')
        } catch {
          continue
        }
        if (!key.startsWith(prefix)) continue
        const at = fs.statSync(path.join(uploadsDir, id)).mtime.toISOString()
        rows.push(`<Upload><Key>${xml(key)}</Key><UploadId>${id}</UploadId><Initiated>${at}</Initiated></Upload>`)
      }
      ctx.type = 'application/xml'
      ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<ListMultipartUploadsResult><Bucket>${xml(bucket)}</Bucket><IsTruncated>false</IsTruncated>${rows.join('')}</ListMultipartUploadsResult>`
      return
    }
    const uploadId = ctx.query.uploadId
    if (segs.length > 1 && typeof uploadId === 'string') {
      const udir = path.join(uploadsDir, path.basename(uploadId))
      if (!fs.existsSync(path.join(udir, 'key'))) {
        ctx.status = 404
        ctx.type = 'application/xml'
        ctx.body = '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>'
        return
      }
      const rows: string[] = []
      const numbers = fs
        .readdirSync(udir)
        .filter((f) => /^\d+$/.test(f) && fs.existsSync(path.join(udir, `${f}.md5`)))
        .map(Number)
        .sort((a, b) => a - b)
      for (const n of numbers) {
        const md5 = fs.readFileSync(path.join(udir, `${n}.md5`), 'utf8').trim()
        const size = fs.statSync(path.join(udir, String(n))).size
        rows.push(`<Part><PartNumber>${n}</PartNumber><ETag>"${md5}"</ETag><Size>${size}</Size></Part>`)
      }
      ctx.type = 'application/xml'
      ctx.body = `<?xml version="1.0" encoding="UTF-8"?>\n<ListPartsResult><Bucket>${xml(bucket)}</Bucket><Key>${xml(segs.slice(1).join('/'))}</Key><UploadId>${xml(uploadId)}</UploadId><IsTruncated>false</IsTruncated>${rows.join('')}</ListPartsResult>`
      return
    }
    return next()
  }
}

/** Delays bytes so that at most `rate` bytes per second pass. */
class Throttle extends Transform {
  #allowedAt = Date.now()
  constructor(readonly rate: number) {
    super()
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, cb: TransformCallback): void {
    const send = async () => {
      for (let off = 0; off < chunk.length; off += 16 * 1024) {
        const piece = chunk.subarray(off, off + 16 * 1024)
        const now = Date.now()
        const start = Math.max(now, this.#allowedAt)
        this.#allowedAt = start + (piece.length * 1000) / this.rate
        if (start > now) await sleep(start - now)
        this.push(piece)
      }
    }
    send().then(() => cb(), cb)
  }
}

/** A TCP proxy to 127.0.0.1:`port` that throttles both directions of every connection. */
async function throttlingProxy(port: () => number, rate: number): Promise<{ port: number; bytesDown(): number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>()
  let down = 0
  const server = net.createServer((client) => {
    const upstream = net.connect(port(), '127.0.0.1')
    for (const s of [client, upstream]) {
      sockets.add(s)
      s.on('close', () => sockets.delete(s))
      s.on('error', () => {
        client.destroy()
        upstream.destroy()
      })
    }
    client.pipe(new Throttle(rate)).pipe(upstream)
    upstream
      .pipe(new Throttle(rate))
      .on('data', (c: Buffer) => (down += c.length))
      .pipe(client)
    client.on('close', () => upstream.destroy())
    upstream.on('close', () => client.destroy())
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  return {
    port: (server.address() as AddressInfo).port,
    bytesDown: () => down,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise<void>((r) => server.close(() => r()))
    },
  }
}

/**
 * Starts s3rver with one bucket; `listUploads` adds the two listing APIs
 * s3rver lacks, `rateBytesPerSec` puts a throttling proxy in front (see above),
 * `refuse` fails chosen requests.
 */
export async function startS3(
  t: ExecutionContext,
  opts: {
    bucket?: string
    listUploads?: boolean
    rateBytesPerSec?: number
    /** asked for every request: an HTTP status to refuse it with (an S3 error, body unread), or undefined to serve it */
    refuse?: (method: string, url: string) => number | undefined
  } = {},
): Promise<TestS3> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-s3rver-'))
  const bucket = opts.bucket ?? 'images'
  let server: S3rverInstance | null = null
  let port = 0
  const requests: string[] = []
  const make = () => {
    const s = new S3rver({ address: '127.0.0.1', port, silent: true, directory: dir, configureBuckets: [{ name: bucket }] })
    const log: KoaMiddleware = async (ctx, next) => {
      requests.push(`${ctx.method} ${ctx.req.url}`)
      const status = opts.refuse?.(ctx.method, ctx.req.url ?? '')
      if (status !== undefined) {
        ctx.status = status
        ctx.type = 'application/xml'
        ctx.body = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${status === 503 ? 'SlowDown' : 'InternalError'}</Code><Message>refused by the test</Message></Error>`
        return
      }
      await next()
    }
    s.middleware.unshift(...(opts.listUploads ? [log, listingMiddleware(dir)] : [log]))
    return s
  }
  const start = async () => {
    server = make()
    const addr = await server.run()
    port = addr.port
  }
  const stop = async () => {
    const s = server
    server = null
    if (!s?.httpServer) return
    // requests cut off below are logged after s3rver closed its logger
    s.logger.silent = true
    const closed = s.close().catch(() => undefined)
    s.httpServer.closeAllConnections()
    await closed
  }
  await start()
  const proxy = opts.rateBytesPerSec ? await throttlingProxy(() => port, opts.rateBytesPerSec) : null
  t.teardown(async () => {
    await proxy?.close()
    await stop()
    fs.rmSync(dir, { recursive: true, force: true })
  })
  const endpoint = `http://127.0.0.1:${proxy ? proxy.port : port}`
  return {
    endpoint,
    bucket,
    dir,
    port,
    requests,
    objectPath: (key: string) => {
      const parts = key.split('/')
      const last = parts.pop()!
      return path.join(dir, bucket, ...parts, `${last}._S3rver_object`)
    },
    env: {
      AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
      AWS_REGION: 'us-east-1',
      AWS_ENDPOINT_URL: endpoint,
    },
    stop,
    start,
    bytesDown: () => proxy?.bytesDown() ?? 0,
    uploadedParts: () => {
      const uploads = path.join(dir, bucket, '._S3rver_uploads')
      if (!fs.existsSync(uploads)) return 0
      let n = 0
      for (const id of fs.readdirSync(uploads)) {
        try {
          n += fs.readdirSync(path.join(uploads, id)).filter((f) => f.endsWith('.md5')).length
        } catch {
          // completed and removed meanwhile
        }
      }
      return n
    },
  }
}
