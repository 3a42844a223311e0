// Reads TAP from stdin and prints the plain summary line CI looks for.
// AVA's trailer (`# pass N`, `# fail N`) is authoritative when present: a
// failed hook fails the tests it guarded without a `not ok` line for each
// ("N tests remaining"), so counting lines alone would under-report failures.
import { createInterface } from 'node:readline'
let passed = 0, failed = 0, skipped = 0
let trailerPass = null, trailerFail = null
for await (const line of createInterface({ input: process.stdin })) {
  if (/^ok \d+/.test(line)) { if (/# (SKIP|TODO)/i.test(line)) skipped++; else passed++ }
  else if (/^not ok \d+/.test(line)) failed++
  let m
  if ((m = /^# pass (\d+)$/.exec(line))) trailerPass = Number(m[1])
  if ((m = /^# fail (\d+)$/.exec(line))) trailerFail = Number(m[1])
}
if (trailerFail !== null) failed = Math.max(failed, trailerFail)
if (trailerPass !== null) passed = Math.min(passed, trailerPass)
console.log(`${passed} passed, ${failed} failed` + (skipped ? `, ${skipped} skipped` : ''))
