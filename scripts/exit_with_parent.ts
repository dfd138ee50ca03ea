/**
 * Preloaded (`--import`) into the demo app, which is spawned with an IPC channel: when the
 * process that started it dies, even by SIGKILL, the channel closes and the app stops
 * cleanly instead of running on as an orphan holding its port.
 */
if (process.channel) {
  // The channel must not keep the app alive once the app wants to exit.
  process.channel.unref()
  process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'))
}
