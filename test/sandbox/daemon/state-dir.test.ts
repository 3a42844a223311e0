// Where a node daemon keeps its state when the cluster directory is too long
// for agent socket paths: the cluster's daemon (sandbox-1) and a `strata
// serve` of the same cluster (one per port) each get their own directory.
import test from 'ava'
import path from 'node:path'
import { sandboxStateDir } from '../../../sandbox/daemon/index.js'

test('a short data dir is the state dir itself', (t) => {
  t.is(sandboxStateDir('/tmp/c1', '/tmp/c1/data/sandbox-1'), '/tmp/c1/data/sandbox-1')
  t.is(sandboxStateDir('/tmp/c1', '/tmp/c1/data/serve-7410'), '/tmp/c1/data/serve-7410')
})

test('a long cluster path: the cluster\'s daemon and each serve port get different dirs under /run/strata, stable per cluster', (t) => {
  const dir = `/tmp/${'long-cluster-directory-'.repeat(3)}c`
  const data = (name: string) => path.join(dir, 'data', name)
  const role = sandboxStateDir(dir, data('sandbox-1'))
  const serve = sandboxStateDir(dir, data('serve-7410'))
  const serve2 = sandboxStateDir(dir, data('serve-7411'))
  t.regex(role, /^\/run\/strata\/sandbox-1-[0-9a-f]{12}$/)
  t.regex(serve, /^\/run\/strata\/serve-7410-[0-9a-f]{12}$/)
  t.is(new Set([role, serve, serve2]).size, 3, `${role} ${serve} ${serve2}`)
  t.is(sandboxStateDir(dir, data('serve-7410')), serve)
  // another cluster's serve on the same port does not share it either
  t.not(sandboxStateDir(`${dir}2`, path.join(`${dir}2`, 'data', 'serve-7410')), serve)
  // and agent sockets below it fit in 108 bytes
  t.true(Buffer.byteLength(path.join(serve, 'sb', 'sb-0123456789ab', 'rt', 'agent.sock')) < 108)
})
