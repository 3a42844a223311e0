// `strata fs put` and `fs get` on a terminal (a real pty from script(1)): a progress bar on
// stderr while the data moves, finished before the summary line; none when stderr is not a
// terminal or with --json; a copy cut short by Ctrl-C says "interrupted", not 100%.
import test from 'ava'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { startMetaCluster } from '../helpers/meta-cluster.js'
import { interruptOnTerminal, onTerminal, plain, q, strataCmd } from '../helpers/terminal.js'
import { ok, strata, tempDir } from './helpers.js'

/** onTerminal with the escapes removed. */
async function onTerminalPlain(args: string[]): Promise<{ screen: string; code: number }> {
  const r = await onTerminal(args)
  return { ...r, screen: plain(r.screen) }
}

test.serial('fs put and get: a bar on a terminal, ended before the summary; nothing on stderr off a terminal or with --json; Ctrl-C shows interrupted', async (t) => {
  t.timeout(4 * 60_000)
  const m = await startMetaCluster(t, { chunkSize: 65536, stripeSize: 2 })
  const fsx = (...a: string[]) => ['fs', '--mgmtd-address', m.c.mgmtdAddress, ...a]
  const dir = tempDir(t, 'strata-fs-tty-')
  const src = path.join(dir, 'src.bin')
  fs.writeFileSync(src, randomBytes(3 << 20))

  // before, nothing at all was shown while the data moved
  const put = await onTerminalPlain(fsx('put', src, '/tty.bin'))
  t.is(put.code, 0, put.screen)
  t.regex(put.screen, /\/tty\.bin \|.*\| 100% 3\.0 MiB done/, put.screen)
  t.regex(put.screen, new RegExp(`\\n${src.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} -> /tty\\.bin: 3145728 bytes in `), 'the summary starts a line of its own')
  const get = await onTerminalPlain(fsx('get', '/tty.bin', path.join(dir, 'back.bin')))
  t.is(get.code, 0, get.screen)
  t.regex(get.screen, /\/tty\.bin \|.*\| 100% 3\.0 MiB done/, get.screen)
  t.regex(get.screen, /\n\/tty\.bin -> \S+back\.bin: 3145728 bytes in /)
  t.true(fs.readFileSync(path.join(dir, 'back.bin')).equals(fs.readFileSync(src)))

  // --json on a terminal: the JSON alone
  const json = await onTerminalPlain(fsx('put', '--json', src, '/tty.bin'))
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
  const cmd = `exec 3<>${q(fifo)}; ${strataCmd(fsx('put', fifo, '/int.bin'))} & echo "pid=$!"; wait $!; echo "exit=$?"`
  const text = await interruptOnTerminal(t, cmd, /\/int\.bin \|/, 'the put is reading the FIFO')
  t.regex(text, /exit=130/, text)
  t.regex(text, /\/int\.bin \|.*interrupted/, text)
  t.notRegex(text, /\/int\.bin \|.*done/, text)
  t.regex(text, /strata: CANCELLED: fs put interrupted by SIGINT/)
})
