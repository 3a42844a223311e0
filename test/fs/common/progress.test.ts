import { Writable } from 'node:stream'
import test from 'ava'
import { createProgress } from '../../../fs/common/progress.js'

/** A stream that says it is a terminal and keeps what is written to it. */
function fakeTty(): { stream: NodeJS.WriteStream; text: () => string } {
  let out = ''
  const w = new Writable({
    write(chunk, _enc, cb) {
      out += String(chunk)
      cb()
    },
  })
  Object.assign(w, { isTTY: true, columns: 160, rows: 40, cursorTo: () => true, moveCursor: () => true, clearLine: () => true, clearScreenDown: () => true })
  // eslint-disable-next-line no-control-regex
  return { stream: w as unknown as NodeJS.WriteStream, text: () => out.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '') }
}

test('a task that ends before its last byte (a layer reused part-way) shows its size, not done/total at 100%', (t) => {
  const tty = fakeTty()
  const p = createProgress({ stream: tty.stream })
  const task = p.start('layer 1/1', 80 << 20)
  task.tick(47 << 20)
  task.done('reused 0123456789ab')
  p.stop()
  const last = tty.text().trim().split('\n').pop()!
  t.regex(last, /100% 80\.0 MiB reused 0123456789ab/)
  t.notRegex(last, /47\.0 MiB\/80\.0 MiB/)
})
