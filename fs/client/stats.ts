// Counters of one StorageClient, read by benchmarks and by tests that need to
// see retries happen. Plain numbers; a snapshot is a deep copy.

export type ClientOp = 'write' | 'read' | 'truncate' | 'removeChunks' | 'queryLastChunk'

export interface StorageClientStats {
  /** logical operations started (`read` counts IOs, including those of batchRead) */
  ops: Record<ClientOp, number>
  /** batchRead calls made by users */
  batchReadCalls: number
  /** RPCs sent, by storage method name */
  rpcs: Record<string, number>
  /** RPC- or IO-level errors seen, by code (retried or not) */
  errors: Record<string, number>
  /** retries scheduled, by the code that caused them */
  retries: Record<string, number>
  /** operations that finally failed, by code */
  failures: Record<string, number>
  bytesWritten: number
  bytesRead: number
  /** reads answered CHUNK_NOT_FOUND and returned as holes */
  holes: number
  checksumMismatches: number
  routingRefreshes: number
}

export function emptyStats(): StorageClientStats {
  return {
    ops: { write: 0, read: 0, truncate: 0, removeChunks: 0, queryLastChunk: 0 },
    batchReadCalls: 0,
    rpcs: {},
    errors: {},
    retries: {},
    failures: {},
    bytesWritten: 0,
    bytesRead: 0,
    holes: 0,
    checksumMismatches: 0,
    routingRefreshes: 0,
  }
}

export function bump(table: Record<string, number>, key: string, n = 1): void {
  table[key] = (table[key] ?? 0) + n
}

export function copyStats(s: StorageClientStats): StorageClientStats {
  return {
    ...s,
    ops: { ...s.ops },
    rpcs: { ...s.rpcs },
    errors: { ...s.errors },
    retries: { ...s.retries },
    failures: { ...s.failures },
  }
}
