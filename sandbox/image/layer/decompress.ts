// Layer blob decompression: gzip (node zlib), zstd (the `zstd` binary; Node 20
// has no zstd) or none. The compression is taken from the first bytes; the
// media type only decides when the bytes say nothing and rules out types we do
// not take (bzip2, xz, foreign formats).
import { spawn } from 'node:child_process'
import { Readable, type Writable } from 'node:stream'
import zlib from 'node:zlib'
import { StrataError } from '../../../fs/common/errors.js'

export type Compression = 'gzip' | 'zstd' | 'none'

const LAYER_MEDIA_TYPES: Record<string, Compression> = {
  'application/vnd.oci.image.layer.v1.tar': 'none',
  'application/vnd.oci.image.layer.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.v1.tar+zstd': 'zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar': 'none',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd': 'zstd',
  'application/vnd.docker.image.rootfs.diff.tar': 'none',
  'application/vnd.docker.image.rootfs.diff.tar.gzip': 'gzip',
  'application/vnd.docker.image.rootfs.diff.tar.zstd': 'zstd',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip': 'gzip',
  'application/x-tar': 'none',
}

/** The compression a layer media type declares; IMAGE_UNSUPPORTED_MEDIA_TYPE for any other type. */
export function compressionOfMediaType(mediaType: string): Compression {
  const c = LAYER_MEDIA_TYPES[mediaType]
  if (c === undefined) throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `layer media type ${JSON.stringify(mediaType)} is not supported`)
  return c
}

/**
 * What the first bytes say: gzip, zstd (frame or skippable frame), none (a
 * ustar header or an all-zero block), or null when they match nothing.
 * Throws IMAGE_UNSUPPORTED_MEDIA_TYPE for bzip2 and xz.
 */
export function sniffCompression(head: Uint8Array): Compression | null {
  const b = Buffer.from(head.buffer, head.byteOffset, head.byteLength)
  if (b.length >= 2 && b[0] === 0x1f && b[1] === 0x8b) return 'gzip'
  if (b.length >= 4 && b.readUInt32LE(0) === 0xfd2fb528) return 'zstd'
  if (b.length >= 4 && (b.readUInt32LE(0) & 0xfffffff0) === 0x184d2a50) return 'zstd'
  if (b.length >= 3 && b.toString('latin1', 0, 3) === 'BZh') {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', 'bzip2-compressed layers are not supported')
  }
  if (b.length >= 6 && b.subarray(0, 6).equals(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00]))) {
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', 'xz-compressed layers are not supported')
  }
  if (b.length >= 262 && b.toString('latin1', 257, 262) === 'ustar') return 'none'
  if (b.length >= 512 && b.subarray(0, 512).every((x) => x === 0)) return 'none'
  return null
}

const SNIFF_BYTES = 512

/**
 * Returns the uncompressed tar stream of a layer blob. `mediaType` is the
 * descriptor's media type when there is one; without it the bytes must be
 * recognisable. Decompression errors surface on the returned stream as
 * IMAGE_BAD_ARCHIVE; errors of `input` pass through unchanged. Destroying the
 * returned stream destroys `input` (and stops a zstd process).
 */
export async function decompressStream(input: Readable, mediaType?: string): Promise<Readable> {
  const declared = mediaType === undefined || mediaType === '' ? undefined : compressionOfMediaType(mediaType)
  const it = (input as AsyncIterable<Buffer>)[Symbol.asyncIterator]()
  const headChunks: Buffer[] = []
  let have = 0
  let ended = false
  try {
    while (have < SNIFF_BYTES) {
      const r = await it.next()
      if (r.done) {
        ended = true
        break
      }
      const c = typeof r.value === 'string' ? Buffer.from(r.value) : r.value
      headChunks.push(c)
      have += c.length
    }
  } catch (e) {
    throw e instanceof StrataError ? e : new StrataError('IO_ERROR', `reading layer: ${(e as Error).message}`, { cause: e })
  }
  const head = Buffer.concat(headChunks)
  let kind: Compression | null
  try {
    kind = sniffCompression(head) ?? declared ?? null
  } catch (e) {
    await it.return?.()
    throw e
  }
  if (kind === null) {
    await it.return?.()
    throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', 'layer is neither a tar nor gzip- or zstd-compressed')
  }
  const sourceErrors = new WeakSet<object>()
  async function* source(): AsyncGenerator<Buffer> {
    try {
      if (head.length) yield head
      if (ended) return
      for (;;) {
        const r = await it.next()
        if (r.done) return
        yield typeof r.value === 'string' ? Buffer.from(r.value) : r.value
      }
    } catch (e) {
      if (e && typeof e === 'object') sourceErrors.add(e)
      throw e
    } finally {
      await it.return?.()
    }
  }
  const wrap = (e: unknown, what: string): unknown =>
    e instanceof StrataError || (e && typeof e === 'object' && sourceErrors.has(e))
      ? e
      : new StrataError('IMAGE_BAD_ARCHIVE', `${what}: ${(e as Error)?.message ?? String(e)}`, { cause: e })
  if (kind === 'none') return Readable.from(source(), { objectMode: false })
  const stop = (): void => {
    if (!input.destroyed) input.destroy()
  }
  if (kind === 'gzip') return Readable.from(gunzip(source(), wrap, stop), { objectMode: false })
  return Readable.from(unzstd(source(), wrap, stop), { objectMode: false })
}

type Wrap = (e: unknown, what: string) => unknown

/** Waits until `w` wants more data or is finished one way or another (its errors surface elsewhere). */
function writable(w: Writable): Promise<void> {
  if (w.destroyed) return Promise.resolve()
  return new Promise((resolve) => {
    const done = (): void => {
      w.off('drain', done)
      w.off('close', done)
      w.off('error', done)
      resolve()
    }
    w.on('drain', done)
    w.on('close', done)
    w.on('error', done)
  })
}

async function* gunzip(src: AsyncGenerator<Buffer>, wrap: Wrap, stop: () => void): AsyncGenerator<Buffer> {
  const z = zlib.createGunzip()
  const feeding = (async () => {
    try {
      for await (const c of src) {
        if (z.destroyed) return
        if (!z.write(c)) await writable(z)
      }
      if (!z.destroyed) z.end()
    } catch (e) {
      z.destroy(e as Error)
    }
  })()
  let ok = false
  try {
    for await (const c of z as AsyncIterable<Buffer>) yield c
    ok = true
  } catch (e) {
    throw wrap(e, 'gzip')
  } finally {
    if (!ok) {
      z.destroy()
      stop()
    }
    await feeding
  }
}

async function* unzstd(src: AsyncGenerator<Buffer>, wrap: Wrap, stop: () => void): AsyncGenerator<Buffer> {
  const child = spawn('zstd', ['-d', '-c', '-q'], { stdio: ['pipe', 'pipe', 'pipe'] })
  const exited = new Promise<{ code: number | null; signal: string | null; error?: Error }>((resolve) => {
    child.once('error', (error) => resolve({ code: null, signal: null, error }))
    child.once('close', (code, signal) => resolve({ code, signal }))
  })
  let stderr = ''
  child.stderr.on('data', (d: Buffer) => {
    if (stderr.length < 4096) stderr += d.toString()
  })
  child.stdin.on('error', () => {}) // EPIPE when zstd stops early; its exit status tells why
  let sourceError: unknown = null
  const feeding = (async () => {
    try {
      for await (const c of src) {
        if (child.stdin.destroyed) return
        if (!child.stdin.write(c)) await writable(child.stdin)
      }
      child.stdin.end()
    } catch (e) {
      sourceError = e
      child.stdin.destroy()
      child.kill('SIGKILL')
    }
  })()
  let ok = false
  try {
    for await (const c of child.stdout as AsyncIterable<Buffer>) yield c
    await feeding
    if (sourceError !== null) throw sourceError
    const r = await exited
    if (r.error) throw new StrataError('NOT_IMPLEMENTED', `zstd could not be started: ${r.error.message}`, { cause: r.error })
    if (r.code !== 0) throw new StrataError('IMAGE_BAD_ARCHIVE', `zstd: ${stderr.trim() || `exit ${r.code ?? r.signal}`}`)
    ok = true
  } catch (e) {
    throw wrap(e, 'zstd')
  } finally {
    if (!ok) {
      child.kill('SIGKILL')
      child.stdin.destroy()
      stop()
    }
    await feeding
    await exited
  }
}
