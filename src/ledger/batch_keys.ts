/*
 * The keys of a batch's chunks: `<batch key>-c<chunk>`, each the Idempotency-Key its chunk's
 * execute-batch request is sent (and its intent stored) under. No database here: the fake's
 * assertions read them too.
 */

/** A batch key leaves room for its chunks' suffix (`-c9999`) within the 255 of a key. */
export const MAX_BATCH_KEY_LENGTH = 240

/** The key a chunk is sent (and its intent stored) under. */
export function chunkKey(batchKey: string, chunk: number): string {
  return `${batchKey}-c${chunk}`
}

/**
 * The batch key of a chunk's key, or null for a key of another form. One chunk key has one
 * batch key: the suffix is the last `-c` followed by digits only, without a leading zero.
 */
export function batchKeyOf(key: string): string | null {
  return /^(.+)-c(?:0|[1-9]\d*)$/.exec(key)?.[1] ?? null
}
