// The CLI entry point: behaviour every command shares.
import test from 'ava'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const OUTPUT = fileURLToPath(new URL('../../bin/commands/output.js', import.meta.url))

test('a reader that closes stdout early ends the command quietly, as SIGPIPE would (exit 141)', async (t) => {
  // A command that keeps writing (as `fs get - | head` does) after its reader is gone; bin/cli.ts installs the same handler.
  const script = `import(${JSON.stringify(OUTPUT)}).then((m) => {
    m.exitQuietlyOnClosedPipes()
    const chunk = 'x'.repeat(65536) + '\\n'
    setInterval(() => m.out(chunk), 1)
  })`
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.destroy()
  let stderr = ''
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
  const code = await new Promise<number | null>((resolve) => child.on('close', (c) => resolve(c)))
  t.is(code, 141, stderr)
  t.is(stderr, '', 'no error or stack trace is printed')
})
