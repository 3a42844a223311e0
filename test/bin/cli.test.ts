// The CLI entry point: behaviour every command shares.
import test from 'ava'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
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

// A module hook for the child: records every module URL the CLI loads into $STRATA_TEST_LOADED,
// and fails the one whose URL ends with $STRATA_TEST_BREAK as a half-built dist/ would.
const HOOKS = `
import fs from 'node:fs'
export async function load(url, context, next) {
  if (process.env.STRATA_TEST_LOADED) fs.appendFileSync(process.env.STRATA_TEST_LOADED, url + '\\n')
  if (process.env.STRATA_TEST_BREAK && url.endsWith(process.env.STRATA_TEST_BREAK)) {
    return { format: 'module', source: 'const userOf = 1\\nconst userOf = 2\\n', shortCircuit: true }
  }
  return next(url, context)
}`

async function withHooks(t: import('ava').ExecutionContext, args: string[], env: Record<string, string>) {
  const fs = await import('node:fs')
  const os = await import('node:os')
  const path = await import('node:path')
  const { strata } = await import('./helpers.js')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-cli-hooks-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.writeFileSync(path.join(dir, 'hooks.mjs'), HOOKS)
  fs.writeFileSync(path.join(dir, 'register.mjs'), `import { register } from 'node:module'\nregister(${JSON.stringify(new URL(`file://${path.join(dir, 'hooks.mjs')}`).href)})\n`)
  const loaded = path.join(dir, 'loaded.txt')
  fs.writeFileSync(loaded, '')
  const r = await strata(args, { env: { ...process.env, ...env, STRATA_TEST_LOADED: loaded, NODE_OPTIONS: `--import ${path.join(dir, 'register.mjs')}` } })
  return { ...r, loaded: fs.readFileSync(loaded, 'utf8').split('\n').filter(Boolean) }
}

test('a command loads only its own group: strata fs loads no sandbox, image or cluster module', async (t) => {
  const r = await withHooks(t, ['fs', '--help'], {})
  t.is(r.code, 0, r.stderr)
  t.true(r.loaded.some((u) => u.endsWith('/dist/bin/commands/fs.js')), 'the fs group was loaded')
  for (const bad of ['/dist/sandbox/daemon/', '/dist/bin/commands/sandbox.js', '/dist/bin/commands/image.js', '/dist/bin/commands/cluster.js']) {
    t.deepEqual(r.loaded.filter((u) => u.includes(bad)), [], bad)
  }
  // with no group named, all of them are there for the listing
  const all = await withHooks(t, ['--help'], {})
  t.is(all.code, 0)
  for (const g of ['fs', 'admin', 'cluster', 'image', 'sandbox', 'daemon']) t.regex(all.stdout, new RegExp(`^  ${g}\\b`, 'm'), g)
})

test('strata admin and strata fs load no lmdb and no mgmtd service at start (a tenth of every command\'s start-up CPU)', async (t) => {
  for (const group of ['admin', 'fs']) {
    const r = await withHooks(t, [group, '--help'], {})
    t.is(r.code, 0, r.stderr)
    t.true(r.loaded.some((u) => u.endsWith(`/dist/bin/commands/${group}.js`)), `the ${group} group was loaded`)
    for (const bad of ['/node_modules/lmdb/', '/dist/fs/mgmtd/service.js', '/dist/fs/kv/']) {
      t.deepEqual(r.loaded.filter((u) => u.includes(bad)), [], `${group}: ${bad}`)
    }
  }
})

test('a module that fails to load is strata: INTERNAL: … and exit 1, not a stack trace; other groups still run', async (t) => {
  const broken = await withHooks(t, ['fs', 'ls', '/'], { STRATA_TEST_BREAK: '/dist/bin/commands/fs.js' })
  t.is(broken.code, 1)
  t.regex(broken.stderr, /^strata: INTERNAL: cannot load the fs commands: .*userOf/m)
  t.notRegex(broken.stderr, /^\s+at /m, 'no stack trace')
  // the sandbox daemon's modules broken (the case seen): fs commands do not notice
  const fsOk = await withHooks(t, ['fs', '--help'], { STRATA_TEST_BREAK: '/dist/sandbox/daemon/http.js' })
  t.is(fsOk.code, 0, fsOk.stderr)
  const sb = await withHooks(t, ['sandbox', '--help'], { STRATA_TEST_BREAK: '/dist/sandbox/daemon/http.js' })
  t.is(sb.code, 1)
  t.regex(sb.stderr, /^strata: INTERNAL: cannot load the sandbox commands: /m)
  // the CLI's own entry module
  const cli = await withHooks(t, ['--help'], { STRATA_TEST_BREAK: '/dist/bin/cli.js' })
  t.is(cli.code, 1)
  t.regex(cli.stderr, /^strata: INTERNAL: cannot load the strata CLI: /m)
  t.notRegex(cli.stderr, /^\s+at /m)
})

test('every usage error is one strata: usage: line and exit 2, commander\'s own included (no help text)', async (t) => {
  const { strata } = await import('./helpers.js')
  for (const args of [
    ['cluster', 'kill', '--signal', 'BOGUS', '--node', 'x'],
    ['admin', 'set-config', '-t', 'BOGUS'],
    ['admin', 'dump-chunkmeta', '-c', 'abc'],
    ['admin', '--mgmtd-address', 'garbage', 'list-chains'],
    ['fs', 'ls', '--bogus'],
    ['image', 'import'],
    ['sandbox', 'create', '--memory', '4'],
    // beyond what a Buffer or Node's timers hold: refused, not accepted and then failing every request
    ['fs', 'mount', '/tmp/strata-never-mounted', '--write-buffer', '1T'],
    ['fs', 'mount', '/tmp/strata-never-mounted', '--op-timeout', '3000000'],
    ['fs', 'mount', '/tmp/strata-never-mounted', '--orphan-timeout', '2147484'],
  ]) {
    const r = await strata(args)
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, /^strata: usage: /, args.join(' '))
    t.is(r.stderr.trim().split('\n').length, 1, `${args.join(' ')}: one line: ${r.stderr}`)
    t.notRegex(r.stderr, /^Usage: |^error: /m, args.join(' '))
  }
  // commander's own messages quote what was typed: control characters in it are escaped, as in every error
  const esc = await strata(['fs', 'ls', '--bo\x1b[2Jgus'])
  t.is(esc.code, 2)
  t.is(esc.stderr, "strata: usage: unknown option '--bo\\x1b[2Jgus'\n")
})

test('an empty --cluster/--dir, --mgmtd-address or cluster --node is a usage error, not a fall back to $STRATA_CLUSTER (or the default cluster)', async (t) => {
  const { strata, tempDir } = await import('./helpers.js')
  // a cluster directory the commands would otherwise have used
  const fallback = tempDir(t)
  fs.writeFileSync(path.join(fallback, 'marker'), 'keep')
  const env = { ...process.env, STRATA_CLUSTER: fallback }
  for (const args of [
    ['cluster', 'status', '--dir', ''],
    ['cluster', '--cluster', '', 'status'],
    ['cluster', 'destroy', '--force', '--dir', ''],
    ['cluster', 'kill', '--node', ''],
    ['cluster', 'start', '--node', ' '],
    ['cluster', 'up', '--dir', path.join(fallback, 'new'), '--name', ''],
    ['admin', '--cluster', '', 'list-nodes'],
    ['admin', 'list-chains', '--cluster', ''],
    ['admin', '--mgmtd-address', '', 'list-targets'],
    ['admin', '--mgmtd-address', ' , ', 'list-chain-tables'],
    ['fs', '--cluster', '', 'ls', '/'],
    ['fs', '--mgmtd-address', '', 'ls', '/'],
    ['image', '--cluster', '', 'ls'],
    ['sandbox', 'ls', '--cluster', ''],
  ]) {
    const r = await strata(args, { env })
    t.is(r.code, 2, `${JSON.stringify(args)}: ${r.stdout}${r.stderr}`)
    t.regex(r.stderr, /^strata: usage: .*(is empty|at least one host:port)/, JSON.stringify(args))
  }
  t.is(fs.readFileSync(path.join(fallback, 'marker'), 'utf8'), 'keep')
})

test('an argument that is not valid UTF-8 (a Latin-1 file name) is a usage error naming it: fs put no longer says the file does not exist, fs get no longer writes a file of another name', async (t) => {
  const { REPO, STRATA, tempDir } = await import('./helpers.js')
  const dir = tempDir(t)
  // the name's bytes: "caf" + 0xe9 (é in Latin-1); Node's own APIs cannot pass such bytes as an argument, a shell can
  const latin1 = Buffer.concat([Buffer.from(`${dir}/caf`), Buffer.from([0xe9])])
  fs.writeFileSync(latin1, 'data\n')
  const run = (script: string) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn('sh', ['-c', script], { cwd: REPO, env: { ...process.env, D: dir, S: STRATA, N: process.execPath }, stdio: ['ignore', 'ignore', 'pipe'] })
      let stderr = ''
      child.stderr.on('data', (c: Buffer) => (stderr += c.toString()))
      child.on('close', (code) => resolve({ code, stderr }))
    })
  // nothing listens at the mgmtd address: the old code got as far as the local file (NOT_FOUND) or the cluster (RPC_CONNECT_FAILED)
  const cases = [
    `exec "$N" "$S" fs --mgmtd-address 127.0.0.1:1 put "$D/$(printf 'caf\\351')" /x`,
    `exec "$N" "$S" fs --mgmtd-address 127.0.0.1:1 get /x "$D/$(printf 'out\\351')"`,
    `exec "$N" "$S" fs --mgmtd-address 127.0.0.1:1 mkdir "$(printf '/d\\377')"`,
  ]
  for (const c of cases) {
    const r = await run(c)
    t.is(r.code, 2, `${c}: ${r.stderr}`)
    t.regex(r.stderr, /^strata: usage: argument ".*\uFFFD.*" is not valid UTF-8 /, c)
  }
  t.deepEqual(fs.readdirSync(dir, { encoding: 'buffer' }).map((b) => b.toString('hex')), [latin1.subarray(dir.length + 1).toString('hex')])
  // a U+FFFD that is really in the argument (valid UTF-8) is a name like any other
  const typed = await run(`exec "$N" "$S" fs --mgmtd-address 127.0.0.1:1 mkdir "/d$(printf '\\357\\277\\275')"`)
  t.is(typed.code, 1, typed.stderr)
  t.regex(typed.stderr, /^strata: RPC_CONNECT_FAILED: /)
})
