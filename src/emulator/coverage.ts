import type { Coverage } from '../schemas/resources.ts'

/** A realistic coverage matrix: 0- and 2-decimal currencies, rails, bounds, tokens, chains. */
export const EMULATOR_COVERAGE: Coverage = {
  fiat: [
    {
      code: 'USD',
      name: 'US Dollar',
      decimals: 2,
      onramp: true,
      offramp: true,
      minAmount: 1,
      maxAmount: 1_000_000,
      rails: [
        { code: 'ach', label: 'ACH' },
        { code: 'wire', label: 'Wire' },
      ],
    },
    {
      code: 'EUR',
      name: 'Euro',
      decimals: 2,
      onramp: true,
      offramp: true,
      minAmount: 1,
      maxAmount: 1_000_000,
      rails: [{ code: 'sepa', label: 'SEPA' }],
    },
    {
      code: 'GBP',
      name: 'Pound Sterling',
      decimals: 2,
      onramp: true,
      offramp: true,
      minAmount: 1,
      maxAmount: 500_000,
      rails: [{ code: 'fps', label: 'Faster Payments' }],
    },
    {
      code: 'MXN',
      name: 'Mexican Peso',
      decimals: 2,
      onramp: false,
      offramp: true,
      minAmount: 20,
      maxAmount: 5_000_000,
      rails: [{ code: 'spei', label: 'SPEI' }],
    },
    {
      code: 'BRL',
      name: 'Brazilian Real',
      decimals: 2,
      onramp: false,
      offramp: true,
      minAmount: 5,
      rails: [{ code: 'pix', label: 'PIX' }],
    },
    {
      code: 'NGN',
      name: 'Naira',
      decimals: 2,
      onramp: false,
      offramp: true,
      maxAmount: 50_000_000,
      rails: [{ code: 'nip', label: 'NIP' }],
    },
    {
      code: 'JPY',
      name: 'Yen',
      decimals: 0,
      onramp: true,
      offramp: true,
      minAmount: 100,
      maxAmount: 100_000_000,
      rails: [{ code: 'zengin', label: 'Zengin' }],
    },
  ],
  wallet: {
    tokens: ['USDC', 'USDT'],
    chains: [
      { code: 'ethereum', label: 'Ethereum' },
      { code: 'polygon', label: 'Polygon' },
      { code: 'base', label: 'Base' },
    ],
  },
}

/** EVM chain ids of the chains above. */
export const CHAIN_IDS: Record<string, number> = { ethereum: 1, polygon: 137, base: 8453 }

/** Indicative mid rates to USD, for quotes. */
export const USD_RATES: Record<string, number> = {
  USD: 1,
  USDC: 1,
  USDT: 1,
  EUR: 0.92,
  GBP: 0.79,
  MXN: 17.1,
  BRL: 5.05,
  NGN: 1550,
  JPY: 151,
}

/** Token contract per chain (fake but stable). */
export function tokenAddress(token: string, chainId: number): string {
  const seed = `${token}:${chainId}`
  let hex = ''
  for (let i = 0; hex.length < 40; i++)
    hex += ((seed.charCodeAt(i % seed.length) * (i + 7)) % 256).toString(16).padStart(2, '0')
  return `0x${hex.slice(0, 40)}`
}
