// probeListen: what `strata serve` checks before it makes its state dir, and
// for port 0 the port the daemon then listens on (its state dir is named after it).
import test from 'ava'
import net, { type AddressInfo } from 'node:net'
import { probeListen } from '../../../sandbox/daemon/index.js'
import { isStrataError } from '../../../fs/common/errors.js'

test('port 0 resolves to the free port the kernel picked (the one serve then listens on); a given free port is returned as is', async (t) => {
  const a = await probeListen('127.0.0.1:0')
  t.true(a > 0)
  t.is(await probeListen(`127.0.0.1:${a}`), a)
})

test('a busy port is INVALID_ARGUMENT naming the address', async (t) => {
  const s = net.createServer()
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()))
  t.teardown(() => new Promise<void>((r) => s.close(() => r())))
  const port = (s.address() as AddressInfo).port
  const e = await t.throwsAsync(probeListen(`127.0.0.1:${port}`))
  t.true(isStrataError(e, 'INVALID_ARGUMENT'))
  t.regex(e!.message, new RegExp(`127\\.0\\.0\\.1:${port}`))
})
