// Sender half of the raw loopback baseline, run as its own process:
//   node dist/bench/loopback-peer.js <port> <totalBytes> <bufferBytes>
// Connects to 127.0.0.1:<port> and streams totalBytes by writing one
// preallocated buffer over and over, honouring backpressure. Nothing else:
// this is the ceiling any RPC layer on a Node socket can approach.

import net from 'node:net'

const [portArg, totalArg, bufArg] = process.argv.slice(2)
const port = Number(portArg)
const total = Number(totalArg)
const bufSize = Number(bufArg)
if (!(port > 0) || !(total > 0) || !(bufSize > 0)) {
  console.error('usage: loopback-peer <port> <totalBytes> <bufferBytes>')
  process.exit(2)
}

const buf = Buffer.alloc(bufSize, 0x5a)
const socket = net.connect({ host: '127.0.0.1', port })
socket.setNoDelay(true)
socket.on('error', (e) => {
  console.error(`loopback-peer: ${e.message}`)
  process.exit(1)
})
socket.on('connect', () => {
  let sent = 0
  const pump = (): void => {
    while (sent < total) {
      const n = Math.min(bufSize, total - sent)
      sent += n
      if (!socket.write(n === bufSize ? buf : buf.subarray(0, n))) {
        socket.once('drain', pump)
        return
      }
    }
    socket.end()
  }
  pump()
})
socket.on('close', () => {
  // the receiver adds this to its own CPU time: the cost of moving the bytes
  const c = process.cpuUsage()
  process.stdout.write(`${JSON.stringify({ cpuSeconds: (c.user + c.system) / 1e6 })}\n`)
  process.exit(0)
})
