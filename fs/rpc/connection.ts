// One TCP connection carrying many requests in flight in both directions.
// Requests are matched to responses by envelope id; a malformed frame closes
// this connection only.

import type { Socket } from 'node:net'
import { StrataError, toStrataError } from '../common/errors.js'
import { decodeEnvelope, encodeFrameParts, FLAG_CANCEL, FLAG_REQUEST, FLAG_RESPONSE, FrameDecoder, type Envelope } from './frame.js'

interface Pending {
  resolve: (v: unknown) => void
  reject: (e: StrataError) => void
}

export interface IncomingRequest {
  env: Envelope
  conn: Connection
}

/**
 * In-place frame reception for a socket this side connects. Pass `onread` to
 * net.connect and the reader to the Connection:
 *   const r = new DirectReader(max); const s = net.connect({ host, port, onread: r.onread })
 *   … new Connection(s, max, null, null, r)
 */
export class DirectReader {
  readonly decoder: FrameDecoder
  private conn: Connection | null = null
  /** bodies or an error that arrived before the Connection was attached */
  private early: Buffer[] = []
  private earlyError: unknown = null

  constructor(maxFrameBytes: number) {
    this.decoder = new FrameDecoder(maxFrameBytes)
  }

  readonly onread = {
    buffer: (): Buffer => this.decoder.readTarget(),
    /** returns true: keep reading (false would pause the socket) */
    callback: (nread: number): boolean => {
      let bodies: Buffer[]
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

  attach(conn: Connection): void {
    this.conn = conn
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
  readonly peer: string

  constructor(
    readonly socket: Socket,
    readonly maxFrameBytes: number,
    private readonly onRequest: ((req: IncomingRequest) => void) | null,
    private readonly onCancel: ((conn: Connection, id: number) => void) | null = null,
    reader: DirectReader | null = null,
  ) {
    this.peer = `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`
    socket.setNoDelay(true)
    if (reader) {
      // bytes arrive through the socket's onread callback, not 'data'
      this.decoder = reader.decoder
      reader.attach(this)
    } else {
      this.decoder = new FrameDecoder(maxFrameBytes)
      socket.on('data', (chunk: Buffer) => this.onData(chunk))
    }
    socket.on('error', (e) => this.close(new StrataError('RPC_CONNECTION_CLOSED', `${this.peer}: ${e.message}`, { cause: e })))
    socket.on('close', () => this.close(new StrataError('RPC_CONNECTION_CLOSED', `connection to ${this.peer} closed`)))
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

  /** @internal complete frame bodies, in arrival order */
  deliver(bodies: Buffer[]): void {
    if (this.closedErr) return
    for (const body of bodies) {
      let env: Envelope
      try {
        env = decodeEnvelope(body)
      } catch (e) {
        this.close(toStrataError(e, 'RPC_BAD_FRAME'))
        return
      }
      this.dispatch(env)
      if (this.closedErr) return
    }
  }

  private dispatch(env: Envelope): void {
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
      this.onRequest({ env, conn: this })
    } else {
      this.close(new StrataError('RPC_BAD_FRAME', `envelope with unknown flags ${env.flags}`))
    }
  }

  /**
   * Writes one envelope; refuses (without closing) one that exceeds the frame
   * cap. `written` runs once the socket is done with the frame's buffers: the
   * kernel has the bytes, or the write failed. It does not run when send throws.
   */
  send(env: Envelope, written?: () => void): void {
    if (this.closedErr) throw this.closedErr
    const frame = encodeFrameParts(env)
    if (frame.bodyBytes > this.maxFrameBytes) {
      throw new StrataError('RPC_FRAME_TOO_LARGE', `frame of ${frame.bodyBytes} bytes exceeds the maximum of ${this.maxFrameBytes}`)
    }
    // corked, the segments leave in one writev; attachments are not copied
    this.socket.cork()
    const last = frame.parts.length - 1
    for (let i = 0; i < last; i++) this.socket.write(frame.parts[i]!)
    // the callback of the last write also covers the earlier ones (same writev, or queued before it)
    if (written) this.socket.write(frame.parts[last]!, () => written())
    else this.socket.write(frame.parts[last]!)
    this.socket.uncork()
  }

  /** Sends a request and resolves with the reply payload. Deadlines are the caller's job. */
  request(service: number, method: number, payload: unknown, timeoutMs?: number): { id: number; promise: Promise<unknown> } {
    if (this.closedErr) return { id: 0, promise: Promise.reject(this.closedErr) }
    const id = this.nextId++
    if (this.nextId > 0x7fffffff) this.nextId = 1
    const promise = new Promise<unknown>((resolve, reject) => {
      this.pending.set(id, { resolve, reject })
    })
    try {
      this.send({ id, service, method, flags: FLAG_REQUEST, payload, ...(timeoutMs !== undefined ? { timeoutMs } : {}) })
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
