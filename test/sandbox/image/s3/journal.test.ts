import test from 'ava'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { UploadJournal, type UploadJournalEntry } from '../../../../sandbox/image/s3/journal.js'

function tmpDir(t: { teardown(fn: () => void): void }): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'strata-journal-'))
  t.teardown(() => fs.rmSync(d, { recursive: true, force: true }))
  return d
}

const entry = (key: string): UploadJournalEntry => ({
  version: 1,
  endpoint: 'http://127.0.0.1:1',
  bucket: 'b',
  key,
  uploadId: 'u1',
  size: 10 * 1024 * 1024,
  partSize: 5 * 1024 * 1024,
  parts: { '1': { size: 5 * 1024 * 1024, etag: 'e1' } },
})

/** The pid of a process that has exited (and been reaped). */
function deadPid(): number {
  const r = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' })
  return Number(r.stdout)
}

test('save, load and remove round trip; another key is another file', async (t) => {
  const dir = tmpDir(t)
  const j = new UploadJournal(dir)
  await j.save(entry('k1'))
  await j.save(entry('k2'))
  t.is((await j.load('http://127.0.0.1:1', 'b', 'k1'))?.uploadId, 'u1')
  t.is(await j.load('http://127.0.0.1:1', 'other', 'k1'), null)
  t.is(fs.readdirSync(dir).length, 2)
  await j.remove('http://127.0.0.1:1', 'b', 'k1')
  t.is(await j.load('http://127.0.0.1:1', 'b', 'k1'), null)
  t.is(fs.readdirSync(dir).length, 1)
})

test('a temp file left by a process killed before its rename is swept by the next load and by remove; a live writer\'s is kept', async (t) => {
  const dir = tmpDir(t)
  const j = new UploadJournal(dir)
  await j.save(entry('k'))
  const [file] = fs.readdirSync(dir)
  const stale = `${file}.${deadPid()}.tmp`
  const live = `${file}.${process.ppid}.tmp`
  const unrelated = 'notes.txt'
  for (const n of [stale, live, unrelated]) fs.writeFileSync(path.join(dir, n), '{"torn')
  t.is((await j.load('http://127.0.0.1:1', 'b', 'k'))?.uploadId, 'u1', 'the journal itself is whole')
  t.deepEqual(fs.readdirSync(dir).sort(), [file!, live, unrelated].sort())
  fs.writeFileSync(path.join(dir, stale), '{"torn')
  fs.rmSync(path.join(dir, live))
  await j.remove('http://127.0.0.1:1', 'b', 'k')
  t.deepEqual(fs.readdirSync(dir), [unrelated])
})

test('a torn or foreign journal file loads as nothing', async (t) => {
  const dir = tmpDir(t)
  const j = new UploadJournal(dir)
  await j.save(entry('k'))
  const [file] = fs.readdirSync(dir)
  fs.writeFileSync(path.join(dir, file!), '{"version":1,')
  t.is(await j.load('http://127.0.0.1:1', 'b', 'k'), null)
  fs.writeFileSync(path.join(dir, file!), JSON.stringify({ ...entry('other'), key: 'other' }))
  t.is(await j.load('http://127.0.0.1:1', 'b', 'k'), null)
})
