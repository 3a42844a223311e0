// `strata image` on a terminal (a real pty from script(1)): progress bars on
// stderr and the command's result on stdout share the screen, so the bars
// must be finished before the result is printed, and a command that showed
// no bar must leave nothing of the bar machinery behind; a bar cut short by
// Ctrl-C says so.
import test from 'ava'
import { execFileSync } from 'node:child_process'
import path from 'node:path'
import { startImageCluster, localTmp, type ImageCluster } from '../../helpers/image-cluster.js'
import { startS3 } from '../../helpers/s3rver.js'
import { interruptOnTerminal, onTerminal, plain, q, strataCmd } from '../../helpers/terminal.js'
import { publishFixture } from './s3/fixture.js'

let A: ImageCluster

test.before(async () => {
  A = await startImageCluster()
})
test.after.always(async () => {
  await A?.close()
})

test.serial('push and pull on a terminal: the result starts a line of its own, after the finished bars', async (t) => {
  const s3 = await startS3(t)
  const store = await A.store()
  const f = await publishFixture(t, store, 'tty/app', 'v1', 256 * 1024)
  const env = { ...s3.env, HOME: localTmp(t, 'strata-tty-home-') }
  const common = ['image', ...A.cliArgs]

  const push = await onTerminal([...common, 'push', '--force-path-style', 'tty/app:v1', `s3://${s3.bucket}/tty`], { env })
  t.is(push.code, 0, push.screen)
  t.regex(plain(push.screen), /push [0-9a-f]{12} .*100%/, 'a bar was drawn')
  // the bars' last line ends before the summary (it used to be "… 100% 256.0 KiB donepushed tty/app:v1 …")
  t.regex(plain(push.screen), new RegExp(`\\npushed tty/app:v1 \\(${f.digest}\\)`), push.screen)

  const pull = await onTerminal([...common, 'pull', '--force-path-style', `s3://${s3.bucket}/tty/tty/app:v1`, '--name', 'tty/copy:v1'], { env })
  t.is(pull.code, 0, pull.screen)
  t.regex(plain(pull.screen), /pull [0-9a-f]{12} .*100%/)
  t.regex(plain(pull.screen), /\npulled s3:\/\/\S+ as tty\/copy:v1 /, pull.screen)
})

test.serial('a command that shows no progress writes nothing to a terminal stderr (no blank line, no cursor escapes)', async (t) => {
  const store = await A.store()
  await publishFixture(t, store, 'tty/quiet', 'v1', 64 * 1024)
  for (const args of [['ls'], ['inspect', 'tty/quiet:v1'], ['tag', 'tty/quiet:v1', 'tty/quiet:v2'], ['gc', '--dry-run']]) {
    // stdout to /dev/null: what is left on the screen is stderr's
    const r = await onTerminal(['image', ...A.cliArgs, ...args], { redirect: '>/dev/null' })
    t.is(r.code, 0, `${args.join(' ')}: ${r.screen}`)
    t.is(r.screen, '', `image ${args.join(' ')} wrote ${JSON.stringify(r.screen)} to stderr`)
  }
})

test.serial('Ctrl-C on a terminal: a task cut short shows "interrupted" where it stopped, not a full bar marked done', async (t) => {
  const dir = localTmp(t, 'strata-tty-int-')
  const fifo = path.join(dir, 'in')
  execFileSync('mkfifo', [fifo])
  // stdin: a FIFO the shell holds open for writing and never writes to, so the read of standard input is in progress
  const cmd = `exec 3<>${q(fifo)}; ${strataCmd(['image', ...A.cliArgs, 'import', '-', '--name', 'tty/int'])} <&3 & echo "pid=$!"; wait $!; echo "exit=$?"`
  const text = await interruptOnTerminal(t, cmd, /read standard input/, 'the import is reading standard input')
  t.regex(text, /exit=130/, text)
  t.regex(text, /read standard input .*interrupted/, text)
  t.notRegex(text, /read standard input .*100%/, text)
})
