// `strata image push|pull`: moves images between the cluster's image store
// and an object store (s3://, sandbox/image/s3) or an OCI registry
// (docker://, sandbox/image/registry). bin/commands/image.ts calls
// registerImageTransfer on its `image` group, whose options (--cluster,
// --mgmtd-address, --json …) reach these commands through withImageStore.
import os from 'node:os'
import path from 'node:path'
import type { Command } from 'commander'
import { StrataError } from '../../fs/common/errors.js'
import { formatBytes } from '../../sandbox/image/progress.js'
import { parseS3ImageUrl, parseS3Location, pullS3, pushS3, withPrefix, type S3TransferOptions } from '../../sandbox/image/s3/index.js'
import { parseRegistryUrl, pullRegistry, pushRegistry, type RegistryOptions } from '../../sandbox/image/registry/index.js'
import { secondsSince, withImageStore } from './image-store.js'
import { UsageError, intArg, sizeArg } from './output.js'
import { registryCredentials } from './registry-password.js'

interface TransferCliOpts {
  endpoint?: string
  region?: string
  forcePathStyle?: boolean
  partSize?: number
  concurrency?: number
  insecure?: boolean
  username?: string
  password?: string
  passwordStdin?: boolean
  platform?: string
  name?: string
  prefix?: string
  json?: boolean
}

/**
 * The image group's --timeout (seconds) as the remote timeout: how long the
 * object store or registry may leave a request unanswered or a body without
 * bytes. The same number bounds each DFS operation.
 */
function remoteTimeoutMs(cmd: Command): number {
  return ((cmd.optsWithGlobals() as { timeout?: number }).timeout ?? 60) * 1000
}

function scheme(url: string): 's3' | 'docker' {
  if (url.startsWith('s3://')) return 's3'
  if (url.startsWith('docker://')) return 'docker'
  throw new StrataError('IMAGE_INVALID_REFERENCE', `${JSON.stringify(url)}: expected s3://BUCKET[/PREFIX]… or docker://HOST[:PORT]/REPO…`)
}

/**
 * Flags of the other back end than the URL's are a usage error, not ignored
 * (s3: --endpoint, --region, --force-path-style, --part-size, --prefix;
 * docker: --insecure, --username, --password, --password-stdin, --platform). The environment
 * variables that stand for some of them are not checked: they may be set for
 * either.
 */
function checkSchemeOptions(kind: 's3' | 'docker', o: TransferCliOpts, url: string): void {
  const flags: Array<[string, boolean]> =
    kind === 's3'
      ? [
          ['--insecure', !!o.insecure],
          ['--username', o.username !== undefined],
          ['--password', o.password !== undefined],
          ['--password-stdin', !!o.passwordStdin],
          ['--platform', o.platform !== undefined],
        ]
      : [
          ['--endpoint', o.endpoint !== undefined],
          ['--region', o.region !== undefined],
          ['--force-path-style', !!o.forcePathStyle],
          ['--part-size', o.partSize !== undefined],
          ['--prefix', o.prefix !== undefined],
        ]
  const given = flags.filter(([, g]) => g).map(([f]) => f)
  if (given.length) throw new UsageError(`${given.join(', ')} appl${given.length === 1 ? 'ies' : 'y'} to ${kind === 's3' ? 'docker://' : 's3://'} URLs only, not ${JSON.stringify(url)}`)
}

/** S3 options of a command: flags first, then the AWS environment the SDK also reads. */
function s3Options(o: TransferCliOpts): S3TransferOptions {
  const endpoint = o.endpoint ?? (process.env.AWS_ENDPOINT_URL_S3 || process.env.AWS_ENDPOINT_URL || undefined)
  if (endpoint !== undefined) {
    let u: URL | undefined
    try {
      u = new URL(endpoint)
    } catch {
      u = undefined
    }
    if (!u || (u.protocol !== 'http:' && u.protocol !== 'https:')) throw new StrataError('IMAGE_INVALID_REFERENCE', `S3 endpoint ${JSON.stringify(endpoint)} is not an http(s):// URL`)
  }
  return {
    ...(endpoint !== undefined ? { endpoint } : {}),
    ...(o.region ? { region: o.region } : {}),
    ...(o.forcePathStyle ? { forcePathStyle: true } : {}),
    ...(o.partSize !== undefined ? { partSize: o.partSize } : {}),
    ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}),
    // unfinished multipart uploads, for servers that cannot list them
    stateDir: path.join(os.homedir(), '.strata', 's3-uploads'),
  }
}

/** Registry options of a command; the password may come from standard input or a prompt (registry-password.ts). */
async function registryOptions(o: TransferCliOpts): Promise<RegistryOptions> {
  return { ...(o.insecure ? { insecure: true } : {}), ...(await registryCredentials(o)) }
}

/** The options push and pull share; `push` adds the ones only an upload has (--part-size). */
function transferOpts(c: Command, push = false): Command {
  c.option('--endpoint <url>', 's3: endpoint URL (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the AWS profile, then AWS)')
    .option('--region <region>', 's3: region (default: $AWS_REGION, the AWS profile, then us-east-1)')
    .option('--force-path-style', 's3: address buckets as ENDPOINT/BUCKET (most local S3 servers need it)')
  if (push) c.option('--part-size <size>', 's3: multipart part size, 5M to 5G (default 16M); a blob no larger goes in one PUT', sizeArg('--part-size'))
  return c
    .option('--concurrency <n>', 's3: object requests in flight (default 4); docker pull: layer downloads at once (default 3); docker push does not use it', intArg('--concurrency', { min: 1, max: 64 }))
    .option('--insecure', 'docker: plain http to the registry (default: http only for localhost and 127.x)')
    .option('--username <user>', 'docker: registry user (default: $STRATA_REGISTRY_USER, then auths in $REGISTRY_AUTH_FILE or ~/.docker/config.json); its password comes from --password-stdin, --password or $STRATA_REGISTRY_PASSWORD, else is asked for without echo when stdin is a terminal, else a usage error')
    .option('--password-stdin', 'docker: read the registry password from standard input (one trailing newline dropped), as docker login does')
    .option('--password <password>', 'docker: registry password (visible in ps and shell history: prefer --password-stdin or $STRATA_REGISTRY_PASSWORD)')
    .option('--json', 'print JSON')
}

/** Adds `push` and `pull` to the `strata image` group. */
export function registerImageTransfer(image: Command): void {
  transferOpts(
    image
      .command('push')
      .description('copy a stored image to an object store (s3://) or a registry (docker://); run it again after an interruption: blobs already there are skipped, an unfinished s3 multipart upload goes on from the parts already uploaded')
      .argument('<image>', 'NAME[:TAG] or NAME@sha256:…')
      .argument('<destination>', 's3://BUCKET[/PREFIX] or docker://HOST[:PORT]/REPO[:TAG]'),
    true,
  )
    .addHelpText(
      'after',
      `
Options marked s3: or docker: are a usage error with the other kind of URL.
S3 layout under PREFIX: blobs/sha256/<hex> (layers), manifests/sha256/<hex>,
tags/<name>/<tag> (written last). Credentials: AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws files
(a set AWS_PROFILE wins over the keys, as in the AWS SDK).`,
    )
    .action(async (ref: string, dest: string, o: TransferCliOpts, cmd: Command) => {
      // bad URLs and endpoints fail before the cluster is contacted
      const kind = scheme(dest)
      checkSchemeOptions(kind, o, dest)
      if (kind === 's3') parseS3Location(dest)
      else parseRegistryUrl(dest)
      const s3 = kind === 's3' ? { ...s3Options(o), timeoutMs: remoteTimeoutMs(cmd) } : {}
      // the password is read (stdin, prompt) before the cluster is contacted
      const reg = kind === 'docker' ? await registryOptions(o) : {}
      return withImageStore(cmd, async ({ store, progress, signal, json, print, printJson }) => {
        const t0 = Date.now()
        const r =
          kind === 's3'
            ? await pushS3(store, ref, dest, { ...s3, progress, signal })
            : await pushRegistry(store, ref, dest, { ...reg, timeoutMs: remoteTimeoutMs(cmd), progress, signal })
        const seconds = secondsSince(t0)
        if (json) return printJson({ ...r, seconds })
        print(
          `pushed ${r.ref} (${r.digest}) to ${r.url}: ${r.blobsPushed} blob(s) pushed, ${r.blobsSkipped} already there, ` +
            `${formatBytes(r.bytesSent)} sent in ${seconds.toFixed(1)} s`,
        )
      })
    })

  transferOpts(
    image
      .command('pull')
      .description('copy an image from an object store (s3://) or a registry (docker://) into the cluster; an interrupted s3:// pull resumes from the bytes already stored when run again')
      .argument('<source>', 's3://BUCKET[/PREFIX]/NAME[:TAG|@sha256:…] or docker://HOST[:PORT]/REPO[:TAG|@sha256:…]')
      .option('--name <name>', 'local NAME[:TAG] (default: the remote name and tag)')
      .option('--platform <os/arch[/variant]>', 'docker: which platform\'s image to take from a manifest list or index (default linux/amd64)')
      .option('--prefix <prefix>', 's3: where PREFIX ends and NAME begins in the URL, when two splits name different images ("" or / for the bucket root)'),
  )
    .addHelpText('after', '\nOptions marked s3: or docker: are a usage error with the other kind of URL.')
    .action(async (src: string, o: TransferCliOpts, cmd: Command) => {
      const kind = scheme(src)
      checkSchemeOptions(kind, o, src)
      if (kind === 's3') {
        const parsed = parseS3ImageUrl(src)
        if (o.prefix !== undefined) withPrefix(parsed, src, o.prefix)
      } else parseRegistryUrl(src)
      const s3 = kind === 's3' ? { ...s3Options(o), timeoutMs: remoteTimeoutMs(cmd) } : {}
      // the password is read (stdin, prompt) before the cluster is contacted
      const reg = kind === 'docker' ? await registryOptions(o) : {}
      return withImageStore(cmd, async ({ store, progress, signal, json, print, printJson }) => {
        const t0 = Date.now()
        const named = o.name !== undefined ? { name: o.name } : {}
        const r =
          kind === 's3'
            ? await pullS3(store, src, { ...s3, ...named, ...(o.prefix !== undefined ? { prefix: o.prefix } : {}), progress, signal })
            : await pullRegistry(store, src, {
                ...reg,
                timeoutMs: remoteTimeoutMs(cmd),
                ...named,
                ...(o.platform !== undefined ? { platform: o.platform } : {}),
                ...(o.concurrency !== undefined ? { concurrency: o.concurrency } : {}),
                progress,
                signal,
              })
        const seconds = secondsSince(t0)
        if (json) return printJson({ ...r, seconds })
        const as = r.tag ? `${r.name}:${r.tag}` : `${r.name}@${r.digest}`
        print(
          `pulled ${r.url} as ${as} (${r.digest}): ${r.blobsFetched} blob(s) fetched, ${r.blobsSkipped} already stored, ` +
            `${formatBytes(r.bytesReceived)} received in ${seconds.toFixed(1)} s`,
        )
      })
    })
}
