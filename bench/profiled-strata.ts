// `strata` with a CPU profiler attached: `npm run bench -- --profile DIR`
// points STRATA_BIN here, so every daemon `cluster up` starts writes
// DIR/<name>-<pid>.cpuprofile when it exits (cluster down stops it cleanly).

import { startSelfProfile } from './lib/self-profile.js'

const dir = process.env.STRATA_PROFILE_DIR
if (dir) {
  const i = process.argv.indexOf('--name')
  startSelfProfile(dir, i > 0 ? process.argv[i + 1]! : 'strata')
}
await import('../bin/cli.js')
