import { PayoutsClient, type PayoutsClientOptions } from '../../src/client/main.ts'
import { startScriptedServer } from '../helpers/scripted_server.ts'

export const KEY = `sk_test_${'k'.repeat(40)}AbC`
export const RECIPIENT = '5b2a1f7e-2f7c-4d1e-9a4b-1f2e3d4c5b6a'
export const METHOD = '9c8b7a6f-5e4d-4c3b-8a29-180f0e0d0c0b'
export const QUOTE = '1e2d3c4b-5a69-4788-9a6b-5c4d3e2f1a0b'
export const PAYOUT = '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d'

/** A client wired for tests: no real waits (sleeps are recorded), no limiter. */
export function testClient(baseUrl: string, options: Partial<PayoutsClientOptions> = {}) {
  const sleeps: number[] = []
  const client = new PayoutsClient({
    apiKey: KEY,
    baseUrl,
    rateLimiter: false,
    timeoutMs: 2000,
    sleep: async (ms) => {
      sleeps.push(ms)
    },
    random: () => 0.5,
    ...options,
  })
  return { client, sleeps }
}

/**
 * A scripted server on 127.0.0.1 and a test client pointed at it; both are closed when the
 * test ends.
 */
export async function scriptedClient(
  cleanup: (fn: () => Promise<void>) => void,
  replies: Parameters<typeof startScriptedServer>[0],
  options: Partial<PayoutsClientOptions> = {}
) {
  const server = await startScriptedServer(replies)
  const { client, sleeps } = testClient(server.baseUrl, options)
  cleanup(async () => {
    await client.close()
    await server.close()
  })
  return { client, server, sleeps }
}

export const fees = { serviceFee: 1.5, serviceFeeBps: 50, partnerFee: 0, gasFee: 0 }

export const executeData = {
  fiat_to_fiat: {
    payoutId: PAYOUT,
    quoteId: QUOTE,
    status: 'accepted',
    toAmount: 4321.5,
    partnerFxRate: 17.3,
    effectiveRate: 17.2,
    fees,
    bankingInstructions: { accountNumber: '12345678', bankName: 'Emu Bank', swiftCode: 'EMUBUS33' },
  },
  stablecoin_to_fiat: {
    payoutId: PAYOUT,
    quoteId: QUOTE,
    status: 'awaiting_escrow_deposit',
    toAmount: 4321.5,
    partnerFxRate: 17.3,
    effectiveRate: 17.2,
    fees: { ...fees, gasFee: 0.2 },
    escrowAddress: '0x' + 'ab'.repeat(20),
    depositAmountAtomic: '250000000000000000001',
    tokenAddress: '0x' + 'cd'.repeat(20),
    chainId: 137,
  },
  onramp: {
    payoutId: PAYOUT,
    quoteId: QUOTE,
    status: 'pending',
    toAmount: 249.1,
    partnerFxRate: 1,
    effectiveRate: 0.996,
    fees,
    paymentUrl: 'https://pay.example.test/p/123',
  },
}

export const executeBodies = {
  fiat_to_fiat: {
    fromCurrency: 'USD',
    toCurrency: 'MXN',
    amount: 250,
    recipientId: RECIPIENT,
    userPaymentMethodId: METHOD,
  },
  stablecoin_to_fiat: {
    fromCurrency: 'USDC',
    toCurrency: 'MXN',
    amount: 250,
    recipientId: RECIPIENT,
    walletAddress: '0x' + '12'.repeat(20),
  },
  onramp: {
    fromCurrency: 'USD',
    toCurrency: 'USDC',
    amount: 250,
    recipientId: RECIPIENT,
    userPaymentMethodId: METHOD,
  },
}

/** Documented 2xx bodies shared by the endpoint tests and the fuzz suite. */
export const recipientBody = {
  id: RECIPIENT,
  name: 'Ada',
  type: 'individual',
  paymentMethods: [{ id: METHOD, type: 'bank_account', currency: 'MXN' }],
}
export const subscriptionBody = {
  id: 'sub_1',
  url: 'https://app.example.test/webhooks/payouts',
  events: ['payout.created'],
  active: true,
}
export const deliveryBody = { id: 'dlv_1', status: 'permanently_failed', attempts: 5 }
export const onrampQuoteBody = {
  protocol: 'rt_on',
  fromCcy: 'USD',
  toToken: 'USDC',
  fromAmount: 100,
  toAmount: 99,
  rate: 1,
  fee: 1,
}
export const stableQuoteBody = {
  protocol: 'rt_abc',
  fromCcy: 'USD',
  toCcy: 'USDC',
  fromAmount: 100,
  toAmount: 99.5,
  exchangeRate: 1,
  effRate: 0.995,
  fee: 0.5,
  isCryptoQuote: true,
  swapPath: 'USD>USDC',
}
