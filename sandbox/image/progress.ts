// The progress sinks moved to fs/common/progress.ts when `strata fs put/get` began to use
// them (the fs group loads no sandbox module); the image code keeps importing them here.
export * from '../../fs/common/progress.js'
