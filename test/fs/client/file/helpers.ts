// Shared setup of the file-client integration tests: a real cluster (mgmtd
// and storage processes, meta servers from the meta harness) and FileSystem
// instances on it that are shut down at teardown.

import type { ExecutionContext } from 'ava'
import { FileSystem, type FileSystemOptions } from '../../../../fs/client/index.js'
import { startMetaCluster, type MetaCluster, type MetaClusterOptions } from '../../../helpers/meta-cluster.js'

export interface FsCluster {
  m: MetaCluster
  mgmtdAddress: string
  /** a new FileSystem (own mgmtd/storage/meta clients), shut down at teardown */
  fs(o?: Partial<FileSystemOptions>): FileSystem
}

export async function startFsCluster(t: ExecutionContext, o: MetaClusterOptions = {}): Promise<FsCluster> {
  const m = await startMetaCluster(t, o)
  const made: FileSystem[] = []
  t.teardown(async () => {
    for (const f of made) await f.shutdown().catch(() => undefined)
  })
  return {
    m,
    mgmtdAddress: m.c.mgmtdAddress,
    fs(opts = {}) {
      const f = new FileSystem({
        mgmtdAddresses: [m.c.mgmtdAddress],
        periodicSyncMs: 1000,
        routingRefreshMs: 200,
        storageRetry: { deadlineMs: 20_000, readDeadlineMs: 20_000 },
        metaRetry: { totalMs: 20_000 },
        ...opts,
      })
      made.push(f)
      return f
    },
  }
}

export { patternBytes, rng } from '../../../helpers/random.js'
