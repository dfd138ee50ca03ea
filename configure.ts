import { readdir, readFile } from 'node:fs/promises'
import type Configure from '@adonisjs/core/commands/configure'
import { stubsRoot } from './stubs/main.ts'

const SANDBOX_DEFAULT_URL = 'http://127.0.0.1:4010'

/**
 * `node ace configure @svc/adonis-payouts`: publishes the config, registers the provider
 * and commands, and declares the env variables. Every prompt has a flag
 * (`--base-url`), so it runs unattended; running it twice changes nothing.
 */
export async function configure(command: Configure) {
  let baseUrl: string | undefined = command.parsedFlags['base-url'] as string | undefined
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

  const codemods = await command.createCodemods()
  await codemods.makeUsingStub(stubsRoot, 'config/payouts.stub', {})

  // One migration, once: a second run finds it and publishes nothing.
  const migrations = await readdir(command.app.makePath('database/migrations')).catch(() => [])
  if (!migrations.some((file) => file.endsWith('_create_payouts_tables.ts'))) {
    await codemods.makeUsingStub(stubsRoot, 'migrations/create_payouts_tables.stub', {
      prefix: 'svc_',
      migration: {
        folder: 'database/migrations',
        fileName: `${Date.now()}_create_payouts_tables.ts`,
      },
    })
  }
  await codemods.updateRcFile((rcFile) => {
    rcFile.addProvider('@svc/adonis-payouts/payouts_provider')
    rcFile.addCommand('@svc/adonis-payouts/commands')
  })
  // Only the variables .env lacks: a second run must not rewrite the file.
  const envFile = await readFile(command.app.makePath('.env'), 'utf8').catch(() => '')
  const variables = Object.fromEntries(
    Object.entries({
      PAYOUTS_API_KEY: '',
      PAYOUTS_BASE_URL: baseUrl,
      PAYOUTS_WEBHOOK_SECRET: '',
    }).filter(([name]) => !new RegExp(`^${name}=`, 'm').test(envFile))
  )
  if (Object.keys(variables).length > 0) await codemods.defineEnvVariables(variables)
  await codemods.defineEnvValidations({
    leadingComment: 'Variables for configuring @svc/adonis-payouts',
    variables: {
      PAYOUTS_API_KEY: 'Env.schema.string()',
      PAYOUTS_BASE_URL: 'Env.schema.string({ format: "url", tld: false })',
      PAYOUTS_WEBHOOK_SECRET: 'Env.schema.string.optional()',
    },
  })

  command.logger.success('Payouts configured. Next steps:')
  command.logger.log('  1. Set PAYOUTS_API_KEY (sk_test_... for the sandbox) in .env')
  command.logger.log('  2. node ace migration:run')
  command.logger.log(
    '  3. node ace payouts:webhooks:create --url https://your.app/webhooks/payouts'
  )
}
