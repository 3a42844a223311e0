// What every `strata image` command shares (image.ts and image-transfer.ts):
// the image store opened on the command's cluster, progress, and
// SIGINT/SIGTERM turned into a cancel.
import type { Command } from 'commander'
import { interruptible } from '../../fs/admin/index.js'
import { createProgress, type ProgressSink } from '../../sandbox/image/progress.js'
import { ImageStore } from '../../sandbox/image/store.js'
import { exitOnInterrupt, withFileSystem } from './fs.js'
import { out, printJson } from './output.js'

/** What a `strata image` command body gets. */
export interface ImageCommandContext {
  /** the store under /strata/images, opened */
  store: ImageStore
  /** --json was given (progress is then silent) */
  json: boolean
  /** progress bars on stderr (stopped by print and printJson) */
  progress: ProgressSink & { stop(): void }
  /**
   * Prints the command's result on stdout once the progress has stopped: a
   * bar owns its terminal line until then, and text written meanwhile runs
   * into it ("… 100% 76.3 MiB donepushed app:v1 …").
   */
  print(text: string): void
  printJson(v: unknown): void
  /** aborted with CANCELLED by the first SIGINT or SIGTERM */
  signal: AbortSignal
}

/** How long an interrupted command may clean up before the process ends anyway. */
const CLEANUP_MS = 20_000

/**
 * Runs `fn` with the store opened on the command's cluster (the group's
 * --cluster, --mgmtd-address, --meta-address and --timeout, through
 * withFileSystem), progress on stderr (none with --json) and SIGINT/SIGTERM
 * turned into a cancel: the command cleans up what it started (for at most
 * 20 s), an interrupted push or pull leaves its partial transfer for the
 * next run, and the process exits 130 (SIGINT) or 143 (SIGTERM) with
 * `strata: CANCELLED: …`, as other interrupted commands do. A second signal
 * exits at once.
 */
export async function withImageStore<T>(cmd: Command, fn: (ctx: ImageCommandContext) => Promise<T>): Promise<T> {
  return exitOnInterrupt(
    interruptible(
      `image ${cmd.name()}`,
      (signal) =>
        withFileSystem(cmd, async (fsys, json) => {
          const store = new ImageStore(fsys)
          const progress = createProgress({ quiet: json, signal })
          try {
            await store.open()
            const settle = () => progress.stop()
            return await fn({
              store,
              json,
              progress,
              signal,
              print: (text) => (settle(), out(text)),
              printJson: (v) => (settle(), printJson(v)),
            })
          } finally {
            progress.stop()
            await store.close()
          }
        }),
      { cleanupMs: CLEANUP_MS },
    ),
  )
}

/** Seconds since `t0` (a Date.now() value), to a tenth. */
export function secondsSince(t0: number): number {
  return Math.round((Date.now() - t0) / 100) / 10
}
