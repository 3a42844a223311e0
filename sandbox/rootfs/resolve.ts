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
