// CPU profile of the current process written when it exits. Node 20 refuses
// --cpu-prof in NODE_OPTIONS, so daemons started by `cluster up` cannot be
// profiled through their environment; instead they are started through
// bench/profiled-strata.ts (via STRATA_BIN), which calls this first.

import fs from 'node:fs'
import path from 'node:path'
import { Session } from 'node:inspector'

export function startSelfProfile(dir: string, name: string): void {
  fs.mkdirSync(dir, { recursive: true })
  const session = new Session()
  session.connect()
  session.post('Profiler.enable')
  session.post('Profiler.setSamplingInterval', { interval: 200 })
  session.post('Profiler.start')
  let written = false
  // The in-process inspector session answers synchronously, so this works
  // inside an 'exit' listener, where nothing asynchronous may run.
  process.on('exit', () => {
    if (written) return
    written = true
    session.post('Profiler.stop', (err, res) => {
      if (err || !res) return
      fs.writeFileSync(path.join(dir, `${name}-${process.pid}.cpuprofile`), JSON.stringify(res.profile))
    })
  })
}
