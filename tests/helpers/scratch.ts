/**
 * The suite's scratch folder: the root of the apps tests boot and the file-system plugin's
 * folder (emptied after each test). tests/tmp/, or tests/tmp-<n>/ in a process of `npm test`
 * (scripts/test.mjs sets TEST_SHARD), as deep, so that paths relative to it hold.
 */
export const SCRATCH_URL = new URL(
  process.env.TEST_SHARD ? `../tmp-${process.env.TEST_SHARD}/` : '../tmp/',
  import.meta.url
)
