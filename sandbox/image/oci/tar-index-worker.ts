// Worker thread body of TarIndex.scan: indexes one tar file and posts its
// entries back, or the StrataError it failed with in wire form.
import { parentPort, workerData } from 'node:worker_threads'
import { toStrataError } from '../../../fs/common/errors.js'
import { TarIndex, type TarEntry } from './tar-index.js'

export type TarScanReply = { entries: TarEntry[] } | { error: { code: string; message: string; detail?: Record<string, unknown> } }

const file = (workerData as { file: string }).file
TarIndex.open(file).then(
  (idx) => parentPort!.postMessage({ entries: [...idx.entries.values()] } satisfies TarScanReply),
  (e: unknown) => {
    parentPort!.postMessage({ error: toStrataError(e, 'IO_ERROR').toWire() } satisfies TarScanReply)
  },
)
