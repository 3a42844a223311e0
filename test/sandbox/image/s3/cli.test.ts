// `strata image push|pull` with s3:// as an operator runs them (child
// processes): SIGKILL in the middle of a push and of a pull, then the same
// command again resumes; JSON output; error codes and exit statuses; no SDK
// Node-version warning on stderr.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { spawn, type ChildProcess } from 'node:child_process'
import { startImageCluster, localTmp, type ImageCluster } from '../../../helpers/image-cluster.js'
import { startS3 } from '../../../helpers/s3rver.js'
import { startSilentServer } from '../../../helpers/registry.js'
import { until } from '../../../helpers/procs.js'
import { STRATA, ok, strata } from '../../../bin/helpers.js'
import { manifestKey, tagKey } from '../../../../sandbox/image/s3/url.js'
import { blobBytes, publishFixture } from './fixture.js'

const MiB = 1024 * 1024

let A: ImageCluster
let B: ImageCluster

test.before(async () => {
  A = await startImageCluster()
  B = await startImageCluster()
})
test.after.always(async () => {
  await Promise.all([A?.close(), B?.close()])
})

function launch(args: string[], env: NodeJS.ProcessEnv): { child: ChildProcess; stderr: () => string } {
  const child = spawn(process.execPath, [STRATA, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let err = ''
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()))
  child.stdout!.resume()
  return { child, stderr: () => err }
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  await new Promise<void>((r) => {
    child.once('exit', () => r())
    child.kill('SIGKILL')
  })
}

test.serial('push and pull SIGKILLed mid-transfer resume when run again; the result equals the source', async (t) => {
  t.timeout(10 * 60_000)
  // 8 MiB/s per connection: a 40 MiB layer takes seconds, room to kill
  const s3 = await startS3(t, { rateBytesPerSec: 8 * MiB })
  const storeA = await A.store()
  const f = await publishFixture(t, storeA, 'team/web', 'v2', 40 * MiB)
  const home = localTmp(t, 'strata-s3-home-')
  const env = { ...s3.env, HOME: home }
  const common = ['--force-path-style', '--part-size', '5M', '--concurrency', '1']

  const push = ['image', ...A.cliArgs, 'push', '--json', ...common, 'team/web:v2', `s3://${s3.bucket}/cache`]
  const first = launch(push, env)
  t.teardown(() => kill(first.child))
  // three parts at the server: at least two of them acknowledged and journaled
  await until(() => s3.uploadedParts() >= 3, 120_000, 'three parts uploaded')
  await kill(first.child)
  t.false(fs.existsSync(s3.objectPath(tagKey('cache', 'team/web', 'v2'))), 'no tag after the kill')
  t.false(fs.existsSync(s3.objectPath(manifestKey('cache', f.digest))))
  // (a kill between a journal's temp file and its rename leaves the temp too: the next run sweeps it)
  const journals = fs.readdirSync(path.join(home, '.strata', 's3-uploads')).filter((n) => n.endsWith('.json'))
  t.is(journals.length, 1, 'the unfinished upload is journaled')

  const pushed = JSON.parse(await ok(t, push, { env, timeoutMs: 300_000 }))
  t.is(pushed.digest, f.digest)
  t.is(pushed.tag, 'v2')
  t.true(pushed.partsResumed >= 2, `parts resumed: ${pushed.partsResumed}`)
  t.true(pushed.bytesSent <= f.big.bytes.length - 2 * 5 * MiB + 256 * 1024, `sent ${pushed.bytesSent} of ${f.big.bytes.length}`)
  t.deepEqual(fs.readdirSync(path.join(home, '.strata', 's3-uploads')), [], 'journal (and any temp a kill left) removed')
  t.true(fs.existsSync(s3.objectPath(tagKey('cache', 'team/web', 'v2'))))

  // --part-size is push's
  const pullCommon = ['--force-path-style', '--concurrency', '1']
  const pull = ['image', ...B.cliArgs, 'pull', '--json', ...pullCommon, `s3://${s3.bucket}/cache/team/web:v2`, '--name', 'web']
  const down0 = s3.bytesDown()
  const firstPull = launch(pull, env)
  t.teardown(() => kill(firstPull.child))
  // 24 of the 40 MiB passed to the client: with TCP buffers and one 4 MiB
  // batch pending and one being written, at least ~10 MiB reached the store
  await until(() => s3.bytesDown() - down0 >= 24 * MiB, 120_000, '24 MiB received by the pull')
  await kill(firstPull.child)
  const storeB = await B.store()
  t.is((await storeB.listTags()).length, 0, 'nothing tagged after the kill')
  // the killed client's write session is closed by meta with the length the storage has
  const partial = await until(async () => ((await storeB.partialBlobLength(f.big.digest)) > 0 ? storeB.partialBlobLength(f.big.digest) : null), 60_000, 'partial blob length visible')
  t.true(partial < f.big.bytes.length)

  const pulled = JSON.parse(await ok(t, pull, { env, timeoutMs: 300_000 }))
  t.is(pulled.digest, f.digest)
  t.is(`${pulled.name}:${pulled.tag}`, 'web:v2')
  t.true(pulled.bytesResumed > 0, `resumed ${pulled.bytesResumed}`)
  t.true(pulled.bytesReceived < f.big.bytes.length, `received ${pulled.bytesReceived} of ${f.big.bytes.length}`)
  const storeB2 = await B.store()
  t.is((await storeB2.resolve('web:v2')).digest, f.digest)
  for (const [d, bytes] of f.layers) t.true((await blobBytes(storeB2, d)).equals(bytes))

  // text output and a pull that has everything already
  const again = await strata(['image', ...B.cliArgs, 'pull', ...pullCommon, `s3://${s3.bucket}/cache/team/web:v2`], { env })
  t.is(again.code, 0, again.stderr)
  t.regex(again.stdout, /^pulled s3:\/\/images\/cache\/team\/web:v2 as team\/web:v2 \(sha256:[0-9a-f]{64}\): 0 blob\(s\) fetched, 2 already stored/)
  t.notRegex(again.stderr + first.stderr() + firstPull.stderr(), /NodeVersionSupportWarning|Warning:/)
})

test.serial('CLI errors: codes on stderr, exit 1; usage errors exit 2', async (t) => {
  const s3 = await startS3(t)
  const storeA = await A.store()
  await publishFixture(t, storeA, 'small', 'v1', 64 * 1024)
  const env = { ...s3.env, HOME: localTmp(t, 'strata-s3-home-') }
  const run = (args: string[], e: NodeJS.ProcessEnv = env) => strata(['image', ...A.cliArgs, ...args], { env: e })
  const fails = async (args: string[], codeName: string, e?: NodeJS.ProcessEnv) => {
    const r = await run(args, e)
    t.is(r.code, 1, `${args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, new RegExp(`^strata: ${codeName}: `), args.join(' '))
    t.notRegex(r.stderr, /NodeVersionSupportWarning/)
  }
  await ok(t, ['image', ...A.cliArgs, 'push', '--force-path-style', 'small:v1', `s3://${s3.bucket}/e`], { env })
  await fails(['pull', '--force-path-style', `s3://${s3.bucket}/e/small:nope`], 'IMAGE_NOT_FOUND')
  await fails(['push', '--force-path-style', 'small:v1', 's3://Bad Bucket/x'], 'IMAGE_INVALID_REFERENCE')
  await fails(['push', '--force-path-style', 'small:v1', 'ftp://host/x'], 'IMAGE_INVALID_REFERENCE')
  await fails(['pull', '--force-path-style', `s3://${s3.bucket}`], 'IMAGE_INVALID_REFERENCE')
  await fails(['push', '--force-path-style', '--endpoint', 'localhost:1', 'small:v1', `s3://${s3.bucket}/e`], 'IMAGE_INVALID_REFERENCE')
  await fails(['push', '--force-path-style', 'small:v1', `s3://${s3.bucket}/e`], 'IMAGE_AUTH_FAILED', { ...env, AWS_ACCESS_KEY_ID: 'NOBODY' })
  // nothing listens there
  await fails(['push', '--force-path-style', '--endpoint', 'http://127.0.0.1:9', 'small:v1', `s3://${s3.bucket}/e`], 'IMAGE_REMOTE_ERROR')
  // credentials from a profile file instead of the environment (the SDK's default chain)
  const home = localTmp(t, 'strata-s3-profile-')
  fs.mkdirSync(path.join(home, '.aws'))
  fs.writeFileSync(path.join(home, '.aws', 'credentials'), '[default]\naws_access_key_id = NOBODY\naws_secret_access_key = x\n\n[s3rver]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n')
  const { AWS_ACCESS_KEY_ID: _id, AWS_SECRET_ACCESS_KEY: _secret, ...noKeys } = s3.env
  const profileEnv = { ...noKeys, HOME: home, AWS_PROFILE: 's3rver' }
  const viaProfile = JSON.parse(await ok(t, ['image', ...A.cliArgs, 'push', '--json', '--force-path-style', 'small:v1', `s3://${s3.bucket}/profile`], { env: profileEnv }))
  t.is(viaProfile.tag, 'v1')
  await fails(['push', '--force-path-style', 'small:v1', `s3://${s3.bucket}/profile`], 'IMAGE_AUTH_FAILED', { ...noKeys, HOME: home })
  // a profile name that neither file has: said so, also when keys in the environment lose to it
  for (const e of [{ ...noKeys, HOME: home, AWS_PROFILE: 'nosuch' }, { ...s3.env, HOME: home, AWS_PROFILE: 'nosuch' }] as NodeJS.ProcessEnv[]) {
    const r = await run(['push', '--force-path-style', 'small:v1', `s3://${s3.bucket}/profile`], e)
    t.is(r.code, 1, r.stderr)
    t.regex(r.stderr, /^strata: IMAGE_AUTH_FAILED: .*AWS_PROFILE is "nosuch", a profile in neither .*\.aws\/config nor .*\.aws\/credentials/)
    t.is(/unset AWS_PROFILE to use those/.test(r.stderr), e.AWS_ACCESS_KEY_ID !== undefined, r.stderr)
  }
  const usage = await run(['push', '--part-size', 'lots', 'small:v1', `s3://${s3.bucket}/e`])
  t.is(usage.code, 2, usage.stderr)
  const tooSmall = await run(['push', '--force-path-style', '--part-size', '1M', 'small:v1', `s3://${s3.bucket}/e`])
  t.is(tooSmall.code, 1)
  t.regex(tooSmall.stderr, /INVALID_ARGUMENT/)
  // S3 takes no part (and no single PUT) above 5 GiB
  const tooLarge = await run(['push', '--force-path-style', '--part-size', '6G', 'small:v1', `s3://${s3.bucket}/e`])
  t.is(tooLarge.code, 1)
  t.regex(tooLarge.stderr, /INVALID_ARGUMENT/)
  const help = await run(['push', '--help'])
  t.is(help.code, 0)
  t.regex(help.stdout, /--endpoint/)
  t.regex(help.stdout, /--force-path-style/)
})

test.serial('a pull URL whose PREFIX/NAME splits both exist: the same manifest is no ambiguity; different ones are, and --prefix chooses', async (t) => {
  const s3 = await startS3(t)
  const storeA = await A.store()
  const x = await publishFixture(t, storeA, 'accc/implicit', 'v1', 64 * 1024)
  const y = await publishFixture(t, storeA, 'bydig/accc/implicit', 'v1', 32 * 1024)
  t.not(x.digest, y.digest)
  const env = { ...s3.env, HOME: localTmp(t, 'strata-s3-home-') }
  const cli = (args: string[]) => strata(['image', ...A.cliArgs, '--json', ...args], { env })
  const okJson = async (args: string[]) => {
    const r = await cli(args)
    t.is(r.code, 0, `${args.join(' ')}: ${r.stderr}`)
    return JSON.parse(r.stdout)
  }
  const pull = (args: string[]) => ['pull', '--force-path-style', ...args]
  // the report's steps: the image under the bucket root and by digest under bydig/
  await okJson(['push', '--force-path-style', 'accc/implicit:v1', `s3://${s3.bucket}/`])
  await okJson(['push', '--force-path-style', `accc/implicit@${x.digest}`, `s3://${s3.bucket}/bydig`])
  const byDigest = await okJson(pull([`s3://${s3.bucket}/bydig/accc/implicit@${x.digest}`]))
  t.like(byDigest, { name: 'accc/implicit', digest: x.digest })
  // two splits naming different images: ambiguous, the message says how to choose
  await okJson(['push', '--force-path-style', 'accc/implicit:v1', `s3://${s3.bucket}/bydig`])
  await okJson(['push', '--force-path-style', 'bydig/accc/implicit:v1', `s3://${s3.bucket}/`])
  const amb = await cli(pull([`s3://${s3.bucket}/bydig/accc/implicit:v1`]))
  t.is(amb.code, 1)
  t.regex(amb.stderr, /^strata: IMAGE_INVALID_REFERENCE: .* is ambiguous: .*--prefix "bydig" or --prefix ""/)
  const inBydig = await okJson(pull(['--prefix', 'bydig', `s3://${s3.bucket}/bydig/accc/implicit:v1`]))
  t.like(inBydig, { name: 'accc/implicit', tag: 'v1', digest: x.digest })
  for (const root of ['', '/']) {
    const atRoot = await okJson(pull(['--prefix', root, '--name', `fromroot${root ? '-slash' : ''}`, `s3://${s3.bucket}/bydig/accc/implicit:v1`]))
    t.is(atRoot.digest, y.digest)
  }
  // a --prefix that is no split of the URL, and --prefix with a registry URL
  const bad = await cli(pull(['--prefix', 'nope', `s3://${s3.bucket}/bydig/accc/implicit:v1`]))
  t.is(bad.code, 1)
  t.regex(bad.stderr, /^strata: IMAGE_INVALID_REFERENCE: .*--prefix "nope" is not a PREFIX/)
  const docker = await cli(['pull', '--prefix', 'x', 'docker://127.0.0.1:5000/x'])
  t.is(docker.code, 2, docker.stderr)
})

test.serial('a registry or S3 endpoint that accepts connections and never answers: push and pull fail IMAGE_REMOTE_ERROR "timed out" after --timeout, naming the URL', async (t) => {
  const silent = await startSilentServer(t)
  const hostPort = `127.0.0.1:${silent.port}`
  await publishFixture(t, await A.store(), 'hang', 'v1', 64 * 1024)
  const env = { HOME: localTmp(t, 'strata-s3-home-'), AWS_ACCESS_KEY_ID: 'K', AWS_SECRET_ACCESS_KEY: 'S', AWS_REGION: 'us-east-1' }
  const s3 = ['--endpoint', `http://${hostPort}`, '--force-path-style']
  const cases: Array<{ args: string[]; where: RegExp }> = [
    { args: ['push', 'hang:v1', `docker://${hostPort}/x/y:1`], where: new RegExp(`http://${hostPort}/v2/: timed out`) },
    { args: ['pull', `docker://${hostPort}/x/y:1`], where: new RegExp(`http://${hostPort}/v2/: timed out`) },
    { args: ['push', 'hang:v1', 's3://bkt/p', ...s3], where: new RegExp(`s3://bkt/p/.*: timed out: .*\\(endpoint http://${hostPort}\\)`) },
    { args: ['pull', 's3://bkt/p/hang:v1', ...s3], where: new RegExp(`s3://bkt/p/tags/hang/v1: timed out: .*\\(endpoint http://${hostPort}\\)`) },
  ]
  for (const c of cases) {
    const t0 = Date.now()
    const r = await strata(['image', ...A.cliArgs, '--timeout', '2', ...c.args], { env, timeoutMs: 60_000 })
    t.log(`${c.args.join(' ')}: failed after ${Date.now() - t0} ms`)
    t.is(r.code, 1, `${c.args.join(' ')}: ${r.stderr}`)
    t.regex(r.stderr, /^strata: IMAGE_REMOTE_ERROR: /, c.args.join(' '))
    t.regex(r.stderr, c.where, c.args.join(' '))
    // --timeout is what ran out, not the default 60 s (that a timed-out request is not sent again: registry/ and s3/timeout.test)
    t.regex(r.stderr, /timed out: .*for 2 s/, c.args.join(' '))
  }
})

test.serial('Ctrl-C of an s3:// push or pull: exit 130 with "CANCELLED: image CMD interrupted by SIGINT", as every image command, plus that running it again resumes', async (t) => {
  const silent = await startSilentServer(t)
  const hostPort = `127.0.0.1:${silent.port}`
  await publishFixture(t, await A.store(), 'sigint', 'v1', 64 * 1024)
  const env = { HOME: localTmp(t, 'strata-s3-home-'), AWS_ACCESS_KEY_ID: 'K', AWS_SECRET_ACCESS_KEY: 'S', AWS_REGION: 'us-east-1' }
  const s3 = ['--endpoint', `http://${hostPort}`, '--force-path-style']
  for (const [cmd, args] of [
    ['push', ['push', 'sigint:v1', 's3://bkt/p', ...s3]],
    ['pull', ['pull', 's3://bkt/p/sigint:v1', ...s3]],
  ] as const) {
    const before = silent.connections()
    // a request is out (the server never answers it): the transfer is under way when the signal comes
    const { child, stderr } = launch(['image', ...A.cliArgs, ...args], env)
    t.teardown(() => kill(child))
    await until(() => silent.connections() > before, 30_000, `${cmd} reached the endpoint`)
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)))
    child.kill('SIGINT')
    t.is(await exited, 130, stderr())
    // each blob under way is marked interrupted (they were not ended at all: no line), the error comes last
    const lines = stderr().trim().split('\n')
    t.is(lines.pop(), `strata: CANCELLED: image ${cmd} interrupted by SIGINT; run the command again to resume`)
    // a push's blobs are under way (their HEADs unanswered); a pull is still waiting for its tag
    if (cmd === 'push') t.true(lines.length > 0, stderr())
    for (const l of lines) t.regex(l, new RegExp(`^${cmd} [0-9a-f]{12}: [0-9.]+s \\(interrupted\\)$`), stderr())
  }
})
