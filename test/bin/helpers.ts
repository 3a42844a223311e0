// Runs the real CLI (`node bin/strata.js …`) as a child process and manages
// temporary cluster directories that are always torn down.
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'
import type { ExecutionContext } from 'ava'
import { clusterDown, clusterExists, pickFreePorts, readClusterFile, stopProcesses } from '../../fs/admin/index.js'

export const REPO = fileURLToPath(new URL('../../../', import.meta.url))
export const STRATA = path.join(REPO, 'bin', 'strata.js')

export interface Run {
  code: number
  stdout: string
  stderr: string
}

/** Runs `strata …args`; never rejects on a non-zero exit. */
export function strata(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string; cwd?: string } = {}): Promise<Run> {
  const env = { ...process.env, ...opts.env }
  if (!opts.env?.STRATA_CLUSTER) delete env.STRATA_CLUSTER
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [STRATA, ...args], { env, timeout: opts.timeoutMs ?? 90_000, maxBuffer: 16 << 20, ...(opts.cwd ? { cwd: opts.cwd } : {}) }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code as number) : 128) : 0
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
    if (opts.input !== undefined) child.stdin?.end(opts.input)
  })
}

/** Like strata() but fails the test (with both streams) unless the exit code is 0. */
export async function ok(t: ExecutionContext, args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number; input?: string } = {}): Promise<string> {
  const r = await strata(args, opts)
  if (r.code !== 0) t.fail(`strata ${args.join(' ')} exited ${r.code}\nstdout:\n${r.stdout}\nstderr:\n${r.stderr}`)
  return r.stdout
}

/** A fresh temp directory removed at teardown; any cluster in it is stopped first. */
export function tempDir(t: ExecutionContext, prefix = 'strata-cli-'): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix))
  t.teardown(async () => {
    await stopClusterIn(dir)
    fs.rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

/** Stops whatever cluster lives in (or under) dir, falling back to SIGKILL by pid. */
export async function stopClusterIn(dir: string): Promise<void> {
  const dirs = [dir, ...(fs.existsSync(dir) ? fs.readdirSync(dir).map((n) => path.join(dir, n)) : [])]
  for (const d of dirs) {
    if (!clusterExists(d)) continue
    try {
      await clusterDown({ dir: d, graceMs: 3000 })
    } catch {
      try {
        await stopProcesses(readClusterFile(d).processes, 500)
      } catch {
        // best effort
      }
    }
  }
}

/** Splits 3FS-style output into rows of whitespace-separated cells (ignores blank lines). */
export function table(text: string): string[][] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => l.trim().split(/\s+/))
}

/** Rows of a listing as objects keyed by header (repeated headers collect into arrays). */
export function records(text: string): Array<Record<string, string | string[]>> {
  const [header, ...rows] = table(text)
  return rows.map((r) => {
    const o: Record<string, string | string[]> = {}
    header!.forEach((h, i) => {
      if (h === 'Target') ((o.Target ??= []) as string[]).push(r[i] ?? '')
      else o[h] = r[i] ?? ''
    })
    if (r.length > header!.length) o._extra = r.slice(header!.length)
    return o
  })
}

/** Polls fn until it returns a truthy value or the deadline passes (then throws with the last value). */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false | null>, timeoutMs = 20_000, everyMs = 200): Promise<T> {
  const end = Date.now() + timeoutMs
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await sleep(everyMs)
  }
}

/** A mgmtd daemon on its own (no cluster.json) in a temp dir, killed at teardown; returns its dir and the `admin --mgmtd-address` prefix. */
export async function loneMgmtd(t: ExecutionContext): Promise<{ dir: string; A: string[]; cfg: string; child: ChildProcess; addr: string }> {
  const dir = tempDir(t)
  const [port] = await pickFreePorts(1)
  const addr = `127.0.0.1:${port}`
  const cfg = path.join(dir, 'mgmtd.json')
  fs.writeFileSync(cfg, JSON.stringify({ nodeId: 1, dataDir: path.join(dir, 'data'), listen: addr }))
  const child = spawn(process.execPath, [STRATA, 'daemon', 'mgmtd', '--config', cfg], { stdio: 'ignore' })
  t.teardown(() => {
    child.kill('SIGKILL')
  })
  const A = ['admin', '--mgmtd-address', addr]
  await until('mgmtd up', async () => (await strata([...A, 'list-nodes'])).code === 0, 15_000)
  return { dir, A, cfg, child, addr }
}
