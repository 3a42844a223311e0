// Shared setup of the node daemon tests: one DFS cluster per test file (meta
// servers and a FUSE daemon as child processes), a busybox image `bb:1` and
// a small dataset in the DFS, and node daemons started as real processes
// (`strata daemon sandbox --config`) that a test may SIGKILL and restart.
// Every daemon is stopped at teardown after its sandboxes were reclaimed;
// whatever survives a crash is cleared with reclaimOffline.
import { spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import type { ExecutionContext, TestFn } from 'ava'
import { FileSystem } from '../../../fs/client/index.js'
import { importPath } from '../../../sandbox/image/oci/import.js'
import { ImageStore } from '../../../sandbox/image/store.js'
import { reclaimOffline, type SandboxDaemonConfig } from '../../../sandbox/daemon/index.js'
import { Strata } from '../../../sandbox/sdk/index.js'
import { mountFuse, type FuseMount } from '../../fs/fuse/helpers.js'
import { busyboxRootfs } from '../../helpers/busybox-rootfs.js'
import { sharedMetaCluster, type MetaCluster } from '../../helpers/meta-cluster.js'
import { CLI, freePort } from '../../helpers/procs.js'

export interface DaemonEnv {
  m: MetaCluster
  fuse: FuseMount
  fs: FileSystem
  store: ImageStore
  /** dataset files in the DFS under /datasets/t: name → bytes */
  dataset: Map<string, Buffer>
}

export function useDaemonCluster(test: TestFn): DaemonEnv {
  const env = {} as DaemonEnv
  const teardowns: Array<() => unknown> = []
  let close: (() => Promise<void>) | undefined
  test.before(async () => {
    const s = await sharedMetaCluster({ chunkSize: 1024 * 1024, stripeSize: 2, inProcess: false })
    close = s.close
    env.m = s.m
    const ctx = { teardown: (fn: () => unknown) => void teardowns.push(fn), log: () => undefined } as unknown as ExecutionContext
    env.fuse = await mountFuse(ctx, s.m, { name: 'node-mnt', listen: `127.0.0.1:${await freePort()}` })
    env.fs = new FileSystem({ mgmtdAddresses: [s.m.c.mgmtdAddress], periodicSyncMs: 0, storageRetry: { deadlineMs: 30_000, readDeadlineMs: 30_000 }, metaRetry: { totalMs: 30_000 } })
    env.store = new ImageStore(env.fs)
    await env.store.open()
    await importPath(env.store, busyboxRootfs(ctx), { name: 'bb', tag: '1' })
    env.dataset = new Map([
      ['small.txt', Buffer.from('hello dataset\n')],
      ['big.bin', crypto.randomBytes(3 * 1024 * 1024 + 17)],
    ])
    await env.fs.mkdir('/datasets/t', { recursive: true })
    for (const [name, data] of env.dataset) await env.fs.writeFile(`/datasets/t/${name}`, data)
  })
  test.after.always(async () => {
    for (const fn of teardowns.reverse()) await fn()
    await env.store?.close().catch(() => undefined)
    await env.fs?.shutdown().catch(() => undefined)
    await close?.()
  })
  return env
}

export interface Daemon {
  address: string
  token: string
  config: SandboxDaemonConfig
  child: ChildProcess
  sdk: Strata
  log(): string
  /** SIGKILL; the sandboxes stay */
  kill(): Promise<void>
  /** SIGTERM; the sandboxes stay. Resolves with the exit code. */
  stop(): Promise<number | null>
}

let seq = 0

/**
 * Starts a node daemon process. Pass `stateDir` (and the same `listen`) to
 * restart on an earlier daemon's state. At teardown the daemon's sandboxes
 * are removed (through its API if it runs, else offline) and it is stopped.
 */
export async function startDaemon(t: ExecutionContext, env: DaemonEnv, o: Partial<SandboxDaemonConfig> = {}): Promise<Daemon> {
  const stateDir = o.stateDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'sbd-'))
  const listen = o.listen ?? `127.0.0.1:${await freePort()}`
  const config: SandboxDaemonConfig = {
    nodeId: `t${process.pid}-${++seq}`,
    mgmtdAddresses: [env.m.c.mgmtdAddress],
    fuseMnt: env.fuse.mnt,
    tokenFile: path.join(stateDir, 'token'),
    reapIntervalMs: 200,
    ...o,
    stateDir,
    listen,
  }
  const configFile = path.join(stateDir, `config-${seq}.json`)
  fs.writeFileSync(configFile, JSON.stringify(config))
  const logFile = path.join(stateDir, `daemon-${seq}.log`)
  const logFd = fs.openSync(logFile, 'a')
  const child = spawn(process.execPath, [CLI, 'daemon', 'sandbox', '--config', configFile, '--name', 'sandbox'], { stdio: ['ignore', logFd, logFd], env: { ...process.env, STRATA_LOG_LEVEL: 'info' } })
  fs.closeSync(logFd)
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)))
  const log = () => fs.readFileSync(logFile, 'utf8')
  const end = Date.now() + 60_000
  for (;;) {
    try {
      const r = await fetch(`http://${listen}/v1/health`, { signal: AbortSignal.timeout(1000) })
      if (r.ok) break
    } catch { /* not up yet */ }
    if (child.exitCode !== null || Date.now() > end) throw new Error(`daemon did not start: ${log()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
  const token = fs.readFileSync(config.tokenFile, 'utf8').trim()
  const sdk = new Strata({ endpoint: `http://${listen}`, token })
  const d: Daemon = {
    address: listen, token, config, child, sdk, log,
    kill: async () => {
      child.kill('SIGKILL')
      await exited
    },
    stop: async () => {
      child.kill('SIGTERM')
      return exited
    },
  }
  t.teardown(async () => {
    sdk.close()
    if (child.exitCode === null && child.signalCode === null) {
      await fetch(`http://${listen}/v1/node/reclaim`, { method: 'POST', headers: { authorization: `Bearer ${token}` } }).catch(() => undefined)
      child.kill('SIGTERM')
      await exited
    }
    // a later daemon on the same state dir owns it: only the last one cleans
    if (!o.stateDir) {
      await reclaimOffline(stateDir, { cgroupParent: `/strata/${config.nodeId}` }).catch((e) => t.log(`reclaimOffline: ${(e as Error).message}`))
      fs.rmSync(stateDir, { recursive: true, force: true })
    }
  })
  return d
}

function mountsBelow(dir: string): string[] {
  return fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4] ?? '').filter((m) => m.startsWith(dir + '/'))
}

/** The node's layer mounts (shared by sandboxes; they linger a while after the last one goes). */
export function layerMounts(stateDir: string): string[] {
  return mountsBelow(path.join(stateDir, 'layers'))
}

/** Everything a node keeps per sandbox, to compare before and after. */
export function nodeTraces(stateDir: string, nodeId: string): { mounts: string[]; sandboxDirs: string[]; cgroups: string[] } {
  const mounts = mountsBelow(path.join(stateDir, 'sb'))
  let sandboxDirs: string[] = []
  try {
    sandboxDirs = fs.readdirSync(path.join(stateDir, 'sb'))
  } catch { /* none */ }
  const cgroups: string[] = []
  for (const ctl of ['memory', 'pids', 'cpu,cpuacct', 'cpu']) {
    const dir = path.join('/sys/fs/cgroup', ctl, 'strata', nodeId)
    try {
      for (const e of fs.readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) cgroups.push(`${ctl}/${e.name}`)
    } catch { /* no such hierarchy */ }
  }
  return { mounts, sandboxDirs, cgroups }
}
