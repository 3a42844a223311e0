// Wire protocol of the in-sandbox agent (native/agent). The C side's constants
// live in native/agent/agent.h; the two must agree byte for byte. Format and
// semantics: native/agent/README.md.
//
// Frame: u32 BE length (of type byte + payload), u8 type, payload. Request and
// reply payloads are TLV fields: u8 key, u32 BE length, value; integers are
// always 8 bytes big-endian; strings are UTF-8 without NUL bytes.
import { StrataError, type ErrorCode } from '../../../fs/common/errors.js'

export const PROTOCOL_VERSION = 1
/** Largest payload either side accepts. */
export const MAX_PAYLOAD = 1 << 20
/** Data frames the client sends are cut to this size. */
export const DATA_CHUNK = 64 * 1024
/** stdin credit an exec starts with; R_WINDOW frames add more. */
export const STDIN_WINDOW = 256 * 1024
/** Largest per-stream maxOutputBytes the agent accepts. */
export const MAX_OUTPUT_CAP = 64 * 1024 * 1024

/** client -> agent frame types */
export const F = {
  PING: 0x01,
  EXEC: 0x02,
  DATA: 0x03,
  EOF: 0x04,
  SIGNAL: 0x05,
  SHUTDOWN: 0x06,
  FREAD: 0x10,
  FWRITE: 0x11,
  FLIST: 0x12,
  FSTAT: 0x13,
  FMKDIR: 0x14,
  FREMOVE: 0x15,
  FRENAME: 0x16,
  TAR_PUT: 0x17,
  TAR_GET: 0x18,
} as const

/** agent -> client frame types */
export const R = {
  PONG: 0x81,
  STARTED: 0x82,
  STDOUT: 0x83,
  STDERR: 0x84,
  GAP: 0x85,
  EXIT: 0x86,
  WINDOW: 0x87,
  DATA: 0x88,
  ENTRY: 0x89,
  DONE: 0x8a,
  /** TAR_GET: an entry skipped or archived incomplete (fields as ERROR); the archive goes on */
  WARN: 0x8b,
  ERROR: 0x8f,
} as const

/** TLV keys */
export const K = {
  PATH: 0x01,
  PATH2: 0x02,
  MODE: 0x03,
  FLAGS: 0x04,
  UID: 0x05,
  GID: 0x06,
  USER: 0x07,
  OFFSET: 0x08,
  LENGTH: 0x09,
  ARG: 0x10,
  SHELL: 0x11,
  ENV: 0x12,
  CWD: 0x13,
  TIMEOUT_MS: 0x14,
  MAX_OUTPUT: 0x15,
  SIGNO: 0x16,
  GRACE_MS: 0x17,
  EXIT_CODE: 0x20,
  TERM_SIGNAL: 0x21,
  TIMED_OUT: 0x22,
  DURATION_MS: 0x23,
  DROPPED_OUT: 0x24,
  DROPPED_ERR: 0x25,
  PID: 0x26,
  CORE_DUMPED: 0x27,
  STREAM: 0x28,
  BYTES: 0x29,
  VERSION: 0x2a,
  TOTAL_OUT: 0x2b,
  TOTAL_ERR: 0x2c,
  ERRNO: 0x30,
  ERRNAME: 0x31,
  MESSAGE: 0x32,
  NAME: 0x40,
  TYPE: 0x41,
  SIZE: 0x42,
  MTIME_NS: 0x43,
  TARGET: 0x44,
  NLINK: 0x45,
} as const

/** K.FLAGS bits, per request */
export const FLAG = {
  EXEC_STDIN: 1,
  EXEC_CLEAR_ENV: 2,
  SIGNAL_GROUP: 1,
  FWRITE_APPEND: 1,
  FWRITE_MKDIRS: 2,
  FWRITE_EXCL: 4,
  FSTAT_NOFOLLOW: 1,
  FMKDIR_PARENTS: 1,
  FREMOVE_RECURSIVE: 1,
  FREMOVE_FORCE: 2,
  FRENAME_NOREPLACE: 1,
  TARPUT_OWNER: 1,
} as const

export type FieldValue = string | number | bigint | Uint8Array
export type Field = readonly [key: number, value: FieldValue]

/** Encodes TLV fields. Numbers must be non-negative safe integers. */
export function encodeFields(fields: readonly Field[]): Buffer {
  const parts: Buffer[] = []
  for (const [key, value] of fields) {
    let v: Buffer
    if (typeof value === 'string') {
      v = Buffer.from(value, 'utf8')
      if (v.includes(0)) throw new StrataError('INVALID_ARGUMENT', 'strings sent to the agent must not contain NUL bytes')
    } else if (typeof value === 'number' || typeof value === 'bigint') {
      if (typeof value === 'number' && (!Number.isSafeInteger(value) || value < 0)) {
        throw new RangeError(`field 0x${key.toString(16)}: ${value} is not a non-negative safe integer`)
      }
      v = Buffer.alloc(8)
      v.writeBigUInt64BE(BigInt.asUintN(64, BigInt(value)))
    } else v = Buffer.from(value.buffer, value.byteOffset, value.byteLength)
    const h = Buffer.alloc(5)
    h[0] = key
    h.writeUInt32BE(v.length, 1)
    parts.push(h, v)
  }
  return Buffer.concat(parts)
}

/** One frame: header plus payload (TLV fields, or raw bytes for data frames). */
export function encodeFrame(type: number, payload: readonly Field[] | Uint8Array = []): Buffer {
  const body = payload instanceof Uint8Array ? Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength) : encodeFields(payload)
  if (body.length > MAX_PAYLOAD) throw new StrataError('INVALID_ARGUMENT', `request of ${body.length} bytes exceeds the agent's ${MAX_PAYLOAD}-byte frame limit`)
  const h = Buffer.alloc(5)
  h.writeUInt32BE(body.length + 1, 0)
  h[4] = type
  return Buffer.concat([h, body])
}

/** Decoded TLV fields of a reply. */
export class Fields {
  readonly #map = new Map<number, Buffer[]>()

  constructor(payload: Buffer) {
    let pos = 0
    while (pos < payload.length) {
      if (payload.length - pos < 5) throw protocolError('truncated field header')
      const key = payload[pos]!
      const len = payload.readUInt32BE(pos + 1)
      if (len > payload.length - pos - 5) throw protocolError('field overruns its frame')
      const v = payload.subarray(pos + 5, pos + 5 + len)
      const list = this.#map.get(key)
      if (list) list.push(v)
      else this.#map.set(key, [v])
      pos += 5 + len
    }
  }

  has(key: number): boolean {
    return this.#map.has(key)
  }

  bigint(key: number): bigint | undefined {
    const v = this.#map.get(key)?.[0]
    if (v === undefined) return undefined
    if (v.length !== 8) throw protocolError(`field 0x${key.toString(16)} is not an 8-byte integer`)
    return v.readBigUInt64BE(0)
  }

  /** An unsigned integer field as a Number (throws past 2^53). */
  num(key: number): number | undefined {
    const b = this.bigint(key)
    if (b === undefined) return undefined
    if (b > BigInt(Number.MAX_SAFE_INTEGER)) throw protocolError(`field 0x${key.toString(16)} exceeds 2^53`)
    return Number(b)
  }

  str(key: number): string | undefined {
    return this.#map.get(key)?.[0]?.toString('utf8')
  }
}

export interface Frame {
  type: number
  payload: Buffer
}

/**
 * Incremental frame decoder: feed socket chunks, take whole frames. The
 * length is checked before anything past the header is buffered.
 */
export class FrameDecoder {
  #chunks: Buffer[] = []
  #size = 0

  push(chunk: Buffer): Frame[] {
    this.#chunks.push(chunk)
    this.#size += chunk.length
    const out: Frame[] = []
    for (;;) {
      if (this.#size < 5) break
      const head = this.#peek(5)
      const len = head.readUInt32BE(0)
      if (len < 1 || len > MAX_PAYLOAD + 1) throw protocolError(`bad frame length ${len}`)
      if (this.#size < 4 + len) break
      const all = this.#take(4 + len)
      out.push({ type: all[4]!, payload: all.subarray(5) })
    }
    return out
  }

  get buffered(): number {
    return this.#size
  }

  #peek(n: number): Buffer {
    if (this.#chunks[0]!.length >= n) return this.#chunks[0]!
    const b = Buffer.concat(this.#chunks)
    this.#chunks = [b]
    return b
  }

  #take(n: number): Buffer {
    const first = this.#chunks[0]!
    let out: Buffer
    if (first.length >= n) {
      out = first.subarray(0, n)
      if (first.length === n) this.#chunks.shift()
      else this.#chunks[0] = first.subarray(n)
    } else {
      const b = Buffer.concat(this.#chunks)
      out = b.subarray(0, n)
      this.#chunks = b.length > n ? [b.subarray(n)] : []
    }
    this.#size -= n
    return out
  }
}

export function protocolError(msg: string, cause?: unknown): StrataError {
  return new StrataError('SANDBOX_PROTOCOL_ERROR', msg, cause === undefined ? undefined : { cause })
}

/** errno name reported by the agent -> error code; anything else is SANDBOX_FS_ERROR or, for execs, SANDBOX_EXEC_FAILED. */
const ERRNO_CODES: Record<string, ErrorCode> = {
  ENOENT: 'NOT_FOUND',
  EEXIST: 'ALREADY_EXISTS',
  EINVAL: 'INVALID_ARGUMENT',
  E2BIG: 'INVALID_ARGUMENT',
  ENAMETOOLONG: 'INVALID_ARGUMENT',
  EACCES: 'SANDBOX_PERMISSION_DENIED',
  EPERM: 'SANDBOX_PERMISSION_DENIED',
  ENOTDIR: 'SANDBOX_NOT_A_DIRECTORY',
  EISDIR: 'SANDBOX_IS_A_DIRECTORY',
  ENOTEMPTY: 'SANDBOX_NOT_EMPTY',
  EROFS: 'SANDBOX_READ_ONLY',
  ENOSPC: 'NO_SPACE',
  EDQUOT: 'NO_SPACE',
  EAGAIN: 'SANDBOX_RESOURCE_EXHAUSTED',
  ENOMEM: 'SANDBOX_RESOURCE_EXHAUSTED',
  EMFILE: 'SANDBOX_RESOURCE_EXHAUSTED',
  ENFILE: 'SANDBOX_RESOURCE_EXHAUSTED',
  ESHUTDOWN: 'SANDBOX_GONE',
  EPROTO: 'SANDBOX_PROTOCOL_ERROR',
}

/**
 * Turns an R_ERROR frame into a StrataError. The agent's errno name, number
 * and the path it concerns travel in `detail` ({ errno, path }), so callers can
 * tell e.g. ENOEXEC from EIO when the code is the generic one.
 */
export function agentError(f: Fields, fallback: ErrorCode): StrataError {
  const errname = f.str(K.ERRNAME) ?? 'EUNKNOWN'
  const message = f.str(K.MESSAGE) ?? errname
  const path = f.str(K.PATH)
  const code = ERRNO_CODES[errname] ?? fallback
  const detail: Record<string, unknown> = { errno: errname }
  if (path !== undefined) detail.path = path
  return new StrataError(code, message, { detail })
}
