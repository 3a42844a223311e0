// A real local cluster in this process: one mgmtd and three storage daemons
// (each its own RPC server on loopback), targets created over the storage
// createTarget RPC, chains uploaded through mgmtd.

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { startMgmtd, MgmtdClient, type MgmtdDaemon } from '../../../fs/mgmtd/index.js'
import { startStorage, type StorageDaemon } from '../../../fs/storage/index.js'
import { RpcClient } from '../../../fs/rpc/index.js'
import { ServiceId, StorageMethod } from '../../../fs/common/services.js'
import type { RoutingInfo } from '../../../fs/common/types.js'

export const TIMERS = {
  heartbeatIntervalMs: 100,
  heartbeatFailIntervalMs: 1500,
  chainUpdateIntervalMs: 50,
  newChainBootstrapMs: 0,
  routingRefreshMs: 100,
  resyncIntervalMs: 100,
  resyncMinGapMs: 200,
}

export interface Cluster {
  dir: string
  mgmtd: MgmtdDaemon
  storages: StorageDaemon[]
  /** node index i (0-based) hosts target (i+1)*100 + chainId of every chain */
  chains: number[]
  rpc: RpcClient
  admin: MgmtdClient
  targetId(nodeIndex: number, chainId: number): number
  addressOfTarget(targetId: number): Promise<string>
  close(): Promise<void>
}

export async function until<T>(what: string, fn: () => Promise<T | undefined | false> | T | undefined | false, ms = 15000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

export async function startCluster(chains: number[] = [1, 2]): Promise<Cluster> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-client-'))
  const mgmtd = await startMgmtd({ nodeId: 1, dataDir: path.join(dir, 'mgmtd'), listen: '127.0.0.1:0', timers: TIMERS })
  const storages: StorageDaemon[] = []
  for (let i = 0; i < 3; i++) {
    storages.push(
      await startStorage({
        nodeId: 11 + i,
        dataDir: path.join(dir, `storage-${i + 1}`),
        listen: '127.0.0.1:0',
        mgmtdAddresses: [mgmtd.address],
        timers: TIMERS,
        fsync: false,
      }),
    )
  }
  const rpc = new RpcClient()
  const admin = new MgmtdClient({ addresses: [mgmtd.address] })
  const targetId = (i: number, c: number) => (i + 1) * 100 + c
  for (const c of chains) {
    for (let i = 0; i < 3; i++) {
      await rpc.call(storages[i]!.address, ServiceId.Storage, StorageMethod.createTarget, { targetId: targetId(i, c), chainId: c, diskIndex: 0 })
    }
  }
  await admin.setChains({ chains: chains.map((c) => ({ chainId: c, targets: [0, 1, 2].map((i) => targetId(i, c)) })) })
  await admin.setChainTable({ chainTableId: 1, chains })
  // ready: every target SERVING, placed on a node with an address, and up to date on its node
  await until('cluster ready', async () => {
    const ri = await admin.refresh()
    return chains.every((c) => ready(ri, c)) && ri
  })
  const addressOfTarget = async (t: number) => {
    const ri = await admin.refresh()
    return ri.nodes[String(ri.targets[String(t)]!.nodeId)]!.address
  }
  let closing: Promise<void> | null = null
  return {
    dir,
    mgmtd,
    storages,
    chains,
    rpc,
    admin,
    targetId,
    addressOfTarget,
    close: () =>
      (closing ??= (async () => {
        rpc.close()
        admin.close()
        for (const s of storages) await s.close().catch(() => undefined)
        await mgmtd.close()
        fs.rmSync(dir, { recursive: true, force: true })
      })()),
  }
}

export function ready(ri: RoutingInfo, chainId: number): boolean {
  const chain = ri.chains[String(chainId)]
  if (!chain) return false
  return chain.targets.every((ct) => {
    const t = ri.targets[String(ct.targetId)]
    return ct.publicState === 'SERVING' && t && t.localState === 'UPTODATE' && ri.nodes[String(t.nodeId)]?.address
  })
}
