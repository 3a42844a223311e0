// `strata image pull|push docker://…` as an operator runs them (child
// processes) against a real registry: JSON output, the second push skipping
// every blob, skopeo reading what was pushed, error codes and exit statuses.
import fs from 'node:fs'
import path from 'node:path'
import anyTest, { type TestFn } from 'ava'
import { ok, strata } from '../../../bin/helpers.js'
import { localTmp, startImageCluster, type ImageCluster } from '../../../helpers/image-cluster.js'
import { hasRegistryTools, sh, skopeoCopy, startRegistry, umociImage } from '../../../helpers/registry.js'

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
