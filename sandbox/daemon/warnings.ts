// The archive route's Strata-Warnings trailer: the entries a directory
// download left out or zero-filled. A tree can hold any number of them
// (`GET …/archive?path=/proc` meets thousands), so the daemon keeps only what
// the trailer can carry and counts the rest, instead of holding every
// warning of the download until its end.
import type { StrataError } from '../../fs/common/errors.js'

/** The trailer's name (the header announcing it is `Trailer: Strata-Warnings`). */
export const WARNINGS_TRAILER = 'strata-warnings'
/** What the trailer holds at most (clients keep trailers with the headers, within 16 KiB). */
export const MAX_WARNINGS_TRAILER = 8 * 1024

/**
 * Collects warnings into `{"count": N, "warnings": [{code, message, path, errno}, …]}`,
 * one ASCII line (non-ASCII escaped as \uXXXX, so any file name fits a header):
 * N counts all of them, the list holds as many of the first as fit in 8 KiB.
 * Memory stays within that, however many are added.
 */
export class WarningsTrailer {
  #items: string[] = []
  #len = 0
  #full = false
  #count = 0

  add(w: StrataError): void {
    this.#count++
    if (this.#full) return
    const item = JSON.stringify({ code: w.code, message: `${w.detail?.path as string}: ${w.reason}`, path: w.detail?.path, errno: w.detail?.errno })
      .replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
    // the list is a prefix: once one does not fit, later (smaller) ones are not kept either
    if (this.#len + item.length + 1 > MAX_WARNINGS_TRAILER) {
      this.#full = true
      return
    }
    this.#items.push(item)
    this.#len += item.length + 1
  }

  /** warnings added */
  get count(): number {
    return this.#count
  }

  /** warnings the trailer lists */
  get listed(): number {
    return this.#items.length
  }

  toString(): string {
    return `{"count":${this.#count},"warnings":[${this.#items.join(',')}]}`
  }
}
