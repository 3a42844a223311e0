// One OCI layer tar → an EROFS layer file, in one pass and without touching
// the disk for the tree: the same result as unpackLayer(…, { mode: 'layer' })
// followed by mkfs.erofs (the same names, types, modes, owners, times,
// xattrs, hard links, whiteouts and opaque directories, and the same errors
// for the same bad input), but file data goes straight from the tar into the
// image and nothing is unpacked, so an import neither writes the tree nor
// reads it back, and needs no root privileges for ownership or device nodes.
// The builder is layer-builder.ts; README.md states the rules.
import type { Readable } from 'node:stream'
import { buildLayer, type LayerBuildOptions } from './layer-builder.js'
import { TarReader } from './tar-reader.js'
import type { UnpackStats } from './types.js'

export type TarToErofsOptions = LayerBuildOptions

/**
 * Builds the EROFS layer of one uncompressed OCI layer tar at `outFile`
 * (written to a temporary sibling, renamed into place when complete). The
 * same tar gives the same bytes. Errors as unpackLayer's (IMAGE_BAD_ARCHIVE,
 * IMAGE_UNSAFE_PATH, IMAGE_DUPLICATE_ENTRY), IMAGE_BUILD_FAILED or NO_SPACE
 * when the image cannot be written. The input is consumed (destroyed on
 * failure).
 */
export async function tarToErofs(tar: Readable, outFile: string, opts: TarToErofsOptions = {}): Promise<{ size: number; stats: UnpackStats }> {
  // sparse files' holes are bounded by the builder, which stores most of them as holes
  const r = new TarReader(tar, { holeCap: Infinity })
  try {
    return await buildLayer(outFile, opts, async (b) => {
      for (let h = await r.next(); h !== null; h = await r.next()) {
        await b.entry(h, r)
        if (opts.ready) await opts.ready()
      }
    })
  } finally {
    r.close()
  }
}
