import { readdir, readFile } from 'node:fs/promises'
import type Configure from '@adonisjs/core/commands/configure'
import { API_KEY_PATTERN, DEFAULT_TABLE_PREFIX, DEFAULT_WEBHOOK_PATH } from './src/constants.ts'
import { stubsRoot } from './stubs/main.ts'

const SANDBOX_DEFAULT_URL = 'http://127.0.0.1:4010'

/** Reads a file of the host app, or '' when it does not exist. */
function readAppFile(command: Configure, path: string) {
  return readFile(command.app.makePath(path), 'utf8').catch(() => '')
}

/**
 * Where the job locks go, borrowing the app's services: the default store of its
 * `@adonisjs/lock` (config/lock.ts), else the default connection of its `@adonisjs/redis`
 * (config/redis.ts); neither: the config reads PAYOUTS_REDIS_URL for a client of their own.
 */
async function jobLocksOf(command: Configure) {
  const read = (file: string) => readFile(command.app.configPath(file), 'utf8').catch(() => '')
  const lockStore = (await read('lock.ts')) !== ''
  const redis = lockStore ? '' : await read('redis.ts')
  const redisConnection = redis
    ? (/\bconnection:\s*['"]([A-Za-z][\w-]*)['"]/.exec(redis)?.[1] ?? 'main')
    : ''
  return { lockStore, redisConnection, redisUrl: !lockStore && !redisConnection }
}

/**
 * Adds the webhook route to `csrf.exceptRoutes` in config/shield.ts (when Shield is
 * installed): the service cannot send a CSRF token. Returns false when the file has a
 * shape we do not recognise, so the caller prints the manual step instead.
 */
async function exceptFromCsrf(command: Configure, project: any): Promise<boolean> {
  const file = project?.addSourceFileAtPathIfExists(command.app.configPath('shield.ts'))
  if (!file) return true
  // Kind names, not SyntaxKind: ts-morph is the host app's (through the assembler).
  const csrf = file
    .getDescendants()
    .find((node: any) => node.getKindName() === 'PropertyAssignment' && node.getName() === 'csrf')
    ?.getInitializer()
  if (csrf?.getKindName() !== 'ObjectLiteralExpression') return false
  const except = csrf.getProperty('exceptRoutes')
  if (!except) {
    csrf.addPropertyAssignment({ name: 'exceptRoutes', initializer: `['${DEFAULT_WEBHOOK_PATH}']` })
  } else {
    const list = except.getInitializer?.()
    if (list?.getKindName() !== 'ArrayLiteralExpression') return false
    const quoted = (text: string) => text.slice(1, -1)
    if (list.getElements().some((el: any) => quoted(el.getText()) === DEFAULT_WEBHOOK_PATH))
      return true
    list.addElement(`'${DEFAULT_WEBHOOK_PATH}'`)
  }
  await file.save()
  return true
}

/**
 * `node ace configure @svc/adonis-payouts`: publishes config/payouts.ts, the migrations
 * (tables, indexes, leases, then trace context) and the start/payouts.ts preload (webhook
 * route, Transmit channels), registers the provider, commands and preload, declares the env
 * variables (the key and the webhook secret as `Env.schema.secret()`), keeps the job locks in
 * the app's @adonisjs/lock or @adonisjs/redis when it has one, and exempts the webhook route
 * from CSRF. Every prompt has a flag (`--base-url`, `--api-key`), so it runs unattended;
 * running it twice changes nothing.
 */
export async function configure(command: Configure) {
  let baseUrl = command.parsedFlags['base-url'] as string | undefined
  // Without a terminal (CI, Docker builds, `</dev/null`) a prompt would read nothing.
  const missing = baseUrl === undefined ? ['--base-url'] : []
  if (missing.length > 0 && !process.stdin.isTTY) {
    command.logger.error(
      `No terminal to ask on: pass ${missing.join(', ')} (e.g. --base-url=${SANDBOX_DEFAULT_URL}); nothing was written`
    )
    command.exitCode = 1
    return
  }
  if (baseUrl === undefined) {
    baseUrl = await command.prompt.ask('Base URL of the Payout Service (the emulator by default)', {
      default: SANDBOX_DEFAULT_URL,
    })
  }
  if (!baseUrl || !URL.canParse(baseUrl)) {
    command.logger.error(`"${baseUrl}" is not a valid URL`)
    command.exitCode = 1
    return
  }
  const apiKey = (command.parsedFlags['api-key'] as string | undefined) ?? ''
  if (apiKey && !API_KEY_PATTERN.test(apiKey)) {
    command.logger.error(
      '--api-key must be sk_test_ or sk_live_ followed by 43 url-safe characters'
    )
    command.exitCode = 1
    return
  }

  const rcFile = await readAppFile(command, 'adonisrc.ts')
  const hasTransmit = rcFile.includes('@adonisjs/transmit/transmit_provider')
  if (!rcFile.includes('@adonisjs/lucid/database_provider')) {
    command.logger.warning(
      '@adonisjs/lucid is not installed: the ledger needs it (node ace add @adonisjs/lucid)'
    )
  }

  const jobLocks = await jobLocksOf(command)
  const codemods = await command.createCodemods()
  await codemods.makeUsingStub(stubsRoot, 'config/payouts.stub', {
    webhookPath: DEFAULT_WEBHOOK_PATH,
    prefix: DEFAULT_TABLE_PREFIX,
    ...jobLocks,
  })
  await codemods.makeUsingStub(stubsRoot, 'start/payouts.stub', { transmit: hasTransmit })

  // Each migration once: a second run finds them and publishes nothing. An app whose tables
  // an earlier version created gets the later migrations alone (run configure again).
  const migrations = await readdir(command.app.makePath('database/migrations')).catch(() => [])
  const stamp = Date.now()
  const publish = [
    { name: 'create_payouts_tables', at: stamp },
    { name: 'add_payouts_indexes', at: stamp + 1 },
    { name: 'add_payouts_leases', at: stamp + 2 },
    { name: 'add_payouts_trace_context', at: stamp + 3 },
    { name: 'add_payouts_accounts', at: stamp + 4 },
    { name: 'add_payouts_provider_metadata_at', at: stamp + 5 },
    { name: 'add_payouts_provider_metadata_due', at: stamp + 6 },
  ]
  for (const { name, at } of publish) {
    if (migrations.some((file) => file.endsWith(`_${name}.ts`))) continue
    await codemods.makeUsingStub(stubsRoot, `migrations/${name}.stub`, {
      prefix: DEFAULT_TABLE_PREFIX,
      migration: { folder: 'database/migrations', fileName: `${at}_${name}.ts` },
    })
  }

  await codemods.updateRcFile((rc) => {
    rc.addProvider('@svc/adonis-payouts/payouts_provider')
    rc.addCommand('@svc/adonis-payouts/commands')
    rc.addPreloadFile('#start/payouts')
  })
  // The codemods only warn when they cannot edit a file (no @adonisjs/assembler, a shape
  // they do not know): without the provider nothing works, so that is no success.
  const updatedRc = await readAppFile(command, 'adonisrc.ts')
  if (!updatedRc.includes('@svc/adonis-payouts/payouts_provider')) {
    command.logger.error(
      'adonisrc.ts was not updated: install @adonisjs/assembler as a dev dependency (or register ' +
        "'@svc/adonis-payouts/payouts_provider', '@svc/adonis-payouts/commands' and " +
        "'#start/payouts' by hand), then run configure again"
    )
    command.exitCode = 1
    return
  }

  // Only the variables .env lacks: a second run must not rewrite the file. The key and
  // the secret stay empty in .env.example.
  const envFile = await readAppFile(command, '.env')
  const variables = Object.fromEntries(
    Object.entries({
      PAYOUTS_API_KEY: apiKey,
      PAYOUTS_BASE_URL: baseUrl,
      PAYOUTS_WEBHOOK_SECRET: '',
    }).filter(([name]) => !new RegExp(`^${name}=`, 'm').test(envFile))
  )
  if (Object.keys(variables).length > 0) {
    await codemods.defineEnvVariables(variables, { omitFromExample: ['PAYOUTS_API_KEY'] })
  }
  // The key and the webhook secret are Secrets: printed or logged, they show [redacted].
  await codemods.defineEnvValidations({
    leadingComment: 'Variables for configuring @svc/adonis-payouts',
    variables: {
      PAYOUTS_API_KEY: 'Env.schema.secret.optional()',
      PAYOUTS_BASE_URL: 'Env.schema.string({ format: "url", tld: false })',
      PAYOUTS_WEBHOOK_SECRET: 'Env.schema.secret.optional()',
      ...(jobLocks.redisUrl ? { PAYOUTS_REDIS_URL: 'Env.schema.secret.optional()' } : {}),
      PAYOUTS_PROCESSING: "Env.schema.enum.optional(['inline', 'worker'] as const)",
    },
  })

  const csrfDone = await exceptFromCsrf(command, await codemods.getTsMorphProject())
  if (!csrfDone) {
    command.logger.warning(`Add '${DEFAULT_WEBHOOK_PATH}' to csrf.exceptRoutes in config/shield.ts`)
  }

  command.logger.success('Payouts configured. Next steps:')
  if (!apiKey && !/^PAYOUTS_API_KEY=\S/m.test(envFile)) {
    command.logger.log('  - Set PAYOUTS_API_KEY (sk_test_... for the sandbox) in .env')
  }
  command.logger.log('  - node ace migration:run')
  command.logger.log(
    `  - node ace payouts:webhooks:create --url https://your.app${DEFAULT_WEBHOOK_PATH}`
  )
  if (hasTransmit) {
    command.logger.log(
      '  - Decide who may watch payouts: the channel callbacks in start/payouts.ts'
    )
  }
}
