import fs from 'node:fs'
import path from 'node:path'
import test from 'ava'
import { StrataError } from '../../../../fs/common/errors.js'
import { ContainerBackend } from '../../../../sandbox/backends/container/index.js'
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
