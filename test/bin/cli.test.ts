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

test('strata daemon --help documents every role with its required config keys and where the full reference is', async (t) => {
  const { strata } = await import('./helpers.js')
  for (const args of [['daemon', '--help'], ['daemon', 'fuse', '--help']]) {
    const r = await strata(args)
    t.is(r.code, 0, r.stderr)
    const required: Record<string, string[]> = {
      mgmtd: ['nodeId', 'dataDir'],
      storage: ['nodeId', 'dataDir', 'mgmtdAddresses'],
      meta: ['nodeId', 'mgmtdAddresses', 'kvPath'],
      fuse: ['mountpoint', 'mgmtdAddresses'],
      sandbox: ['nodeId', 'listen', 'mgmtdAddresses', 'fuseMnt', 'stateDir', 'tokenFile'],
    }
    // each role's paragraph runs from its name to the next role's
    const roles = Object.keys(required)
    for (const [i, role] of roles.entries()) {
      const from = r.stdout.search(new RegExp(`^  ${role} `, 'm'))
      t.true(from >= 0, `${role} described`)
      const next = i + 1 < roles.length ? r.stdout.search(new RegExp(`^  ${roles[i + 1]} `, 'm')) : r.stdout.indexOf('\n\n', from)
      const para = r.stdout.slice(from, next)
      for (const k of required[role]!) t.regex(para, new RegExp(`\\*${k}\\b`), `${role}: ${k} marked required`)
      t.regex(para, /\((fs|sandbox)\/[\w/-]+\.ts \w+Config\)/, `${role}: names its config type`)
    }
    t.regex(r.stdout, /DIR\/config\/<name>\.json/)
  }
})
