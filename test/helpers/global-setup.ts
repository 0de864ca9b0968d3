import type { TestProject } from 'vitest/node';
import { type LocalCluster, spawnCluster } from '../../harness/cluster.js';
import { serviceTls } from '../../harness/secure.js';
import { acquireServer } from './server.js';

/** How the tests reach a secure cluster (plain data: it travels to the test workers). */
export interface TestSecurity {
  tls: { caFile: string; certFile: string; keyFile: string };
  username: string;
  password: string;
  adminPassword: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    valkeyUrl: string;
    /** Seed nodes (`host:port`) when the run is against a cluster (`ECHOSTORE_TEST_CLUSTER=1`), else empty. */
    valkeyCluster: string[];
    /**
     * With `ECHOSTORE_TEST_CLUSTER=secure` (a TLS-only cluster with ACL users): the service's
     * TLS files and ACL user, and the admin password the tests' own connections use; else null.
     */
    valkeySecure: TestSecurity | null;
  }
}

/**
 * Starts (or finds) one server for the whole run and hands its URL to every
 * test file; with `ECHOSTORE_TEST_CLUSTER=1` (`npm run test:cluster`), a local
 * 3 + 3 cluster instead, whose seed nodes `openStore` and `scopedValkey` use;
 * with `ECHOSTORE_TEST_CLUSTER=secure` (`npm run test:cluster:secure`), that
 * cluster TLS-only, with client certificates, and the stores connecting as an
 * ACL user with only the service's rights (harness/secure.ts).
 */
export default async function setup(project: TestProject) {
  const mode = process.env.ECHOSTORE_TEST_CLUSTER;
  if (mode === '1' || mode === 'secure') {
    const cluster: LocalCluster = await spawnCluster({ secure: mode === 'secure' });
    const { secure } = cluster;
    project.provide(
      'valkeyUrl',
      `${secure === undefined ? 'redis' : 'rediss'}://${cluster.seeds[0]}`,
    );
    project.provide('valkeyCluster', cluster.seeds);
    project.provide(
      'valkeySecure',
      secure === undefined
        ? null
        : {
            tls: serviceTls(secure),
            username: secure.username,
            password: secure.password,
            adminPassword: secure.adminPassword,
          },
    );
    return () => cluster.stop();
  }
  const server = await acquireServer();
  project.provide('valkeyUrl', server.url);
  project.provide('valkeyCluster', []);
  project.provide('valkeySecure', null);
  return () => server.stop();
}
