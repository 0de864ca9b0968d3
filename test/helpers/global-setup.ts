import type { TestProject } from 'vitest/node';
import { type LocalCluster, spawnCluster } from '../../harness/cluster.js';
import { acquireServer } from './server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    valkeyUrl: string;
    /** Seed nodes (`host:port`) when the run is against a cluster (`ECHOSTORE_TEST_CLUSTER=1`), else empty. */
    valkeyCluster: string[];
  }
}

/**
 * Starts (or finds) one server for the whole run and hands its URL to every
 * test file; with `ECHOSTORE_TEST_CLUSTER=1` (`npm run test:cluster`), a local
 * 3 + 3 cluster instead, whose seed nodes `openStore` and `scopedValkey` use.
 */
export default async function setup(project: TestProject) {
  if (process.env.ECHOSTORE_TEST_CLUSTER === '1') {
    const cluster: LocalCluster = await spawnCluster();
    project.provide('valkeyUrl', `redis://${cluster.seeds[0]}`);
    project.provide('valkeyCluster', cluster.seeds);
    return () => cluster.stop();
  }
  const server = await acquireServer();
  project.provide('valkeyUrl', server.url);
  project.provide('valkeyCluster', []);
  return () => server.stop();
}
