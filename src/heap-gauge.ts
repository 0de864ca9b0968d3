/**
 * `nodejs_heap_after_gc_bytes`: the heap in use right after the latest full
 * (mark-compact) GC, the figure that shows whether memory is retained. Heap in
 * use at scrape time (`nodejs_heap_size_used_bytes`) also counts garbage not
 * yet collected, so it saw-tooths under load.
 */
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';

/**
 * Registers the gauge on `registry` and starts watching GCs.
 *
 * @returns a function that stops watching.
 */
export function watchHeapAfterGc(registry: Registry): () => void {
  let afterGc = process.memoryUsage().heapUsed;
  new Gauge({
    name: 'nodejs_heap_after_gc_bytes',
    help: 'Heap in use right after the latest full (mark-compact) GC, bytes; before the first, at start-up.',
    registers: [registry],
    collect() {
      this.set(afterGc);
    },
  });
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = (entry as { detail?: { kind?: number } }).detail?.kind;
      // Read when the entry is delivered: soon after the GC, so a little of what
      // was allocated since is counted too.
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) afterGc = process.memoryUsage().heapUsed;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return () => observer.disconnect();
}
