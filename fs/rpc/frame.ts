// Wire framing: a 4-byte big-endian length followed by one msgpack envelope.
// The length is checked against the configured maximum as soon as the header
// arrives, so an oversized frame is refused before any of its body is held.

import { Packr } from 'msgpackr'
import { StrataError, type WireError } from '../common/errors.js'

export const DEFAULT_MAX_FRAME_BYTES = 80 * 1024 * 1024
export const HEADER_BYTES = 4

/** flags bits of the envelope */
export const FLAG_REQUEST = 1
export const FLAG_RESPONSE = 2
export const FLAG_CANCEL = 4

export interface Envelope {
  id: number
  service: number
  method: number
  flags: number
  /** request: relative deadline the caller will wait, so the server can give up too */
  timeoutMs?: number
  payload?: unknown
  error?: WireError & { detail?: Record<string, unknown> }
}

// useRecords off: every frame must decode on its own, with no per-connection
// shared structures (a reconnect must never misread a record id).
const packr = new Packr({ useRecords: false, mapsAsObjects: true })

export function encodeFrame(env: Envelope): Buffer {
  const body = packr.pack(env)
  const header = Buffer.allocUnsafe(HEADER_BYTES)
  header.writeUInt32BE(body.length, 0)
  return Buffer.concat([header, body], HEADER_BYTES + body.length)
}

export function encodeBody(env: Envelope): Buffer {
  return packr.pack(env)
}

export function decodeEnvelope(body: Buffer): Envelope {
  let v: unknown
  try {
    v = packr.unpack(body)
  } catch (e) {
    throw new StrataError('RPC_BAD_FRAME', `undecodable msgpack body: ${(e as Error).message}`, { cause: e })
  }
  if (!v || typeof v !== 'object') throw new StrataError('RPC_BAD_FRAME', 'envelope is not a map')
  const env = v as Envelope
  if (!Number.isInteger(env.id) || !Number.isInteger(env.service) || !Number.isInteger(env.method) || !Number.isInteger(env.flags)) {
    throw new StrataError('RPC_BAD_FRAME', 'envelope lacks integer id/service/method/flags')
  }
  return env
}

/**
 * Incremental frame splitter. Feed socket chunks; complete frame bodies come
 * out of `push`. Throws RPC_FRAME_TOO_LARGE / RPC_BAD_FRAME; the caller closes
 * only that connection.
 */
export class FrameDecoder {
  private chunks: Buffer[] = []
  private buffered = 0
  private need = -1

  constructor(private readonly maxFrameBytes: number) {}

  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk)
    this.buffered += chunk.length
    const out: Buffer[] = []
    for (;;) {
      if (this.need < 0) {
        if (this.buffered < HEADER_BYTES) break
        const header = this.take(HEADER_BYTES)
        const len = header.readUInt32BE(0)
        if (len > this.maxFrameBytes) {
          throw new StrataError('RPC_FRAME_TOO_LARGE', `frame of ${len} bytes exceeds the maximum of ${this.maxFrameBytes}`)
        }
        if (len === 0) throw new StrataError('RPC_BAD_FRAME', 'empty frame')
        this.need = len
      }
      if (this.buffered < this.need) break
      out.push(this.take(this.need))
      this.need = -1
    }
    return out
  }

  private take(n: number): Buffer {
    const first = this.chunks[0]!
    if (first.length >= n) {
      const head = first.subarray(0, n)
      if (first.length === n) this.chunks.shift()
      else this.chunks[0] = first.subarray(n)
      this.buffered -= n
      return head
    }
    const out = Buffer.allocUnsafe(n)
    let off = 0
    while (off < n) {
      const c = this.chunks[0]!
      const k = Math.min(c.length, n - off)
      c.copy(out, off, 0, k)
      off += k
      if (k === c.length) this.chunks.shift()
      else this.chunks[0] = c.subarray(k)
    }
    this.buffered -= n
    return out
  }
}
