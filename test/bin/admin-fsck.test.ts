// `strata admin fsck` over a running cluster's meta KV: clean after ordinary
// operations; a dangling entry and a wrong link count written into the KV
// behind meta's back are reported (exit 1, INTERNAL) by kind and inode.

import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { openLmdbKv } from '../../fs/kv/index.js'
import { decodeInode, encodeDirEntry, encodeInode } from '../../fs/meta/codec.js'
import { newEntry } from '../../fs/meta/inode.js'
import { dentryKey, inodeKey } from '../../fs/meta/keys.js'
import { lmdbKvAvailable, startMetaCluster } from '../helpers/meta-cluster.js'
import { strata } from './helpers.js'

test.serial('admin fsck: clean namespace exits 0; a dangling entry and a wrong nlink are reported', async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built')
    t.pass()
    return
  }
  const m = await startMetaCluster(t, { nodes: 1, chains: 1, replicas: 1 })
  const c = m.client()
  await c.mkdirs('/d/e', { recursive: true })
  const f = await c.create('/d/f', { flags: { access: 'r', create: true } })
  await c.hardLink('/d/f', '/d/e/g')
  await c.symlink('/d/s', 'f')
  await c.remove('/d/e', { recursive: true })

  const clean = await strata(['admin', 'fsck', '--kv', m.kvPath])
  t.is(clean.code, 0, clean.stderr)
  t.regex(clean.stdout, /^checked \d+ inodes, \d+ entries, \d+ sessions: 0 violations$/m)

  const kv = await openLmdbKv({ path: m.kvPath })
  try {
    await kv.transact(async (txn) => {
      txn.set(dentryKey(0n, 'ghost'), encodeDirEntry(newEntry(0n, 'ghost', 0xdead000n, 'File')))
      const inode = decodeInode(f.stat.id, (await txn.get(inodeKey(f.stat.id)))!)
      inode.nlink += 3
      txn.set(inodeKey(f.stat.id), encodeInode(inode))
    })
  } finally {
    await kv.close()
  }
  const bad = await strata(['admin', 'fsck', '--kv', m.kvPath])
  t.is(bad.code, 1)
  t.regex(bad.stdout, /^DANGLING_ENTRY {2}0xdead000 {2}entry 0x0\/ghost points at missing inode 0xdead000$/m)
  t.regex(bad.stdout, new RegExp(`^NLINK  0x${f.stat.id.toString(16)}  `, 'm'))
  t.regex(bad.stderr, /^strata: INTERNAL: fsck found 2 namespace invariant violations/m)
  const json = await strata(['admin', 'fsck', '--kv', m.kvPath, '--json'])
  t.is(json.code, 1)
  t.deepEqual((JSON.parse(json.stdout) as { violations: Array<{ kind: string }> }).violations.map((v) => v.kind).sort(), ['DANGLING_ENTRY', 'NLINK'])

  const none = await strata(['admin', 'fsck', '--kv', `${m.kvPath}-missing`])
  t.is(none.code, 1)
  t.regex(none.stderr, /^strata: NOT_FOUND: no meta KV at /m)
})

test.serial("admin fsck --kv on a KV its meta servers open with durability 'nosync' checks it (it was BAD_CONFIG: every process must agree)", async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built')
    t.pass()
    return
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-fsck-nosync-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const kvPath = path.join(dir, 'kv')
  const kv = await openLmdbKv({ path: kvPath, durability: 'nosync' })
  await kv.close()
  const r = await strata(['admin', 'fsck', '--kv', kvPath])
  t.is(r.code, 1, r.stderr)
  // an empty KV has no root directory: checked, and that is what it says (not BAD_CONFIG)
  t.regex(r.stdout, /^ROOT /m)
  t.notRegex(r.stderr, /BAD_CONFIG/)
})
