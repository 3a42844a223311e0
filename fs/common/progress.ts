// Progress of long operations (image imports, exports and transfers; fs put and get). On a TTY
// every task is a bar of a cli-progress MultiBar; elsewhere (logs, CI, pipes)
// each task prints one line when it ends; quiet (--json) prints nothing.
import cliProgress from 'cli-progress'

/** Something that reports tasks. Tasks may run concurrently. */
export interface ProgressSink {
  /** A new task; `total` in bytes when known. */
  start(label: string, total?: number): ProgressTask
}

export interface ProgressTask {
  /** `bytes` more were done. */
  tick(bytes: number): void
  /** The task ended (successfully or not); `note` is shown next to it. Idempotent. */
  done(note?: string): void
}

/** A sink that reports nothing. */
export const NO_PROGRESS: ProgressSink = {
  start: () => ({ tick: () => undefined, done: () => undefined }),
}

/** `1536` → `1.5 KiB`. */
export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let v = n
  let u = 0
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024
    u++
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`
}

/**
 * Progress on `stream` (default stderr): a cli-progress multibar when the
 * stream is a TTY, one line per finished task otherwise, nothing when quiet.
 * Call stop() when the command ends (restores the cursor on a TTY).
 */
export function createProgress(opts: { stream?: NodeJS.WriteStream; quiet?: boolean; signal?: AbortSignal } = {}): ProgressSink & { stop(): void } {
  const stream = opts.stream ?? process.stderr
  if (opts.quiet) return { ...NO_PROGRESS, stop: () => undefined }
  const interrupted = () => opts.signal?.aborted === true
  if (!stream.isTTY) return lineProgress(stream, interrupted)
  return barProgress(stream, interrupted)
}

/**
 * A task ends with done() in a `finally` whether it finished or not; one that
 * ends without a note of its own once the command was cancelled did not
 * finish, and must not be shown as if it had (a full bar, a plain line).
 */
const INTERRUPTED = 'interrupted'

function lineProgress(stream: NodeJS.WritableStream, interrupted: () => boolean): ProgressSink & { stop(): void } {
  return {
    start(label: string) {
      const t0 = Date.now()
      let bytes = 0
      let ended = false
      return {
        tick(n: number) {
          bytes += n
        },
        done(note?: string) {
          if (ended) return
          ended = true
          if (note === undefined && interrupted()) note = INTERRUPTED
          const secs = ((Date.now() - t0) / 1000).toFixed(1)
          stream.write(`${label}: ${bytes > 0 ? `${formatBytes(bytes)} ` : ''}${secs}s${note ? ` (${note})` : ''}\n`)
        },
      }
    },
    stop: () => undefined,
  }
}

function barProgress(stream: NodeJS.WriteStream, interrupted: () => boolean): ProgressSink & { stop(): void } {
  const multi = new cliProgress.MultiBar(
    {
      stream,
      format: ' {label} |{bar}| {percentage}% {amount} {note}',
      hideCursor: true,
      clearOnComplete: false,
      stopOnComplete: false,
      barsize: 30,
      fps: 8,
      autopadding: true,
    },
    cliProgress.Presets.shades_classic,
  )
  let width = 0
  let stopped = false
  // a MultiBar that never drew a bar still writes its cursor reset and a newline on stop(): a
  // command that showed no progress (ls, tag …) would leave a blank line and escapes behind
  let drawn = false
  return {
    start(label: string, total?: number) {
      drawn = true
      width = Math.max(width, label.length)
      const known = total !== undefined && total > 0
      let value = 0
      let ended = false
      // while running: done/total; once done, the task's size alone, since a
      // task may end before its last byte (a layer found stored by its
      // diff_id part-way through is reused, not read to the end)
      const payload = () => ({
        label: label.padEnd(width),
        amount: ended ? (known ? formatBytes(total) : value > 0 ? formatBytes(value) : '') : `${formatBytes(value)}/${known ? formatBytes(total) : '?'}`,
        note: '',
      })
      const bar = multi.create(known ? total : 1, 0, payload())
      return {
        tick(n: number) {
          if (ended) return
          value += n
          bar.update(known ? Math.min(value, total) : 0, payload())
        },
        done(note?: string) {
          if (ended) return
          if (note === undefined && interrupted()) {
            // where it stopped, not a full bar
            bar.update(known ? Math.min(value, total) : 0, { ...payload(), note: INTERRUPTED })
            ended = true
            bar.stop()
            return
          }
          ended = true
          bar.update(known ? total : 1, { ...payload(), note: note ?? 'done' })
          bar.stop()
        },
      }
    },
    stop() {
      if (stopped) return
      stopped = true
      if (drawn) multi.stop()
    },
  }
}
