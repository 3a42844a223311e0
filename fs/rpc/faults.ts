// Per-method fault hooks for tests: delay, drop or fail requests as they
// arrive at a server. Installed over the Core service's admin RPC, so a test
// can reach into a real daemon process and make one method misbehave.

import { StrataError, isErrorCode, type ErrorCode } from '../common/errors.js'

export type FaultKind = 'delay' | 'drop' | 'fail'

export interface FaultSpec {
  service: number
  /** omitted: every method of the service */
  method?: number
  kind: FaultKind
  /** delay: how long to hold the request before handling it */
  delayMs?: number
  /** fail: the error code to answer with (default RPC_FAULT_INJECTED) */
  code?: string
  /** how many requests to affect; omitted: until cleared */
  count?: number
  /** 0..1, default 1 */
  probability?: number
}

export interface InstalledFault extends FaultSpec {
  id: number
  hits: number
}

export type FaultAction =
  | { kind: 'none' }
  | { kind: 'delay'; ms: number }
  | { kind: 'drop' }
  | { kind: 'fail'; error: StrataError }

export class FaultRegistry {
  private faults: InstalledFault[] = []
  private nextId = 1

  add(spec: FaultSpec): InstalledFault {
    if (!['delay', 'drop', 'fail'].includes(spec.kind)) throw new StrataError('INVALID_ARGUMENT', `unknown fault kind ${String(spec.kind)}`)
    if (!Number.isInteger(spec.service)) throw new StrataError('INVALID_ARGUMENT', 'fault needs an integer service id')
    if (spec.code !== undefined && !isErrorCode(spec.code)) throw new StrataError('INVALID_ARGUMENT', `unknown error code ${spec.code}`)
    const f: InstalledFault = { ...spec, id: this.nextId++, hits: 0 }
    this.faults.push(f)
    return f
  }

  clear(id?: number): number {
    const before = this.faults.length
    this.faults = id === undefined ? [] : this.faults.filter((f) => f.id !== id)
    return before - this.faults.length
  }

  list(): InstalledFault[] {
    return this.faults.map((f) => ({ ...f }))
  }

  /** Decide what happens to one incoming request; consumes counted faults. */
  match(service: number, method: number): FaultAction[] {
    if (this.faults.length === 0) return []
    const actions: FaultAction[] = []
    for (const f of this.faults) {
      if (f.service !== service || (f.method !== undefined && f.method !== method)) continue
      if (f.probability !== undefined && Math.random() >= f.probability) continue
      f.hits++
      if (f.kind === 'delay') actions.push({ kind: 'delay', ms: f.delayMs ?? 0 })
      else if (f.kind === 'drop') actions.push({ kind: 'drop' })
      else actions.push({ kind: 'fail', error: new StrataError((f.code as ErrorCode | undefined) ?? 'RPC_FAULT_INJECTED', `fault hook ${f.id}`) })
    }
    this.faults = this.faults.filter((f) => f.count === undefined || f.hits < f.count)
    return actions
  }
}
