// The dataset: a few files with deterministic content (two CSV tables of
// integers, a binary feature file, a small JSON and a README), generated in
// memory, published into the DFS under /datasets/demo through the file
// client (meta for names, storage for bytes; no FUSE), and read back through
// it. The host's summary of the same bytes is what every sandbox must match.

import { createCipheriv } from 'node:crypto'
import type { FileSystem } from '../../fs/client/index.js'
import { datasetStats, type DatasetStats } from './toolkit.js'

export const DATASET_DIR = '/datasets/demo'
const MiB = 1024 * 1024
/** bytes per write/read call */
const IO_STEP = 4 * MiB

/** mulberry32: a small seeded PRNG, the same numbers on every run. */
function prng(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

/** `id,x,y,label` rows of integers until the table reaches about `bytes`. */
function csvTable(seed: number, bytes: number): Buffer {
  const rnd = prng(seed)
  const parts: string[] = ['id,x,y,label\n']
  let n = parts[0]!.length
  for (let id = 0; n < bytes; id++) {
    const row = `${id},${Math.floor(rnd() * 100_000)},${Math.floor(rnd() * 100_000) - 50_000},${Math.floor(rnd() * 3)}\n`
    parts.push(row)
    n += row.length
  }
  return Buffer.from(parts.join(''), 'ascii')
}

/** `bytes` pseudo-random bytes (an AES-CTR keystream under a fixed key). */
function binary(bytes: number): Buffer {
  const c = createCipheriv('aes-128-ctr', Buffer.from('strata-demo-data'), Buffer.alloc(16))
  return Buffer.concat([c.update(Buffer.alloc(bytes)), c.final()])
}

export interface Dataset {
  /** relative path → content */
  files: Map<string, Buffer>
  bytes: number
  /** what stats.py must print for it */
  expected: DatasetStats
}

/** The dataset for `sizeMiB`: 45% train.csv, 10% test.csv, the rest features.bin, plus two small files. */
export function makeDataset(sizeMiB: number): Dataset {
  const total = sizeMiB * MiB
  const train = csvTable(1, Math.floor(total * 0.45))
  const test = csvTable(2, Math.floor(total * 0.1))
  const classes = Buffer.from(JSON.stringify({ classes: ['cat', 'dog', 'bird'], columns: { x: 'int', y: 'int', label: 'class index' } }, null, 2) + '\n')
  const readme = Buffer.from(
    'Strata demo dataset, published into the DFS by `npm run demo` and mounted\n' +
      'read-only at /data in every sandbox. Deterministic: the same bytes on every run.\n' +
      '  train.csv, test.csv   id,x,y,label (integers)\n' +
      '  features.bin          pseudo-random bytes\n' +
      '  meta/classes.json     label names\n',
  )
  const features = binary(Math.max(4096, total - train.length - test.length - classes.length - readme.length))
  const files = new Map<string, Buffer>([
    ['README.txt', readme],
    ['train.csv', train],
    ['test.csv', test],
    ['features.bin', features],
    ['meta/classes.json', classes],
  ])
  let bytes = 0
  for (const b of files.values()) bytes += b.length
  return { files, bytes, expected: datasetStats(files) }
}

/** Writes every file into DATASET_DIR through the file client; returns bytes written. */
export async function publish(fsys: FileSystem, ds: Dataset, update: (d: string) => void): Promise<number> {
  let done = 0
  for (const [rel, data] of ds.files) {
    const p = `${DATASET_DIR}/${rel}`
    const parent = p.slice(0, p.lastIndexOf('/'))
    await fsys.mkdir(parent, { recursive: true, mode: 0o755 }).catch((e: { code?: string }) => {
      if (e?.code !== 'META_EXISTS') throw e
    })
    const fh = await fsys.open(p, 'w', 0o644)
    try {
      for (let off = 0; off < data.length; off += IO_STEP) {
        await fsys.write(fh, data.subarray(off, Math.min(data.length, off + IO_STEP)), off)
        done += Math.min(IO_STEP, data.length - off)
        update(`${rel}: ${fmtMiB(done)} of ${fmtMiB(ds.bytes)}`)
      }
    } finally {
      await fsys.close(fh)
    }
  }
  return done
}

/** Reads every file back through the file client and compares it; returns the paths that differ. */
export async function readBack(fsys: FileSystem, ds: Dataset, update: (d: string) => void): Promise<string[]> {
  const bad: string[] = []
  let done = 0
  for (const [rel, data] of ds.files) {
    const fh = await fsys.open(`${DATASET_DIR}/${rel}`, 'r')
    try {
      const length = fh.inode.file?.length ?? 0
      if (length !== data.length) {
        bad.push(`${rel} (length ${length}, wrote ${data.length})`)
        continue
      }
      const got = Buffer.alloc(length)
      let off = 0
      while (off < length) {
        const r = await fsys.read(fh, got.subarray(off, Math.min(length, off + IO_STEP)), off)
        if (r.bytesRead === 0) break
        off += r.bytesRead
      }
      done += off
      update(`${fmtMiB(done)} of ${fmtMiB(ds.bytes)}`)
      if (off !== length || !got.equals(data)) bad.push(rel)
    } finally {
      await fsys.close(fh)
    }
  }
  return bad
}

function fmtMiB(n: number): string {
  return `${(n / MiB).toFixed(1)} MiB`
}
