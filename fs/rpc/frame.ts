// Wire framing: a 4-byte big-endian length followed by one frame body. The
// length is checked against the configured maximum as soon as the header
// arrives, so an oversized frame is refused before any of its body is held.
//
// A body is either
//   - one msgpack envelope (always a map, so its first byte is never 0xc1), or
//   - 0xc1, a 4-byte big-endian envelope length E, the msgpack envelope (E
//     bytes), then raw attachment bytes up to the end of the frame.
// The second form carries large Buffers (chunk data) out of band. Packed
// inline, every byte of a chunk is copied into msgpackr's pack buffer (which
// first has to grow to hold it) on every hop; as an attachment the Buffer is
// handed to the socket as its own writev segment, and the receiver gets it as
// a subarray of the frame, not a copy. In the envelope such a Buffer is an
// extension value (type ATTACHMENT_EXT, 8 bytes: offset and length inside the
// attachment area). Frames without large Buffers keep the first form byte for
// byte, so small messages are unchanged on the wire. A sender may start the
// attachment area with zero padding so that the first attachment sits at an
// aligned offset of the body (chunk writes: 4096, for O_DIRECT); references
// count from the start of the area, padding included. An attachment may also
// be a FileSlice: a file range the connection sends with sendfile(2).

import { read as readCb, readSync } from 'node:fs'
import { promisify } from 'node:util'
import { Packr, addExtension } from 'msgpackr'
import type { BufferPool } from '../common/buffer-pool.js'
import { StrataError, type WireError } from '../common/errors.js'

export const DEFAULT_MAX_FRAME_BYTES = 80 * 1024 * 1024
export const HEADER_BYTES = 4
/** Buffers at least this large travel as attachments. */
export const ATTACHMENT_MIN_BYTES = 64 * 1024

/** First body byte of a frame with attachments; msgpack never uses 0xc1. */
const ATTACHED_MARK = 0xc1
/** marker + envelope length */
const ATTACHED_PREFIX_BYTES = 5
/** msgpack extension type of an attachment reference. */
const ATTACHMENT_EXT = 0x41

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

/**
 * Bytes of an open file that travel as an attachment without passing through
 * this process's memory: the connection hands them from the page cache to the
 * socket with sendfile(2) (see Connection.send). On the wire they are an
 * ordinary attachment; the receiver sees a Buffer. Whoever puts one in a
 * reply keeps `fd` open, and the range unchanged, until the reply is written
 * (the RPC server's AFTER_REPLY hook).
 */
export class FileSlice {
  constructor(
    readonly fd: number,
    readonly offset: number,
    readonly length: number,
  ) {}

  /** The bytes, read into memory at once (tools and tests that encode a whole frame). */
  readSync(): Buffer {
    const b = Buffer.allocUnsafe(this.length)
    let done = 0
    while (done < this.length) {
      const n = readSync(this.fd, b, done, this.length - done, this.offset + done)
      if (n === 0) throw this.shortError(done)
      done += n
    }
    return b
  }

  /** The bytes, read into memory off the event loop (a connection that cannot sendfile). */
  async read(): Promise<Buffer> {
    const b = Buffer.allocUnsafe(this.length)
    let done = 0
    while (done < this.length) {
      const { bytesRead } = await readAsync(this.fd, b, done, this.length - done, this.offset + done)
      if (bytesRead === 0) throw this.shortError(done)
      done += bytesRead
    }
    return b
  }

  private shortError(done: number): StrataError {
    return new StrataError('IO_ERROR', `file ended ${this.length - done} bytes before the end of an attachment`)
  }
}

const readAsync = promisify(readCb)

/** One piece of an encoded frame: bytes in memory, or a range of a file. */
export type FramePart = Buffer | FileSlice

// Attachments of the frame being packed / unpacked. Packing and unpacking are
// synchronous, so module-level state is safe; null outside those calls, in
// which case Buffers pack inline whatever their size.
let packing: { parts: FramePart[]; bytes: number } | null = null
/** resolves an attachment reference (offset, length inside the attachment area) to its bytes */
let unpacking: ((off: number, len: number) => Buffer) | null = null

function unpackAttachmentRef(data: Uint8Array): Buffer {
  const resolve = unpacking
  if (!resolve || data.length !== 8) throw new Error('attachment reference outside an attachment frame')
  const view = new DataView(data.buffer, data.byteOffset, 8)
  return resolve(view.getUint32(0), view.getUint32(4))
}

type AllocateForWrite = (size: number) => { target: Uint8Array; targetView: DataView; position: number }

/** fixext 8 in the envelope: where the attachment sits in the attachment area and how long it is */
function writeAttachmentRef(allocateForWrite: AllocateForWrite, part: FramePart, length: number): void {
  const { target, targetView, position } = allocateForWrite(10)
  target[position] = 0xd7
  target[position + 1] = ATTACHMENT_EXT
  targetView.setUint32(position + 2, packing!.bytes)
  targetView.setUint32(position + 6, length)
  packing!.parts.push(part)
  packing!.bytes += length
}

// A FileSlice is always an attachment (its bytes are not in memory to inline).
// Registered before the Uint8Array extension, which then sets the unpacker
// both share (msgpackr keeps one unpacker per type code).
addExtension({
  Class: FileSlice,
  type: ATTACHMENT_EXT,
  pack(value: FileSlice, allocateForWrite: AllocateForWrite) {
    if (!packing) throw new StrataError('INTERNAL', 'a FileSlice can only travel as a frame attachment')
    writeAttachmentRef(allocateForWrite, value, value.length)
  },
  unpack: unpackAttachmentRef,
} as unknown as Parameters<typeof addExtension>[0])

// msgpackr routes every Uint8Array (Buffer included) through the first
// matching extension, and extensions added here take precedence over its
// built-in binary encoding. msgpackr keeps one extension table per module; this
// is the only user of this copy (lmdb bundles its own).
addExtension({
  Class: Uint8Array,
  type: ATTACHMENT_EXT,
  pack(value: Uint8Array, allocateForWrite: AllocateForWrite) {
    const n = value.byteLength
    if (packing && n >= ATTACHMENT_MIN_BYTES) {
      writeAttachmentRef(allocateForWrite, Buffer.isBuffer(value) ? value : Buffer.from(value.buffer, value.byteOffset, n), n)
      return
    }
    // msgpack bin 8/16/32, exactly what msgpackr writes for binary by itself
    const head = n < 0x100 ? 2 : n < 0x10000 ? 3 : 5
    const { target, targetView, position } = allocateForWrite(head + n)
    if (head === 2) {
      target[position] = 0xc4
      target[position + 1] = n
    } else if (head === 3) {
      target[position] = 0xc5
      targetView.setUint16(position + 1, n)
    } else {
      target[position] = 0xc6
      targetView.setUint32(position + 1, n)
    }
    target.set(value, position + head)
  },
  unpack: unpackAttachmentRef,
  // msgpackr's typings only know pack(value) → bytes; the allocateForWrite form
  // (write in place, no ext wrapper) is the one its own built-ins use
} as unknown as Parameters<typeof addExtension>[0])

/** One encoded frame as the segments to write, in order (one writev). */
export interface EncodedFrame {
  /** length header (+ attachment prefix), envelope, then the attachments themselves */
  parts: FramePart[]
  /** body length as announced in the header */
  bodyBytes: number
}

function packCollecting(env: Envelope, firstOffset: number): { envelope: Buffer; parts: FramePart[]; bytes: number } {
  const collected = { parts: [] as FramePart[], bytes: firstOffset }
  packing = collected
  try {
    return { envelope: packr.pack(env), parts: collected.parts, bytes: collected.bytes }
  } finally {
    packing = null
  }
}

const ZERO_PAD = Buffer.alloc(64 * 1024)

/**
 * @param align when > 0, the first attachment starts at a multiple of this
 *   many bytes from the start of the frame body (zero padding after the
 *   envelope): a receiver that takes the body into aligned memory (the RPC
 *   server's frame pool) then holds chunk data it can write with O_DIRECT as
 *   it is, without a bounce copy. At most 64 KiB.
 */
export function encodeFrameParts(env: Envelope, align = 0): EncodedFrame {
  let packed = packCollecting(env, 0)
  if (packed.parts.length === 0) {
    const header = Buffer.allocUnsafe(HEADER_BYTES)
    header.writeUInt32BE(packed.envelope.length, 0)
    return { parts: [header, packed.envelope], bodyBytes: packed.envelope.length }
  }
  let pad = 0
  if (align > 0) {
    if (align > ZERO_PAD.length) throw new StrataError('INVALID_ARGUMENT', `attachment alignment ${align} above ${ZERO_PAD.length}`)
    pad = (align - ((ATTACHED_PREFIX_BYTES + packed.envelope.length) % align)) % align
    // references are fixed-width, so shifting them keeps the envelope's length
    if (pad > 0) packed = packCollecting(env, pad)
  }
  const { envelope, parts } = packed
  const bodyBytes = ATTACHED_PREFIX_BYTES + envelope.length + packed.bytes
  const header = Buffer.allocUnsafe(HEADER_BYTES + ATTACHED_PREFIX_BYTES)
  // a body over 4 GiB cannot be announced; the frame cap refuses it before sending anyway
  header.writeUInt32BE(Math.min(bodyBytes, 0xffffffff), 0)
  header[HEADER_BYTES] = ATTACHED_MARK
  header.writeUInt32BE(envelope.length, HEADER_BYTES + 1)
  return { parts: pad > 0 ? [header, envelope, ZERO_PAD.subarray(0, pad), ...parts] : [header, envelope, ...parts], bodyBytes }
}

/** The whole frame in one Buffer (tests, tools); connections write the parts. */
export function encodeFrame(env: Envelope): Buffer {
  return Buffer.concat(encodeFrameParts(env).parts.map((p) => (p instanceof FileSlice ? p.readSync() : p)))
}

export function decodeEnvelope(body: Buffer): Envelope {
  if (body.length > 0 && body[0] === ATTACHED_MARK) {
    if (body.length < ATTACHED_PREFIX_BYTES) throw new StrataError('RPC_BAD_FRAME', 'attachment frame without envelope length')
    const envEnd = ATTACHED_PREFIX_BYTES + body.readUInt32BE(1)
    if (envEnd > body.length) throw new StrataError('RPC_BAD_FRAME', 'envelope length beyond the frame')
    const area = body.subarray(envEnd)
    return unpackEnvelope(body.subarray(ATTACHED_PREFIX_BYTES, envEnd), (off, len) => {
      if (off + len > area.length) throw new Error(`attachment [${off}, +${len}) beyond the ${area.length} attached bytes`)
      return area.subarray(off, off + len)
    })
  }
  return unpackEnvelope(body, null)
}

function unpackEnvelope(bytes: Buffer, resolve: ((off: number, len: number) => Buffer) | null): Envelope {
  let v: unknown
  unpacking = resolve
  try {
    v = packr.unpack(bytes)
  } catch (e) {
    throw new StrataError('RPC_BAD_FRAME', `undecodable msgpack body: ${(e as Error).message}`, { cause: e })
  } finally {
    unpacking = null
  }
  if (!v || typeof v !== 'object') throw new StrataError('RPC_BAD_FRAME', 'envelope is not a map')
  const env = v as Envelope
  if (!Number.isInteger(env.id) || !Number.isInteger(env.service) || !Number.isInteger(env.method) || !Number.isInteger(env.flags)) {
    throw new StrataError('RPC_BAD_FRAME', 'envelope lacks integer id/service/method/flags')
  }
  return env
}

/**
 * Chooses where the attachments of an arriving reply go, before their bytes
 * are read. Called with the envelope decoded once with each attachment as a
 * zero-length placeholder (`placeholders[k]` is the k-th in decode order)
 * and their lengths; returns, per attachment, a Buffer of exactly that
 * length to receive it (the caller's own memory), or undefined to let the
 * decoder allocate. An array of Buffers whose lengths add up to exactly the
 * attachment's scatters it over them in order, and the envelope then holds
 * that array where the attachment was. Null: no placement for this frame.
 */
export type AttachmentPlacer = (env: Envelope, placeholders: readonly Buffer[], lengths: readonly number[]) => { into: ReadonlyArray<Placed>; live: () => boolean } | null

/** Where one attachment is received: one Buffer of its length, a scatter list of Buffers adding up to it, or anywhere (undefined). */
export type Placed = Buffer | readonly Buffer[] | undefined

/** The placement of an attachment of `len` bytes as segments to fill in order, or null when `b` does not fit it exactly. */
function placedSegments(b: Placed, len: number): readonly Buffer[] | null {
  if (b === undefined) return null
  if (Buffer.isBuffer(b)) return b.length === len ? [b] : null
  if (!Array.isArray(b) || b.length === 0) return null
  let total = 0
  for (const x of b) {
    if (!Buffer.isBuffer(x)) return null
    total += x.length
  }
  return total === len ? b : null
}

/** A frame whose envelope was decoded before its attachments arrived (placed reception). */
export interface DecodedFrame {
  env: Envelope
}

/** where placed attachments are being received */
interface Placement {
  env: Envelope
  segments: Buffer[]
  index: number
  filled: number
  /** false once nobody waits for the reply: the rest is read into scratch memory */
  live: () => boolean
}

/** Frames at least this large are received straight into their own buffer (see FrameDecoder.readTarget). */
export const DIRECT_READ_MIN_BYTES = 64 * 1024
/** Small frames and headers are read into slabs of this size, never overwritten once read. */
const SLAB_BYTES = 64 * 1024
/** A slab with less room left than this is retired, so reads stay reasonably large. */
const SLAB_MIN_READ = 8 * 1024

/**
 * Incremental frame splitter. Two ways to feed it:
 *   - `push(chunk)` with socket 'data' chunks (accepted sockets), or
 *   - `readTarget()` / `commitRead(n)` as the socket's `onread` buffer and
 *     callback (sockets we connect: Node offers onread only there). Then the
 *     kernel copies a large frame body directly into the Buffer that is
 *     handed out as the frame, instead of into 64 KiB read buffers that are
 *     copied again to assemble it; reads are as large as the frame needs,
 *     which also means fewer read calls.
 * Complete frame bodies come out of either. Throws RPC_FRAME_TOO_LARGE /
 * RPC_BAD_FRAME; the caller closes only that connection.
 */
export class FrameDecoder {
  private chunks: Buffer[] = []
  private buffered = 0
  private need = -1
  /** fed through readTarget()/commitRead() (set by the first readTarget call) */
  private onreadMode = false
  /**
   * A large frame's own body being filled, and how far: in place by socket
   * reads (onread mode), or by copying arriving chunks (push mode with a pool)
   */
  private body: Buffer | null = null
  private bodyFilled = 0
  /** onread mode: current slab and the first byte not yet read into */
  private slab: Buffer | null = null
  private slabPos = 0
  /** onread mode: attachments being received into their placed buffers */
  private placement: Placement | null = null
  /** onread mode: where the rest of a placed frame goes once its call was given up */
  private scratch: Buffer | null = null
  /** onread mode: decides placement for large attachment frames (set by the connection) */
  placer: AttachmentPlacer | null = null

  /**
   * @param pool large frame bodies are taken from it (recycled memory; the
   *   receiver may give a body back once nothing refers to it)
   */
  constructor(private readonly maxFrameBytes: number, private readonly pool: BufferPool | null = null) {}

  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = []
    if (this.body) {
      // push mode: a recycled body takes the frame's bytes as they arrive
      const n = Math.min(chunk.length, this.need - this.bodyFilled)
      chunk.copy(this.body, this.bodyFilled, 0, n)
      this.bodyFilled += n
      if (this.bodyFilled < this.need) return out
      out.push(this.body)
      this.body = null
      this.need = -1
      if (n === chunk.length) return out
      chunk = chunk.subarray(n)
    }
    this.chunks.push(chunk)
    this.buffered += chunk.length
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
      if (this.buffered < this.need) {
        // (in onread mode readTarget() receives the rest in place instead)
        if (this.pool && !this.onreadMode && this.need >= DIRECT_READ_MIN_BYTES) this.beginBody()
        break
      }
      out.push(this.take(this.need))
      this.need = -1
    }
    return out
  }

  /**
   * Where the next socket read should land. Inside a large frame: the rest of
   * that frame's own buffer (so a read never crosses into the next frame).
   * Otherwise: the unread part of a slab; bytes once read there are never
   * overwritten, so frames and values sliced from it stay valid.
   */
  readTarget(): Buffer {
    this.onreadMode = true
    if (this.placement) return this.placedTarget(this.placement)
    if (!this.body && this.need >= DIRECT_READ_MIN_BYTES && this.placer && this.tryPlace()) return this.placedTarget(this.placement!)
    if (!this.body && this.need >= DIRECT_READ_MIN_BYTES) this.beginBody()
    if (this.body) return this.body.subarray(this.bodyFilled)
    if (!this.slab || this.slab.length - this.slabPos < SLAB_MIN_READ) {
      this.slab = Buffer.allocUnsafeSlow(SLAB_BYTES)
      this.slabPos = 0
    }
    return this.slab.subarray(this.slabPos)
  }

  /** The first `n` bytes of the last readTarget() arrived. */
  commitRead(n: number): Array<Buffer | DecodedFrame> {
    const pl = this.placement
    if (pl) {
      this.advance(pl, n)
      if (pl.index < pl.segments.length) return []
      this.placement = null
      this.need = -1
      return [{ env: pl.env }]
    }
    if (this.body) {
      this.bodyFilled += n
      if (this.bodyFilled < this.need) return []
      const done = this.body
      this.body = null
      this.need = -1
      return [done]
    }
    const chunk = this.slab!.subarray(this.slabPos, this.slabPos + n)
    this.slabPos += n
    return this.push(chunk)
  }

  /** A large frame gets a body of its own, holding what already arrived (the header's read may bring some). */
  private beginBody(): void {
    const body = this.pool ? this.pool.take(this.need) : Buffer.allocUnsafe(this.need)
    let off = 0
    for (const c of this.chunks) {
      c.copy(body, off)
      off += c.length
    }
    this.reuseSlabTail(this.chunks)
    this.chunks = []
    this.buffered = 0
    this.body = body
    this.bodyFilled = off
  }

  /**
   * Gives slab bytes back once they were copied elsewhere and nothing refers
   * to them: the start of a large frame that came with its header's read.
   * Without this every large frame retired most of a slab, and the fresh
   * 64 KiB slabs (external memory) kept V8's full GC busy: 25 mark-compacts
   * in 2 GiB of 1 MiB reads, measured. `copied` are the bytes, in order; they
   * are reclaimed only when they end exactly at the slab's read position.
   */
  private reuseSlabTail(copied: readonly Buffer[]): void {
    const slab = this.slab
    if (!slab || copied.length === 0) return
    const first = copied[0]!
    const last = copied[copied.length - 1]!
    if (first.buffer !== slab.buffer || last.buffer !== slab.buffer) return
    const start = first.byteOffset - slab.byteOffset
    const end = last.byteOffset - slab.byteOffset + last.length
    if (end !== this.slabPos || start < 0 || start > end) return
    this.slabPos = start
  }

  /**
   * At the start of a large frame with attachments, once its envelope is
   * buffered: decode the envelope, let the placer choose destinations, and
   * switch to placed reception. False (nothing consumed) when the frame is
   * not of that form, its envelope is not all here yet, or the placer
   * declines; the frame is then received whole as usual.
   */
  private tryPlace(): boolean {
    if (this.buffered < ATTACHED_PREFIX_BYTES) return false
    // what arrived of the frame so far (usually one read: the header's)
    const prefix = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)
    if (prefix[0] !== ATTACHED_MARK) return false
    const envEnd = ATTACHED_PREFIX_BYTES + prefix.readUInt32BE(1)
    if (envEnd > this.need || envEnd > this.buffered) return false
    const areaLen = this.need - envEnd
    if (areaLen === 0) return false
    const envBytes = prefix.subarray(ATTACHED_PREFIX_BYTES, envEnd)
    // first pass: placeholders, to learn which attachment is which
    const placeholders: Buffer[] = []
    const refs: Array<{ off: number; len: number }> = []
    let probe: Envelope
    try {
      probe = unpackEnvelope(envBytes, (off, len) => {
        refs.push({ off, len })
        const p = Buffer.alloc(0)
        placeholders.push(p)
        return p
      })
    } catch {
      return false // the whole-frame path reports it
    }
    // attachments are packed back to back in decode order; anything else takes the whole-frame path
    let expect = 0
    for (const r of refs) {
      if (r.off !== expect) return false
      expect += r.len
    }
    if (expect !== areaLen) return false
    let choice: ReturnType<AttachmentPlacer>
    try {
      choice = this.placer!(probe, placeholders, refs.map((r) => r.len))
    } catch {
      choice = null
    }
    if (!choice) return false
    const into = refs.map((r, k) => placedSegments(choice.into[k], r.len))
    const own = refs.reduce((n, r, k) => n + (into[k] ? 0 : r.len), 0)
    const rest = own > 0 ? Buffer.allocUnsafe(own) : null
    let restPos = 0
    const placed = refs.map((r, k): readonly Buffer[] => {
      const b = into[k]
      if (b) return b
      const s = rest!.subarray(restPos, restPos + r.len)
      restPos += r.len
      return [s]
    })
    // second pass: the envelope that is delivered, referring to where each attachment went
    let k = 0
    const env = unpackEnvelope(envBytes, () => {
      const segs = placed[k]!
      const asked = choice.into[k++]
      return (Array.isArray(asked) && segs === asked ? segs : segs[0]!) as Buffer
    })
    const pl: Placement = { env, segments: placed.flat().filter((x) => x.length > 0), index: 0, filled: 0, live: choice.live }
    // bytes past the envelope that came with the header's read
    const extra = prefix.subarray(envEnd)
    const single = this.chunks.length === 1
    this.chunks = []
    this.buffered = 0
    let off = 0
    while (off < extra.length) {
      const t = this.placedTarget(pl)
      const n = Math.min(t.length, extra.length - off)
      extra.copy(t, 0, off, off + n)
      this.advance(pl, n)
      off += n
    }
    // the envelope's bytes stay (decoded values may refer to them); the copied data's go back
    if (single) this.reuseSlabTail([extra])
    this.placement = pl
    return true
  }

  private placedTarget(pl: Placement): Buffer {
    const seg = pl.segments[pl.index]!
    if (!pl.live()) {
      // the request was given up: its caller may reuse its buffers, so the rest goes nowhere
      if (!this.scratch) this.scratch = Buffer.allocUnsafeSlow(SLAB_BYTES)
      return this.scratch.subarray(0, Math.min(SLAB_BYTES, seg.length - pl.filled))
    }
    return seg.subarray(pl.filled)
  }

  /** A placed frame is being received (its next read target may have to change when its call is given up). */
  get placing(): boolean {
    return this.placement !== null
  }

  private advance(pl: Placement, n: number): void {
    pl.filled += n
    while (pl.index < pl.segments.length && pl.filled >= pl.segments[pl.index]!.length) {
      pl.filled -= pl.segments[pl.index]!.length
      pl.index++
    }
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
