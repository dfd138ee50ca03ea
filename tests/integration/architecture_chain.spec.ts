import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { test } from '@japa/runner'

/**
 * docs/architecture.md draws the way of a webhook and of an execute as call chains, one
 * block per stage, each line a file and what runs there, a call indented under its caller.
 * This spec holds the drawing to the code: every file exists, every call goes down an import
 * of the caller (or, marked `~`, through an object the wiring gave it, whose file the caller
 * does not import), and no stage enters a file twice.
 */

const ROOT = resolve(import.meta.dirname, '../..')
const SRC = join(ROOT, 'src')

interface ChainLine {
  depth: number
  file: string
  symbol: string
  given: boolean
  line: number
}

/** The blocks under `<!-- chain: name -->` markers, parsed into lines. */
function chains(markdown: string): Map<string, ChainLine[]> {
  const found = new Map<string, ChainLine[]>()
  const lines = markdown.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const marker = lines[i].match(/^<!-- chain: ([\w/: -]+) -->$/)
    if (!marker) continue
    if (lines[i + 1] !== '```') throw new Error(`chain ${marker[1]}: a fence must follow`)
    const chain: ChainLine[] = []
    for (let j = i + 2; lines[j] !== '```'; j++) {
      if (j >= lines.length) throw new Error(`chain ${marker[1]}: unclosed`)
      const text = lines[j]
      // A continuation of the note column (deeply indented, no file) belongs to the line above.
      const parsed = text.match(/^( *)(~)?([\w/]+\.ts) +(\S+)/)
      if (!parsed) {
        if (/^ {20,}\S/.test(text) || text.trim() === '') continue
        throw new Error(`chain ${marker[1]}: unreadable line ${j + 1}: ${text}`)
      }
      if (parsed[1].length % 2 !== 0) throw new Error(`line ${j + 1}: odd indentation`)
      chain.push({
        depth: parsed[1].length / 2,
        given: parsed[2] === '~',
        file: parsed[3],
        symbol: parsed[4],
        line: j + 1,
      })
    }
    found.set(marker[1], chain)
  }
  return found
}

/** The files a source file imports (static, dynamic, type, re-export), relative to src/. */
function importsOf(file: string): { all: Set<string>; values: Set<string> } {
  const source = readFileSync(join(SRC, file), 'utf8')
  const all = new Set<string>()
  const values = new Set<string>()
  const pattern =
    /(?:^|\n)\s*(import|export)(\s+type)?[^'"]*?from\s+'(\.[^']+)'|import\('(\.[^']+)'\)/g
  for (const match of source.matchAll(pattern)) {
    const target = match[3] ?? match[4]
    const path = relative(SRC, resolve(dirname(join(SRC, file)), target))
    all.add(path)
    if (!match[2]) values.add(path)
  }
  return { all, values }
}

const markdown = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8')
const drawn = chains(markdown)

test.group('Architecture | the call chains drawn in docs/architecture.md', () => {
  test('the webhook (receive, process, notify) and the execute are drawn', ({ assert }) => {
    assert.includeMembers(
      [...drawn.keys()],
      ['webhook: receive', 'webhook: process', 'webhook: notify', 'execute']
    )
  })

  for (const [name, chain] of drawn) {
    test(`${name}: every file named exists`, ({ assert }) => {
      assert.isAbove(chain.length, 2)
      for (const { file, line } of chain) {
        assert.isTrue(existsSync(join(SRC, file)), `line ${line}: src/${file} does not exist`)
      }
    })

    test(`${name}: every call goes down an import, or through what the wiring gave`, ({
      assert,
    }) => {
      const wiring = importsOf('service/wiring.ts').all
      for (const [index, callee] of chain.entries()) {
        if (callee.depth === 0) continue
        const caller = chain.slice(0, index).findLast((line) => line.depth === callee.depth - 1)
        assert.exists(caller, `line ${callee.line}: indented under nothing`)
        const { all, values } = importsOf(caller!.file)
        const where = `line ${callee.line}: ${caller!.file} -> ${callee.file}`
        if (callee.given) {
          assert.isFalse(values.has(callee.file), `${where}: drawn as given, but imported`)
          assert.isTrue(
            wiring.has(callee.file) || importsOf(callee.file).all.has(caller!.file),
            `${where}: given, but neither built by the wiring nor implementing the caller's interface`
          )
        } else {
          assert.isTrue(all.has(callee.file), `${where}: the caller does not import it`)
        }
        assert.isFalse(
          importsOf(callee.file).values.has(caller!.file),
          `${where}: the callee imports its caller (a call up)`
        )
      }
    })

    test(`${name}: each file is entered once`, ({ assert }) => {
      const files = chain.map(({ file }) => file)
      const twice = files.filter((file, index) => files.indexOf(file) !== index)
      assert.deepEqual(twice, [], `entered more than once in ${name}`)
    })
  }
})
