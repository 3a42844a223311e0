import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import test from 'ava'
import { parseWwwAuthenticate, resolveCredentials } from '../../../../sandbox/image/registry/auth.js'

test('WWW-Authenticate: bearer params, quoted commas, several challenges', (t) => {
  t.deepEqual(parseWwwAuthenticate('Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"'), [
    { scheme: 'bearer', params: { realm: 'https://auth.example/token', service: 'registry.example', scope: 'repository:a/b:pull,push' } },
  ])
  t.deepEqual(parseWwwAuthenticate('Basic realm="Registry Realm"'), [{ scheme: 'basic', params: { realm: 'Registry Realm' } }])
  t.deepEqual(parseWwwAuthenticate('Bearer realm="x", error="insufficient_scope", Basic realm=y'), [
    { scheme: 'bearer', params: { realm: 'x', error: 'insufficient_scope' } },
    { scheme: 'basic', params: { realm: 'y' } },
  ])
  t.deepEqual(parseWwwAuthenticate('Bearer realm="a\\"b"'), [{ scheme: 'bearer', params: { realm: 'a"b' } }])
  t.deepEqual(parseWwwAuthenticate(''), [])
})

test('credentials: options, then environment, then the auth file', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-auth-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  const file = path.join(dir, 'auth.json')
  fs.writeFileSync(
    file,
    JSON.stringify({
      auths: {
        'reg.example:5000': { auth: Buffer.from('alice:pa:ss').toString('base64') },
        'https://other.example/v1/': { username: 'bob', password: 'pw' },
      },
    }),
  )
  const env = { REGISTRY_AUTH_FILE: file }
  t.deepEqual(resolveCredentials('reg.example:5000', { username: 'u', password: 'p' }, env), { username: 'u', password: 'p' })
  t.deepEqual(resolveCredentials('reg.example:5000', {}, { ...env, STRATA_REGISTRY_USER: 'eu', STRATA_REGISTRY_PASSWORD: 'ep' }), { username: 'eu', password: 'ep' })
  t.deepEqual(resolveCredentials('reg.example:5000', {}, env), { username: 'alice', password: 'pa:ss' })
  t.deepEqual(resolveCredentials('other.example', {}, env), { username: 'bob', password: 'pw' })
  t.is(resolveCredentials('nobody.example', {}, env), undefined)
  // HOME/.docker/config.json when REGISTRY_AUTH_FILE is unset
  fs.mkdirSync(path.join(dir, '.docker'))
  fs.writeFileSync(path.join(dir, '.docker', 'config.json'), JSON.stringify({ auths: { 'h.example': { auth: Buffer.from('c:d').toString('base64') } } }))
  t.deepEqual(resolveCredentials('h.example', {}, { HOME: dir }), { username: 'c', password: 'd' })
  t.is(resolveCredentials('h.example', {}, { HOME: path.join(dir, 'none') }), undefined)
})

test('credentials: a user without a password (or the reverse) is refused, not sent with an empty half', (t) => {
  // (it was: { username: 'u', password: '' }, which the registry refuses as a wrong password)
  const none = { REGISTRY_AUTH_FILE: '/nonexistent/auth.json' }
  t.throws(() => resolveCredentials('r.example', { username: 'u' }, none), { message: /user "u" has no password .*STRATA_REGISTRY_PASSWORD/ })
  t.throws(() => resolveCredentials('r.example', { password: 'p' }, none), { message: /a password without a user name/ })
  t.throws(() => resolveCredentials('r.example', {}, { ...none, STRATA_REGISTRY_USER: 'eu' }), { message: /user "eu" has no password/ })
  t.throws(() => resolveCredentials('r.example', {}, { ...none, STRATA_REGISTRY_PASSWORD: 'ep' }), { message: /a password without a user name/ })
  // the other half from the environment
  t.deepEqual(resolveCredentials('r.example', { username: 'u' }, { ...none, STRATA_REGISTRY_PASSWORD: 'ep' }), { username: 'u', password: 'ep' })
  t.deepEqual(resolveCredentials('r.example', { password: 'p' }, { ...none, STRATA_REGISTRY_USER: 'eu' }), { username: 'eu', password: 'p' })
  // empty variables are unset
  t.is(resolveCredentials('r.example', {}, { ...none, STRATA_REGISTRY_USER: '', STRATA_REGISTRY_PASSWORD: '' }), undefined)
})
