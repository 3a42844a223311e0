// The maximum file size through the mount: truncate, ftruncate and pwrite
// past it fail with EFBIG ("File too large", META_FILE_TOO_LARGE), as on a
// local filesystem, not EINVAL; a write that crosses it writes what fits.
import test from 'ava'
import { maxFileSize } from '../../../fs/client/file/index.js'
import { fuseSkipReason, ok, py, sh, startFuseCluster, PY_EXPECT_ERR } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

const SCRIPT = String.raw`
import errno, os, sys
f, mx = sys.argv[1], int(sys.argv[2])
${PY_EXPECT_ERR}
EFBIG = errno.EFBIG
expect_err(EFBIG, os.truncate, f, 2**53 + 1)
expect_err(EFBIG, os.truncate, f, 2**53)
expect_err(EFBIG, os.truncate, f, mx + 1)
fd = os.open(f, os.O_RDWR)
expect_err(EFBIG, os.ftruncate, fd, 2**53 + 1)
expect_err(EFBIG, os.pwrite, fd, b'x', 2**53 + 1)
expect_err(EFBIG, os.pwrite, fd, b'x', mx)
assert os.fstat(fd).st_size == 5, os.fstat(fd).st_size
# up to the limit works
os.ftruncate(fd, mx)
assert os.fstat(fd).st_size == mx
os.ftruncate(fd, 5)
# a write that crosses the limit is short: what fits is written
assert os.pwrite(fd, b'xy', mx - 1) == 1
os.fsync(fd)
assert os.fstat(fd).st_size == mx, os.fstat(fd).st_size
assert os.pread(fd, 2, mx - 1) == b'x'
os.ftruncate(fd, 5)
os.close(fd)
assert open(f, 'rb').read() == b'hello'
print('ok')
`

test('maxFileSize: 2^32 - 1 chunks, at most 2^53 - 1', (t) => {
  t.is(maxFileSize(1 << 20), 2 ** 52 - 2 ** 20)
  t.is(maxFileSize(64 << 10), 2 ** 48 - 2 ** 16)
  t.is(maxFileSize(4 << 20), Number.MAX_SAFE_INTEGER)
})

t('truncate and pwrite past the maximum file size fail with EFBIG', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const f = `${a.mnt}/hg`
  ok(t, await sh(`printf hello > ${f}`), 'create')
  const chunkSize = (await c.m.client().stat('/hg')).file!.layout.chunkSize
  const max = maxFileSize(chunkSize)
  // the tester's repro, with coreutils
  const tr = await sh(`truncate -s 9007199254740993 ${f}`)
  t.not(tr.code, 0)
  t.regex(tr.stderr, /File too large/)
  const r = await py(SCRIPT, [f, String(max)])
  ok(t, r, `size checks (chunk size ${chunkSize}, max ${max})`)
  t.is(r.stdout.trim(), 'ok')
  t.is(await a.stop(), 0, a.log())
})
