// Files unlinked while open on the mount. libfuse 2 renames such a file to
// `.fuse_hidden<node><counter>` in its directory and unlinks that name at the
// last RELEASE. The kernel does not wait for RELEASE: close(2) returns once
// it is queued, so an `rmdir` of the directory right after the close (a
// Python TemporaryFile in a directory that is then removed) races it. When
// libfuse's thread for the RMDIR takes its path lock first, the RELEASE
// waits for that lock (libfuse locks the directory for rmdir and every
// ancestor of a path it serves), meta finds the hidden name still there, and
// rmdir failed with ENOTEMPTY although nothing had the file open any more.
// Waiting inside rmdir cannot help: the release is queued behind it.
//
// So an rmdir that finds only hidden names of files this mount still holds
// answers ESTALE once: the kernel retries an rmdir that failed with ESTALE
// (after a fresh lookup), and by then the queued release holds its path lock
// and the retry waits for it, name removed. If the retry still finds hidden
// names, those files really are open, and it is ENOTEMPTY, as before.

/** The name libfuse 2 gives a file unlinked while open (fuse.c hide_node). */
export function isHiddenName(name: string): boolean {
  return name.startsWith('.fuse_hidden')
}

/** Directories whose rmdir was answered ESTALE and is expected back once. */
export class RmdirRetries {
  private readonly pending = new Set<string>()

  constructor(private readonly max = 1024) {}

  /** True the first time (answer ESTALE), false for the kernel's retry (answer what meta said). */
  first(p: string): boolean {
    if (this.pending.delete(p)) return false
    // a retry that never came (the caller was not the kernel's rmdir path) only costs its entry
    if (this.pending.size >= this.max) this.pending.delete(this.pending.values().next().value!)
    this.pending.add(p)
    return true
  }

  /** rmdir of p succeeded or failed otherwise: a later ENOTEMPTY is a new first. */
  done(p: string): void {
    this.pending.delete(p)
  }
}
