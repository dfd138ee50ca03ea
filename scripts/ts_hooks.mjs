/**
 * This repository's TypeScript files, run in the process's own thread:
 * `node --import=./scripts/ts_hooks.mjs file.ts`. The test runner, its Japa processes and the
 * child processes the tests start (hundreds of them) use it in place of
 * `--import=@poppinss/ts-exec`, with the same compiler (SWC) and the options ts-exec derives
 * from this repository's tsconfig.json.
 *
 * Why: ts-exec registers its hooks with `module.register`, which runs them on a separate
 * loader thread, and every module the process imports (the hundreds of AdonisJS and Lucid
 * files too, not only ours) makes a round trip to that thread. Booting the plugin's host app
 * took 1.4 s of CPU that way on this repository's 2-core machine, and 0.8 s with the same
 * transform in `module.registerHooks` (synchronous, in-thread; Node 24): as fast as the
 * compiled JavaScript. Most of `npm test`'s time is such boots.
 *
 * Where how the process starts is what a test is about (the example app, a process manager's
 * signals, the modules a command loads), the test keeps ts-exec, as an app's `ace.js` does.
 *
 * Only for this repository: it is not in the published package.
 */
import { registerHooks } from 'node:module'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { transformSync } from '@swc/core'

/** What ts-exec 1.4 derives from tsconfig.json (decorators with metadata, for the container). */
const SWC_OPTIONS = {
  sourceMaps: true,
  module: { type: 'es6' },
  jsc: {
    target: 'esnext',
    externalHelpers: false,
    parser: { syntax: 'typescript', tsx: false, decorators: true, dynamicImport: true },
    transform: { decoratorMetadata: true, legacyDecorator: true, useDefineForClassFields: true },
    experimental: { keepImportAttributes: true },
    keepClassNames: true,
  },
}

/** A TypeScript module of this repository or of an app in it (not a declaration file). */
function isTypeScript(url) {
  return url.startsWith('file:') && /\.m?ts$/.test(url) && !url.endsWith('.d.ts')
}

process.setSourceMapsEnabled(true)

registerHooks({
  /**
   * A `.js` path that names no file is tried as `.ts` (`.mjs` as `.mts`), as ts-exec does: an
   * ace commands index names the compiled files (commands/main.ts imports `./x.js`).
   */
  resolve(specifier, context, nextResolve) {
    try {
      return nextResolve(specifier, context)
    } catch (error) {
      const url = error?.code === 'ERR_MODULE_NOT_FOUND' ? error.url : undefined
      if (!url?.startsWith('file:') || !/\.m?js$/.test(url)) throw error
      try {
        return nextResolve(url.replace(/js$/, 'ts'), context)
      } catch {
        throw error
      }
    }
  },
  load(url, context, nextLoad) {
    if (!isTypeScript(url)) return nextLoad(url, context)
    const filename = fileURLToPath(url)
    const { code, map } = transformSync(readFileSync(filename, 'utf8'), {
      filename,
      ...SWC_OPTIONS,
    })
    const sourceMap = Buffer.from(map ?? '{}').toString('base64')
    return {
      format: 'module',
      shortCircuit: true,
      source: `${code}\n\n//# sourceMappingURL=data:application/json;base64,${sourceMap}\n\n//# sourceURL=${url}`,
    }
  },
})
