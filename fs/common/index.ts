export * from './errors.js'
export * from './types.js'
export * from './services.js'
