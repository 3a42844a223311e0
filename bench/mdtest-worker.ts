// One process of the mdtest benchmark (bench/mdtest.ts forks P of them). It
// owns files f.<rank>.<j> for j < perRank, file j in directory d<j % dirs>
// (so every process works in every directory, as mdtest without -u), and
// runs one phase per message from the parent, one operation at a time:
//
//   create   creat(2) + close: open(O_WRONLY|O_CREAT|O_TRUNC), close
//   stat     stat(2) of each of its files
//   remove   unlink(2) of each of its files
//
// mode 'dfs' uses the Strata FileSystem client (fs/client/file; meta create
// + close, stat, remove RPCs); mode 'local' node's fs.promises on a local
// directory. Replies {phase, ops, seconds, p50Ms, p99Ms, cpuSeconds}.

import { promises as fsp } from 'node:fs'
import { FileSystem } from '../fs/client/file/index.js'
import { summarize } from './lib/stats.js'

export interface MdInit {
  cmd: 'init'
  mode: 'dfs' | 'local'
  /** directory holding d0 … d<dirs-1> (a DFS path, or a local one) */
  root: string
  rank: number
  perRank: number
  dirs: number
  mgmtdAddresses?: string[]
  metaAddresses?: string[]
}

export type MdPhase = 'create' | 'stat' | 'remove'

export interface MdPhaseMsg {
  cmd: 'phase'
  phase: MdPhase
}

export interface MdReply {
  phase: MdPhase | 'ready'
  ops: number
  seconds: number
  p50Ms: number
  p99Ms: number
  cpuSeconds: number
  error?: string
}

interface Ops {
  create(p: string): Promise<void>
  stat(p: string): Promise<void>
  remove(p: string): Promise<void>
  close(): Promise<void>
}

function dfsOps(init: MdInit): Ops {
  const fs = new FileSystem({ mgmtdAddresses: init.mgmtdAddresses!, metaFallbackAddresses: init.metaAddresses ?? [] })
  return {
    async create(p) {
      const h = await fs.open(p, 'w')
      await h.close()
    },
    async stat(p) {
      await fs.stat(p)
    },
    async remove(p) {
      await fs.unlink(p)
    },
    close: () => fs.shutdown(),
  }
}

function localOps(): Ops {
  return {
    async create(p) {
      const h = await fsp.open(p, 'w')
      await h.close()
    },
    async stat(p) {
      await fsp.stat(p)
    },
    async remove(p) {
      await fsp.unlink(p)
    },
    close: async () => undefined,
  }
}

function send(m: MdReply): void {
  process.send!(m)
}

let init: MdInit | null = null
let ops: Ops | null = null
let paths: string[] = []

async function handle(msg: MdInit | MdPhaseMsg | { cmd: 'exit' }): Promise<void> {
  if (msg.cmd === 'init') {
    init = msg
    ops = msg.mode === 'dfs' ? dfsOps(msg) : localOps()
    paths = Array.from({ length: msg.perRank }, (_, j) => `${msg.root}/d${j % msg.dirs}/f.${msg.rank}.${j}`)
    // warm-up (connections, routing info, JIT): a few stats of the root, unmeasured
    for (let i = 0; i < 20; i++) await ops.stat(msg.root)
    send({ phase: 'ready', ops: 0, seconds: 0, p50Ms: 0, p99Ms: 0, cpuSeconds: 0 })
    return
  }
  if (msg.cmd === 'exit') {
    await ops?.close()
    process.exit(0)
  }
  if (!ops || !init) throw new Error('phase before init')
  const op = ops[msg.phase].bind(ops)
  const lat = new Array<number>(paths.length)
  const cpu0 = process.cpuUsage()
  const t0 = performance.now()
  for (let j = 0; j < paths.length; j++) {
    const t = performance.now()
    await op(paths[j]!)
    lat[j] = performance.now() - t
  }
  const seconds = (performance.now() - t0) / 1000
  const cpu = process.cpuUsage(cpu0)
  const l = summarize(lat)
  send({ phase: msg.phase, ops: paths.length, seconds, p50Ms: l.p50, p99Ms: l.p99, cpuSeconds: (cpu.user + cpu.system) / 1e6 })
}

process.on('message', (msg: MdInit | MdPhaseMsg | { cmd: 'exit' }) => {
  handle(msg).catch((e: unknown) => {
    const phase = msg.cmd === 'phase' ? msg.phase : 'ready'
    send({ phase, ops: 0, seconds: 0, p50Ms: NaN, p99Ms: NaN, cpuSeconds: 0, error: e instanceof Error ? (e.stack ?? e.message) : String(e) })
  })
})
// the parent went away: nothing left to do
process.on('disconnect', () => process.exit(0))
