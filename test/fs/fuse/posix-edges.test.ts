// POSIX edge cases a demanding program hits, through real mounts driven from
// child processes: open files whose names another client changes, data a
// process still holds when the mount is stopped, set-group-id directories.
import test from 'ava'
import { spawn } from 'node:child_process'
import { fuseSkipReason, ok, py, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

// argv: mount A, mount B (attr and entry timeouts of 1 ms: the kernel asks the daemon every time)
const OPEN_FILE_RENAMED_ELSEWHERE = String.raw`
import os, sys
a, b = sys.argv[1], sys.argv[2]

# a writer and a reader on A; B renames the file away and puts a 5-byte file at its name
fd = os.open(os.path.join(a, 'f'), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, b'x' * 1000)
r = os.open(os.path.join(a, 'f'), os.O_RDONLY)
assert os.read(r, 10) == b'x' * 10
os.rename(os.path.join(b, 'f'), os.path.join(b, 'g'))
with open(os.path.join(b, 'f'), 'wb') as fh:
    fh.write(b'other')
# A reads on past what its kernel knows: the kernel asks for the size of the open file
# (GETATTR with its handle), which must be the open file's, not the 5 bytes of the name's new file
os.write(fd, b'y' * 1000)
got = os.pread(r, 4096, 0)
assert got == b'x' * 1000 + b'y' * 1000, ('read through the reader', len(got), got[:8])
os.write(fd, b'z' * 1000)
got = os.pread(fd, 4096, 0)
assert got == b'x' * 1000 + b'y' * 1000 + b'z' * 1000, ('read through the writer', len(got))
os.close(fd)
os.close(r)
with open(os.path.join(b, 'g'), 'rb') as fh:
    assert fh.read() == b'x' * 1000 + b'y' * 1000 + b'z' * 1000
print('ok')
`

t('a read of an open file asks for its own size when another client renamed it and put another file at its name', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const b = await c.mount({ name: 'b' })
  const r = await py(OPEN_FILE_RENAMED_ELSEWHERE, [a.mnt, b.mnt])
  ok(t, r, 'open file renamed elsewhere')
  t.is(r.stdout.trim(), 'ok')
})

// argv: mount; writes through a shared mapping, never msyncs, prints "ready" and waits to be killed
const DIRTY_MAPPING = String.raw`
import mmap, os, sys, time
fd = os.open(os.path.join(sys.argv[1], 'mapped'), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, 65536)
m = mmap.mmap(fd, 65536, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
m[100:110] = b'MAPPED-ONE'
m[65000:65010] = b'MAPPED-TWO'
print('ready', flush=True)
time.sleep(600)
`

t('stopping a mount keeps what a process wrote through a shared mapping it still holds (no msync)', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const holder = spawn('python3', ['-c', DIRTY_MAPPING, a.mnt], { stdio: ['ignore', 'pipe', 'pipe'] })
  const gone = new Promise<void>((r) => holder.once('exit', () => r()))
  t.teardown(async () => {
    holder.kill('SIGKILL')
    await gone
  })
  let err = ''
  holder.stderr!.on('data', (d: Buffer) => (err += d.toString()))
  await new Promise<void>((resolve, reject) => {
    holder.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve())
    holder.once('exit', (code) => reject(new Error(`the mapping's holder exited ${code}: ${err}`)))
  })
  // the holder keeps the file open and mapped: the stop waits its grace period, then detaches
  t.is(await a.stop(), 0, a.log())
  holder.kill('SIGKILL')
  await gone
  const b = await c.mount({ name: 'b' })
  const r = await py(`import sys; d = open(sys.argv[1] + '/mapped', 'rb').read(); print(len(d), d[100:110].decode(), d[65000:65010].decode())`, [b.mnt])
  ok(t, r, 'read back on a fresh mount')
  t.is(r.stdout.trim(), '65536 MAPPED-ONE MAPPED-TWO')
})
