// The setup of the test files that drive `strata image` (and the import
// pipeline) against a real cluster with the umoci fixture image.
import type { TestFn } from 'ava'
import type { ImageStore } from '../../sandbox/image/store.js'
import { startImageCluster, type ImageCluster } from './image-cluster.js'
import { makeOciFixture, type OciFixture } from './oci-fixtures.js'

export interface ImageFixtureCluster {
  ic: ImageCluster
  fx: OciFixture
  /** a store on the default root (/strata/images), where the CLI works */
  store: ImageStore
}

/**
 * Registers test.serial.before / test.after.always hooks that start one
 * image cluster, build the fixture (test/helpers/oci-fixtures.ts) and open a
 * store for a test file, and remove the fixture and the cluster after the
 * last test. The returned object is filled in by the before hook: read its
 * fields in tests and in hooks registered after this call (a serial hook
 * runs before every hook registered after it), not at module level.
 */
export function useImageFixtureCluster(test: TestFn): ImageFixtureCluster {
  const s: Partial<ImageFixtureCluster> = {}
  test.serial.before(async () => {
    s.ic = await startImageCluster()
    s.fx = await makeOciFixture()
    s.store = await s.ic.store()
  })
  test.after.always(async () => {
    await s.fx?.cleanup()
    await s.ic?.close()
  })
  return s as ImageFixtureCluster
}
