// sandbox/image/layer: OCI layer tar ↔ directory ↔ EROFS layer file. See README.md.
export { unpackLayer } from './unpack.js'
export { decompressStream, sniffCompression, compressionOfMediaType, type Compression } from './decompress.js'
export { buildErofs, buildErofsFile, erofsIsPlain, EROFS_SUPERBLOCK_BYTES, EROFS_SUPERBLOCK_OFFSET, EROFS_UUID } from './erofs.js'
export { tarToErofs, type TarToErofsOptions } from './tar-to-erofs.js'
export { dirToErofs, type DirToErofsOptions } from './dir-to-erofs.js'
export { sha256File } from './hash.js'
export { layerToTar } from './to-tar.js'
export { sweepStaleErofsMounts, withErofsMount } from './mount.js'
export { readTar, type TarEntry, type TarEntryHeader, type TarEntryType } from './tar-reader.js'
export type {
  BuildErofsOptions,
  BuildErofsResult,
  LayerToTarOptions,
  LayerToTarResult,
  Timespec,
  UnpackMode,
  UnpackOptions,
  UnpackStats,
} from './types.js'
