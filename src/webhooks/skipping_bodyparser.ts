import type { HttpContext } from '@adonisjs/core/http'
import type { NextFn } from '@adonisjs/core/types/http'
import BodyParserMiddleware from '@adonisjs/core/bodyparser_middleware'

/**
 * The stock bodyparser, except on the payouts webhook routes (one per account): there the untouched request
 * stream must reach the signature check (the stock parser decodes UTF-8, strips a BOM
 * and inflates gzip). The provider binds it in place of the stock middleware, so host
 * apps keep `router.use([() => import('@adonisjs/core/bodyparser_middleware')])` as is.
 */
export function createSkippingBodyParser(isWebhookPath: (pattern: string) => boolean) {
  return class PayoutsAwareBodyParser extends BodyParserMiddleware {
    async handle(ctx: HttpContext, next: NextFn) {
      if (ctx.route && isWebhookPath(ctx.route.pattern)) return next()
      return super.handle(ctx, next)
    }
  }
}
