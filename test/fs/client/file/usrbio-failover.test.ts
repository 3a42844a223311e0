// The batch API through failures (issue 3: failover is latency, not errors):
// a storage process SIGKILLed while ring reads and writes are in flight, then
// the meta server in use killed between the writes and the close that
// reports their length.

import test from 'ava'
import { createIor, createIov, deregFd, prepIo, regFd, submitIos, waitForIos, type Ior } from '../../../../fs/client/index.js'
import { startFsCluster, patternBytes } from './helpers.js'

const CHUNK = 64 * 1024

test('ring reads and writes ride through a storage SIGKILL and a meta failover; the length reaches meta', async (t) => {
  t.timeout(180_000)
  const c = await startFsCluster(t, { metas: 2, chunkSize: CHUNK })
  const fs = c.fs()
  const src = patternBytes(16 * CHUNK, 21)
  await fs.writeFile('/src', src)
  const rfd = await regFd('/src', fs)
  const wfd = await regFd('/dst', fs, 'w')
  t.teardown(() => deregFd(rfd).catch(() => undefined))
  const riov = createIov(32 * 32 * 1024)
  const wiov = createIov(8 * CHUNK)
  const rior = createIor({ entries: 64, forRead: true, ioDepth: 0 })
  const wior = createIor({ entries: 64, forRead: false, ioDepth: 0 })
  const errors: string[] = []
  let written = 0
  let slowest = 0

  const runAll = async (ior: Ior, n: number) => {
    submitIos(ior)
    for (let got = 0; got < n; ) {
      const cqes = await waitForIos(ior, 64, 1, 60_000)
      if (cqes.length === 0) throw new Error('no completion within 60 s')
      for (const c of cqes) {
        const want = (c.userdata as { len: number }).len
        if (c.result !== want) errors.push(`${JSON.stringify(c.userdata)}: ${c.result}`)
      }
      got += cqes.length
    }
  }
  /** one round: 32 reads of 32 KiB anywhere in /src, 8 chunk writes appended to /dst */
  const round = async (r: number) => {
    const t0 = performance.now()
    for (let i = 0; i < 32; i++) {
      const off = ((r * 7 + i * 13) % 32) * 32 * 1024
      if (prepIo(rior, riov, true, i * 32 * 1024, rfd, off, 32 * 1024, { r, i, off, len: 32 * 1024 }) < 0) throw new Error('read prep')
    }
    patternBytes(8 * CHUNK, 100 + r).copy(wiov.buf)
    for (let i = 0; i < 8; i++) {
      if (prepIo(wior, wiov, false, i * CHUNK, wfd, written + i * CHUNK, CHUNK, { r, w: i, len: CHUNK }) < 0) throw new Error('write prep')
    }
    await Promise.all([runAll(rior, 32), runAll(wior, 8)])
    for (let i = 0; i < 32; i++) {
      const off = ((r * 7 + i * 13) % 32) * 32 * 1024
      if (!riov.buf.subarray(i * 32 * 1024, (i + 1) * 32 * 1024).equals(src.subarray(off, off + 32 * 1024))) errors.push(`round ${r} read ${i}: wrong bytes`)
    }
    written += 8 * CHUNK
    slowest = Math.max(slowest, performance.now() - t0)
  }

  for (let r = 0; r < 3; r++) await round(r)
  // SIGKILL a storage process while a round is in flight
  const storages = [...c.m.c.procs.keys()].filter((n) => n.startsWith('storage-'))
  const killing = round(3)
  await c.m.c.kill(storages[0]!)
  await killing
  for (let r = 4; r < 8; r++) await round(r)
  // the meta server in use goes away between the writes and the close that reports their length
  const used = (await fs.meta.servers())[0]!
  await c.m.c.kill(c.m.metaNames[c.m.metaAddresses.indexOf(used)]!)
  for (let r = 8; r < 10; r++) await round(r)
  await deregFd(wfd)
  t.log(`slowest round ${slowest.toFixed(0)} ms`)
  t.deepEqual(errors, [])
  t.is((await fs.stat('/dst')).file!.length, written)
  const back = await fs.readFile('/dst')
  for (let r = 0; r < 10; r++) t.true(back.subarray(r * 8 * CHUNK, (r + 1) * 8 * CHUNK).equals(patternBytes(8 * CHUNK, 100 + r)), `round ${r}`)
})
