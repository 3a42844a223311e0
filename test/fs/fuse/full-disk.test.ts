// The meta KV on a really full filesystem (a size-limited tmpfs made by the
// test), through a real mount: creating names fails with ENOSPC, the meta
// servers live on, and the mount works again once space is freed. Before,
// lmdb-js's rejections of the failed commit ended every meta server sharing
// the KV, and the mount answered ECONNREFUSED a minute later.
import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { execFileSync } from 'node:child_process'
import { tmpDir } from '../../helpers/procs.js'
import { fuseSkipReason, ok, py, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()

test.serial('a full disk under the meta KV: ENOSPC, meta servers alive, names and data back once space is freed', async (t) => {
  if (skip) {
    t.log(`skipped: ${skip}`)
    t.pass()
    return
  }
  const small = tmpDir(t, 'strata-kv-disk-')
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=16m', 'tmpfs', small])
  t.teardown(() => execFileSync('umount', ['-l', small]))
  const fc = await startFuseCluster(t, { metas: 2, meta: { kvPath: path.join(small, 'kv') } })
  const a = await fc.mount()
  ok(t, await sh(`head -c 1000000 /dev/urandom > ${a.mnt}/before`), 'write before')
  const sum = (await sh(`sha256sum < ${a.mnt}/before`)).stdout
  const filler = path.join(small, 'filler')
  execFileSync('sh', ['-c', `cat /dev/zero > ${filler} 2>/dev/null || true`])

  // symlinks with long targets fill the KV fast; stop at the first failure and report its errno
  const r = await py(
    String.raw`import errno, os, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
for i in range(100000):
    try:
        os.symlink('t' * 3000, os.path.join(d, 'l%06d' % i))
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno), i)
        break
else:
    print('NOFAIL')`,
    [path.join(a.mnt, 'links')],
    { timeoutMs: 300_000 },
  )
  t.regex(r.stdout, /^ENOSPC \d+/, r.stdout + r.stderr)
  for (const addr of fc.m.metaAddresses) t.truthy(await fc.m.rpc.echo(addr), `meta at ${addr} answers`)

  fs.rmSync(filler)
  ok(t, await sh(`mkdir ${a.mnt}/after && rm -rf ${a.mnt}/links && ls ${a.mnt}`), 'names work again')
  t.is((await sh(`sha256sum < ${a.mnt}/before`)).stdout, sum)
})
