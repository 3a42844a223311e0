// Shared setup of the rootfs tests: one cluster per test file with meta
// servers as child processes and a FUSE daemon (also a child: the layer and
// overlay mounts are synchronous calls, and the kernel reads the layer file
// through FUSE meanwhile), the fixture image imported into the store, and a
// per-test state directory whose mounts are all removed at teardown, before
// a single file is deleted (a leftover dataset bind would otherwise let the
// rm reach into the DFS).
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { ExecutionContext, TestFn } from 'ava'
import { FileSystem } from '../../../fs/client/index.js'
import { readMounts } from '../../../fs/fuse/mounts.js'
import { importPath } from '../../../sandbox/image/oci/import.js'
import { ImageStore } from '../../../sandbox/image/store.js'
import type { ImageManifest } from '../../../sandbox/image/types.js'
import { LayerMounts, RootfsBuilder } from '../../../sandbox/rootfs/index.js'
import { mountsUnder, unmountTree } from '../../../sandbox/rootfs/mounts.js'
import { mountFuse, type FuseMount } from '../../fs/fuse/helpers.js'
import { sharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { makeOciFixture, run, umociUnpack, type OciFixture } from '../../helpers/oci-fixtures.js'
import { freePort } from '../../helpers/procs.js'
import { snapshotTree, type Tree } from '../../helpers/tree-compare.js'

export interface RootfsEnv {
  m: MetaCluster
  fuse: FuseMount
  fuseAddress: string
  fs: FileSystem
  store: ImageStore
  fx: OciFixture
  manifest: ImageManifest
  /** `umoci unpack` of the fixture */
  reference: Tree
  /** the FUSE daemon's bytes read from the DFS so far */
  fuseBytesRead(): Promise<number>
}

export function useRootfsCluster(test: TestFn): RootfsEnv {
  const env = {} as RootfsEnv
  const teardowns: Array<() => unknown> = []
  let close: (() => Promise<void>) | undefined
  test.before(async () => {
    const s = await sharedMetaCluster({ chunkSize: 1024 * 1024, stripeSize: 2, inProcess: false })
    close = s.close
    env.m = s.m
    const ctx = { teardown: (fn: () => unknown) => void teardowns.push(fn), log: () => undefined } as unknown as ExecutionContext
    env.fuseAddress = `127.0.0.1:${await freePort()}`
    env.fuse = await mountFuse(ctx, s.m, { name: 'node-mnt', listen: env.fuseAddress })
    env.fs = new FileSystem({ mgmtdAddresses: [s.m.c.mgmtdAddress], periodicSyncMs: 0, storageRetry: { deadlineMs: 30_000, readDeadlineMs: 30_000 }, metaRetry: { totalMs: 30_000 } })
    env.store = new ImageStore(env.fs)
    await env.store.open()
    env.fx = await makeOciFixture()
    const r = await importPath(env.store, env.fx.layout, { name: 'fx/rootfs', tag: 'v1', workDir: path.join(env.fx.dir, 'work') })
    env.manifest = r.manifest
    env.reference = await snapshotTree(await umociUnpack(env.fx, path.join(env.fx.dir, 'bundle')))
    env.fuseBytesRead = async () => {
      const st = (await s.m.rpc.stats(env.fuseAddress)) as { fs?: { bytesRead?: number } }
      return st.fs?.bytesRead ?? NaN
    }
  })
  test.after.always(async () => {
    await env.fx?.cleanup()
    for (const fn of teardowns.reverse()) await fn()
    await env.store?.close().catch(() => undefined)
    await env.fs?.shutdown().catch(() => undefined)
    await close?.()
  })
  return env
}

/**
 * A local state directory for one test. At teardown every mount under it is
 * removed first; the files go only when no mount is left.
 */
export function stateDir(t: ExecutionContext, before: () => unknown = () => undefined): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-rootfs-'))
  t.teardown(async () => {
    await before()
    try {
      await unmountTree(dir)
    } catch (e) {
      t.log(`teardown: ${(e as Error).message}`)
    }
    if (mountsUnder(dir).length) {
      t.log(`teardown: mounts remain under ${dir}; not removing it`)
      return
    }
    if (!process.env.STRATA_KEEP_TEST_DIRS) fs.rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

let nodeSeq = 0

/** A LayerMounts + RootfsBuilder on a fresh state dir; leftovers are swept and leases dropped at teardown. */
export function node(t: ExecutionContext, env: RootfsEnv, dir?: string): { layers: LayerMounts; builder: RootfsBuilder; dir: string; nodeId: string } {
  const nodeId = `test-node-${process.pid}-${++nodeSeq}`
  let layers: LayerMounts | undefined
  const d =
    dir ??
    stateDir(t, async () => {
      await unmountTree(path.join(d, 'sandboxes'))
      await layers?.sweep().catch(() => undefined)
    })
  layers = new LayerMounts({ fuseMnt: env.fuse.mnt, stateDir: d, store: env.store, nodeId })
  return { layers, builder: new RootfsBuilder({ layers }), dir: d, nodeId }
}

/** Mount entries whose mount point is exactly `p`. */
export function mountCount(p: string): number {
  return readMounts().filter((m) => m.mountpoint === p).length
}

/** Builds an EROFS layer from a local tree and stores it; returns its digest and size. */
export async function storeLayer(env: RootfsEnv, t: ExecutionContext, fill: (root: string) => Promise<void>): Promise<{ digest: string; size: number }> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-rootfs-layer-'))
  t.teardown(() => fs.rmSync(work, { recursive: true, force: true }))
  const tree = path.join(work, 'tree')
  fs.mkdirSync(tree)
  await fill(tree)
  const file = path.join(work, 'layer.erofs')
  await run('mkfs.erofs', [file, tree])
  const b = await env.store.putBlobFile(file)
  return { digest: b.digest, size: b.size }
}
