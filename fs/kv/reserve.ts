// Room kept aside in the KV's directory so that space can still be freed
// through the KV when its filesystem is full.
//
// lmdb is copy-on-write: even a commit that only removes keys writes new
// copies of the pages it changes before the old ones are freed, so on a full
// disk a removal fails like a create. The reserve is an ordinary file of real
// (allocated) zeros, `strata-kv.reserve`; a commit that frees space and failed
// for want of it deletes the file and is retried once into the room it gave
// back (see LmdbEngine.commitOnReserve). Every process sharing the env may
// try: unlink(2) succeeds for one of them, the others find it gone and retry
// anyway (the room is there, or was just used by the winner's commit).
//
// The reserve is made again, by whichever process gets there first, once the
// filesystem has room for it twice over, so that recreating it never turns a
// nearly full disk into a full one. A process making it writes a temp file of
// its own (`strata-kv.reserve.PID.tmp`) and link(2)s it into place, which
// fails when another process already did: never two reserves, never a torn
// one under the real name. Temps of dead processes are swept at open.

import fs from 'node:fs'
import path from 'node:path'
import { pidAlive } from '../common/daemon.js'

const NAME = 'strata-kv.reserve'
const TEMP = /^strata-kv\.reserve\.(\d+)\.tmp$/
/** how often a process with no reserve looks whether one can be made again */
const RECHECK_MS = 1000
const CHUNK = 64 * 1024

export class SpaceReserve {
  private readonly file: string
  private lastCheck = 0
  private making: Promise<void> | undefined

  constructor(
    private readonly dir: string,
    readonly bytes: number,
    private readonly freeBytes: (dir: string) => Promise<number | null>,
  ) {
    this.file = path.join(dir, NAME)
  }

  /** Removes reserve temps left by processes that died while writing them. Never throws. */
  sweep(): void {
    let names: string[]
    try {
      names = fs.readdirSync(this.dir)
    } catch {
      return
    }
    for (const n of names) {
      const m = TEMP.exec(n)
      if (!m || Number(m[1]) === process.pid || pidAlive(Number(m[1]))) continue
      try {
        fs.rmSync(path.join(this.dir, n), { force: true })
      } catch {
        // not ours to remove (permissions): it only wastes room
      }
    }
  }

  exists(): boolean {
    return fs.existsSync(this.file)
  }

  /**
   * Gives the reserve's room back to the filesystem. True when this call
   * deleted it; false when there was none (another process sharing the env
   * released it first, or it could not be made).
   */
  release(): boolean {
    try {
      fs.unlinkSync(this.file)
      this.lastCheck = Date.now() // not again at once: the room is for the commit being retried
      return true
    } catch {
      return false
    }
  }

  /** Makes the reserve when it is missing and the filesystem has room for it twice over; at most once a second. Never throws. */
  replenish(): Promise<void> {
    if (this.bytes <= 0 || this.making || Date.now() - this.lastCheck < RECHECK_MS) return this.making ?? Promise.resolve()
    this.lastCheck = Date.now()
    this.making = this.make()
      .catch(() => undefined)
      .finally(() => {
        this.making = undefined
      })
    return this.making
  }

  private async make(): Promise<void> {
    if (this.exists()) return
    const free = await this.freeBytes(this.dir)
    if (free === null || free < 2 * this.bytes) return
    const tmp = path.join(this.dir, `${NAME}.${process.pid}.tmp`)
    try {
      const fh = await fs.promises.open(tmp, 'w')
      try {
        // real zeros, not a sparse file: its blocks must be allocated to be given back
        const zeros = Buffer.alloc(CHUNK)
        for (let at = 0; at < this.bytes; ) {
          const n = Math.min(CHUNK, this.bytes - at)
          const { bytesWritten } = await fh.write(zeros, 0, n, at)
          if (bytesWritten <= 0) return // a full disk after all: the finally drops the temp
          at += bytesWritten
        }
        await fh.sync()
      } finally {
        await fh.close()
      }
      try {
        await fs.promises.link(tmp, this.file)
      } catch {
        // another process made it first
      }
    } finally {
      await fs.promises.rm(tmp, { force: true })
    }
  }
}
