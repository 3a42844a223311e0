import test from 'ava'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { until } from './procs.js'

const REAPER = fileURLToPath(new URL('./reaper.js', import.meta.url))

test('every test worker is its children’s owner', (t) => {
  t.is(process.env.STRATA_TEST_OWNER, String(process.pid))
})

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/**
 * A stand-in for a test worker: loads the reaper, starts a detached
 * long-running process (as `cluster up` starts its daemons), reports its pid,
 * then ends the way `how` says.
 */
async function workerThatLeaks(t: import('ava').ExecutionContext, how: 'uncaught' | 'sigterm'): Promise<{ daemon: number; code: number | null; stderr: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-reaper-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const script = path.join(dir, 'worker.mjs')
  fs.writeFileSync(
    script,
    `import ${JSON.stringify(REAPER)}
import { spawn } from 'node:child_process'
const d = spawn('sleep', ['600'], { detached: true, stdio: 'ignore' })
d.unref()
process.stdout.write(String(d.pid) + '\\n')
${how === 'uncaught' ? "setTimeout(() => { throw new Error('boom') }, 50)" : 'setInterval(() => {}, 1000)'}
`,
  )
  const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let stderr = ''
  child.stdout.on('data', (b: Buffer) => (out += b.toString()))
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()))
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  const daemon = await until(() => (out.includes('\n') ? Number(out.trim()) : null), 10000, 'the stand-in worker reports its daemon')
  t.teardown(() => {
    if (alive(daemon)) process.kill(daemon, 'SIGKILL')
  })
  if (how === 'sigterm') child.kill('SIGTERM')
  return { daemon, code: await exited, stderr }
}

test('a worker that dies of an uncaught exception takes its detached processes with it', async (t) => {
  const { daemon, code, stderr } = await workerThatLeaks(t, 'uncaught')
  t.not(code, 0)
  t.regex(stderr, /boom/)
  t.regex(stderr, /1 of its processes still running; killed them/)
  await until(() => !alive(daemon), 5000, 'the detached process is gone')
  t.pass()
})

test('a worker stopped with SIGTERM (an AVA timeout) takes its detached processes with it', async (t) => {
  const { daemon, code } = await workerThatLeaks(t, 'sigterm')
  t.is(code, 143)
  await until(() => !alive(daemon), 5000, 'the detached process is gone')
  t.pass()
})
