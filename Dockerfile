# EchoStore for Node — container image.
#
#   docker build -t echostore .
#   docker run --rm -p 8080:8080 -e VALKEY_URL=redis://host:6379 echostore
#
# Two stages: `build` has the toolchain that better-sqlite3 (a native addon)
# needs and all dev dependencies (tsc); the runtime stage gets only the pruned
# production node_modules, the compiled dist/ and package.json ("type": "module").

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
# python3, make and g++ are what node-gyp needs to compile better-sqlite3
# (and, for the dev dependencies, ssh2/cpu-features) when no prebuilt binary fits.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
# Dependencies first, so the slow `npm ci` layer is cached until the lockfile changes.
COPY package.json package-lock.json ./
RUN npm ci
COPY . .
RUN npm run build \
 && npm prune --omit=dev

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    ECHOSTORE_DATA_DIR=/data
WORKDIR /app
# Owned by root and read-only for the service user; only /data is writable.
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080
# The slim image has no curl: ask node's built-in fetch.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# npm start's V8 flags (test/package.test.ts): the heap ceiling and 8 MiB semi-spaces bound
# RSS (docs/operations.md#memory); raise the ceiling with the tables' l1.maxBytes.
CMD ["node", "--max-old-space-size=512", "--max-semi-space-size=8", "dist/src/main.js"]
