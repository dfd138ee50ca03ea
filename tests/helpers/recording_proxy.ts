import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request } from 'undici'

/**
 * A real HTTP forwarder on 127.0.0.1 in front of another local server (the emulator):
 * it records the method and path of every request that reaches it, so a test counts
 * what actually went over the wire. It can also lose answers the way a network does after
 * the service did its work: with `loseNext(n)`, the next `n` requests whose path starts
 * with `losePrefix` are forwarded and answered by the target (the payout exists there),
 * then the caller's connection is reset instead of answered. Each request's Idempotency-Key
 * is kept with it.
 */
export async function startRecordingProxy(
  cleanup: (fn: () => Promise<void>) => void,
  target: string,
  losePrefix = '/rfq/execute'
) {
  const requests: Array<{ method: string; path: string; idempotencyKey?: string }> = []
  const base = new URL(target)
  let toLose = 0
  let toSkip = 0
  let hold: { skip: number; forward: boolean; reached: () => void } | null = null
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', async () => {
      const url = new URL(req.url!, 'http://127.0.0.1')
      const path = url.pathname.slice(base.pathname.length - 1)
      const key = req.headers['idempotency-key']
      requests.push({
        method: req.method!,
        path,
        ...(typeof key === 'string' ? { idempotencyKey: key } : {}),
      })
      const headers = { ...req.headers }
      delete headers.host
      delete headers.connection
      let held: (() => void) | null = null
      if (hold && path.startsWith(losePrefix)) {
        if (hold.skip > 0) hold.skip--
        else {
          const { forward, reached } = hold
          hold = null
          // Held before it reaches the target: never forwarded, never answered.
          if (!forward) return reached()
          held = reached
        }
      }
      try {
        const response = await request(`${base.origin}${req.url}`, {
          method: req.method as 'GET',
          headers,
          body: chunks.length > 0 ? Buffer.concat(chunks) : undefined,
        })
        const body = Buffer.from(await response.body.arrayBuffer())
        // Held after the target made it: the answer is never sent (the caller waits).
        if (held) return held()
        if (toLose > 0 && path.startsWith(losePrefix)) {
          if (toSkip > 0) toSkip--
          else {
            toLose--
            return req.socket.destroy()
          }
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
  cleanup(async () => {
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  })
  const { port } = server.address() as AddressInfo
  return {
    /** The target's URL, path prefix included, through the proxy. */
    baseUrl: `http://127.0.0.1:${port}${base.pathname.replace(/\/$/, '')}`,
    requests,
    /**
     * The next `count` answers to `losePrefix` are lost after the target made them (after
     * `skip` more of them were answered).
     */
    loseNext(count = 1, skip = 0) {
      toLose += count
      toSkip += skip
    },
    /**
     * After `skip` more requests to `losePrefix` are answered, the next one is held: never
     * forwarded (`forward: false`), or forwarded and its answer never sent (`forward: true`,
     * the target made it). Resolves once it is held (and, forwarded, sent to the target).
     */
    holdNext(skip: number, forward: boolean) {
      return new Promise<void>((reached) => {
        hold = { skip, forward, reached }
      })
    },
    /** Answers every request again. */
    reset() {
      toLose = 0
      toSkip = 0
      hold = null
    },
    /** Requests that reached the target with this method and path. */
    count(method: string, path: string) {
      return requests.filter((r) => r.method === method && r.path === path).length
    },
  }
}
