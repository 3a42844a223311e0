// Media types of the OCI image spec and Docker's image manifest v2 schema 2
// that imports and registry pulls accept, and how a layer's bytes are
// compressed. The one list for all of sandbox/image.
import { StrataError } from '../../../fs/common/errors.js'
import type { Compression } from '../layer/decompress.js'

export const OCI_LAYOUT_FILE = 'oci-layout'
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json'
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
export const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json'
export const OCI_LAYER_TAR = 'application/vnd.oci.image.layer.v1.tar'
export const OCI_LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip'
export const OCI_LAYER_ZSTD = 'application/vnd.oci.image.layer.v1.tar+zstd'
export const DOCKER_MANIFEST_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json'
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json'
export const DOCKER_CONFIG = 'application/vnd.docker.container.image.v1+json'
export const DOCKER_LAYER_TAR = 'application/vnd.docker.image.rootfs.diff.tar'
export const DOCKER_LAYER_GZIP = 'application/vnd.docker.image.rootfs.diff.tar.gzip'

export const INDEX_TYPES: readonly string[] = [OCI_INDEX, DOCKER_MANIFEST_LIST]
export const MANIFEST_TYPES: readonly string[] = [OCI_MANIFEST, DOCKER_MANIFEST]
export const CONFIG_TYPES: readonly string[] = [OCI_CONFIG, DOCKER_CONFIG]
/** `Accept` of a registry manifest GET: every index and image manifest type above. */
export const MANIFEST_ACCEPT = [OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST].join(', ')

/** Layer media types an import accepts, with the compression each declares. */
export const LAYER_MEDIA_TYPES: Readonly<Record<string, Compression>> = {
  [OCI_LAYER_TAR]: 'none',
  [OCI_LAYER_GZIP]: 'gzip',
  [OCI_LAYER_ZSTD]: 'zstd',
  'application/vnd.oci.image.layer.nondistributable.v1.tar': 'none',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+gzip': 'gzip',
  'application/vnd.oci.image.layer.nondistributable.v1.tar+zstd': 'zstd',
  [DOCKER_LAYER_TAR]: 'none',
  [DOCKER_LAYER_GZIP]: 'gzip',
  'application/vnd.docker.image.rootfs.diff.tar.zstd': 'zstd',
  'application/vnd.docker.image.rootfs.foreign.diff.tar.gzip': 'gzip',
}

/** The declared compression of a layer media type; IMAGE_UNSUPPORTED_MEDIA_TYPE for anything else. */
export function layerCompression(mediaType: string): Compression {
  const c = LAYER_MEDIA_TYPES[mediaType]
  if (c === undefined) throw new StrataError('IMAGE_UNSUPPORTED_MEDIA_TYPE', `layer media type ${JSON.stringify(mediaType)} is not supported (OCI and Docker layer tars, plain, gzip or zstd)`)
  return c
}
