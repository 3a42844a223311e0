import test from 'ava'
import os from 'node:os'
import path from 'node:path'
import { formatSize, formatTable, parseSignal, parseSize, parseUint, resolveClusterDir, timeOf, ymdHMS } from '../../../fs/admin/index.js'
import { isStrataError } from '../../../fs/common/errors.js'

test('sizes with binary suffixes', (t) => {
  t.is(parseSize('65536'), 65536)
  t.is(parseSize('64K'), 65536)
  t.is(parseSize('64k'), 65536)
  t.is(parseSize('64KiB'), 65536)
  t.is(parseSize('1M'), 1 << 20)
  t.is(parseSize('1MB'), 1 << 20)
  t.is(parseSize('1MiB'), 1 << 20)
  t.is(parseSize('2G'), 2 * 1024 ** 3)
  t.is(parseSize(' 512 '), 512)
  for (const bad of ['', 'abc', '1X', '-1', '1.5M', 'M']) t.true(isStrataError(t.throws(() => parseSize(bad)), 'INVALID_ARGUMENT'), bad)
  t.is(formatSize(65536), '64K')
  t.is(formatSize(1 << 20), '1M')
  t.is(formatSize(1000), '1000')
  t.is(parseUint('42', 'x'), 42)
  t.throws(() => parseUint('4x', 'x'))
  t.throws(() => parseUint('0', 'x', { min: 1 }))
})

test('the cluster directory: explicit, then $STRATA_CLUSTER, then ~/.strata/cluster', (t) => {
  t.is(resolveClusterDir('/a/b', { STRATA_CLUSTER: '/c' }), '/a/b')
  t.is(resolveClusterDir('rel', {}), path.resolve('rel'))
  t.is(resolveClusterDir(undefined, { STRATA_CLUSTER: '/c/d' }), '/c/d')
  t.is(resolveClusterDir(null, { STRATA_CLUSTER: '' }), path.join(os.homedir(), '.strata', 'cluster'))
  t.is(resolveClusterDir(undefined, {}), path.join(os.homedir(), '.strata', 'cluster'))
})

test('3FS table printer: columns two spaces wider than their widest cell, last column unpadded', (t) => {
  t.is(formatTable([['Id', 'Type'], ['10001', 'STORAGE'], ['1', 'MGMTD']]), 'Id     Type\n10001  STORAGE\n1      MGMTD\n')
  t.is(formatTable([['Succeed'], ['ConfigVersion', '3']]), 'Succeed\nConfigVersion  3\n')
  t.is(ymdHMS(0), 'N/A')
  // an inode's times are always set: 0 is the epoch (touch -d @0), before it is before it
  t.is(timeOf(0), '1970-01-01 00:00:00')
  t.is(timeOf(-315619200000), '1960-01-01 00:00:00')
  t.is(ymdHMS(Date.UTC(2025, 0, 2, 3, 4, 5)), '2025-01-02 03:04:05')
})

test('signals', (t) => {
  t.is(parseSignal('KILL'), 'SIGKILL')
  t.is(parseSignal('sigterm'), 'SIGTERM')
  t.is(parseSignal('9'), 'SIGKILL')
  t.is(parseSignal('STOP'), 'SIGSTOP')
  t.throws(() => parseSignal('BOGUS'))
})
