// sandbox/rootfs: the root filesystems of sandboxes on one node.
//
//   LayerMounts (one per node)   every layer file in use is mounted once, as a file-backed EROFS
//                                filesystem read through the node's FUSE mount of the DFS
//                                (<fuseMnt>/strata/images/blobs/sha256/<hex>), at
//                                <stateDir>/layers/<hex>; reference-counted per user (sandbox id),
//                                leased in the image store (holder = node id) while mounted.
//                                adopt(digest, users) re-creates the counts after a daemon restart;
//                                sweep() unmounts what nobody claimed.
//   RootfsBuilder.create(spec)   overlay of those mounts (top layer first) with upper and work dirs
//                                under the sandbox's state dir, at <stateDir>/rootfs; datasets are
//                                read-only (nosuid, nodev) binds of DFS paths at targets resolved
//                                inside the rootfs. Nothing is copied or unpacked. Failure undoes
//                                everything; Rootfs.destroy() is idempotent and works on half-built
//                                state.
//
// After a daemon restart: builder.adopt(spec) for every sandbox still running, new Rootfs(id,
// stateDir).destroy() for the ones that are gone, then layers.sweep().
//
// Which layers a sandbox gets (an image name, or base + workspace + toolkits) is resolved by
// sandbox/image (store.resolve, composeImage); this part takes digests, lowest first.
//
// See ARCHITECTURE.md (sandbox/rootfs).
export { LayerMounts, type LayerMount, type LayerMountInfo, type LayerMountsOptions } from './layers.js'
export { Rootfs, RootfsBuilder, type DatasetMount, type MountedDataset, type RootfsBuilderOptions, type RootfsSpec } from './builder.js'
export { checkMountTarget, cleanAbsolute, reservedTarget, resolveInRoot, RESERVED_MOUNT_TARGETS, type Resolved } from './resolve.js'
export { mountsUnder, unmountAll, unmountTree } from './mounts.js'
