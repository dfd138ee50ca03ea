import { fork, type ChildProcess } from 'node:child_process'

type Message =
  | { type: 'ready'; data: unknown }
  | { type: 'reply'; id: number; ok: true; result: unknown }
  | { type: 'reply'; id: number; ok: false; error: string }
  | { type: 'fatal'; error: string }

/** A bench child process driven over IPC, every call bounded in time. */
export interface Child<Ready> {
  ready: Ready
  pid: number
  call<T = unknown>(cmd: string, args?: unknown, timeoutMs?: number): Promise<T>
  stop(): Promise<void>
}

/**
 * Forks `script` with the parent's loader flags (plus `execArgv`), waits for its `ready`
 * message (bounded) and returns a handle whose calls time out instead of hanging.
 */
export async function startChild<Ready>(
  script: URL,
  options: { args?: string[]; execArgv?: string[]; readyTimeoutMs?: number } = {}
): Promise<Child<Ready>> {
  const child: ChildProcess = fork(script, options.args ?? [], {
    execArgv: [...process.execArgv, ...(options.execArgv ?? [])],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  })
  const pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>()
  let nextId = 0
  let exited = false
  const ready = new Promise<Ready>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${script.pathname} not ready in time`)),
      options.readyTimeoutMs ?? 60_000
    )
    child.on('message', (message: Message) => {
      if (message.type === 'ready') {
        clearTimeout(timer)
        resolve(message.data as Ready)
      } else if (message.type === 'fatal') {
        clearTimeout(timer)
        reject(new Error(message.error))
      } else if (message.type === 'reply') {
        const waiter = pending.get(message.id)
        pending.delete(message.id)
        if (message.ok) waiter?.resolve(message.result)
        else waiter?.reject(new Error(message.error))
      }
    })
    child.once('exit', (code) => {
      exited = true
      clearTimeout(timer)
      reject(new Error(`${script.pathname} exited with ${code}`))
      for (const waiter of pending.values()) waiter.reject(new Error('child exited'))
      pending.clear()
    })
  })
  const data = await ready.catch((error) => {
    if (!exited) child.kill('SIGKILL')
    throw error
  })
  const call = <T>(cmd: string, args?: unknown, timeoutMs = 60_000) =>
    new Promise<T>((resolve, reject) => {
      if (exited) return reject(new Error('child exited'))
      const id = ++nextId
      const timer = setTimeout(() => {
        pending.delete(id)
        reject(new Error(`child call ${cmd} timed out after ${timeoutMs} ms`))
      }, timeoutMs)
      pending.set(id, {
        resolve: (value) => {
          clearTimeout(timer)
          resolve(value)
        },
        reject: (error) => {
          clearTimeout(timer)
          reject(error)
        },
      })
      child.send({ type: 'call', id, cmd, args })
    })
  return {
    ready: data,
    pid: child.pid!,
    call,
    async stop() {
      if (exited) return
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()))
      await call('stop', undefined, 15_000).catch(() => {})
      const timer = setTimeout(() => !exited && child.kill('SIGKILL'), 5000)
      await gone
      clearTimeout(timer)
    },
  }
}

/**
 * The child side: announces `ready`, answers calls with the handlers, and exits after
 * `stop` (whose handler closes what the child opened).
 */
export function serveParent(
  ready: unknown,
  handlers: Record<string, (args: any) => unknown>,
  stop: () => Promise<void>
) {
  const send = (message: Message) => process.send?.(message)
  process.on('message', async (message: { type: 'call'; id: number; cmd: string; args: any }) => {
    if (message?.type !== 'call') return
    if (message.cmd === 'stop') {
      await stop().catch((error) => console.error('bench child: stop failed', error))
      send({ type: 'reply', id: message.id, ok: true, result: null })
      process.disconnect()
      setTimeout(() => process.exit(0), 100).unref()
      return
    }
    const handler = handlers[message.cmd]
    try {
      if (!handler) throw new Error(`unknown command ${message.cmd}`)
      send({ type: 'reply', id: message.id, ok: true, result: await handler(message.args) })
    } catch (error) {
      send({
        type: 'reply',
        id: message.id,
        ok: false,
        error: String((error as Error)?.stack ?? error),
      })
    }
  })
  // The parent died or went away: do not linger.
  process.on('disconnect', () => setTimeout(() => process.exit(0), 2000).unref())
  send({ type: 'ready', data: ready })
}

/** Reports a boot failure to the parent, then exits. */
export function failToParent(error: unknown) {
  process.send?.({ type: 'fatal', error: String((error as Error)?.stack ?? error) })
  setTimeout(() => process.exit(1), 100)
}
