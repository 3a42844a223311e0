// Sandbox backends: one interface (types.ts), one conformance suite
// (test/sandbox/backends/conformance.ts), one implementation per isolation
// level. Only the container backend exists so far.
export type {
  BackendKind, NetworkMode, SandboxBackend, SandboxHandle, SandboxResources, SandboxSpec, SandboxStatus,
} from './types.js'
export { ContainerBackend, type ContainerBackendOptions } from './container/index.js'
export { AgentClient, agentBinaryPath } from './agent/index.js'
