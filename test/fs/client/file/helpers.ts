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

/** Deterministic pseudo-random bytes (xorshift), so failures reproduce. */
export function patternBytes(n: number, seed = 1): Buffer {
  const b = Buffer.allocUnsafe(n)
  let x = seed >>> 0 || 1
  for (let i = 0; i < n; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    b[i] = x & 0xff
  }
  return b
}

export function rng(seed: number): () => number {
  let x = seed >>> 0 || 1
  return () => {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    return x / 0x100000000
  }
}
