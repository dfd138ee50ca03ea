import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request } from 'undici'

/**
 * A real HTTP forwarder on 127.0.0.1 in front of the emulator that can lose answers the
 * way a network does after the service did its work: with `loseNext(n)`, the next `n`
 * requests whose path starts with `prefix` are forwarded, answered by the emulator (so the
 * payout exists there), and then the caller's connection is reset instead of answered.
 */
export async function startLossyProxy(
  cleanup: (fn: () => Promise<void>) => void,
  target: string,
  prefix = '/rfq/execute'
) {
  const base = new URL(target)
  let toLose = 0
  const stats = { forwarded: 0, lost: 0 }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', async () => {
      const headers = { ...req.headers }
      delete headers.host
      delete headers.connection
      try {
        const response = await request(`${base.origin}${req.url}`, {
          method: req.method as 'GET',
          headers,
          body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
        })
        const body = Buffer.from(await response.body.arrayBuffer())
        stats.forwarded++
        const path = new URL(req.url!, 'http://127.0.0.1').pathname.slice(base.pathname.length - 1)
        if (toLose > 0 && path.startsWith(prefix)) {
          toLose--
          stats.lost++
          return req.socket.destroy()
        }
        const forwarded = { ...response.headers }
        delete forwarded['transfer-encoding']
        delete forwarded.connection
        res.writeHead(response.statusCode, forwarded as Record<string, string>)
        res.end(body)
      } catch {
        res.socket?.destroy()
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  cleanup(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  )
  return {
    baseUrl: `http://127.0.0.1:${port}${base.pathname.replace(/\/$/, '')}`,
    stats,
    /** Answers every request again. */
    reset() {
      toLose = 0
    },
    /** The next `count` matching answers are lost after the emulator made them. */
    loseNext(count = 1) {
      toLose += count
    },
  }
}
