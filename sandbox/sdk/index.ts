// sandbox/sdk: the Strata SDK (exported by the package as `strata` /
// `strata/sdk`). A thin client of the node daemon's HTTP API.
export { Strata, Sandboxes, Sandbox, resolveConnection, type StrataOptions, type ExecOptions, type ExecResult, type SpawnOptions, type SandboxProcess, type SandboxFileEntry, type CreateManyItem } from './client.js'
export type { CreateSandboxRequest, SandboxInfo, SandboxState, StopReason, ListFilter, NodeInfo, ExitEvent, DatasetMountSpec, ResourceSpec, LifetimeSpec } from '../daemon/index.js'
export { StrataError, isStrataError, ERRORS, type ErrorCode } from '../../fs/common/errors.js'
