// packDirectory (the tar `strata sandbox cp DIR ID:/path` uploads), checked
// against GNU tar: what it writes unpacks with `tar -x` into the same tree
// (files, modes, mtimes, owners, symlinks, hard links, fifos, devices, long
// and non-ASCII names); sockets are left out with a note; a root that cannot
// be read throws before anything is written.
import test from 'ava'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { PassThrough } from 'node:stream'
import { isStrataError } from '../../../fs/common/errors.js'
import { openLocalFile, packDirectory } from '../../../sandbox/sdk/pack.js'
import { tmpDir } from '../../helpers/procs.js'
import { diffTrees, snapshotTree } from '../../helpers/tree-compare.js'

const isRoot = process.getuid?.() === 0

async function pack(dir: string, o: Parameters<typeof packDirectory>[2] = {}): Promise<Buffer> {
  const out = new PassThrough()
  const chunks: Buffer[] = []
  out.on('data', (c: Buffer) => chunks.push(c))
  await packDirectory(dir, out, o)
  return Buffer.concat(chunks)
}

test('what it packs unpacks with GNU tar into the same tree; a socket is skipped with a note', async (t) => {
  const base = tmpDir(t, 'strata-pack-')
  const src = path.join(base, 'src')
  const long = 'd'.repeat(120)
  fs.mkdirSync(path.join(src, long, 'sub'), { recursive: true })
  fs.writeFileSync(path.join(src, long, 'sub', 'x'.repeat(130)), 'deep\n')
  fs.writeFileSync(path.join(src, 'ünï cødé'), Buffer.alloc(300_000, 7), { mode: 0o640 })
  fs.writeFileSync(path.join(src, 'run.sh'), '#!/bin/sh\n', { mode: 0o755 })
  fs.chmodSync(path.join(src, 'run.sh'), 0o4755)
  fs.writeFileSync(path.join(src, 'empty'), '')
  fs.linkSync(path.join(src, 'run.sh'), path.join(src, 'hard'))
  fs.symlinkSync('run.sh', path.join(src, 'link'))
  fs.symlinkSync('/nowhere', path.join(src, 'dangling'))
  execFileSync('mkfifo', [path.join(src, 'fifo')])
  if (isRoot) {
    execFileSync('mknod', [path.join(src, 'null'), 'c', '1', '3'])
    fs.chownSync(path.join(src, 'empty'), 1234, 5678)
  }
  fs.utimesSync(path.join(src, 'empty'), new Date('2001-02-03T04:05:06.789Z'), new Date('2001-02-03T04:05:06.789Z'))
  const server = net.createServer()
  await new Promise<void>((r) => server.listen(path.join(src, 'sock'), r))
  t.teardown(() => server.close())

  const skipped: string[] = []
  const warnings: string[] = []
  const tar = await pack(src, { onSkip: (p, why) => skipped.push(`${p}: ${why}`), onWarning: (w) => warnings.push(w.message) })
  t.deepEqual(skipped, [`${path.join(src, 'sock')}: a socket cannot be copied`])
  t.deepEqual(warnings, [])
  const out = path.join(base, 'out')
  fs.mkdirSync(out)
  execFileSync('tar', ['-x', '-f', '-', '-C', out, '--same-owner', '--preserve-permissions'], { input: tar })
  fs.rmSync(path.join(src, 'sock'))
  t.deepEqual(diffTrees(await snapshotTree(out), await snapshotTree(src)), [])
})

test('a root that cannot be read throws at once, naming it, and writes nothing', (t) => {
  const out = new PassThrough()
  const e = t.throws(() => packDirectory('/nonexistent-strata-dir', out))
  t.true(isStrataError(e, 'NOT_FOUND'), String(e))
  t.is((e as Error).message, 'NOT_FOUND: cannot read /nonexistent-strata-dir: no such file or directory')
  t.is(out.readableLength, 0)
})

test('a single file is uploaded as large as it is when opened: bytes appended afterwards are not sent', async (t) => {
  const p = path.join(tmpDir(t, 'strata-pack-'), 'growing.log')
  fs.writeFileSync(p, Buffer.alloc(1 << 20, 1))
  const f = await openLocalFile(p)
  t.teardown(() => f.close().catch(() => undefined))
  // a log that keeps growing while it is copied (read to EOF, the copy chased it)
  fs.appendFileSync(p, Buffer.alloc(1 << 20, 2))
  let n = 0
  for await (const c of f.stream) n += (c as Buffer).length
  t.is(n, 1 << 20)
  t.is(f.size, 1 << 20)
})

test('a single file: a pseudo file of stat size 0 comes with its contents; one that cannot be opened is named', async (t) => {
  const f = await openLocalFile('/proc/self/status')
  t.teardown(() => f.close().catch(() => undefined))
  let s = ''
  for await (const c of f.stream) s += String(c)
  t.regex(s, /^Name:\t/)
  const e = await t.throwsAsync(openLocalFile('/nonexistent-strata-file'))
  t.true(isStrataError(e, 'NOT_FOUND'))
  t.is(e!.message, 'NOT_FOUND: cannot read /nonexistent-strata-file: no such file or directory')
})
