// Free TCP ports for the daemons of local clusters. Several clusters come up
// at once on one host (parallel tests, benchmarks, users), and a port chosen
// by binding port 0 and closing it again can be handed out a second time
// before its daemon binds it: the kernel gives the same ephemeral port to
// another port-0 bind, or uses it as the source port of an outgoing
// connection. So ports are chosen below the kernel's ephemeral range (never
// used for port-0 binds or outgoing connections) and reserved across
// processes with a marker file per port until the daemon had time to bind.

import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import crypto from 'node:crypto'
import { StrataError } from '../common/errors.js'
import { pidAlive } from '../fuse/mounts.js'

/** How long a reservation keeps a port from other callers: a daemon binds within this. */
const RESERVATION_MS = 120_000
/** How many ports below the ephemeral range are used. */
const SPAN = 12_288

function reservationDir(): string {
  return process.env.STRATA_PORT_RESERVATIONS || path.join(os.tmpdir(), 'strata-port-reservations')
}

/** The ports handed out: the SPAN ports just below the kernel's ephemeral range, never below 1024. */
export function portRange(): { first: number; last: number } {
  let lo = 32768
  try {
    const [a] = fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number)
    if (a && Number.isInteger(a)) lo = a
  } catch { /* not Linux: the IANA-style default */ }
  const last = lo - 1
  const first = Math.max(1024, last - SPAN + 1)
  if (last - first < 64) throw new StrataError('INVALID_ARGUMENT', `the ephemeral port range starts at ${lo}: too few ports below it for local clusters; use --base-port`)
  return { first, last }
}

/** Claims `port` for this process unless a live, recent reservation holds it. */
function reserve(dir: string, port: number): boolean {
  const file = path.join(dir, String(port))
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: 'wx' })
      return true
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e
    }
    try {
      const st = fs.statSync(file)
      const pid = Number(fs.readFileSync(file, 'utf8'))
      // no pid yet: its owner created the file and has not written it (writeFileSync 'wx' is
      // create, then write); taking that as stale handed one port to two processes
      const dead = pid > 0 && !pidAlive(pid)
      if (Date.now() - st.mtimeMs < RESERVATION_MS && !dead) return false
      fs.unlinkSync(file) // stale: its owner is gone or had all the time it needed
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      // another user's stale reservation (the directory is sticky): leave that port alone
      if (code === 'EPERM' || code === 'EACCES') return false
      if (code !== 'ENOENT') throw e
    }
  }
  return false
}

function listen(s: net.Server, port: number, host: string): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    s.once('error', () => resolve(false))
    s.listen({ port, host, exclusive: true }, () => resolve(true))
  })
}

/** Picks `count` distinct free TCP ports on `host`, each reserved against other local callers. */
export async function pickFreePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const { first, last } = portRange()
  const dir = reservationDir()
  if (!fs.existsSync(dir)) {
    fs.mkdirSync(dir, { recursive: true })
    // shared by every user's clusters, like /tmp itself (the umask would narrow mkdir's mode)
    try { fs.chmodSync(dir, 0o1777) } catch { /* made by someone else meanwhile */ }
  }
  const servers: net.Server[] = []
  const ports: number[] = []
  try {
    const span = last - first + 1
    // a random start spreads concurrent callers over the range; then a linear walk
    let next = first + crypto.randomInt(span)
    for (let tried = 0; ports.length < count; tried++) {
      if (tried >= span) throw new StrataError('CAPACITY_UNAVAILABLE', `no free TCP port in ${first}-${last} on ${host} (${ports.length} of ${count} found)`)
      const port = next
      next = next === last ? first : next + 1
      if (!reserve(dir, port)) continue
      const s = net.createServer()
      // held open until every port is chosen, so one call never returns a port twice
      if (await listen(s, port, host)) { servers.push(s); ports.push(port) } else s.close()
    }
    return ports
  } finally {
    await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))))
  }
}

/** Checks that `port` can be bound on `host` right now. */
export async function portFree(port: number, host = '127.0.0.1'): Promise<boolean> {
  const s = net.createServer()
  const ok = await listen(s, port, host)
  if (ok) await new Promise<void>((r) => s.close(() => r()))
  return ok
}
