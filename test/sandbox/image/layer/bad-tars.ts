// Bad layer tars shared by the unpack and the tar→EROFS tests: each must fail
// with its code, the same code on both paths.
import crypto from 'node:crypto'
import type { UnpackMode } from '../../../../sandbox/image/layer/index.js'
import { dir, file, hardlink, packTar, symlink, type PackEntry } from './helpers.js'

export interface BadCase {
  name: string
  code: string
  mode?: UnpackMode
  /** Lower layer for apply mode. */
  lower?: (outside: string) => PackEntry[]
  tar: (outside: string) => Promise<Buffer> | Buffer
  /** what the error message must say, where a case checks it */
  message?: RegExp
}

function tarOf(f: (outside: string) => PackEntry[]): (outside: string) => Promise<Buffer> {
  return (o) => packTar(f(o))
}

function withHeader(buf: Buffer, at: number, patch: (h: Buffer) => void): Buffer {
  const out = Buffer.from(buf)
  const h = out.subarray(at, at + 512)
  patch(h)
  h.fill(0x20, 148, 156)
  let sum = 0
  for (const x of h) sum += x
  h.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'latin1')
  return out
}


export const badCases: BadCase[] = [
  { name: '../x', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('../x', 'escaped')]) },
  { name: 'a/../../x', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('a/ok'), file('a/../../x', 'escaped')]) },
  { name: '/../x (absolute)', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('/../x', 'escaped')]) },
  { name: '/abs (absolute)', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('/abs', 'stored as abs before')]) },
  { name: 'a directory then an absolute name under it', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [dir('etc'), file('/etc/passwd', 'pwned')]) },
  { name: 'hard link to an absolute name', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('f'), hardlink('h', '/f')]) },
  { name: './../../x', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('./../../x', 'escaped')]) },
  { name: 'symlink a -> /etc then a/passwd', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [symlink('a', '/etc'), file('a/passwd', 'pwned')]) },
  { name: 'symlink to outside then a file under it', code: 'IMAGE_UNSAFE_PATH', tar: tarOf((o) => [symlink('a', o), file('a/keep', 'pwned')]) },
  { name: 'symlink to outside then a directory under it', code: 'IMAGE_UNSAFE_PATH', tar: tarOf((o) => [symlink('a', o), dir('a/sub')]) },
  { name: 'symlink .. chain', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [symlink('l', '..'), symlink('l/l', '..'), file('l/l/x', 'escaped')]) },
  { name: 'symlink ../.. inside a directory', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [dir('d'), symlink('d/up', '../..'), file('d/up/x', 'escaped')]) },
  { name: 'whiteout through a symlink', code: 'IMAGE_UNSAFE_PATH', tar: tarOf((o) => [symlink('a', o), file('a/.wh.keep')]) },
  { name: 'hard link to ../x', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [hardlink('h', '../x')]) },
  { name: 'hard link through a symlink', code: 'IMAGE_UNSAFE_PATH', mode: 'apply', tar: tarOf((o) => [symlink('s', o), hardlink('h', 's/keep')]) },
  // the target is a file of the layer reached through a symlink of the layer: unsafe, and no --squash hint
  {
    name: 'hard link to a file of the layer through a symlink of the layer',
    code: 'IMAGE_UNSAFE_PATH',
    message: /^IMAGE_UNSAFE_PATH: "h2": hard link target "lnk\/h" is under the symlink "lnk"; [^]*$(?<!--squash.*)/,
    tar: tarOf(() => [symlink('lnk', 'etc'), dir('etc'), file('etc/h', 'h'), hardlink('h2', 'lnk/h')]),
  },
  {
    name: 'hard link through a lower layer\'s symlink (squash)',
    code: 'IMAGE_UNSAFE_PATH',
    mode: 'apply',
    message: /"h2": hard link target "lnk\/h" is under the symlink "lnk"/,
    lower: () => [symlink('lnk', 'etc'), dir('etc'), file('etc/h', 'h')],
    tar: tarOf(() => [hardlink('h2', 'lnk/h')]),
  },
  { name: 'hard link to a later entry', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [hardlink('h', 'f'), file('f')]) },
  { name: 'hard link to a directory', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [dir('d'), hardlink('h', 'd')]) },
  { name: 'hard link to a lower file in layer mode', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [hardlink('h', 'etc/passwd')]) },
  { name: 'the same file twice', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('f', '1'), file('./f', '2')]) },
  { name: 'a file and a directory at one path', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('f'), dir('f')]) },
  { name: 'a file under a file of the layer', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('f'), file('f/g')]) },
  { name: 'two whiteouts of one path', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('.wh.f'), file('./.wh.f')]) },
  { name: 'two whiteouts of one path (apply)', code: 'IMAGE_DUPLICATE_ENTRY', mode: 'apply', tar: tarOf(() => [file('.wh.f'), file('f'), file('./.wh.f')]) },
  { name: 'an opaque marker under a file that replaced its whiteout', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('.wh.f'), file('f'), file('f/.wh..wh..opq')]) },
  { name: 'two opaque markers', code: 'IMAGE_DUPLICATE_ENTRY', tar: tarOf(() => [file('d/.wh..wh..opq'), file('d/.wh..wh..opq')]) },
  { name: 'whiteout of ..', code: 'IMAGE_UNSAFE_PATH', tar: tarOf(() => [file('d/.wh...')]) },
  { name: 'entry under a whiteout name', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [file('.wh.a/b')]) },
  { name: 'root entry that is a file', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [file('./')]) },
  {
    name: 'truncated inside file data',
    code: 'IMAGE_BAD_ARCHIVE',
    tar: async () => (await packTar([file('a', 'x'.repeat(5000)), file('b', 'y'.repeat(5000))])).subarray(0, 512 + 3000),
  },
  {
    name: 'truncated at an entry boundary (no end-of-archive block)',
    code: 'IMAGE_BAD_ARCHIVE',
    tar: async () => (await packTar([file('a', 'x'.repeat(512))])).subarray(0, 1024),
  },
  { name: 'empty stream', code: 'IMAGE_BAD_ARCHIVE', tar: () => Buffer.alloc(0) },
  { name: 'garbage header', code: 'IMAGE_BAD_ARCHIVE', tar: () => crypto.randomBytes(4096) },
  {
    name: 'good entry then a garbage header',
    code: 'IMAGE_BAD_ARCHIVE',
    tar: async () => {
      const good = await packTar([file('ok', 'fine')])
      return Buffer.concat([good.subarray(0, 1024), crypto.randomBytes(512), Buffer.alloc(1024)])
    },
  },
  { name: 'oversized PAX header', code: 'IMAGE_BAD_ARCHIVE', tar: tarOf(() => [file('f', 'x', { pax: { comment: 'c'.repeat(5 << 20) } })]) },
  {
    name: 'typeflag S in a ustar header (old GNU sparse entries have GNU magic)',
    code: 'IMAGE_BAD_ARCHIVE',
    tar: async () => withHeader(await packTar([file('f', 'x')]), 0, (h) => h.write('S', 156, 'latin1')),
  },
  {
    name: 'negative size',
    code: 'IMAGE_BAD_ARCHIVE',
    tar: async () =>
      withHeader(await packTar([file('f', '')]), 0, (h) => {
        h.fill(0xff, 124, 136)
        h[135] = 0xfe // base-256 -1
      }),
  },
  {
    name: 'apply: whiteout through a lower symlink',
    code: 'IMAGE_UNSAFE_PATH',
    mode: 'apply',
    lower: (o) => [symlink('lib', o)],
    tar: tarOf(() => [file('lib/.wh.keep')]),
  },
  {
    name: 'apply: file under a lower symlink',
    code: 'IMAGE_UNSAFE_PATH',
    mode: 'apply',
    lower: (o) => [symlink('lib', o)],
    tar: tarOf(() => [file('lib/keep', 'pwned')]),
  },
  {
    name: 'apply: hard link to a file under a lower symlink',
    code: 'IMAGE_UNSAFE_PATH',
    mode: 'apply',
    lower: (o) => [symlink('lib', o)],
    tar: tarOf(() => [hardlink('h', 'lib/keep')]),
  },
]
