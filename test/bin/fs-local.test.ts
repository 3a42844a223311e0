// `strata fs` identities out of the u32 range, and a mount that does not come up (child
// processes against a real cluster).

import test from 'ava'
import fs from 'node:fs'
import path from 'node:path'
import { fuseUsable } from '../../fs/fuse/cluster-role.js'
import { ok, strata, tempDir } from './helpers.js'

test('--uid, --gid and --groups beyond 4294967294 are usage errors; fs mount with one creates nothing', async (t) => {
  const dir = tempDir(t)
  for (const id of [['--uid', '99999999999'], ['--uid', '4294967295'], ['--gid', '4294967296'], ['--groups', '1,4294967295'], ['--uid', '-1']]) {
    const r = await strata(['fs', ...id, '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
    t.is(r.code, 2, id.join(' '))
    t.regex(r.stderr, /^strata: usage: .*must be in \[0, 4294967294\]|^strata: usage: /m, id.join(' '))
  }
  const highest = await strata(['fs', '--uid', '4294967294', '--gid', '4294967294', '--groups', '4294967294', '--mgmtd-address', '127.0.0.1:1', 'ls', '/'])
  t.is(highest.code, 1, highest.stderr)
  t.regex(highest.stderr, /^strata: RPC_CONNECT_FAILED: /m)
  const mnt = path.join(dir, 'a', 'mnt')
  const r = await strata(['fs', '--uid', '99999999999', 'mount', mnt, '--cluster', dir])
  t.is(r.code, 2, r.stderr)
  t.false(fs.existsSync(path.join(dir, 'a')))
})

const fuseTest = fuseUsable() && process.getuid?.() === 0 ? test.serial : test.skip

fuseTest('fs mount that does not come up removes the mount point directories it created', async (t) => {
  t.timeout(4 * 60_000)
  const base = tempDir(t)
  const dir = path.join(base, 'c')
  await ok(t, ['cluster', 'up', '--dir', dir, '--storage-nodes', '1', '--targets-per-node', '1', '--replicas', '1', '--no-sandbox', '--no-mount', '-q'])
  // no meta server: the daemon makes the mount point, then waits for meta and never mounts
  for (const n of ['meta-1', 'meta-2']) await ok(t, ['cluster', 'kill', '--node', n, '--dir', dir])
  const existing = path.join(base, 'existing')
  fs.mkdirSync(existing)
  for (const mnt of [path.join(base, 'made', 'deep', 'mnt'), existing]) {
    const r = await strata(['fs', 'mount', mnt, '--cluster', dir, '--wait-timeout', '3'])
    t.is(r.code, 1, r.stderr)
    t.regex(r.stderr, /^strata: (TIMEOUT|INTERNAL): /m)
  }
  t.false(fs.existsSync(path.join(base, 'made')), 'the directories it made are gone')
  t.true(fs.statSync(existing).isDirectory(), 'a directory that was there stays')
})
