// Operator commands: the local cluster launcher (`strata cluster …`) and the
// 3FS admin_cli equivalents (`strata admin …`). Everything here returns data;
// bin/commands prints it.
export * from './units.js'
export * from './placement.js'
export * from './csv.js'
export * from './table.js'
export * from './cluster-file.js'
export * from './process.js'
export * from './ports.js'
export * from './session.js'
export * from './nodes.js'
export * from './chains.js'
export * from './targets.js'
export * from './chunks.js'
export * from './configs.js'
export * from './cluster.js'
export * from './interrupt.js'
