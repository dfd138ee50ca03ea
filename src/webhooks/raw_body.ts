import type { IncomingMessage } from 'node:http'

/** Thrown when a body exceeds the limit; the route answers 413. */
export class BodyTooLargeError extends Error {
  constructor(readonly limit: number) {
    super(`request body exceeds ${limit} bytes`)
  }
}

/**
 * Reads the untouched request bytes (no decoding, no BOM stripping, no inflation), so the
 * signature is checked over exactly what was signed. A declared Content-Length over the
 * limit is refused before reading; a body that grows past it stops being buffered at once.
 */
export function readRawBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length'])
  if (Number.isFinite(declared) && declared > limit) {
    req.resume()
    return Promise.reject(new BodyTooLargeError(limit))
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    let done = false
    const finish = (error: Error | null, body?: Buffer) => {
      if (done) return
      done = true
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('error', onError)
      if (error) {
        // Drain what is left without keeping it, so the response can still be written.
        req.resume()
        reject(error)
      } else {
        resolve(body!)
      }
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) return finish(new BodyTooLargeError(limit))
      chunks.push(chunk)
    }
    const onEnd = () => finish(null, Buffer.concat(chunks, size))
    const onError = (error: Error) => finish(error)
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('error', onError)
  })
}
