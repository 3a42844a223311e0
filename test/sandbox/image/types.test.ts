import test from 'ava'
import { isValidName, parseImageRef } from '../../../sandbox/image/types.js'

test('names: OCI repository components, optionally after a registry HOST[:PORT]/ as Docker writes it', (t) => {
  for (const ok of ['app', 'team/app', 'a.b_c__d-e--f/x', 'localhost/app', 'localhost:5000/team/app', '127.0.0.1:19420/team/good', 'registry.example.com/a/b', 'my-host.io:443/a', 'host:5000/a']) {
    t.true(isValidName(ok), ok)
  }
  // a first component that is no host (no `.`, no port, not localhost) follows the lowercase grammar
  for (const bad of ['Foo/bar', 'App', 'a:b:c/x', 'host:/x', ':5000/x', '-h.io/x', 'h..io/x', 'h.io:5000', 'localhost:5000/App', 'a//b', 'x/', 'a'.repeat(256)]) {
    t.false(isValidName(bad), bad)
  }
  t.deepEqual(parseImageRef('localhost:5000/team/app:v1'), { name: 'localhost:5000/team/app', tag: 'v1' })
  t.deepEqual(parseImageRef('localhost:5000/team/app'), { name: 'localhost:5000/team/app', tag: 'latest' })
  // a port with nothing after it is a tag, as in Docker
  t.deepEqual(parseImageRef('localhost:5000'), { name: 'localhost', tag: '5000' })
  t.throws(() => parseImageRef('Foo/bar:1'), { code: 'IMAGE_INVALID_REFERENCE' })
  // too long, and nothing else wrong: the message says so (it gave only the grammar, which the name meets)
  t.throws(() => parseImageRef(`${'a'.repeat(256)}:v1`), { code: 'IMAGE_INVALID_REFERENCE', message: /invalid image name "a{256}" \(256 characters, at most 255\)$/ })
  t.throws(() => parseImageRef(`app:${'t'.repeat(129)}`), { code: 'IMAGE_INVALID_REFERENCE', message: /invalid tag "t{129}" in "app:t{129}" \(129 characters, at most 128\)$/ })
  t.throws(() => parseImageRef('app:-x'), { code: 'IMAGE_INVALID_REFERENCE', message: /invalid tag "-x" in "app:-x" \(a tag is \[A-Za-z0-9_\]\[A-Za-z0-9._-\]\*, at most 128 characters\)$/ })
})
