// Running the CLI on a pseudo-terminal (util-linux `script`), for the tests of
// what commands draw on a TTY: progress bars, and how Ctrl-C leaves them.
import type { ExecutionContext } from 'ava'
import { execFile, spawn } from 'node:child_process'
import { STRATA } from '../bin/helpers.js'
import { until } from './procs.js'

/** `s` quoted for sh. */
export const q = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`

/** A screen without its escape sequences (cursor moves, colours). */
// eslint-disable-next-line no-control-regex
export const plain = (s: string): string => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')

/** `strata ARGS` as a shell command. */
export function strataCmd(args: string[]): string {
  return `${q(process.execPath)} ${q(STRATA)} ${args.map(q).join(' ')}`
}

/**
 * Runs `strata ARGS` (plus `redirect`, shell syntax) with a pty as stdin,
 * stdout and stderr: what the pty showed (\r\n as \n) and the exit code.
 */
export function onTerminal(args: string[], opts: { env?: NodeJS.ProcessEnv; redirect?: string } = {}): Promise<{ screen: string; code: number }> {
  const cmd = `${strataCmd(args)} ${opts.redirect ?? ''}; echo "exit=$?"`
  return new Promise((resolve, reject) => {
    execFile('script', ['-qec', cmd, '/dev/null'], { env: { ...process.env, ...opts.env }, timeout: 180_000, maxBuffer: 16 << 20 }, (err, stdout) => {
      if (err) return reject(err)
      const screen = stdout.replace(/\r\n/g, '\n')
      const m = /exit=(\d+)\s*$/.exec(screen)
      resolve({ screen: screen.replace(/exit=\d+\s*$/, ''), code: m ? Number(m[1]) : -1 })
    })
  })
}

/**
 * Runs shell `cmd` (which starts strata in the background as `… & echo
 * "pid=$!"; wait $!; echo "exit=$?"`) on a pty, waits until its plain screen
 * matches `busy`, sends strata SIGINT and returns the whole plain screen once
 * the shell has ended.
 */
export async function interruptOnTerminal(t: ExecutionContext, cmd: string, busy: RegExp, what: string): Promise<string> {
  const child = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  let screen = ''
  child.stdout.on('data', (d: Buffer) => (screen += d.toString()))
  const closed = new Promise<void>((r) => child.once('close', () => r()))
  await until(() => /pid=\d+/.test(screen) && busy.test(plain(screen)), 60_000, what)
  process.kill(Number(/pid=(\d+)/.exec(screen)![1]), 'SIGINT')
  await closed
  return plain(screen.replace(/\r\n/g, '\n'))
}

// (python3's pty module: a pty whose input the test writes, which script(1) does not give)
const ANSWER_PY = `
import json, os, pty, sys
argv, prompt, answer = json.loads(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
out, sent = b'', False
while True:
    try:
        d = os.read(fd, 4096)
    except OSError:
        break
    if not d:
        break
    out += d
    if not sent and prompt in out:
        os.write(fd, answer)
        sent = True
_, st = os.waitpid(pid, 0)
sys.stdout.write(json.dumps({'screen': out.decode('utf8', 'replace'), 'code': os.waitstatus_to_exitcode(st)}))
`

/**
 * Runs `strata ARGS` on a pty (stdin, stdout and stderr) and types `answer`
 * once `prompt` shows: what the pty showed (\r\n as \n; echo included, so a
 * typed answer that was echoed is on the screen) and the exit code (128 + N
 * for signal N).
 */
export function answerOnTerminal(args: string[], prompt: string, answer: string, opts: { env?: NodeJS.ProcessEnv } = {}): Promise<{ screen: string; code: number }> {
  return new Promise((resolve, reject) => {
    const argv = JSON.stringify([process.execPath, STRATA, ...args])
    execFile('python3', ['-c', ANSWER_PY, argv, prompt, answer], { env: { ...process.env, ...opts.env }, timeout: 180_000, maxBuffer: 16 << 20 }, (err, stdout) => {
      if (err) return reject(err)
      const r = JSON.parse(stdout) as { screen: string; code: number }
      resolve({ screen: r.screen.replace(/\r\n/g, '\n'), code: r.code < 0 ? 128 - r.code : r.code })
    })
  })
}
