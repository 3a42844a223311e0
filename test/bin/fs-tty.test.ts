// `strata fs put` and `fs get` on a terminal (a real pty from script(1)): a progress bar on
// stderr while the data moves, finished before the summary line; none when stderr is not a
// terminal or with --json; a copy cut short by Ctrl-C says "interrupted", not 100%.
import test from 'ava'
import { execFile, execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { startMetaCluster } from '../helpers/meta-cluster.js'
import { until } from '../helpers/procs.js'
import { STRATA, ok, strata, tempDir } from './helpers.js'

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`
// eslint-disable-next-line no-control-regex
const plain = (s: string) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '')

/** Runs `strata ARGS` with a pty as stdin, stdout and stderr; what the pty showed (\r\n as \n, escapes removed) and the exit code. */
function onTerminal(args: string[]): Promise<{ screen: string; code: number }> {
  const cmd = `${q(process.execPath)} ${q(STRATA)} ${args.map(q).join(' ')}; echo "exit=$?"`
  return new Promise((resolve, reject) => {
    execFile('script', ['-qec', cmd, '/dev/null'], { timeout: 180_000, maxBuffer: 16 << 20 }, (err, stdout) => {
      if (err) return reject(err)
      const screen = plain(stdout.replace(/\r\n/g, '\n'))
      const m = /exit=(\d+)\s*$/.exec(screen)
      resolve({ screen: screen.replace(/exit=\d+\s*$/, ''), code: m ? Number(m[1]) : -1 })
    })
  })
}

test.serial('fs put and get: a bar on a terminal, ended before the summary; nothing on stderr off a terminal or with --json; Ctrl-C shows interrupted', async (t) => {
  t.timeout(4 * 60_000)
  const m = await startMetaCluster(t, { chunkSize: 65536, stripeSize: 2 })
  const fsx = (...a: string[]) => ['fs', '--mgmtd-address', m.c.mgmtdAddress, ...a]
  const dir = tempDir(t, 'strata-fs-tty-')
  const src = path.join(dir, 'src.bin')
  fs.writeFileSync(src, randomBytes(3 << 20))

  // before, nothing at all was shown while the data moved
  const put = await onTerminal(fsx('put', src, '/tty.bin'))
  t.is(put.code, 0, put.screen)
  t.regex(put.screen, /\/tty\.bin \|.*\| 100% 3\.0 MiB done/, put.screen)
  t.regex(put.screen, new RegExp(`\\n${src.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} -> /tty\\.bin: 3145728 bytes in `), 'the summary starts a line of its own')
  const get = await onTerminal(fsx('get', '/tty.bin', path.join(dir, 'back.bin')))
  t.is(get.code, 0, get.screen)
  t.regex(get.screen, /\/tty\.bin \|.*\| 100% 3\.0 MiB done/, get.screen)
  t.regex(get.screen, /\n\/tty\.bin -> \S+back\.bin: 3145728 bytes in /)
  t.true(fs.readFileSync(path.join(dir, 'back.bin')).equals(fs.readFileSync(src)))

  // --json on a terminal: the JSON alone
  const json = await onTerminal(fsx('put', '--json', src, '/tty.bin'))
  t.is(json.code, 0, json.screen)
  t.notRegex(json.screen, /100%|\|/, json.screen)
  t.is(JSON.parse(json.screen).bytes, 3145728)
  // stderr not a terminal: the summary line and nothing else
  const piped = await strata(fsx('put', src, '/tty2.bin'))
  t.is(piped.code, 0, piped.stderr)
  t.is(piped.stderr, '')
  t.regex(piped.stdout, /^\S+src\.bin -> \/tty2\.bin: 3145728 bytes in \S+ s\n$/)
  await ok(t, fsx('rm', '/tty2.bin'))

  // a put from a FIFO nobody writes to, interrupted: the bar stops where it was and says so
  const fifo = path.join(dir, 'in')
  execFileSync('mkfifo', [fifo])
  const cmd = `exec 3<>${q(fifo)}; ${q(process.execPath)} ${q(STRATA)} ${fsx('put', fifo, '/int.bin').map(q).join(' ')} & echo "pid=$!"; wait $!; echo "exit=$?"`
  const child = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
  })
  let screen = ''
  child.stdout.on('data', (d: Buffer) => (screen += d.toString()))
  const closed = new Promise<void>((r) => child.once('close', () => r()))
  await until(() => /pid=\d+/.test(screen) && /\/int\.bin \|/.test(plain(screen)), 60_000, 'the put is reading the FIFO')
  process.kill(Number(/pid=(\d+)/.exec(screen)![1]), 'SIGINT')
  await closed
  const text = plain(screen.replace(/\r\n/g, '\n'))
  t.regex(text, /exit=130/, text)
  t.regex(text, /\/int\.bin \|.*interrupted/, text)
  t.notRegex(text, /\/int\.bin \|.*done/, text)
  t.regex(text, /strata: CANCELLED: fs put interrupted by SIGINT/)
})
