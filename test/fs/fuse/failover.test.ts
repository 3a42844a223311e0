// Failures under a FUSE mount: a storage node SIGKILLed while dd writes
// through the mount is latency, not EIO; a randomized trial SIGKILLs storage
// and meta processes while files are written, and every file that was closed
// or fsynced must read back intact.
import path from 'node:path'
import test from 'ava'
import { spawn } from 'node:child_process'
import { tmpDir, until } from '../../helpers/procs.js'
import { lmdbKvAvailable } from '../../helpers/meta-cluster.js'
import { fuseSkipReason, ok, py, sh, startFuseCluster } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

t('storage failover under a FUSE writer is latency, not EIO', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount({ name: 'a' })
  const local = tmpDir(t, 'strata-fuse-fo-')
  ok(t, await sh(`head -c ${24 << 20} /dev/urandom > ${local}/ref`), 'reference data')
  // dd with a small block size and fsync at the end: many storage writes in flight over the kill
  const dd = sh(`dd if=${local}/ref of=${a.mnt}/big bs=256k conv=fsync status=none && echo done`, { timeoutMs: 300_000 })
  // a second writer: fio sequential with verify
  const fio = sh(`fio --name=fo --directory=${a.mnt} --rw=write --bs=128k --size=8m --ioengine=psync --verify=crc32c --do_verify=1 --verify_fatal=1 --output-format=terse`, {
    timeoutMs: 300_000,
  })
  await until(async () => (await sh(`stat -c %s ${a.mnt}/big`)).stdout.trim() !== '0', 60_000, 'dd started')
  await sleep(500)
  const t0 = Date.now()
  await c.m.c.kill('storage-2', 'SIGKILL')
  t.log(`killed storage-2 at +${Date.now() - t0} ms`)
  const [r1, r2] = await Promise.all([dd, fio])
  ok(t, r1, 'dd through the failover')
  ok(t, r2, 'fio verify through the failover')
  t.log(`dd ${r1.ms} ms, fio ${r2.ms} ms`)
  t.notRegex(a.log(), /write failed.*EIO|errno=-5\b/, 'no EIO reached the writer')
  ok(t, await sh(`cmp ${local}/ref ${a.mnt}/big`), 'content equal')
  // a fresh mount reads the same bytes (storage, not a local buffer)
  const b = await c.mount({ name: 'b' })
  ok(t, await sh(`cmp ${local}/ref ${b.mnt}/big`), 'content equal from another mount')
})

// Writes files of seeded random sizes and contents; for each, either closes
// it or fsyncs it and keeps writing past the fsync point (never closed).
// Every success is journaled on local disk only after the call returned.
const WRITER = String.raw`
import hashlib, os, random, sys, time
mnt, journal, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
def content(i, n):
    r = random.Random(i)
    return r.randbytes(n)
# at least 10 files must land for the trial to mean anything: on a loaded
# machine the writer keeps going past its time (at most 3x) until they have
end = time.time() + seconds
hard_end = time.time() + 3 * seconds
i = 0
landed = 0
open_fds = []
with open(journal, 'a', buffering=1) as j:
    while time.time() < end or (landed < 10 and time.time() < hard_end):
        i += 1
        r = random.Random(1000 + i)
        n = r.choice([0, 1, 4096, 65536 + 17, 300000, 1 << 20, (1 << 20) + 4097, 3 << 20])
        data = content(i, n)
        p = os.path.join(mnt, 'w', 'f%05d' % i)
        try:
            fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            off = 0
            while off < n:
                step = r.choice([4096, 65536, 131072, 1 << 20])
                os.write(fd, data[off:off + step])
                off += step
            if i % 5 == 0:
                os.fsync(fd)
                j.write('fsync %d %d\n' % (i, n))
                landed += 1
                os.write(fd, b'unsynced tail')
                open_fds.append(fd)
            else:
                os.close(fd)
                j.write('closed %d %d\n' % (i, n))
                landed += 1
        except OSError as e:
            j.write('error %d %s\n' % (i, e))
print(i)
`

const VERIFY = String.raw`
import os, random, sys
mnt, journal = sys.argv[1], sys.argv[2]
bad, checked = [], 0
for line in open(journal):
    kind, i, rest = line.split(' ', 2)
    if kind == 'error':
        continue
    i, n = int(i), int(rest)
    want = random.Random(i).randbytes(n)
    p = os.path.join(mnt, 'w', 'f%05d' % i)
    try:
        got = open(p, 'rb').read()
    except OSError as e:
        bad.append((i, kind, str(e)))
        continue
    checked += 1
    ok = got == want if kind == 'closed' else got[:n] == want
    if not ok:
        bad.append((i, kind, len(got), n))
print(checked, len(bad), bad[:10])
`

t('randomized trial: SIGKILL storage and meta while writing through FUSE; closed and fsynced files read back intact', async (t) => {
  if (!lmdbKvAvailable()) {
    t.log('lmdb KV engine not built: meta cannot run as killable processes; skipped')
    t.pass()
    return
  }
  const c = await startFuseCluster(t, { metas: 2, inProcess: false })
  const a = await c.mount({ name: 'a' })
  const local = tmpDir(t, 'strata-fuse-trial-')
  const journal = path.join(local, 'journal')
  ok(t, await sh(`mkdir ${a.mnt}/w`), 'mkdir')
  const seconds = 45
  const writer = new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const p = spawn('python3', ['-c', WRITER, a.mnt, journal, String(seconds)])
    let out = ''
    let err = ''
    p.stdout.on('data', (d: Buffer) => (out += d.toString()))
    p.stderr.on('data', (d: Buffer) => (err += d.toString()))
    p.on('close', (code) => resolve({ code, out, err }))
  })
  // seeded schedule of kills: a storage node or a meta server, down for a moment, back, wait until healthy
  let seed = 20251130
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31)
  const storage = ['storage-1', 'storage-2', 'storage-3']
  const metas = ['meta-1', 'meta-2']
  const end = Date.now() + (seconds - 8) * 1000
  const killed: string[] = []
  for (let round = 0; Date.now() < end; round++) {
    await sleep(1500 + rand() * 2500)
    // alternate between a storage node and a meta server, each picked at random
    const pool = round % 2 === 0 ? storage : metas
    const v = pool[Math.floor(rand() * pool.length)]!
    await c.m.c.kill(v, 'SIGKILL')
    killed.push(v)
    await sleep(500 + rand() * 2000)
    c.m.c.start(v)
    if (v.startsWith('storage')) await c.m.c.waitAllServing(60_000)
    else await until(() => c.m.rpc.echo(c.m.c.address(v)).then(() => true), 30_000, `${v} back`)
  }
  t.log(`killed: ${killed.join(', ')}`)
  const w = await writer
  t.is(w.code, 0, w.err)
  const journalText = (await sh(`cat ${journal}`)).stdout
  const lines = journalText.trim().split('\n').filter(Boolean)
  const errors = lines.filter((l) => l.startsWith('error'))
  t.log(`${lines.length} files, ${errors.length} errors${errors.length ? `: ${errors.slice(0, 5).join('; ')}` : ''}`)
  t.true(lines.length - errors.length >= 10, 'enough files written')
  // read back through a fresh mount (nothing from the writer's buffers)
  const b = await c.mount({ name: 'b' })
  const v = await py(VERIFY, [b.mnt, journal], { timeoutMs: 300_000 })
  ok(t, v, 'verify')
  const [checked, bad] = v.stdout.trim().split(' ')
  t.log(`checked ${checked} files`)
  t.is(bad, '0', v.stdout)
})
