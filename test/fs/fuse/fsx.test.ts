// fsx through a real mount (test/helpers/fsx.ts): seeded random pwrite,
// pread, ftruncate, fsync, close/reopen, O_APPEND writes, two descriptors,
// MAP_SHARED reads and writes with msync, on one file in a directory of
// 64 KiB chunks striped over 3 chains, against an in-memory model; after
// every `cross` op (fsync of every descriptor first) the whole file is read
// through a second mount of the cluster, which docs/fuse.md promises sees
// what was fsynced or closed.
//
// More seeds: FSX_SEEDS=50 [FSX_SEED0=1000] [FSX_OPS=800] npx ava dist/test/fs/fuse/fsx.test.js
// (FSX_MOUNT='{"writeBufferSize":0}' mounts the written mount with other settings).
// A failing seed is shrunk to a short op list with FSX_SHRINK=1 (printed as JSON).

import path from 'node:path'
import test from 'ava'
import { fsxOpCount, fsxSeeds, genOps, shrinkOps, type FsxOp } from '../../helpers/fsx.js'
import { fuseSkipReason, py, startFuseCluster, type FuseMount } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

// FSX_CHUNK=4096 tries another chunk size (the file stays under 40 chunks)
const CHUNK = Number(process.env.FSX_CHUNK ?? 64 * 1024)
const LAYOUT = { tableId: 1, tableVersion: 0, chunkSize: CHUNK, stripeSize: 3, chains: { type: 'Empty' as const } }

/** Applies the ops (JSON on stdin) to argv[1] and the model; argv[2] is the same file on another mount. */
export const FSX_DRIVER = String.raw`
import json, mmap, os, random, sys, threading, time
path, other = sys.argv[1], sys.argv[2]
ops = json.load(sys.stdin)
model = bytearray()
def data(seed, n): return random.Random(seed).randbytes(n)
def fail(i, msg):
    print(json.dumps({'fail': i, 'op': ops[i] if i < len(ops) else None, 'msg': msg}))
    sys.exit(3)
def pread_all(fd, n, off):
    out = bytearray()
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b: break
        out += b
    return bytes(out)
def diff(i, what, got, want):
    if got == want: return
    at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
    fail(i, '%s: %d bytes, expected %d; first difference at %d (got %r, want %r)' % (what, len(got), len(want), at, got[at:at+8], want[at:at+8]))
# mtime: not before the last change began (docs/fuse.md: the time the bytes reached storage), never backwards
changed_ns = 0
last_mtime = 0
def whole(i, fd, what):
    global last_mtime
    st = os.fstat(fd)
    if st.st_mtime_ns < changed_ns - 1000000: fail(i, '%s: mtime %d before the last change %d' % (what, st.st_mtime_ns, changed_ns))
    if st.st_mtime_ns < last_mtime: fail(i, '%s: mtime went back from %d to %d' % (what, last_mtime, st.st_mtime_ns))
    last_mtime = st.st_mtime_ns
    if st.st_size != len(model): fail(i, '%s: fstat size %d, model %d' % (what, st.st_size, len(model)))
    if st.st_blocks != (len(model) + 511) // 512: fail(i, '%s: st_blocks %d for size %d' % (what, st.st_blocks, len(model)))
    diff(i, what, pread_all(fd, len(model) + 4096, 0), bytes(model))
def put(off, b):
    global model
    if len(model) < off: model += bytes(off - len(model))
    model[off:off + len(b)] = b
fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)]
fds.append(os.open(path, os.O_RDWR))
apfd = os.open(path, os.O_WRONLY | os.O_APPEND)
rofd = os.open(path, os.O_RDONLY)
def uncached_read(n, off):
    os.posix_fadvise(rofd, 0, 0, os.POSIX_FADV_DONTNEED)
    return pread_all(rofd, n, off)
i = 0
try:
    for i, op in enumerate(ops):
        k = op['op']
        if k in ('write', 'truncate', 'append', 'pair', 'handoff'): changed_ns = time.time_ns()
        if k == 'write':
            b = data(op['seed'], op['len'])
            n = os.pwrite(fds[op['fd']], b, op['off'])
            if n != len(b): fail(i, 'short write %d' % n)
            put(op['off'], b)
        elif k == 'read':
            diff(i, 'pread', pread_all(fds[op['fd']], op['len'], op['off']), bytes(model[op['off']:op['off'] + op['len']]))
        elif k == 'truncate':
            os.ftruncate(fds[op['fd']], op['size'])
            if op['size'] < len(model): del model[op['size']:]
            else: model += bytes(op['size'] - len(model))
        elif k == 'fsync':
            os.fsync(fds[op['fd']])
        elif k == 'reopen':
            os.close(fds[op['fd']])
            fds[op['fd']] = os.open(path, os.O_RDWR)
        elif k == 'append':
            b = data(op['seed'], op['len'])
            n = os.write(apfd, b)
            if n != len(b): fail(i, 'short append %d' % n)
            put(len(model), b)
        elif k == 'mapread':
            if len(model) == 0: continue
            with mmap.mmap(fds[0], len(model)) as m:
                diff(i, 'mmap read', m[op['off']:op['off'] + op['len']], bytes(model[op['off']:op['off'] + op['len']]))
        elif k == 'mapwrite':
            if op['off'] + op['len'] > len(model): continue
            changed_ns = time.time_ns()
            b = data(op['seed'], op['len'])
            with mmap.mmap(fds[1], len(model)) as m:
                m[op['off']:op['off'] + op['len']] = b
                m.flush()
            put(op['off'], b)
        elif k == 'cross':
            for fd in fds + [apfd]: os.fsync(fd)
            st = os.stat(other)
            if st.st_size != len(model): fail(i, 'other mount: size %d, model %d' % (st.st_size, len(model)))
            with open(other, 'rb') as f: got = f.read()
            diff(i, 'other mount', got, bytes(model))
        elif k == 'check':
            whole(i, fds[op['fd']], 'check')
        elif k == 'solo':
            for fd in fds + [apfd]: os.close(fd)
            os.posix_fadvise(rofd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = bytearray()
            while True:
                b = os.pread(rofd, op['piece'], len(got))
                if not b: break
                got += b
            diff(i, 'sequential read-only read', bytes(got), bytes(model))
            fds = [os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)]
            apfd = os.open(path, os.O_WRONLY | os.O_APPEND)
        elif k == 'roread':
            diff(i, 'read-only pread', uncached_read(op['len'], op['off']), bytes(model[op['off']:op['off'] + op['len']]))
        elif k == 'handoff':
            for fd in fds + [apfd, rofd]: os.close(fd)
            ofd = os.open(other, os.O_RDWR)
            if 'size' in op:
                os.ftruncate(ofd, op['size'])
                if op['size'] < len(model): del model[op['size']:]
                else: model += bytes(op['size'] - len(model))
            else:
                b = data(op['seed'], op['len'])
                if os.pwrite(ofd, b, op['off']) != len(b): fail(i, 'short write on the other mount')
                put(op['off'], b)
            os.close(ofd)
            fds = [os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)]
            apfd = os.open(path, os.O_WRONLY | os.O_APPEND)
            rofd = os.open(path, os.O_RDONLY)
        elif k == 'pair':
            a, b = op['a'], op['b']
            ba = data(a['seed'], a['len'])
            bb = data(b['seed'], b['len']) if b['op'] == 'write' else None
            want = bytes(model[b['off']:b['off'] + b['len']])
            out = {}
            def run_b():
                try:
                    out['b'] = os.pwrite(fds[1], bb, b['off']) if bb is not None else pread_all(fds[1], b['len'], b['off'])
                except OSError as e:
                    out['b'] = e
            th = threading.Thread(target=run_b)
            th.start()
            n = os.pwrite(fds[0], ba, a['off'])
            th.join()
            if isinstance(out['b'], OSError): raise out['b']
            if n != len(ba): fail(i, 'short write %d' % n)
            put(a['off'], ba)
            if bb is None: diff(i, 'pread beside a write', out['b'], want)
            else:
                if out['b'] != len(bb): fail(i, 'short write %d' % out['b'])
                put(b['off'], bb)
        else:
            fail(i, 'unknown op')
    for fd in fds + [apfd, rofd]: os.close(fd)
    st = os.stat(path)
    if st.st_size != len(model): fail(len(ops), 'after close: size %d, model %d' % (st.st_size, len(model)))
    with open(other, 'rb') as f: diff(len(ops), 'other mount after close', f.read(), bytes(model))
except OSError as e:
    fail(i, 'OSError %s' % e)
print(json.dumps({'ok': len(ops), 'size': len(model)}))
`

interface Fsx {
  a: FuseMount
  b: FuseMount
  /** runs ops on a fresh file; '' when they pass, else what failed */
  run(ops: FsxOp[], name: string): Promise<string>
  /** chunk size and stripe of a file in /fsx */
  layoutOf(name: string): Promise<[number, number]>
}

async function setup(tt: import('ava').ExecutionContext): Promise<Fsx> {
  const c = await startFuseCluster(tt, { chains: 3, stripeSize: 2 })
  await c.m.client().mkdirs('/fsx', { layout: LAYOUT })
  // FSX_MOUNT='{"writeBufferSize":0}' tries other settings of the mount written through
  const a = await c.mount({ name: 'a', ...(JSON.parse(process.env.FSX_MOUNT ?? '{}') as object) })
  const b = await c.mount({ name: 'b' })
  const run = async (ops: FsxOp[], name: string): Promise<string> => {
    const r = await py(FSX_DRIVER, [path.join(a.mnt, 'fsx', name), path.join(b.mnt, 'fsx', name)], { input: JSON.stringify(ops), timeoutMs: 240_000 })
    if (r.code === 0) return ''
    return `${r.stdout.trim()}\n${r.stderr.slice(-3000)}`
  }
  const layoutOf = async (name: string): Promise<[number, number]> => {
    const l = (await c.m.client().stat(`/fsx/${name}`)).file!.layout
    return [l.chunkSize, l.stripeSize]
  }
  return { a, b, run, layoutOf }
}

t('fsx through FUSE: random ops on a 64 KiB-chunk striped file match the model, also through a second mount', async (tt) => {
  tt.timeout(20 * 60_000)
  const f = await setup(tt)
  const n = fsxOpCount(300)
  for (const seed of fsxSeeds(1, 2)) {
    const ops = genOps(seed, n, { chunkSize: CHUNK, maxLen: 40 * CHUNK, mmap: true })
    const err = await f.run(ops, `s${seed}`)
    if (!err) {
      tt.deepEqual(await f.layoutOf(`s${seed}`), [CHUNK, 3])
      tt.pass(`seed ${seed}: ${ops.length} ops`)
      continue
    }
    let msg = `seed ${seed} (${ops.length} ops): ${err}`
    if (process.env.FSX_SHRINK) {
      let k = 0
      const min = await shrinkOps(ops, async (cand) => (await f.run(cand, `shrink-${seed}-${++k}`)) !== '')
      msg += `\nshrunk to ${min.length} ops: ${JSON.stringify(min)}\n${await f.run(min, `min-${seed}`)}`
    }
    tt.fail(msg)
    if (!process.env.FSX_KEEP_GOING) break
  }
})
