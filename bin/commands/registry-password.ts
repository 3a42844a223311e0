// Where `strata image push|pull docker://…` gets a registry password when the
// command line must not hold it: --password-stdin (as docker login has it),
// STRATA_REGISTRY_PASSWORD, or a prompt on the terminal without echo. A user
// name with no password from anywhere is a usage error, never an empty
// password sent to the registry (which refuses it as if it were wrong).
import { UsageError } from './output.js'

export interface CredentialFlags {
  username?: string
  password?: string
  passwordStdin?: boolean
}

/** What the command hands the registry client: both or neither. */
export interface CliCredentials {
  username?: string
  password?: string
}

interface Stdin extends NodeJS.ReadableStream {
  isTTY?: boolean
  setRawMode?: (raw: boolean) => unknown
}

/** All of standard input, one trailing newline (\n or \r\n) dropped, as `docker login --password-stdin` does. */
async function readPasswordStdin(stdin: Stdin): Promise<string> {
  const parts: Buffer[] = []
  for await (const c of stdin) parts.push(typeof c === 'string' ? Buffer.from(c) : (c as Buffer))
  const text = Buffer.concat(parts).toString('utf8')
  return text.replace(/\r?\n$/, '')
}

/**
 * Asks for the password on a terminal: the prompt on stderr, the terminal in
 * raw mode so nothing typed is echoed. Enter ends it, backspace deletes,
 * Ctrl-D ends an empty answer, Ctrl-C interrupts the command (SIGINT, exit
 * 130, as it would have outside raw mode).
 */
function promptPassword(stdin: Stdin, prompt: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let typed: string[] = []
    const done = (end: () => void): void => {
      stdin.removeListener('data', onData)
      stdin.setRawMode?.(false)
      stdin.pause()
      process.stderr.write('\n')
      end()
    }
    const onData = (d: Buffer | string): void => {
      for (const ch of typeof d === 'string' ? d : d.toString('utf8')) {
        if (ch === '\r' || ch === '\n') return done(() => resolve(typed.join('')))
        if (ch === '\x04' && typed.length === 0) return done(() => resolve(''))
        if (ch === '\x03') {
          return done(() => {
            process.kill(process.pid, 'SIGINT')
            reject(new UsageError('interrupted at the password prompt'))
          })
        }
        if (ch === '\x7f' || ch === '\b') typed = typed.slice(0, -1)
        else if (ch === '\x15') typed = [] // Ctrl-U: the line is typed again
        else if (ch >= ' ' || ch === '\t') typed.push(ch)
      }
    }
    // raw before the prompt shows: what is typed after it is never echoed
    stdin.setRawMode?.(true)
    process.stderr.write(prompt)
    stdin.on('data', onData)
    stdin.resume()
  })
}

const NO_PASSWORD_HINT = 'pass it on standard input with --password-stdin, or in STRATA_REGISTRY_PASSWORD'

/**
 * The credentials a push or pull sends, from the flags and the environment
 * (STRATA_REGISTRY_USER / STRATA_REGISTRY_PASSWORD): a user (--username, else
 * the environment's) needs a password from --password, --password-stdin,
 * STRATA_REGISTRY_PASSWORD or, when standard input is a terminal, the prompt;
 * a password needs a user. With neither, the registry client looks in the
 * auth file or goes anonymous. Usage errors for every other combination.
 */
export async function registryCredentials(o: CredentialFlags, env: NodeJS.ProcessEnv = process.env, stdin: Stdin = process.stdin): Promise<CliCredentials> {
  if (o.username === '') throw new UsageError('--username is empty')
  if (o.passwordStdin && o.password !== undefined) throw new UsageError('--password and --password-stdin are mutually exclusive')
  // (an empty variable counts as unset, as `VAR= strata …` means)
  const envUser = env.STRATA_REGISTRY_USER || undefined
  const envPassword = env.STRATA_REGISTRY_PASSWORD || undefined
  const user = o.username ?? envUser
  const userFrom = o.username !== undefined ? `--username ${JSON.stringify(o.username)}` : `STRATA_REGISTRY_USER=${JSON.stringify(user)}`
  if (o.passwordStdin || o.password !== undefined) {
    const flag = o.passwordStdin ? '--password-stdin' : '--password'
    if (user === undefined) throw new UsageError(`${flag} needs a user name: give --username (or set STRATA_REGISTRY_USER)`)
    const password = o.passwordStdin ? await readPasswordStdin(stdin) : o.password!
    if (password === '') throw new UsageError(o.passwordStdin ? '--password-stdin: standard input held no password' : '--password is empty')
    return { username: user, password }
  }
  if (user === undefined) {
    if (envPassword !== undefined) throw new UsageError('STRATA_REGISTRY_PASSWORD is set but no user name is: give --username (or set STRATA_REGISTRY_USER)')
    return {}
  }
  if (envPassword !== undefined) return { username: user, password: envPassword }
  if (!stdin.isTTY) throw new UsageError(`${userFrom} has no password and standard input is not a terminal to ask for one: ${NO_PASSWORD_HINT}`)
  const password = await promptPassword(stdin, 'Password: ')
  if (password === '') throw new UsageError(`no password entered for ${userFrom}`)
  return { username: user, password }
}
