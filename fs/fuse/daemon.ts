// The FUSE daemon process: mounts the filesystem with fuse-native and serves
// it from the file client. It runs in its own process (a synchronous call
// into a FUSE mount from the process serving it deadlocks) and never leaves
// a dead mount behind:
//  - on start, a stale mount of a dead daemon at the mount point is cleared
//    (abort the connection, lazy unmount);
//  - close() (SIGTERM/SIGINT through runDaemon) unmounts from a child process
//    while the event loop keeps serving; files still open after the grace
//    period get a syncfs (from a child: the dirty pages of shared mappings
//    come here), a lazy unmount and an aborted connection; then buffered
//    writes are flushed and sessions closed;
//  - any other exit (uncaught error, process.exit) aborts the connection and
//    detaches the mount synchronously in an 'exit' hook.

import fs from 'node:fs'
import { setMaxListeners } from 'node:events'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'
import { StrataError } from '../common/errors.js'
import { LOCAL_TIMERS, mergeTimers } from '../common/config.js'
import { createLogger, type Logger } from '../common/log.js'
import { MgmtdClient } from '../mgmtd/client.js'
import { RpcClient, RpcServer } from '../rpc/index.js'
import { splitListen } from '../mgmtd/index.js'
import { FileSystem } from '../client/file/file-system.js'
import { MetaClient } from '../client/file/meta-client.js'
import { readClusterFile } from '../admin/cluster-file.js'
import { extraFuseOptions, fuseTimeout, resolveFuseConfig, type FuseDaemonConfig, type ResolvedFuseConfig } from './config.js'
import { loadFuse, nodeMoves, type FuseInstance } from './native.js'
import { FastReads } from './fast-reads.js'
import {
  FUSE_FSTYPE,
  FUSE_SUBTYPE,
  FUSECTL_DIR,
  abortConnection,
  checkMountpoint,
  connectionId,
  daemonsFor,
  detachNow,
  findMount,
  forceUnmount,
  isFuseMount,
  setKernelReadahead,
  syncfsAsync,
  deviceNumber,
  unmountAsync,
  type MountEntry,
} from './mounts.js'
import { StrataFuseOps } from './ops.js'
import { registerDaemon, unregisterDaemon, writeFuseState } from './state.js'

export { readFuseState, type FuseState } from './state.js'

export interface FuseDaemon {
  mountpoint: string
  config: ResolvedFuseConfig
  fs: FileSystem
  ops: StrataFuseOps
  /** RPC address when the config has `listen` */
  address?: string
  close(): Promise<void>
}

function metaFallback(cfg: ResolvedFuseConfig, log: Logger): string[] {
  const out = [...(cfg.metaFallbackAddresses ?? [])]
  if (cfg.clusterDir) {
    try {
      for (const p of readClusterFile(cfg.clusterDir).processes) if (p.role === 'meta') out.push(p.address)
    } catch (e) {
      log.warn('cannot read the cluster description for meta addresses', { dir: cfg.clusterDir, err: e })
    }
  }
  return [...new Set(out)]
}

/** Clears whatever a dead daemon left at the mount point; refuses a live one. */
async function clearMountpoint(mnt: string, log: Logger): Promise<void> {
  const m = findMount(mnt)
  if (!m) return
  if (!isFuseMount(m)) throw new StrataError('INVALID_ARGUMENT', `${mnt} is already a mount point (${m.fstype} ${m.source})`)
  const live = daemonsFor(mnt).filter((d) => d.pid !== process.pid)
  if (live.length) throw new StrataError('CLUSTER_RUNNING', `${mnt} is already served by FUSE daemon pid ${live.map((d) => d.pid).join(', ')}`)
  log.warn('clearing a stale FUSE mount left by a dead daemon', { mountpoint: mnt, fstype: m.fstype })
  if (!(await forceUnmount(mnt))) throw new StrataError('INTERNAL', `cannot clear the stale mount at ${mnt}`)
}

export async function startFuseDaemon(raw: FuseDaemonConfig, log: Logger = createLogger('fuse')): Promise<FuseDaemon> {
  const cfg = resolveFuseConfig(raw)
  const mnt = cfg.mountpoint
  const Fuse = loadFuse()
  await clearMountpoint(mnt, log)
  checkMountpoint(mnt)
  fs.mkdirSync(mnt, { recursive: true })

  // every FUSE request may hold an RPC (and its abort listener) at once
  setMaxListeners(1000)
  const timers = mergeTimers(LOCAL_TIMERS, cfg.timers)
  const clientId = randomUUID()
  const rpc = new RpcClient()
  const mgmtd = new MgmtdClient({ addresses: cfg.mgmtdAddresses, rpc })
  mgmtd.watch(timers.routingRefreshMs)
  const user = { uid: cfg.uid, gid: cfg.gid, groups: cfg.groups }
  const meta = new MetaClient({
    mgmtd,
    rpc,
    clientId,
    user,
    nodeType: 'FUSE',
    description: `strata fuse ${mnt} pid ${process.pid}`,
    ...(cfg.metaAddresses ? { addresses: cfg.metaAddresses } : {}),
    fallbackAddresses: metaFallback(cfg, log),
    // an explicit metaRetry.orphanTimeoutMs wins over the mount-wide one
    retry: { orphanTimeoutMs: cfg.orphanTimeoutMs, ...cfg.metaRetry },
  })
  const filesystem = new FileSystem({
    mgmtd,
    rpc,
    meta,
    clientId,
    user,
    periodicSyncMs: cfg.periodicSyncMs,
    periodicSyncLimit: cfg.periodicSyncLimit,
    writeBufferSize: cfg.writeBufferSize,
    writeBehind: cfg.writeBehind,
    syncOnStat: cfg.syncOnStat,
    storageRetry: { orphanTimeoutMs: cfg.orphanTimeoutMs, ...cfg.storageRetry },
    ...(cfg.readMode ? { readMode: cfg.readMode } : {}),
  })
  const closeClients = () => {
    meta.close()
    mgmtd.close()
    rpc.close()
  }

  let server: RpcServer | null = null
  let address: string | undefined
  let mounted: MountEntry | null = null
  let fuseRef: FuseInstance | null = null
  let fastReads: FastReads | null = null
  let cleanlyUnmounted = false
  const ops = new StrataFuseOps({
    fs: filesystem,
    mountpoint: mnt,
    kernelInvalidate: true,
    attrTimeoutMs: cfg.attrTimeout * 1000,
    readonly: cfg.readonly,
    uid: cfg.uid,
    gid: cfg.gid,
    groups: cfg.groups,
    log: log.child('ops'),
    readAhead: cfg.chunkReadAhead ? { budgetBytes: cfg.chunkReadAheadBudget, windowChunks: cfg.chunkReadAheadWindow, maxAgeMs: cfg.chunkReadAheadMaxAgeMs } : false,
  })

  // Last resort: whatever ends this process, the mount must not outlive it.
  const onExit = () => {
    if (!mounted || cleanlyUnmounted) return
    unregisterDaemon(mnt, process.pid)
    const m = findMount(mnt)
    if (!m || connectionId(m) !== connectionId(mounted)) return
    abortConnection(m)
    detachNow(mnt)
  }
  process.on('exit', onExit)
  const onHup = () => process.kill(process.pid, 'SIGTERM')
  process.on('SIGHUP', onHup)

  try {
    // meta must answer before the kernel starts sending requests
    const root = await filesystem.stat('/')
    if (root.type !== 'Directory') throw new StrataError('INTERNAL', 'the root inode is not a directory')

    const fuse: FuseInstance = (fuseRef = new Fuse(mnt, ops.operations(), {
      timeout: cfg.opTimeoutMs > 0 ? cfg.opTimeoutMs : false,
      fsname: extraFuseOptions(cfg),
      subtype: FUSE_SUBTYPE,
      attrTimeout: fuseTimeout(cfg.attrTimeout),
      entryTimeout: fuseTimeout(cfg.entryTimeout),
      allowOther: cfg.allowOther,
      defaultPermissions: cfg.defaultPermissions,
      debug: cfg.debug,
      mkdir: true,
    }))
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new StrataError('TIMEOUT', `FUSE mount at ${mnt} did not initialise in 30 s`)), 30_000)
      fuse.mount((err) => {
        clearTimeout(timer)
        if (err) reject(new StrataError('INTERNAL', `mount at ${mnt} failed: ${err.message}`, { cause: err }))
        else resolve()
      })
    })
    const m = findMount(mnt)
    if (!m || m.fstype !== FUSE_FSTYPE) throw new StrataError('INTERNAL', `mount at ${mnt} is not in the mount table after init`)
    mounted = m
    // the rm-rf kernel-cache drop removes names only on this device (ops.ts dropFromKernel)
    ops.setMountDevice(deviceNumber(m.major, m.minor))
    // fuse-native reports the mount before libfuse has answered the kernel's INIT, and the kernel
    // lowers the readahead to what INIT says when it reads the answer: a round trip (statfs always
    // reaches the daemon) orders the write after it. Async, so this event loop stays free to serve it;
    // even a failed statfs was answered after INIT.
    await fs.promises.statfs(mnt).catch(() => undefined)
    const readahead = setKernelReadahead(m, cfg.maxReadahead)
    if (readahead === null) log.warn('cannot set the kernel readahead (needs root); the kernel keeps its default', { maxReadahead: cfg.maxReadahead })
    ops.attachMoves(nodeMoves(fuse))
    if (cfg.nativeReads && ops.readAheadEnabled) {
      fastReads = FastReads.open(fuse)
      if (!fastReads) log.warn('this addon build cannot serve reads natively; every READ goes through JavaScript')
      ops.attachFastReads(fastReads)
    }
    log.info('mounted', { mountpoint: mnt, connection: connectionId(m), attrTimeout: cfg.attrTimeout, entryTimeout: cfg.entryTimeout, periodicSyncMs: cfg.periodicSyncMs, readahead, nativeReads: fastReads !== null })

    if (cfg.listen) {
      server = new RpcServer({
        name: `fuse ${mnt}`,
        getConfig: () => cfg,
        getStats: () => ({ fuse: { ...ops.stats(), threadBlocks: fuse._threads?.size ?? null }, fs: { ...filesystem.counters }, meta: { ...meta.counters } }),
        onShutdown: () => void close().then(() => process.exit(0)),
      })
      const [host, port] = splitListen(cfg.listen)
      address = await server.listen(port, host)
    }
    // test hook: crash with an uncaught error this long after mounting (the exit hook must unmount)
    const crashMs = Number(process.env.STRATA_FUSE_TEST_CRASH_AFTER_MS ?? '')
    if (crashMs > 0) setTimeout(() => {
      throw new Error('STRATA_FUSE_TEST_CRASH_AFTER_MS: deliberate uncaught error')
    }, crashMs)
    registerDaemon({ pid: process.pid, mountpoint: mnt, ...(cfg.clusterDir ? { clusterDir: cfg.clusterDir } : {}) })
    if (cfg.stateFile) writeFuseState(cfg.stateFile, { pid: process.pid, mountpoint: mnt, connection: connectionId(m), mountedAt: new Date().toISOString(), clientId })
  } catch (e) {
    ops.attachFastReads(null)
    ops.attachMoves(null)
    fastReads?.close()
    if (mounted || findMount(mnt)?.fstype === FUSE_FSTYPE) await forceUnmount(mnt).catch(() => false)
    mounted = null
    await server?.close().catch(() => {})
    await filesystem.shutdown().catch(() => {})
    closeClients()
    process.off('exit', onExit)
    process.off('SIGHUP', onHup)
    throw e
  }

  let closing: Promise<void> | null = null
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      log.info('unmounting', { mountpoint: mnt, ops: ops.stats().ops, errors: ops.stats().errors, cache: ops.stats().cache, threadBlocks: fuseRef?._threads?.size })
      // READs during the unmount go through JavaScript: the table lets go of every chunk first
      ops.attachFastReads(null)
      ops.attachMoves(null)
      fastReads?.close()
      await unmount(mnt, mounted!, cfg.unmountGraceMs, log)
      cleanlyUnmounted = true
      // handles the kernel never released (lazy unmount): flush and close them
      await Promise.race([filesystem.shutdown().catch((e) => log.warn('shutdown of the file client failed', { err: e })), sleep(3000)])
      await server?.close().catch(() => {})
      closeClients()
      if (cfg.stateFile) fs.rmSync(cfg.stateFile, { force: true })
      unregisterDaemon(mnt, process.pid)
      process.off('SIGHUP', onHup)
      log.info('unmounted', { mountpoint: mnt })
    })())

  return { mountpoint: mnt, config: cfg, fs: filesystem, ops, ...(address ? { address } : {}), close }
}

/**
 * Orderly unmount while this process keeps serving requests: plain unmount
 * (retried while files are open, up to graceMs), then a lazy one; if the
 * connection still lives after another grace period (open files), abort it.
 */
async function unmount(mnt: string, mounted: MountEntry, graceMs: number, log: Logger): Promise<void> {
  const end = Date.now() + graceMs
  const ours = () => {
    const m = findMount(mnt)
    return m && connectionId(m) === connectionId(mounted) ? m : undefined
  }
  for (;;) {
    if (!ours()) return
    const r = await unmountAsync(mnt, { timeoutMs: 5000 })
    if (r.result === 'ok') return
    if (r.result !== 'busy' || Date.now() > end) {
      log.warn('unmount refused; detaching lazily', { mountpoint: mnt, reason: r.message })
      break
    }
    await sleep(100)
  }
  // files are still open, and a process may hold a shared mapping it wrote and never msync'ed:
  // those pages live only in the kernel until written back, and the abort below would drop them.
  // syncfs sends them here while the mount can still be named; shutdown() then flushes them
  // bounded by the grace (1–5 s): the whole stop has to fit in what `cluster down` waits before SIGKILL (10 s)
  const synced = await syncfsAsync(mnt, Math.min(Math.max(graceMs, 1000), 5000))
  if (!synced.ok) log.warn('syncfs of the mount before detaching failed', { mountpoint: mnt, reason: synced.message })
  const r = await unmountAsync(mnt, { lazy: true, timeoutMs: 5000 })
  if (r.result !== 'ok') detachNow(mnt)
  // open files keep the connection alive after a lazy unmount: give them a moment, then cut it
  const conn = path.join(FUSECTL_DIR, String(connectionId(mounted)))
  const end2 = Date.now() + Math.min(graceMs, 2000)
  while (fs.existsSync(conn) && Date.now() < end2) await sleep(50)
  if (fs.existsSync(conn)) {
    log.warn('files still open after unmount; aborting the FUSE connection', { mountpoint: mnt })
    abortConnection(mounted)
  }
}

