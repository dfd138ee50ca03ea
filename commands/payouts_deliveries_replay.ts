import PayoutsWebhooksRedeliver from './payouts_webhooks_redeliver.ts'

/** The release without the former name. */
const REMOVED_IN = '0.2.0'

/**
 * `payouts:webhooks:redeliver` under its name from before 0.1.0, kept for one release: it runs
 * the same, after one line on stderr naming the command to use and the release without it
 * (stderr: a script's `--json` on stdout stays JSON).
 */
export default class PayoutsDeliveriesReplay extends PayoutsWebhooksRedeliver {
  static commandName = 'payouts:deliveries:replay'
  static description = `Deprecated (removed in ${REMOVED_IN}): use payouts:webhooks:redeliver`

  async run() {
    this.logger.logError(
      this.logger.prepareWarning(
        `payouts:deliveries:replay is deprecated and will be removed in ${REMOVED_IN}: use payouts:webhooks:redeliver`
      )
    )
    return super.run()
  }
}
