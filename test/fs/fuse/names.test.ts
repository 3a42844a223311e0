// Names through the mount are UTF-8: a path, second path, symlink target or
// xattr name that is not valid UTF-8 is refused with EILSEQ by the addon
// (native/fuse/fuse-native.c, change 4) before it reaches JavaScript, where
// it used to be decoded lossily (b'c\xff' and b'c\xfe' both became
// "c\uFFFD", so the second create replaced the first file).
import test from 'ava'
import { fuseSkipReason, ok, py, startFuseCluster, PY_EXPECT_ERR } from './helpers.js'

const skip = fuseSkipReason()
const t = skip ? test.skip : test.serial
if (skip) console.log(`FUSE tests skipped: ${skip}`)

const SCRIPT = String.raw`
import errno, os, sys
os.chdir(sys.argv[1])
${PY_EXPECT_ERR}

def write(p, data):
    with open(p, 'wb') as f:
        f.write(data)

def read(p):
    with open(p, 'rb') as f:
        return f.read()

EILSEQ = errno.EILSEQ
os.mkdir(b'okdir')
write(b'ok', b'plain')

# the tester's repro: two Latin-1 names that used to collide
expect_err(EILSEQ, write, b'c\xff', b'first')
expect_err(EILSEQ, write, b'c\xfe', b'second')
# other malformed sequences: a lone continuation byte, an overlong '/', a
# surrogate, a code point past U+10FFFF, a truncated sequence
for bad in [b'x\x80', b'x\xc0\xaf', b'x\xed\xa0\x80', b'x\xf4\x90\x80\x80', b'x\xe4\xb8']:
    expect_err(EILSEQ, os.stat, bad)
    expect_err(EILSEQ, write, bad, b'data')
# every operation that takes a name
bad = b'bad\xff\xfename'
expect_err(EILSEQ, os.stat, bad)
expect_err(EILSEQ, os.lstat, bad)
expect_err(EILSEQ, os.open, bad, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
expect_err(EILSEQ, os.open, bad, os.O_RDONLY)
expect_err(EILSEQ, os.mknod, bad)
expect_err(EILSEQ, os.mkdir, bad)
expect_err(EILSEQ, os.mkdir, b'okdir/' + bad)
expect_err(EILSEQ, os.unlink, bad)
expect_err(EILSEQ, os.rmdir, bad)
expect_err(EILSEQ, os.rename, b'ok', bad)
expect_err(EILSEQ, os.rename, bad, b'ok2')
expect_err(EILSEQ, os.link, b'ok', bad)
expect_err(EILSEQ, os.link, bad, b'ok3')
expect_err(EILSEQ, os.symlink, b'ok', bad)
# a symlink TARGET that is not UTF-8: readlink would return another target
expect_err(EILSEQ, os.symlink, b'target\xff', b'sl')
expect_err(EILSEQ, os.readlink, bad)
expect_err(EILSEQ, os.chmod, bad, 0o600)
expect_err(EILSEQ, os.truncate, bad, 0)
expect_err(EILSEQ, os.listdir, bad)
# xattr names are checked; xattr values are bytes and reach the daemon as they are
expect_err(EILSEQ, os.setxattr, b'okdir', b'hf3fs.\xff', b'try_lock')
expect_err(EILSEQ, os.getxattr, b'okdir', b'user.\xff')
expect_err(EILSEQ, os.removexattr, b'okdir', b'hf3fs.\xff')
expect_err(errno.EINVAL, os.setxattr, b'okdir', b'hf3fs.lock', b'\xff\xfe')
os.setxattr(b'okdir', b'hf3fs.lock', b'try_lock')
assert os.getxattr(b'okdir', b'hf3fs.lock').startswith(b'{'), os.getxattr(b'okdir', b'hf3fs.lock')
os.setxattr(b'okdir', b'hf3fs.lock', b'clear')

# nothing was created, and no name in the listing carries U+FFFD
names = sorted(os.listdir(b'.'))
assert names == [b'3fs-virt', b'ok', b'okdir'], names
assert os.listdir(b'okdir') == [], os.listdir(b'okdir')
assert read(b'ok') == b'plain'

# valid UTF-8 names still work: accents, emoji, CJK, and U+FFFD itself (a valid character)
good = ['é', 'cafe\u0301', '😀', '中文名', 'c\ufffd', 'naïve dir']
for i, n in enumerate(good):
    write(n, n.encode() * 3)
for n in good:
    assert read(n) == n.encode() * 3, n
    assert read(n.encode()) == n.encode() * 3, n
listed = sorted(os.listdir('.'))
assert listed == sorted(['3fs-virt', 'ok', 'okdir'] + good), listed
os.mkdir('目录')
os.rename('😀', '目录/😀2')
os.link('中文名', '目录/链接')
os.symlink('目标/é😀', 'lé')
assert os.readlink('lé') == '目标/é😀', os.readlink('lé')
assert os.readlink(b'l\xc3\xa9') == '目标/é😀'.encode()
assert sorted(os.listdir('目录')) == ['链接', '😀2'], os.listdir('目录')
assert read('目录/😀2') == '😀'.encode() * 3
assert read('目录/链接') == '中文名'.encode() * 3
os.unlink('目录/链接')
print('ok')
`

t('names that are not valid UTF-8 are refused with EILSEQ and create nothing; UTF-8 names work', async (t) => {
  const c = await startFuseCluster(t)
  const a = await c.mount()
  const r = await py(SCRIPT, [a.mnt])
  ok(t, r, 'name checks')
  t.is(r.stdout.trim(), 'ok')
  // meta itself holds only the valid names
  const names = (await c.m.client().listAll('/')).map((e) => e.name).sort()
  t.false(names.some((n) => n.includes('\ufffd') && n !== 'c\ufffd'), JSON.stringify(names))
  t.true(names.includes('ok') && names.includes('c\ufffd') && !names.some((n) => n.startsWith('bad')), JSON.stringify(names))
  t.is(await a.stop(), 0, a.log())
})
