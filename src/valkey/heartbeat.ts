/**
 * A heartbeat for a connection that only listens (the subscriber): a
 * connection that stops delivering looks exactly like a quiet channel, and
 * TCP may not notice for minutes (a frozen peer, a NAT that dropped the flow).
 * A PING on the subscribed connection must come back within `timeoutMs`, else
 * the connection is declared dead.
 */
import type { Redis } from 'ioredis';

/** Tuning of {@link keepAlive}; milliseconds. */
export interface HeartbeatOptions {
  /** How often to PING. Default 1,000. */
  intervalMs?: number;
  /** A PING unanswered for this long declares the connection dead. Default 1,500. */
  timeoutMs?: number;
}

/**
 * PINGs `conn` every `intervalMs` while it is ready; calls `onDead` when one
 * goes unanswered for `timeoutMs` (at most once per PING). A PING that fails
 * at once (the connection is closing) is left to the client's own reconnect.
 * Detection takes at most `intervalMs + timeoutMs`.
 *
 * @returns stops the heartbeat.
 */
export function keepAlive(
  conn: Redis,
  onDead: () => void,
  options: HeartbeatOptions = {},
): () => void {
  const intervalMs = options.intervalMs ?? 1_000;
  const timeoutMs = options.timeoutMs ?? 1_500;
  /** When the PING in flight was sent; undefined when none is. */
  let sentAt: number | undefined;
  let lastSentAt = performance.now();
  let beat = 0;
  const timer = setInterval(
    () => {
      const now = performance.now();
      if (sentAt !== undefined) {
        if (now - sentAt < timeoutMs) return;
        sentAt = undefined;
        beat++;
        onDead();
        return;
      }
      if (conn.status !== 'ready' || now - lastSentAt < intervalMs) return;
      const mine = ++beat;
      sentAt = now;
      lastSentAt = now;
      const answered = () => {
        if (beat === mine) sentAt = undefined;
      };
      conn.ping().then(answered, answered);
    },
    Math.max(10, Math.min(250, intervalMs, timeoutMs) / 2),
  );
  timer.unref();
  return () => clearInterval(timer);
}
