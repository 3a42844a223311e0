// The in-sandbox agent's host side: the client every sandbox backend uses to
// run commands and move files, and the wire protocol it speaks. The agent
// itself is native/agent (C, static), built to build/Release/strata-agent.
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export { AgentClient } from './client.js'
export type {
  AgentClientInit, AgentProcess, ExecOptions, ExecResult, ExitInfo, FileEntry, FileType, ReadOptions, RunAs, SpawnOptions,
  WriteOptions,
} from './client.js'
export { PROTOCOL_VERSION, MAX_OUTPUT_CAP } from './protocol.js'

/** Path of the static agent binary built by `npm run build` (binding.gyp target strata-agent). */
export function agentBinaryPath(): string {
  // dist/sandbox/backends/agent/index.js -> repo root is four levels up
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../../../build/Release/strata-agent')
}
