// Package entry point: the public surface of Strata. `import { Strata } from 'strata'`
// gives the sandbox SDK; `strata/sdk` is the SDK alone.
export * from './fs/common/index.js'
export { Strata, Sandboxes, Sandbox, resolveConnection } from './sandbox/sdk/index.js'
export type {
  StrataOptions, ExecOptions as SandboxExecOptions, ExecResult as SandboxExecResult, SpawnOptions as SandboxSpawnOptions, SandboxProcess,
  SandboxFileEntry, CreateManyItem, CreateSandboxRequest, SandboxInfo, SandboxState, StopReason, ListFilter, NodeInfo, ExitEvent, DatasetMountSpec,
  ResourceSpec, LifetimeSpec,
} from './sandbox/sdk/index.js'
