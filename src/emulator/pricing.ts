import { randomBytes } from 'node:crypto'
import { isStablecoin } from '../schemas/common.ts'
import { EMULATOR_COVERAGE, USD_RATES } from './coverage.ts'

/** The emulator's service fee, in basis points of the source amount. */
export const FEE_BPS = 50

/** Rounds to a number of decimals. */
export function round(value: number, decimals: number) {
  const f = 10 ** decimals
  return Math.round(value * f) / f
}

/** Decimals of a currency: 6 for stablecoins, the coverage's for fiat (2 when unknown). */
export function decimalsOf(code: string) {
  if (isStablecoin(code)) return 6
  return EMULATOR_COVERAGE.fiat.find((f) => f.code === code)?.decimals ?? 2
}

/** Whether the emulator's coverage knows the currency. */
export function knownCurrency(code: string) {
  return isStablecoin(code) || EMULATOR_COVERAGE.fiat.some((f) => f.code === code)
}

/** The exchange rate from one currency to another, through the USD table. */
export function rate(from: string, to: string) {
  return (USD_RATES[to] ?? 1) / (USD_RATES[from] ?? 1)
}

/** A fresh route token (`rt_...`) for a quote. */
export function routeToken() {
  return `rt_${randomBytes(12).toString('base64url')}`
}
