// What every `strata image` command shares (image.ts and image-transfer.ts):
// the image store opened on the command's cluster, progress, and
// SIGINT/SIGTERM turned into a cancel.
import type { Command } from 'commander'
import { StrataError } from '../../fs/common/errors.js'
import { createProgress, type ProgressSink } from '../../sandbox/image/progress.js'
import { ImageStore } from '../../sandbox/image/store.js'
import { withFileSystem } from './fs.js'

/** What a `strata image` command body gets. */
export interface ImageCommandContext {
  /** the store under /strata/images, opened */
  store: ImageStore
  /** --json was given (progress is then silent) */
  json: boolean
  /** progress bars on stderr; stop() before printing the result */
  progress: ProgressSink & { stop(): void }
  /** aborted with CANCELLED by the first SIGINT or SIGTERM */
  signal: AbortSignal
}

/**
 * Runs `fn` with the store opened on the command's cluster (the group's
 * --cluster, --mgmtd-address, --meta-address and --timeout, through
 * withFileSystem), progress on stderr (none with --json) and SIGINT/SIGTERM
 * turned into a cancel: the command cleans up what it started, and an
 * interrupted push or pull leaves its partial transfer for the next run. A
 * second signal exits at once (130).
 */
export async function withImageStore<T>(cmd: Command, fn: (ctx: ImageCommandContext) => Promise<T>): Promise<T> {
  return withFileSystem(cmd, async (fsys, json) => {
    const store = new ImageStore(fsys)
    const progress = createProgress({ quiet: json })
    const ac = new AbortController()
    let signals = 0
    const onSignal = () => {
      if (++signals > 1) process.exit(130)
      ac.abort(new StrataError('CANCELLED', 'interrupted'))
    }
    process.on('SIGINT', onSignal)
    process.on('SIGTERM', onSignal)
    try {
      await store.open()
      return await fn({ store, json, progress, signal: ac.signal })
    } finally {
      process.off('SIGINT', onSignal)
      process.off('SIGTERM', onSignal)
      progress.stop()
      await store.close()
    }
  })
}

/** Seconds since `t0` (a Date.now() value), to a tenth. */
export function secondsSince(t0: number): number {
  return Math.round((Date.now() - t0) / 100) / 10
}
