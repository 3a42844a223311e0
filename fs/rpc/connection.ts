// One TCP connection carrying many requests in flight in both directions.
// Requests are matched to responses by envelope id; a malformed frame closes
// this connection only.

import type { Socket } from 'node:net'
import type { BufferPool } from '../common/buffer-pool.js'
import { StrataError, toStrataError } from '../common/errors.js'
import { native } from '../common/native.js'
import { decodeEnvelope, encodeFrameParts, FileSlice, FLAG_CANCEL, FLAG_REQUEST, FLAG_RESPONSE, FrameDecoder, type AttachmentPlacer, type Placed, type DecodedFrame, type EncodedFrame, type Envelope } from './frame.js'

/**
 * How long a sendfile may wait for room in the socket buffer before the
 * connection is given up: the peer stopped reading.
 */
const SENDFILE_STALL_MS = 30_000

/** The socket's descriptor, or -1 where there is none to hand to sendfile. */
function socketFd(socket: Socket): number {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd
  return typeof fd === 'number' && fd >= 0 ? fd : -1
}

let sendfileAvailable: boolean | null = null
function canSendfile(): boolean {
  if (sendfileAvailable === null) {
    try {
      sendfileAvailable = typeof native().sendfile === 'function'
    } catch {
      sendfileAvailable = false
    }
  }
  return sendfileAvailable
}

interface QueuedFrame {
  frame: EncodedFrame
  written?: () => void
}

/**
 * Where a reply's large Buffers should be received: given the reply payload
 * (each attachment a zero-length placeholder, `placeholders[k]` the k-th)
 * and the attachments' lengths, a Buffer of exactly that length per
 * attachment (the caller's memory, written by the socket read itself) or
 * undefined for a fresh one, or a scatter list of Buffers whose lengths add
 * up to the attachment's (the payload then holds that list in its place).
 * Only replies on connections this side opened (RpcClient) are placed;
 * elsewhere the sink is not consulted, so a caller that scatters must also
 * handle the attachment arriving as one Buffer.
 */
export type AttachmentSink = (payload: unknown, placeholders: readonly Buffer[], lengths: readonly number[]) => ReadonlyArray<Placed> | null

interface Pending {
  resolve: (v: unknown) => void
  reject: (e: StrataError) => void
  sink?: AttachmentSink
}

export interface IncomingRequest {
  env: Envelope
  conn: Connection
  /** the frame the request came in (its payload's Buffers are views of it) */
  body: Buffer | null
}

/** The socket's stream handle when it can read into caller-chosen memory (what `onread` is built on). */
function userBufferHandle(socket: Socket): { useUserBuffer(b: Uint8Array): void } | null {
  const handle = (socket as unknown as { _handle?: { useUserBuffer?: unknown } })._handle
  return typeof handle?.useUserBuffer === 'function' ? (handle as { useUserBuffer(b: Uint8Array): void }) : null
}

/**
 * In-place frame reception for a socket this side connects (for accepted ones, see forAccepted). Pass `onread` to
 * net.connect and the reader to the Connection:
 *   const r = new DirectReader(max); const s = net.connect({ host, port, onread: r.onread })
 *   … new Connection(s, max, null, null, r)
 */
export class DirectReader {
  /**
   * In-place reception for a socket Node accepted (Node offers `onread` only
   * for sockets it connects). Sets up exactly what net.Socket's constructor
   * does for an `onread` option, through the same internals: the socket's
   * kBuffer/kBufferGen/kBufferCb fields and its handle's useUserBuffer. The
   * socket must not have read yet (a server with pauseOnConnect); resume it
   * afterwards. Null, and the socket untouched, where these internals are not
   * there (another Node): the caller then reads 'data' events.
   */
  static forAccepted(socket: Socket, maxFrameBytes: number, pool: BufferPool | null): DirectReader | null {
    const syms = Object.getOwnPropertySymbols(socket)
    const sym = (d: string) => syms.find((x) => x.description === d)
    const kBuffer = sym('kBuffer')
    const kBufferGen = sym('kBufferGen')
    const kBufferCb = sym('kBufferCb')
    const handle = userBufferHandle(socket)
    if (!kBuffer || !kBufferGen || !kBufferCb || !handle) return null
    const reader = new DirectReader(maxFrameBytes, pool)
    const fields = socket as unknown as Record<symbol, unknown>
    const first = reader.onread.buffer()
    fields[kBufferGen] = reader.onread.buffer
    fields[kBufferCb] = reader.onread.callback
    fields[kBuffer] = first
    handle.useUserBuffer(first)
    return reader
  }

  readonly decoder: FrameDecoder
  private conn: Connection | null = null
  /** bodies or an error that arrived before the Connection was attached */
  private early: Array<Buffer | DecodedFrame> = []
  private earlyError: unknown = null

  constructor(maxFrameBytes: number, pool: BufferPool | null = null) {
    this.decoder = new FrameDecoder(maxFrameBytes, pool)
  }

  readonly onread = {
    buffer: (): Buffer => this.decoder.readTarget(),
    /** returns true: keep reading (false would pause the socket) */
    callback: (nread: number): boolean => {
      let bodies: Array<Buffer | DecodedFrame>
      try {
        bodies = this.decoder.commitRead(nread)
      } catch (e) {
        if (this.conn) this.conn.failDecode(e)
        else this.earlyError ??= e
        return true
      }
      if (this.conn) this.conn.deliver(bodies)
      else this.early.push(...bodies)
      return true
    },
  }

  /**
   * Node asks for the next read's buffer right after each read, so a read
   * target chosen before a placed call was given up would still receive its
   * caller's next bytes. Re-arm the socket with the decoder's current target
   * (scratch memory by then). `useUserBuffer` is the handle method Node's own
   * `onread` support uses.
   */
  rearm(): void {
    if (!this.conn || !this.decoder.placing) return
    userBufferHandle(this.conn.socket)?.useUserBuffer(this.decoder.readTarget())
  }

  attach(conn: Connection): void {
    this.conn = conn
    // only replies are placed: a serving connection skips the envelope probe on its large requests
    if (!conn.servesRequests) this.decoder.placer = (env, placeholders, lengths) => conn.placeAttachments(env, placeholders, lengths)
    const early = this.early.splice(0)
    if (this.earlyError !== null) conn.failDecode(this.earlyError)
    else if (early.length) conn.deliver(early)
  }
}

export class Connection {
  private readonly decoder: FrameDecoder
  private readonly pending = new Map<number, Pending>()
  private nextId = 1
  private closedErr: StrataError | null = null
  private readonly closeListeners: Array<(err: StrataError) => void> = []
  /**
   * Frames waiting while one with file parts is written (its sendfile goes
   * around the socket's own write queue, so nothing may be written meanwhile);
   * null when no such frame is being written.
   */
  private held: QueuedFrame[] | null = null
  readonly peer: string

  constructor(
    readonly socket: Socket,
    readonly maxFrameBytes: number,
    private readonly onRequest: ((req: IncomingRequest) => void) | null,
    private readonly onCancel: ((conn: Connection, id: number) => void) | null = null,
    private readonly reader: DirectReader | null = null,
    /** accepted sockets: large frames are received into recycled memory from here */
    pool: BufferPool | null = null,
  ) {
    this.peer = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`
    socket.setNoDelay(true)
    if (reader) {
      // bytes arrive through the socket's onread callback, not 'data'
      this.decoder = reader.decoder
      reader.attach(this)
    } else {
      this.decoder = new FrameDecoder(maxFrameBytes, pool)
      socket.on('data', (chunk: Buffer) => this.onData(chunk))
    }
    socket.on('error', (e) => this.close(new StrataError('RPC_CONNECTION_CLOSED', `${this.peer}: ${e.message}`, { cause: e })))
    socket.on('close', () => this.close(new StrataError('RPC_CONNECTION_CLOSED', `connection to ${this.peer} closed`)))
  }

  /** requests from the peer are handled here (an accepted connection), not only replies */
  get servesRequests(): boolean {
    return this.onRequest !== null
  }

  get closed(): boolean {
    return this.closedErr !== null
  }

  get inFlight(): number {
    return this.pending.size
  }

  onClose(fn: (err: StrataError) => void): void {
    if (this.closedErr) fn(this.closedErr)
    else this.closeListeners.push(fn)
  }

  private onData(chunk: Buffer): void {
    if (this.closedErr) return
    let bodies: Buffer[]
    try {
      bodies = this.decoder.push(chunk)
    } catch (e) {
      this.failDecode(e)
      return
    }
    this.deliver(bodies)
  }

  /** @internal the framing broke: this connection cannot continue */
  failDecode(e: unknown): void {
    this.close(toStrataError(e, 'RPC_BAD_FRAME'))
  }

  /** @internal complete frame bodies (or frames decoded during placed reception), in arrival order */
  deliver(bodies: Array<Buffer | DecodedFrame>): void {
    if (this.closedErr) return
    for (const body of bodies) {
      let env: Envelope
      if (Buffer.isBuffer(body)) {
        try {
          env = decodeEnvelope(body)
        } catch (e) {
          this.close(toStrataError(e, 'RPC_BAD_FRAME'))
          return
        }
      } else {
        env = body.env
      }
      this.dispatch(env, Buffer.isBuffer(body) ? body : null)
      if (this.closedErr) return
    }
  }

  /** @internal the decoder asks where an arriving reply's attachments go (see AttachmentSink) */
  placeAttachments(env: Envelope, placeholders: readonly Buffer[], lengths: readonly number[]): ReturnType<AttachmentPlacer> {
    if (!(env.flags & FLAG_RESPONSE) || env.error) return null
    const p = this.pending.get(env.id)
    if (!p?.sink) return null
    const into = p.sink(env.payload, placeholders, lengths)
    if (!into) return null
    return { into, live: () => this.pending.get(env.id) === p }
  }

  private dispatch(env: Envelope, body: Buffer | null): void {
    if (env.flags & FLAG_RESPONSE) {
      const p = this.pending.get(env.id)
      if (!p) return // reply to a request we gave up on
      this.pending.delete(env.id)
      if (env.error) p.reject(StrataError.fromWire(env.error))
      else p.resolve(env.payload)
    } else if (env.flags & FLAG_CANCEL) {
      this.onCancel?.(this, env.id)
    } else if (env.flags & FLAG_REQUEST) {
      if (!this.onRequest) {
        this.close(new StrataError('RPC_BAD_FRAME', 'peer sent a request on a client-only connection'))
        return
      }
      this.onRequest({ env, conn: this, body })
    } else {
      this.close(new StrataError('RPC_BAD_FRAME', `envelope with unknown flags ${env.flags}`))
    }
  }

  /**
   * Writes one envelope; refuses (without closing) one that exceeds the frame
   * cap. `written` runs once the socket is done with the frame's buffers and
   * file ranges: the kernel has the bytes, or the write failed, or the frame
   * was dropped with the connection. It does not run when send throws.
   * `alignAttachments`: see encodeFrameParts.
   */
  send(env: Envelope, written?: () => void, alignAttachments = 0): void {
    if (this.closedErr) throw this.closedErr
    let frame: EncodedFrame
    try {
      frame = encodeFrameParts(env, alignAttachments)
    } catch (e) {
      // a payload the codec refuses (a bigint beyond u64, a function …) fails the same way on every
      // attempt and every connection: not RPC_SEND_FAILED, which callers retry for their whole budget
      const what = env.flags & FLAG_RESPONSE ? 'reply' : 'request'
      throw new StrataError('INVALID_ARGUMENT', `cannot encode the ${what}: ${e instanceof Error ? e.message : String(e)}`, { cause: e })
    }
    if (frame.bodyBytes > this.maxFrameBytes) {
      throw new StrataError('RPC_FRAME_TOO_LARGE', `frame of ${frame.bodyBytes} bytes exceeds the maximum of ${this.maxFrameBytes}`)
    }
    if (this.held) this.held.push(written ? { frame, written } : { frame })
    else this.write(frame, written)
  }

  private write(frame: EncodedFrame, written?: () => void): void {
    if (frame.parts.some((p) => p instanceof FileSlice)) {
      this.held = []
      void this.writeWithFiles(frame.parts).then(
        () => {
          written?.()
          this.releaseHeld()
        },
        (e: unknown) => {
          written?.()
          // the frame is cut off mid-way: the byte stream cannot go on
          this.close(toStrataError(e, 'RPC_CONNECTION_CLOSED'))
          this.releaseHeld()
        },
      )
      return
    }
    this.writeBuffers(frame.parts as Buffer[], written)
  }

  /** corked, the segments leave in one writev; attachments are not copied */
  private writeBuffers(parts: Buffer[], written?: (err?: Error | null) => void): void {
    this.socket.cork()
    const last = parts.length - 1
    for (let i = 0; i < last; i++) this.socket.write(parts[i]!)
    // the callback of the last write also covers the earlier ones (same writev, or queued before it)
    if (written) this.socket.write(parts[last]!, (err) => written(err))
    else this.socket.write(parts[last]!)
    this.socket.uncork()
  }

  /**
   * Memory parts go through the socket as usual; a file part, once everything
   * before it has reached the kernel, goes from the page cache to the socket
   * with sendfile (no copy through this process), or is read and written
   * where that is not possible.
   */
  private async writeWithFiles(parts: EncodedFrame['parts']): Promise<void> {
    let i = 0
    while (i < parts.length) {
      if (this.closedErr) throw this.closedErr
      const bufs: Buffer[] = []
      while (i < parts.length && !(parts[i] instanceof FileSlice)) bufs.push(parts[i++] as Buffer)
      if (bufs.length > 0) await this.flushed(bufs)
      if (i === parts.length) break
      const f = parts[i++] as FileSlice
      if (this.closedErr) throw this.closedErr
      const fd = socketFd(this.socket)
      if (fd >= 0 && canSendfile() && this.socket.writableLength === 0) {
        // Cached bytes go at once, and what did not fit the socket buffer as room appears, all on this
        // thread; a range the disk has to be read for goes from a pool thread, which may wait for it.
        const now = native().sendfileCached(fd, f.fd, f.offset, f.length)
        if (now < 0) await native().sendfile(fd, f.fd, f.offset, f.length, SENDFILE_STALL_MS)
        else if (now < f.length) await native().sendfileOnLoop(fd, f.fd, f.offset + now, f.length - now, SENDFILE_STALL_MS)
      } else {
        await this.flushed([await f.read()])
      }
    }
  }

  private flushed(bufs: Buffer[]): Promise<void> {
    return new Promise((resolve, reject) => this.writeBuffers(bufs, (err) => (err ? reject(err) : resolve())))
  }

  private heldFrames(): QueuedFrame[] | null {
    return this.held
  }

  /** Writes the frames held back during a file frame, in order, until the next file frame. */
  private releaseHeld(): void {
    const q = this.held ?? []
    this.held = null
    while (q.length > 0) {
      const { frame, written } = q.shift()!
      if (this.closedErr) {
        written?.()
        continue
      }
      this.write(frame, written)
      // (read through a method: the compiler cannot see that write() may set it)
      const waiting = this.heldFrames()
      if (waiting) {
        // that was another file frame: the rest wait for it
        waiting.push(...q)
        return
      }
    }
  }

  /** Sends a request and resolves with the reply payload. Deadlines are the caller's job. */
  request(service: number, method: number, payload: unknown, timeoutMs?: number, sink?: AttachmentSink, alignAttachments = 0): { id: number; promise: Promise<unknown> } {
    if (this.closedErr) return { id: 0, promise: Promise.reject(this.closedErr) }
    const id = this.nextId++
    if (this.nextId > 0x7fffffff) this.nextId = 1
    const promise = new Promise<unknown>((resolve, reject) => {
      this.pending.set(id, sink ? { resolve, reject, sink } : { resolve, reject })
    })
    try {
      this.send({ id, service, method, flags: FLAG_REQUEST, payload, ...(timeoutMs !== undefined ? { timeoutMs } : {}) }, undefined, alignAttachments)
    } catch (e) {
      this.pending.delete(id)
      const err = toStrataError(e, 'RPC_SEND_FAILED')
      return { id, promise: Promise.reject(err) }
    }
    return { id, promise }
  }

  /** Forget a request locally and tell the server to stop working on it. */
  cancel(id: number, reason: StrataError): void {
    const p = this.pending.get(id)
    if (!p) return
    this.pending.delete(id)
    // its reply may be arriving into the caller's memory right now: move the next read elsewhere
    if (p.sink) this.reader?.rearm()
    p.reject(reason)
    if (!this.closedErr) {
      try {
        this.send({ id, service: 0, method: 0, flags: FLAG_CANCEL })
      } catch {
        // the connection is going away; nothing left to cancel
      }
    }
  }

  close(err: StrataError = new StrataError('CLOSED', 'connection closed locally')): void {
    if (this.closedErr) return
    this.closedErr = err
    for (const p of this.pending.values()) p.reject(err)
    this.pending.clear()
    this.socket.destroy()
    for (const fn of this.closeListeners.splice(0)) fn(err)
  }
}
