// Push and pull through the OCI distribution API (docker://HOST[:PORT]/REPO…).
export { pullRegistry, type PullOptions, type PullResult } from './pull.js'
export { pushRegistry, defaultLayerCacheDir, GZIP_LEVEL, type PushOptions, type PushResult } from './push.js'
export type { RegistryOptions } from './options.js'
export { RegistryClient, type RegistryClientOptions } from './client.js'
export { parseRegistryUrl, formatRegistryUrl, type RegistryRef } from './reference.js'
