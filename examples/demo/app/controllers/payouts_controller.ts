import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { Exception } from '@adonisjs/core/exceptions'
import type { HttpContext } from '@adonisjs/core/http'
import env from '#start/env'
import { apiErrors } from '@svc/adonis-payouts'
import payouts from '@svc/adonis-payouts/services/main'
import { EscrowDeposit, Payout, PayoutEvent, Recipient } from '@svc/adonis-payouts/models'
import RecordPayoutActivity from '#listeners/record_payout_activity'

const OWNER = 'demo-tenant'
const FLOWS = ['fiat_to_fiat', 'stablecoin_to_fiat', 'onramp']

/** The emulator's admin API (the demo's stand-in for a wallet and a bank). */
async function emulatorAdmin(path: string, body?: unknown) {
  const base = `${env.get('PAYOUTS_BASE_URL').replace(/\/$/, '')}/__emulator`
  const response = await fetch(`${base}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  return response.json() as Promise<any>
}

/** The emulator's first account payment method (the demo's stand-in for the user's bank). */
async function firstPaymentMethod(): Promise<string | undefined> {
  const state = await emulatorAdmin('/state')
  return state.accountPaymentMethods?.[0]?.id
}

/** The demo owner's recipient: the one in the plugin's mirror table, or a new one. */
async function demoRecipient() {
  const mirrored = await Recipient.query()
    .where('owner_id', OWNER)
    .whereNull('deleted_at')
    .orderBy('id')
    .first()
  return (
    mirrored ?? payouts.recipients.create({ name: 'Ana Demo', currency: 'MXN' }, { ownerId: OWNER })
  )
}
let coverage: Promise<unknown> | undefined

/**
 * What the service says of a failed payout. The spec has no failure reason: the ledger keeps
 * the last step reached, and a read (GET /payouts/{id}) gives providerMetadata, whose legs
 * carry a status. A failed payout never changes again, so it is read once.
 */
const failureReads = new Map<string, Promise<Record<string, unknown> | null>>()
async function failureOf(row: Payout) {
  if (row.status !== 'failed') return null
  let read = failureReads.get(row.payoutUuid)
  if (!read) {
    read = payouts.client.getPayout(row.payoutUuid).then(
      (remote) => (remote.providerMetadata as Record<string, unknown> | undefined) ?? null,
      () => {
        failureReads.delete(row.payoutUuid)
        return null
      }
    )
    failureReads.set(row.payoutUuid, read)
  }
  return { lastStep: row.step, providerMetadata: await read }
}

/** The demo's page, its data and health report, and the three flows. */
export default class PayoutsController {
  async page({ response }: HttpContext) {
    const html = await readFile(new URL('../../public/index.html', import.meta.url), 'utf8')
    response.header('content-type', 'text/html; charset=utf-8').send(html)
  }

  async transmitClient({ response }: HttpContext) {
    const file = fileURLToPath(import.meta.resolve('@adonisjs/transmit-client'))
    response
      .header('content-type', 'text/javascript; charset=utf-8')
      .send(await readFile(file, 'utf8'))
  }

  async index() {
    const rows = await Payout.query().where('owner_id', OWNER).orderBy('id', 'desc').limit(50)
    const ids = rows.map((row) => row.payoutUuid)
    const deposits = await EscrowDeposit.query().whereIn('payout_uuid', ids)
    // The steps each payout really went through, with when we learned of them.
    const changes = await PayoutEvent.query()
      .whereIn('payout_uuid', ids)
      .where('applied', true)
      .orderBy('id')
    const failures = await Promise.all(rows.map((row) => failureOf(row)))
    return rows.map((row, index) => ({
      ...row.serialize(),
      // This page belongs to the owner, so it may show the owner's instructions
      // (banking instructions or a payment URL, as the execute response gave them).
      instructions: row.instructions,
      escrow: deposits.find((d) => d.payoutUuid === row.payoutUuid)?.serialize() ?? null,
      failure: failures[index],
      timeline: changes
        .filter((change) => change.payoutUuid === row.payoutUuid)
        .map((change) => ({
          step: change.step,
          status: change.status,
          source: change.source,
          at: change.observedAt.toISO(),
        })),
    }))
  }

  /** The service's coverage matrix (currencies, their decimals, tokens, chains). */
  async coverage() {
    coverage ??= payouts.client.getCoverage().catch((error) => {
      coverage = undefined
      throw error
    })
    return coverage
  }

  /** The plugin's health report (what `node ace payouts:status` prints), for the page. */
  async health() {
    return payouts.health()
  }

  async events({ params }: HttpContext) {
    return PayoutEvent.query().where('payout_uuid', params.id).where('applied', true).orderBy('id')
  }

  async store({ request, response, logger }: HttpContext) {
    const flow = request.input('flow', 'fiat_to_fiat') as string
    if (!FLOWS.includes(flow)) return response.badRequest({ error: `unknown flow ${flow}` })
    try {
      const recipient = await demoRecipient()
      // The user's funding account: the form's, else the emulator's first one (fiat flows).
      const userPaymentMethodId =
        flow === 'stablecoin_to_fiat'
          ? undefined
          : (request.input('userPaymentMethodId') ?? (await firstPaymentMethod()))
      const body = {
        amount: Number(request.input('amount', 100)),
        recipientId: recipient.remoteId,
        // The form sends '' (null after the bodyparser) when no reference is given.
        reference: request.input('reference') ?? undefined,
        fromCurrency: flow === 'stablecoin_to_fiat' ? 'USDC' : 'USD',
        // The currency paid out (fiat flows) or bought (onramp); the service checks it.
        toCurrency: request.input('toCurrency') || (flow === 'onramp' ? 'USDC' : 'MXN'),
        ...(userPaymentMethodId ? { userPaymentMethodId } : {}),
        ...(flow === 'stablecoin_to_fiat' ? { walletAddress: '0x' + 'd3'.repeat(20) } : {}),
      } as Parameters<typeof payouts.execute>[0]
      // A retried request (same Idempotency-Key) answers the same payout, never a second one.
      const { payout } = await payouts.execute(body, {
        ownerId: OWNER,
        idempotencyKey: request.header('idempotency-key'),
      })
      return { payoutId: payout.payoutUuid }
    } catch (error) {
      // Refused input (by the plugin or the service) is the user's to fix: 422. Anything else
      // (the service unreachable or failing) is not: 502, and the same request may be retried.
      const status = (error as { status?: number }).status ?? 500
      // The plugin's and the client's errors say what happened without secrets; any other
      // error (a database's holds its statement's values: names, payment methods) stays in
      // the log.
      const told = error instanceof Exception || error instanceof apiErrors.PayoutsError
      if (!told) logger.error({ err: error }, 'payout not executed')
      return response.status(status >= 400 && status < 500 ? 422 : 502).send({
        error: told
          ? (error as Error).message
          : 'the payout could not be executed (see the app log)',
      })
    }
  }

  /** What the app's listener heard: finished payouts, newest first. */
  async activity() {
    return RecordPayoutActivity.recent
  }

  async simulateDeposit({ params, response }: HttpContext) {
    const deposit = await EscrowDeposit.findBy('payoutUuid', params.id)
    if (!deposit) return response.notFound({ error: 'no escrow deposit for this payout' })
    const result = await emulatorAdmin('/deposits', { quoteId: deposit.quoteId })
    await payouts.escrow.recordDeposit({ quoteId: deposit.quoteId, txHash: result.txHash })
    return result
  }
}
