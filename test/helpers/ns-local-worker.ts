// Applies ns-ops operations to local paths as whatever user this process
// runs as (the differential test spawns it with another uid): one JSON
// request {root, op} per stdin line, one JSON Outcome per stdout line.

import readline from 'node:readline'
import { applyLocal, type Op } from './ns-ops.js'

for await (const line of readline.createInterface({ input: process.stdin })) {
  const { root, op } = JSON.parse(line) as { root: string; op: Op }
  process.stdout.write(`${JSON.stringify(await applyLocal(root, op))}\n`)
}
