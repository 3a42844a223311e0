// The demo's toolkit layer: a small tree under /opt/toolkit (a Python
// helper that summarizes a dataset, and a write probe), built as a local
// directory and imported as an image of kind `toolkit`, stacked on the
// Debian base in every sandbox. Also the host's side of the check: the same
// summary computed in Node over the bytes the demo published.

import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'

export const TOOLKIT_ROOT = '/opt/toolkit'
export const STATS_PY = `${TOOLKIT_ROOT}/bin/stats.py`
export const PROBE_PY = `${TOOLKIT_ROOT}/bin/probe_write.py`

const STATS_SOURCE = `#!/usr/bin/env python3
"""stats.py DIR: a deterministic summary of a dataset directory, as one JSON line.

Every regular file below DIR, sorted by relative path: its size and sha256;
for a .csv file also its data rows and the sum of each (integer) column.
"digest" is the sha256 of the lines "<path> <size> <sha256>\\\\n" in that
order, one value that changes when any byte, name or file does. Part of the
Strata demo's toolkit layer (/opt/toolkit in every sandbox).
"""
import hashlib
import json
import os
import sys
import time


def files(root):
    out = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    return sorted(out)


def csv_stats(data):
    lines = data.decode("ascii").splitlines()
    header = lines[0].split(",")
    sums = [0] * len(header)
    for line in lines[1:]:
        for i, v in enumerate(line.split(",")):
            sums[i] += int(v)
    return {"rows": len(lines) - 1, "sums": dict(zip(header, sums))}


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/data"
    t0 = time.monotonic()
    entries = []
    total = 0
    h = hashlib.sha256()
    for rel in files(root):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        total += len(data)
        sha = hashlib.sha256(data).hexdigest()
        e = {"path": rel, "size": len(data), "sha256": sha}
        if rel.endswith(".csv"):
            e.update(csv_stats(data))
        entries.append(e)
        h.update(("%s %d %s\\n" % (rel, len(data), sha)).encode())
    out = {
        "files": entries,
        "bytes": total,
        "digest": h.hexdigest(),
        "readMs": round((time.monotonic() - t0) * 1000, 1),
        "python": sys.version.split()[0],
        "hostname": os.uname().nodename,
    }
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\\n")


main()
`

const PROBE_SOURCE = `#!/usr/bin/env python3
"""probe_write.py DIR: tries to create a file in DIR (a read-only dataset
mount must refuse it with EROFS) and one in /tmp (the sandbox's own writable
layer must take it). Prints one JSON line; exits 0 only when both hold."""
import errno
import json
import os
import sys

target = sys.argv[1] if len(sys.argv) > 1 else "/data"
out = {}
try:
    with open(os.path.join(target, ".probe"), "w") as f:
        f.write("x")
    out["dataset"] = "written"
except OSError as e:
    out["dataset"] = errno.errorcode.get(e.errno, str(e.errno))
    out["datasetError"] = e.strerror
try:
    with open("/tmp/probe", "w") as f:
        f.write(os.uname().nodename)
    with open("/tmp/probe") as f:
        out["tmp"] = "ok" if f.read() == os.uname().nodename else "mismatch"
except OSError as e:
    out["tmp"] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out, sort_keys=True))
sys.exit(0 if out["dataset"] == "EROFS" and out["tmp"] == "ok" else 1)
`

const README = `Strata demo toolkit (layer kind: toolkit), stacked on debian:bookworm.
  bin/stats.py DIR        size, sha256 and CSV column sums of every file below DIR, as JSON
  bin/probe_write.py DIR  shows DIR refuses writes (EROFS) while /tmp takes them
`

/** A fixed time for every entry, so the same toolkit builds the same layer. */
const EPOCH = new Date('2025-01-01T00:00:00Z')

/** Writes the toolkit tree (opt/toolkit/…) under `dir`: root-owned, 0755 directories, fixed times. */
export function writeToolkitTree(dir: string): { files: number; bytes: number } {
  const files: Array<[string, string, number]> = [
    ['opt/toolkit/bin/stats.py', STATS_SOURCE, 0o755],
    ['opt/toolkit/bin/probe_write.py', PROBE_SOURCE, 0o755],
    ['opt/toolkit/README', README, 0o644],
  ]
  let bytes = 0
  for (const [rel, text, mode] of files) {
    const p = path.join(dir, rel)
    fs.mkdirSync(path.dirname(p), { recursive: true })
    fs.writeFileSync(p, text)
    fs.chmodSync(p, mode)
    bytes += Buffer.byteLength(text)
  }
  // every directory of the layer: what the overlay shows for /opt and below when this layer is on top
  const dirs = ['', 'opt', 'opt/toolkit', 'opt/toolkit/bin']
  for (const rel of [...files.map((f) => f[0]), ...dirs.reverse()]) {
    const p = path.join(dir, rel)
    if (dirs.includes(rel)) fs.chmodSync(p, 0o755)
    fs.chownSync(p, 0, 0)
    fs.utimesSync(p, EPOCH, EPOCH)
  }
  return { files: files.length, bytes }
}

// ---------------------------------------------------------------- the summary, on the host

export interface FileStats {
  path: string
  size: number
  sha256: string
  rows?: number
  sums?: Record<string, number>
}

export interface DatasetStats {
  files: FileStats[]
  bytes: number
  digest: string
}

/** What stats.py prints, computed over in-memory files (relative path → bytes). */
export function datasetStats(files: ReadonlyMap<string, Buffer>): DatasetStats {
  const names = [...files.keys()].sort()
  const h = crypto.createHash('sha256')
  const out: FileStats[] = []
  let bytes = 0
  for (const name of names) {
    const data = files.get(name)!
    const sha = crypto.createHash('sha256').update(data).digest('hex')
    const e: FileStats = { path: name, size: data.length, sha256: sha }
    if (name.endsWith('.csv')) Object.assign(e, csvStats(data))
    out.push(e)
    bytes += data.length
    h.update(`${name} ${data.length} ${sha}\n`)
  }
  return { files: out, bytes, digest: h.digest('hex') }
}

function csvStats(data: Buffer): { rows: number; sums: Record<string, number> } {
  const lines = data.toString('ascii').split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  const header = lines[0]!.split(',')
  const sums = header.map(() => 0)
  for (let i = 1; i < lines.length; i++) {
    const cols = lines[i]!.split(',')
    for (let k = 0; k < cols.length; k++) sums[k]! += Number(cols[k])
  }
  return { rows: lines.length - 1, sums: Object.fromEntries(header.map((c, k) => [c, sums[k]!])) }
}

/** Differences between what a sandbox reported and the host's numbers (empty: equal). */
export function compareStats(want: DatasetStats, got: unknown): string[] {
  const g = got as Partial<DatasetStats> | null
  if (!g || typeof g !== 'object' || !Array.isArray(g.files)) return ['no summary in the output']
  const diffs: string[] = []
  if (g.digest !== want.digest) diffs.push(`digest ${String(g.digest).slice(0, 12)}… != ${want.digest.slice(0, 12)}…`)
  if (g.bytes !== want.bytes) diffs.push(`bytes ${g.bytes} != ${want.bytes}`)
  const byPath = new Map(g.files.map((f) => [f.path, f]))
  for (const w of want.files) {
    const f = byPath.get(w.path)
    if (!f) {
      diffs.push(`${w.path} missing`)
      continue
    }
    if (f.size !== w.size) diffs.push(`${w.path}: size ${f.size} != ${w.size}`)
    if (f.sha256 !== w.sha256) diffs.push(`${w.path}: sha256 differs`)
    if (w.rows !== undefined && f.rows !== w.rows) diffs.push(`${w.path}: ${f.rows} rows != ${w.rows}`)
    if (w.sums && canonical(f.sums ?? {}) !== canonical(w.sums)) diffs.push(`${w.path}: column sums ${canonical(f.sums ?? {})} != ${canonical(w.sums)}`)
    byPath.delete(w.path)
  }
  for (const extra of byPath.keys()) diffs.push(`unexpected file ${extra}`)
  return diffs
}

function canonical(o: Record<string, number>): string {
  return JSON.stringify(Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))))
}
