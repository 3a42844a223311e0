// `strata image import|compose|ls|inspect|tag|rm|gc|export` (and push/pull
// from image-transfer.ts): images in the cluster's store under
// /strata/images, reached through the file client like `strata fs`.
import type { Command } from 'commander'
import { formatTable } from '../../fs/admin/index.js'
import { StrataError, isStrataError } from '../../fs/common/errors.js'
import { composeImage } from '../../sandbox/image/compose.js'
import { exportOciArchive } from '../../sandbox/image/oci/export.js'
import { importPath } from '../../sandbox/image/oci/import.js'
import { formatBytes } from '../../sandbox/image/progress.js'
import { LAYER_KINDS, formatImageRef, parseImageRef, type ImageManifest, type LayerKind } from '../../sandbox/image/types.js'
import { secondsSince, withImageStore } from './image-store.js'
import { closeInPlace, localDestination, localError, openInPlace } from './local-files.js'
import { registerImageTransfer } from './image-transfer.js'
import { EXIT_SIGPIPE, UsageError, addressListArg, dirArg, choiceArg, onceArg, out, printJson, timerSecondsArg } from './output.js'

function short(digest: string): string {
  return digest.slice('sha256:'.length, 'sha256:'.length + 12)
}

function imageSize(m: ImageManifest): number {
  const seen = new Map<string, number>()
  for (const l of m.layers) seen.set(l.digest, l.size)
  return [...seen.values()].reduce((a, b) => a + b, 0)
}

/** NAME[:TAG] of a destination (a digest is not a name). */
function targetName(s: string, what: string): { name: string; tag: string } {
  const r = parseImageRef(s)
  if (r.digest) throw new StrataError('IMAGE_INVALID_REFERENCE', `${what} ${JSON.stringify(s)} must be NAME[:TAG], not a digest`)
  return { name: r.name, tag: r.tag ?? 'latest' }
}

/** Registers `strata image …`. */
export function registerImageCommands(program: Command): Command {
  const g = program
    .command('image')
    .description('images: EROFS layers in the DFS (/strata/images), OCI import and export, compose, push and pull')
    .enablePositionalOptions(false)
    .option('--cluster <dir>', 'cluster directory (default: $STRATA_CLUSTER, then ~/.strata/cluster)', dirArg('--cluster'))
    .option('--mgmtd-address <addrs>', 'mgmtd host:port list (comma separated) instead of a cluster directory', addressListArg)
    .option('--meta-address <addrs>', 'meta server host:port list (default: META nodes in routing info)', addressListArg)
    .option(
      '--timeout <seconds>',
      'how long one DFS operation may retry; push and pull: how long the object store or registry may leave a request unanswered or a body without bytes before the command fails (not retried)',
      // at least 1 (0 would mean no time at all, not "no limit"), at most what a timer holds
      timerSecondsArg('--timeout'),
      60,
    )
    .option('--json', 'print JSON')
    .addHelpText('after', '\nErrors print "strata: CODE: message" and exit 1; usage errors exit 2. Codes: docs/errors.md (IMAGE_*).')

  g.command('import')
    .description('import a docker-save tarball (or one unpacked into a directory), OCI archive, OCI layout directory, rootfs tarball (.tar, .tar.gz, .tar.zst) or rootfs directory; - reads any of the tarballs from standard input')
    .argument('<path>', 'what to import, or - for standard input (as docker load and podman load read it; not a terminal): it is read to its end into the work dir first, gzip and zstd decompressed')
    .option('--name <name[:tag]>', 'name of the image (default: every NAME:TAG the archive gives it, or the one --ref picked)')
    .option('--kind <kind>', 'kind of the imported layers: base, workspace or toolkit', choiceArg('--kind', LAYER_KINDS), 'base')
    .option('--squash', 'squash all layers into one (applied in the work dir; sparse files keep their holes)')
    .option('--platform <os/arch[/variant]>', 'which platform of the image\'s multi-platform index to take (default linux/amd64; an image for a single platform is taken whatever it is unless this is given); image archives and layouts only, a usage error with a rootfs')
    .option('--ref <name|sha256:…>', 'which image of an archive or layout that holds several: a RepoTag or ref.name, or the digest of an image (for unnamed ones); image archives and layouts only, a usage error with a rootfs')
    .option('--compress <algo>', 'compress layer file data: lz4 or lz4hc (default: none); mkfs.erofs builds these layers and stores holes of sparse files as compressed zeros, at most 1 GiB of them per layer', choiceArg('--compress', ['lz4', 'lz4hc'] as const))
    .option('--work-dir <dir>', 'local directory for unpacking and building layers, and for what - reads from standard input (default: the system temp dir)')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      '\nA rootfs directory becomes the layer its tar (tar --sort=name --sparse --xattrs) would: times before 1970, holes of sparse files, xattrs, hard links and devices are kept, sockets left out; a name starting with .wh. or not UTF-8 is IMAGE_BAD_ARCHIVE, and a file that changes while it is read fails the import (IMAGE_BUILD_FAILED). See docs/images.md, Rootfs directories.',
    )
    .action((input: string, o: { name?: string; kind: LayerKind; squash?: boolean; platform?: string; ref?: string; compress?: 'lz4' | 'lz4hc'; workDir?: string }, cmd: Command) => {
      // as `docker load`: an archive is not typed in
      if (input === '-' && process.stdin.isTTY) throw new UsageError('refusing to read the archive from a terminal: pipe it in (podman save IMAGE | strata image import - …), or give a file name instead of -')
      return withImageStore(cmd, async ({ store, json, progress, signal, print, printJson }) => {
        const t0 = Date.now()
        const target = o.name !== undefined ? targetName(o.name, '--name') : null
        const r = await importPath(store, input, {
          ...(target ? { name: target.name, tag: target.tag } : {}),
          requireName: true,
          kind: o.kind,
          ...(o.squash ? { squash: true } : {}),
          ...(o.platform ? { platform: o.platform } : {}),
          ...(o.ref ? { ref: o.ref } : {}),
          ...(o.compress ? { compress: o.compress } : {}),
          ...(o.workDir ? { workDir: o.workDir } : {}),
          ...(input === '-' ? { stdin: process.stdin } : {}),
          onProgress: progress,
          signal,
        }).catch((e: unknown) => {
          // --ref or --platform given for a rootfs: how the command was called, not the input
          if (isStrataError(e, ['INVALID_ARGUMENT']) && e.detail?.usage === true) throw new UsageError(e.reason)
          throw e
        })
        const seconds = secondsSince(t0)
        const image = `${r.name}:${r.tag}`
        if (json) {
          return printJson({
            image,
            name: r.name,
            tag: r.tag,
            tags: r.tags ?? [image],
            digest: r.digest,
            source: r.manifest.source,
            layers: r.manifest.layers,
            layersBuilt: r.layersBuilt,
            layersReused: r.layersReused,
            size: imageSize(r.manifest),
            seconds,
          })
        }
        const also = (r.tags ?? []).slice(1)
        print(`imported ${image} ${r.digest} (${r.manifest.layers.length} layer(s): ${r.layersBuilt} built, ${r.layersReused} reused; ${formatBytes(imageSize(r.manifest))}) in ${seconds} s${also.length ? `; also tagged ${also.join(' ')}` : ''}`)
      })
    })

  g.command('compose')
    .description('make an image from stored images\' layers (no data copied): base, then workspace, then toolkits')
    .argument('<name>', 'NAME[:TAG] of the new image')
    .requiredOption('--base <image>', 'base image (OS and runtimes); required, once', onceArg('--base', 'more parts stack with --toolkit'))
    .option('--workspace <image>', 'workspace image (repository and task dependencies); at most once', onceArg('--workspace', 'more parts stack with --toolkit'))
    .option('--toolkit <image>', 'toolkit image (repeatable, stacked in order)', (v: string, prev: string[] | undefined) => [...(prev ?? []), v])
    .option('--json', 'print JSON')
    .action((nameArg: string, o: { base: string; workspace?: string; toolkit?: string[] }, cmd: Command) =>
      withImageStore(cmd, async ({ store, json, signal }) => {
        const target = targetName(nameArg, 'image name')
        const r = await composeImage(store, {
          signal,
          base: o.base,
          ...(o.workspace ? { workspace: o.workspace } : {}),
          ...(o.toolkit ? { toolkits: o.toolkit } : {}),
          name: target.name,
          tag: target.tag,
        })
        const image = `${target.name}:${target.tag}`
        if (json) return printJson({ image, digest: r.digest, parts: r.parts, layers: r.manifest.layers, config: r.manifest.config })
        out(`composed ${image} ${r.digest}: ${r.parts.map((p) => `${p.kind} ${p.ref} (${p.layers} layer(s))`).join(', ')}`)
      }),
    )

  g.command('ls')
    .description('list images: NAME TAG DIGEST LAYERS SIZE CREATED')
    .option('-a, --all', 'also list manifests no tag points at (as <none>)')
    .option('--json', 'print JSON')
    .action((o: { all?: boolean }, cmd: Command) =>
      withImageStore(cmd, async ({ store, json }) => {
        const tags = await store.listTags()
        const digests = new Set(tags.map((t) => t.digest))
        const rows: Array<{ name: string; tag: string; digest: string }> = [...tags]
        if (o.all) for (const d of await store.listManifests()) if (!digests.has(d)) rows.push({ name: '<none>', tag: '<none>', digest: d })
        const manifests = new Map<string, ImageManifest | null>()
        for (const r of rows) {
          // a damaged or vanished manifest shows as '?'; storage that cannot answer fails the listing
          if (!manifests.has(r.digest)) {
            manifests.set(
              r.digest,
              await store.getManifest(r.digest).then(
                (x) => x.manifest,
                (e: unknown) => {
                  if (isStrataError(e, ['IMAGE_DIGEST_MISMATCH', 'IMAGE_BAD_MANIFEST', 'IMAGE_NOT_FOUND'])) return null
                  throw e
                },
              ),
            )
          }
        }
        const recs = rows.map((r) => {
          const m = manifests.get(r.digest)
          return { name: r.name, tag: r.tag, digest: r.digest, layers: m?.layers.length ?? null, size: m ? imageSize(m) : null, created: m?.created ?? null }
        })
        if (json) return printJson(recs)
        out(
          formatTable([
            ['NAME', 'TAG', 'DIGEST', 'LAYERS', 'SIZE', 'CREATED'],
            ...recs.map((r) => [r.name, r.tag, short(r.digest), r.layers === null ? '?' : String(r.layers), r.size === null ? '?' : formatBytes(r.size), r.created ? r.created.replace('T', ' ').slice(0, 19) : '?']),
          ]),
        )
      }),
    )

  g.command('inspect')
    .description('an image\'s manifest and layers (with their DFS paths)')
    .argument('<image>', 'NAME[:TAG] or NAME@sha256:…')
    .option('--json', 'print JSON')
    .action((ref: string, _o, cmd: Command) =>
      withImageStore(cmd, async ({ store, json }) => {
        const r = await store.resolve(ref)
        const tags = (await store.listTags()).filter((t) => t.digest === r.digest).map((t) => `${t.name}:${t.tag}`)
        const layers = r.manifest.layers.map((l) => ({ ...l, path: store.blobPath(l.digest) }))
        if (json) return printJson({ ref: formatImageRef(r.ref), digest: r.digest, path: store.manifestPath(r.digest), tags, size: imageSize(r.manifest), manifest: r.manifest, layers })
        const c = r.manifest.config
        out(
          formatTable([
            ['Image', formatImageRef(r.ref)],
            ['Digest', r.digest],
            ['Tags', tags.join(' ') || '<none>'],
            ['Created', r.manifest.created],
            ['Source', `${r.manifest.source.type} ${r.manifest.source.ref}${r.manifest.source.platform ? ` (${r.manifest.source.platform})` : ''}`],
            ['Size', formatBytes(imageSize(r.manifest))],
            ['Entrypoint', JSON.stringify(c.entrypoint)],
            ['Cmd', JSON.stringify(c.cmd)],
            ['Workdir', c.workdir || '/'],
            ['User', c.user || '(default)'],
            ['Env', c.env.join(' ')],
            ['Labels', Object.entries(c.labels).map(([k, v]) => `${k}=${v}`).join(' ')],
          ]),
        )
        out('')
        out(formatTable([['#', 'KIND', 'DIGEST', 'SIZE', 'PATH'], ...layers.map((l, i) => [String(i + 1), l.kind, l.digest, formatBytes(l.size), l.path])]))
      }),
    )

  g.command('tag')
    .description('point NAME[:TAG] at an existing image')
    .argument('<source>', 'NAME[:TAG] or NAME@sha256:…')
    .argument('<target>', 'NAME[:TAG]')
    .option('--json', 'print JSON')
    .action((src: string, dst: string, _o, cmd: Command) =>
      withImageStore(cmd, async ({ store, json }) => {
        const target = targetName(dst, 'target')
        const r = await store.resolve(src)
        await store.setTag(target.name, target.tag, r.digest)
        if (json) return printJson({ image: `${target.name}:${target.tag}`, digest: r.digest })
        out(`${target.name}:${target.tag} -> ${r.digest}`)
      }),
    )

  g.command('rm')
    .description('untag images (NAME@sha256:… removes every tag of NAME on that manifest, if any); `image gc` frees the space')
    .argument('<images...>', 'NAME[:TAG] or NAME@sha256:…')
    .option('--json', 'print JSON')
    .action((refs: string[], _o, cmd: Command) =>
      withImageStore(cmd, async ({ store, json }) => {
        const parsed = refs.map((r) => parseImageRef(r))
        const untagged: Array<{ image: string; digest: string }> = []
        const failed: Array<{ image: string; code: string; message: string }> = []
        const untouched: string[] = []
        let first: unknown = null
        // like `podman rmi`: every reference is tried; the command fails if one did
        for (const [i, r] of parsed.entries()) {
          try {
            if (r.digest) {
              // NAME@sha256:… names the manifest, as in inspect and tag: it must
              // exist, and the tags of NAME on it (there may be none) go
              await store.resolve(r)
              const hits = (await store.listTags()).filter((t) => t.name === r.name && t.digest === r.digest)
              if (hits.length === 0) untouched.push(refs[i]!)
              for (const h of hits) {
                await store.removeTag(h.name, h.tag)
                untagged.push({ image: `${h.name}:${h.tag}`, digest: h.digest })
              }
            } else {
              const tag = r.tag ?? 'latest'
              const d = await store.getTag(r.name, tag)
              if (!d) throw new StrataError('IMAGE_NOT_FOUND', `no image ${r.name}:${tag}`)
              await store.removeTag(r.name, tag)
              untagged.push({ image: `${r.name}:${tag}`, digest: d })
            }
          } catch (e) {
            first ??= e
            failed.push({ image: refs[i]!, code: e instanceof StrataError ? e.code : 'INTERNAL', message: e instanceof StrataError ? e.reason : String(e) })
          }
        }
        if (json) printJson({ untagged, failed })
        else {
          const lines = untagged.map((u) => `untagged ${u.image} (${u.digest})`)
          for (const u of untouched) {
            const r = parseImageRef(u)
            lines.push(`no tag of ${r.name} points at ${r.digest}: nothing untagged`)
          }
          if (lines.length) out(lines.join('\n'))
        }
        if (first !== null) throw first
      }),
    )

  g.command('gc')
    .description('remove manifests no tag points at and layers no remaining manifest uses; leased layers (in use on a node) are kept')
    .option('--dry-run', 'only report what would be removed')
    .option('--json', 'print JSON')
    .action((o: { dryRun?: boolean }, cmd: Command) =>
      withImageStore(cmd, async ({ store, json }) => {
        const r = await store.gc({ dryRun: !!o.dryRun })
        if (json) return printJson({ dryRun: !!o.dryRun, ...r })
        const verb = o.dryRun ? 'would remove' : 'removed'
        out(`${verb} ${r.removedManifests.length} manifest(s) and ${r.removedBlobs.length} layer(s), ${formatBytes(r.freedBytes)}; ${r.keptLeased.length} unreferenced layer(s) kept (leased)`)
      }),
    )

  g.command('export')
    .description('write an image as an OCI archive (for podman load, skopeo oci-archive:, docker load)')
    .argument('<image>', 'NAME[:TAG] or NAME@sha256:…')
    .argument('<out>', 'output .tar file (replaced atomically; a symlink is followed), or - (also /dev/stdout) for standard output (not a terminal; the summary and --json then go to stderr); a pipe, FIFO or device is written into')
    .option('--work-dir <dir>', 'local directory for converting layers (default: the system temp dir)')
    .option('--json', 'print JSON')
    .action((ref: string, outFile: string, o: { workDir?: string }, cmd: Command) => {
      // a regular file (through symlinks) is replaced atomically; stdout (also as /dev/stdout),
      // pipes, FIFOs and devices are written in place (see local-files.ts)
      const where = localDestination(outFile, "archive's file")
      const toStdout = where.kind === 'stdout'
      // as `docker save`: an archive is not written to a terminal
      if (toStdout && process.stdout.isTTY) throw new UsageError('refusing to write the archive to a terminal: redirect standard output, or give a file name instead of -')
      // the archive owns stdout: what the command says goes to stderr
      const say = toStdout ? (text: string) => process.stderr.write(`${text}\n`) : out
      // a reader that goes away (| head) fails the export, which removes its work files, and
      // then the command ends as SIGPIPE ends a tool (141), not at once from stdout's 'error'
      let readerGone = false
      const held = toStdout ? process.stdout.listeners('error') : []
      const onError = (e: NodeJS.ErrnoException) => {
        if (e.code !== 'EPIPE') throw e
        readerGone = true
      }
      if (toStdout) {
        process.stdout.removeAllListeners('error')
        process.stdout.on('error', onError)
      }
      const done = withImageStore(cmd, async ({ store, json, progress, signal }) => {
        const t0 = Date.now()
        const inPlace = where.kind === 'in-place' ? await openInPlace(where.path, signal) : null
        const sink = toStdout ? process.stdout : inPlace ?? (where.kind === 'replace' ? where.final : outFile)
        const r = await exportOciArchive(store, ref, sink, { ...(o.workDir ? { workDir: o.workDir } : {}), onProgress: progress, signal })
          .catch((e: unknown) => {
            if (toStdout && (readerGone || (e as NodeJS.ErrnoException)?.code === 'EPIPE')) return null
            throw inPlace ? localError(e) : e
          })
          .finally(() => inPlace && closeInPlace(inPlace, signal))
        progress.stop()
        if (r === null) {
          readerGone = true
          return
        }
        const seconds = secondsSince(t0)
        if (json) return say(JSON.stringify({ ...r, out: outFile, seconds }, null, 2))
        say(`exported ${r.refName ?? r.digest} to ${toStdout ? 'standard output' : outFile}: ${r.layers.length} layer(s), ${formatBytes(r.bytes)} in ${seconds} s`)
      })
      return done.finally(() => {
        if (!toStdout) return
        process.stdout.off('error', onError)
        for (const l of held) process.stdout.on('error', l as (e: Error) => void)
        if (readerGone) process.exit(EXIT_SIGPIPE)
      })
    })

  registerImageTransfer(g)
  return g
}
