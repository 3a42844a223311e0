// Idempotency records (IDEM|request|client) and the withdrawal of a request
// whose client gave up on it.
//
// A client that hears nothing back (timeout, connection lost after sending)
// cannot tell whether its request was applied, and a server that had it
// queued may still apply it after the client gave up. For an open or create
// for write that is a write session nobody will ever close (and a removed
// file whose chunks GC must keep for it). `abandon` settles the request in
// one transaction: applied (a record exists) → the write session it opened is
// closed; not applied → a failure record is written first, so that the late
// execution reads it and answers META_REQUEST_ABANDONED instead of applying.

import { StrataError } from '../common/errors.js'
import type { ReadWriteTxn } from '../kv/types.js'
import { decodeValue, encodeValue } from './codec.js'
import { nowUs } from './inode.js'
import { idemKey, sessionKey } from './keys.js'
import type { AbandonRsp, InodeId } from './protocol.js'

export interface IdemRecord {
  clientId: string
  requestId: string
  /** µs */
  timestamp: number
  ok: boolean
  result?: unknown
  error?: { code: string; message: string }
  /** the write session the request opened (open/create for write): what an abandon closes */
  session?: { inode: InodeId; session: string }
}

export function encodeIdemRecord(clientId: string, requestId: string, outcome: { ok: true; result: unknown; session?: IdemRecord['session'] } | { ok: false; error: { code: string; message: string } }): Buffer {
  return encodeValue({ clientId, requestId, timestamp: nowUs(), ...outcome } satisfies IdemRecord)
}

export function decodeIdemRecord(v: Buffer): IdemRecord {
  return decodeValue<IdemRecord>(v, 'idempotency record')
}

/** The recorded answer of a replayed request: its result, or its error thrown again. */
export function replay(rec: IdemRecord): unknown {
  if (rec.ok) return rec.result
  throw StrataError.fromWire({ code: rec.error?.code ?? 'INTERNAL', message: `${rec.error?.message ?? ''} (replayed)` })
}

/**
 * Settles request `requestId` of client `clientId` for good (one
 * transaction; naturally idempotent: a second abandon finds the record the
 * first one found or wrote).
 */
export async function abandonRequest(txn: ReadWriteTxn, clientId: string, requestId: string): Promise<AbandonRsp> {
  const key = idemKey(requestId, clientId)
  const v = await txn.get(key)
  if (v === undefined) {
    txn.set(
      key,
      encodeIdemRecord(clientId, requestId, {
        ok: false,
        error: { code: 'META_REQUEST_ABANDONED', message: `request ${requestId} was abandoned: its client gave up waiting for the answer` },
      }),
    )
    return { applied: false, closed: 0 }
  }
  const rec = decodeIdemRecord(v)
  if (!rec.ok || !rec.session) return { applied: rec.ok, closed: 0 }
  // closed as a prune without a length update would: nothing was written through a session whose
  // open was never answered, so the length cannot have moved by it
  const sk = sessionKey(rec.session.inode, rec.session.session)
  if ((await txn.get(sk)) === undefined) return { applied: true, closed: 0 }
  txn.clear(sk)
  return { applied: true, closed: 1 }
}
