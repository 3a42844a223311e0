// dirToErofs against the tree it walks and against the tarball of that tree:
// the layer is mounted by the kernel and must hold the source tree, attribute
// for attribute (times before 1970 to the nanosecond, sparse files with their
// holes not stored, xattrs, hard links, devices, odd names, paths longer than
// PATH_MAX), and GNU tar's tarball of the tree (sorted) built by tarToErofs
// must give the very same bytes. What a layer cannot hold is refused by name;
// a tree that changes under the walk fails the build.
import test, { type ExecutionContext } from 'ava'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { dirToErofs, tarToErofs } from '../../../../sandbox/image/layer/index.js'
import { diffTrees, sampleFile, snapshotTree } from '../../../helpers/tree-compare.js'
import { mount, tmpDir } from './helpers.js'

function sh(script: string, cwd: string): void {
  execFileSync('sh', ['-euc', script], { cwd, stdio: ['ignore', 'ignore', 'inherit'] })
}

/** A tree with every kind of entry a rootfs directory has, and what mkfs.erofs 1.5 lost or refused. */
function makeTree(root: string): void {
  fs.mkdirSync(root)
  sh(
    `mkdir -p d/e lost+found lost+found.d
     echo old > old
     touch -d '1960-01-01 00:00:00.123456789' old
     truncate -s 2G sparse
     printf abc | dd of=sparse bs=1 seek=1000000000 conv=notrunc status=none
     printf tail | dd of=sparse bs=1 seek=2147483000 conv=notrunc status=none
     truncate -s 8M small-sparse
     printf data | dd of=small-sparse bs=1 seek=5000000 conv=notrunc status=none
     head -c 100000 /dev/urandom > d/big
     echo x > d/a
     ln d/a d/e/hard
     ln -s d/a sym
     touch -h -d '1901-12-14 00:00:00.5' sym
     mknod dev c 1 3
     mknod blk b 7 200
     mkfifo fifo
     echo lf > lost+found/x
     printf 'nl' > "$(printf 'new\\nline')"
     printf 'u' > 'ünïcødé'
     setfattr -n user.color -v red d/a
     setfattr -n trusted.t -v 1 d/e
     chown 1234:5678 fifo d/big
     chmod 4755 d/a
     chmod 1777 d/e
     touch -d '1969-12-31 23:59:59.999999999' d/e/hard`,
    root,
  )
  // a socket: a tar cannot carry one, so the layer leaves it out as GNU tar does
  execFileSync('python3', ['-c', 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])', path.join(root, 'sock')])
}

/** The 2 GiB sparse file where it has data, its start and its end. */
function sparseSample(file: string): unknown {
  return sampleFile(file, [0, 1_000_000_000 - 8, 2_147_483_000 - 8, 2 ** 31 - 8])
}

test('a directory keeps what its tar keeps (times before 1970, holes, xattrs, links, devices, lost+found, odd names) and gives the same layer as GNU tar of it', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  makeTree(src)
  const built = await dirToErofs(src, path.join(work, 'dir.erofs'))
  t.is(built.size, fs.statSync(path.join(work, 'dir.erofs')).size)
  // the 2 GiB file's holes are not stored
  t.true(built.size < 1024 * 1024, `layer of ${built.size} bytes`)
  mount(t, path.join(work, 'dir.erofs'), path.join(work, 'mnt'), 'erofs', null)
  // (the 2 GiB file is compared where it has data: hashing its zeros twice takes most of a minute)
  const typeOnly = (rel: string): boolean => rel === 'sparse'
  const expected = await snapshotTree(src, { typeOnly })
  t.is(expected.get('old')?.mtimeNs, -315619199876543211n)
  t.is(expected.get('sock')?.type, 'socket')
  expected.delete('sock')
  t.deepEqual(diffTrees(await snapshotTree(path.join(work, 'mnt'), { typeOnly }), expected), [])
  t.deepEqual(sparseSample(path.join(work, 'mnt', 'sparse')), sparseSample(path.join(src, 'sparse')))
  // directory times and link counts too (the snapshot leaves them out)
  for (const rel of ['', 'd', 'd/e', 'lost+found']) {
    const a = fs.lstatSync(path.join(src, rel), { bigint: true })
    const b = fs.lstatSync(path.join(work, 'mnt', rel), { bigint: true })
    t.is(b.mtimeNs, a.mtimeNs, rel)
  }
  t.is(fs.lstatSync(path.join(work, 'mnt', 'd/a')).nlink, 2)

  // GNU tar's tarball of the tree, names sorted as the walk sorts them, is the same layer byte for byte
  const tar = path.join(work, 'src.tar')
  execFileSync('tar', ['--sort=name', '--format=posix', '--sparse', '--xattrs', '--xattrs-include=*', '--numeric-owner', '-C', src, '-cf', tar, '.'], { stdio: ['ignore', 'ignore', 'ignore'] })
  const fromTar = await tarToErofs(fs.createReadStream(tar), path.join(work, 'tar.erofs'))
  t.is(fromTar.size, built.size)
  t.true(fs.readFileSync(path.join(work, 'tar.erofs')).equals(fs.readFileSync(path.join(work, 'dir.erofs'))))
})

test('paths longer than PATH_MAX are walked and kept', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  fs.mkdirSync(src)
  // (fs.rmSync cannot remove what no path reaches; GNU rm walks by descriptor)
  t.teardown(() => execFileSync('rm', ['-rf', src]))
  // 20 levels of 250-byte names: a path of 5000 bytes (made relative to each level, as no one call may name it)
  const name = 'n'.repeat(250)
  execFileSync('python3', ['-c', `import os
for i in range(20):
    os.mkdir('${name}'); os.chdir('${name}')
open('f', 'w').write('deep\\n')
os.utime('f', ns=(0, -620420094500000000))`], { cwd: src })
  await dirToErofs(src, path.join(work, 'deep.erofs'))
  mount(t, path.join(work, 'deep.erofs'), path.join(work, 'mnt'), 'erofs', null)
  const list = (root: string): string =>
    // (a directory's size is its filesystem's business)
    execFileSync('find', ['.', '(', '-type', 'd', '-printf', '%P %y %m %U %G %T@\\n', ')', '-o', '-printf', '%P %y %m %U %G %s %T@\\n'], { cwd: root, encoding: 'utf8', maxBuffer: 1 << 24 })
      .split('\n')
      .sort()
      .join('\n')
  const want = list(src)
  t.true(want.includes(`${`${name}/`.repeat(20)}f f 644 0 0 5 -620420095.5`))
  t.is(list(path.join(work, 'mnt')), want)
})

test('what a layer cannot hold is refused by name: a name or symlink target that is not UTF-8, a .wh. name', async (t) => {
  const work = tmpDir(t)
  const out = path.join(work, 'x.erofs')
  const a = path.join(work, 'a')
  fs.mkdirSync(path.join(a, 'sub'), { recursive: true })
  fs.writeFileSync(Buffer.concat([Buffer.from(path.join(a, 'sub') + '/bad'), Buffer.from([0xff]), Buffer.from('name')]), 'x')
  const e1 = await t.throwsAsync(dirToErofs(a, out), { code: 'IMAGE_BAD_ARCHIVE' })
  t.regex(e1!.message, /a name in "sub" of the directory is not valid UTF-8 \(hex 626164ff6e616d65\)/)

  const b = path.join(work, 'b')
  fs.mkdirSync(b)
  fs.symlinkSync(Buffer.from([0x74, 0xfe]) as unknown as string, path.join(b, 'link'))
  const e2 = await t.throwsAsync(dirToErofs(b, out), { code: 'IMAGE_BAD_ARCHIVE' })
  t.regex(e2!.message, /the target of the symlink "link" is not valid UTF-8/)

  const c = path.join(work, 'c')
  fs.mkdirSync(path.join(c, 'etc'), { recursive: true })
  fs.writeFileSync(path.join(c, 'etc', '.wh.passwd'), '')
  const e3 = await t.throwsAsync(dirToErofs(c, out), { code: 'IMAGE_BAD_ARCHIVE' })
  t.regex(e3!.message, /"etc\/\.wh\.passwd": a name starting with \.wh\. is an OCI whiteout/)
  // nothing is left behind
  t.deepEqual(fs.readdirSync(work).sort(), ['a', 'b', 'c'])
})

/** Builds `src` and changes it from onBytes once file data has been read (a real change under the walk). */
async function changedUnder(t: ExecutionContext, change: (src: string) => void): Promise<Error> {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  fs.mkdirSync(src)
  fs.writeFileSync(path.join(src, 'a'), Buffer.alloc(3 * 1024 * 1024, 1))
  fs.writeFileSync(path.join(src, 'b'), 'b')
  let done = false
  const e = await t.throwsAsync(
    dirToErofs(src, path.join(work, 'x.erofs'), {
      onBytes: () => {
        if (done) return
        done = true
        change(src)
      },
    }),
    { code: 'IMAGE_BUILD_FAILED' },
  )
  t.deepEqual(fs.readdirSync(work), ['src'])
  return e!
}

test('a tree that changes under the walk fails the build: a file that grows or shrinks while read, an entry that vanishes', async (t) => {
  t.regex((await changedUnder(t, (s) => fs.appendFileSync(path.join(s, 'a'), 'more'))).message, /src\/a changed while it was imported/)
  t.regex((await changedUnder(t, (s) => fs.truncateSync(path.join(s, 'a'), 1024 * 1024 + 5))).message, /src\/a shrank \(1048581 of 3145728 bytes\) while it was imported/)
  t.regex((await changedUnder(t, (s) => fs.rmSync(path.join(s, 'b')))).message, /src\/b vanished while it was imported/)
})

test('a tree that holds the build\'s own work dir (an import of / or /tmp) leaves that directory out instead of taking in the layer being written', async (t) => {
  const work = tmpDir(t)
  const src = path.join(work, 'src')
  fs.mkdirSync(path.join(src, 'work'), { recursive: true })
  fs.writeFileSync(path.join(src, 'f'), 'f')
  const out = path.join(src, 'work', 'x.erofs')
  await dirToErofs(src, out, { skip: [path.join(src, 'work')] })
  mount(t, out, path.join(work, 'mnt'), 'erofs', null)
  t.deepEqual(fs.readdirSync(path.join(work, 'mnt')), ['f'])
})
