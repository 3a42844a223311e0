// A gc that stops for good once its removals are aside, for the test that
// SIGKILLs it there (test/sandbox/image/gc-races.test.ts): prints `aside`
// and waits to be killed.
//
//   node image-gc-child.js MGMTD_ADDRESS STORE_ROOT

import { FileSystem } from '../../fs/client/index.js'
import { ImageStore } from '../../sandbox/image/store.js'

const [mgmtd, root] = process.argv.slice(2)
const f = new FileSystem({ mgmtdAddresses: [mgmtd!], periodicSyncMs: 0 })
const s = new ImageStore(f, { root: root! })
await s.gc({
  pause: async (at) => {
    if (at !== 'aside') return
    process.stdout.write('aside\n')
    await new Promise(() => undefined)
  },
})
// not reached while the test works: the pause never returns
process.stdout.write('done\n')
await f.shutdown()
