/**
 * Entity tags (RFC 9110 §8.8.3) from the bytes a GET sends: the value's JSON
 * text. A tag names content, not a version, so it identifies the value in
 * every mode: a row loaded while Valkey is unusable has no version from
 * Valkey (every such row would otherwise share one), yet its tag changes with
 * its content and never matches another id's or another instance's different
 * content. Equal text gives an equal tag on every instance.
 */
import { createHash } from 'node:crypto';

/**
 * The strong entity tag of `json`: `"<22 base64url characters>"`, the first
 * 128 bits of its UTF-8 bytes' SHA-256.
 */
export function entityTag(json: string): string {
  return `"${createHash('sha256').update(json, 'utf8').digest('base64url').slice(0, 22)}"`;
}
