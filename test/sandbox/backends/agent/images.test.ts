// The agent needs nothing from the image: the same static binary serves a
// Debian rootfs (glibc, dash, python), a busybox one (covered by the other
// files) and an empty one (no shell, no libc, no /etc at all).
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import tarStream from 'tar-stream'
import { hasRunc, parseProbe, probeBinary, startAgentContainer } from '../../../helpers/agent-container.js'
import { DEBIAN_CACHE, DEBIAN_SPEC, debianRootfs, emptyRootfs } from '../../../helpers/busybox-rootfs.js'
import { until } from '../../../helpers/procs.js'
import { ensureDebianRootfs } from '../../../../sandbox/image/debootstrap.js'

// the tree is built here when no demo run built it first (minutes, once per machine)
const debOk = hasRunc && process.getuid?.() === 0
const emptyOk = hasRunc

async function listTar(r: AsyncIterable<Uint8Array>): Promise<Map<string, { type: string; size: number; data?: Buffer }>> {
  const ex = tarStream.extract()
  const out = new Map<string, { type: string; size: number; data?: Buffer }>()
  const done = (async () => {
    for await (const e of ex) {
      const chunks: Buffer[] = []
      for await (const c of e) chunks.push(c as Buffer)
      out.set(e.header.name, { type: e.header.type ?? 'file', size: e.header.size ?? 0, data: Buffer.concat(chunks) })
    }
  })()
  for await (const c of r) ex.write(c)
  ex.end(() => {})
  await done
  return out
}

;(debOk ? test : test.skip)(debOk ? 'Debian rootfs (overlay over the cached tree): exec, users, python, files, tar, attacks' : 'Debian rootfs (needs root and runc)', async (t) => {
  t.timeout(20 * 60_000)
  await ensureDebianRootfs(DEBIAN_SPEC)
  const { rootfs, cleanup } = debianRootfs(t)
  const before = fs.statSync(path.join(DEBIAN_CACHE, 'etc')).mtimeMs
  const c = await startAgentContainer(t, { rootfs, cleanup, binds: [{ source: probeBinary(), destination: '/probe' }] })
  t.is((await c.client.exec('cat /etc/debian_version')).stdout.toString().trim(), fs.readFileSync(path.join(DEBIAN_CACHE, 'etc/debian_version'), 'utf8').trim())
  t.is((await c.client.exec(['readlink', '-f', '/bin/sh'])).stdout.toString(), '/usr/bin/dash\n')
  const nobody = await c.client.exec('id -un; id -u; id -g; echo $HOME', { user: 'nobody' })
  t.is(nobody.stdout.toString(), 'nobody\n65534\n65534\n/nonexistent\n')
  const py = await c.client.exec(['python3', '-c', 'import sys, os; print(sys.version_info[0], os.getpid() > 1); sys.stdout.flush(); sys.exit(3)'])
  t.is(py.exitCode, 3)
  t.is(py.stdout.toString(), '3 True\n')
  const piped = await c.client.exec(['python3', '-c', 'import sys; d = sys.stdin.buffer.read(); print(len(d))'], { stdin: crypto.randomBytes(1 << 20) })
  t.is(piped.stdout.toString(), `${1 << 20}\n`)

  await c.client.files.write('/root/hello.py', 'print("hi from a file")\n')
  t.is((await c.client.exec(['python3', '/root/hello.py'])).stdout.toString(), 'hi from a file\n')
  const apt = await listTar(c.client.files.downloadTar('/etc/apt'))
  const hostApt: string[] = []
  const walk = (rel: string): void => {
    for (const n of fs.readdirSync(path.join(DEBIAN_CACHE, 'etc/apt', rel))) {
      const r = rel ? `${rel}/${n}` : n
      const st = fs.lstatSync(path.join(DEBIAN_CACHE, 'etc/apt', r))
      hostApt.push(st.isDirectory() ? `${r}/` : r)
      if (st.isDirectory()) walk(r)
    }
  }
  walk('')
  t.deepEqual([...apt.keys()].sort(), hostApt.sort())
  await c.client.files.uploadTar('/opt/up', c.client.files.downloadTar('/etc/apt'))
  t.is((await c.client.exec('diff -r /etc/apt /opt/up && echo same')).stdout.toString(), 'same\n')

  const p = parseProbe((await c.client.exec(['/probe', 'attacks'])).stdout.toString())
  for (const k of ['open_proc1_fd3', 'open_proc1_environ', 'open_proc1_mem']) t.true(['EACCES', 'EPERM'].includes(p[k]!), `${k} ${p[k]}`)
  t.is(p.ptrace_attach, 'EPERM')
  t.is(p.pidfd_getfd_3, 'EPERM')
  t.is((await c.client.ping()).pid, 1)
  // orphans are reaped in this image too
  await c.client.exec('for i in 1 2 3; do (sleep 0.3 &); done')
  await until(() => !c.procs().some((x) => x.comm === 'sleep'), 5000, 'orphans gone')
  t.deepEqual(c.procs().filter((x) => x.state === 'Z'), [])
  // writes went to the overlay's upper dir, never to the cache
  t.false(fs.existsSync(path.join(DEBIAN_CACHE, 'opt/up')))
  t.false(fs.existsSync(path.join(DEBIAN_CACHE, 'root/hello.py')))
  t.is(fs.statSync(path.join(DEBIAN_CACHE, 'etc')).mtimeMs, before)
})

;(emptyOk ? test : test.skip)(emptyOk ? 'empty rootfs (no shell, no libc, no /etc): ping, files, tar, and exec of a binary uploaded through the agent' : 'empty rootfs (needs root and runc)', async (t) => {
  const c = await startAgentContainer(t, { rootfs: emptyRootfs(t) })
  t.is((await c.client.ping()).pid, 1)
  const sh = await t.throwsAsync(c.client.exec('echo hi'), { code: 'NOT_FOUND' })
  t.regex(sh!.message, /\/bin\/sh/)
  const user = await t.throwsAsync(c.client.exec(['/x'], { user: 'alice' }), { code: 'NOT_FOUND' })
  t.regex(user!.message, /no \/etc\/passwd/)
  await t.throwsAsync(c.client.exec(['ls']), { code: 'NOT_FOUND' })

  await c.client.files.write('/bin/probe', fs.readFileSync(probeBinary()), { mode: 0o755, mkdirs: true })
  t.is((await c.client.exec(['/bin/probe', 'hello'])).stdout.toString(), 'hello from a static binary\n')
  t.is((await c.client.exec(['probe', 'hello'])).stdout.toString(), 'hello from a static binary\n') // found on the default PATH
  const asUser = await c.client.exec(['/bin/probe', 'hello'], { uid: 1234, gid: 1234 })
  t.is(asUser.exitCode, 0)
  // root needs no passwd entry: the default user of a sandbox works in any image
  const asRoot = await c.client.exec(['/bin/probe', 'hello'], { user: 'root' })
  t.is(asRoot.exitCode, 0)
  t.is(asRoot.stdout.toString(), 'hello from a static binary\n')

  await c.client.files.mkdir('/data/a/b')
  await c.client.files.write('/data/a/b/f', 'x')
  const tar = await listTar(c.client.files.downloadTar('/data'))
  t.deepEqual([...tar.keys()], ['a/', 'a/b/', 'a/b/f'])
  await c.client.files.uploadTar('/copy', c.client.files.downloadTar('/data'))
  t.deepEqual((await c.client.files.list('/copy/a/b')).map((e) => e.name), ['f'])
  t.is((await c.client.files.read('/copy/a/b/f')).toString(), 'x')
  const r = await c.client.exec(['/bin/probe', 'attacks'])
  t.true(['EACCES', 'EPERM'].includes(parseProbe(r.stdout.toString()).open_proc1_fd3!))
})
