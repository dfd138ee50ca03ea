import 'reflect-metadata'
import { assert } from '@japa/assert'
import { fileSystem } from '@japa/file-system'
import { expectTypeOf } from '@japa/expect-type'
import { configure, processCLIArgs, run } from '@japa/runner'
import { removeSqliteFiles } from '../tests/helpers/database.ts'
import { SCRATCH_URL } from '../tests/helpers/scratch.ts'

/**
 * Japa entry point. TEST_DB=pg runs the database suites on PostgreSQL, TEST_DB=mysql on
 * MySQL/MariaDB, instead of the embedded SQLite default.
 */
processCLIArgs(process.argv.splice(2))
configure({
  files: ['tests/**/*.spec.ts'],
  plugins: [
    assert(),
    // tests/tmp/, or its own in each process of `npm test` (scripts/test.mjs).
    fileSystem({ basePath: SCRATCH_URL }),
    expectTypeOf(),
  ],
  timeout: 30_000,
  teardown: [removeSqliteFiles],
  forceExit: true,
})

run()
