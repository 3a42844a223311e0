// sha256 of a local file, computed on a worker thread for large files, so
// that an import can hash a layer tar or an EROFS file while the main thread
// unpacks or uploads it (hash.update is synchronous: on the main thread it
// would take turns with that work instead of running beside it).
import crypto from 'node:crypto'
import fs from 'node:fs'
import { Worker } from 'node:worker_threads'
import { StrataError } from '../../../fs/common/errors.js'

/** Files smaller than this are hashed on the calling thread (a worker costs tens of milliseconds to start). */
const WORKER_MIN = 8 * 1024 * 1024

const WORKER_SRC = `
const { parentPort, workerData } = require('node:worker_threads')
const fs = require('node:fs')
const crypto = require('node:crypto')
try {
  const h = crypto.createHash('sha256')
  const buf = Buffer.allocUnsafe(1024 * 1024)
  const fd = fs.openSync(workerData, 'r')
  let size = 0
  try {
    for (;;) {
      const n = fs.readSync(fd, buf, 0, buf.length, null)
      if (n === 0) break
      h.update(buf.subarray(0, n))
      size += n
    }
  } finally {
    fs.closeSync(fd)
  }
  parentPort.postMessage({ digest: 'sha256:' + h.digest('hex'), size })
} catch (e) {
  parentPort.postMessage({ error: { message: String((e && e.message) || e), code: e && e.code } })
}
`

async function hashHere(file: string): Promise<{ digest: string; size: number }> {
  const h = crypto.createHash('sha256')
  let size = 0
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 1 << 20 }) as AsyncIterable<Buffer>) {
    h.update(chunk)
    size += chunk.length
  }
  return { digest: 'sha256:' + h.digest('hex'), size }
}

function hashOnWorker(file: string): Promise<{ digest: string; size: number }> {
  return new Promise((resolve, reject) => {
    let settled = false
    const w = new Worker(WORKER_SRC, { eval: true, workerData: file })
    w.once('message', (m: { digest: string; size: number } | { error: { message: string; code?: string } }) => {
      settled = true
      if ('error' in m) reject(Object.assign(new Error(`${file}: ${m.error.message}`), { code: m.error.code }))
      else resolve(m)
    })
    w.once('error', (e) => {
      settled = true
      reject(e)
    })
    w.once('exit', (code) => {
      if (!settled) reject(new StrataError('IO_ERROR', `hashing ${file}: worker exited with code ${code}`))
    })
  })
}

/** sha256 (`sha256:<hex>`) and size of a local file; large files are read and hashed on a worker thread. */
export async function sha256File(file: string): Promise<{ digest: string; size: number }> {
  const st = await fs.promises.stat(file)
  return st.size >= WORKER_MIN ? hashOnWorker(file) : hashHere(file)
}
