// `strata admin fsck`: the namespace invariant checker (fs/meta/fsck.ts) over
// a cluster's meta KV, read in one snapshot beside the running meta servers.
import fs from 'node:fs'
import type { Command } from 'commander'
import { readClusterFile, resolveClusterDir } from '../../fs/admin/cluster-file.js'
import { StrataError } from '../../fs/common/errors.js'
import type { KvDurability } from '../../fs/kv/index.js'
import type { GlobalOpts } from './admin-fs.js'
import { dirArg, out, printJson } from './output.js'

/** The KV directory and durability of the cluster's first meta server (they all share one KV). */
function clusterKv(clusterDir: string | undefined): { kvPath: string; durability?: KvDurability } {
  const c = readClusterFile(resolveClusterDir(clusterDir ?? null))
  const meta = c.processes.find((p) => p.role === 'meta')
  if (!meta) throw new StrataError('NOT_FOUND', `cluster ${c.dir} has no meta server`)
  const config = JSON.parse(fs.readFileSync(meta.configFile, 'utf8')) as { kvPath: string; kvDurability?: KvDurability }
  return { kvPath: config.kvPath, ...(config.kvDurability ? { durability: config.kvDurability } : {}) }
}

export function registerAdminFsckCommand(admin: Command): void {
  admin
    .command('fsck')
    .description('check the namespace invariants of the meta KV: KIND InodeId Message per violation')
    .option('--kv <dir>', 'the meta KV directory (default: the cluster\'s, from its meta config)', dirArg('--kv'))
    .addHelpText(
      'after',
      `
Reads every inode, directory entry, write session and lock index key of the
meta KV in one snapshot (the meta servers keep running) and checks: every
entry points at an inode of its type in a directory; a file's or symlink's
nlink is the number of entries naming it; a directory has one entry, whose
acl copy and the directory's parent and name agree with it; GC entries name
inodes at nlink 0; no parent-pointer cycles; every inode is reachable from /
or the GC root; no write session or lock index key of a missing inode.
Prints one line per violation (KIND InodeId Message) and a summary; exits 1
with INTERNAL when there are violations. The KV is found through the cluster
directory (--cluster, $STRATA_CLUSTER) unless --kv names it (opened with the
durability it records); it must be on this host. --json prints {inodes, entries, sessions, violations}.`,
    )
    .action(async (o: { kv?: string }, cmd: Command) => {
      const g = cmd.optsWithGlobals() as GlobalOpts
      const kv = o.kv !== undefined ? { kvPath: o.kv } : clusterKv(g.cluster)
      // loaded here: the checker opens the KV through lmdb, which no other admin command needs at start
      const { fsckKvPath } = await import('../../fs/meta/fsck.js')
      const r = await fsckKvPath(kv.kvPath, kv.durability)
      if (g.json) printJson(r)
      else {
        for (const v of r.violations) out(`${v.kind}  ${v.id ?? '-'}  ${v.message}`)
        out(`checked ${r.inodes} inodes, ${r.entries} entries, ${r.sessions} sessions: ${r.violations.length} violations`)
      }
      if (r.violations.length) throw new StrataError('INTERNAL', `fsck found ${r.violations.length} namespace invariant violations in ${kv.kvPath}`)
    })
}
