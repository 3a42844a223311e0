// Shapes shared by the layer modules (sandbox/image/layer). See README.md here.

/** A timestamp with exact nanoseconds (tar PAX and EROFS both keep them). */
export interface Timespec {
  sec: number
  nsec: number
}

export type UnpackMode = 'layer' | 'apply'

export interface UnpackOptions {
  /**
   * `layer`: destDir must be empty; OCI whiteouts become overlay whiteouts (char 0/0, opaque xattr).
   * `apply`: the layer is applied over destDir (squashing); whiteouts delete lower entries.
   */
  mode: UnpackMode
  /**
   * Keep times before 1970 (the tree is built by dirToErofs). Default: they
   * become 1970, for mkfs.erofs 1.5, which would store the build time.
   */
  keepTimesBefore1970?: boolean
  /**
   * Most hole bytes the layer's sparse files may have, summed (the tar
   * reader's holeCap; default SPARSE_HOLE_CAP, 1 GiB). Holes are never
   * written, so the tree costs no disk for them; the cap is for a tree that
   * mkfs.erofs builds, which reads them as zeros. Infinity when dirToErofs
   * builds it (it keeps holes, and bounds what they cost in the layer).
   */
  holeCap?: number
  /**
   * Most bytes the layer's sparse files may take on disk beyond their data
   * (the rest of each 4 KiB block their data touches), summed; past it
   * IMAGE_BAD_ARCHIVE before the file is written. Default SPARSE_HOLE_CAP
   * (1 GiB); an option for tests.
   */
  slackCap?: number
}

export interface UnpackStats {
  /** Tar entries read (PAX and GNU long-name records are not counted). */
  entries: number
  /** Regular files written (hard links not counted). */
  files: number
  /** Bytes of regular file data written. */
  bytes: number
  /** Whiteouts and opaque markers applied. */
  whiteouts: number
  /** Newest entry mtime, whole seconds since the epoch (0 for an empty layer). */
  maxMtime: number
}

export interface BuildErofsOptions {
  /** Compress file data (mkfs.erofs -z). Default: none. */
  compress?: 'lz4' | 'lz4hc'
}

export interface BuildErofsResult {
  size: number
  /** sha256 of the file's bytes, `sha256:<hex>`. */
  digest: string
}

export interface LayerToTarOptions {
  /** End `out` after the tar (default true). */
  end?: boolean
  /** Directory for the private temporary mount point (default os.tmpdir()). */
  tmpDir?: string
  /**
   * Stops the tar part-way (Ctrl-C of an export or a docker push): the call
   * rejects with the signal's reason, `out` is destroyed and the layer unmounted.
   */
  signal?: AbortSignal
}

export interface LayerToTarResult {
  /** sha256 of the tar bytes, `sha256:<hex>`. */
  diffId: string
  size: number
}
