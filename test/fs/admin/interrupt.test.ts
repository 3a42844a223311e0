// interruptible(): whatever an interrupted command ends with is reported as
// CANCELLED with the signal (exit 128+n), and nothing else is rewritten.
// (SIGINT only: emitting SIGTERM in an AVA worker ends the worker.)
import test from 'ava'
import { interruptible, interruptExitCode } from '../../../fs/admin/interrupt.js'
import { StrataError, isStrataError } from '../../../fs/common/errors.js'

/** Runs `interruptible` with `fail` thrown once `sig` (emitted to this process's handlers) aborts the signal. */
async function interruptedWith(sig: 'SIGINT', fail: (signal: AbortSignal) => unknown): Promise<unknown> {
  return interruptible('test cmd', (signal) => {
    const p = new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(fail(signal)), { once: true }))
    setImmediate(() => process.emit(sig))
    return p
  }).then(
    () => null,
    (e: unknown) => e,
  )
}

test.serial("a pipeline's bare AbortError becomes CANCELLED with the signal", async (t) => {
  const e = await interruptedWith('SIGINT', () => new DOMException('The operation was aborted', 'AbortError'))
  t.true(isStrataError(e, 'CANCELLED'))
  t.is((e as StrataError).message, 'CANCELLED: test cmd interrupted by SIGINT')
  t.is(interruptExitCode(e), 130)
  t.is(((e as StrataError).cause as Error).name, 'AbortError')
})

test.serial("a command's own CANCELLED keeps its message and gets the signal", async (t) => {
  const e = await interruptedWith('SIGINT', () => new StrataError('CANCELLED', 'push a:1 to s3://b/p: cancelled; run the command again to resume'))
  t.is((e as StrataError).message, 'CANCELLED: push a:1 to s3://b/p: cancelled; run the command again to resume')
  t.is(interruptExitCode(e), 130)
})

test.serial('the abort reason itself passes through unchanged', async (t) => {
  let reason: unknown
  const e = await interruptedWith('SIGINT', (signal) => (reason = signal.reason))
  t.is(e, reason)
  t.is(interruptExitCode(e), 130)
})

test.serial('an error without an interruption is not rewritten', async (t) => {
  const boom = new StrataError('IMAGE_REMOTE_ERROR', 'no')
  const e = await interruptible('test cmd', async () => {
    throw boom
  }).catch((x: unknown) => x)
  t.is(e, boom)
})
