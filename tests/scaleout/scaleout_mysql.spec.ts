import { scaleOutSuite } from './scale_out.ts'

await scaleOutSuite('MySQL')
