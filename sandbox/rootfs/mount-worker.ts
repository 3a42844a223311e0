// Runs mount(2)/umount2(2) for sandbox/rootfs off the main thread. A layer
// mount makes the kernel read the layer's superblock through FUSE, which can
// take as long as the DFS does; the daemon's event loop must not wait on it.
// Threads share the process's mount namespace, so a mount made here is the
// process's mount.
import { parentPort } from 'node:worker_threads'
import { native } from '../../fs/common/native.js'

export type MountRequest =
  | { id: number; op: 'mount'; args: [string | null, string, string | null, number, string | null] }
  | { id: number; op: 'umount2'; args: [string, number] }

export type MountReply = { id: number; ok: true } | { id: number; ok: false; code: string; message: string }

parentPort?.on('message', (req: MountRequest) => {
  try {
    if (req.op === 'mount') native().mount(...req.args)
    else native().umount2(...req.args)
    parentPort!.postMessage({ id: req.id, ok: true } satisfies MountReply)
  } catch (e) {
    const err = e as NodeJS.ErrnoException
    parentPort!.postMessage({ id: req.id, ok: false, code: err.code ?? 'EIO', message: err.message } satisfies MountReply)
  }
})
