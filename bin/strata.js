#!/usr/bin/env node
// Entry shim: the CLI itself is TypeScript compiled to dist/.
import '../dist/bin/cli.js'
