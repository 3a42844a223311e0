// Commit throughput of the lmdb KV engine for small metadata-like
// transactions (not an AVA test). Each transaction reads a parent "inode" and
// a missing "dentry" (both adding read conflicts) and writes a new dentry and
// inode, like a file create.
//
//   node dist/test/fs/kv/bench.js [--durability flushed|committed|nosync]
//        [--commit-mode batched|sync|auto] [--procs 1,2] [--concurrency 1,16,64] [--seconds 3]

import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { openLmdbKv, type KvDurability } from '../../../fs/kv/index.js'

interface Args {
  durability: KvDurability
  commitMode: 'batched' | 'sync' | 'auto' | undefined
  procs: number[]
  concurrency: number[]
  seconds: number
}

function parseArgs(argv: string[]): Args {
  const get = (name: string, dflt: string): string => {
    const i = argv.indexOf(`--${name}`)
    return i >= 0 && argv[i + 1] !== undefined ? argv[i + 1]! : dflt
  }
  const cm = get('commit-mode', '')
  return {
    durability: get('durability', 'flushed') as KvDurability,
    commitMode: cm === '' ? undefined : (cm as Args['commitMode']),
    procs: get('procs', '1,2').split(',').map(Number),
    concurrency: get('concurrency', '1,16,64').split(',').map(Number),
    seconds: Number(get('seconds', '3')),
  }
}

/** Runs the workload in this process; returns commits and conflicts. */
async function worker(dir: string, a: Args, concurrency: number, tag: string): Promise<{ commits: number; conflicts: number; ms: number }> {
  const kv = await openLmdbKv({ path: dir, durability: a.durability, ...(a.commitMode === undefined ? {} : { commitMode: a.commitMode }) })
  const parent = (i: number): Buffer => Buffer.from(`INOD${String(i % 64).padStart(8, '0')}`)
  let n = 0
  const end = Date.now() + a.seconds * 1000
  const t0 = performance.now()
  const before = kv.stats()
  await Promise.all(
    Array.from({ length: concurrency }, async (_, w) => {
      while (Date.now() < end) {
        const i = n++
        const name = `${tag}-${w}-${i}`
        await kv.transact(async (t) => {
          await t.get(parent(i))
          const dent = Buffer.concat([Buffer.from('DENT'), parent(i).subarray(4), Buffer.from(name)])
          if ((await t.get(dent)) !== undefined) throw new Error('exists')
          t.set(dent, Buffer.alloc(40, 1))
          t.set(Buffer.from(`INOD${name}`), Buffer.alloc(120, 2))
        })
      }
    }),
  )
  const ms = performance.now() - t0
  const after = kv.stats()
  await kv.close()
  return { commits: after.commits - before.commits, conflicts: after.conflicts - before.conflicts, ms }
}

/** Read-only transactions (two point gets, like a stat by path component) on a populated env. */
async function reads(a: Args): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-kv-bench-'))
  try {
    const kv = await openLmdbKv({ path: dir, durability: a.durability })
    for (let b = 0; b < 10; b++)
      await kv.transact(async (t) => {
        for (let i = 0; i < 1000; i++) t.set(Buffer.from(`INOD${b * 1000 + i}`), Buffer.alloc(120, 2))
      })
    let n = 0
    const end = Date.now() + a.seconds * 1000
    const t0 = performance.now()
    while (Date.now() < end) {
      const i = n++
      await kv.readOnly(async (t) => {
        await t.get(Buffer.from(`INOD${i % 10000}`))
        await t.get(Buffer.from(`INOD${(i * 7) % 10000}`))
      })
    }
    console.log(`  readOnly, 1 proc, sequential: ${Math.round((n / (performance.now() - t0)) * 1000)} txns/s (2 point gets each)`)
    await kv.close()
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2)
  if (argv[0] === '--worker') {
    const [, dir, conc, tag, json] = argv
    const r = await worker(dir!, JSON.parse(json!) as Args, Number(conc), tag!)
    process.stdout.write(JSON.stringify(r) + '\n')
    return
  }
  const a = parseArgs(argv)
  const self = fileURLToPath(import.meta.url)
  console.log(`lmdb KV commit throughput, durability=${a.durability}${a.commitMode === undefined ? '' : ` commitMode=${a.commitMode}`}, ${a.seconds}s per point, ${os.cpus().length} cpus, load ${os.loadavg()[0]!.toFixed(1)}`)
  await reads(a)
  for (const procs of a.procs) {
    for (const conc of a.concurrency) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-kv-bench-'))
      try {
        const runs = await Promise.all(
          Array.from(
            { length: procs },
            (_, p) =>
              new Promise<{ commits: number; conflicts: number; ms: number }>((resolve, reject) => {
                const c = spawn(process.execPath, [self, '--worker', dir, String(conc), `p${p}`, JSON.stringify(a)], { stdio: ['ignore', 'pipe', 'inherit'] })
                let out = ''
                c.stdout.on('data', (d) => (out += String(d)))
                c.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as { commits: number; conflicts: number; ms: number }) : reject(new Error(`worker exited ${code}`))))
              }),
          ),
        )
        const commits = runs.reduce((s, r) => s + r.commits, 0)
        const conflicts = runs.reduce((s, r) => s + r.conflicts, 0)
        const ms = Math.max(...runs.map((r) => r.ms))
        console.log(`  procs=${procs} concurrency/proc=${String(conc).padStart(3)}  ${Math.round((commits / ms) * 1000).toString().padStart(6)} commits/s  (${commits} commits, ${conflicts} conflicts)`)
      } finally {
        fs.rmSync(dir, { recursive: true, force: true })
      }
    }
  }
}

await main()
