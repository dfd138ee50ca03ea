import type { JobScheduler, ScheduledJob } from '../../src/jobs/scheduler.ts'

/**
 * Two instances tick the same job at the same moment, three times within one interval;
 * `round` ticks them together once more.
 */
export async function tickTogether(
  a: JobScheduler,
  b: JobScheduler,
  job: (instance: string) => ScheduledJob
) {
  const round = () => Promise.all([a.tick(job('a')), b.tick(job('b'))])
  const outcomes = [await round(), await round(), await round()]
  return { round, outcomes }
}
