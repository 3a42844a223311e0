#!/usr/bin/env node
// Entry shim: the CLI itself is TypeScript compiled to dist/. A CLI that
// cannot even be loaded (dist/ half rebuilt, not built) says so in one line,
// as every other failure does, instead of a Node stack trace.
import('../dist/bin/cli.js').catch((e) => {
  process.stderr.write(`strata: INTERNAL: cannot load the strata CLI: ${e instanceof Error ? e.message : String(e)}\n`)
  process.exit(1)
})
