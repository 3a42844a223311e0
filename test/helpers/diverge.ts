// Diverged replicas for resync tests: rewrites a committed chunk in a stopped
// storage node's target store with the chunk engine's own API, so the
// predecessor's resync diff finds committed data it cannot explain.
import { crc32c } from '../../fs/common/crc32c.js'
import { ChunkEngine } from '../../fs/storage/engine/index.js'

/**
 * 'chain-ver-high': a next version committed under a chain version the chain
 * never gave it (remote-chain-ver-high; what an older Strata's stalled head
 * left). 'checksum': other bytes under the very same versions
 * (checksum-mismatch; what a damaged disk leaves).
 */
export type Divergence = 'chain-ver-high' | 'checksum'

/** `dir` is the target's directory (DATA/targets/<targetId>); its storage process must not run. */
export async function divergeChunk(dir: string, targetId: number, chunkId: Buffer, how: Divergence, fill = 0xa5): Promise<void> {
  const engine = await ChunkEngine.open({ dir, targetId, fsync: true })
  try {
    const m = engine.getMeta(chunkId)
    if (!m || m.state !== 'COMMIT') throw new Error(`chunk ${chunkId.toString('hex')} is not committed on target ${targetId}`)
    const data = Buffer.alloc(m.size || m.chunkSize, fill)
    const chainVer = how === 'chain-ver-high' ? m.chainVer + 50 : m.chainVer
    const ver = how === 'chain-ver-high' ? m.updateVer + 1 : m.commitVer
    await engine.applyUpdate(
      { key: { chainId: 0, chainVer, chunkId }, offset: 0, length: data.length, chunkSize: m.chunkSize, data, updateVer: ver, updateType: 'WRITE', checksum: crc32c(data) },
      // the same-version rewrite goes in as a syncing full-chunk replace, the only update that may reuse a version
      { fromClient: false, isSyncing: how === 'checksum', chainVer },
    )
    await engine.commit(chunkId, ver, chainVer)
    const after = engine.getMeta(chunkId)!
    if (after.checksum === m.checksum || (how === 'checksum' && (after.commitVer !== m.commitVer || after.chainVer !== m.chainVer))) {
      throw new Error(`chunk ${chunkId.toString('hex')} did not diverge as asked (${how})`)
    }
  } finally {
    await engine.close()
  }
}
