// Streaming OCI layer tar reader on tar-stream: yields one normalized header
// and a body per entry, wraps parse errors as IMAGE_BAD_ARCHIVE (with cause),
// and insists on the end-of-archive block so a stream cut at an entry
// boundary counts as truncated.
//
// tar-stream decodes PAX values as UTF-8 strings, which corrupts binary
// xattr values (security.capability, ACLs). `paxRawShim` wraps its PAX
// decoder so every decoded record set also carries the raw bytes of its
// SCHILY.xattr.* values under a symbol key; the strings other users see are
// unchanged. Pinned to tar-stream 3.2.2 (headers.js exports decodePax).
import { createRequire } from 'node:module'
import path from 'node:path'
import type { Readable } from 'node:stream'
import tarStream from 'tar-stream'
import { StrataError, toStrataError } from '../../../fs/common/errors.js'
import type { Timespec } from './types.js'

export type TarEntryType = 'file' | 'link' | 'symlink' | 'character-device' | 'block-device' | 'directory' | 'fifo'

export interface TarEntryHeader {
  /** Name as stored (after PAX path / GNU long name), not yet normalized. */
  name: string
  type: TarEntryType
  /** Permission bits including setuid, setgid and sticky (07777). */
  mode: number
  uid: number
  gid: number
  size: number
  mtime: Timespec
  /** Symlink target or hard link target name; '' for other types. */
  linkname: string
  devmajor: number
  devminor: number
  /** SCHILY.xattr.* records, raw values. */
  xattrs: Map<string, Buffer>
}

export interface TarEntry {
  header: TarEntryHeader
  /** The entry's data; read it to the end before asking for the next entry (it is drained otherwise). */
  body: AsyncIterable<Buffer>
}

type TarStreamEntry = AsyncIterable<Buffer> & { header: unknown }

const RAW = Symbol.for('strata.tar-stream.paxRaw')
const XATTR_KEY = 'SCHILY.xattr.'

function rawXattrRecords(buf: Buffer): Map<string, Buffer> | null {
  // Same record walk as tar-stream's decodePax, keeping the value bytes.
  let m: Map<string, Buffer> | null = null
  while (buf.length) {
    let i = 0
    while (i < buf.length && buf[i] !== 32) i++
    const len = parseInt(buf.subarray(0, i).toString(), 10)
    if (!len) break
    const rec = buf.subarray(i + 1, len - 1)
    const eq = rec.indexOf(61)
    if (eq === -1) break
    const key = rec.subarray(0, eq).toString()
    if (key.startsWith(XATTR_KEY)) (m ??= new Map()).set(key, Buffer.from(rec.subarray(eq + 1)))
    buf = buf.subarray(len)
  }
  return m
}

let shimmed = false
function paxRawShim(): void {
  if (shimmed) return
  shimmed = true
  const req = createRequire(import.meta.url)
  const headers = req(path.join(path.dirname(req.resolve('tar-stream')), 'headers.js')) as {
    decodePax: ((buf: Buffer) => Record<string | symbol, unknown>) & { [RAW]?: true }
  }
  const orig = headers.decodePax
  if (typeof orig !== 'function' || orig[RAW]) return
  const wrapped = Object.assign((buf: Buffer) => {
    const r = orig(buf)
    const raw = rawXattrRecords(buf)
    if (raw && r && typeof r === 'object') r[RAW] = raw
    return r
  }, { [RAW]: true as const })
  headers.decodePax = wrapped
}

function bad(msg: string, cause?: unknown): StrataError {
  return new StrataError('IMAGE_BAD_ARCHIVE', msg, cause === undefined ? undefined : { cause })
}

const MAX_ID = 0xfffffffe

function parseId(v: unknown, fallback: number, what: string, name: string): number {
  if (v === undefined) {
    if (!Number.isSafeInteger(fallback) || fallback < 0 || fallback > MAX_ID) throw bad(`${name}: invalid ${what} ${fallback}`)
    return fallback
  }
  const s = String(v)
  if (!/^[0-9]{1,10}$/.test(s) || Number(s) > MAX_ID) throw bad(`${name}: invalid PAX ${what} ${JSON.stringify(s)}`)
  return Number(s)
}

function parsePaxTime(s: string, name: string): Timespec {
  const m = /^(-?)([0-9]{1,15})(?:\.([0-9]*))?$/.exec(s)
  if (!m) throw bad(`${name}: invalid PAX mtime ${JSON.stringify(s)}`)
  const sec = Number(m[2])
  const nsec = Number(((m[3] ?? '') + '000000000').slice(0, 9))
  if (m[1] === '-') return nsec === 0 ? { sec: -sec, nsec: 0 } : { sec: -sec - 1, nsec: 1e9 - nsec }
  return { sec, nsec }
}

interface RawHeader {
  name: string
  type: string | null
  mode: number
  uid: number
  gid: number
  size: number
  mtime: Date
  linkname: string | null
  devmajor: number
  devminor: number
  byteOffset: number
  pax: (Record<string, string> & { [RAW]?: Map<string, Buffer> }) | null
}

function convertHeader(h: RawHeader): TarEntryHeader {
  const name = h.name
  let type: TarEntryType
  switch (h.type) {
    case 'file':
    case 'contiguous-file':
      type = 'file'
      break
    case 'link':
    case 'symlink':
    case 'character-device':
    case 'block-device':
    case 'directory':
    case 'fifo':
      type = h.type
      break
    default:
      throw bad(`${JSON.stringify(name)}: unsupported tar entry type ${JSON.stringify(h.type)} (sparse and volume entries are not supported)`)
  }
  const pax = h.pax ?? {}
  for (const k of Object.keys(pax)) {
    if (k.startsWith('GNU.sparse.')) throw bad(`${JSON.stringify(name)}: sparse files are not supported`)
  }
  if (!Number.isSafeInteger(h.size) || h.size < 0) throw bad(`${JSON.stringify(name)}: invalid size ${h.size}`)
  if (!Number.isInteger(h.mode)) throw bad(`${JSON.stringify(name)}: invalid mode`)
  let mtime: Timespec
  if (pax.mtime !== undefined) mtime = parsePaxTime(pax.mtime, name)
  else {
    const ms = h.mtime.getTime()
    if (!Number.isFinite(ms)) throw bad(`${JSON.stringify(name)}: invalid mtime`)
    mtime = { sec: Math.floor(ms / 1000), nsec: 0 }
  }
  // Times before 1970 are stored as 1970: EROFS keeps unsigned seconds.
  if (mtime.sec < 0) mtime = { sec: 0, nsec: 0 }
  const xattrs = new Map<string, Buffer>()
  const raw = pax[RAW]
  for (const k of Object.keys(pax).sort()) {
    if (!k.startsWith(XATTR_KEY)) continue
    const xname = k.slice(XATTR_KEY.length)
    if (xname === '') throw bad(`${JSON.stringify(name)}: empty xattr name`)
    xattrs.set(xname, raw?.get(k) ?? Buffer.from(pax[k]!, 'utf8'))
  }
  const linkname = h.linkname ?? ''
  if ((type === 'link' || type === 'symlink') && linkname === '') throw bad(`${JSON.stringify(name)}: ${type} without a target`)
  return {
    name,
    type,
    mode: h.mode & 0o7777,
    uid: parseId(pax.uid, h.uid, 'uid', name),
    gid: parseId(pax.gid, h.gid, 'gid', name),
    size: h.size,
    mtime,
    linkname: type === 'link' || type === 'symlink' ? linkname : '',
    devmajor: h.devmajor || 0,
    devminor: h.devminor || 0,
    xattrs,
  }
}

/**
 * Reads an uncompressed tar stream entry by entry. The input is consumed; it is
 * destroyed when reading stops early or fails. Errors: IMAGE_BAD_ARCHIVE for
 * malformed, oversized (PAX/long-name records over 4 MiB) or truncated input;
 * an error of the input stream itself is passed on (as a StrataError).
 */
export async function* readTar(input: Readable): AsyncGenerator<TarEntry, void, undefined> {
  paxRawShim()
  const extract = tarStream.extract()
  let total = 0
  let inputError: unknown = null
  let inputDone = false
  const gone = (): boolean => extract.destroying || extract.destroyed
  const feeding = (async () => {
    try {
      for await (const chunk of input as AsyncIterable<Buffer | string>) {
        const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
        total += buf.length
        if (!extract.write(buf) && !gone()) {
          await new Promise<void>((resolve) => {
            const done = (): void => {
              extract.off('drain', done)
              extract.off('close', done)
              extract.off('error', done)
              resolve()
            }
            extract.on('drain', done)
            extract.on('close', done)
            extract.on('error', done)
          })
        }
        if (gone()) return
      }
      inputDone = true
      extract.end(undefined)
    } catch (e) {
      inputError = e
      extract.destroy(e as Error)
    }
  })()
  const it = (extract as AsyncIterable<TarStreamEntry>)[Symbol.asyncIterator]()
  let endOfData = 0
  let finished = false
  const mapError = (e: unknown): StrataError => {
    if (inputError !== null) return toStrataError(inputError, 'IO_ERROR')
    if (e instanceof StrataError) return e
    return bad(`tar: ${(e as Error)?.message ?? String(e)}`, e)
  }
  try {
    for (;;) {
      let r: IteratorResult<TarStreamEntry>
      try {
        r = await it.next()
      } catch (e) {
        throw mapError(e)
      }
      if (r.done) break
      const entry = r.value
      const raw = entry.header as unknown as RawHeader
      const header = convertHeader(raw)
      // tar-stream reads no data for directory entries, whatever their size field says.
      endOfData = raw.byteOffset + (header.type === 'directory' ? 0 : Math.ceil(header.size / 512) * 512)
      let consumed = false
      const body: AsyncIterable<Buffer> = {
        [Symbol.asyncIterator]: () => {
          consumed = true
          const inner = entry[Symbol.asyncIterator]()
          return {
            next: async () => {
              try {
                return await inner.next()
              } catch (e) {
                throw mapError(e)
              }
            },
          }
        },
      }
      yield { header, body }
      if (!consumed) {
        try {
          for await (const _ of entry) void _
        } catch (e) {
          throw mapError(e)
        }
      }
    }
    await feeding
    if (inputError !== null) throw mapError(inputError)
    if (!inputDone || total < endOfData + 512) {
      throw bad(`tar: truncated (${total} bytes, no end-of-archive block after the last entry)`)
    }
    finished = true
  } finally {
    if (!finished) {
      extract.destroy()
      if (!input.destroyed) input.destroy()
      await feeding
    }
  }
}
