// sandbox/rootfs: per-node shared layer mounts and per-sandbox overlay
// rootfs with read-only dataset binds. See ARCHITECTURE.md (sandbox/rootfs).
export { LayerMounts, type LayerMount, type LayerMountInfo, type LayerMountsOptions } from './layers.js'
export { Rootfs, RootfsBuilder, type DatasetMount, type MountedDataset, type RootfsBuilderOptions, type RootfsSpec } from './builder.js'
export { cleanAbsolute, resolveInRoot, type Resolved } from './resolve.js'
