/*
|--------------------------------------------------------------------------
| JavaScript entrypoint for running ace commands
|--------------------------------------------------------------------------
|
| Node cannot run the TypeScript source by itself: this file registers the
| ts-exec hook with the Node.js module system, then imports bin/console.ts.
|
*/

import '@poppinss/ts-exec'

await import('./bin/console.ts')
