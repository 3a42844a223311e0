import test from 'ava'
import { StrataError } from '../../../fs/common/errors.js'
import { createLogger } from '../../../fs/common/log.js'

test('errors render with their code once: StrataError, Node system errors, plain errors', (t) => {
  const lines: string[] = []
  const log = createLogger('t', (l) => lines.push(l))
  log.error('a', { err: new StrataError('BAD_CONFIG', 'count is wrong') })
  const sys = Object.assign(new Error('ENOENT: no such file or directory'), { code: 'ENOENT' })
  log.error('b', { err: sys })
  log.error('c', { err: Object.assign(new Error('went away'), { code: 'ECONNRESET' }) })
  log.error('d', { err: new Error('plain') })
  t.regex(lines[0]!, /err="BAD_CONFIG: count is wrong"/)
  t.regex(lines[1]!, /err="ENOENT: no such file or directory"/)
  t.regex(lines[2]!, /err="ECONNRESET: went away"/)
  t.regex(lines[3]!, /err=plain|err="plain"/)
})
