// A stopped cluster refuses connections at once, but the clients take a
// refused connection for a failover in progress and retry for their whole
// budget. Commands that talk to a cluster probe mgmtd first, so that a stopped
// cluster is reported immediately.

import net from 'node:net'
import { StrataError } from '../common/errors.js'

/**
 * Fails with RPC_CONNECT_FAILED when no mgmtd address accepts a connection.
 * An address that does not answer within a second is not taken as proof
 * either way (a busy or distant mgmtd).
 */
export async function checkMgmtdReachable(addresses: string[]): Promise<void> {
  const probe = (addr: string) =>
    new Promise<boolean>((resolve) => {
      const i = addr.lastIndexOf(':')
      const sock = net.connect({ host: addr.slice(0, i), port: Number(addr.slice(i + 1)) })
      const done = (ok: boolean) => {
        clearTimeout(timer)
        sock.destroy()
        resolve(ok)
      }
      const timer = setTimeout(() => done(true), 1000)
      sock.once('connect', () => done(true))
      sock.once('error', () => done(false))
    })
  if (addresses.length === 0 || (await Promise.all(addresses.map(probe))).some(Boolean)) return
  throw new StrataError('RPC_CONNECT_FAILED', `no mgmtd accepts connections at ${addresses.join(', ')}: is the cluster running? (strata cluster status)`)
}
