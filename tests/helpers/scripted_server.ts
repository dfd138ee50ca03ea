import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'

export interface RecordedRequest {
  method: string
  url: URL
  headers: IncomingHttpHeaders
  body: string
  json: any
}

export type Reply =
  | { status: number; body?: unknown; raw?: string; headers?: Record<string, string> }
  | 'reset'
  | 'hang'
  | 'stall-body'

/**
 * A real HTTP server on 127.0.0.1 whose answers each test scripts: a queue of replies
 * (the last one repeats) and a record of every request that reached it.
 */
export async function startScriptedServer(replies: Reply[] | ((req: RecordedRequest) => Reply)) {
  const requests: RecordedRequest[] = []
  const queue = Array.isArray(replies) ? [...replies] : null
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk) => chunks.push(chunk))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      let json: unknown
      try {
        json = body ? JSON.parse(body) : undefined
      } catch {}
      const recorded = {
        method: req.method!,
        url: new URL(req.url!, 'http://127.0.0.1'),
        headers: req.headers,
        body,
        json,
      }
      requests.push(recorded)
      const reply = queue
        ? queue.length > 1
          ? queue.shift()!
          : queue[0]
        : (replies as any)(recorded)
      send(res, reply)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    async close() {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}

function send(res: ServerResponse, reply: Reply) {
  if (reply === 'reset') {
    res.socket?.destroy()
    return
  }
  if (reply === 'hang') return
  if (reply === 'stall-body') {
    // Headers and the first bytes of a body that never ends.
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' })
    res.write('{"payoutId":')
    return
  }
  const payload = reply.raw ?? (reply.body === undefined ? '' : JSON.stringify(reply.body))
  res.writeHead(reply.status, {
    'content-type': 'application/json',
    'x-ratelimit-limit': '60',
    'x-ratelimit-remaining': '59',
    'x-ratelimit-reset': '1700000000',
    ...reply.headers,
  })
  res.end(payload)
}
