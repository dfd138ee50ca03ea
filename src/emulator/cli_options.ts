import { parseArgs } from 'node:util'
import type { EmulatorOptions, PayoutsEmulator } from './emulator.ts'

/**
 * The flags of the emulator's command line, described once: `svc-payouts-emulator` parses
 * them with node:util, `node ace payouts:emulator` defines its ace flags from them. This file
 * imports no emulator code, so the ace command loads fast.
 */

/** The values of the flags, once defaults and environment variables are applied. */
export interface EmulatorFlagValues {
  port: number
  host: string
  scale: number
  stepMs: number
  apiKey?: string
  seed?: number
  strictWebhooks: boolean
}

/** One flag: its name on the command line, its value's key, type, default and variable. */
export interface EmulatorFlag {
  /** The flag without its dashes: `step-ms`. */
  name: string
  /** Its key in {@link EmulatorFlagValues}. */
  key: keyof EmulatorFlagValues
  type: 'string' | 'number' | 'boolean'
  /** Shown in `--help` as `--name <placeholder>` (a boolean flag takes none). */
  placeholder?: string
  description: string
  default?: string | number | boolean
  /** What `--help` says when the flag has no fixed default. */
  defaultNote?: string
  /** The environment variable read when the flag is absent. */
  env?: string
}

/** Every flag of `svc-payouts-emulator` and `node ace payouts:emulator`, in `--help` order. */
export const EMULATOR_FLAGS: readonly EmulatorFlag[] = [
  {
    name: 'port',
    key: 'port',
    type: 'number',
    placeholder: 'n',
    description: 'Port to listen on; 0 picks a free one',
    default: 4010,
    env: 'PAYOUTS_EMULATOR_PORT',
  },
  {
    name: 'host',
    key: 'host',
    type: 'string',
    placeholder: 'host',
    description: 'Address to bind',
    default: '127.0.0.1',
    env: 'PAYOUTS_EMULATOR_HOST',
  },
  {
    name: 'scale',
    key: 'scale',
    type: 'number',
    placeholder: 'x',
    description: 'Speed of the emulated clock; 60 makes a minute pass each second',
    default: 1,
  },
  {
    name: 'step-ms',
    key: 'stepMs',
    type: 'number',
    placeholder: 'ms',
    description: 'Emulated milliseconds between two steps of a payout',
    default: 2000,
  },
  {
    name: 'api-key',
    key: 'apiKey',
    type: 'string',
    placeholder: 'sk_test_...',
    description: 'Sandbox key of the default account',
    defaultNote: 'derived from --seed, or random',
    env: 'PAYOUTS_EMULATOR_API_KEY',
  },
  {
    name: 'seed',
    key: 'seed',
    type: 'number',
    placeholder: 'n',
    description: 'Keeps the key, the recipient and the payment methods across restarts',
    defaultNote: 'none: random ids',
    env: 'PAYOUTS_EMULATOR_SEED',
  },
  {
    name: 'strict-webhooks',
    key: 'strictWebhooks',
    type: 'boolean',
    description:
      'Refuse loopback webhook URLs, as the service does (without it, delivery to 127.0.0.1 is on)',
    default: false,
  },
]

/** The banner's line while loopback webhook delivery is on (the command line's default). */
export const LOOPBACK_WEBHOOKS_NOTICE =
  'Loopback webhook delivery is on (development only; the service refuses loopback URLs)'

/** The one-line answer to a flag the command line does not know, or a bad value. */
export class EmulatorFlagError extends Error {}

/** Fills absent flags from their environment variable, then their default; checks numbers. */
export function resolveEmulatorFlags(
  given: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env
): EmulatorFlagValues {
  const values: Record<string, string | number | undefined> = {}
  for (const flag of EMULATOR_FLAGS) {
    let value = given[flag.name]
    if (value === undefined || value === '') value = flag.env ? env[flag.env] : undefined
    if (value === undefined || value === '') value = flag.default
    if (flag.type === 'boolean') {
      values[flag.key] = value === true ? 1 : 0
      continue
    }
    if (value !== undefined && flag.type === 'number') {
      const number = Number(value)
      if (!Number.isFinite(number)) {
        throw new EmulatorFlagError(`--${flag.name} must be a number, got '${value}'`)
      }
      value = number
    }
    values[flag.key] = value === undefined ? undefined : (value as string | number)
  }
  return { ...values, strictWebhooks: values.strictWebhooks === 1 } as unknown as EmulatorFlagValues
}

/** A flag's line of help, with its default and variable: `--help` and `node ace` show it. */
export function flagHelp(flag: EmulatorFlag): string {
  const notes = [
    `default ${flag.default ?? flag.defaultNote}`,
    flag.env ? `env ${flag.env}` : '',
  ].filter(Boolean)
  return `${flag.description} (${notes.join('; ')})`
}

/** The text `svc-payouts-emulator --help` prints. */
export function emulatorUsage(): string {
  const rows = EMULATOR_FLAGS.map((flag) => [
    flag.placeholder ? `--${flag.name} <${flag.placeholder}>` : `--${flag.name}`,
    flagHelp(flag),
  ])
  rows.push(['--help', 'Print this help and exit'])
  const width = Math.max(...rows.map(([left]) => left.length)) + 2
  return [
    'Usage: svc-payouts-emulator [options]',
    '',
    'Runs a local, in-memory emulator of the Payout Service (sandbox) until Ctrl-C.',
    '`node ace payouts:emulator` takes the same options.',
    '',
    'Options:',
    ...rows.map(([left, right]) => `  ${left.padEnd(width)}${right}`),
    '',
  ].join('\n')
}

/**
 * Parses `svc-payouts-emulator`'s arguments: `help` for --help, otherwise the flag values.
 * Throws {@link EmulatorFlagError} for an unknown flag, a stray argument or a bad number.
 */
export function parseEmulatorArgs(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env
): { help: true } | { help: false; values: EmulatorFlagValues } {
  let parsed: ReturnType<typeof parseArgs>
  try {
    parsed = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        help: { type: 'boolean', short: 'h' },
        ...Object.fromEntries(
          EMULATOR_FLAGS.map((flag) => [
            flag.name,
            { type: flag.type === 'boolean' ? 'boolean' : 'string' } as const,
          ])
        ),
      },
    })
  } catch (error) {
    // node:util's messages go on with advice about '--'; the first sentence names the culprit.
    throw new EmulatorFlagError((error as Error).message.split('. ')[0])
  }
  if (parsed.values.help) return { help: true }
  return { help: false, values: resolveEmulatorFlags(parsed.values, env) }
}

/** The `PayoutsEmulator.start` options the flags stand for. */
export function emulatorOptions(values: EmulatorFlagValues): EmulatorOptions {
  return {
    port: values.port,
    host: values.host,
    clock: values.scale === 1 ? { mode: 'real' } : { mode: 'scaled', scale: values.scale },
    stepIntervalMs: values.stepMs,
    apiKey: values.apiKey,
    seed: values.seed,
    allowInsecureWebhooks: !values.strictWebhooks,
  }
}

/** A wallet to send stablecoin payouts from: the emulator accepts any address. */
export const EXAMPLE_WALLET = '0x' + '9'.repeat(40)

/**
 * What a user needs to call execute against the started emulator: its URLs, the key, a
 * recipient, and per flow the payment method or wallet to send from.
 */
export function emulatorBanner(
  emulator: PayoutsEmulator,
  recipientId: string,
  values: EmulatorFlagValues
): string[] {
  const methods = emulator.admin.accountPaymentMethods()
  const usd = methods.find((m) => m.currency === 'USD')!.id
  const eur = methods.find((m) => m.currency === 'EUR')!.id
  return [
    `Payouts emulator listening on ${emulator.baseUrl}`,
    `  Base URL:   ${emulator.baseUrl}  (PAYOUTS_BASE_URL)`,
    `  API key:    ${emulator.apiKey}  (PAYOUTS_API_KEY)`,
    `  WebSocket:  ${emulator.wsUrl}`,
    `  Recipient:  ${recipientId}  (recipientId, paid in MXN)`,
    '  POST /rfq/execute, per flow:',
    `    fiat_to_fiat        fromCurrency USD, userPaymentMethodId ${usd}`,
    `                        fromCurrency EUR, userPaymentMethodId ${eur}`,
    `    onramp              toCurrency USDC, userPaymentMethodId ${usd}`,
    `    stablecoin_to_fiat  fromCurrency USDC, walletAddress ${EXAMPLE_WALLET} (any wallet)`,
    `  Controls:   ${emulator.baseUrl}/__emulator (see docs/emulator.md)`,
    ...(values.strictWebhooks ? [] : [`  ${LOOPBACK_WEBHOOKS_NOTICE}`]),
    values.seed === undefined
      ? '  Seed:       none: the key and ids change at each start (pass --seed to keep them)'
      : `  Seed:       ${values.seed}: the same key and ids at every start`,
    'Stop with Ctrl-C.',
  ]
}

/**
 * Starts the emulator the flags describe and seeds one recipient; answers the emulator and
 * the banner to print. Shared by `svc-payouts-emulator` and `node ace payouts:emulator`.
 */
export async function startEmulatorFromFlags(values: EmulatorFlagValues) {
  const { PayoutsEmulator } = await import('./emulator.ts')
  const emulator = await PayoutsEmulator.start(emulatorOptions(values))
  const recipient = emulator.admin.seedRecipient({ name: 'Emulator Recipient', currency: 'MXN' })
  return { emulator, banner: emulatorBanner(emulator, recipient.id, values) }
}
