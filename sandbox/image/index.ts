// sandbox/image: images as EROFS layers in the DFS (docs/images.md).
export * from './types.js'
export * from './store.js'
export * from './progress.js'
export * from './compose.js'
export * from './oci/index.js'
export * from './layer/index.js'
export * from './s3/index.js'
export * from './debootstrap.js'
export {
  pullRegistry,
  pushRegistry,
  defaultLayerCacheDir,
  GZIP_LEVEL,
  RegistryClient,
  parseRegistryUrl,
  formatRegistryUrl,
  type PullOptions as RegistryPullOptions,
  type PullResult as RegistryPullResult,
  type PushOptions as RegistryPushOptions,
  type PushResult as RegistryPushResult,
  type RegistryOptions,
  type RegistryClientOptions,
  type RegistryRef,
} from './registry/index.js'
