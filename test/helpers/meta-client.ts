// A minimal typed client of the meta service for tests: fills ReqBase, keeps
// one request uuid across retries, fails over between meta addresses on
// transport errors and retries retryable codes. (The production client with
// routing-based server choice is fs/client/file/meta-client.ts.)

import { randomUUID } from 'node:crypto'
import { StrataError, isStrataError, toStrataError } from '../../fs/common/errors.js'
import { MetaMethod, ServiceId } from '../../fs/common/services.js'
import type { Layout } from '../../fs/common/layout.js'
import type { RpcClient } from '../../fs/rpc/index.js'
import type {
  AtFlags,
  CreateRsp,
  DirEntry,
  DumpInodesRsp,
  GcListRsp,
  Inode,
  InodeId,
  ListRsp,
  LockAction,
  OpenFlags,
  PathAt,
  UserInfo,
  VersionedLength,
  FileSessionRecord,
} from '../../fs/meta/protocol.js'

export const ROOT_USER: UserInfo = { uid: 0, gid: 0, groups: [] }

const TRANSPORT = new Set(['RPC_CONNECT_FAILED', 'RPC_SEND_FAILED', 'RPC_CONNECTION_CLOSED', 'TIMEOUT', 'CLOSED'])

export interface CallOpts {
  uuid?: string
  user?: UserInfo
  /** give up after this long (default 20 s) */
  totalMs?: number
  /** do not retry at all */
  once?: boolean
}

export function at(path: string | PathAt): PathAt {
  return typeof path === 'string' ? { parent: 0n, path } : path
}

export class MetaTestClient {
  readonly clientId: string
  private current = 0
  stats = { calls: 0, failovers: 0, retries: 0 }

  constructor(
    readonly rpc: RpcClient,
    public addresses: string[],
    readonly user: UserInfo = ROOT_USER,
    clientId?: string,
  ) {
    this.clientId = clientId ?? randomUUID()
  }

  as(user: UserInfo, clientId?: string): MetaTestClient {
    const c = new MetaTestClient(this.rpc, this.addresses, user, clientId ?? this.clientId)
    return c
  }

  async call<T>(method: number, body: Record<string, unknown>, o: CallOpts = {}): Promise<T> {
    const req = { ...body, user: o.user ?? this.user, client: { uuid: this.clientId, hostname: 'test' }, uuid: o.uuid ?? randomUUID() }
    const deadline = Date.now() + (o.totalMs ?? 20000)
    this.stats.calls++
    for (let attempt = 0; ; attempt++) {
      const address = this.addresses[this.current % this.addresses.length]!
      try {
        return await this.rpc.call<T>(address, ServiceId.Meta, method, req, { timeoutMs: 10000 })
      } catch (e) {
        const err = toStrataError(e)
        if (o.once) throw err
        if (TRANSPORT.has(err.code)) {
          // move off the failed server once: concurrent calls that failed on it must not each
          // advance the shared index, or an even number of them lands back on the dead server
          if (this.addresses[this.current % this.addresses.length] === address) this.current++
          this.stats.failovers++
        } else if (!err.retryable) throw err
        if (Date.now() > deadline) throw err
        this.stats.retries++
        await new Promise((r) => setTimeout(r, Math.min(200, 10 * 2 ** Math.min(attempt, 5))))
      }
    }
  }

  // --- typed helpers

  async stat(path: string | PathAt, flags: AtFlags = {}, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.stat, { path: at(path), flags }, o)).stat
  }

  async statById(id: InodeId, o?: CallOpts): Promise<Inode> {
    return this.stat({ parent: id }, {}, o)
  }

  async create(
    path: string | PathAt,
    opts: { flags?: Partial<OpenFlags>; perm?: number; session?: string; layout?: Layout } = {},
    o?: CallOpts,
  ): Promise<CreateRsp> {
    const flags: OpenFlags = { access: 'rw', create: true, ...opts.flags }
    const session = flags.access === 'r' ? undefined : (opts.session ?? randomUUID())
    return this.call<CreateRsp>(
      MetaMethod.create,
      { path: at(path), flags, perm: opts.perm ?? 0o644, ...(session ? { session: { session } } : {}), ...(opts.layout ? { layout: opts.layout } : {}) },
      o,
    )
  }

  async open(path: string | PathAt, flags: OpenFlags, session?: string, o?: CallOpts): Promise<{ stat: Inode; needTruncate: boolean }> {
    return this.call(MetaMethod.open, { path: at(path), flags, ...(session ? { session: { session } } : {}) }, o)
  }

  async close(inode: InodeId, session: string | undefined, updateLength: boolean, extra: { lengthHint?: VersionedLength; mtime?: number } = {}, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.close, { inode, ...(session ? { session: { session } } : {}), updateLength, ...extra }, o)).stat
  }

  async sync(inode: InodeId, body: { updateLength?: boolean; truncated?: boolean; lengthHint?: VersionedLength; mtime?: number; atime?: number } = {}, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.sync, { inode, updateLength: false, ...body }, o)).stat
  }

  async mkdirs(path: string | PathAt, opts: { perm?: number; recursive?: boolean; layout?: Layout } = {}, o?: CallOpts): Promise<Inode> {
    return (
      await this.call<{ stat: Inode }>(
        MetaMethod.mkdirs,
        { path: at(path), perm: opts.perm ?? 0o755, recursive: opts.recursive ?? false, ...(opts.layout ? { layout: opts.layout } : {}) },
        o,
      )
    ).stat
  }

  async symlink(path: string | PathAt, target: string, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.symlink, { path: at(path), target }, o)).stat
  }

  async hardLink(oldPath: string | PathAt, newPath: string | PathAt, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.hardLink, { oldPath: at(oldPath), newPath: at(newPath) }, o)).stat
  }

  async remove(path: string | PathAt, opts: { recursive?: boolean; rmdir?: boolean; checkType?: boolean; inodeId?: InodeId } = {}, o?: CallOpts): Promise<void> {
    await this.call(
      MetaMethod.remove,
      {
        path: at(path),
        recursive: opts.recursive ?? false,
        checkType: opts.checkType ?? false,
        atFlags: { removeDir: opts.rmdir ?? false },
        ...(opts.inodeId !== undefined ? { inodeId: opts.inodeId } : {}),
      },
      o,
    )
  }

  async rename(src: string | PathAt, dest: string | PathAt, o?: CallOpts): Promise<Inode | null> {
    return (await this.call<{ stat: Inode | null }>(MetaMethod.rename, { src: at(src), dest: at(dest) }, o)).stat
  }

  async list(path: string | PathAt, opts: { prev?: string; limit?: number; status?: boolean } = {}, o?: CallOpts): Promise<ListRsp> {
    return this.call<ListRsp>(MetaMethod.list, { path: at(path), prev: opts.prev ?? '', limit: opts.limit ?? -1, status: opts.status ?? false }, o)
  }

  async listAll(path: string | PathAt, o?: CallOpts): Promise<DirEntry[]> {
    const out: DirEntry[] = []
    let prev = ''
    for (;;) {
      const r = await this.list(path, { prev, limit: 500 }, o)
      out.push(...r.entries)
      if (!r.more || !r.entries.length) return out
      prev = r.entries[r.entries.length - 1]!.name
    }
  }

  async setAttr(path: string | PathAt, attrs: Record<string, unknown>, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.setAttr, { path: at(path), ...attrs }, o)).stat
  }

  async realPath(path: string | PathAt, absolute = true, o?: CallOpts): Promise<string> {
    return (await this.call<{ path: string }>(MetaMethod.getRealPath, { path: at(path), absolute }, o)).path
  }

  async lock(inode: InodeId, action: LockAction, o?: CallOpts): Promise<Inode> {
    return (await this.call<{ stat: Inode }>(MetaMethod.lockDirectory, { inode, action }, o)).stat
  }

  async gcList(o?: CallOpts): Promise<GcListRsp['entries']> {
    return (await this.call<GcListRsp>(MetaMethod.gcList, {}, o)).entries
  }

  async sessions(filter: { inode?: InodeId; clientId?: string } = {}, o?: CallOpts): Promise<FileSessionRecord[]> {
    return (await this.call<{ sessions: FileSessionRecord[] }>(MetaMethod.listSessions, filter, o)).sessions
  }

  async dumpAll(entries = false, o?: CallOpts): Promise<{ inodes: Inode[]; entries: DirEntry[] }> {
    const out = { inodes: [] as Inode[], entries: [] as DirEntry[] }
    let cursor: string | null = null
    for (;;) {
      const r: DumpInodesRsp = await this.call<DumpInodesRsp>(MetaMethod.dumpInodes, { entries, cursor, limit: 5000 }, o)
      out.inodes.push(...r.inodes)
      out.entries.push(...r.entries)
      if (!r.cursor) return out
      cursor = r.cursor
    }
  }
}

/** Resolves to the StrataError code a promise rejects with (or 'OK'). */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'OK'
  } catch (e) {
    if (isStrataError(e)) return e.code
    if (e instanceof StrataError) return e.code
    throw e
  }
}
