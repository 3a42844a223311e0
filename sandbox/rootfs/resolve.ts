// Path resolution inside a root directory that is not ours to trust (a
// sandbox's rootfs, the DFS seen through FUSE): symlinks are followed as if
// `root` were `/` (an absolute link restarts at `root`), and a `..` that
// would climb above `root` is refused rather than clamped, so a mount never
// lands outside the tree it was meant for.
import fs from 'node:fs/promises'
import path from 'node:path'
import { StrataError, type ErrorCode } from '../../fs/common/errors.js'

const MAX_LINKS = 40

export interface Resolved {
  /** the real path on the host (root joined with the resolved components) */
  hostPath: string
  /** resolved components below root */
  parts: string[]
  /** how many leading components exist; the rest are to be created */
  existing: number
  /** type of the final component when it exists */
  type: 'dir' | 'file' | 'other' | null
}

/**
 * Splits an absolute in-root path into components. Refuses relative paths,
 * `..` components, NUL bytes and the root itself (nothing mounts over `/`).
 */
export function cleanAbsolute(p: string, code: ErrorCode, what: string): string[] {
  if (typeof p !== 'string' || !p.startsWith('/') || p.includes('\0')) throw new StrataError(code, `${what} ${JSON.stringify(p)} must be an absolute path`)
  const parts = p.split('/').filter((c) => c !== '' && c !== '.')
  if (parts.includes('..')) throw new StrataError(code, `${what} ${JSON.stringify(p)} must not contain '..'`)
  if (parts.length === 0) throw new StrataError(code, `${what} ${JSON.stringify(p)} must not be the root`)
  return parts
}

/**
 * Paths in a sandbox no dataset may be mounted on or below: the runtime
 * mounts proc, a tmpfs /dev and sysfs over them when the container starts (a
 * dataset there would be hidden, or would hide what the sandbox needs), and
 * the agent, the sandbox's init, is bind-mounted at /.strata/agent
 * (sandbox/backends/container/spec.ts AGENT_PATH_IN_SANDBOX).
 */
export const RESERVED_MOUNT_TARGETS = ['/proc', '/dev', '/sys', '/.strata'] as const

/** The reserved path (RESERVED_MOUNT_TARGETS) that in-root components fall on or below, if any. */
export function reservedTarget(parts: readonly string[]): string | undefined {
  return RESERVED_MOUNT_TARGETS.find((r) => parts[0] === r.slice(1))
}

/**
 * A dataset target as given: a clean absolute path (no empty, `.` or `..`
 * components, so no `//` and no trailing `/`), not `/` and not on or below a
 * reserved path. Anything else is ROOTFS_BAD_MOUNT_TARGET; nothing is
 * normalised, so the target recorded is the one mounted.
 */
export function checkMountTarget(p: unknown, what = 'dataset target'): string[] {
  const fail = (why: string): never => {
    throw new StrataError('ROOTFS_BAD_MOUNT_TARGET', `${what} ${JSON.stringify(typeof p === 'string' ? p.slice(0, 200) : p)} ${why}`, { detail: { target: p } })
  }
  if (typeof p !== 'string' || p.length > 4096 || p.includes('\0')) return fail('must be an absolute path of at most 4096 characters without NUL')
  if (!p.startsWith('/')) fail('is not a clean absolute path: it must start with /')
  if (p === '/') fail('must not be the root')
  const parts = p.slice(1).split('/')
  if (parts.some((c) => c === '' || c === '.' || c === '..')) fail(`is not a clean absolute path (no empty, '.' or '..' components, no trailing /)`)
  const r = reservedTarget(parts)
  if (r) fail(`is on or below ${r}, which is reserved (${RESERVED_MOUNT_TARGETS.join(', ')})`)
  if (SANDBOX_FILE_TARGETS.includes(p)) fail(`is the sandbox's own ${p}, which the node mounts there (${SANDBOX_FILE_TARGETS.join(', ')})`)
  return parts
}

/** Files every sandbox gets from its node, bind-mounted at these paths (sandbox/backends/container/spec.ts etcHosts). */
export const SANDBOX_FILE_TARGETS: readonly string[] = ['/etc/hosts', '/etc/hostname']

/** Resolves `parts` below `root`, following symlinks inside it (see the file comment). */
export async function resolveInRoot(root: string, parts: string[], code: ErrorCode, what: string): Promise<Resolved> {
  const done: string[] = []
  const todo = [...parts]
  let links = 0
  const escape = () => new StrataError(code, `${what} /${parts.join('/')} escapes its root through a symlink`)
  while (todo.length) {
    const c = todo.shift()!
    if (c === '' || c === '.') continue
    if (c === '..') {
      if (done.length === 0) throw escape()
      done.pop()
      continue
    }
    const host = path.join(root, ...done, c)
    let st
    try {
      st = await fs.lstat(host)
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new StrataError(code, `${what} /${parts.join('/')}: ${(e as Error).message}`, { cause: e })
      // the rest does not exist; `..` left in todo came from a link and cannot be created
      if (todo.some((t) => t === '..')) throw escape()
      const rest = [c, ...todo].filter((t) => t !== '' && t !== '.')
      return { hostPath: path.join(root, ...done, ...rest), parts: [...done, ...rest], existing: done.length, type: null }
    }
    if (st.isSymbolicLink()) {
      if (++links > MAX_LINKS) throw new StrataError(code, `${what} /${parts.join('/')}: too many levels of symbolic links`)
      const target = await fs.readlink(host)
      if (target.startsWith('/')) done.length = 0
      todo.unshift(...target.split('/'))
      continue
    }
    done.push(c)
    if (todo.some((t) => t !== '' && t !== '.') && !st.isDirectory()) throw new StrataError(code, `${what} /${parts.join('/')}: /${done.join('/')} is not a directory`)
    if (todo.every((t) => t === '' || t === '.')) {
      return { hostPath: path.join(root, ...done), parts: done, existing: done.length, type: st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other' }
    }
  }
  // only reachable when every component was `..`/`.` after links
  throw new StrataError(code, `${what} /${parts.join('/')} resolves to the root`)
}
