// `strata image pull|push docker://…` as an operator runs them (child
// processes) against a real registry: JSON output, the second push skipping
// every blob, skopeo reading what was pushed, error codes and exit statuses.
import fs from 'node:fs'
import path from 'node:path'
import anyTest, { type TestFn } from 'ava'
import { ok, strata } from '../../../bin/helpers.js'
import { localTmp, startImageCluster, type ImageCluster } from '../../../helpers/image-cluster.js'
import { hasRegistryTools, sh, skopeoCopy, startRegistry, umociImage } from '../../../helpers/registry.js'
import { answerOnTerminal } from '../../../helpers/terminal.js'

const test = anyTest as TestFn<{ ic: ImageCluster }>
const t0 = hasRegistryTools && process.getuid?.() === 0 ? test.serial : test.serial.skip

test.before(async (t) => {
  if (hasRegistryTools && process.getuid?.() === 0) t.context.ic = await startImageCluster()
})
test.after.always(async (t) => {
  await t.context.ic?.close()
})

t0('strata image pull and push with docker:// URLs', async (t) => {
  const { ic } = t.context
  const dir = localTmp(t, 'strata-reg-cli-')
  const reg = await startRegistry(t)
  const layout = path.join(dir, 'oci')
  const remote = await umociImage(layout, 'v1', [(r) => fs.writeFileSync(path.join(r, 'hello'), 'hello from the registry\n'), (r) => fs.mkdirSync(path.join(r, 'etc'))], { cmd: 'cat' })
  await skopeoCopy(`oci:${layout}:v1`, reg.url('src/app:v1'))
  // a private HOME: no ~/.docker/config.json, a fresh layer cache
  const env = { HOME: path.join(dir, 'home'), XDG_CACHE_HOME: path.join(dir, 'cache') }
  fs.mkdirSync(env.HOME)

  const pulled = JSON.parse(await ok(t, ['image', ...ic.cliArgs, 'pull', '--json', reg.url('src/app:v1'), '--name', 'cli/app'], { env, timeoutMs: 180_000 })) as Record<string, unknown>
  t.like(pulled, { name: 'cli/app', tag: 'v1', remoteDigest: remote, blobsFetched: 3 })
  const inspect = JSON.parse(await ok(t, ['image', ...ic.cliArgs, 'inspect', '--json', 'cli/app:v1'], { env })) as Record<string, unknown>
  t.is(JSON.stringify(inspect).includes(pulled.digest as string), true)

  const pushArgs = ['image', ...ic.cliArgs, 'push', '--json', 'cli/app:v1', reg.url('dst/app:v2')]
  const first = JSON.parse(await ok(t, pushArgs, { env, timeoutMs: 180_000 })) as Record<string, number | string>
  t.like(first, { blobsPushed: 3, blobsSkipped: 0 })
  const second = JSON.parse(await ok(t, pushArgs, { env, timeoutMs: 180_000 })) as Record<string, number | string>
  t.like(second, { digest: first.digest, blobsPushed: 0, blobsSkipped: 3, bytesSent: 0 })
  const seen = JSON.parse(await sh('skopeo', ['inspect', '--tls-verify=false', reg.url('dst/app:v2')])) as { Digest: string; Layers: string[] }
  t.is(seen.Digest, String(first.digest))
  t.is(seen.Layers.length, 2)
  // the plain (non-JSON) form says what happened
  const text = await ok(t, ['image', ...ic.cliArgs, 'push', 'cli/app:v1', reg.url('dst/app:v2')], { env, timeoutMs: 180_000 })
  t.regex(text, /0 blob\(s\) pushed, 3 already there/)

  const missing = await strata(['image', ...ic.cliArgs, 'pull', reg.url('src/app:nope')], { env, timeoutMs: 120_000 })
  t.not(missing.code, 0)
  t.regex(missing.stderr, /IMAGE_NOT_FOUND/)
  const bad = await strata(['image', ...ic.cliArgs, 'pull', 'docker://127.0.0.1/Bad'], { env })
  t.not(bad.code, 0)
  t.regex(bad.stderr, /IMAGE_INVALID_REFERENCE/)
})

t0('registry password: --password-stdin, the prompt on a terminal, a usage error without either', async (t) => {
  const { ic } = t.context
  const dir = localTmp(t, 'strata-reg-pw-')
  const password = 'open sesame: 7'
  const reg = await startRegistry(t, { users: { alice: password } })
  const layout = path.join(dir, 'oci')
  await umociImage(layout, 'v1', [(r) => fs.writeFileSync(path.join(r, 'hello'), 'behind basic auth\n')])
  await skopeoCopy(`oci:${layout}:v1`, reg.url('priv/app:v1'), ['--dest-creds', `alice:${password}`])
  // a private HOME: no auth file; no credentials in the environment
  const env = { HOME: path.join(dir, 'home'), XDG_CACHE_HOME: path.join(dir, 'cache'), STRATA_REGISTRY_USER: '', STRATA_REGISTRY_PASSWORD: '' }
  fs.mkdirSync(env.HOME)
  const pull = (name: string, ...extra: string[]) => ['image', ...ic.cliArgs, 'pull', '--json', reg.url('priv/app:v1'), '--name', name, ...extra]

  // from standard input, its newline dropped; push (blob uploads, manifest PUT) as well
  const pulled = JSON.parse(await ok(t, pull('pw/stdin', '--username', 'alice', '--password-stdin'), { env, input: `${password}\n`, timeoutMs: 180_000 })) as Record<string, unknown>
  t.like(pulled, { name: 'pw/stdin', tag: 'v1' })
  const pushed = JSON.parse(await ok(t, ['image', ...ic.cliArgs, 'push', '--json', 'pw/stdin:v1', reg.url('priv/copy:v1'), '--username', 'alice', '--password-stdin'], { env, input: password, timeoutMs: 180_000 })) as Record<string, unknown>
  t.like(pushed, { blobsPushed: 2 })
  const wrong = await strata(pull('pw/wrong', '--username', 'alice', '--password-stdin'), { env, input: 'nope\n' })
  t.is(wrong.code, 1, wrong.stderr)
  t.regex(wrong.stderr, /^strata: IMAGE_AUTH_FAILED: /)

  // a user and no password from anywhere, stdin not a terminal: a usage error before anything is contacted
  // (it was: the user sent with an empty password, IMAGE_AUTH_FAILED "the registry refused the credentials", exit 1)
  const none = await strata(pull('pw/none', '--username', 'alice'), { env, input: '' })
  t.is(none.code, 2, none.stderr)
  t.regex(none.stderr, /^strata: usage: --username "alice" has no password and standard input is not a terminal.*--password-stdin.*STRATA_REGISTRY_PASSWORD/)
  for (const [extra, msg] of [
    [['--username', 'alice', '--password', 'x', '--password-stdin'], /--password and --password-stdin are mutually exclusive/],
    [['--password-stdin'], /--password-stdin needs a user name/],
    [['--password', password], /--password needs a user name/],
  ] as const) {
    const r = await strata(pull('pw/bad', ...extra), { env, input: `${password}\n` })
    t.is(r.code, 2, `${extra.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, msg)
  }
  const empty = await strata(pull('pw/empty', '--username', 'alice', '--password-stdin'), { env, input: '\n' })
  t.is(empty.code, 2, empty.stderr)
  t.regex(empty.stderr, /standard input held no password/)
  // the other half from the environment
  const envPw = await strata(pull('pw/env', '--username', 'alice'), { env: { ...env, STRATA_REGISTRY_PASSWORD: password }, timeoutMs: 180_000 })
  t.is(envPw.code, 0, envPw.stderr)

  // on a terminal: asked for on stderr, nothing typed echoed
  const tty = await answerOnTerminal(pull('pw/tty', '--username', 'alice'), 'Password: ', `${password}\r`, { env })
  t.is(tty.code, 0, tty.screen)
  t.regex(tty.screen, /^Password: \n/)
  t.false(tty.screen.includes(password), tty.screen)
  t.regex(tty.screen, /"name": "pw\/tty"/)
  // Ctrl-C at the prompt (raw mode: no SIGINT from the terminal) interrupts as it would elsewhere
  const interrupted = await answerOnTerminal(pull('pw/int', '--username', 'alice'), 'Password: ', 'ab\x03', { env })
  t.is(interrupted.code, 130, interrupted.screen)
  const skopeo = JSON.parse(await sh('skopeo', ['inspect', '--tls-verify=false', '--creds', `alice:${password}`, reg.url('priv/copy:v1')])) as { Layers: string[] }
  t.is(skopeo.Layers.length, 1)
})
