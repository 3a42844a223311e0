// s3:// URLs of push destinations and pull sources, and the object keys of
// the bucket layout.
import test from 'ava'
import { StrataError } from '../../../../fs/common/errors.js'
import { blobKey, manifestKey, parseS3ImageUrl, parseS3Location, tagKey } from '../../../../sandbox/image/s3/url.js'

const D = 'sha256:' + 'ab'.repeat(32)

test('push destinations: bucket and prefix', (t) => {
  t.deepEqual(parseS3Location('s3://images'), { bucket: 'images', prefix: '' })
  t.deepEqual(parseS3Location('s3://images/'), { bucket: 'images', prefix: '' })
  t.deepEqual(parseS3Location('s3://my.bucket-1/team/prod/'), { bucket: 'my.bucket-1', prefix: 'team/prod' })
})

test('pull sources: every PREFIX/NAME split, longest prefix first; default tag; digests', (t) => {
  t.deepEqual(parseS3ImageUrl('s3://images/app'), { bucket: 'images', candidates: [{ prefix: '', ref: { name: 'app', tag: 'latest' } }] })
  t.deepEqual(parseS3ImageUrl('s3://images/x/team/app:v1').candidates, [
    { prefix: 'x/team', ref: { name: 'app', tag: 'v1' } },
    { prefix: 'x', ref: { name: 'team/app', tag: 'v1' } },
    { prefix: '', ref: { name: 'x/team/app', tag: 'v1' } },
  ])
  t.deepEqual(parseS3ImageUrl(`s3://images/p/app@${D}`).candidates[0], { prefix: 'p', ref: { name: 'app', digest: D } })
  // a prefix segment that is not a valid name component only ever belongs to the prefix
  t.deepEqual(parseS3ImageUrl('s3://images/Prefix_Upper/app:v1').candidates, [{ prefix: 'Prefix_Upper', ref: { name: 'app', tag: 'v1' } }])
})

test('bad URLs are IMAGE_INVALID_REFERENCE', (t) => {
  const bad = (f: () => unknown, url: string) => {
    const e = t.throws(f, { instanceOf: StrataError }, url)
    t.is(e?.code, 'IMAGE_INVALID_REFERENCE', url)
  }
  for (const u of ['images/app', 'http://images/app', 's3://', 's3:///app', 's3://Bad_Bucket!/x', 's3://ab/x', 's3://images//app', 's3://images/../app', 's3://images/a?x=1', 's3://images/a#f', 's3://images/app:v1']) {
    bad(() => parseS3Location(u), u)
  }
  for (const u of ['s3://images', 's3://images/', 's3://images/App', 's3://images/app:bad:tag', 's3://images/app:', 's3://images/app@sha256:12', 's3://images/./app', 'gs://images/app']) {
    bad(() => parseS3ImageUrl(u), u)
  }
})

test('object keys', (t) => {
  t.is(blobKey('p/q', D), `p/q/blobs/sha256/${'ab'.repeat(32)}`)
  t.is(blobKey('', D), `blobs/sha256/${'ab'.repeat(32)}`)
  t.is(manifestKey('p', D), `p/manifests/sha256/${'ab'.repeat(32)}`)
  t.is(tagKey('p', 'team/app', 'v1'), 'p/tags/team/app/v1')
  t.throws(() => blobKey('p', 'sha256:xyz'), { instanceOf: StrataError })
})
