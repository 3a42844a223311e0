// The node daemon process (`strata serve`, or `strata daemon sandbox
// --config FILE` under `strata cluster up`): a DFS client and the image
// store, the sandbox service on the node's FUSE mount, and the HTTP API.
// SIGTERM closes the API and leaves the sandboxes running for the next
// daemon to re-adopt; `cluster down` reclaims them (cluster-role.ts).
import fs from 'node:fs'
import path from 'node:path'
import { FileSystem } from '../../fs/client/index.js'
import { StrataError } from '../../fs/common/errors.js'
import type { Logger } from '../../fs/common/log.js'
import { RELEASE_VERSION } from '../../fs/common/config.js'
import crypto from 'node:crypto'
import { ImageStore } from '../image/index.js'
import { SandboxHttpServer } from './http.js'
import { SandboxService, type SandboxServiceOptions } from './service.js'

/** Service settings a daemon config may carry, passed through as they are. */
type Tunables = Pick<SandboxServiceOptions, 'runtime' | 'limits' | 'defaultResources' | 'defaultLifetime' | 'reapIntervalMs' | 'retainStoppedSec' | 'maxConcurrentCreates' | 'layerLingerMs' | 'warmPool'>

export interface SandboxDaemonConfig extends Tunables {
  /** node name: lease holder in the image store and cgroup parent (/strata/<nodeId>) */
  nodeId: string
  /** host:port of the HTTP API */
  listen: string
  mgmtdAddresses: string[]
  /** the node's FUSE mount of the DFS (cluster up: DIR/mnt) */
  fuseMnt: string
  /** registry, layer mounts and sandboxes */
  stateDir: string
  /** bearer token file (mode 0600), created with a fresh token if missing */
  tokenFile: string
  /** the address the API listens on is written here once it listens */
  endpointFile?: string
}

/** Reads the token, creating it (32 random bytes, hex, mode 0600) when the file does not exist. */
export function ensureToken(file: string): string {
  try {
    const t = fs.readFileSync(file, 'utf8').trim()
    if (t.length < 16) throw new StrataError('BAD_CONFIG', `token file ${file} holds no usable token`)
    return t
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e
  }
  fs.mkdirSync(path.dirname(file), { recursive: true })
  const token = crypto.randomBytes(32).toString('hex')
  try {
    fs.writeFileSync(file, token + '\n', { mode: 0o600, flag: 'wx' })
  } catch (e) {
    // another process made it first: use theirs
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return fs.readFileSync(file, 'utf8').trim()
    throw e
  }
  return token
}

export interface RunningSandboxDaemon {
  service: SandboxService
  http: SandboxHttpServer
  address: string
  close(): Promise<void>
}

export async function startSandboxDaemon(c: SandboxDaemonConfig, log: Logger): Promise<RunningSandboxDaemon> {
  if (!Array.isArray(c.mgmtdAddresses) || c.mgmtdAddresses.length === 0) throw new StrataError('BAD_CONFIG', 'mgmtdAddresses is required')
  for (const k of ['nodeId', 'listen', 'fuseMnt', 'stateDir', 'tokenFile'] as const) {
    if (typeof c[k] !== 'string' || !c[k]) throw new StrataError('BAD_CONFIG', `${k} is required`)
  }
  const token = ensureToken(c.tokenFile)
  const fsys = new FileSystem({ mgmtdAddresses: c.mgmtdAddresses, periodicSyncMs: 0, metaRetry: { totalMs: 30_000 }, storageRetry: { deadlineMs: 30_000, readDeadlineMs: 30_000 } })
  const store = new ImageStore(fsys)
  let service: SandboxService | undefined
  let http: SandboxHttpServer | undefined
  try {
    await store.open()
    fs.mkdirSync(c.stateDir, { recursive: true, mode: 0o700 })
    const { nodeId, listen: _l, mgmtdAddresses: _m, fuseMnt, stateDir, tokenFile: _t, endpointFile: _e, ...tunables } = c
    service = await SandboxService.open({ ...tunables, stateDir, fuseMnt, store, nodeId, log })
    http = new SandboxHttpServer({ service, token, log, version: RELEASE_VERSION, listen: c.listen })
    const address = await http.listen()
    if (c.endpointFile) fs.writeFileSync(c.endpointFile, `http://${address}\n`)
    log.info('sandbox API listening', { address, stateDir: c.stateDir })
    let closing: Promise<void> | null = null
    return {
      service, http, address,
      close: () => (closing ??= (async () => {
        await http!.close()
        await service!.close()
        await store.close().catch(() => undefined)
        await fsys.shutdown().catch(() => undefined)
      })()),
    }
  } catch (e) {
    await http?.close().catch(() => undefined)
    await service?.close().catch(() => undefined)
    await store.close().catch(() => undefined)
    await fsys.shutdown().catch(() => undefined)
    throw e
  }
}
