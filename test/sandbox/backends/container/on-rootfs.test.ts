// The container backend (runc) on root filesystems built by RootfsBuilder from
// an image stored in the DFS: the fixture image's EROFS layers are mounted
// through the node's FUSE mount and stacked with overlayfs, datasets are
// read-only binds of DFS paths, and the sandbox is checked from inside, through
// its agent. The fixture image has no shell and no libc, so everything but the
// last test uses only requests the agent serves itself (files.*, tar download),
// never an exec of an image binary.
//
// Every test creates and deletes its own sandboxes and rootfs, asserts that
// nothing is left mounted or running, and has teardowns that do the same when
// an assertion fails midway (AVA runs teardowns last-registered first: the
// sandbox goes before its rootfs, and the node's state dir teardown from
// helpers.ts unmounts whatever is still left before removing any file).
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import test, { type ExecutionContext } from 'ava'
import tarStream from 'tar-stream'
import { StrataError } from '../../../../fs/common/errors.js'
import { native } from '../../../../fs/common/native.js'
import type { ExecResult, FileEntry } from '../../../../sandbox/backends/agent/index.js'
import { ContainerBackend } from '../../../../sandbox/backends/container/index.js'
import type { SandboxHandle } from '../../../../sandbox/backends/types.js'
import type { DatasetMount, Rootfs, RootfsBuilder, LayerMounts } from '../../../../sandbox/rootfs/index.js'
import { mountsUnder } from '../../../../sandbox/rootfs/mounts.js'
import { hasRunc } from '../../../helpers/agent-container.js'
import { BUSYBOX, hasBusybox } from '../../../helpers/busybox-rootfs.js'
import { diffTrees, type Tree, type TreeEntry } from '../../../helpers/tree-compare.js'
import { node, storeLayer, useRootfsCluster, type RootfsEnv } from '../../rootfs/helpers.js'

const skip = hasRunc ? undefined : 'needs root and runc'
// no cluster at all when the tests cannot run
const env = skip ? ({} as RootfsEnv) : useRootfsCluster(test)
const run = skip ? test.serial.skip : test.serial
const runBusybox = skip || !hasBusybox ? test.serial.skip : test.serial
const title = (s: string, needs = skip): string => (needs ? `${s} (${needs})` : s)

const MiB = 1024 * 1024

function digests(): string[] {
  return env.manifest.layers.map((l) => l.digest)
}

type Node = { layers: LayerMounts; builder: RootfsBuilder; dir: string; nodeId: string }

interface Booted {
  h: SandboxHandle
  rootfs: Rootfs
  /** Deletes the sandbox, then its rootfs (idempotent; the teardown calls it too). */
  remove(): Promise<void>
}

let seq = 0

/** A rootfs from `layers` (default: the fixture image) and a container sandbox on it. */
async function boot(t: ExecutionContext, n: Node, opts: { layers?: string[]; datasets?: DatasetMount[] } = {}): Promise<Booted> {
  const id = `onrfs-${process.pid}-${++seq}`
  // Two directories per sandbox: the container backend removes its stateDir recursively on delete,
  // which must never happen while the overlay (and a dataset bind into the DFS) is mounted inside it.
  const base = path.join(n.dir, 'sb', id)
  let h: SandboxHandle | undefined
  let r: Rootfs | undefined
  const remove = async (): Promise<void> => {
    try {
      await h?.delete()
    } finally {
      await r?.destroy()
    }
  }
  // registered before anything is created, so a failure anywhere below is still undone
  t.teardown(remove)
  r = await n.builder.create({ sandboxId: id, layers: opts.layers ?? digests(), datasets: opts.datasets ?? [], stateDir: path.join(base, 'rootfs') })
  h = await new ContainerBackend().create({ id, rootfsDir: r.dir, stateDir: path.join(base, 'ct') })
  return { h, rootfs: r, remove }
}

function alive(pid: number): boolean {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return s[s.lastIndexOf(')') + 2] !== 'Z'
  } catch {
    return false
  }
}

/** Removes the sandboxes and checks that nothing of them is left: processes, runtime state, mounts, layer holds, leases. */
async function removeAll(t: ExecutionContext, n: Node, boxes: Booted[]): Promise<void> {
  const pids = boxes.map((b) => b.h.pid)
  for (const b of boxes) await b.remove()
  for (const b of boxes) {
    t.false(fs.existsSync(b.h.stateDir), 'container state removed')
    t.false(fs.existsSync(b.rootfs.stateDir), 'rootfs state removed')
  }
  for (const pid of pids) t.false(alive(pid), `sandbox init ${pid} gone`)
  t.deepEqual(mountsUnder(n.dir), [], 'nothing mounted under the node dir')
  t.deepEqual(n.layers.list(), [], 'no layer held')
  t.deepEqual((await env.store.listLeases()).filter((l) => l.holder === n.nodeId), [], 'no layer leased')
}

// ---------------------------------------------------------------- the tree as the sandbox sees it

/** glibc's makedev, which is how Node reports st_rdev (snapshotTree's `rdev`). */
function makedev(major: number, minor: number): number {
  const M = BigInt(major)
  const m = BigInt(minor)
  return Number(((M & 0xfffn) << 8n) | ((M & ~0xfffn) << 32n) | (m & 0xffn) | ((m & ~0xffn) << 12n))
}

const TAR_TYPES: Record<string, TreeEntry['type']> = {
  file: 'file', link: 'file', symlink: 'symlink', directory: 'dir', 'character-device': 'char', 'block-device': 'block', fifo: 'fifo',
}

/**
 * Adds the entries of one of the agent's tar archives to `tree`, names prefixed with `prefix`.
 * Returns the hard-link records (path -> the path it links to) so the caller can check them.
 */
async function addTar(tree: Tree, stream: Readable, prefix: string): Promise<Map<string, string>> {
  const hardLinks = new Map<string, string>()
  const ex = tarStream.extract()
  const consume = (async () => {
    for await (const e of ex) {
      const hd = e.header
      const name = prefix + hd.name.replace(/\/+$/, '')
      const type = TAR_TYPES[hd.type ?? 'file']
      if (!type) throw new Error(`${name}: tar entry of type ${hd.type}`)
      const entry: TreeEntry = { type, mode: ((hd.mode ?? 0) & 0o7777).toString(8), uid: hd.uid ?? 0, gid: hd.gid ?? 0 }
      const h = crypto.createHash('sha256')
      let size = 0
      for await (const c of e) {
        h.update(c as Buffer)
        size += (c as Buffer).length
      }
      if (hd.type === 'link') {
        // the agent archives a hard link once, later names point to the first; its content is there
        const first = prefix + (hd.linkname ?? '')
        const target = tree.get(first)
        if (!target) throw new Error(`${name}: hard link to ${first}, which the archive did not hold before`)
        hardLinks.set(name, first)
        entry.size = target.size!
        entry.sha256 = target.sha256!
      } else if (type === 'file') {
        entry.size = size
        entry.sha256 = h.digest('hex')
      }
      if (type === 'symlink') entry.target = hd.linkname ?? ''
      if (type === 'char' || type === 'block') entry.rdev = makedev(hd.devmajor ?? 0, hd.devminor ?? 0)
      tree.set(name, entry)
    }
  })()
  // an error on either side (the agent's, or an entry we cannot record) ends both
  await Promise.all([pipeline(stream, ex), consume.catch((e: unknown) => { ex.destroy(e as Error); throw e })])
  return hardLinks
}

function fromEntry(e: FileEntry): TreeEntry {
  const out: TreeEntry = { type: e.type as TreeEntry['type'], mode: e.mode.toString(8), uid: e.uid, gid: e.gid }
  if (e.type === 'symlink') out.target = e.target ?? ''
  return out
}

/** snapshotTree leaves these out too: overlayfs' own attributes and security labels say nothing about the image. */
const IGNORED_XATTRS = ['trusted.overlay.', 'security.']

/**
 * The sandbox's tree, from inside: the agent lists `/`, downloads every top-level entry but the
 * `skip` ones as a tar archive and lists every directory for the nanosecond mtimes (ustar carries
 * seconds). Two things the agent's protocol cannot carry come from the sandbox's own root as the
 * kernel resolves it for its init (/proc/<pid>/root: the sandbox's mount namespace, so the same
 * mounts, not the host's view of the rootfs): xattrs, and which paths share an inode — hard links
 * across top-level directories are in different archives, so the tar's link records cannot say.
 */
async function treeInside(h: SandboxHandle, skipTop: ReadonlySet<string>): Promise<{ tree: Tree; top: FileEntry[]; hardLinks: Map<string, string> }> {
  const agent = h.agent
  const tree: Tree = new Map()
  const hardLinks = new Map<string, string>()
  const top = await agent.files.list('/')
  tree.set('.', fromEntry(await agent.files.stat('/')))
  for (const e of [...top].sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (skipTop.has(e.name)) continue
    if (e.type === 'dir') {
      tree.set(e.name, fromEntry(e))
      for (const [k, v] of await addTar(tree, agent.files.downloadTar(`/${e.name}`), `${e.name}/`)) hardLinks.set(k, v)
    } else if (e.type === 'symlink') {
      // downloadTar follows a symlink it is pointed at; the listing has all a symlink carries
      tree.set(e.name, fromEntry(e))
    } else {
      for (const [k, v] of await addTar(tree, agent.files.downloadTar(`/${e.name}`), '')) hardLinks.set(k, v)
    }
  }
  // mtimes of everything but directories (snapshotTree records none for directories)
  const dirs = [...tree].filter(([, e]) => e.type === 'dir').map(([rel]) => rel)
  for (const dir of dirs) {
    for (const c of await agent.files.list(dir === '.' ? '/' : `/${dir}`)) {
      const rel = dir === '.' ? c.name : `${dir}/${c.name}`
      const e = tree.get(rel)
      if (e && e.type !== 'dir') e.mtimeNs = c.mtimeNs
    }
  }
  const root = `/proc/${h.pid}/root`
  const inodes = new Map<string, string[]>()
  for (const [rel, e] of tree) {
    // with the slash, the root itself rather than the /proc magic link
    const p = rel === '.' ? `${root}/` : path.join(root, rel)
    const names = native().llistxattr(p).filter((x) => !IGNORED_XATTRS.some((pre) => x.startsWith(pre))).sort()
    if (names.length) e.xattrs = Object.fromEntries(names.map((x) => [x, native().lgetxattr(p, x).toString('hex')]))
    const st = fs.lstatSync(p, { bigint: true })
    if (e.type !== 'dir' && st.nlink > 1n) inodes.set(`${st.dev}:${st.ino}`, [...(inodes.get(`${st.dev}:${st.ino}`) ?? []), rel])
  }
  for (const group of inodes.values()) {
    if (group.length < 2) continue
    for (const rel of group) tree.get(rel)!.links = group.filter((x) => x !== rel).sort()
  }
  return { tree, top, hardLinks }
}

/** `tree` without `rel` and everything under it. */
function without(tree: Tree, rels: readonly string[]): Tree {
  return new Map([...tree].filter(([k]) => !rels.some((r) => k === r || k.startsWith(`${r}/`))))
}

// ---------------------------------------------------------------- tests

run(title('the tree seen inside the sandbox is the image: the agent downloads it and it equals umoci unpack'), async (t) => {
  const n = node(t, env)
  const box = await boot(t, n)
  t.is((await box.h.agent.ping()).pid, 1)

  // What the runtime puts into the rootfs, and nothing else is allowed to differ (config from
  // sandbox/backends/container/spec.ts; of Docker's /etc/hostname, /etc/hosts and
  // /etc/resolv.conf only the first two are added, so only those are excepted):
  //  - /proc and /sys: mount points runc creates (the image has neither), with procfs and a
  //    read-only sysfs on them; their contents are the kernel's.
  //  - /dev: the image has one (with dev/null and dev/loop0), hidden under the runtime's tmpfs
  //    with runc's own device nodes; even the directory's attributes are the tmpfs'.
  //  - /.strata and /.strata/agent: the mount point runc creates for the read-only bind of the
  //    host's agent binary.
  //  - /etc/hosts and /etc/hostname: the sandbox's own, bind-mounted from its state dir.
  const runtimeMounts = ['proc', 'sys', 'dev', '.strata']
  const runtimeFiles = ['etc/hosts', 'etc/hostname']
  const inside = await treeInside(box.h, new Set(runtimeMounts))
  const topNames = inside.top.map((e) => e.name).sort()
  const imageTop = [...env.reference.keys()].filter((k) => k !== '.' && !k.includes('/'))
  t.deepEqual(topNames, [...new Set([...imageTop, ...runtimeMounts])].sort(), 'the image\'s top-level entries plus the runtime\'s mount points')
  for (const m of runtimeMounts) t.is(inside.top.find((e) => e.name === m)?.type, 'dir', `/${m}`)
  t.deepEqual((await box.h.agent.files.list('/.strata')).map((e) => `${e.name} ${e.type}`), ['agent file'])
  t.true(env.reference.has('dev/null'), 'the image has device nodes under /dev (hidden by the tmpfs)')

  const expected = without(env.reference, ['dev', ...runtimeFiles])
  t.deepEqual(diffTrees(without(inside.tree, runtimeFiles), expected), [])
  t.is(inside.tree.get('etc/hostname')?.type, 'file')
  t.regex((await box.h.agent.files.read('/etc/hosts')).toString(), /^127\.0\.0\.1\tlocalhost$/m)
  t.log(`${inside.tree.size} entries compared`)
  // the agent's own hard-link records agree with the inode identity
  t.true(inside.hardLinks.size >= 1, 'the archives hold hard links (bin/tool2 -> bin/tool)')
  for (const [p, first] of inside.hardLinks) t.true(inside.tree.get(p)?.links?.includes(first), `${p} is a link of ${first}`)
  // the fixture's hard links span top-level directories (bin/, data/): the groups are whole
  t.deepEqual(env.reference.get('data/tool-link')?.links, ['bin/tool', 'bin/tool2'])

  // and the comparison does see a change made inside: exactly that file differs
  await box.h.agent.files.write('/etc/passwd', 'root:x:0:0\nu:x:1234:9999\n')
  const changed = diffTrees(without((await treeInside(box.h, new Set(runtimeMounts))).tree, runtimeFiles), expected)
  t.true(changed.length > 0 && changed.every((l) => l.startsWith('etc/passwd: ')), changed.join('\n'))
  t.true(changed.some((l) => l.startsWith('etc/passwd: sha256 ')))

  await removeAll(t, n, [box])
})

run(title('a dataset is mounted read-only at /data: the sandbox reads the DFS bytes, writes there fail with SANDBOX_READ_ONLY, elsewhere they work'), async (t) => {
  const n = node(t, env)
  const src = `/datasets/on-rootfs-${process.pid}-${crypto.randomBytes(3).toString('hex')}`
  t.teardown(() => env.fs.rm(src, { recursive: true }).catch(() => undefined))
  await env.fs.mkdir(`${src}/sub`, { recursive: true })
  // random bytes: a read that returns another file's (or a stale) block cannot match by accident
  const files: Record<string, Buffer> = {
    'small.txt': crypto.randomBytes(1000),
    'sub/big.bin': crypto.randomBytes(3 * MiB / 2 + 4097),
    'empty': Buffer.alloc(0),
  }
  for (const [p, data] of Object.entries(files)) await env.fs.writeFile(`${src}/${p}`, data)

  const box = await boot(t, n, { datasets: [{ source: src, target: '/data' }] })
  const files_ = box.h.agent.files
  // the dataset replaces the image's /data (which holds big.bin, tool-link, ...)
  t.deepEqual((await files_.list('/data')).map((e) => e.name).sort(), ['empty', 'small.txt', 'sub'])
  for (const [p, data] of Object.entries(files)) {
    const got = await files_.read(`/data/${p}`)
    t.is(got.length, data.length, p)
    t.true(got.equals(data), `${p}: bytes equal the DFS file`)
  }
  t.is((await files_.stat('/data/sub/big.bin')).size, files['sub/big.bin']!.length)

  const readOnly = async (what: string, p: Promise<unknown>): Promise<void> => {
    const e = await t.throwsAsync(p, { instanceOf: StrataError }, what)
    t.is(e?.code, 'SANDBOX_READ_ONLY', what)
    t.is(e?.detail?.errno, 'EROFS', what)
  }
  await readOnly('new file', files_.write('/data/x', 'x'))
  await readOnly('overwrite', files_.write('/data/small.txt', 'x'))
  await readOnly('append', files_.write('/data/sub/big.bin', 'x', { append: true }))
  await readOnly('mkdir', files_.mkdir('/data/d'))
  await readOnly('remove', files_.remove('/data/small.txt'))
  // nothing reached the DFS
  t.false(await env.fs.exists(`${src}/x`))
  t.true(Buffer.from(await env.fs.readFile(`${src}/small.txt`)).equals(files['small.txt']!))

  // the rest of the rootfs is writable, and the write lands in this sandbox's upper dir
  t.deepEqual(await files_.write('/etc/written', 'ok\n'), { bytes: 3 })
  t.is((await files_.read('/etc/written')).toString(), 'ok\n')
  t.is(fs.readFileSync(path.join(box.rootfs.upperDir, 'etc/written'), 'utf8'), 'ok\n')
  await files_.write('/tmp/big', files['sub/big.bin']!)
  t.true((await files_.read('/tmp/big')).equals(files['sub/big.bin']!))

  await removeAll(t, n, [box])
  // deleting the sandbox and its rootfs removed mount points, not the dataset
  for (const [p, data] of Object.entries(files)) t.true(Buffer.from(await env.fs.readFile(`${src}/${p}`)).equals(data), `${p} intact in the DFS`)
})

run(title('two sandboxes from the same image never see each other\'s writes'), async (t) => {
  const n = node(t, env)
  const a = await boot(t, n)
  const b = await boot(t, n)
  const A = a.h.agent.files
  const B = b.h.agent.files
  // one mount of each layer serves both
  t.deepEqual(n.layers.list().map((l) => Object.keys(l.users).length), digests().map(() => 2))

  const notFound = async (what: string, p: Promise<unknown>): Promise<void> => {
    const e = await t.throwsAsync(p, { instanceOf: StrataError }, what)
    t.is(e?.code, 'NOT_FOUND', what)
  }
  // a new file
  await A.write('/tmp/a', 'from a\n')
  await notFound('b stats a\'s /tmp/a', B.stat('/tmp/a'))
  await B.write('/tmp/a', 'from b, longer\n')
  t.is((await A.read('/tmp/a')).toString(), 'from a\n')
  t.is((await B.read('/tmp/a')).toString(), 'from b, longer\n')

  // an image file overwritten in a: b still reads the image's bytes
  const passwd = env.reference.get('etc/passwd')!
  const sha = (buf: Buffer): string => crypto.createHash('sha256').update(buf).digest('hex')
  t.is(sha(await A.read('/etc/passwd')), passwd.sha256!)
  await A.write('/etc/passwd', 'root:x:0:0\nmallory:x:0:0\n')
  t.is((await A.read('/etc/passwd')).toString(), 'root:x:0:0\nmallory:x:0:0\n')
  t.is(sha(await B.read('/etc/passwd')), passwd.sha256!)
  t.is((await B.stat('/etc/passwd')).size, passwd.size!)
  // an image file removed in a, a directory made in b
  await A.remove('/opq/new')
  await notFound('a removed /opq/new', A.stat('/opq/new'))
  t.is((await B.stat('/opq/new')).type, 'file')
  await B.mkdir('/srv/only-b/deep')
  await notFound('a stats b\'s directory', A.stat('/srv/only-b'))

  // each write went to its own sandbox's upper dir, none into the layers
  t.is(fs.readFileSync(path.join(a.rootfs.upperDir, 'tmp/a'), 'utf8'), 'from a\n')
  t.is(fs.readFileSync(path.join(b.rootfs.upperDir, 'tmp/a'), 'utf8'), 'from b, longer\n')
  t.false(fs.existsSync(path.join(b.rootfs.upperDir, 'etc/passwd')))
  for (const d of digests()) t.false(fs.existsSync(path.join(n.layers.mountpoint(d), 'tmp/a')))

  await removeAll(t, n, [a, b])
})

runBusybox(title('yes on a busybox layer from the DFS: the output is capped, the host side stays small, the sandbox stays usable', skip ?? (hasBusybox ? undefined : 'needs busybox-static')), async (t) => {
  // The fixture image has no busybox; a layer holding a static one, stored in the DFS like the
  // image's, goes on top of it (exec reads the binary through EROFS and the FUSE mount).
  const bb = await storeLayer(env, t, async (root) => {
    await fs.promises.mkdir(path.join(root, 'bin'))
    await fs.promises.copyFile(BUSYBOX, path.join(root, 'bin/busybox'))
    await fs.promises.chmod(path.join(root, 'bin/busybox'), 0o755)
    for (const applet of ['sh', 'yes', 'echo']) await fs.promises.symlink('busybox', path.join(root, 'bin', applet))
  })
  const n = node(t, env)
  const box = await boot(t, n, { layers: [...digests(), bb.digest] })

  const cap = 64 * 1024
  // The test process stands in for the daemon: it holds the AgentClient the output arrives through.
  // Sampled while yes runs: the cap must bound what the host buffers, whatever the agent drops.
  const before = process.memoryUsage().rss
  let peak = before
  const sampler = setInterval(() => { peak = Math.max(peak, process.memoryUsage().rss) }, 20)
  let y: ExecResult
  try {
    y = await box.h.agent.exec(['yes'], { maxOutputBytes: cap, timeoutMs: 2000 })
  } finally {
    clearInterval(sampler)
  }
  peak = Math.max(peak, process.memoryUsage().rss)
  t.log(`yes: ${y.totalStdout} bytes produced, ${y.droppedStdout} dropped; host RSS ${(before / MiB).toFixed(0)} -> peak ${(peak / MiB).toFixed(0)} MiB`)
  t.true(y.timedOut)
  t.is(y.signal, 'SIGKILL')
  t.true(y.truncated)
  t.is(y.stdout.length, cap)
  t.true(y.droppedStdout > 0)
  t.is(y.droppedStdout, y.totalStdout - cap)
  t.is(y.droppedStderr, 0)
  // head and tail of the stream, both whole "y\n" lines (the gap sits at an even offset)
  t.true(y.stdout.equals(Buffer.from('y\n'.repeat(cap / 2))))
  t.true(peak - before < 200 * MiB, `host RSS grew by ${((peak - before) / MiB).toFixed(0)} MiB`)

  const after = await box.h.agent.exec(['echo', 'still here'])
  t.is(after.exitCode, 0)
  t.is(after.stdout.toString(), 'still here\n')
  t.is((await box.h.status()).state, 'running')

  await removeAll(t, n, [box])
})
