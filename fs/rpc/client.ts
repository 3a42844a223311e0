// RPC client: one reused connection per peer address carrying many requests
// at once, deadlines and cancellation per call, and reconnect with backoff
// after a peer goes away.

import net from 'node:net'
import { StrataError, toStrataError } from '../common/errors.js'
import { CoreMethod, ServiceId, methodName } from '../common/services.js'
import { Connection, DirectReader, type AttachmentSink } from './connection.js'
import { DEFAULT_MAX_FRAME_BYTES } from './frame.js'
import type { FaultSpec, InstalledFault } from './faults.js'

export interface CallOptions {
  /** deadline for this call; default: the client's defaultTimeoutMs */
  timeoutMs?: number
  signal?: AbortSignal
  /**
   * Receive the reply's large Buffers straight into the caller's memory (see
   * AttachmentSink). Once the call has settled with an error (timeout,
   * cancel) nothing more is written into buffers the sink handed out.
   */
  sink?: AttachmentSink
  /**
   * Start the request's first large Buffer at this alignment inside the frame
   * (see encodeFrameParts): chunk writes ask for 4096, so the storage node
   * can write the data with O_DIRECT straight from the received frame.
   */
  alignAttachments?: number
}

export interface RpcClientOptions {
  maxFrameBytes?: number
  connectTimeoutMs?: number
  defaultTimeoutMs?: number
  /** first reconnect delay after a failed connect; doubles up to maxBackoffMs */
  minBackoffMs?: number
  maxBackoffMs?: number
}

interface PeerState {
  conn: Connection | null
  connecting: Promise<Connection> | null
  failures: number
  /** no new connect attempt before this time (ms, monotonic) */
  retryAt: number
  /** the last connect attempt was refused (nothing listens), not timed out */
  refused: boolean
}

/** An RPC_CONNECT_FAILED that a peer's refusal caused (nothing listens there), as opposed to a connect that timed out. */
export function connectRefused(e: unknown): boolean {
  return e instanceof StrataError && e.code === 'RPC_CONNECT_FAILED' && (e.detail as { refused?: unknown } | undefined)?.refused === true
}

export class RpcClient {
  private readonly peers = new Map<string, PeerState>()
  private closed = false
  readonly opts: Required<RpcClientOptions>

  constructor(opts: RpcClientOptions = {}) {
    this.opts = {
      maxFrameBytes: opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
      connectTimeoutMs: opts.connectTimeoutMs ?? 3000,
      defaultTimeoutMs: opts.defaultTimeoutMs ?? 30000,
      minBackoffMs: opts.minBackoffMs ?? 50,
      maxBackoffMs: opts.maxBackoffMs ?? 2000,
    }
  }

  async call<T = unknown>(address: string, service: number, method: number, payload: unknown, options: CallOptions = {}): Promise<T> {
    if (this.closed) throw new StrataError('CLOSED', 'rpc client closed')
    const timeoutMs = options.timeoutMs ?? this.opts.defaultTimeoutMs
    const deadline = performance.now() + timeoutMs
    const signal = options.signal
    if (signal?.aborted) throw new StrataError('CANCELLED', 'call cancelled before it started', { cause: signal.reason })
    const conn = await this.connection(address, deadline, signal)
    // an abort while the connection was being made fired no listener of this call: nothing is sent
    if (signal?.aborted) throw new StrataError('CANCELLED', `call ${service}.${method} to ${address} cancelled`, { cause: signal.reason })
    const remaining = Math.max(1, Math.round(deadline - performance.now()))
    const { id, promise } = conn.request(service, method, payload, remaining, options.sink, options.alignAttachments)
    let timer: NodeJS.Timeout | undefined
    let onAbort: (() => void) | undefined
    const guards = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        const e = new StrataError('TIMEOUT', `call ${methodName(service, method)} (${service}.${method}) to ${address} timed out after ${timeoutMs} ms`)
        conn.cancel(id, e)
        reject(e)
      }, remaining)
      if (signal) {
        onAbort = () => {
          const e = new StrataError('CANCELLED', `call ${service}.${method} to ${address} cancelled`, { cause: signal.reason })
          conn.cancel(id, e)
          reject(e)
        }
        signal.addEventListener('abort', onAbort, { once: true })
      }
    })
    try {
      return (await Promise.race([promise, guards])) as T
    } finally {
      clearTimeout(timer)
      if (signal && onAbort) signal.removeEventListener('abort', onAbort)
      // a guard may have rejected after the race settled; keep it from surfacing
      promise.catch(() => {})
    }
  }

  private peer(address: string): PeerState {
    let p = this.peers.get(address)
    if (!p) this.peers.set(address, (p = { conn: null, connecting: null, failures: 0, retryAt: 0, refused: false }))
    return p
  }

  private async connection(address: string, deadline: number, signal?: AbortSignal): Promise<Connection> {
    const p = this.peer(address)
    for (;;) {
      if (p.conn && !p.conn.closed) return p.conn
      if (!p.connecting) {
        const wait = p.retryAt - performance.now()
        if (wait > 0) {
          if (performance.now() + wait > deadline) {
            throw new StrataError('RPC_CONNECT_FAILED', `${address} unreachable; next reconnect attempt in ${Math.round(wait)} ms is past the deadline`, { detail: { refused: p.refused } })
          }
          await abortableSleep(wait, signal)
          continue
        }
        p.connecting = this.connect(address, Math.min(this.opts.connectTimeoutMs, Math.max(1, deadline - performance.now())))
          .then((conn) => {
            p.failures = 0
            p.retryAt = 0
            p.conn = conn
            conn.onClose(() => {
              if (p.conn === conn) p.conn = null
            })
            return conn
          })
          .catch((e) => {
            p.failures++
            p.refused = connectRefused(e)
            const backoff = Math.min(this.opts.maxBackoffMs, this.opts.minBackoffMs * 2 ** Math.min(p.failures - 1, 16))
            p.retryAt = performance.now() + backoff * (0.75 + Math.random() * 0.5)
            throw e
          })
          .finally(() => {
            p.connecting = null
          })
      }
      return await p.connecting
    }
  }

  private connect(address: string, timeoutMs: number): Promise<Connection> {
    const { host, port } = parseAddress(address)
    return new Promise<Connection>((resolve, reject) => {
      // replies (chunk data for reads) are received in place, see FrameDecoder.readTarget
      const reader = new DirectReader(this.opts.maxFrameBytes)
      const socket = net.connect({ host, port, onread: reader.onread })
      const timer = setTimeout(() => {
        socket.destroy()
        // not a refusal: on loopback a live but busy peer (or this process's own
        // event loop, late to see the connect) looks like this
        reject(new StrataError('RPC_CONNECT_FAILED', `connect to ${address} timed out after ${timeoutMs} ms`, { detail: { refused: false } }))
      }, timeoutMs)
      socket.once('connect', () => {
        clearTimeout(timer)
        socket.removeAllListeners('error')
        resolve(new Connection(socket, this.opts.maxFrameBytes, null, null, reader))
      })
      socket.once('error', (e) => {
        clearTimeout(timer)
        reject(new StrataError('RPC_CONNECT_FAILED', `connect to ${address}: ${e.message}`, { cause: e, detail: { refused: (e as NodeJS.ErrnoException).code === 'ECONNREFUSED' } }))
      })
    })
  }

  /** Drops the connection to one peer (tests use it to force a reconnect). */
  disconnect(address: string): void {
    const p = this.peers.get(address)
    p?.conn?.close(new StrataError('CLOSED', 'disconnected locally'))
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    for (const p of this.peers.values()) p.conn?.close(new StrataError('CLOSED', 'rpc client closed'))
    this.peers.clear()
  }

  // --- Core service helpers, usable against any daemon

  echo(address: string, payload: unknown = null, options?: CallOptions): Promise<{ name: string; pid: number; payload: unknown }> {
    return this.call(address, ServiceId.Core, CoreMethod.echo, payload, options)
  }

  setFault(address: string, spec: FaultSpec, options?: CallOptions): Promise<InstalledFault> {
    return this.call(address, ServiceId.Core, CoreMethod.setFault, spec, options)
  }

  clearFaults(address: string, id?: number, options?: CallOptions): Promise<{ removed: number }> {
    return this.call(address, ServiceId.Core, CoreMethod.clearFaults, id === undefined ? null : { id }, options)
  }

  stats(address: string, options?: CallOptions): Promise<Record<string, unknown>> {
    return this.call(address, ServiceId.Core, CoreMethod.stats, null, options)
  }
}

export function parseAddress(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':')
  const port = Number(address.slice(i + 1))
  if (i <= 0 || !Number.isInteger(port) || port <= 0 || port > 65535) {
    throw new StrataError('INVALID_ARGUMENT', `bad address "${address}", expected host:port`)
  }
  let host = address.slice(0, i)
  if (host.startsWith('[') && host.endsWith(']')) host = host.slice(1, -1)
  return { host, port }
}

function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new StrataError('CANCELLED', 'cancelled', { cause: signal.reason }))
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort)
      resolve()
    }, ms)
    const onAbort = () => {
      clearTimeout(t)
      reject(new StrataError('CANCELLED', 'cancelled', { cause: signal?.reason }))
    }
    signal?.addEventListener('abort', onAbort, { once: true })
  })
}

export { toStrataError }
