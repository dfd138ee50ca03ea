import type { ApplicationService } from '@adonisjs/core/types'
import { PayoutsService } from '../src/service/payouts_service.ts'
import '../src/types/extended.ts'

/**
 * Binds the payouts service as a lazy singleton. Heavy modules (the client, Lucid
 * models) are loaded on first use, so `node ace` commands that do not need them stay fast.
 */
export default class PayoutsProvider {
  #service?: PayoutsService

  constructor(protected app: ApplicationService) {}

  register() {
    this.app.container.singleton(PayoutsService, async () => {
      const { defineConfig } = await import('../src/define_config.ts')
      // Validated again here so a plain object (or a config edited by hand) is reported
      // with its key at boot, not at the first API call.
      const config = defineConfig(this.app.config.get('payouts'))
      const logger = await this.app.container.make('logger')
      this.#service = new PayoutsService(config, logger)
      return this.#service
    })
    this.app.container.alias('payouts.manager', PayoutsService)
  }

  /** Closes the client's keep-alive sockets and the service's timers. */
  async shutdown() {
    await this.#service?.close()
  }
}
