import test from 'ava'
import { LOCAL_STATES, PUBLIC_STATES, type LocalTargetState, type PublicTargetState } from '../../../fs/common/types.js'
import {
  PUBLIC_STATE_ORDER,
  chainChanged,
  chainRole,
  computeChainUpdate,
  generateNewChain,
  nextLocalState,
  rotateAsPreferredOrder,
  rotateLastSrv,
  shouldResetUncommitted,
  shutdownChain,
  type ChainTargetState,
} from '../../../fs/mgmtd/chain-state.js'

type T = ChainTargetState
const rank = (ps: PublicTargetState): number => PUBLIC_STATE_ORDER.indexOf(ps)
const alive = (ls: LocalTargetState): boolean => ls !== 'OFFLINE'

const PS_SHORT: Record<string, PublicTargetState> = { S: 'SERVING', L: 'LASTSRV', Y: 'SYNCING', W: 'WAITING', O: 'OFFLINE' }
const LS_SHORT: Record<string, LocalTargetState> = { U: 'UPTODATE', N: 'ONLINE', O: 'OFFLINE' }

/** "1:S/U 2:O/N" -> chain; "1:S 2:O" (public only) for expectations. */
function chain(spec: string): T[] {
  return spec.split(/\s+/).map((tok) => {
    const m = /^(\d+):([SLYWO])\/([UNO])$/.exec(tok)
    if (!m) throw new Error(`bad token ${tok}`)
    return { targetId: Number(m[1]), publicState: PS_SHORT[m[2]!]!, localState: LS_SHORT[m[3]!]! }
  })
}
function show(c: readonly Pick<T, 'targetId' | 'publicState'>[]): string {
  const back = Object.fromEntries(Object.entries(PS_SHORT).map(([k, v]) => [v, k]))
  return c.map((t) => `${t.targetId}:${back[t.publicState]}`).join(' ')
}

const ALL_PAIRS: [PublicTargetState, LocalTargetState][] = PUBLIC_STATES.flatMap((ps) => LOCAL_STATES.map((ls) => [ps, ls] as [PublicTargetState, LocalTargetState]))

function* allChains(n: number): Generator<T[]> {
  const idx = new Array<number>(n).fill(0)
  for (;;) {
    yield idx.map((k, i) => ({ targetId: i + 1, publicState: ALL_PAIRS[k]![0], localState: ALL_PAIRS[k]![1] }))
    let i = n - 1
    while (i >= 0 && ++idx[i]! === ALL_PAIRS.length) idx[i--] = 0
    if (i < 0) return
  }
}

/** The shape mgmtd maintains (3FS's validatePs): what a stored chain can look like. */
function isWellFormed(c: readonly T[]): boolean {
  const count = (ps: PublicTargetState): number => c.filter((t) => t.publicState === ps).length
  if (count('SERVING') && count('LASTSRV')) return false
  if (count('SYNCING') && count('LASTSRV')) return false
  if (count('SYNCING') > 1 || count('LASTSRV') > 1) return false
  if (!count('SERVING') && count('SYNCING')) return false
  for (let i = 1; i < c.length; i++) if (rank(c[i - 1]!.publicState) > rank(c[i]!.publicState)) return false
  return true
}

/**
 * Independent restatement of 3FS's rules: decide targets one by one in
 * (old state group, chain position) order, keeping running counts, then
 * stable-sort by new state. Also reports which targets went through LASTSRV
 * and were demoted, because those trail the OFFLINE group.
 */
function referenceNewChain(old: readonly T[]): { out: T[]; demoted: Set<number> } {
  const visit = old.map((t, i) => ({ t, i })).sort((a, b) => rank(a.t.publicState) - rank(b.t.publicState) || a.i - b.i)
  let serving = 0
  let syncing = 0
  let lastsrv = 0
  const decided: { t: T; ps: PublicTargetState; seq: number }[] = []
  for (const { t } of visit) {
    let ps: PublicTargetState
    const ls = t.localState
    if (t.publicState === 'SERVING') ps = alive(ls) ? 'SERVING' : lastsrv === 0 ? 'LASTSRV' : 'OFFLINE'
    else if (t.publicState === 'LASTSRV') ps = serving > 0 ? 'OFFLINE' : alive(ls) ? 'SERVING' : 'LASTSRV'
    else if (t.publicState === 'SYNCING') ps = ls === 'UPTODATE' ? 'SERVING' : ls === 'ONLINE' ? (serving > 0 ? 'SYNCING' : 'WAITING') : 'OFFLINE'
    else ps = serving > 0 && syncing === 0 && ls === 'ONLINE' ? 'SYNCING' : alive(ls) ? 'WAITING' : 'OFFLINE'
    if (ps === 'SERVING') serving++
    if (ps === 'SYNCING') syncing++
    if (ps === 'LASTSRV') lastsrv++
    decided.push({ t, ps, seq: decided.length })
  }
  const demoted = new Set<number>()
  if (serving > 0) {
    for (const d of decided) {
      if (d.ps === 'LASTSRV') {
        d.ps = 'OFFLINE'
        d.seq += 1e6
        demoted.add(d.t.targetId)
      }
    }
  }
  decided.sort((a, b) => rank(a.ps) - rank(b.ps) || a.seq - b.seq)
  return { out: decided.map((d) => ({ ...d.t, publicState: d.ps })), demoted }
}

// 3FS's table of legal single-target transitions (TestUpdateChain.cc), valid for well-formed chains.
const LEGAL: Record<PublicTargetState, Record<LocalTargetState, PublicTargetState[]>> = {
  OFFLINE: { OFFLINE: ['OFFLINE'], ONLINE: ['WAITING', 'SYNCING'], UPTODATE: ['WAITING'] },
  WAITING: { OFFLINE: ['OFFLINE'], ONLINE: ['WAITING', 'SYNCING'], UPTODATE: ['WAITING'] },
  SYNCING: { OFFLINE: ['OFFLINE'], ONLINE: ['SYNCING', 'WAITING'], UPTODATE: ['SERVING'] },
  LASTSRV: { OFFLINE: ['OFFLINE', 'LASTSRV'], ONLINE: ['SERVING'], UPTODATE: ['SERVING'] },
  SERVING: { OFFLINE: ['OFFLINE', 'LASTSRV'], ONLINE: ['SERVING'], UPTODATE: ['SERVING'] },
}

function fixpoint(c: T[], maxPasses: number): { result: T[]; passes: number } {
  let cur = c
  for (let p = 1; p <= maxPasses; p++) {
    const next = generateNewChain(cur)
    if (!chainChanged(cur, next)) return { result: cur, passes: p - 1 }
    cur = next
  }
  return { result: cur, passes: Infinity }
}

for (const n of [1, 2, 3]) {
  test(`exhaustive ${n}-target chains: invariants over all ${ALL_PAIRS.length ** n} (public x local) combinations`, (t) => {
    let checked = 0
    let wellFormed = 0
    let maxPasses = 0
    for (const old of allChains(n)) {
      const label = show(old) + ' ' + old.map((x) => x.localState).join(',')
      const out = generateNewChain(old)
      const ref = referenceNewChain(old)

      // exactly the reference rules
      t.deepEqual(out, ref.out, label)

      // same targets, local states untouched, input not mutated
      t.deepEqual(out.map((x) => x.targetId).sort(), old.map((x) => x.targetId).sort(), label)
      for (const x of out) t.is(x.localState, old.find((o) => o.targetId === x.targetId)!.localState, label)

      // group order SERVING, LASTSRV, SYNCING, WAITING, OFFLINE; head is the first SERVING
      for (let i = 1; i < out.length; i++) t.true(rank(out[i - 1]!.publicState) <= rank(out[i]!.publicState), label)
      const anyServing = out.some((x) => x.publicState === 'SERVING')
      t.is(out[0]!.publicState === 'SERVING', anyServing, label)

      // never SERVING and LASTSRV together; SYNCING only behind a SERVING
      t.false(anyServing && out.some((x) => x.publicState === 'LASTSRV'), label)
      if (out.some((x) => x.publicState === 'SYNCING')) t.true(anyServing, label)

      // one recovery at a time: no new SYNCING is started while one exists
      const oldSyncing = old.filter((x) => x.publicState === 'SYNCING').length
      const newSyncing = out.filter((x) => x.publicState === 'SYNCING').length
      t.true(newSyncing <= Math.max(1, oldSyncing), label)
      if (oldSyncing <= 1) t.true(newSyncing <= 1, label)

      // a public state that says "alive" needs a live local state
      for (const x of out) if (['SERVING', 'SYNCING', 'WAITING'].includes(x.publicState)) t.true(alive(x.localState), label)

      // stable within a group: targets sharing their old state keep chain order,
      // except those demoted from LASTSRV, which trail the OFFLINE group
      for (const ps of PUBLIC_STATE_ORDER) {
        const group = out.filter((x) => x.publicState === ps)
        const regular = group.filter((x) => !ref.demoted.has(x.targetId))
        const demoted = group.filter((x) => ref.demoted.has(x.targetId))
        t.deepEqual(group, [...regular, ...demoted], label)
        for (const part of [regular, demoted]) {
          for (const oldPs of PUBLIC_STATE_ORDER) {
            const pos = part.filter((x) => old.find((o) => o.targetId === x.targetId)!.publicState === oldPs).map((x) => old.findIndex((o) => o.targetId === x.targetId))
            t.deepEqual(pos, [...pos].sort((a, b) => a - b), label)
          }
        }
      }

      // version bump iff the stored chain changes
      const upd = computeChainUpdate(old, 7)
      t.deepEqual(upd.targets, out, label)
      const same = out.every((x, i) => x.targetId === old[i]!.targetId && x.publicState === old[i]!.publicState)
      t.is(upd.changed, !same, label)
      t.is(upd.chainVersion, same ? 7 : 8, label)

      // repeated passes settle quickly, even from chains mgmtd would never store
      const fp = fixpoint(old, 6)
      t.true(fp.passes <= 2, label)
      maxPasses = Math.max(maxPasses, fp.passes)

      if (isWellFormed(old)) {
        wellFormed++
        // idempotent on the chains mgmtd can actually hold
        t.deepEqual(generateNewChain(out), out, label)
        t.true(isWellFormed(out), label)
        for (const o of old) t.true(LEGAL[o.publicState][o.localState].includes(out.find((x) => x.targetId === o.targetId)!.publicState), label)
        // SERVING targets keep their relative order
        const servingIds = out.filter((x) => x.publicState === 'SERVING').map((x) => x.targetId)
        t.deepEqual(servingIds, old.filter((o) => servingIds.includes(o.targetId)).map((o) => o.targetId), label)
        // some replica keeps serving across the change, if one served before and after
        if (old.some((o) => o.publicState === 'SERVING') && anyServing) {
          t.true(out.some((x) => x.publicState === 'SERVING' && ['SERVING', 'SYNCING'].includes(old.find((o) => o.targetId === x.targetId)!.publicState)), label)
        }
        // with nobody left serving, the first old SERVING is the LASTSRV and the rest go OFFLINE
        if (!anyServing) {
          const oldServing = old.filter((o) => o.publicState === 'SERVING')
          oldServing.forEach((o, i) => t.is(out.find((x) => x.targetId === o.targetId)!.publicState, i === 0 ? 'LASTSRV' : 'OFFLINE', label))
        }
      }
      checked++
    }
    t.is(checked, ALL_PAIRS.length ** n)
    t.true(wellFormed > 0)
    t.log(`${checked} chains, ${wellFormed} well-formed, at most ${maxPasses} passes to settle`)
  })
}

test('input is not mutated and extra fields are carried over', (t) => {
  const old = chain('1:S/O 2:S/U').map((x) => ({ ...x, nodeId: x.targetId * 10 }))
  const snapshot = JSON.stringify(old)
  const out = generateNewChain(old)
  t.is(JSON.stringify(old), snapshot)
  t.deepEqual(out, [
    { targetId: 2, publicState: 'SERVING', localState: 'UPTODATE', nodeId: 20 },
    { targetId: 1, publicState: 'OFFLINE', localState: 'OFFLINE', nodeId: 10 },
  ])
})

// [old chain with local states, expected new chain (public states), why]
const HAND_CHECKED: [string, string, string][] = [
  ['1:S/U 2:S/U 3:S/U', '1:S 2:S 3:S', 'healthy chain is left alone'],
  ['1:S/N 2:S/U', '1:S 2:S', 'ONLINE counts as alive for SERVING'],
  ['1:S/U 2:S/U 3:S/O', '1:S 2:S 3:O', 'tail dies: briefly LASTSRV, demoted because others serve'],
  ['1:S/O 2:S/U 3:S/U', '2:S 3:S 1:O', 'head dies: moves to the tail, next SERVING becomes head'],
  ['1:S/U 2:S/O 3:S/O', '1:S 3:O 2:O', 'two die: the first failed one went via LASTSRV and trails the OFFLINE group'],
  ['1:S/O 2:S/O 3:S/O', '1:L 2:O 3:O', 'all die: the first SERVING is the last server'],
  ['1:S/O', '1:L', 'single replica dies'],
  ['1:L/O', '1:L', 'last server stays LASTSRV while down'],
  ['1:L/N', '1:S', 'last server comes back'],
  ['1:L/N 2:O/N 3:O/N', '1:S 2:Y 3:W', 'last server back: it serves, one other starts syncing, the rest wait'],
  ['1:L/O 2:O/N 3:O/O', '1:L 2:W 3:O', 'a non-last server returning first has to wait'],
  ['1:L/O 2:O/U', '1:L 2:W', 'UPTODATE without a SERVING peer still waits'],
  ['1:S/U 2:S/U 3:O/N', '1:S 2:S 3:Y', 'restarted target starts syncing'],
  ['1:S/U 2:O/N 3:O/N', '1:S 2:Y 3:W', 'only one SYNCING per chain'],
  ['1:S/U 2:Y/N 3:W/N', '1:S 2:Y 3:W', 'sync in progress: waiting one keeps waiting'],
  ['1:S/U 2:Y/U 3:W/N', '1:S 2:S 3:Y', 'sync done: promoted, and the next one starts syncing in the same pass'],
  ['1:S/U 2:Y/O 3:W/N', '1:S 3:Y 2:O', 'syncing target dies: the waiting one takes its turn'],
  ['1:S/O 2:Y/N', '1:L 2:W', 'sync source dies: the syncing target cannot become SERVING'],
  ['1:S/U 2:W/U', '1:S 2:W', 'WAITING + UPTODATE is not synced (storage goes OFFLINE and comes back ONLINE)'],
  ['1:S/U 2:O/U', '1:S 2:W', 'OFFLINE + UPTODATE waits'],
  ['1:S/U 2:W/O', '1:S 2:O', 'waiting target dies'],
  ['1:O/O 2:O/O', '1:O 2:O', 'dead chain stays dead'],
  ['1:O/N 2:O/N', '1:W 2:W', 'nobody to sync from'],
  ['1:S/U 2:O/N 3:W/N', '1:S 3:Y 2:W', 'old WAITING targets are considered before old OFFLINE ones'],
  ['1:Y/N 2:Y/U', '2:S 1:W', 'two SYNCING (not well-formed): decisions follow visiting order'],
  ['1:L/O 2:L/N', '2:S 1:O', 'two LASTSRV (not well-formed): a later one may serve; the first is demoted'],
]

for (const [from, to, why] of HAND_CHECKED) {
  test(`transition: ${from} -> ${to} (${why})`, (t) => {
    const old = chain(from)
    const out = generateNewChain(old)
    t.is(show(out), to)
    t.is(computeChainUpdate(old, 1).chainVersion, show(old) === to ? 1 : 2)
  })
}

test('not idempotent with two SYNCING: the second pass starts a sync it could not start in the first', (t) => {
  const once = generateNewChain(chain('1:Y/N 2:Y/U'))
  t.is(show(once), '2:S 1:W')
  const twice = generateNewChain(once)
  t.is(show(twice), '2:S 1:Y')
  t.is(show(generateNewChain(twice)), '2:S 1:Y')
})

test('not idempotent with LASTSRV next to SERVING: the demoted live target gets synced next pass', (t) => {
  const once = generateNewChain(chain('1:S/U 2:L/N'))
  t.is(show(once), '1:S 2:O')
  t.is(show(generateNewChain(once)), '1:S 2:Y')
})

test('chainChanged compares order, ids and public states only', (t) => {
  t.false(chainChanged(chain('1:S/U 2:S/U'), chain('1:S/N 2:S/O')))
  t.true(chainChanged(chain('1:S/U 2:S/U'), chain('2:S/U 1:S/U')))
  t.true(chainChanged(chain('1:S/U 2:S/U'), chain('1:S/U 2:O/U')))
  t.true(chainChanged(chain('1:S/U 2:S/U'), chain('1:S/U')))
  t.false(chainChanged([], []))
})

test('recovery walk: from all-down, random local states, then everyone comes back and syncs', (t) => {
  let seed = 12345
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31
    return seed % n
  }
  for (const n of [1, 2, 3]) {
    for (let round = 0; round < 100; round++) {
      let c: T[] = Array.from({ length: n }, (_, i) => ({ targetId: i + 1, publicState: 'SERVING', localState: 'OFFLINE' }))
      const steps: LocalTargetState[][] = []
      for (let j = 0; j < 100; j++) steps.push(Array.from({ length: n }, () => LOCAL_STATES[rand(3)]!))
      for (let j = 0; j < 5; j++) steps.push(new Array<LocalTargetState>(n).fill('ONLINE'), new Array<LocalTargetState>(n).fill('UPTODATE'))
      for (const ls of steps) {
        const withLocal = c.map((x) => ({ ...x, localState: ls[x.targetId - 1]! }))
        const next = generateNewChain(withLocal)
        t.true(isWellFormed(next))
        for (const o of withLocal) t.true(LEGAL[o.publicState][o.localState].includes(next.find((x) => x.targetId === o.targetId)!.publicState))
        c = next
      }
      t.true(c.every((x) => x.publicState === 'SERVING'), show(c))
    }
  }
})

test('nextLocalState: storage reaction to its public state', (t) => {
  const expected: Record<LocalTargetState, Record<PublicTargetState, LocalTargetState>> = {
    ONLINE: { SERVING: 'UPTODATE', SYNCING: 'ONLINE', WAITING: 'ONLINE', LASTSRV: 'ONLINE', OFFLINE: 'ONLINE' },
    UPTODATE: { SERVING: 'UPTODATE', SYNCING: 'UPTODATE', WAITING: 'OFFLINE', LASTSRV: 'OFFLINE', OFFLINE: 'OFFLINE' },
    OFFLINE: { SERVING: 'OFFLINE', SYNCING: 'OFFLINE', WAITING: 'OFFLINE', LASTSRV: 'OFFLINE', OFFLINE: 'OFFLINE' },
  }
  for (const ls of LOCAL_STATES) for (const ps of PUBLIC_STATES) t.is(nextLocalState(ls, ps), expected[ls][ps], `${ls} + ${ps}`)
})

test('shouldResetUncommitted: only a former LASTSRV that is back in the chain', (t) => {
  for (const prev of PUBLIC_STATES) {
    for (const next of PUBLIC_STATES) {
      t.is(shouldResetUncommitted(prev, next), prev === 'LASTSRV' && ['SERVING', 'SYNCING', 'WAITING'].includes(next), `${prev} -> ${next}`)
    }
  }
})

test('rotateLastSrv moves a dead LASTSRV head to the tail and promotes the next target to LASTSRV', (t) => {
  const out = rotateLastSrv(chain('1:L/O 2:O/N 3:W/N'))
  t.is(show(out), '2:L 3:O 1:O')
  t.deepEqual(out.map((x) => x.localState), ['ONLINE', 'ONLINE', 'OFFLINE'])
  // and the next updater pass lets the new LASTSRV serve if it is alive
  t.is(show(generateNewChain(out)), '2:S 3:Y 1:O')
  t.is(show(rotateLastSrv(chain('1:S/U 2:O/O'))), '1:S 2:O', 'head not LASTSRV: no-op')
  t.is(show(rotateLastSrv(chain('1:L/O'))), '1:L', 'single target: no-op')
  t.false(chainChanged(chain('1:S/U 2:O/O'), rotateLastSrv(chain('1:S/U 2:O/O'))))
})

test('shutdownChain: SERVING -> LASTSRV, SYNCING/WAITING -> OFFLINE, order kept', (t) => {
  t.is(show(shutdownChain(chain('1:S/U 2:S/U 3:Y/N 4:W/N 5:L/O 6:O/O'))), '1:L 2:L 3:O 4:O 5:L 6:O')
})

test('rotateAsPreferredOrder kicks the misplaced target to the tail as OFFLINE', (t) => {
  const all = chain('1:S/U 2:S/U 3:S/U')
  t.is(show(rotateAsPreferredOrder(all, [1, 2, 3])), '1:S 2:S 3:S')
  t.is(show(rotateAsPreferredOrder(all, [2, 1, 3])), '2:S 3:S 1:O')
  t.is(rotateAsPreferredOrder(all, [2, 1, 3]).at(-1)!.localState, 'OFFLINE')
  t.is(show(rotateAsPreferredOrder(all, [1, 3])), '1:S 3:S 2:O')
  t.is(show(rotateAsPreferredOrder(chain('1:S/U 2:W/N'), [2, 1])), '1:S 2:W', 'preferred target not SERVING: wait')
  const upd = computeChainUpdate(all, 5, [2, 1, 3])
  t.is(show(upd.targets), '2:S 3:S 1:O')
  t.is(upd.chainVersion, 6)
  const partial = computeChainUpdate(chain('1:S/U 2:S/U 3:O/O'), 5, [2, 1, 3])
  t.is(show(partial.targets), '1:S 2:S 3:O', 'no rotation unless the whole chain is SERVING')
  t.false(partial.changed)
})

test('chainRole: head, tail, and the immediate successor only if it is in the write path', (t) => {
  const c = chain('1:S/U 2:S/U 3:Y/N 4:W/N')
  t.deepEqual(chainRole(c, 1), { inWritePath: true, isHead: true, isTail: false, successor: 2, successorSyncing: false })
  t.deepEqual(chainRole(c, 2), { inWritePath: true, isHead: false, isTail: false, successor: 3, successorSyncing: true })
  t.deepEqual(chainRole(c, 3), { inWritePath: true, isHead: false, isTail: true, successorSyncing: false })
  t.deepEqual(chainRole(c, 4), { inWritePath: false, isHead: false, isTail: false, successorSyncing: false })
  t.is(chainRole(c, 9), undefined)
  t.deepEqual(chainRole(chain('1:S/U'), 1), { inWritePath: true, isHead: true, isTail: true, successorSyncing: false })
  t.deepEqual(chainRole(chain('1:L/O 2:O/O'), 1), { inWritePath: false, isHead: false, isTail: false, successorSyncing: false })
})
