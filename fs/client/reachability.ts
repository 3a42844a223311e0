// A stopped cluster refuses connections at once, but the clients take a
// refused connection for a failover in progress and retry for their whole
// budget. Commands that talk to a cluster probe mgmtd first, so that a stopped
// cluster is reported immediately.

import net from 'node:net'
import { StrataError } from '../common/errors.js'
import { parseAddress } from '../rpc/index.js'

/**
 * Fails with INVALID_ARGUMENT for an address that is not host:port (the RPC
 * client's parser and message), and with RPC_CONNECT_FAILED when no mgmtd
 * address accepts a connection.
 * An address that does not answer within a second is not taken as proof
 * either way (a busy or distant mgmtd).
 */
export async function checkMgmtdReachable(addresses: string[]): Promise<void> {
  const parsed = addresses.map(parseAddress)
  const probe = ({ host, port }: { host: string; port: number }) =>
    new Promise<boolean>((resolve) => {
      const sock = net.connect({ host, port })
      const done = (ok: boolean) => {
        clearTimeout(timer)
        sock.destroy()
        resolve(ok)
      }
      const timer = setTimeout(() => done(true), 1000)
      sock.once('connect', () => done(true))
      sock.once('error', () => done(false))
    })
  if (addresses.length === 0 || (await Promise.all(parsed.map(probe))).some(Boolean)) return
  throw new StrataError('RPC_CONNECT_FAILED', `no mgmtd accepts connections at ${addresses.join(', ')}: is the cluster running? (strata cluster status)`)
}
