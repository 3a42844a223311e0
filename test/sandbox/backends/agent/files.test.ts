// File operations and tar upload/download through the agent (PID 1 of a runc
// container with a busybox rootfs). The tar code in the agent is checked
// against GNU tar on the host in both directions.
import { execFileSync, spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import test from 'ava'
import type { StrataError } from '../../../../fs/common/errors.js'
import tarStream from 'tar-stream'
import { hasRunc, startAgentContainer } from '../../../helpers/agent-container.js'
import { busyboxRootfs, hasBusybox } from '../../../helpers/busybox-rootfs.js'
import { tmpDir } from '../../../helpers/procs.js'

const ok = hasRunc && hasBusybox
const rt = ok ? test : test.skip
const title = (s: string): string => (ok ? s : `${s} (needs root, runc and busybox-static)`)

rt(title('write, read, append, ranges, modes, mkdirs, exclusive; errors carry codes'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const data = crypto.randomBytes(3 * 1024 * 1024 + 17)
  t.deepEqual(await client.files.write('/tmp/big.bin', data), { bytes: data.length })
  t.true((await client.files.read('/tmp/big.bin')).equals(data))
  t.true((await client.files.read('/tmp/big.bin', { offset: 1000, length: 70000 })).equals(data.subarray(1000, 71000)))
  await t.throwsAsync(client.files.read('/tmp/big.bin', { maxBytes: 1024 * 1024 }), { code: 'OUTPUT_LIMIT' })
  const chunks: Buffer[] = []
  for await (const c of client.files.readStream('/tmp/big.bin')) chunks.push(c as Buffer)
  t.true(Buffer.concat(chunks).equals(data))

  await client.files.write('/tmp/a.txt', 'one\n')
  await client.files.write('/tmp/a.txt', 'two\n', { append: true })
  t.is((await client.files.read('/tmp/a.txt')).toString(), 'one\ntwo\n')
  await client.files.write('/tmp/a.txt', 'over\n')
  t.is((await client.files.read('/tmp/a.txt')).toString(), 'over\n')
  await t.throwsAsync(client.files.write('/tmp/a.txt', 'x', { exclusive: true }), { code: 'ALREADY_EXISTS' })
  await client.files.write('/tmp/x/y/z.sh', '#!/bin/sh\necho run\n', { mkdirs: true, mode: 0o750 })
  t.is((await client.files.stat('/tmp/x/y/z.sh')).mode, 0o750)
  t.is((await client.exec(['/tmp/x/y/z.sh'])).stdout.toString(), 'run\n')
  // streamed body from an async iterable
  async function* parts(): AsyncIterable<Uint8Array> { for (let i = 0; i < 100; i++) yield Buffer.alloc(1000, i) }
  t.deepEqual(await client.files.write('/tmp/parts', parts()), { bytes: 100000 })
  t.is((await client.exec('md5sum < /tmp/parts')).stdout.toString().split(' ')[0],
    crypto.createHash('md5').update(Buffer.concat(Array.from({ length: 100 }, (_, i) => Buffer.alloc(1000, i)))).digest('hex'))

  const nf = await t.throwsAsync(client.files.read('/tmp/nope'), { code: 'NOT_FOUND' })
  t.deepEqual((nf as unknown as { detail: unknown }).detail, { errno: 'ENOENT', path: '/tmp/nope' })
  await t.throwsAsync(client.files.read('/tmp'), { code: 'SANDBOX_IS_A_DIRECTORY' })
  await t.throwsAsync(client.files.write('/tmp/nodir/f', 'x'), { code: 'NOT_FOUND' })
  await t.throwsAsync(client.files.write('/tmp/a.txt/f', 'x'), { code: 'SANDBOX_NOT_A_DIRECTORY' })
  await t.throwsAsync(client.files.write('/sys/kernel/x', 'x'), { code: 'SANDBOX_READ_ONLY' })
  await t.throwsAsync(client.files.read('/tmp/a.txt', { offset: -1 }), { code: 'INVALID_ARGUMENT' })
  await t.throwsAsync(client.files.read(''), { code: 'INVALID_ARGUMENT' })
  // an error in the middle of a large upload still arrives as the agent's error
  await t.throwsAsync(client.files.write('/nonexistent-dir/f', Buffer.alloc(16 * 1024 * 1024)), { code: 'NOT_FOUND' })
})

rt(title('list, stat, mkdir, remove, rename; as another user'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  await client.files.mkdir('/w/a/b/c')
  await client.files.mkdir('/w/a/b/c') // -p: exists is fine
  await t.throwsAsync(client.files.mkdir('/w/a', { parents: false }), { code: 'ALREADY_EXISTS' })
  await t.throwsAsync(client.files.mkdir('/w/q/r', { parents: false }), { code: 'NOT_FOUND' })
  await client.files.mkdir('/w/m', { mode: 0o700, parents: false })
  await client.files.write('/w/f', '12345')
  await client.exec('ln -s f /w/link && ln -s /nowhere /w/dangling && mkfifo /w/fifo && ln /w/f /w/hard')
  const list = await client.files.list('/w')
  const by = Object.fromEntries(list.map((e) => [e.name, e]))
  t.deepEqual(Object.keys(by).sort(), ['a', 'dangling', 'f', 'fifo', 'hard', 'link', 'm'])
  t.is(by.a!.type, 'dir')
  t.is(by.m!.mode, 0o700)
  t.is(by.f!.type, 'file')
  t.is(by.f!.size, 5)
  t.is(by.f!.nlink, 2)
  t.is(by.link!.type, 'symlink')
  t.is(by.link!.target, 'f')
  t.is(by.dangling!.target, '/nowhere')
  t.is(by.fifo!.type, 'fifo')
  t.true(Math.abs(by.f!.mtimeMs - Date.now()) < 60000)
  const st = await client.files.stat('/w/link')
  t.is(st.type, 'file')
  t.is(st.size, 5)
  t.is(st.path, '/w/link')
  const lst = await client.files.stat('/w/link', { followSymlinks: false })
  t.is(lst.type, 'symlink')
  t.is(lst.target, 'f')
  await t.throwsAsync(client.files.stat('/w/dangling'), { code: 'NOT_FOUND' })
  await t.throwsAsync(client.files.read('/w/fifo'), { code: 'INVALID_ARGUMENT' }) // never blocks on a FIFO
  await t.throwsAsync(client.files.list('/w/f'), { code: 'SANDBOX_NOT_A_DIRECTORY' })

  await client.files.rename('/w/f', '/w/g')
  await t.throwsAsync(client.files.stat('/w/f'), { code: 'NOT_FOUND' })
  await client.files.write('/w/h', 'h')
  await t.throwsAsync(client.files.rename('/w/g', '/w/h', { noReplace: true }), { code: 'ALREADY_EXISTS' })
  await client.files.rename('/w/g', '/w/h')
  t.is((await client.files.read('/w/h')).toString(), '12345')

  await t.throwsAsync(client.files.remove('/w/a'), { code: 'SANDBOX_NOT_EMPTY' })
  await client.files.remove('/w/a', { recursive: true })
  await t.throwsAsync(client.files.stat('/w/a'), { code: 'NOT_FOUND' })
  await t.throwsAsync(client.files.remove('/w/a'), { code: 'NOT_FOUND' })
  await client.files.remove('/w/a', { force: true })
  await client.files.remove('/w/link') // the link, not its target
  t.is((await client.files.read('/w/h')).toString(), '12345')
  await t.throwsAsync(client.files.remove('/', { recursive: true }), { code: 'INVALID_ARGUMENT' })
  // a recursive remove does not follow symlinks out of the tree
  await client.exec('mkdir -p /w/t && ln -s /home/alice /w/t/out && touch /home/alice/keep')
  await client.files.remove('/w/t', { recursive: true })
  t.is((await client.exec('ls /home/alice')).stdout.toString(), 'keep\n')

  // as alice: permissions apply and new files are hers
  await client.files.write('/home/alice/note', 'hi', { user: 'alice' })
  t.is((await client.files.stat('/home/alice/note')).uid, 1000)
  t.is((await client.files.stat('/home/alice/note')).gid, 1000)
  await t.throwsAsync(client.files.read('/root/secret', { user: 'alice' }), { code: 'SANDBOX_PERMISSION_DENIED' })
  await t.throwsAsync(client.files.list('/root', { user: 'alice' }), { code: 'SANDBOX_PERMISSION_DENIED' })
  await t.throwsAsync(client.files.write('/etc/x', 'x', { user: 'alice' }), { code: 'SANDBOX_PERMISSION_DENIED' })
  await t.throwsAsync(client.files.mkdir('/x', { uid: 1000 }), { code: 'SANDBOX_PERMISSION_DENIED' })
  await t.throwsAsync(client.files.read('/etc/passwd', { user: 'nosuchuser' }), { code: 'NOT_FOUND' })

  // many file operations at once
  await Promise.all(Array.from({ length: 40 }, (_, i) => client.files.write(`/tmp/c${i}`, `v${i}`)))
  const back = await Promise.all(Array.from({ length: 40 }, (_, i) => client.files.read(`/tmp/c${i}`)))
  t.deepEqual(back.map((b) => b.toString()), Array.from({ length: 40 }, (_, i) => `v${i}`))
})

interface Node { type: string; mode: number; size?: number; sha?: string; target?: string; mtime: number; uid: number; gid: number; ino?: string }

/** Walks a host tree: what a tar round trip must preserve. Hard links share an inode label. */
function snapshot(root: string): Record<string, Node> {
  const out: Record<string, Node> = {}
  const inodes = new Map<string, string>()
  const walk = (rel: string): void => {
    const abs = path.join(root, rel)
    for (const name of fs.readdirSync(abs).sort()) {
      const r = rel ? `${rel}/${name}` : name
      const st = fs.lstatSync(path.join(root, r))
      const n: Node = { type: st.isDirectory() ? 'dir' : st.isSymbolicLink() ? 'symlink' : st.isFIFO() ? 'fifo' : st.isFile() ? 'file' : 'other',
        mode: st.isSymbolicLink() ? 0 : st.mode & 0o7777, mtime: Math.floor(st.mtimeMs / 1000), uid: st.uid, gid: st.gid }
      if (st.isFile()) {
        n.size = st.size
        n.sha = crypto.createHash('sha256').update(fs.readFileSync(path.join(root, r))).digest('hex')
        if (st.nlink > 1) {
          const k = `${st.dev}:${st.ino}`
          if (!inodes.has(k)) inodes.set(k, r)
          n.ino = inodes.get(k)
        }
      }
      if (st.isSymbolicLink()) n.target = fs.readlinkSync(path.join(root, r))
      if (st.isSymbolicLink()) n.mtime = 0 // GNU tar does not restore symlink times by default
      out[r] = n
      if (st.isDirectory()) walk(r)
    }
  }
  walk('')
  return out
}

function makeTree(root: string): void {
  fs.mkdirSync(root)
  fs.writeFileSync(path.join(root, 'a.txt'), 'alpha\n')
  fs.writeFileSync(path.join(root, 'empty'), '')
  fs.writeFileSync(path.join(root, 'random.bin'), crypto.randomBytes(300_001))
  fs.writeFileSync(path.join(root, 'run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 })
  fs.writeFileSync(path.join(root, 'secret'), 's', { mode: 0o600 })
  fs.writeFileSync(path.join(root, 'ünïcødé ñame.txt'), 'u')
  const long = path.join(root, 'd'.repeat(60), 'e'.repeat(70), 'f'.repeat(80))
  fs.mkdirSync(long, { recursive: true })
  fs.writeFileSync(path.join(long, `${'g'.repeat(120)}.txt`), 'deep') // > 255 bytes of path
  fs.symlinkSync('a.txt', path.join(root, 'rel-link'))
  fs.symlinkSync('/etc/hostname', path.join(root, 'abs-link'))
  fs.symlinkSync(`${'x'.repeat(150)}/target`, path.join(root, 'long-link')) // linkname > 100
  fs.linkSync(path.join(root, 'a.txt'), path.join(root, 'hard-a'))
  execFileSync('mkfifo', [path.join(root, 'fifo')])
  fs.mkdirSync(path.join(root, 'ro-dir'))
  fs.writeFileSync(path.join(root, 'ro-dir', 'inside'), 'i')
  fs.chmodSync(path.join(root, 'ro-dir'), 0o555)
  fs.writeFileSync(path.join(root, 'owned'), 'o')
  fs.chownSync(path.join(root, 'owned'), 1234, 5678)
  fs.writeFileSync(path.join(root, 'old'), 'old')
  fs.utimesSync(path.join(root, 'old'), new Date('2001-02-03T04:05:06Z'), new Date('2001-02-03T04:05:06Z'))
  fs.utimesSync(path.join(root, 'ro-dir'), new Date('2002-01-01T00:00:00Z'), new Date('2002-01-01T00:00:00Z'))
}

function hostTar(args: string[]): Readable {
  const p = spawn('tar', args, { stdio: ['ignore', 'pipe', 'inherit'] })
  return p.stdout
}

async function untarOnHost(tar: Readable, dst: string): Promise<void> {
  fs.mkdirSync(dst, { recursive: true })
  const p = spawn('tar', ['-C', dst, '-xpf', '-'], { stdio: ['pipe', 'inherit', 'inherit'] })
  tar.pipe(p.stdin)
  const code = await new Promise<number | null>((r) => p.on('exit', r))
  if (code !== 0) throw new Error(`tar -x exited ${code}`)
}

rt(title('tar upload (GNU and PAX from GNU tar) and download round-trip a tree exactly'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const dir = tmpDir(t)
  const src = path.join(dir, 'src')
  makeTree(src)
  const want = snapshot(src)

  for (const format of ['gnu', 'pax']) {
    const r = await client.files.uploadTar(`/up-${format}`, hostTar(['-C', src, `--format=${format}`, '-cf', '-', '.']), { preserveOwner: true })
    t.true(r.entries >= Object.keys(want).length)
    const ls = await client.exec(['stat', '-c', '%a %u:%g %s %Y', `/up-${format}/ro-dir`, `/up-${format}/owned`, `/up-${format}/old`, `/up-${format}/run.sh`])
    t.is(ls.stdout.toString(), `555 0:0 ${fs.statSync(path.join(src, 'ro-dir')).size} 1009843200\n644 1234:5678 1 ${Math.floor(fs.statSync(path.join(src, 'owned')).mtimeMs / 1000)}\n644 0:0 3 981173106\n755 0:0 19 ${Math.floor(fs.statSync(path.join(src, 'run.sh')).mtimeMs / 1000)}\n`)
    t.is((await client.exec([`/up-${format}/run.sh`])).stdout.toString(), 'ran\n')
    t.is((await client.exec(['sh', '-c', `stat -c %i /up-${format}/a.txt /up-${format}/hard-a | uniq | wc -l`])).stdout.toString().trim(), '1')

    const dst = path.join(dir, `dst-${format}`)
    await untarOnHost(client.files.downloadTar(`/up-${format}`), dst)
    t.deepEqual(snapshot(dst), want, `round trip through the ${format} upload`)
  }

  // without preserveOwner the files belong to the uploading identity
  await client.files.uploadTar('/home/alice/up', hostTar(['-C', src, '-cf', '-', 'owned', 'a.txt']), { user: 'alice' })
  t.is((await client.exec(['stat', '-c', '%u:%g', '/home/alice/up/owned'])).stdout.toString(), '1000:1000\n')
  await t.throwsAsync(client.files.uploadTar('/up-denied', hostTar(['-C', src, '-cf', '-', 'a.txt']), { user: 'alice' }), { code: 'SANDBOX_PERMISSION_DENIED' })
  // a file downloads as a one-entry archive under its base name
  const one = path.join(dir, 'one')
  await untarOnHost(client.files.downloadTar('/up-gnu/random.bin'), one)
  t.deepEqual(fs.readdirSync(one), ['random.bin'])
  t.true(fs.readFileSync(path.join(one, 'random.bin')).equals(fs.readFileSync(path.join(src, 'random.bin'))))
  await t.throwsAsync(async () => { for await (const c of client.files.downloadTar('/nope')) void c }, { code: 'NOT_FOUND' })
})

rt(title('tar download of a tree with entries it cannot read: each is left out with a warning naming it, the rest is archived; without onWarning the first fails the stream'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  // as alice: a root-only file and directory in a tree she can otherwise read
  await client.exec('mkdir -p /t/open /t/shut && echo a > /t/a && echo s > /t/secret && chmod 000 /t/secret && echo in > /t/shut/inner && chmod 700 /t/shut && echo o > /t/open/f && ln -s a /t/z-link')
  const dir = tmpDir(t)
  const warnings: StrataError[] = []
  await untarOnHost(client.files.downloadTar('/t', { user: 'alice', onWarning: (w) => warnings.push(w) }), path.join(dir, 'alice'))
  t.deepEqual(warnings.map((w) => [w.code, w.detail?.path, w.detail?.errno]), [
    ['SANDBOX_PERMISSION_DENIED', '/t/secret', 'EACCES'],
    ['SANDBOX_PERMISSION_DENIED', '/t/shut', 'EACCES'],
  ])
  t.regex(warnings[0]!.message, /cannot open: Permission denied; skipped/)
  t.regex(warnings[1]!.message, /cannot open the directory: Permission denied; its contents are skipped/)
  // everything after them too (the archive went on)
  t.is(fs.readFileSync(path.join(dir, 'alice/a'), 'utf8'), 'a\n')
  t.is(fs.readFileSync(path.join(dir, 'alice/open/f'), 'utf8'), 'o\n')
  t.is(fs.readlinkSync(path.join(dir, 'alice/z-link')), 'a')
  t.false(fs.existsSync(path.join(dir, 'alice/secret')))
  t.deepEqual(fs.readdirSync(path.join(dir, 'alice/shut')), [])
  // without onWarning the first such entry fails the stream, named
  const e = await t.throwsAsync(async () => { for await (const c of client.files.downloadTar('/t', { user: 'alice' })) void c })
  t.like(e, { code: 'SANDBOX_PERMISSION_DENIED', detail: { errno: 'EACCES', path: '/t/secret' } })
  // the single file of a request that cannot be read is an error, as before
  await t.throwsAsync(async () => { for await (const c of client.files.downloadTar('/t/secret', { user: 'alice' })) void c }, { code: 'SANDBOX_PERMISSION_DENIED' })

  // /proc of the agent: what a non-dumpable init hides cannot be read; each is named, the rest comes
  const procWarnings: StrataError[] = []
  const proc = path.join(dir, 'proc1')
  await untarOnHost(client.files.downloadTar('/proc/1', { onWarning: (w) => procWarnings.push(w) }), proc)
  t.log(`${procWarnings.length} warnings: ${[...new Set(procWarnings.map((w) => `${w.code} ${w.reason}`))].join('; ')}`)
  t.true(procWarnings.length > 0)
  for (const w of procWarnings) t.regex(w.detail?.path as string, /^\/proc\/1\/\S/)
  // pseudo files come with what they hold, not with stat's size (0 here): no zeros, no warnings about them
  const status = fs.readFileSync(path.join(proc, 'status'), 'utf8')
  t.regex(status, /^Name:\t\S+\n/)
  t.regex(status, /\nTgid:\t1\n/)
  t.regex(fs.readFileSync(path.join(proc, 'cmdline'), 'utf8'), /agent/)
  t.false(procWarnings.some((w) => /shrank|zeros/.test(w.message)))
  // the single file of a request too (size 0 at stat)
  const one = path.join(dir, 'one')
  await untarOnHost(client.files.downloadTar('/proc/1/status'), one)
  t.regex(fs.readFileSync(path.join(one, 'status'), 'utf8'), /^Name:/)
})

rt(title('tar download of a pseudo file larger than the first 64 KiB read (/proc/kallsyms, stat size 0) has those bytes, not stat\'s 0'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const head = (await client.exec('head -c 65536 /proc/kallsyms')).stdout as Buffer
  t.is(head.length, 65536, 'the kernel lists more than 64 KiB of symbols')
  t.is((await client.files.stat('/proc/kallsyms')).size, 0)
  const dir = tmpDir(t)
  // the single file of a request (a file inside a tree goes the same way: tw_file)
  await untarOnHost(client.files.downloadTar('/proc/kallsyms'), dir)
  t.true(fs.readFileSync(path.join(dir, 'kallsyms')).equals(head))
})

rt(title('writes leave holes for runs of zeros: files.write and a tar upload of a sparse file are sparse in the sandbox, with the same bytes'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  const MiB = 1024 * 1024
  const statOf = async (p: string) => {
    const [blocks, size] = (await client.exec(['stat', '-c', '%b %s', p])).stdout.toString().trim().split(' ').map(Number)
    return { allocated: blocks! * 512, size: size! }
  }
  const md5 = (b: Buffer) => crypto.createHash('md5').update(b).digest('hex')
  const md5In = async (p: string) => (await client.exec(['md5sum', p])).stdout.toString().split(' ')[0]
  // data at the start, in the middle at an unaligned offset, at the end; zeros between
  const data = Buffer.alloc(16 * MiB)
  data.write('head', 0)
  data.write('middle', 5 * MiB + 100)
  data.write('tail', 16 * MiB - 4)
  t.deepEqual(await client.files.write('/tmp/sparse', data), { bytes: data.length })
  const st = await statOf('/tmp/sparse')
  t.is(st.size, data.length)
  t.true(st.allocated <= 1 * MiB, `${st.allocated} bytes allocated for 16 MiB that are nearly all zeros`)
  t.is(await md5In('/tmp/sparse'), md5(data))
  // a file that ends in zeros keeps its size
  const endsInZeros = Buffer.alloc(3 * MiB + 5)
  endsInZeros[0] = 1
  await client.files.write('/tmp/ends-in-zeros', endsInZeros)
  t.like(await statOf('/tmp/ends-in-zeros'), { size: endsInZeros.length })
  t.true((await statOf('/tmp/ends-in-zeros')).allocated <= 64 * 1024)
  // appending zeros appends them (no seeking with O_APPEND), and a write to a device still works
  await client.files.write('/tmp/ends-in-zeros', Buffer.alloc(8192), { append: true })
  t.is((await statOf('/tmp/ends-in-zeros')).size, endsInZeros.length + 8192)
  t.deepEqual(await client.files.write('/dev/null', Buffer.alloc(MiB)), { bytes: MiB })
  // overwriting a file full of data with zeros leaves no old bytes behind
  await client.files.write('/tmp/was-full', crypto.randomBytes(MiB))
  await client.files.write('/tmp/was-full', Buffer.alloc(MiB))
  t.is(await md5In('/tmp/was-full'), md5(Buffer.alloc(MiB)))

  // a tar upload of a sparse file from GNU tar (without --sparse: the zeros are in the stream)
  const dir = tmpDir(t)
  const src = path.join(dir, 'src')
  fs.mkdirSync(src)
  const fd = fs.openSync(path.join(src, 'disk.img'), 'w')
  fs.writeSync(fd, Buffer.from('boot'), 0, 4, 0)
  fs.writeSync(fd, Buffer.from('end'), 0, 3, 32 * MiB - 3)
  fs.closeSync(fd)
  fs.writeFileSync(path.join(src, 'zeros-tail'), Buffer.concat([Buffer.from('x'), Buffer.alloc(MiB)]))
  await client.files.uploadTar('/up-sparse', hostTar(['-C', src, '-cf', '-', '.']))
  const img = await statOf('/up-sparse/disk.img')
  t.is(img.size, 32 * MiB)
  t.true(img.allocated <= 1 * MiB, `${img.allocated} bytes allocated for a 32 MiB image of 7 bytes`)
  t.is(await md5In('/up-sparse/disk.img'), md5(fs.readFileSync(path.join(src, 'disk.img'))))
  t.is((await statOf('/up-sparse/zeros-tail')).size, MiB + 1)
  t.is(await md5In('/up-sparse/zeros-tail'), md5(fs.readFileSync(path.join(src, 'zeros-tail'))))
  // GNU sparse entries (tar --sparse) are refused by name: unpacked as they are they would be a map, not the file (the GNU 'S' one was dropped silently)
  for (const format of ['gnu', 'posix']) {
    const e = await t.throwsAsync(client.files.uploadTar(`/up-gnu-sparse-${format}`, hostTar(['-C', src, '--sparse', `--format=${format}`, '-cf', '-', 'disk.img'])))
    t.like(e, { code: 'INVALID_ARGUMENT' }, format)
    t.regex(e!.message, /GNU sparse archive entries \(tar --sparse\) are not supported/, format)
    t.regex(String((e as StrataError).detail?.path), /disk\.img/, format)
  }
})

async function packed(entries: Array<{ header: Partial<tarStream.Header> & { name: string }; body?: string }>): Promise<Buffer> {
  const p = tarStream.pack()
  for (const e of entries) p.entry(e.header as tarStream.Header, e.body ?? '')
  p.finalize()
  const chunks: Buffer[] = []
  for await (const c of p) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

rt(title('hostile and broken archives are refused and write nothing outside the target'), async (t) => {
  const { client } = await startAgentContainer(t, { rootfs: busyboxRootfs(t) })
  await client.files.mkdir('/t')
  const cases: Array<[string, Buffer, string]> = [
    ['dot-dot', await packed([{ header: { name: '../escape.txt' }, body: 'x' }]), 'INVALID_ARGUMENT'],
    ['nested dot-dot', await packed([{ header: { name: 'a/../../escape.txt' }, body: 'x' }]), 'INVALID_ARGUMENT'],
    ['through a symlink', await packed([
      { header: { name: 'link', type: 'symlink', linkname: '/' } },
      { header: { name: 'link/escape.txt' }, body: 'x' }]), 'SANDBOX_NOT_A_DIRECTORY'],
    ['hard link outside', await packed([{ header: { name: 'h', type: 'link', linkname: '../etc/passwd' } }]), 'INVALID_ARGUMENT'],
    ['not a tar', crypto.randomBytes(4096), 'INVALID_ARGUMENT'],
  ]
  for (const [name, tar, code] of cases) {
    await t.throwsAsync(client.files.uploadTar(`/t/${name.replace(/ /g, '-')}`, tar), { code }, name)
  }
  t.is((await client.exec('ls /escape.txt /t/escape.txt 2>&1; true')).stdout.toString().match(/No such file/g)?.length, 2)
  // truncated inside a file body
  const good = await packed([{ header: { name: 'f' }, body: 'x'.repeat(5000) }])
  await t.throwsAsync(client.files.uploadTar('/t/trunc', good.subarray(0, 1024 + 512)), { code: 'INVALID_ARGUMENT' })
  // an absolute name lands inside the target
  await client.files.uploadTar('/t/abs', await packed([{ header: { name: '/etc/abs-name' }, body: 'in' }]))
  t.is((await client.files.read('/t/abs/etc/abs-name')).toString(), 'in')
  t.false((await client.exec('test -e /etc/abs-name')).exitCode === 0)
  // tar-stream archives (ustar with a PAX long name) unpack too
  await client.files.uploadTar('/t/ts', await packed([{ header: { name: `${'n'.repeat(200)}/file` }, body: 'long' }, { header: { name: 'dir', type: 'directory', mode: 0o700 } }]))
  t.is((await client.files.read(`/t/ts/${'n'.repeat(200)}/file`)).toString(), 'long')
  t.is((await client.files.stat('/t/ts/dir')).mode, 0o700)
})
