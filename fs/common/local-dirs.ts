// mkdir -p for local directories given by users (--work-dir and the like).
// Node 20's fs.mkdir({ recursive: true }) never returns for a path whose
// parent exists but refuses new entries with ENOENT (/proc/nope: it loops
// re-creating the parent), and reports a read-only parent as the ENOENT
// of the missing component; this walks up once and names the real cause.
import fs from 'node:fs'
import path from 'node:path'
import { StrataError, fromSystemError } from './errors.js'

function failure(dir: string, e: unknown): StrataError {
  const se = fromSystemError(e)
  const why = (e as Error).message
  return se ? new StrataError(se.code, `cannot create directory ${dir}: ${why}`, { cause: e }) : new StrataError('IO_ERROR', `cannot create directory ${dir}: ${why}`, { cause: e })
}

/**
 * Creates `dir` and its missing parents (mode 0o777 minus umask). An
 * existing directory is fine; an existing non-directory is
 * INVALID_ARGUMENT; a parent where nothing can be created gives the code of
 * its errno (PERMISSION_DENIED for EACCES/EROFS, …), never a hang.
 */
export async function makeDirs(dir: string): Promise<void> {
  const abs = path.resolve(dir)
  try {
    await fs.promises.mkdir(abs)
    return
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code
    if (code === 'EEXIST') {
      const st = await fs.promises.stat(abs).catch(() => null)
      if (st?.isDirectory()) return
      throw new StrataError('INVALID_ARGUMENT', `cannot create directory ${dir}: it exists and is not a directory`, { cause: e })
    }
    if (code !== 'ENOENT') throw failure(dir, e)
    const parent = path.dirname(abs)
    const pst = await fs.promises.stat(parent).catch(() => null)
    if (pst) {
      // the parent is there, yet the entry cannot be made (a pseudo filesystem such as /proc)
      if (!pst.isDirectory()) throw new StrataError('INVALID_ARGUMENT', `cannot create directory ${dir}: ${parent} is not a directory`, { cause: e })
      throw new StrataError('INVALID_ARGUMENT', `cannot create directory ${dir}: ${parent} takes no new entries (${(e as Error).message})`, { cause: e })
    }
    if (parent === abs) throw failure(dir, e)
    await makeDirs(parent)
  }
  try {
    await fs.promises.mkdir(abs)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST' && (await fs.promises.stat(abs).catch(() => null))?.isDirectory()) return
    throw failure(dir, e)
  }
}
