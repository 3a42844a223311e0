// Free ports for local clusters (fs/admin/ports.ts): below the ephemeral
// range, distinct within a call and across concurrent processes, reserved
// against other callers, and stale reservations reclaimed.
import test from 'ava'
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { pickFreePorts, portRange } from '../../../fs/admin/index.js'
import { tmpDir } from '../../helpers/procs.js'

const PORTS_MODULE = new URL('../../../fs/admin/ports.js', import.meta.url).href

/**
 * pickFreePorts(n) in another process with its own reservation directory
 * setting; the process stays alive until `release` resolves (a reservation
 * whose owner has exited is free again, as it should be: its owner is not
 * going to bind the port).
 */
function pickIn(dir: string, n: number, release: Promise<void>): Promise<number[]> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', `
    const { pickFreePorts } = await import(${JSON.stringify(PORTS_MODULE)})
    console.log(JSON.stringify(await pickFreePorts(${n})))
    process.stdin.resume()
    process.stdin.on('end', () => process.exit(0))
  `], { env: { ...process.env, STRATA_PORT_RESERVATIONS: dir }, stdio: ['pipe', 'pipe', 'inherit'] })
  void release.then(() => child.stdin!.end())
  return new Promise((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString()
      if (out.includes('\n')) resolve(JSON.parse(out) as number[])
    })
    child.once('exit', (code) => reject(new Error(`picker exited ${code} before printing its ports`)))
  })
}

test('ports come from below the ephemeral range, distinct, bindable, each reserved for its caller', async (t) => {
  const dir = path.join(tmpDir(t, 'strata-ports-'), 'r')
  const { first, last } = portRange()
  const lo = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0])
  t.is(last, lo - 1)
  t.true(first >= 1024 && first < last)
  // eight processes at once, 12 ports each, all alive until every one has its ports: no port handed out twice
  let release!: () => void
  const released = new Promise<void>((r) => (release = r))
  t.teardown(() => release())
  const all = (await Promise.all(Array.from({ length: 8 }, () => pickIn(dir, 12, released)))).flat()
  release()
  t.is(new Set(all).size, all.length)
  for (const p of all) t.true(p >= first && p <= last, `${p} in range`)
  // every one has a reservation naming a (now gone) process
  for (const p of all) t.regex(fs.readFileSync(path.join(dir, String(p)), 'utf8'), /^\d+$/)
  // and is bindable
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(all[0], '127.0.0.1', () => r()))
  await new Promise<void>((r) => s.close(() => r()))
})

test('a live, recent reservation is skipped; a dead process\'s is taken over', async (t) => {
  const dir = path.join(tmpDir(t, 'strata-ports-'), 'r')
  fs.mkdirSync(dir, { recursive: true })
  const { first, last } = portRange()
  // every port reserved by this (live) process except two whose owner is gone
  const dead = spawnSync('true').pid!
  const free = [first + 100, first + 200]
  for (let p = first; p <= last; p++) fs.writeFileSync(path.join(dir, String(p)), String(free.includes(p) ? dead : process.pid))
  const prev = process.env.STRATA_PORT_RESERVATIONS
  process.env.STRATA_PORT_RESERVATIONS = dir
  t.teardown(() => {
    if (prev === undefined) delete process.env.STRATA_PORT_RESERVATIONS
    else process.env.STRATA_PORT_RESERVATIONS = prev
  })
  const got = await pickFreePorts(2)
  t.deepEqual([...got].sort((a, b) => a - b), free)
  await t.throwsAsync(pickFreePorts(1), { code: 'CAPACITY_UNAVAILABLE' })
})
