/**
 * Rewrites build/commands/main.d.ts after `adonis-kit index build/commands`.
 *
 * The generator copies @adonisjs/ace's `commands_loader_types.stub`, which imports `Command`
 * from `@adonisjs/ace/types`: ace exports no such type, so the file fails to type-check in an
 * app with `skipLibCheck: false` (TS2305), and it names `@adonisjs/ace`, which the app reaches
 * only through `@adonisjs/core`. Every official package (core, lucid, queue...) ships that same
 * file and relies on `skipLibCheck: true`. Ours declares the loader that main.js implements with
 * the types `@adonisjs/core` re-exports: `getCommand` resolves to a command class or null.
 *
 * Only for the build: it is not in the published package.
 */
import { readFileSync, writeFileSync } from 'node:fs'

const dir = new URL('../build/commands/', import.meta.url)
const loader = readFileSync(new URL('main.js', dir), 'utf8')
for (const name of ['getMetaData', 'getCommand']) {
  if (!new RegExp(`export async function ${name}\\(`).test(loader)) {
    console.error(`build/commands/main.js does not export ${name}: the ace index changed shape`)
    process.exit(1)
  }
}

writeFileSync(
  new URL('main.d.ts', dir),
  `import type { BaseCommand } from '@adonisjs/core/ace'
import type { CommandMetaData } from '@adonisjs/core/types/ace'

export function getMetaData(): Promise<CommandMetaData[]>
export function getCommand(metaData: CommandMetaData): Promise<typeof BaseCommand | null>
`
)
console.log('rewrite main.d.ts (types from @adonisjs/core)')
