import { DEFAULT_ACCOUNT } from '../constants.ts'

/**
 * The account of a part built on another one's (the executor on its ledger, the reconciler
 * on its ledger, the fallback job on its deposits): that one's unless named, and refused
 * when named otherwise, since the part would then write one account's rows beside another
 * account's (an intent in one, its payout in the other).
 */
export function sharedAccount(
  named: string | undefined,
  base: { readonly account: string },
  what: string
): string {
  const own = base.account
  // A stand-in without an account (a test's bare ledger): the named one, else the default.
  if (own === undefined) return named ?? DEFAULT_ACCOUNT
  if (named !== undefined && named !== own) {
    throw new TypeError(`${what} of account "${named}" was given the parts of "${own}"`)
  }
  return own
}
