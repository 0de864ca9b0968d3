/**
 * mulberry32: a small 32-bit seeded PRNG (Tommy Ettinger, public domain), for
 * what must draw the same sequence in every process and run: the demo
 * catalog's rows, the drills' and benches' key draws.
 *
 * @returns a function yielding uniform floats in [0, 1).
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
