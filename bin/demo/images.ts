// The sandboxes' environment, as images in the DFS image store:
//   debian:bookworm  a Debian bookworm minbase tree with python3, built from
//                    Debian's packages by debootstrap once and cached on local
//                    disk (sandbox/image/debootstrap.ts), imported as one EROFS
//                    layer of kind base;
//   toolkit:v1       the demo's /opt/toolkit tree (toolkit.ts), one layer of
//                    kind toolkit.
// A sandbox stacks them per create (base + toolkits): nothing is copied.

import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { DEFAULT_ROOTFS_CACHE, ensureDebianRootfs, type DebianRootfs } from '../../sandbox/image/debootstrap.js'
import { importPath, type ImportPathResult } from '../../sandbox/image/oci/import.js'
import type { ProgressSink } from '../../sandbox/image/progress.js'
import type { ImageStore } from '../../sandbox/image/store.js'
import { fmtBytes } from './report.js'
import { writeToolkitTree } from './toolkit.js'

const exec = promisify(execFile)

export const DEBIAN_SUITE = 'bookworm'
/** on top of debootstrap's minbase */
export const DEBIAN_PACKAGES = ['python3']
export const BASE_IMAGE = { name: 'debian', tag: DEBIAN_SUITE }
export const TOOLKIT_IMAGE = { name: 'toolkit', tag: 'v1' }
export const ref = (i: { name: string; tag: string }): string => `${i.name}:${i.tag}`

export interface BaseRootfs extends DebianRootfs {
  /** apparent size of the tree (du -sb) */
  treeBytes: number
  files: number
}

/**
 * The cached Debian tree, built on the first run (minutes: debootstrap
 * downloads and unpacks ~100 packages). Each debootstrap stage is passed to
 * `update`.
 */
export async function baseRootfs(update: (d: string) => void): Promise<BaseRootfs> {
  let stage = ''
  let n = 0
  const r = await ensureDebianRootfs({
    suite: DEBIAN_SUITE,
    include: DEBIAN_PACKAGES,
    onLine: (l) => {
      // "Retrieving Packages", "Validating libc6 …", "Unpacking …": show the stage and a count
      const s = l.split(' ')[0] ?? l
      if (s !== stage) {
        stage = s
        n = 0
      }
      n++
      update(`debootstrap: ${l.length > 60 ? l.slice(0, 57) + '...' : l}${n > 1 ? ` (${n})` : ''}`)
    },
  })
  update('measuring the tree')
  const [du, count] = await Promise.all([
    exec('du', ['-sb', r.dir]).then((x) => Number(x.stdout.split(/\s/)[0])),
    exec('find', [r.dir, '-xdev', '-printf', '.'], { maxBuffer: 64 << 20 }).then((x) => x.stdout.length),
  ])
  return { ...r, treeBytes: du, files: count }
}

/** Where ensureDebianRootfs builds: a scratch directory beside the cache entry, named with our pid. */
export function rootfsScratchDirs(): string[] {
  try {
    return fs
      .readdirSync(DEFAULT_ROOTFS_CACHE)
      .filter((n) => n.endsWith(`.building-${process.pid}`))
      .map((n) => path.join(DEFAULT_ROOTFS_CACHE, n))
  } catch {
    return []
  }
}

/** Turns the import's progress tasks into one step detail: `build rootfs: 42.0 MiB stored`. */
function progressTo(update: (d: string) => void): ProgressSink {
  return {
    start(label: string, total?: number) {
      let bytes = 0
      update(`${label}: mkfs.erofs, then stored in the DFS`)
      return {
        tick(n: number) {
          bytes += n
          update(`${label}: ${fmtBytes(bytes)}${total ? ` of ${fmtBytes(total)}` : ''} into the DFS`)
        },
        done: () => undefined,
      }
    },
  }
}

export interface ImportFigures {
  ref: string
  digest: string
  layers: Array<{ digest: string; kind: string; size: number }>
  /** bytes of EROFS layers in the DFS */
  layerBytes: number
  ms: number
}

function figures(r: ImportPathResult, ms: number): ImportFigures {
  return {
    ref: `${r.name}:${r.tag}`,
    digest: r.digest,
    layers: r.manifest.layers.map((l) => ({ digest: l.digest, kind: l.kind, size: l.size })),
    layerBytes: r.manifest.layers.reduce((a, l) => a + l.size, 0),
    ms,
  }
}

/** Imports the Debian tree as debian:bookworm (one EROFS layer built from the directory itself). */
export async function importBase(store: ImageStore, rootfs: string, workDir: string, update: (d: string) => void, signal: AbortSignal): Promise<ImportFigures> {
  const t0 = performance.now()
  const r = await importPath(store, rootfs, { ...BASE_IMAGE, kind: 'base', workDir, onProgress: progressTo(update), signal })
  return figures(r, performance.now() - t0)
}

/** Writes the toolkit tree into workDir and imports it as toolkit:v1 (kind toolkit). */
export async function importToolkit(store: ImageStore, workDir: string, update: (d: string) => void, signal: AbortSignal): Promise<ImportFigures & { files: number; treeBytes: number }> {
  const t0 = performance.now()
  const tree = path.join(workDir, 'toolkit')
  fs.mkdirSync(tree, { recursive: true })
  const t = writeToolkitTree(tree)
  const r = await importPath(store, tree, { ...TOOLKIT_IMAGE, kind: 'toolkit', workDir, onProgress: progressTo(update), signal })
  return { ...figures(r, performance.now() - t0), files: t.files, treeBytes: t.bytes }
}
