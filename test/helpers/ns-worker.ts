// A client process for the concurrent fsck test: runs a seeded random
// namespace workload (ns-ops.ts) on one Strata directory through its own
// FileSystem, printing `progress N` every 20 operations and a JSON summary
// of the errnos seen at the end. Errors are expected (other workers change
// the same names); anything that is not a Strata or errno error, or an EIO
// (an internal or inconsistency error at the boundary), exits 1.
//
//   node ns-worker.js MGMTD_ADDRESS ROOT SEED COUNT

import { FileSystem } from '../../fs/client/index.js'
import { applyStrata, generateOps } from './ns-ops.js'

const [mgmtd, root, seedArg, countArg] = process.argv.slice(2)
const f = new FileSystem({ mgmtdAddresses: [mgmtd!], routingRefreshMs: 200, periodicSyncMs: 1000, metaRetry: { totalMs: 60_000 }, storageRetry: { deadlineMs: 60_000, readDeadlineMs: 60_000 } })
const seen: Record<string, number> = {}
let bad = 0
try {
  const ops = generateOps(Number(seedArg), Number(countArg))
  for (let i = 0; i < ops.length; i++) {
    const o = await applyStrata(f, root!, ops[i]!).catch((e: unknown) => ({ ok: false as const, errno: `THROWN ${String(e)}` }))
    const k = o.ok ? 'OK' : o.errno
    seen[k] = (seen[k] ?? 0) + 1
    if (!o.ok && (o.errno === 'EIO' || o.errno.startsWith('THROWN'))) {
      bad++
      console.error(`op ${i} ${JSON.stringify(ops[i])}: ${o.errno}`)
    }
    if ((i + 1) % 20 === 0) console.log(`progress ${i + 1}`)
  }
} finally {
  await f.shutdown().catch(() => undefined)
}
console.log(JSON.stringify({ seen, bad }))
process.exit(bad ? 1 : 0)
