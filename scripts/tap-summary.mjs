// Reads TAP from stdin and prints the plain summary line CI looks for.
import { createInterface } from 'node:readline'
let passed = 0, failed = 0, skipped = 0
for await (const line of createInterface({ input: process.stdin })) {
  if (/^ok \d+/.test(line)) { if (/# (SKIP|TODO)/i.test(line)) skipped++; else passed++ }
  else if (/^not ok \d+/.test(line)) failed++
}
console.log(`${passed} passed, ${failed} failed` + (skipped ? `, ${skipped} skipped` : ''))
