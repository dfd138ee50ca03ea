import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import type { HttpContext } from '@adonisjs/core/http'
import env from '#start/env'
import payouts from '@svc/adonis-payouts/services/main'
import { EscrowDeposit, Payout, PayoutEvent } from '@svc/adonis-payouts/models'

const OWNER = 'demo-tenant'

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

let recipient: { remoteId: string } | undefined

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
    return rows.map((row) => ({
      ...row.serialize(),
      // This page belongs to the owner, so it may show the owner's instructions.
      instructions: row.instructions,
      escrow: deposits.find((d) => d.payoutUuid === row.payoutUuid)?.serialize() ?? null,
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

  /** The plugin's health report (what `node ace payouts:status` prints), for the page. */
  async health() {
    return payouts.health()
  }

  async events({ params }: HttpContext) {
    return PayoutEvent.query().where('payout_uuid', params.id).where('applied', true).orderBy('id')
  }

  async store({ request, response }: HttpContext) {
    const flow = request.input('flow', 'fiat_to_fiat') as string
    const amount = Number(request.input('amount', 100))
    recipient ??= await payouts.recipients.create(
      { name: 'Ana Demo', currency: 'MXN' },
      { ownerId: OWNER }
    )
    const emulatorState = await emulatorAdmin('/state')
    const [method] = emulatorState.accountPaymentMethods ?? []
    const common = {
      amount,
      recipientId: recipient.remoteId,
      // The form sends '' (null after the bodyparser) when no reference is given.
      reference: request.input('reference') ?? undefined,
    }
    const bodies: Record<string, any> = {
      fiat_to_fiat: {
        ...common,
        fromCurrency: 'USD',
        toCurrency: 'MXN',
        userPaymentMethodId: method?.id,
      },
      stablecoin_to_fiat: {
        ...common,
        fromCurrency: 'USDC',
        toCurrency: 'MXN',
        walletAddress: '0x' + 'd3'.repeat(20),
      },
      onramp: {
        ...common,
        fromCurrency: 'USD',
        toCurrency: 'USDC',
        userPaymentMethodId: method?.id,
      },
    }
    if (!bodies[flow]) return response.badRequest({ error: `unknown flow ${flow}` })
    try {
      const { payout } = await payouts.execute(bodies[flow], { ownerId: OWNER })
      return { payoutId: payout.payoutUuid }
    } catch (error) {
      return response.unprocessableEntity({ error: (error as Error).message })
    }
  }

  async simulateDeposit({ params, response }: HttpContext) {
    const deposit = await EscrowDeposit.findBy('payoutUuid', params.id)
    if (!deposit) return response.notFound({ error: 'no escrow deposit for this payout' })
    const result = await emulatorAdmin('/deposits', { quoteId: deposit.quoteId })
    await payouts.escrow.recordDeposit({ quoteId: deposit.quoteId, txHash: result.txHash })
    return result
  }
}
