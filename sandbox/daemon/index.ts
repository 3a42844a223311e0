// sandbox/daemon: the node daemon (`strata serve`): the sandbox service
// (registry, create/delete, reaper, admission, re-adoption) behind an HTTP
// API. API shapes are in types.ts and docs/sandbox-api.md.
export * from './types.js'
export { SandboxService, reclaimOffline, DEFAULT_LIMITS, type SandboxServiceOptions } from './service.js'
export { SandboxHttpServer, httpStatusOf, parseListen, probeListen, API_HEADER, API_VERSION, DEFAULT_EXEC_OUTPUT, MAX_JSON_BODY, type SandboxHttpOptions } from './http.js'
export { startSandboxDaemon, ensureToken, type SandboxDaemonConfig, type RunningSandboxDaemon } from './daemon.js'
export { sandboxClusterRole, clusterEndpoint, sandboxStateDir, SANDBOX_ROLE, SANDBOX_NODE_ID_BASE, TOKEN_FILE } from './cluster-role.js'
export { nodeCapacity, checkCapacity, checkQuota, type AdmissionLimits, type NodeCapacity } from './admission.js'
export { validateCreate, validateExec, validateListFilter, MAX_EXEC_TIMEOUT_MS, SANDBOX_ID_RE } from './validate.js'
export { WARNINGS_TRAILER, WarningsTrailer } from './warnings.js'
