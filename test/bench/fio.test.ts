// The fio driver of `npm run bench -- fuse-fio` on a tiny local file: it runs
// fio and reads what the benchmark reports from fio's JSON. No timing is
// checked, only that the numbers are there.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import test from 'ava'
import { runFio } from '../../bench/fio.js'

function haveFio(): boolean {
  try {
    execFileSync('fio', ['--version'], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

test('runFio parses a write and a random read job', async (t) => {
  if (!haveFio()) {
    t.pass('fio is not installed (scripts/setup.sh installs it)')
    return
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fio-test-'))
  try {
    const common = [`--filename=${path.join(dir, 'f.dat')}`, '--size=4m', '--ioengine=psync', '--direct=0', '--fallocate=none']
    const w = await runFio(['--name=w', '--rw=write', '--bs=1m', '--end_fsync=1', ...common], 60_000)
    t.is(w.write.bytes, 4 * 1024 * 1024)
    t.true(w.write.bwBytes > 0)
    t.is(w.read.bytes, 0)
    t.true(w.cpuSeconds >= 0)
    t.regex(w.version, /fio/)
    const r = await runFio(['--name=r', '--rw=randread', '--bs=4k', ...common], 60_000)
    t.is(r.read.bytes, 4 * 1024 * 1024)
    t.true(r.read.iops > 0)
    t.true(Number.isFinite(r.read.p50Ms) && Number.isFinite(r.read.p99Ms))
    t.true(r.read.p99Ms >= r.read.p50Ms)
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('runFio reports a failing job', async (t) => {
  if (!haveFio()) {
    t.pass('fio is not installed')
    return
  }
  // an invalid option: fio exits non-zero without touching any file
  await t.throwsAsync(runFio(['--name=bad', '--rw=bogus', '--size=1m', '--filename=/dev/null'], 60_000), { message: /fio .* failed/ })
})
