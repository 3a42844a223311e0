// "Page cache warm" for the DFS side of a benchmark. Storage writes chunk
// data with O_DIRECT, past its page cache, and a read pass through a client
// reads each chunk from one replica only, while load-balanced reads later go
// to any of them; so a warm phase reads every replica's chunk files here,
// once, before it is measured.

import { promises as fsp } from 'node:fs'
import * as path from 'node:path'
import { runConcurrent } from './stats.js'

const MiB = 1024 * 1024

/** Reads every chunk file of every storage target under a `cluster up` directory once (into the page cache). */
export async function warmChunkFiles(clusterDir: string): Promise<void> {
  const files: string[] = []
  const data = path.join(clusterDir, 'data')
  for (const node of await fsp.readdir(data)) {
    const targets = path.join(data, node, 'targets')
    const ids = await fsp.readdir(targets).catch(() => [] as string[])
    for (const id of ids) {
      const chunks = path.join(targets, id, 'chunks')
      for (const sub of await fsp.readdir(chunks).catch(() => [] as string[])) {
        for (const name of await fsp.readdir(path.join(chunks, sub))) files.push(path.join(chunks, sub, name))
      }
    }
  }
  const bufs = Array.from({ length: 4 }, () => Buffer.allocUnsafe(MiB))
  await runConcurrent(files.length, bufs.length, async (i, slot) => {
    let fh: fsp.FileHandle
    try {
      fh = await fsp.open(files[i]!, 'r')
    } catch (e) {
      // a superseded version the target reclaimed since the listing
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return
      throw e
    }
    try {
      for (let pos = 0; ; ) {
        const { bytesRead } = await fh.read(bufs[slot]!, 0, MiB, pos)
        if (bytesRead === 0) break
        pos += bytesRead
      }
    } finally {
      await fh.close()
    }
  })
}
