import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { StrataError } from '../../../../fs/common/errors.js'
import { ContainerBackend, cpuResources } from '../../../../sandbox/backends/container/index.js'
import { busyboxRootfs, hasBusybox } from '../../../helpers/busybox-rootfs.js'
import { hasRunc } from '../../../helpers/agent-container.js'
import { tmpDir } from '../../../helpers/procs.js'
import { runConformance, sandbox } from '../conformance.js'

const skip = !hasRunc ? 'needs root and runc' : !hasBusybox ? 'needs busybox-static' : undefined
const run = skip ? test.serial.skip : test.serial

runConformance(test, () => new ContainerBackend(), { prefix: 'ct', ...(skip ? { skip } : {}) })

run('container: config.json carries the limits, namespaces and the agent bind mount', async (t) => {
  const h = await sandbox(t, new ContainerBackend(), { resources: { cpu: 0.5, memoryMiB: 128, pids: 100 } }, 'ct')
  const cfg = JSON.parse(fs.readFileSync(path.join(h.stateDir, 'bundle/config.json'), 'utf8'))
  t.deepEqual(cfg.linux.resources.memory, { limit: 128 * 1024 * 1024, swap: 128 * 1024 * 1024 })
  t.deepEqual(cfg.linux.resources.cpu, { shares: 512, quota: 50000, period: 100000 })
  t.deepEqual(cfg.linux.resources.pids, { limit: 100 })
  // cpu.shares holds at most 262144 (256 CPUs' worth): more CPUs keep the most, the quota says the rest
  t.deepEqual(cpuResources(1024), { shares: 262144, quota: 102400000, period: 100000 })
  t.deepEqual(cfg.linux.namespaces.map((n: { type: string }) => n.type).sort(), ['ipc', 'mount', 'network', 'pid', 'uts'])
  t.is(cfg.process.args[0], '/.strata/agent')
  // the cgroup the runtime made holds the limits
  const cg = `/sys/fs/cgroup/memory/strata/${h.id}/memory.limit_in_bytes`
  if (fs.existsSync(cg)) t.is(fs.readFileSync(cg, 'utf8').trim(), String(128 * 1024 * 1024))
  const q = `/sys/fs/cgroup/cpu/strata/${h.id}/cpu.cfs_quota_us`
  if (fs.existsSync(q)) t.is(fs.readFileSync(q, 'utf8').trim(), '50000')
  // the agent binary is read-only inside, and the control socket is not inside
  const w = await h.agent.exec('echo x > /.strata/agent')
  t.not(w.exitCode, 0)
  const ls = await h.agent.exec('ls -la /.strata')
  t.notRegex(ls.stdout.toString(), /sock/)
  await h.delete()
  t.false(fs.existsSync(`/sys/fs/cgroup/memory/strata/${h.id}`))
  t.false(fs.existsSync(`/sys/fs/cgroup/pids/strata/${h.id}`))
})

run('container: /etc/hosts and /etc/hostname are the sandbox\'s (bind-mounted from its state dir), so localhost resolves without a network', async (t) => {
  const h = await sandbox(t, new ContainerBackend(), { hostname: 'box1' }, 'ct')
  t.is((await h.agent.files.read('/etc/hostname')).toString(), 'box1\n')
  const hosts = (await h.agent.files.read('/etc/hosts')).toString()
  t.regex(hosts, /^127\.0\.0\.1\tlocalhost$/m)
  t.regex(hosts, /^::1\tlocalhost ip6-localhost ip6-loopback$/m)
  t.regex(hosts, /^127\.0\.1\.1\tbox1$/m)
  t.is(fs.readFileSync(path.join(h.stateDir, 'hosts'), 'utf8'), hosts)
  // the resolver finds both names through the file and they reach the loopback (without it: "bad address")
  for (const name of ['localhost', 'box1']) {
    const r = await h.agent.exec(`nc -l -p 4711 >/dev/null & for i in 1 2 3 4 5 6 7 8 9 10; do echo hi | nc -w 1 ${name} 4711 2>/dev/null && break; sleep 0.2; done; echo rc=$?; nc -w 1 ${name} 1 </dev/null`)
    t.is(r.stdout.toString(), 'rc=0\n', `${name}: ${r.stderr.toString()}`)
    t.regex(r.stderr.toString(), /Connection refused/, name)
  }
  const r = await h.agent.exec(['cat', '/etc/hostname'], {})
  t.is(r.stdout.toString(), 'box1\n')
  // the default hostname is the sandbox id
  const d = await sandbox(t, new ContainerBackend(), {}, 'ct')
  t.is((await d.agent.files.read('/etc/hostname')).toString(), `${d.id.slice(0, 63)}\n`)
  t.regex((await d.agent.files.read('/etc/hosts')).toString(), new RegExp(`^127\\.0\\.1\\.1\\t${d.id}$`, 'm'))
  await h.delete()
  await d.delete()
})

run('container: a runtime failure is a typed error and leaves nothing behind', async (t) => {
  const dir = tmpDir(t, 'strata-ct-')
  const rootfs = path.join(dir, 'rootfs')
  fs.mkdirSync(rootfs)
  const stateDir = path.join(dir, 's')
  const e = await t.throwsAsync(new ContainerBackend({ runtime: '/nonexistent/runc' }).create({ id: `ct-fail-${process.pid}`, rootfsDir: rootfs, stateDir }))
  t.is((e as { code?: string }).code, 'SANDBOX_START_FAILED')
  t.is((e as StrataError).detail?.stage, 'runtime')
  t.false(fs.existsSync(stateDir))
})

run('container: an agent that exits during startup is SANDBOX_START_FAILED with its output, and leaves nothing behind', async (t) => {
  const dir = tmpDir(t, 'strata-ct-')
  const stateDir = path.join(dir, 's')
  const id = `ct-agent-exit-${process.pid}`
  // --version makes the agent print its protocol version and exit 0 before it serves the socket
  const e = await t.throwsAsync(new ContainerBackend({ agentArgs: ['--version'] }).create({ id, rootfsDir: busyboxRootfs(t), stateDir }), { instanceOf: StrataError })
  t.is(e?.code, 'SANDBOX_START_FAILED')
  t.is(e?.detail?.stage, 'agent')
  t.regex(String(e?.detail?.output), /strata-agent protocol/)
  t.false(fs.existsSync(stateDir))
  t.false(fs.existsSync(`/sys/fs/cgroup/memory/strata/${id}`))
  t.false(fs.existsSync(`/sys/fs/cgroup/pids/strata/${id}`))
})
