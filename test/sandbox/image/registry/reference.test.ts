import test from 'ava'
import { formatRegistryUrl, parseRegistryUrl, registryScheme } from '../../../../sandbox/image/registry/reference.js'

const D = 'sha256:' + 'a'.repeat(64)

test('docker:// references: host, port, nested repo, tag, digest, default tag', (t) => {
  t.deepEqual(parseRegistryUrl('docker://127.0.0.1:5000/team/app:v1'), { host: '127.0.0.1:5000', repo: 'team/app', tag: 'v1' })
  t.deepEqual(parseRegistryUrl('docker://reg.example.com/app'), { host: 'reg.example.com', repo: 'app', tag: 'latest' })
  t.deepEqual(parseRegistryUrl(`docker://localhost:5000/app@${D}`), { host: 'localhost:5000', repo: 'app', digest: D })
  t.deepEqual(parseRegistryUrl(`docker://localhost/app:v2@${D}`), { host: 'localhost', repo: 'app', tag: 'v2', digest: D })
  t.deepEqual(parseRegistryUrl('docker://docker.io/library/busybox:1'), { host: 'registry-1.docker.io', repo: 'library/busybox', tag: '1' })
  t.deepEqual(parseRegistryUrl('docker://[::1]:5000/a/b'), { host: '[::1]:5000', repo: 'a/b', tag: 'latest' })
  t.is(formatRegistryUrl(parseRegistryUrl('docker://h:1/a/b:c')), 'docker://h:1/a/b:c')
  t.is(parseRegistryUrl('docker://h:65535/a').host, 'h:65535')
})

test('malformed references are IMAGE_INVALID_REFERENCE', (t) => {
  for (const bad of ['127.0.0.1:5000/app', 'docker://app', 'docker:///app', 'docker://h/App', 'docker://h/app:', 'docker://h/app@sha256:12', 'docker://h/a//b', 'docker://h:x/a', 'docker://h/app:-x', 'docker://127.0.0.1:99999/x', 'docker://h:0/x', 'docker://[::1]:65536/x']) {
    t.throws(() => parseRegistryUrl(bad), { code: 'IMAGE_INVALID_REFERENCE' } as never, bad)
  }
})

test('http for loopback hosts unless told; https elsewhere', (t) => {
  t.is(registryScheme('127.0.0.1:5000'), 'http')
  t.is(registryScheme('localhost'), 'http')
  t.is(registryScheme('[::1]:5000'), 'http')
  t.is(registryScheme('reg.example.com'), 'https')
  t.is(registryScheme('reg.example.com:5000', true), 'http')
  t.is(registryScheme('localhost:5000', false), 'https')
})
