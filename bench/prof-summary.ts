// Prints where a V8 CPU profile (.cpuprofile from --cpu-prof or
// `npm run bench -- --profile DIR`) spent its time: top functions by self
// time, with the share of the sampled total.
//
//   node dist/bench/prof-summary.js FILE.cpuprofile [top=25]

import fs from 'node:fs'
import path from 'node:path'

interface ProfileNode {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}
interface Profile {
  nodes: ProfileNode[]
  samples: number[]
  timeDeltas: number[]
}

const [file, topArg] = process.argv.slice(2)
if (!file) {
  console.error('usage: prof-summary FILE.cpuprofile [top]')
  process.exit(2)
}
const top = Number(topArg ?? 25)
const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile
const byId = new Map(prof.nodes.map((n) => [n.id, n]))
const self = new Map<string, number>()
let total = 0
for (let i = 0; i < prof.samples.length; i++) {
  const n = byId.get(prof.samples[i]!)!
  const dt = prof.timeDeltas[i] ?? 0
  total += dt
  const f = n.callFrame
  const where = f.url ? `${path.basename(f.url)}:${f.lineNumber + 1}` : ''
  const key = `${f.functionName || '(anonymous)'} ${where}`.trim()
  self.set(key, (self.get(key) ?? 0) + dt)
}
const idle = [...self.entries()].filter(([k]) => k.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0)
console.log(`${path.basename(file)}: ${(total / 1e6).toFixed(2)} s sampled, ${(((total - idle) / Math.max(total, 1)) * 100).toFixed(0)}% busy`)
for (const [k, v] of [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${((v / total) * 100).toFixed(1).padStart(5)}%  ${(v / 1000).toFixed(0).padStart(6)} ms  ${k}`)
}
