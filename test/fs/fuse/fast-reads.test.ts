// READs answered by libfuse's threads from read-ahead chunks (fs/fuse/
// fast-reads.ts, native/fuse/fuse-native.c change 2), through a real mount:
// the bytes are the file's, most READs of a stream never reach JavaScript,
// nothing stays registered once the file is closed, a writer opening the file
// takes the registered chunks back at once (a reader that opened it before
// sees the new bytes), `nativeReads: false` sends every READ to JavaScript, and
// READs and WRITEs come in requests of up to maxRead / maxWrite (1 MiB: change 5).
import test from 'ava'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { createHash } from 'node:crypto'
import { open } from 'node:fs/promises'
import { fuseSkipReason, ok, py, sh, startFuseCluster, type FuseCluster } from './helpers.js'
import { freePort } from '../../helpers/procs.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

const MiB = 1024 * 1024

interface RaStats {
  hits: number
  fetches: number
  direct: number
  native: { hits: number; bytes: number; slots: number } | null
}

async function raStats(c: FuseCluster, address: string): Promise<{ ra: RaStats; reads: number }> {
  const st = (await c.m.rpc.stats(address)) as { fuse: { readAhead: RaStats; ops: Record<string, number> } }
  return { ra: st.fuse.readAhead, reads: st.fuse.ops.read ?? 0 }
}

async function until(what: string, fn: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

t('a sequential reader is served by libfuse threads from read-ahead chunks, byte for byte; nothing stays registered after close', async (tt) => {
  const c = await startFuseCluster(tt, { chunkSize: MiB })
  const address = `127.0.0.1:${await freePort()}`
  // fetched chunks stay servable for 60 s: on a loaded machine the age limit must not be what decides
  const mnt = await c.mount({ listen: address, chunkReadAheadMaxAgeMs: 60_000 })
  const gen = await py(`import sys, os, hashlib\ndata = os.urandom(24 * 1024 * 1024 + 12345)\nopen(sys.argv[1], 'wb').write(data)\nprint(hashlib.sha256(data).hexdigest())`, [`${mnt.mnt}/big`])
  ok(tt, gen, 'write')
  const want = gen.stdout.trim()
  const before = await raStats(c, address)
  // A reader that waits, after each MiB, until the read-ahead it set off has landed (no fetch started
  // or chunk registered between two looks at the daemon's counters): how many READs find their chunk
  // registered must not depend on how loaded the machine is (a reader faster than the fetches is
  // served from JavaScript, which is right, but not what this test is about). This process does not
  // serve the mount, so its reads may wait on it.
  const fh = await open(`${mnt.mnt}/big`, 'r')
  const hash = createHash('sha256')
  try {
    const buf = Buffer.alloc(MiB)
    for (let pos = 0; ; pos += MiB) {
      const { bytesRead } = await fh.read(buf, 0, MiB, pos)
      if (bytesRead === 0) break
      hash.update(buf.subarray(0, bytesRead))
      let last = ''
      await until('the read-ahead to settle', async () => {
        const { ra } = await raStats(c, address)
        const now = `${ra.fetches}/${ra.native?.slots}/${ra.native?.hits}/${ra.hits}`
        const settled = now === last
        last = now
        if (!settled) await new Promise((r) => setTimeout(r, 50))
        return settled
      }, 60_000)
    }
  } finally {
    await fh.close()
  }
  tt.is(hash.digest('hex'), want)
  const after = await raStats(c, address)
  tt.truthy(after.ra.native, 'the table is on by default')
  const reads = after.reads - before.reads
  const native = after.ra.native!.hits - (before.ra.native?.hits ?? 0)
  const kernelReads = native + reads
  // the kernel sends 1 MiB READs (the addon's FUSE_MAX_PAGES, change 5): ~25 for this file, not the
  // ~194 of libfuse 2's 128 KiB; most never reached JavaScript
  tt.true(kernelReads >= 24 && kernelReads <= 40, `${kernelReads} READs`)
  tt.true(native >= kernelReads * 0.7, `${native} of ${kernelReads} READs served natively (${JSON.stringify(after.ra)})`)
  // the reader closed the file: its handle's chunks leave the table when the kernel's RELEASE arrives
  await until('the table to be empty', async () => (await raStats(c, address)).ra.native!.slots === 0)

  // a second read, with the file reopened: the same bytes
  const again = await sh(`cat ${mnt.mnt}/big | sha256sum`)
  tt.is(again.stdout.split(' ')[0], want)
  await mnt.stop()
})

t('a writer opening the file takes its registered chunks back: a reader that opened it before reads the new bytes', async (tt) => {
  const c = await startFuseCluster(tt, { chunkSize: MiB })
  const address = `127.0.0.1:${await freePort()}`
  // fetched chunks stay servable for 60 s: only the writer's open may take them back
  const mnt = await c.mount({ listen: address, chunkReadAheadMaxAgeMs: 60_000 })
  const f = `${mnt.mnt}/f`
  ok(tt, await py(`import sys, os\nopen(sys.argv[1], 'wb').write(bytes(range(256)) * (16 * 4096))`, [f]), 'create 16 MiB')
  // the reader streams 6 MiB (read-ahead then holds chunks up to ~10 MiB) and stops; once told, it
  // writes 1 MiB at 8 MiB through a second handle and reads on
  const reader = spawn('python3', [
    '-c',
    String.raw`
import sys, os, mmap
r = open(sys.argv[1], 'rb', buffering=0)
got = b''
while len(got) < 6 * 1024 * 1024:
    got += r.read(1024 * 1024)
print('READY', flush=True)
sys.stdin.readline()
# a writer (another handle) puts 1 MiB of X at 8 MiB; O_DIRECT, so the kernel drops its cached
# pages of that range instead of keeping the written ones, and the reader's READs reach the daemon
w = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
buf = mmap.mmap(-1, 1024 * 1024)
buf.write(b'X' * (1024 * 1024))
assert os.pwrite(w, buf, 8 * 1024 * 1024) == 1024 * 1024
os.close(w)
rest = b''
while True:
    b = r.read(1024 * 1024)
    if not b: break
    rest += b
off = 8 * 1024 * 1024 - len(got)
print('X' if rest[off:off + 1024 * 1024] == b'X' * (1024 * 1024) else 'OLD', len(got) + len(rest), flush=True)
`,
    f,
  ])
  tt.teardown(() => void reader.kill('SIGKILL'))
  let out = ''
  reader.stdout.setEncoding('utf8').on('data', (s: string) => (out += s))
  await until('the reader to stream 6 MiB', async () => out.includes('READY'), 30_000)
  const held = await raStats(c, address)
  tt.true((held.ra.native?.slots ?? 0) > 0, `chunks ahead of the reader are registered: ${JSON.stringify(held.ra)}`)
  reader.stdin.write('go\n')
  const [code] = (await once(reader, 'exit')) as [number | null]
  tt.is(code, 0, out)
  tt.regex(out, /\nX 16777216\n/)
  await mnt.stop()
})

t('maxRead and maxWrite bound each request: 128 KiB gives libfuse 2\'s own request count, 1 MiB one request per MiB; the bytes are the same', async (tt) => {
  const c = await startFuseCluster(tt, { chunkSize: MiB })
  const counts: Record<string, { reads: number; writes: number }> = {}
  for (const size of [128 * 1024, MiB]) {
    const address = `127.0.0.1:${await freePort()}`
    const mnt = await c.mount({ listen: address, maxRead: size, maxWrite: size, nativeReads: false, chunkReadAhead: false })
    const ops0 = ((await c.m.rpc.stats(address)) as { fuse: { ops: Record<string, number> } }).fuse.ops
    // O_DIRECT: every byte is one READ or WRITE of the mount, in requests as large as the kernel may send
    const r = await py(
      String.raw`
import sys, os, mmap, hashlib
data = os.urandom(8 * 1024 * 1024)
buf = mmap.mmap(-1, len(data))
buf.write(data)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
assert os.pwrite(fd, buf, 0) == len(data)
back = mmap.mmap(-1, len(data))
assert os.preadv(fd, [back], 0) == len(data)
os.close(fd)
print(hashlib.sha256(data).hexdigest() == hashlib.sha256(back).hexdigest())
`,
      [`${mnt.mnt}/d${size}`],
    )
    ok(tt, r, `O_DIRECT write and read with ${size}-byte requests`)
    tt.is(r.stdout.trim(), 'True')
    const ops1 = ((await c.m.rpc.stats(address)) as { fuse: { ops: Record<string, number> } }).fuse.ops
    counts[size] = { reads: (ops1.read ?? 0) - (ops0.read ?? 0), writes: (ops1.write ?? 0) - (ops0.write ?? 0) }
    await mnt.stop()
  }
  tt.deepEqual(counts[128 * 1024], { reads: 64, writes: 64 }, JSON.stringify(counts))
  tt.deepEqual(counts[MiB], { reads: 8, writes: 8 }, JSON.stringify(counts))
})

t('nativeReads: false: every READ reaches JavaScript, the same bytes', async (tt) => {
  const c = await startFuseCluster(tt, { chunkSize: MiB })
  const address = `127.0.0.1:${await freePort()}`
  const mnt = await c.mount({ listen: address, nativeReads: false })
  const gen = await py(`import sys, os\ndata = os.urandom(9 * 1024 * 1024)\nopen(sys.argv[1], 'wb').write(data)\nimport hashlib\nprint(hashlib.sha256(data).hexdigest())`, [`${mnt.mnt}/g`])
  ok(tt, gen, 'create')
  const r = await sh(`dd if=${mnt.mnt}/g bs=1M 2>/dev/null | sha256sum`)
  tt.is(r.stdout.split(' ')[0], gen.stdout.trim())
  const st = await raStats(c, address)
  tt.is(st.ra.native, null)
  // 9 MiB in 1 MiB READs, each answered by JavaScript from fetched chunks
  tt.true(st.ra.hits >= 8, `JavaScript served the stream from read-ahead: ${JSON.stringify(st.ra)}`)
  await mnt.stop()
})
