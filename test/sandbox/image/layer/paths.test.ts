import test from 'ava'
import { classifyWhiteout, normalizeEntryPath } from '../../../../sandbox/image/layer/paths.js'

test('entry names become relative paths; .. may not climb out of the root; absolute names are refused', (t) => {
  const ok: [string, string][] = [
    ['a/b', 'a/b'],
    ['./a/b/', 'a/b'],
    ['a//b/./c', 'a/b/c'],
    ['.', ''],
    ['./', ''],
    ['a/../b', 'b'],
    ['a/b/../../c', 'c'],
    ['a/..', ''],
  ]
  for (const [name, want] of ok) t.is(normalizeEntryPath(name), want, name)
  for (const name of ['..', '../x', 'a/../../x', '/../x', './../x', 'a/b/../../../x', '/abs', '/', '//a', '/a//b/./c']) {
    t.throws(() => normalizeEntryPath(name), { code: 'IMAGE_UNSAFE_PATH' }, name)
  }
  t.throws(() => normalizeEntryPath('a\0b'), { code: 'IMAGE_BAD_ARCHIVE' })
  t.throws(() => normalizeEntryPath('bad\uFFFDname'), { code: 'IMAGE_BAD_ARCHIVE' })
})

test('whiteout names', (t) => {
  t.deepEqual(classifyWhiteout('a/b'), { kind: 'none' })
  t.deepEqual(classifyWhiteout('a/.wh.b'), { kind: 'whiteout', target: 'a/b' })
  t.deepEqual(classifyWhiteout('.wh.b'), { kind: 'whiteout', target: 'b' })
  t.deepEqual(classifyWhiteout('a/.wh..wh..opq'), { kind: 'opaque', dir: 'a' })
  t.deepEqual(classifyWhiteout('.wh..wh..opq'), { kind: 'opaque', dir: '' })
  t.deepEqual(classifyWhiteout('.wh..wh.plnk/1'), { kind: 'aufs-meta' })
  t.deepEqual(classifyWhiteout('a/.wh..wh.aufs'), { kind: 'aufs-meta' })
  t.throws(() => classifyWhiteout('a/.wh.'), { code: 'IMAGE_UNSAFE_PATH' })
  t.throws(() => classifyWhiteout('a/.wh...'), { code: 'IMAGE_UNSAFE_PATH' })
  t.throws(() => classifyWhiteout('.wh.a/b'), { code: 'IMAGE_BAD_ARCHIVE' })
})
