// `strata image compose`: a new image from the layers of stored images,
// DSec-style (dsec-and-peers.md §1.6): the base image's layers, then the
// workspace image's, then each toolkit's, re-marked base / workspace /
// toolkit. Only a manifest is written; no layer is copied.
//
// An image built FROM an earlier one (its layers start with that image's
// layers) contributes only the layers it adds: stacking the shared prefix
// again would put the base back on top of the workspace.
//
// Config: the base's, overlaid by the workspace's and then each toolkit's:
// env merged by key (later wins), labels merged, entrypoint / cmd / workdir
// / user taken from the last image that sets them.
import crypto from 'node:crypto'
import { StrataError } from '../../fs/common/errors.js'
import { TRANSIENT_LEASE_PREFIX, type ImageStore } from './store.js'
import {
  MANIFEST_MEDIA_TYPE,
  emptyConfig,
  encodeManifest,
  formatImageRef,
  parseImageRef,
  sha256Digest,
  type ImageConfig,
  type ImageManifest,
  type LayerKind,
  type LayerRef,
} from './types.js'

export interface ComposeOptions {
  base: string
  workspace?: string
  toolkits?: string[]
  /** tag the result (default tag `latest`); without a name the manifest is stored untagged */
  name?: string
  tag?: string
  /** stops the compose before its tag is written; what it stored is removed */
  signal?: AbortSignal
}

export interface ComposeResult {
  digest: string
  manifest: ImageManifest
  /** what each part contributed: image reference, its manifest digest, layers taken */
  parts: Array<{ kind: LayerKind; ref: string; digest: string; layers: number }>
}

function envKey(kv: string): string {
  const eq = kv.indexOf('=')
  return eq < 0 ? kv : kv.slice(0, eq)
}

/** Overlays `top` on `bottom` (see the file comment). */
export function mergeConfigs(bottom: ImageConfig, top: ImageConfig): ImageConfig {
  const env = new Map<string, string>()
  for (const kv of [...bottom.env, ...top.env]) env.set(envKey(kv), kv)
  return {
    env: [...env.values()],
    entrypoint: top.entrypoint.length ? [...top.entrypoint] : [...bottom.entrypoint],
    cmd: top.cmd.length ? [...top.cmd] : [...bottom.cmd],
    workdir: top.workdir || bottom.workdir,
    user: top.user || bottom.user,
    labels: { ...bottom.labels, ...top.labels },
  }
}

/** Length of the longest of `prefixes` that `layers` starts with (by digest). */
function sharedPrefix(layers: LayerRef[], prefixes: LayerRef[][]): number {
  let best = 0
  for (const p of prefixes) {
    if (p.length === 0 || p.length > layers.length || p.length <= best) continue
    if (p.every((l, i) => layers[i]!.digest === l.digest)) best = p.length
  }
  return best
}

export interface ComposedLayers {
  layers: LayerRef[]
  config: ImageConfig
  parts: ComposeResult['parts']
}

/**
 * The layers and config `composeImage` would store, without storing
 * anything: what a sandbox created from base + workspace + toolkits mounts.
 */
export async function composeLayers(store: ImageStore, opts: Omit<ComposeOptions, 'name' | 'tag'>): Promise<ComposedLayers> {
  const parts: Array<{ kind: LayerKind; ref: string }> = [{ kind: 'base', ref: opts.base }]
  if (opts.workspace) parts.push({ kind: 'workspace', ref: opts.workspace })
  for (const t of opts.toolkits ?? []) parts.push({ kind: 'toolkit', ref: t })
  const resolved = []
  for (const p of parts) resolved.push({ ...p, ...(await store.resolve(p.ref)) })

  const layers: LayerRef[] = []
  let config: ImageConfig = emptyConfig()
  const seen: LayerRef[][] = []
  const out: ComposeResult['parts'] = []
  for (const r of resolved) {
    const own = r.manifest.layers.slice(sharedPrefix(r.manifest.layers, [layers, ...seen]))
    if (own.length === 0) throw new StrataError('INVALID_ARGUMENT', `${formatImageRef(r.ref)} adds no layers to the images before it`)
    for (const l of own) layers.push({ digest: l.digest, size: l.size, kind: r.kind, ...(l.diffId ? { diffId: l.diffId } : {}) })
    seen.push(r.manifest.layers)
    config = mergeConfigs(config, r.manifest.config)
    out.push({ kind: r.kind, ref: formatImageRef(r.ref), digest: r.digest, layers: own.length })
  }
  return { layers, config, parts: out }
}

/**
 * Composes and stores the image; the tag (if any) is written last. On a
 * failure (or an abort of `signal`) the manifest it stored is removed again,
 * unless it was stored before or another command leases it meanwhile.
 */
export async function composeImage(store: ImageStore, opts: ComposeOptions): Promise<ComposeResult> {
  const { layers, config, parts: out } = await composeLayers(store, opts)
  const manifest: ImageManifest = {
    schemaVersion: 1,
    mediaType: MANIFEST_MEDIA_TYPE,
    layers,
    config,
    source: { type: 'compose', ref: out.map((p) => `${p.kind}=${p.ref}@${p.digest}`).join(',') },
    created: new Date().toISOString(),
  }
  if (opts.name) parseImageRef(`${opts.name}:${opts.tag ?? 'latest'}`)
  // the layers are referenced by the source images' manifests, which a
  // concurrent `rm` + `gc` could drop: hold them until the new tag exists
  const holder = `${TRANSIENT_LEASE_PREFIX}compose-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
  const digest = sha256Digest(encodeManifest(manifest))
  const leased = [...new Set(layers.map((l) => l.digest)), digest]
  let created = false
  try {
    for (const d of leased) await store.addLease(holder, d)
    throwIfAborted(opts.signal)
    created = !(await store.hasManifest(digest))
    await store.putManifest(manifest)
    throwIfAborted(opts.signal)
    if (opts.name) await store.setTag(opts.name, opts.tag ?? 'latest', digest)
    created = false
  } catch (e) {
    for (const d of leased) await store.removeLease(holder, d).catch(() => undefined)
    leased.length = 0
    // kept when a tag or another command's lease reaches it by now
    if (created) await store.discard({ manifests: [digest] }).catch(() => undefined)
    throw e
  } finally {
    for (const d of leased) await store.removeLease(holder, d).catch(() => undefined)
  }
  return { digest, manifest, parts: out }
}

function throwIfAborted(signal: AbortSignal | undefined): void {
  if (!signal?.aborted) return
  const r: unknown = signal.reason
  throw r instanceof StrataError ? r : new StrataError('CANCELLED', 'compose cancelled', r === undefined ? undefined : { cause: r })
}
