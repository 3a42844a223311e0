// A DFS name may hold any character but '/' and NUL, control characters
// included (`touch "$(printf 'a\nb')"` through the mount). Printed raw, a
// newline makes one entry of a listing two lines and an ESC drives the
// reader's terminal; so text output shows them as C escapes, as `ls -b` does.
// JSON output keeps names exact.

const ESCAPES: Record<string, string> = { '\x07': '\\a', '\b': '\\b', '\t': '\\t', '\n': '\\n', '\v': '\\v', '\f': '\\f', '\r': '\\r' }

// C0, DEL and C1 controls
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/
const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/g

/**
 * `s` with every control character written as an escape (`\n`, `\t`, `\x1b`,
 * `\u0085`); characters in `keep` pass unchanged (an error message keeps the
 * line breaks of a log tail it carries).
 */
export function printable(s: string, keep = ''): string {
  if (!CONTROL.test(s)) return s
  return s.replace(CONTROLS, (c) => {
    if (keep.includes(c)) return c
    const named = ESCAPES[c]
    if (named) return named
    const code = c.charCodeAt(0)
    return code < 0x80 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`
  })
}
