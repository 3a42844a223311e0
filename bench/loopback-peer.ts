// The two halves of the raw loopback baseline, each run as its own process:
//   node dist/bench/loopback-peer.js recv <totalBytes>
//     listens on 127.0.0.1 (a free port, printed as {"port":N}), receives
//     totalBytes from one connection and only counts them; prints
//     {"rate":bytes/s,"cpuSeconds":s}, timed from the first byte to the last
//   node dist/bench/loopback-peer.js send <port> <totalBytes> <bufferBytes>
//     connects and streams totalBytes by writing one preallocated buffer over
//     and over, honouring backpressure; prints {"cpuSeconds":s}
// Nothing else: this is the ceiling any RPC layer on a Node socket can approach.

import net from 'node:net'

const [mode, ...rest] = process.argv.slice(2)

function cpuSeconds(): number {
  const c = process.cpuUsage()
  return (c.user + c.system) / 1e6
}

function usage(): never {
  console.error('usage: loopback-peer recv <totalBytes> | loopback-peer send <port> <totalBytes> <bufferBytes>')
  process.exit(2)
}

if (mode === 'recv') {
  const total = Number(rest[0])
  if (!(total > 0)) usage()
  const server = net.createServer((sock) => {
    let got = 0
    let t0 = 0
    sock.on('data', (chunk: Buffer) => {
      if (got === 0) t0 = performance.now()
      got += chunk.length
    })
    sock.on('end', () => {
      const secs = (performance.now() - t0) / 1000
      if (got !== total) {
        console.error(`loopback-peer: received ${got} of ${total} bytes`)
        process.exit(1)
      }
      process.stdout.write(`${JSON.stringify({ rate: got / secs, cpuSeconds: cpuSeconds() })}\n`)
      process.exit(0)
    })
    sock.on('error', (e) => {
      console.error(`loopback-peer: ${e.message}`)
      process.exit(1)
    })
  })
  server.listen(0, '127.0.0.1', () => process.stdout.write(`${JSON.stringify({ port: (server.address() as net.AddressInfo).port })}\n`))
} else if (mode === 'send') {
  const port = Number(rest[0])
  const total = Number(rest[1])
  const bufSize = Number(rest[2])
  if (!(port > 0) || !(total > 0) || !(bufSize > 0)) usage()
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
    process.stdout.write(`${JSON.stringify({ cpuSeconds: cpuSeconds() })}\n`)
    process.exit(0)
  })
} else {
  usage()
}
