// Local record of an unfinished multipart upload, for S3-compatible servers
// that cannot list uploads and parts (s3rver answers ListMultipartUploads
// with NotImplemented and ListParts with MethodNotAllowed). On servers that
// can, the server's own listing is used and this file is only a hint.
// One JSON file per (endpoint, bucket, key), replaced atomically (tmp + rename)
// after every acknowledged part.
import crypto from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { pidAlive } from '../../../fs/common/daemon.js'

export interface JournalPart {
  size: number
  etag: string
}

export interface UploadJournalEntry {
  version: 1
  endpoint: string
  bucket: string
  key: string
  uploadId: string
  size: number
  partSize: number
  parts: Record<string, JournalPart>
}

export class UploadJournal {
  readonly #dir: string
  // saves of one file are serialized so a slower older write never lands last
  readonly #chains = new Map<string, Promise<void>>()

  constructor(dir: string) {
    this.#dir = dir
  }

  #file(endpoint: string, bucket: string, key: string): string {
    const id = crypto.createHash('sha256').update(`${endpoint}\n${bucket}\n${key}`).digest('hex').slice(0, 32)
    return path.join(this.#dir, `${id}.json`)
  }

  async load(endpoint: string, bucket: string, key: string): Promise<UploadJournalEntry | null> {
    await this.#sweepTemps(this.#file(endpoint, bucket, key))
    try {
      const j = JSON.parse(await fs.readFile(this.#file(endpoint, bucket, key), 'utf8')) as UploadJournalEntry
      if (j.version !== 1 || j.endpoint !== endpoint || j.bucket !== bucket || j.key !== key || typeof j.uploadId !== 'string') return null
      return j
    } catch {
      return null
    }
  }

  save(entry: UploadJournalEntry): Promise<void> {
    const file = this.#file(entry.endpoint, entry.bucket, entry.key)
    const text = JSON.stringify(entry)
    const run = async () => {
      await fs.mkdir(this.#dir, { recursive: true })
      const tmp = `${file}.${process.pid}.tmp`
      await fs.writeFile(tmp, text)
      await fs.rename(tmp, file)
    }
    const next = (this.#chains.get(file) ?? Promise.resolve()).then(run, run)
    this.#chains.set(file, next)
    return next
  }

  async remove(endpoint: string, bucket: string, key: string): Promise<void> {
    const file = this.#file(endpoint, bucket, key)
    await this.#chains.get(file)?.catch(() => undefined)
    this.#chains.delete(file)
    await fs.rm(file, { force: true })
    await this.#sweepTemps(file)
  }

  // A process killed between writing its temp file and the rename leaves the
  // temp behind (the journal itself stays whole); drop those of dead processes.
  async #sweepTemps(file: string): Promise<void> {
    const base = path.basename(file)
    let names: string[]
    try {
      names = await fs.readdir(this.#dir)
    } catch {
      return
    }
    for (const name of names) {
      const m = name.startsWith(`${base}.`) ? /^\.(\d+)\.tmp$/.exec(name.slice(base.length)) : null
      if (!m || Number(m[1]) === process.pid || pidAlive(Number(m[1]))) continue
      await fs.rm(path.join(this.#dir, name), { force: true }).catch(() => undefined)
    }
  }
}

