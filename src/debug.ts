import { debuglog } from 'node:util'

/** Debug logger, enabled with NODE_DEBUG=svc:payouts. */
export default debuglog('svc:payouts')
