// Prints where a V8 CPU profile (.cpuprofile from --cpu-prof or
// `npm run bench -- --profile DIR`) spent its time: top functions by self
// time, with the share of the sampled total; with --inclusive, by the time
// spent in a function and everything it called (what a call path costs).
//
//   node dist/bench/prof-summary.js FILE.cpuprofile [top=25] [--inclusive]

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

const argv = process.argv.slice(2)
const inclusive = argv.includes('--inclusive')
const [file, topArg] = argv.filter((a) => a !== '--inclusive')
if (!file) {
  console.error('usage: prof-summary FILE.cpuprofile [top]')
  process.exit(2)
}
const top = Number(topArg ?? 25)
const prof = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile
const byId = new Map(prof.nodes.map((n) => [n.id, n]))
const parentOf = new Map<number, number>()
for (const n of prof.nodes) for (const c of n.children ?? []) parentOf.set(c, n.id)
const keyOf = (n: ProfileNode): string => {
  const f = n.callFrame
  const where = f.url ? `${path.basename(f.url)}:${f.lineNumber + 1}` : ''
  return `${f.functionName || '(anonymous)'} ${where}`.trim()
}
const self = new Map<string, number>()
let total = 0
for (let i = 0; i < prof.samples.length; i++) {
  const n = byId.get(prof.samples[i]!)!
  const dt = prof.timeDeltas[i] ?? 0
  total += dt
  if (!inclusive) {
    const key = keyOf(n)
    self.set(key, (self.get(key) ?? 0) + dt)
    continue
  }
  // every function on the sampled stack, each once (recursion counts once)
  const seen = new Set<string>()
  for (let id: number | undefined = n.id; id !== undefined; id = parentOf.get(id)) {
    const key = keyOf(byId.get(id)!)
    if (key === '(root)' || seen.has(key)) continue
    seen.add(key)
    self.set(key, (self.get(key) ?? 0) + dt)
  }
}
const idle = [...self.entries()].filter(([k]) => k.startsWith('(idle)')).reduce((a, [, v]) => a + v, 0)
console.log(`${path.basename(file)}: ${(total / 1e6).toFixed(2)} s sampled, ${(((total - idle) / Math.max(total, 1)) * 100).toFixed(0)}% busy`)
for (const [k, v] of [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, top)) {
  console.log(`${((v / total) * 100).toFixed(1).padStart(5)}%  ${(v / 1000).toFixed(0).padStart(6)} ms  ${k}`)
}
