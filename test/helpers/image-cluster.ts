// A cluster for image tests: mgmtd, storage and meta processes shared by the
// serial tests of one file, plus FileSystem/ImageStore instances on it and
// the arguments the `strata image` CLI needs to reach it.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { ExecutionContext, TestFn } from 'ava'
import { FileSystem } from '../../fs/client/index.js'
import { ImageStore } from '../../sandbox/image/store.js'
import { sharedMetaCluster, type MetaCluster } from './meta-cluster.js'

export interface ImageCluster {
  m: MetaCluster
  /** `--mgmtd-address …` for the CLI */
  cliArgs: string[]
  /** a FileSystem on the cluster, shut down by close() */
  fs(): FileSystem
  /** an opened store under `root` (a fresh root per test keeps tests apart) */
  store(root?: string): Promise<ImageStore>
  close(): Promise<void>
}

export async function startImageCluster(): Promise<ImageCluster> {
  const { m, close } = await sharedMetaCluster({ chunkSize: 1024 * 1024, stripeSize: 2 })
  const made: FileSystem[] = []
  const stores: ImageStore[] = []
  const mk = () => {
    const f = new FileSystem({
      mgmtdAddresses: [m.c.mgmtdAddress],
      periodicSyncMs: 0,
      storageRetry: { deadlineMs: 30_000, readDeadlineMs: 30_000 },
      metaRetry: { totalMs: 30_000 },
    })
    made.push(f)
    return f
  }
  return {
    m,
    cliArgs: ['--mgmtd-address', m.c.mgmtdAddress],
    fs: mk,
    async store(root) {
      const s = new ImageStore(mk(), root ? { root } : {})
      stores.push(s)
      await s.open()
      return s
    },
    async close() {
      for (const s of stores) await s.close().catch(() => undefined)
      for (const f of made) await f.shutdown().catch(() => undefined)
      await close()
    },
  }
}

/** A local temp directory removed at teardown. */
export function localTmp(t: ExecutionContext, prefix = 'strata-img-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(() => {
    if (!process.env.STRATA_KEEP_TEST_DIRS) fs.rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

/**
 * One image cluster for the serial tests of a file (started in test.before,
 * closed in test.after.always); `fresh()` gives a store under a new root each call.
 */
export function useImageStores(test: TestFn, rootPrefix: string): { fresh: () => Promise<ImageStore>; cluster: () => ImageCluster } {
  let ic: ImageCluster | undefined
  let n = 0
  test.before(async () => {
    ic = await startImageCluster()
  })
  test.after.always(async () => {
    await ic?.close()
  })
  return {
    fresh: async () => ic!.store(`${rootPrefix}-${++n}`),
    cluster: () => ic!,
  }
}
