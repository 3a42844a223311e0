// Line-oriented logger for daemons: one line per event on stderr (the cluster
// launcher points stderr at the node's log file). Debug lines only when
// STRATA_DEBUG names the component or is "*".

import fs from 'node:fs'

export type LogLevel = 'debug' | 'info' | 'warn' | 'error'

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void
  info(msg: string, fields?: Record<string, unknown>): void
  warn(msg: string, fields?: Record<string, unknown>): void
  error(msg: string, fields?: Record<string, unknown>): void
  child(component: string): Logger
}

const debugSet = new Set((process.env.STRATA_DEBUG ?? '').split(',').filter(Boolean))
const LEVELS: Record<LogLevel, number> = { debug: 0, info: 1, warn: 2, error: 3 }
// STRATA_LOG_LEVEL quiets in-process servers in tests; daemons get their own.
const minLevel = LEVELS[(process.env.STRATA_LOG_LEVEL as LogLevel) ?? 'info'] ?? 1

function render(v: unknown): string {
  if (typeof v === 'bigint') return v.toString()
  if (Buffer.isBuffer(v)) return v.toString('hex')
  if (v instanceof Error) {
    // StrataErrors and Node's system errors already start their message with the code
    const code = (v as { code?: unknown }).code
    return JSON.stringify(typeof code === 'string' && !v.message.startsWith(`${code}: `) ? `${code}: ${v.message}` : v.message)
  }
  if (typeof v === 'string') return /[\s"=]/.test(v) ? JSON.stringify(v) : v
  return JSON.stringify(v, (_k, x) => (typeof x === 'bigint' ? x.toString() : x))
}

let stderrIsFile: boolean | undefined

/**
 * One line to stderr. A daemon's stderr is its log file, on a disk that may
 * fill up: process.stderr then emits ENOSPC as an 'error' event, which ends
 * the process. Written directly, a line that does not fit is lost instead,
 * and logging resumes once there is room again.
 */
function stderrLine(line: string): void {
  stderrIsFile ??= isRegularFile(2)
  if (!stderrIsFile) {
    process.stderr.write(line + '\n')
    return
  }
  try {
    fs.writeSync(2, line + '\n')
  } catch {
    // no room for the log line (ENOSPC, EDQUOT) or a broken disk: the daemon goes on without it
  }
}

function isRegularFile(fd: number): boolean {
  try {
    return fs.fstatSync(fd).isFile()
  } catch {
    return false
  }
}

export function createLogger(component: string, sink: (line: string) => void = stderrLine): Logger {
  const debugOn = debugSet.has('*') || debugSet.has(component) || debugSet.has(component.split('.')[0]!)
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (level === 'debug' ? !debugOn : LEVELS[level] < minLevel) return
    let line = `${new Date().toISOString()} ${level.toUpperCase().padEnd(5)} [${component}] ${msg}`
    if (fields) for (const [k, v] of Object.entries(fields)) line += ` ${k}=${render(v)}`
    sink(line)
  }
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (c) => createLogger(`${component}.${c}`, sink),
  }
}
