// Key helpers shared by every KV engine and by callers building ranges.
//
// Keys are compared as raw bytes (lexicographic, shorter prefix first), the
// order of FoundationDB and of lmdb's default comparator. Internally the
// engines carry keys as "latin1 strings" (one UTF-16 code unit per byte): the
// mapping is order-preserving, so JS string comparison, Set and Map give byte
// order and byte equality without copying into hex.

/** The smallest key strictly greater than `key`: `key + 0x00`. */
export function keyAfter(key: Buffer): Buffer {
  const out = Buffer.allocUnsafe(key.length + 1)
  key.copy(out, 0)
  out[key.length] = 0
  return out
}

/**
 * The end of the range of all keys starting with `prefix` (FDB's `strinc`):
 * strip trailing 0xff bytes and increment the last byte. `[prefix,
 * prefixEnd(prefix))` is then exactly the keys with that prefix. Throws for
 * an empty prefix or one made only of 0xff bytes (no finite end exists).
 */
export function prefixEnd(prefix: Buffer): Buffer {
  let n = prefix.length
  while (n > 0 && prefix[n - 1] === 0xff) n--
  if (n === 0) throw new RangeError('prefixEnd: prefix is empty or all 0xff')
  const out = Buffer.from(prefix.subarray(0, n))
  out[n - 1]! += 1
  return out
}

/** Byte-order comparison (Buffer.compare), exported for symmetry. */
export function compareKeys(a: Buffer, b: Buffer): number {
  return Buffer.compare(a, b)
}

/** @internal order-preserving string form of a key */
export function ks(key: Buffer): string {
  return key.toString('latin1')
}

/** @internal inverse of ks */
export function kb(s: string): Buffer {
  return Buffer.from(s, 'latin1')
}

/** 10-byte FDB versionstamp: 8-byte commit version BE + 2-byte order within the commit BE. */
export function makeVersionstamp(commitVersion: number, index: number): Buffer {
  const b = Buffer.allocUnsafe(10)
  writeU64(b, 0, commitVersion)
  b.writeUInt16BE(index, 8)
  return b
}

/** Splits a versionstamp into its commit version and index. */
export function parseVersionstamp(stamp: Buffer): { commitVersion: bigint; index: number } {
  if (stamp.length !== 10) throw new RangeError('a versionstamp has 10 bytes')
  return { commitVersion: stamp.readBigUInt64BE(0), index: stamp.readUInt16BE(8) }
}

/** @internal writes a non-negative safe integer as u64 BE */
export function writeU64(b: Buffer, off: number, v: number): void {
  b.writeUInt32BE(Math.floor(v / 0x100000000), off)
  b.writeUInt32BE(v >>> 0, off + 4)
}

/** @internal reads a u64 BE that is known to be a safe integer */
export function readU64(b: Buffer, off: number): number {
  return b.readUInt32BE(off) * 0x100000000 + b.readUInt32BE(off + 4)
}

/** @internal u64 BE key for a version */
export function u64Key(v: number): Buffer {
  const b = Buffer.allocUnsafe(8)
  writeU64(b, 0, v)
  return b
}
