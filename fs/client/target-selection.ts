// Routing-info → "where does this chunk IO go". Mirrors 3FS
// client/storage/TargetSelection: reads may go to any SERVING replica (the
// chain's SERVING prefix), updates always go to the head. Everything here is a
// pure function of a RoutingInfo snapshot plus a little selector state, so it
// can be tested without a cluster.

import { StrataError } from '../common/errors.js'
import type { ChainId, NodeId, RoutingInfo, TargetId } from '../common/types.js'

export type ReadMode = 'loadBalance' | 'roundRobin' | 'random' | 'head' | 'tail'
export const READ_MODES: readonly ReadMode[] = ['loadBalance', 'roundRobin', 'random', 'head', 'tail']

export function isReadMode(m: unknown): m is ReadMode {
  return typeof m === 'string' && (READ_MODES as readonly string[]).includes(m)
}

export interface SlimTarget {
  targetId: TargetId
  nodeId: NodeId
  address: string
}

export interface SlimChain {
  chainId: ChainId
  chainVersion: number
  routingInfoVersion: number
  /** all targets of the chain, serving or not */
  totalTargets: number
  /** SERVING targets, head first */
  serving: SlimTarget[]
}

/**
 * The chain's reachable SERVING targets in chain order. Like 3FS we stop at
 * the first target that is not SERVING (mgmtd keeps SERVING targets in front,
 * so anything after a non-serving one is not part of the serving chain) and
 * at the first one whose host cannot be resolved. Throws ROUTING_ERROR when
 * the chain is unknown — retryable, because a newer routing info may have it.
 */
export function resolveChain(ri: RoutingInfo, chainId: ChainId): SlimChain {
  const chain = ri.chains[String(chainId)]
  if (!chain || chain.chainId !== chainId) {
    throw new StrataError('ROUTING_ERROR', `chain ${chainId} not found in routing info v${ri.routingInfoVersion}`)
  }
  const serving: SlimTarget[] = []
  for (const t of chain.targets) {
    if (t.publicState !== 'SERVING') break
    const info = ri.targets[String(t.targetId)]
    const node = info ? ri.nodes[String(info.nodeId)] : undefined
    if (!info || !node || !node.address) break
    serving.push({ targetId: t.targetId, nodeId: info.nodeId, address: node.address })
  }
  return { chainId, chainVersion: chain.chainVersion, routingInfoVersion: ri.routingInfoVersion, totalTargets: chain.targets.length, serving }
}

/** The head: the only target that accepts client updates. */
export function headOf(chain: SlimChain): SlimTarget {
  const h = chain.serving[0]
  if (!h) throw new StrataError('CHAIN_UNAVAILABLE', `chain ${chain.chainId}@${chain.chainVersion} has no serving target`)
  return h
}

export interface SelectOptions {
  /**
   * Targets that recently failed for this call: skipped when another
   * candidate is left (3FS max_failures_before_failover = 1).
   */
  avoid?: ReadonlySet<TargetId>
  /** Targets that must not be used at all (e.g. returned corrupt data). */
  exclude?: ReadonlySet<TargetId>
  /** Current load of a node for loadBalance (in-flight + already assigned in this round). */
  load?: (nodeId: NodeId) => number
}

/**
 * Picks one SERVING target of a chain for a read. Holds the round-robin
 * cursors, so one selector should live as long as the client.
 */
export class TargetSelector {
  private readonly rr = new Map<ChainId, number>()

  constructor(private readonly random: () => number = Math.random) {}

  select(chain: SlimChain, mode: ReadMode, opts: SelectOptions = {}): SlimTarget | undefined {
    const all = chain.serving
    if (all.length === 0) return undefined
    // head/tail name one replica; steering away from it would change what is read
    if (mode === 'head') return opts.exclude?.has(all[0]!.targetId) ? undefined : all[0]
    if (mode === 'tail') return opts.exclude?.has(all[all.length - 1]!.targetId) ? undefined : all[all.length - 1]

    let candidates = opts.exclude && opts.exclude.size > 0 ? all.filter((t) => !opts.exclude!.has(t.targetId)) : all
    if (opts.avoid && opts.avoid.size > 0) {
      const preferred = candidates.filter((t) => !opts.avoid!.has(t.targetId))
      if (preferred.length > 0) candidates = preferred
    }
    if (candidates.length === 0) return undefined

    switch (mode) {
      case 'random':
        return candidates[this.pick(candidates.length)]
      case 'roundRobin': {
        const n = this.rr.get(chain.chainId) ?? 0
        this.rr.set(chain.chainId, n + 1)
        return candidates[n % candidates.length]
      }
      case 'loadBalance': {
        const load = opts.load ?? (() => 0)
        let best: SlimTarget[] = []
        let bestLoad = Infinity
        for (const t of candidates) {
          const l = load(t.nodeId)
          if (l < bestLoad) {
            bestLoad = l
            best = [t]
          } else if (l === bestLoad) best.push(t)
        }
        return best[this.pick(best.length)]
      }
      default:
        throw new StrataError('INVALID_ARGUMENT', `unknown read mode ${String(mode)}`)
    }
  }

  private pick(n: number): number {
    return Math.min(n - 1, Math.floor(this.random() * n))
  }
}

export interface NodeBatch<T> {
  nodeId: NodeId
  address: string
  items: T[]
}

/**
 * Groups IOs by storage node so that each node gets one batch RPC. A node's
 * group is split only when it exceeds maxItems or maxBytes (an IO larger
 * than maxBytes travels alone). Batches come out in order of first
 * appearance, items in input order.
 */
export function groupByNode<T>(
  assigned: ReadonlyArray<{ target: SlimTarget; bytes: number; item: T }>,
  maxItems = Infinity,
  maxBytes = Infinity,
): NodeBatch<T>[] {
  const out: NodeBatch<T>[] = []
  const open = new Map<NodeId, { batch: NodeBatch<T>; bytes: number }>()
  for (const a of assigned) {
    let cur = open.get(a.target.nodeId)
    if (cur && (cur.batch.items.length >= maxItems || (cur.batch.items.length > 0 && cur.bytes + a.bytes > maxBytes))) cur = undefined
    if (!cur) {
      cur = { batch: { nodeId: a.target.nodeId, address: a.target.address, items: [] }, bytes: 0 }
      open.set(a.target.nodeId, cur)
      out.push(cur.batch)
    }
    cur.batch.items.push(a.item)
    cur.bytes += a.bytes
  }
  return out
}
