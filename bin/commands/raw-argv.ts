// Node decodes the command line as UTF-8 and puts U+FFFD where the bytes are
// not UTF-8, so an argument such as $'/tmp/caf\xe9' (a Latin-1 name) reaches
// the commands as another name: fs put said the file did not exist, fs get
// wrote a file of another name and a DFS path stored the replacement
// character, all without a word. /proc/self/cmdline keeps the bytes, so such
// an argument is found and refused before anything is done.

import fs from 'node:fs'

const UTF8 = new TextDecoder('utf-8', { fatal: true })

/** The arguments (after the script) whose bytes are not valid UTF-8, as Node decoded them. */
export function nonUtf8Arguments(argv: readonly string[] = process.argv): string[] {
  const args = argv.slice(2)
  // an argument that was valid UTF-8 holds U+FFFD only if typed so; no U+FFFD, nothing to look at
  if (!args.some((a) => a.includes('\uFFFD'))) return []
  let raw: Buffer
  try {
    raw = fs.readFileSync('/proc/self/cmdline')
  } catch {
    return []
  }
  const parts: Buffer[] = []
  let start = 0
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === 0) {
      parts.push(raw.subarray(start, i))
      start = i + 1
    }
  }
  // node's own options come before the script: the arguments are the last ones
  const tail = parts.slice(parts.length - args.length)
  if (tail.length !== args.length) return []
  return tail.flatMap((b, i) => {
    try {
      UTF8.decode(b)
      return []
    } catch {
      return [args[i]!]
    }
  })
}
