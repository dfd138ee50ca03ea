/**
 * How a test's child process runs this repository's TypeScript: the `--import` of
 * scripts/ts_hooks.mjs (ts-exec's transform, in the process's own thread), from any folder.
 * Where how the process starts is what a test is about (the example app, a process manager's
 * signals to `node ace payouts:work`, the modules a command loads), the child keeps
 * `--import=@poppinss/ts-exec`, as an app's `ace.js` does.
 */
export const TS_HOOKS = `--import=${new URL('../../scripts/ts_hooks.mjs', import.meta.url).href}`
