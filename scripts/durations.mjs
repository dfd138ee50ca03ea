/**
 * Writes tests/durations.json from the output of a whole `npm test` run, which scripts/test.mjs
 * reads to start the longest files first:
 *
 *   npm test > /tmp/test.log; node scripts/durations.mjs /tmp/test.log "the log of <when, commit>"
 *
 * A file's seconds are the sum of its tests' times as Japa prints them ("(8s)", "(1m)", "(120ms)")
 * under each of its groups' headers. A file the log does not show (skipped, or not run) keeps
 * the figure it had.
 *
 * Only for this repository: it is not in the published package.
 */
import { readFileSync, writeFileSync } from 'node:fs'

const [logFile, about] = process.argv.slice(2)
if (!logFile || !about) {
  process.stderr.write('usage: node scripts/durations.mjs <log of npm test> "<which run it was>"\n')
  process.exit(2)
}

const lines = readFileSync(logFile, 'utf8')
  .replace(/\x1b\[[0-9;]*[A-Za-z]/g, '')
  .split('\n')
const UNITS = { ms: 0.001, s: 1, m: 60 }
const seconds = {}
let file = null
for (const line of lines) {
  const header = / \((tests\/\S+\.spec\.ts)\)$/.exec(line)
  if (header) {
    file = header[1]
    seconds[file] ??= 0
    continue
  }
  const test = /^\s+✔ .*\((\d+(?:\.\d+)?)(ms|s|m)\)$/.exec(line)
  if (test && file) seconds[file] += Number(test[1]) * UNITS[test[2]]
}

const path = new URL('../tests/durations.json', import.meta.url)
const kept = JSON.parse(readFileSync(path, 'utf8')).files ?? {}
const files = { ...kept }
for (const [name, value] of Object.entries(seconds)) files[name] = Math.round(value * 10) / 10
const sorted = Object.fromEntries(Object.entries(files).sort(([a], [b]) => a.localeCompare(b)))
const text = JSON.stringify(
  {
    about: `Seconds each spec file's tests took in one whole run of the suite on SQLite (${about}): scripts/test.mjs starts the longest first. A file missing here counts as 10 s. Written by scripts/durations.mjs.`,
    files: sorted,
  },
  null,
  2
)
writeFileSync(path, `${text}\n`)
process.stdout.write(
  `${Object.keys(seconds).length} files measured, ${Object.keys(sorted).length} in tests/durations.json\n`
)
