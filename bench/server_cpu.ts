import { readdirSync, readFileSync } from 'node:fs'

/** Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on Linux). */
const TICKS_PER_S = 100

/**
 * CPU time used so far by the database server's processes (PostgreSQL's `postgres`, MariaDB's
 * `mariadbd` or MySQL's `mysqld`), ms, from /proc; null where /proc is not there. The
 * difference over a measure is the server's share of it, apart from the app's own
 * (`process.cpuUsage()`) and from anything else running on the machine.
 */
export function serverCpuMs(db: string): number | null {
  const names = db === 'pg' ? ['postgres'] : db === 'mysql' ? ['mariadbd', 'mysqld'] : []
  if (names.length === 0) return 0
  let pids: string[]
  try {
    pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))
  } catch {
    return null
  }
  let ticks = 0
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const comm = stat.slice(stat.indexOf('(') + 1, close)
      if (!names.includes(comm)) continue
      const fields = stat.slice(close + 2).split(' ')
      // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the name and state.
      ticks += Number(fields[11]) + Number(fields[12])
    } catch {
      // The process ended meanwhile.
    }
  }
  return (ticks * 1000) / TICKS_PER_S
}
