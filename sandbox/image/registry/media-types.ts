// Media types of the OCI image spec and Docker's image manifest v2 schema 2.

export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json'
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json'
export const DOCKER_MANIFEST_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json'
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json'

export const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json'
export const DOCKER_CONFIG = 'application/vnd.docker.container.image.v1+json'

export const OCI_LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip'

export const INDEX_TYPES: readonly string[] = [OCI_INDEX, DOCKER_MANIFEST_LIST]
export const IMAGE_MANIFEST_TYPES: readonly string[] = [OCI_MANIFEST, DOCKER_MANIFEST]
export const MANIFEST_ACCEPT = [OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST].join(', ')
export const CONFIG_TYPES: readonly string[] = [OCI_CONFIG, DOCKER_CONFIG]
