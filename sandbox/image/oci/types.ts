// What the OCI readers (archives, layouts, registries, S3) hand to the import
// pipeline: a parsed image config and the layers as streams of their raw
// (possibly compressed) bytes, each with the digest and size to verify.
import type { Readable } from 'node:stream'
import type { ImageSource } from '../types.js'

/** The parts of an OCI / Docker image config the importer reads (image-spec config.md). */
export interface OciImageConfig {
  architecture?: string
  os?: string
  variant?: string
  created?: string
  config?: {
    User?: string
    Env?: string[] | null
    Entrypoint?: string[] | null
    Cmd?: string[] | null
    WorkingDir?: string
    Labels?: Record<string, string> | null
    [k: string]: unknown
  } | null
  rootfs?: { type: string; diff_ids: string[] }
  history?: unknown[]
  [k: string]: unknown
}

export interface OciLayerSource {
  /** digest of the raw blob bytes `open()` yields */
  digest: string
  size: number
  mediaType: string
  /** sha256 of the uncompressed tar; when absent the config's rootfs.diff_ids entry is used */
  diffId?: string
  /** the raw blob bytes (possibly compressed) */
  open(): Promise<Readable>
}

export interface OciImageSource {
  config: OciImageConfig
  layers: OciLayerSource[]
  source: ImageSource
  /** names the archive gives the image (RepoTags, ref.name annotations), for a default --name */
  refNames?: string[]
}

/** Bytes a JSON document (index, manifest, config) of an archive may have. */
export const MAX_DOCUMENT_BYTES = 8 * 1024 * 1024
