// The KV invariant checker (fs/meta/fsck.ts) over a test meta cluster: the
// in-memory KV of in-process servers, or the lmdb environment the meta
// processes share, opened read-only alongside them and closed again.

import { fsckKvPath, fsckTxn, type FsckReport } from '../../fs/meta/fsck.js'
import type { MetaCluster } from './meta-cluster.js'

export async function fsckCluster(m: MetaCluster): Promise<FsckReport> {
  if (m.kv) return m.kv.readOnly((txn) => fsckTxn(txn))
  return fsckKvPath(m.kvPath)
}
