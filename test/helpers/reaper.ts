// Loaded into every AVA worker before its test file (package.json
// `ava.require`). A worker that dies of an uncaught exception, or that AVA
// stops on a timeout, skips its `after.always` hooks, so the clusters, FUSE
// daemons and servers its `before` hooks started would keep running (and
// their mounts stay) for the rest of the suite and beyond. Every process a
// test starts inherits STRATA_TEST_OWNER=<worker pid> from the worker's
// environment (cluster daemons are spawned with it too), so when the worker
// exits, whatever still carries its pid is killed, and FUSE mounts whose
// daemon is gone are detached.
//
// On a normal exit every test has torn its resources down already and this
// finds nothing.

import { execFileSync } from 'node:child_process'
import fs from 'node:fs'

const OWNER = 'STRATA_TEST_OWNER'
const me = String(process.pid)
process.env[OWNER] = me

/** Pids of live processes (other than this one) whose environment names this worker as owner. */
function ownedProcesses(): number[] {
  const mark = `${OWNER}=${me}\0`
  const out: number[] = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || name === me) continue
    try {
      if (`${fs.readFileSync(`/proc/${name}/environ`, 'latin1')}\0`.includes(mark)) out.push(Number(name))
    } catch {
      // gone, or not ours to read
    }
  }
  return out
}

/** FUSE mount points whose daemon is gone: any access fails with ENOTCONN. */
function deadFuseMounts(): string[] {
  let info: string
  try {
    info = fs.readFileSync('/proc/self/mountinfo', 'utf8')
  } catch {
    return []
  }
  const out: string[] = []
  for (const line of info.split('\n')) {
    const sep = line.indexOf(' - ')
    if (sep < 0 || !line.slice(sep + 3).startsWith('fuse')) continue
    const mountPoint = line.split(' ')[4]!.replace(/\\(\d{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)))
    try {
      fs.statSync(mountPoint)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOTCONN') out.push(mountPoint)
    }
  }
  return out
}

let reaped = false
function reap(): void {
  if (reaped) return
  reaped = true
  const pids = ownedProcesses()
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL')
    } catch {
      // already gone
    }
  }
  if (pids.length === 0) return
  // give the kernel a moment to drop the killed FUSE daemons' connections
  const until = Date.now() + 200
  while (Date.now() < until) {
    // busy wait: nothing asynchronous runs in an exit handler
  }
  for (const mnt of deadFuseMounts()) {
    try {
      execFileSync('umount', ['-l', mnt], { stdio: 'ignore' })
    } catch {
      // someone else got it first
    }
  }
  process.stderr.write(`test worker ${me} exited with ${pids.length} of its processes still running; killed them\n`)
}

process.on('exit', reap)
// AVA stops a timed-out worker with SIGTERM, which would end it without 'exit' handlers.
process.once('SIGTERM', () => {
  reap()
  process.exit(143)
})
