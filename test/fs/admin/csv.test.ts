import test from 'ava'
import {
  CHAIN_TABLE_CSV_TEMPLATE,
  CHAINS_CSV_TEMPLATE,
  formatChainTableCsv,
  formatChainsCsv,
  parseChainTableCsv,
  parseChainTableCsvLines,
  parseChainsCsv,
  validateChainTable,
  validateChains,
  type KnownTopology,
} from '../../../fs/admin/index.js'
import { isStrataError } from '../../../fs/common/errors.js'

function refused(t: any, fn: () => unknown, re: RegExp) {
  const e = t.throws(fn)
  t.true(isStrataError(e, 'INVALID_ARGUMENT'), String(e))
  t.regex(e.message, re)
}

test('chains CSV: header, rows, head-first order, whitespace and CRLF tolerated', (t) => {
  const rows = parseChainsCsv('ChainId,TargetId,TargetId,TargetId\r\n 1 , 101,201,301\r\n\r\n2,202,302,102\n')
  t.deepEqual(rows, [
    { chainId: 1, targets: [101, 201, 301], line: 2 },
    { chainId: 2, targets: [202, 302, 102], line: 4 },
  ])
  t.deepEqual(parseChainsCsv(CHAINS_CSV_TEMPLATE).map((r) => r.chainId), [123, 234])
  t.deepEqual(parseChainsCsv(formatChainsCsv(rows)).map(({ chainId, targets }) => ({ chainId, targets })), rows.map(({ chainId, targets }) => ({ chainId, targets })))
})

test('chains CSV: malformed files are refused with the line', (t) => {
  refused(t, () => parseChainsCsv(''), /empty/)
  refused(t, () => parseChainsCsv('Chain,TargetId\n1,2\n'), /column\[0\] expected 'ChainId'/)
  refused(t, () => parseChainsCsv('ChainId\n1\n'), /no TargetId columns/)
  refused(t, () => parseChainsCsv('ChainId,TargetId,Target\n1,2,3\n'), /column\[2\] expected 'TargetId', got 'Target'/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n'), /no chains/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n1,2,3\n'), /line 2: expected 2 columns, got 3/)
  refused(t, () => parseChainsCsv('ChainId,TargetId,TargetId\n1,2\n'), /line 2: expected 3 columns, got 2/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n1,abc\n'), /line 2: TargetId "abc" is not a number/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n1,-5\n'), /not a number/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n1,0\n'), /must be positive/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n4294967296,1\n'), /out of range/)
  refused(t, () => parseChainsCsv('ChainId,TargetId\n1,2\n1,3\n'), /line 3: duplicate chain 1 \(also on line 2\)/)
  refused(t, () => parseChainsCsv('ChainId,TargetId,TargetId\n1,2,3\n5,6,2\n'), /line 3: duplicate target 2 \(also on line 2\)/)
  refused(t, () => parseChainsCsv('ChainId,TargetId,TargetId\n1,2,2\n'), /line 2: duplicate target 2/)
  refused(t, () => parseChainsCsv('x', 'my.csv'), /^INVALID_ARGUMENT: invalid my\.csv:/)
})

test('chain table CSV', (t) => {
  t.deepEqual(parseChainTableCsv('ChainId\n3\n1\n2\n'), [3, 1, 2])
  t.deepEqual(parseChainTableCsv(CHAIN_TABLE_CSV_TEMPLATE), [123, 234])
  t.deepEqual(parseChainTableCsv(formatChainTableCsv([7, 8])), [7, 8])
  refused(t, () => parseChainTableCsv('ChainId,TargetId\n1,2\n'), /single column 'ChainId'/)
  refused(t, () => parseChainTableCsv('Chain\n1\n'), /single column 'ChainId'/)
  refused(t, () => parseChainTableCsv('ChainId\n'), /no chains/)
  refused(t, () => parseChainTableCsv('ChainId\n1\n1\n'), /duplicate chain 1/)
  refused(t, () => parseChainTableCsv('ChainId\nx\n'), /not a number/)
  refused(t, () => parseChainTableCsv('ChainId\n1,2\n'), /expected 1 column/)
})

test('chains are validated against the cluster: unknown targets, targets of other chains, changed chains', (t) => {
  const known: KnownTopology = {
    targets: new Map([
      [101, { chainId: 1 }],
      [201, { chainId: 1 }],
      [102, { chainId: 0 }],
      [202, { chainId: 0 }],
    ]),
    chains: new Map([[1, [101, 201]]]),
  }
  t.notThrows(() => validateChains(parseChainsCsv('ChainId,TargetId,TargetId\n2,102,202\n'), known))
  t.notThrows(() => validateChains(parseChainsCsv('ChainId,TargetId,TargetId\n1,201,101\n'), known), 're-upload of an existing chain with the same targets')
  refused(t, () => validateChains(parseChainsCsv('ChainId,TargetId,TargetId\n2,102,999\n'), known), /line 2: unknown target 999/)
  refused(t, () => validateChains(parseChainsCsv('ChainId,TargetId,TargetId\n2,102,101\n'), known), /target 101 already belongs to chain 1/)
  refused(t, () => validateChains(parseChainsCsv('ChainId,TargetId,TargetId\n1,101,102\n'), known), /chain 1 already exists with targets 101,201/)
  t.notThrows(() => validateChainTable([1], new Set([1, 2])))
  refused(t, () => validateChainTable([1, 3], new Set([1, 2])), /unknown chain 3/)
})

test('header errors and upload-chain-table unknown chains carry the documented line L: prefix', (t) => {
  refused(t, () => parseChainsCsv('ChainId,Target,TargetId\n5,1,2\n', 'badhdr.csv'), /^INVALID_ARGUMENT: invalid badhdr\.csv: line 1: column\[1\] expected 'TargetId', got 'Target'/)
  refused(t, () => parseChainsCsv('Chain,TargetId\n5,1\n', 'h.csv'), /^INVALID_ARGUMENT: invalid h\.csv: line 1: column\[0\] expected 'ChainId'/)
  refused(t, () => parseChainsCsv('ChainId\n5\n', 'h.csv'), /^INVALID_ARGUMENT: invalid h\.csv: line 1: no TargetId columns/)
  refused(t, () => parseChainTableCsv('ChainId,X\n5\n', 't.csv'), /^INVALID_ARGUMENT: invalid t\.csv: line 1: expected the single column 'ChainId'/)
  // line numbers survive blank lines before the row
  const { ids, lines } = parseChainTableCsvLines('ChainId\n1\n\n777\n', 't.csv')
  t.deepEqual(ids, [1, 777])
  refused(t, () => validateChainTable(ids, new Set([1]), 't.csv', lines), /^INVALID_ARGUMENT: invalid t\.csv: line 4: unknown chain 777/)
})
