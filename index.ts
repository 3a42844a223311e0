// Package entry point: the public surface of Strata.
export * from './fs/common/index.js'
